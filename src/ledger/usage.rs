//! Stored usage: loading the [`UsageBook`] from the maintained aggregates, and rebuilding them
//! from the request rows when the usage model's parameters changed.
//!
//! What is stored depends on the model: `groups.usage` (cumulative, always), `groups.decayed`
//! (the half-life accumulator, against `meta.half_life_t0_ms`) and `usage_windows` (benefit per
//! group per window). `meta.usage_model` records the model they were kept for; when the
//! configuration names another (a new half-life or interval), they are rebuilt from the
//! requests, each charge dated by `charged_ms`.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::wide::Wide;

use crate::domain::{GroupId, PolicySettings};
use crate::shares::view::GroupCounts;
use crate::shares::{UsageBook, UsageModel};

const META_MODEL: &str = "usage_model";
const META_T0: &str = "half_life_t0_ms";

/// The date of a request's current charge, for rows written before `charged_ms` existed.
const CHARGE_DATE: &str =
    "COALESCE(charged_ms, CASE WHEN state = 'done' THEN finished_ms ELSE created_ms END)";

pub(super) fn meta(c: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
}

pub(super) fn set_meta(tx: &Transaction<'_>, key: &str, value: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta(key, value) VALUES (?1, ?2) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// A loaded book, and whether it had to be rebuilt from the requests (the stored aggregates
/// were kept for another model).
pub struct Loaded {
    pub book: UsageBook,
    pub rebuilt: bool,
}

/// The book for an instant in the past: the current charges dated up to `at_ms`, replayed from
/// the requests (a full scan; the stored aggregates hold the present).
pub fn book_as_of(
    c: &Connection,
    policy: &PolicySettings,
    at_ms: i64,
) -> rusqlite::Result<UsageBook> {
    rebuild_book(c, policy, default_t0(policy, at_ms), at_ms, Some(at_ms))
}

/// The book as stored, or rebuilt in memory from the requests if the stored aggregates are for
/// another model. Reads only.
pub fn load_book(c: &Connection, policy: &PolicySettings, now_ms: i64) -> rusqlite::Result<Loaded> {
    let stored_model = meta(c, META_MODEL)?;
    let t0 = match meta(c, META_T0)?.and_then(|v| v.parse::<i64>().ok()) {
        Some(t0) => t0,
        None => default_t0(policy, now_ms),
    };
    let fresh = stored_model.is_none() && !has_requests(c)?;
    if stored_model.as_deref() == Some(&policy.usage_model.signature()) || fresh {
        let mut book = UsageBook::new(policy, t0);
        let mut stmt = c.prepare_cached("SELECT path, usage, decayed FROM groups")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Wide>(1)?,
                r.get::<_, f64>(2)?,
            ))
        })?;
        for row in rows {
            let (path, Wide(usage), decayed) = row?;
            if let Some(g) = policy.group_by_path(&path) {
                book.load_cumulative(g, usage.max(0) as u128);
                book.load_decayed(g, decayed);
            }
        }
        if let UsageModel::Windows { depth, .. } = policy.usage_model {
            let from = policy.usage_model.window_of(now_ms) - depth as i64 + 1;
            let mut stmt = c.prepare_cached(
                "SELECT path, \"window\", usage FROM usage_windows WHERE \"window\" >= ?1",
            )?;
            let rows = stmt.query_map([from], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Wide>(2)?,
                ))
            })?;
            for row in rows {
                let (path, window, Wide(usage)) = row?;
                if let Some(g) = policy.group_by_path(&path) {
                    book.load_window(g, window, usage);
                }
            }
        }
        book.roll(now_ms);
        return Ok(Loaded {
            book,
            rebuilt: false,
        });
    }
    Ok(Loaded {
        book: rebuild_book(c, policy, default_t0(policy, now_ms), now_ms, None)?,
        rebuilt: true,
    })
}

fn has_requests(c: &Connection) -> rusqlite::Result<bool> {
    c.query_row("SELECT EXISTS (SELECT 1 FROM requests)", [], |r| r.get(0))
}

