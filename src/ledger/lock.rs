//! The database's exclusive lock: one process writes a database. `<db>.lock` is created beside
//! it and locked (`flock(LOCK_EX | LOCK_NB)`) before the database is opened for writing, with
//! the holder's PID written into it; the lock lives as long as the writer thread, and the kernel
//! drops it with the process, so a crash leaves nothing to clean up. Read-only openers (the
//! `shares --db` and `report --db` commands, the read pool) do not take it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::LedgerError;

/// The held lock; dropping it releases the database.
#[derive(Debug)]
pub struct DbLock {
    _file: File,
}

/// Where the lock of the database at `db` is: beside the file the path resolves to (symlinks
/// and `..` resolved, in the directory and in the name), so two brokers given a link and its
/// target take the same lock. (Two hard links to one file are not told apart.)
pub fn lock_path(db: &Path) -> PathBuf {
    let resolved = std::fs::canonicalize(db).unwrap_or_else(|_| resolved_parent(db));
    let mut name = resolved.into_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// `db` with its directory resolved, for a database file not created yet.
fn resolved_parent(db: &Path) -> PathBuf {
    let parent = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), db.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => db.to_path_buf(),
    }
}

impl DbLock {
    /// Take the lock of the database at `db`, or say who holds it.
    pub fn acquire(db: &Path) -> Result<DbLock, LedgerError> {
        super::ensure_parent(db).map_err(|e| LedgerError::Open {
            path: db.to_path_buf(),
            message: format!("cannot create its directory: {e}"),
        })?;
        let lock = lock_path(db);
        let open_err = |e: std::io::Error| LedgerError::Open {
            path: db.to_path_buf(),
            message: format!("cannot lock {}: {e}", lock.display()),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(open_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LedgerError::Locked {
                    path: db.to_path_buf(),
                    lock: lock.clone(),
                    holder: holder(&lock),
                })
            }
            Err(TryLockError::Error(e)) => return Err(open_err(e)),
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(open_err)?;
        Ok(DbLock { _file: file })
    }
}

/// The holder's PID as its lock file says ("unknown" if it has not written it yet).
fn holder(lock: &Path) -> String {
    std::fs::read_to_string(lock)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .map_or_else(|| "unknown".to_string(), |pid| pid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_pid_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sub").join("l.db");
        let first = DbLock::acquire(&db).unwrap();
        let refused = DbLock::acquire(&db).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains(&db.display().to_string()), "{text}");
        drop(first);
        DbLock::acquire(&db).unwrap();
    }

    #[test]
    fn a_link_to_a_locked_database_is_refused_too() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("l.db"), b"").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("dirlink")).unwrap();
        std::os::unix::fs::symlink(real.join("l.db"), dir.path().join("filelink.db")).unwrap();
        let _held = DbLock::acquire(&real.join("l.db")).unwrap();
        for other in ["dirlink/l.db", "filelink.db", "real/../real/l.db"] {
            let refused = DbLock::acquire(&dir.path().join(other));
            assert!(
                matches!(refused, Err(LedgerError::Locked { .. })),
                "{other}: {refused:?}"
            );
        }
    }
}
