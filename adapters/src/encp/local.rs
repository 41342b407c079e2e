//! Which local files a station may name: absolute, without `.` or `..` segments, with its
//! symbolic links resolved under one of `local_roots` (`{station}` expanded), not a directory.

use std::path::{Path, PathBuf};

use super::config::EncpConfig;

impl EncpConfig {
    /// Whether `station` may name this local file: an absolute path without `.` or `..`
    /// segments that, with its symbolic links resolved, is under one of `local_roots` (where
    /// `{station}` is the station's own name) when any are set, and is not a directory.
    pub fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        if station.contains('/') || station == "." || station == ".." {
            return Err("cannot be placed: the station's name is not a directory name".into());
        }
        self.check_local(local_file, Some(station))
    }

    /// The same check when the station is not known (a transfer about to run): a `{station}`
    /// segment of a root then matches any one directory. Run again before every `encp`, since a
    /// symbolic link may have changed since the request arrived.
    pub fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.check_local(local_file, None)
    }

    fn check_local(&self, local_file: &str, station: Option<&str>) -> Result<(), String> {
        let path = Path::new(local_file);
        if !path.is_absolute() || has_dot_segment(local_file) {
            return Err("must be an absolute path without `.` or `..` segments".into());
        }
        let resolved = resolve(path)?;
        if resolved.is_dir() {
            return Err(format!(
                "`{}` is a directory: name a file",
                resolved.display()
            ));
        }
        if self.local_roots.is_empty() {
            return Ok(());
        }
        let under = |root: &PathBuf| {
            let root = match station {
                Some(st) => PathBuf::from(root.to_string_lossy().replace(STATION, st)),
                None => root.clone(),
            };
            under_root(&resolved, &root)
        };
        if self.local_roots.iter().any(under) {
            return Ok(());
        }
        let roots: Vec<String> = self
            .local_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        let shown = if resolved == path {
            String::new()
        } else {
            format!(" (it leads to {})", resolved.display())
        };
        Err(format!(
            "must be under one of {}{shown} (mss.encp.local_roots)",
            roots.join(", ")
        ))
    }
}

pub(super) fn has_parent_dir(path: &Path) -> bool {
    path.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The placeholder of a `local_roots` entry for the requesting station's name.
pub const STATION: &str = "{station}";

/// Whether a path has a `.` or `..` segment (`Path::components` drops inner `.` segments, so
/// the text is read).
pub(super) fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| seg == "." || seg == "..")
}

/// A path with its symbolic links resolved: the longest prefix that exists, canonicalized, then
/// the rest as written. An entry that exists but cannot be resolved (a link to nothing, which
/// encp would write through wherever it points later) is refused.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return Ok(rest.iter().rev().fold(real, |p, name| p.join(name)));
        }
        if existing.symlink_metadata().is_ok() {
            return Err(format!(
                "`{}` is a symbolic link that leads nowhere, or cannot be read",
                existing.display()
            ));
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return Ok(path.to_path_buf()),
        }
    }
}

/// Whether `path` (resolved) is under `root`, whose existing part is resolved too (a root may
/// itself be a symbolic link); a segment of `root` with `{station}` matches any one name.
fn under_root(path: &Path, root: &Path) -> bool {
    let segments: Vec<String> = root
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let fixed = segments
        .iter()
        .position(|s| s.contains(STATION))
        .unwrap_or(segments.len());
    let literal: PathBuf = segments[..fixed].iter().collect();
    let head = resolve(&literal).unwrap_or(literal);
    let pattern: Vec<String> = head
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .chain(segments[fixed..].iter().cloned())
        .collect();
    let mut names = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    pattern.iter().all(|want| {
        names
            .next()
            .is_some_and(|name| segment_matches(want, &name))
    })
}

/// One root segment against one path segment: equal, or `pre{station}post` around a name.
fn segment_matches(want: &str, name: &str) -> bool {
    match want.split_once(STATION) {
        None => want == name,
        Some((pre, post)) => {
            name.len() > pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}
