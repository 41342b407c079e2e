//! Stored usage: loading the [`UsageBook`] from the maintained aggregates, and rebuilding them
//! from the request rows when the usage model's parameters changed.
//!
//! What is stored depends on the model: `groups.usage` (cumulative, always), `groups.decayed`
//! (the half-life accumulator, against `meta.half_life_t0_ms`) and `usage_windows` (benefit per
//! group per window). `meta.usage_model` records the model they were kept for; when the
//! configuration names another (a new half-life or interval), they are rebuilt from the
//! requests, each charge dated by `charged_ms`.

use std::collections::BTreeMap;

use super::db::{params, Db, DbError, DbResult};

use super::wide::Wide;

use crate::domain::{GroupId, PolicySettings};
use crate::shares::view::GroupCounts;
use crate::shares::{UsageBook, UsageModel};

const META_MODEL: &str = "usage_model";
const META_T0: &str = "half_life_t0_ms";

/// The date of a request's current charge, for rows written before `charged_ms` existed.
const CHARGE_DATE: &str =
    "COALESCE(charged_ms, CASE WHEN state = 'done' THEN finished_ms ELSE created_ms END)";

pub(super) fn meta(c: &Db<'_>, key: &str) -> DbResult<Option<String>> {
    c.query_opt("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
        r.get(0)
    })
}

pub(super) fn set_meta(tx: &Db<'_>, key: &str, value: &str) -> DbResult<()> {
    tx.execute(
        "INSERT INTO meta(key, value) VALUES (?1, ?2) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
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
pub fn book_as_of(c: &Db<'_>, policy: &PolicySettings, at_ms: i64) -> DbResult<UsageBook> {
    rebuild_book(c, policy, default_t0(policy, at_ms), at_ms, Some(at_ms))
}

/// The book as stored, or rebuilt in memory from the requests if the stored aggregates are for
/// another model. Reads only.
pub fn load_book(c: &Db<'_>, policy: &PolicySettings, now_ms: i64) -> DbResult<Loaded> {
    let stored_model = meta(c, META_MODEL)?;
    let t0 = match meta(c, META_T0)?.and_then(|v| v.parse::<i64>().ok()) {
        Some(t0) => t0,
        None => default_t0(policy, now_ms),
    };
    let fresh = stored_model.is_none() && !has_requests(c)?;
    if stored_model.as_deref() == Some(&policy.usage_model.signature()) || fresh {
        let mut book = UsageBook::new(policy, t0);
        c.for_each("SELECT path, usage, decayed FROM groups", params![], |r| {
            let (path, Wide(usage), decayed) =
                (r.get::<String>(0)?, r.get::<Wide>(1)?, r.get::<f64>(2)?);
            if let Some(g) = policy.group_by_path(&path) {
                book.load_cumulative(g, usage.max(0) as u128);
                book.load_decayed(g, decayed);
            }
            Ok::<_, DbError>(())
        })?;
        if let UsageModel::Windows { depth, .. } = policy.usage_model {
            let from = policy.usage_model.window_of(now_ms) - depth as i64 + 1;
            c.for_each(
                "SELECT path, \"window\", usage FROM usage_windows WHERE \"window\" >= ?1",
                params![from],
                |r| {
                    let (path, window, Wide(usage)) =
                        (r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<Wide>(2)?);
                    if let Some(g) = policy.group_by_path(&path) {
                        book.load_window(g, window, usage);
                    }
                    Ok::<_, DbError>(())
                },
            )?;
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

fn has_requests(c: &Db<'_>) -> DbResult<bool> {
    c.query_one("SELECT EXISTS (SELECT 1 FROM requests)", params![], |r| {
        r.get(0)
    })
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
    c: &Db<'_>,
    policy: &PolicySettings,
    t0: i64,
    now_ms: i64,
    until_ms: Option<i64>,
) -> DbResult<UsageBook> {
    let mut book = UsageBook::new(policy, t0);
    c.for_each(
        &format!(
            "SELECT group_path, charged, {CHARGE_DATE} FROM requests \
             WHERE charged != 0 AND {CHARGE_DATE} <= ?1 ORDER BY id"
        ),
        params![until_ms.unwrap_or(i64::MAX)],
        |r| {
            let path: String = r.get(0)?;
            if let Some(g) = policy.group_by_path(&path) {
                book.add(g, i128::from(r.get::<i64>(1)?), r.get(2)?);
            }
            Ok::<_, DbError>(())
        },
    )?;
    book.roll(now_ms);
    Ok(book)
}

/// Store a rebuilt book's model-dependent aggregates (in the caller's transaction).
pub fn persist_rebuilt(tx: &Db<'_>, policy: &PolicySettings, book: &UsageBook) -> DbResult<()> {
    for g in policy.group_ids() {
        tx.execute(
            "UPDATE groups SET decayed = ?2 WHERE path = ?1",
            params![policy.group(g).path.as_str(), book.decayed(g)],
        )?;
    }
    tx.execute("DELETE FROM usage_windows", params![])?;
    if let UsageModel::Windows { .. } = policy.usage_model {
        let mut insert =
            tx.prepare("INSERT INTO usage_windows(path, \"window\", usage) VALUES (?1, ?2, ?3)")?;
        for ((path, window), usage) in window_sums(tx, &policy.usage_model)? {
            insert.execute(params![path, window, Wide(usage)])?;
        }
    }
    store_model(tx, policy, book)
}

/// Every current charge summed per group and window, in Rust: SQL's `SUM()` raises "integer
/// overflow" past `i64`.
fn window_sums(c: &Db<'_>, model: &UsageModel) -> DbResult<BTreeMap<(String, i64), i128>> {
    let mut sums = BTreeMap::new();
    c.for_each(
        &format!("SELECT group_path, {CHARGE_DATE}, charged FROM requests WHERE charged != 0"),
        params![],
        |r| {
            let key = (r.get::<String>(0)?, model.window_of(r.get(1)?));
            *sums.entry(key).or_default() += i128::from(r.get::<i64>(2)?);
            Ok::<_, DbError>(())
        },
    )?;
    Ok(sums)
}

/// Record which model the aggregates are kept for, and the half-life reference time.
pub fn store_model(tx: &Db<'_>, policy: &PolicySettings, book: &UsageBook) -> DbResult<()> {
    set_meta(tx, META_MODEL, &policy.usage_model.signature())?;
    if let Some(acc) = book.half_life() {
        set_meta(tx, META_T0, &acc.t0_ms.to_string())?;
    }
    Ok(())
}

/// Per-group ledger figures, indexed by group id.
pub fn group_counts(c: &Db<'_>, policy: &PolicySettings) -> DbResult<Vec<GroupCounts>> {
    let mut out = vec![GroupCounts::default(); policy.groups.len()];
    c.for_each(
        "SELECT path, pending, held, usage_bytes FROM groups",
        params![],
        |r| {
            let (path, pending, held, Wide(bytes)) = (
                r.get::<String>(0)?,
                r.get::<i64>(1)?,
                r.get::<i64>(2)?,
                r.get::<Wide>(3)?,
            );
            if let Some(GroupId(i)) = policy.group_by_path(&path) {
                out[i] = GroupCounts {
                    pending: pending.max(0) as u64,
                    held: held.max(0) as u64,
                    usage_bytes: bytes.max(0) as u128,
                };
            }
            Ok::<_, DbError>(())
        },
    )?;
    Ok(out)
}
