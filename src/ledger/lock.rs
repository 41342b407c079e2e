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

/// Where the lock of the database at `db` is.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl DbLock {
    /// Take the lock of the database at `db`, or say who holds it.
    pub fn acquire(db: &Path) -> Result<DbLock, LedgerError> {
        let lock = lock_path(db);
        let open_err = |e: std::io::Error| LedgerError::Open {
            path: db.to_path_buf(),
            message: format!("cannot lock {}: {e}", lock.display()),
        };
        super::ensure_parent(db).map_err(open_err)?;
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
}
