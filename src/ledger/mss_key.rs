//! The key a request's transfers carry at the MSS: its idempotency key there.
//!
//! A request id alone is not a key the MSS may deduplicate on. A database restored from a
//! backup hands out again the ids the lost database had already used; an MSS that answers
//! "duplicate" for a key it has seen would then give a new request (another file) the old
//! transfer's result, and the new file would never be read (issue 37).
//!
//! So every start of the writer is an **incarnation**: a row of `incarnations` with the first
//! request id it may create and a random 64-bit nonce, committed before any of its requests
//! exists. A request's key is `"{id}.{nonce}"`, the nonce of the incarnation whose range holds
//! its id. Ids only grow (rows are never deleted), so the ranges never overlap, and a key is a
//! pure function of the id and the committed rows: a restart keeps every earlier request's key
//! (a transfer in flight is settled under the key it was sent with), while the first request of
//! a new incarnation, whatever ids an earlier life of the database used, carries a nonce no
//! earlier transfer had. A restored backup holds the incarnations it was taken with; the lost
//! database's later requests carried its nonce beyond the backup's last id, where the restored
//! database's next start puts a new one.
//!
//! Requests made before this scheme (a database migrated to schema version 9) keep their bare
//! id as their key: ids below the first incarnation's start.
//!
//! An MSS event whose key this ledger did not issue (a lost request's transfer, after a
//! restore) is not dropped: `unknown_keys` records it (bounded), the writer logs it once and
//! counts it, and `mssbroker unknown-keys` lists them.

use std::hash::{BuildHasher, Hasher};

use super::db::{params, Db, DbResult};

/// Rows kept in `unknown_keys`; keys beyond are counted and logged, not stored.
pub const MAX_UNKNOWN_KEYS: i64 = 100_000;

/// Every incarnation of this database: the key of any request it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MssKeys {
    /// (first id, nonce), by first id.
    ranges: Vec<(i64, String)>,
}

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOwner {
    /// A request of this ledger (which may not exist yet, beyond its last id).
    Ours(i64),
    /// Not a key this ledger issues: another incarnation's, or not a key at all.
    Unknown,
}

impl MssKeys {
    /// Start a new incarnation: its range begins after the last request id. The row is
    /// committed (the connection is in autocommit) before any request of it can be made.
    pub fn begin(conn: &Db<'_>, now_ms: i64) -> DbResult<MssKeys> {
        let next: i64 = conn.query_one(
            "SELECT COALESCE(MAX(id), 0) + 1 FROM requests",
            params![],
            |r| r.get(0),
        )?;
        let mut keys = MssKeys::read(conn)?;
        let mut nonce = fresh_nonce();
        // Never the nonce of an earlier incarnation (2^-64 per pair, but cheap to rule out).
        while keys.ranges.iter().any(|(_, n)| *n == nonce) {
            nonce = fresh_nonce();
        }
        // An incarnation that made no request is replaced: its nonce may have been used by a
        // lost life of this database (a backup taken before its first request).
        conn.execute(
            "INSERT INTO incarnations(first_id, nonce, started_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT(first_id) DO UPDATE SET nonce = excluded.nonce, \
             started_ms = excluded.started_ms",
            params![next, nonce, now_ms],
        )?;
        keys.ranges.retain(|(first, _)| *first < next);
        keys.ranges.push((next, nonce));
        Ok(keys)
    }

