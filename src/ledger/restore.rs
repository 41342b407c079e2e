//! `mssbroker restore`: put a backup in the place of a database, as docs/operations.md's
//! procedure says, in one command that cannot be half-done.
//!
//! The broker must be stopped: the database's lock (`ledger::lock`) is taken for the whole
//! restore, so a running broker refuses it. The backup is copied (SQLite's backup API, as
//! `mssbroker backup` copies: checked to be a broker database no newer than this build) to
//! `<db>.restoring` and fsynced; the database it replaces is kept, with its `-wal` and `-shm`,
//! as `<db>.replaced-<UTC time>` (nothing is deleted); then the copy is renamed into place and
//! the directory fsynced.
//!
//! The next start is a new incarnation (`ledger::mss_key`): the requests it makes carry MSS
//! keys no earlier life of the database used, so the requests acknowledged after the backup
//! (lost with the replaced file) can never lend their transfers to new ones. What the MSS still
//! reports of those lost transfers is kept in `unknown_keys` and listed by
//! `mssbroker unknown-keys`.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::backup::{backup, BackupError, BackupOptions};
use super::lock::DbLock;
use super::LedgerError;

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreSummary {
    /// Where the database it replaced is kept (none when there was none).
    pub replaced: Option<PathBuf>,
    /// Requests in the restored database, and its last request id.
    pub requests: i64,
    pub last_id: i64,
}

/// Restore `backup_file` as the database at `db`; `stamp` names the replaced copy (a UTC time
/// such as `20261128T220000Z`).
pub fn restore(backup_file: &Path, db: &Path, stamp: &str) -> Result<RestoreSummary, BackupError> {
    let _lock = DbLock::acquire(db)?;
    let staged = with_suffix(db, ".restoring");
    remove_if_there(&staged)?;
    remove_if_there(&super::backup::partial_path(&staged))?;
    backup(backup_file, &staged, BackupOptions::default())?;
    let (requests, last_id) = match census(&staged) {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&staged);
            return Err(BackupError::Ledger(LedgerError::Open {
                path: backup_file.to_path_buf(),
                message: format!("not a broker database: {e}"),
            }));
        }
    };
    let replaced = set_aside(db, stamp)?;
    std::fs::rename(&staged, db).map_err(|source| BackupError::Io {
        path: db.to_path_buf(),
        source,
    })?;
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| BackupError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    Ok(RestoreSummary {
        replaced,
        requests,
        last_id,
    })
}

/// The copy's requests and last id; fails unless it holds the broker's tables and passes
/// SQLite's quick check.
fn census(path: &Path) -> rusqlite::Result<(i64, i64)> {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let check: String = c.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some(format!("quick_check: {check}")),
        ));
    }
    c.query_row(
        "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM requests",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Move the database at `db` (with its `-wal` and `-shm`) to `<db>.replaced-<stamp>`.
fn set_aside(db: &Path, stamp: &str) -> Result<Option<PathBuf>, BackupError> {
    if db.symlink_metadata().is_err() {
        return Ok(None);
    }
    let kept = with_suffix(db, &format!(".replaced-{stamp}"));
    if kept.symlink_metadata().is_ok() {
        return Err(BackupError::DestinationExists(kept));
    }
    // The WAL first: the kept file opens with the pages it had committed only beside them.
    for side in ["-wal", "-shm"] {
        let from = with_suffix(db, side);
        if from.symlink_metadata().is_ok() {
            let to = with_suffix(&kept, side);
            std::fs::rename(&from, &to).map_err(|source| BackupError::Io { path: to, source })?;
        }
    }
    std::fs::rename(db, &kept).map_err(|source| BackupError::Io {
        path: kept.clone(),
        source,
    })?;
    Ok(Some(kept))
}

fn remove_if_there(path: &Path) -> Result<(), BackupError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BackupError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::schema;

    fn database(path: &Path, requests: i64) {
        let conn = schema::open_writer(path).expect("open writer");
        for id in 1..=requests {
            conn.execute(
                "INSERT INTO requests(id, station, client_request_id, user_name, file, \
                 size_bytes, access_mode, physics_group, direction, group_path, class, \
                 mss_priority, charged, charged_bytes, state, created_ms) VALUES \
                 (?1, 's', ?1, 'u', '/f', 1, 'mc', 'x', 'read', 'mc', 'back', 1, 1, 1, 'done', 0)",
                [id],
            )
            .expect("insert");
        }
    }

    #[test]
    fn a_restore_keeps_the_replaced_database_with_its_wal_and_refuses_a_running_broker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("broker.db");
        let old = dir.path().join("old.db");
        database(&old, 2);
        let saved = dir.path().join("backup.db");
        backup(&old, &saved, BackupOptions::default()).expect("backup");
        // The live database went on to request 5 and was killed with its last commit in its
        // WAL: copied while a connection holds it there (no checkpoint).
        let live = dir.path().join("live.db");
        database(&live, 5);
        let wal_conn = Connection::open(&live).expect("open");
        wal_conn
            .execute_batch("PRAGMA wal_autocheckpoint = 0; UPDATE requests SET size_bytes = 7")
            .expect("update");
        std::fs::copy(&live, &db).expect("copy");
        std::fs::copy(with_suffix(&live, "-wal"), with_suffix(&db, "-wal")).expect("copy wal");
        drop(wal_conn);

        {
            let _running = DbLock::acquire(&db).expect("lock");
            let e = restore(&saved, &db, "T1").expect_err("a running broker holds the lock");
            assert!(e.to_string().contains(&db.display().to_string()), "{e}");
        }
        let s = restore(&saved, &db, "T1").expect("restore");
        assert_eq!((s.requests, s.last_id), (2, 2));
        let kept = s.replaced.expect("the live file is kept");
        assert_eq!(kept, dir.path().join("broker.db.replaced-T1"));
        let count = |p: &Path| -> (i64, i64) {
            Connection::open(p)
                .unwrap()
                .query_row(
                    "SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM requests",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        };
        assert_eq!(count(&db), (2, 2));
        // The kept copy has what its WAL held.
        assert_eq!(count(&kept), (5, 35));
        assert!(!with_suffix(&db, ".restoring").exists());
    }

    #[test]
    fn a_file_that_is_not_a_broker_database_is_refused_and_nothing_is_moved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("broker.db");
        database(&db, 1);
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t(x)")
            .unwrap();
        let e = restore(&other, &db, "T2").expect_err("refused");
        assert!(e.to_string().contains("not a broker database"), "{e}");
        assert!(db.exists());
        assert!(!dir.path().join("broker.db.replaced-T2").exists());
        assert!(!with_suffix(&db, ".restoring").exists());
    }
}
