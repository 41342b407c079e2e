//! Is the database file the writer has open still the one at the configured path? A file
//! deleted (or replaced) under a running broker takes every later commit with it: the writer
//! would acknowledge requests that a restart never sees. The writer records the file's device
//! and inode when it opens it and compares them with the path's before every COMMIT (one
//! `stat`); on a mismatch the transaction is rolled back and every caller gets an error (503).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::db::DbError;
use super::LedgerError;

/// The database file as it was opened.
#[derive(Debug, Clone)]
pub struct DbFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl DbFile {
    /// Record the identity of the file now at `path` (call right after opening it).
    pub fn of(path: &Path) -> Result<DbFile, LedgerError> {
        let meta = std::fs::metadata(path).map_err(|e| LedgerError::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(DbFile {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Fail unless `path` still names the opened file ([`DbError::FileGone`]), so the writer's
    /// transaction code rolls back and answers every command with it.
    pub fn check(&self) -> Result<(), DbError> {
        let why = match std::fs::metadata(&self.path) {
            Ok(m) if m.dev() == self.dev && m.ino() == self.ino => return Ok(()),
            Ok(_) => "replaced by another file",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "deleted",
            Err(_) => "unreadable",
        };
        Err(DbError::FileGone(format!(
            "the open database is no longer the file at {} ({why}): nothing is \
             acknowledged until the broker is restarted on a restored database",
            self.path.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_fails_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        std::fs::write(&path, b"a").unwrap();
        // Held open, as SQLite holds the database: its inode cannot be reused meanwhile.
        let _open = std::fs::File::open(&path).unwrap();
        let file = DbFile::of(&path).unwrap();
        file.check().unwrap();
        std::fs::remove_file(&path).unwrap();
        let e = file.check().unwrap_err().to_string();
        assert!(
            e.contains("deleted") && e.contains(&path.display().to_string()),
            "{e}"
        );
        std::fs::write(&path, b"b").unwrap();
        let e = file.check().unwrap_err().to_string();
        assert!(e.contains("replaced"), "{e}");
    }
}
