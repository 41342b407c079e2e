//! Read-side figures over the whole history: the share view at an instant, the hourly report
//! aggregates (totals and rows over a range), and a database opened read-only.

use std::path::Path;

use super::{aggregates, schema, usage, wide, LedgerError};
use crate::config::PolicySettings;
use crate::shares::view::SharesView;

/// The share view of the database behind `c` at `at_ms` (used by `GET /v1/groups` and by
/// `mssbroker shares --db`). The stored aggregates hold the present (`now_ms`) and can be read
/// at any later instant; an instant in the past is replayed from the requests charged up to it
/// (a full scan). The ledger counts (pending, held) are always the present ones.
pub fn read_shares(
    c: &rusqlite::Connection,
    policy: &PolicySettings,
    at_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<SharesView> {
    let book = if at_ms < now_ms {
        usage::book_as_of(c, policy, at_ms)?
    } else {
        usage::load_book(c, policy, at_ms)?.book
    };
    let counts = usage::group_counts(c, policy)?;
    let snapshot = book.snapshot(at_ms);
    Ok(crate::shares::view::build(
        policy,
        &snapshot,
        at_ms,
        Some(&counts),
    ))
}

const AGG_COLS: &str = "accepted, held, released, held_cancelled, front, back, priority, \
    started, wait_ms_sum, done, failed, cancelled, bytes_done, benefit_done, started_over_priority";

fn agg_row(r: &rusqlite::Row<'_>, o: usize) -> rusqlite::Result<aggregates::HourRow> {
    Ok(aggregates::HourRow {
        accepted: r.get(o)?,
        held: r.get(o + 1)?,
        released: r.get(o + 2)?,
        held_cancelled: r.get(o + 3)?,
        front: r.get(o + 4)?,
        back: r.get(o + 5)?,
        priority: r.get(o + 6)?,
        started: r.get(o + 7)?,
        wait_ms_sum: r.get(o + 8)?,
        done: r.get(o + 9)?,
        failed: r.get(o + 10)?,
        cancelled: r.get(o + 11)?,
        bytes_done: r.get::<_, wide::Wide>(o + 12)?.0,
        benefit_done: r.get::<_, wide::Wide>(o + 13)?.0,
        started_over_priority: r.get(o + 14)?,
    })
}

/// Per group path, the aggregates summed over every hour before `hour` (`i64::MAX`: all).
pub fn totals_before(
    c: &rusqlite::Connection,
    hour: i64,
) -> rusqlite::Result<Vec<(String, aggregates::HourRow)>> {
    let sums = AGG_COLS
        .split(", ")
        .map(|c| match c {
            // Exact past i64, where SUM() raises "integer overflow".
            "bytes_done" | "benefit_done" => format!("wide_sum({c})"),
            _ => format!("SUM({c})"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut st = c.prepare_cached(&format!(
        "SELECT path, {sums} FROM report_hours WHERE hour < ?1 GROUP BY path ORDER BY path"
    ))?;
    let rows = st.query_map([hour], |r| Ok((r.get::<_, String>(0)?, agg_row(r, 1)?)))?;
    rows.collect()
}

/// The aggregates a report over `range` needs: a few thousand rows for months of history.
pub fn report_rows(
    c: &rusqlite::Connection,
    range: &crate::report::ReportRange,
) -> rusqlite::Result<crate::report::ReportRows> {
    let (since, until) = (range.since_hour(), range.until_hour());
    let mut out = crate::report::ReportRows {
        before: totals_before(c, since)?.into_iter().collect(),
        ..Default::default()
    };
    let mut st = c.prepare(&format!(
        "SELECT path, hour, {AGG_COLS} FROM report_hours WHERE hour >= ?1 AND hour < ?2"
    ))?;
    for r in st.query_map([since, until], |r| {
        Ok((r.get(0)?, r.get(1)?, agg_row(r, 2)?))
    })? {
        out.hours.push(r?);
    }
    let mut st = c.prepare(
        "SELECT path, hour, bin, count FROM report_waits WHERE hour >= ?1 AND hour < ?2",
    )?;
    for r in st.query_map([since, until], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })? {
        out.waits.push(r?);
    }
    Ok(out)
}

/// A whole report from the database behind `c`; the `diagnose` section is the share view at
/// the end of the range, or now if that is later.
pub fn read_report(
    c: &rusqlite::Connection,
    policy: &PolicySettings,
    range: crate::report::ReportRange,
    now_ms: i64,
) -> rusqlite::Result<crate::report::Report> {
    let rows = report_rows(c, &range)?;
    let diagnose = read_shares(c, policy, range.until_ms.min(now_ms), now_ms)?;
    Ok(crate::report::build(policy, &rows, range, diagnose))
}

/// Open a database read-only (for `mssbroker shares --db` and reports).
pub fn open_read_only(path: &Path) -> Result<rusqlite::Connection, LedgerError> {
    let conn = schema::open_reader(path).map_err(|e| LedgerError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    schema::check_version(&conn, path)?;
    Ok(conn)
}
