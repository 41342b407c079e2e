//! A consistent copy of a live database (`mssbroker backup`), by SQLite's online backup API.
//!
//! The source is opened read-only and no lock file is taken: a running broker keeps writing.
//! One read transaction is held on the source for the whole copy, so every step reads the same
//! WAL snapshot: the copy is the database as of the moment that transaction began (every
//! request acknowledged before then is in it), and the broker's writes do not restart it. In
//! WAL mode that reader blocks no writer; it only keeps checkpoints from passing it until the
//! copy is done. Pages go in bounded steps with a short pause between them, so the copy's I/O
//! does not crowd out the writer's.
//!
//! The copy is written to `<to>.partial`, switched to a rollback journal (one self-contained
//! file), fsynced, linked to `<to>` (which fails if `<to>` exists: nothing is overwritten),
//! and the directory fsynced.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::{schema, LedgerError};

/// How long a step may keep finding the source or the copy locked before the backup gives up.
const BUSY_LIMIT: Duration = Duration::from_secs(60);

/// How the copy is paced.
#[derive(Debug, Clone, Copy)]
pub struct BackupOptions {
    /// Pages copied per step (at least 1).
    pub pages_per_step: i32,
    /// Pause between steps.
    pub pause: Duration,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            pages_per_step: 1024,
            pause: Duration::from_millis(5),
        }
    }
}

/// What a finished backup copied.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupSummary {
    pub pages: i64,
    pub bytes: u64,
    pub seconds: f64,
}

/// Why a backup was refused or failed. A failed backup leaves no `<to>`.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("no database at {0}")]
    MissingSource(PathBuf),
    #[error("{0} already exists: choose a new file (a backup never overwrites)")]
    DestinationExists(PathBuf),
    /// Opening or reading the source (also: a schema newer than this build).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("cannot copy {from} to {to}: {message}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        message: String,
    },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Copy the database at `from` to the new file `to`.
pub fn backup(
    from: &Path,
    to: &Path,
    options: BackupOptions,
) -> Result<BackupSummary, BackupError> {
    let started = Instant::now();
    if !from.is_file() {
        return Err(BackupError::MissingSource(from.to_path_buf()));
    }
    if to.symlink_metadata().is_ok() {
        return Err(BackupError::DestinationExists(to.to_path_buf()));
    }
    let partial = partial_path(to);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io { path, source }
    };
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&partial)(e)),
        _ => {}
    }
    let pages = match copy(from, &partial, options) {
        Ok(pages) => pages,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    let file = std::fs::File::open(&partial).map_err(io(&partial))?;
    file.sync_all().map_err(io(&partial))?;
    let bytes = file.metadata().map_err(io(&partial))?.len();
    drop(file);
    put_in_place(&partial, to)?;
    let dir = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(BackupSummary {
        pages,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Move the finished `partial` to `to` without replacing a file made there meanwhile: a hard
/// link (which fails if `to` exists), or where the file system has none, a rename after a
/// last look. On an error `partial` is removed.
fn put_in_place(partial: &Path, to: &Path) -> Result<(), BackupError> {
    let io = |path: &Path, source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    };
    let placed = match std::fs::hard_link(partial, to) {
        Ok(()) => std::fs::remove_file(partial).map_err(|e| io(partial, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(BackupError::DestinationExists(to.to_path_buf()))
        }
        Err(_) if to.symlink_metadata().is_ok() => {
            Err(BackupError::DestinationExists(to.to_path_buf()))
        }
        Err(_) => std::fs::rename(partial, to).map_err(|e| io(to, e)),
    };
    if placed.is_err() {
        let _ = std::fs::remove_file(partial);
    }
    placed
}

/// `<to>.partial`.
pub fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_os_string();
    name.push(".partial");
    PathBuf::from(name)
}

/// The online copy into the new file `dest`; returns the pages copied.
fn copy(from: &Path, dest: &Path, options: BackupOptions) -> Result<i64, BackupError> {
    let open_err = |e: rusqlite::Error| LedgerError::Open {
        path: from.to_path_buf(),
        message: e.to_string(),
    };
    let src = schema::open_reader(from).map_err(open_err)?;
    schema::check_version(&src, from)?;
    let copy_err = |e: rusqlite::Error| BackupError::Copy {
        from: from.to_path_buf(),
        to: dest.to_path_buf(),
        message: e.to_string(),
    };
    // One snapshot for every step (see the module's comment).
    src.execute_batch("BEGIN DEFERRED; SELECT count(*) FROM sqlite_master;")
        .map_err(copy_err)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut dst = Connection::open_with_flags(dest, flags).map_err(copy_err)?;
    let pages = {
        let backup = Backup::new(&src, &mut dst).map_err(copy_err)?;
        let mut busy_since: Option<Instant> = None;
        loop {
            match backup
                .step(options.pages_per_step.max(1))
                .map_err(copy_err)?
            {
                StepResult::Done => break,
                StepResult::More => busy_since = None,
                // Busy or Locked: retried after the pause, for up to BUSY_LIMIT.
                _ => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > BUSY_LIMIT {
                        return Err(BackupError::Copy {
                            from: from.to_path_buf(),
                            to: dest.to_path_buf(),
                            message: format!("the database stayed busy for {BUSY_LIMIT:?}"),
                        });
                    }
                }
            }
            std::thread::sleep(options.pause);
        }
        i64::from(backup.progress().pagecount)
    };
    src.execute_batch("COMMIT").map_err(copy_err)?;
    drop(src);
    // The source is in WAL mode and the copy with it; a backup is better one file.
    dst.pragma_update(None, "journal_mode", "DELETE")
        .map_err(copy_err)?;
    dst.close().map_err(|(_, e)| copy_err(e))?;
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger_file(dir: &Path) -> PathBuf {
        let db = dir.join("broker.db");
        let conn = schema::open_writer(&db).expect("open writer");
        drop(conn);
        db
    }

    #[test]
    fn copies_a_database_and_refuses_an_existing_destination() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = ledger_file(dir.path());
        let to = dir.path().join("copy.db");
        let summary = backup(&db, &to, BackupOptions::default()).expect("backup");
        assert!(summary.pages > 0);
        assert_eq!(summary.bytes, std::fs::metadata(&to).expect("copy").len());
        assert!(!partial_path(&to).exists());
        let reader = super::super::LedgerReader::open(&to);
        assert!(reader.is_ok(), "the copy opens");

        std::fs::write(&to, b"keep me").expect("write");
        let e = backup(&db, &to, BackupOptions::default()).expect_err("refused");
        assert!(matches!(e, BackupError::DestinationExists(_)), "{e}");
        assert_eq!(std::fs::read(&to).expect("read"), b"keep me");
    }

    #[test]
    fn refuses_a_missing_source_and_a_newer_schema() {
        let dir = tempfile::tempdir().expect("tempdir");
        let to = dir.path().join("copy.db");
        let e = backup(&dir.path().join("none.db"), &to, BackupOptions::default())
            .expect_err("refused");
        assert!(matches!(e, BackupError::MissingSource(_)), "{e}");

        let db = ledger_file(dir.path());
        let conn = Connection::open(&db).expect("open");
        conn.pragma_update(None, "user_version", schema::LATEST + 1)
            .expect("bump");
        drop(conn);
        let e = backup(&db, &to, BackupOptions::default()).expect_err("refused");
        assert!(
            matches!(e, BackupError::Ledger(LedgerError::SchemaTooNew { .. })),
            "{e}"
        );
        assert!(!to.exists() && !partial_path(&to).exists());
    }
}