/// A reference time for a new half-life accumulator: a whole number of half-lives, a little
/// before now.
fn default_t0(policy: &PolicySettings, now_ms: i64) -> i64 {
    match policy.usage_model {
        UsageModel::HalfLife { half_life_ms } => {
            (now_ms.div_euclid(half_life_ms) - 1) * half_life_ms
        }
        _ => 0,
    }
}

/// Replay every current charge, dated (up to `until_ms` if given), into a new book.
fn rebuild_book(
    c: &Connection,
    policy: &PolicySettings,
    t0: i64,
    now_ms: i64,
    until_ms: Option<i64>,
) -> rusqlite::Result<UsageBook> {
    let mut book = UsageBook::new(policy, t0);
    let mut stmt = c.prepare(&format!(
        "SELECT group_path, charged, {CHARGE_DATE} FROM requests \
         WHERE charged != 0 AND {CHARGE_DATE} <= ?1 ORDER BY id"
    ))?;
    let mut rows = stmt.query([until_ms.unwrap_or(i64::MAX)])?;
    while let Some(r) = rows.next()? {
        let path: String = r.get(0)?;
        if let Some(g) = policy.group_by_path(&path) {
            book.add(g, i128::from(r.get::<_, i64>(1)?), r.get(2)?);
        }
    }
    book.roll(now_ms);
    Ok(book)
}

/// Store a rebuilt book's model-dependent aggregates (in the caller's transaction).
pub fn persist_rebuilt(
    tx: &Transaction<'_>,
    policy: &PolicySettings,
    book: &UsageBook,
) -> rusqlite::Result<()> {
    for g in policy.group_ids() {
        tx.prepare_cached("UPDATE groups SET decayed = ?2 WHERE path = ?1")?
            .execute(params![policy.group(g).path.as_str(), book.decayed(g)])?;
    }
    tx.execute("DELETE FROM usage_windows", [])?;
    if let UsageModel::Windows { .. } = policy.usage_model {
        let mut insert = tx.prepare_cached(
            "INSERT INTO usage_windows(path, \"window\", usage) VALUES (?1, ?2, ?3)",
        )?;
        for ((path, window), usage) in window_sums(tx, &policy.usage_model)? {
            insert.execute(params![path, window, Wide(usage)])?;
        }
    }
    store_model(tx, policy, book)
}

/// Every current charge summed per group and window, in Rust: SQL's `SUM()` raises "integer
/// overflow" past `i64`.
fn window_sums(
    c: &Connection,
    model: &UsageModel,
) -> rusqlite::Result<BTreeMap<(String, i64), i128>> {
    let mut sums = BTreeMap::new();
    let mut stmt = c.prepare(&format!(
        "SELECT group_path, {CHARGE_DATE}, charged FROM requests WHERE charged != 0"
    ))?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let key = (r.get::<_, String>(0)?, model.window_of(r.get(1)?));
        *sums.entry(key).or_default() += i128::from(r.get::<_, i64>(2)?);
    }
    Ok(sums)
}

/// Record which model the aggregates are kept for, and the half-life reference time.
pub fn store_model(
    tx: &Transaction<'_>,
    policy: &PolicySettings,
    book: &UsageBook,
) -> rusqlite::Result<()> {
    set_meta(tx, META_MODEL, &policy.usage_model.signature())?;
    if let Some(acc) = book.half_life() {
        set_meta(tx, META_T0, &acc.t0_ms.to_string())?;
    }
    Ok(())
}

/// Per-group ledger figures, indexed by group id.
pub fn group_counts(c: &Connection, policy: &PolicySettings) -> rusqlite::Result<Vec<GroupCounts>> {
    let mut out = vec![GroupCounts::default(); policy.groups.len()];
    let mut stmt = c.prepare_cached("SELECT path, pending, held, usage_bytes FROM groups")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, Wide>(3)?,
        ))
    })?;
    for row in rows {
        let (path, pending, held, Wide(bytes)) = row?;
        if let Some(GroupId(i)) = policy.group_by_path(&path) {
            out[i] = GroupCounts {
                pending: pending.max(0) as u64,
                held: held.max(0) as u64,
                usage_bytes: bytes.max(0) as u128,
            };
        }
    }
    Ok(out)
}