    /// The incarnations recorded in the database (read-only tools).
    pub fn read(conn: &Db<'_>) -> DbResult<MssKeys> {
        let ranges = conn.query_rows(
            "SELECT first_id, nonce FROM incarnations ORDER BY first_id",
            params![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(MssKeys { ranges })
    }

    /// The nonce of the incarnation that holds `id` (`None`: made before incarnations).
    fn nonce_of(&self, id: i64) -> Option<&str> {
        let i = self.ranges.partition_point(|(first, _)| *first <= id);
        i.checked_sub(1).map(|i| self.ranges[i].1.as_str())
    }

    /// The MSS key of request `id`.
    pub fn key(&self, id: i64) -> String {
        match self.nonce_of(id) {
            Some(nonce) => format!("{id}.{nonce}"),
            None => id.to_string(),
        }
    }

    /// The request a key names, if this ledger issued it.
    pub fn owner(&self, key: &str) -> KeyOwner {
        let (id_text, nonce) = match key.split_once('.') {
            Some((id, nonce)) => (id, Some(nonce)),
            None => (key, None),
        };
        let Ok(id) = id_text.parse::<i64>() else {
            return KeyOwner::Unknown;
        };
        // Only the canonical spelling is ours ("007" is not "7").
        if id <= 0 || id.to_string() != id_text || self.nonce_of(id) != nonce {
            return KeyOwner::Unknown;
        }
        KeyOwner::Ours(id)
    }
}

/// 64 random bits as 16 hex digits: the process's random hasher seed (from the OS) mixed with
/// the time and the process id.
fn fresh_nonce() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    h.write_u128(now);
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// A key the MSS reported that this ledger did not issue, as `unknown_keys` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnknownKey {
    pub key: String,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Events and answers seen for it.
    pub events: i64,
    /// The latest: `started`, `done`, `failed` or `cancelled`, with the attempt.
    pub last_event: String,
}

/// Record an MSS event for a key this ledger did not issue. Returns whether the key is new
/// (first seen, and stored or beyond the table's bound): the caller logs those.
pub fn record_unknown(tx: &Db<'_>, key: &str, what: &str, now_ms: i64) -> DbResult<bool> {
    let updated = tx.execute(
        "UPDATE unknown_keys SET last_ms = ?2, events = events + 1, last_event = ?3 \
         WHERE key = ?1",
        params![key, now_ms, what],
    )?;
    if updated > 0 {
        return Ok(false);
    }
    let stored: i64 = tx.query_one("SELECT COUNT(*) FROM unknown_keys", params![], |r| r.get(0))?;
    if stored < MAX_UNKNOWN_KEYS {
        tx.execute(
            "INSERT INTO unknown_keys(key, first_ms, last_ms, events, last_event) \
             VALUES (?1, ?2, ?2, 1, ?3)",
            params![key, now_ms, what],
        )?;
    }
    Ok(true)
}

/// The unknown keys recorded, oldest first (at most `limit`), and how many there are.
pub fn unknown_keys(conn: &Db<'_>, limit: usize) -> DbResult<(Vec<UnknownKey>, i64)> {
    let total: i64 =
        conn.query_one("SELECT COUNT(*) FROM unknown_keys", params![], |r| r.get(0))?;
    let rows = conn.query_rows(
        "SELECT key, first_ms, last_ms, events, last_event FROM unknown_keys \
         ORDER BY first_ms, key LIMIT ?1",
        params![limit],
        |r| {
            Ok(UnknownKey {
                key: r.get(0)?,
                first_ms: r.get(1)?,
                last_ms: r.get(2)?,
                events: r.get(3)?,
                last_event: r.get(4)?,
            })
        },
    )?;
    Ok((rows, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::db::DbConn;

    fn keys(ranges: &[(i64, &str)]) -> MssKeys {
        MssKeys {
            ranges: ranges.iter().map(|(f, n)| (*f, n.to_string())).collect(),
        }
    }

    #[test]
    fn a_key_names_its_id_and_the_nonce_of_the_range_holding_it() {
        let k = keys(&[(5, "aaaa"), (9, "bbbb")]);
        assert_eq!(k.key(4), "4");
        assert_eq!(k.key(5), "5.aaaa");
        assert_eq!(k.key(8), "8.aaaa");
        assert_eq!(k.key(9), "9.bbbb");
        assert_eq!(k.key(1000), "1000.bbbb");
        for id in [1, 4, 5, 8, 9, 1000] {
            assert_eq!(k.owner(&k.key(id)), KeyOwner::Ours(id), "{id}");
        }
    }

    #[test]
    fn a_key_of_another_incarnation_or_spelling_is_unknown() {
        let k = keys(&[(5, "aaaa"), (9, "bbbb")]);
        // The lost life of a restored database: id 12 under the earlier nonce.
        assert_eq!(k.owner("12.aaaa"), KeyOwner::Unknown);
        assert_eq!(k.owner("12"), KeyOwner::Unknown);
        assert_eq!(k.owner("4.aaaa"), KeyOwner::Unknown);
        assert_eq!(k.owner("6.cccc"), KeyOwner::Unknown);
        for bad in [
            "", ".", "x.aaaa", "06.aaaa", "+6.aaaa", "-6", "0", "6.aaaa.x",
        ] {
            assert_eq!(k.owner(bad), KeyOwner::Unknown, "{bad:?}");
        }
    }

    #[test]
    fn each_start_is_a_new_incarnation_and_a_restored_copy_gets_keys_its_original_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let owner =
            DbConn::from_sqlite(rusqlite::Connection::open(dir.path().join("k.db")).unwrap());
        let conn = owner.db();
        conn.execute_batch(
            "CREATE TABLE requests (id INTEGER PRIMARY KEY);
             CREATE TABLE incarnations (first_id INTEGER PRIMARY KEY, nonce TEXT NOT NULL,
                 started_ms INTEGER NOT NULL);",
        )
        .unwrap();
        let first = MssKeys::begin(&conn, 1).unwrap();
        // No request made: the next start replaces the incarnation rather than adding one.
        let again = MssKeys::begin(&conn, 2).unwrap();
        assert_eq!(again.ranges.len(), 1);
        assert_ne!(first.key(1), again.key(1));
        conn.execute_batch("INSERT INTO requests(id) VALUES (1), (2)")
            .unwrap();
        let backup = dir.path().join("b.db");
        conn.execute("VACUUM INTO ?1", params![backup.to_str().unwrap()])
            .unwrap();
        // The original goes on: requests 3 and 4 under `again`'s nonce.
        conn.execute_batch("INSERT INTO requests(id) VALUES (3), (4)")
            .unwrap();
        let lost: Vec<String> = (3..=4).map(|id| again.key(id)).collect();
        // The backup restored and started: 1 and 2 keep their keys, 3 and 4 are new ones.
        let restored = DbConn::from_sqlite(rusqlite::Connection::open(&backup).unwrap());
        let restored = restored.db();
        let now = MssKeys::begin(&restored, 3).unwrap();
        assert_eq!(now.key(1), again.key(1));
        assert_eq!(now.key(2), again.key(2));
        for (id, old) in (3..=4).zip(&lost) {
            assert_ne!(&now.key(id), old);
            assert_eq!(now.owner(old), KeyOwner::Unknown, "{old}");
        }
    }
}
