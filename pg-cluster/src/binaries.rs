//! Where the PostgreSQL server binaries are: PATH, `pg_config --bindir`, then the newest
//! /usr/lib/postgresql/*/bin (Debian installs them there, off PATH).

use std::path::{Path, PathBuf};
use std::process::Command;

const NEEDED: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

/// The first directory holding `initdb`, `pg_ctl` and `postgres`, if any.
pub fn find_bindir() -> Option<PathBuf> {
    on_path()
        .into_iter()
        .chain(from_pg_config())
        .chain(debian_dirs())
        .find(|dir| has_all(dir))
}

fn has_all(dir: &Path) -> bool {
    NEEDED.iter().all(|b| dir.join(b).is_file())
}

fn on_path() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.join("initdb").is_file())
        // A symlink farm (/usr/local/bin -> /usr/lib/postgresql/15/bin/initdb): its target's
        // directory, where `postgres` is too.
        .map(|d| {
            std::fs::canonicalize(d.join("initdb"))
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or(d)
        })
        .collect()
}

fn from_pg_config() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// /usr/lib/postgresql/<version>/bin, newest version first.
fn debian_dirs() -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, dir)| dir).collect()
}
