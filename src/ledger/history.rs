//! Read-side figures over the whole history: the share view at an instant, the hourly report
//! aggregates (totals and rows over a range), and [`LedgerReader`], a database opened read-only
//! outside a running broker. The ledger hands out rows it owns ([`ReportRows`]); building a
//! report from them is `report`'s job.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use super::db::{params, Db, DbConn, DbResult, Row};

use super::aggregates::HourRow;
use super::{schema, usage, wide, LedgerError};
use crate::domain::PolicySettings;
use crate::shares::view::SharesView;

/// What a report is built from: the aggregates before its range (summed) and within it.
#[derive(Debug, Clone, Default)]
pub struct ReportRows {
    /// Per group path: everything before the range.
    pub before: HashMap<String, HourRow>,
    /// (path, hour, row) within the range.
    pub hours: Vec<(String, i64, HourRow)>,
    /// (path, hour, bin, count) within the range.
    pub waits: Vec<(String, i64, i64, i64)>,
}

/// A report's inputs: the rows over its hours and the share view it diagnoses.
#[derive(Debug, Clone)]
pub struct ReportFigures {
    pub rows: ReportRows,
    pub diagnose: SharesView,
}

/// The ledger's figures for the Prometheus exposition.
#[derive(Debug, Clone)]
pub struct MetricFigures {
    /// Per group path, the aggregates summed over all time.
    pub totals: Vec<(String, HourRow)>,
    pub shares: SharesView,
    /// Requests held for an operator: sends an earlier broker may have made, which this MSS
    /// cannot settle (`ledger::unsettled`).
    pub unsettled: i64,
}

/// The share view of the database behind `c` at `at_ms` (used by `GET /v1/groups` and by
/// `mssbroker shares --db`). The stored aggregates hold the present (`now_ms`) and can be read
/// at any later instant; an instant in the past is replayed from the requests charged up to it
/// (a full scan). The ledger counts (pending, held) are always the present ones.
pub(super) fn read_shares(
    c: &Db<'_>,
    policy: &PolicySettings,
    at_ms: i64,
    now_ms: i64,
) -> DbResult<SharesView> {
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
    started, wait_ms_sum, done, failed, cancelled, bytes_done, benefit_done, started_over_priority, \
    coalesced";

fn agg_row(r: &Row<'_>, o: usize) -> DbResult<HourRow> {
    Ok(HourRow {
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
        bytes_done: r.get::<wide::Wide>(o + 12)?.0,
        benefit_done: r.get::<wide::Wide>(o + 13)?.0,
        started_over_priority: r.get(o + 14)?,
        coalesced: r.get(o + 15)?,
    })
}

/// Per group path, the aggregates summed over every hour before `hour` (`i64::MAX`: all).
pub(super) fn totals_before(c: &Db<'_>, hour: i64) -> DbResult<Vec<(String, HourRow)>> {
    let sums = AGG_COLS
        .split(", ")
        .map(|c| match c {
            // Exact past i64, where SUM() raises "integer overflow".
            "bytes_done" | "benefit_done" => format!("wide_sum({c})"),
            _ => format!("SUM({c})"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    c.query_rows(
        &format!(
            "SELECT path, {sums} FROM report_hours WHERE hour < ?1 GROUP BY path ORDER BY path"
        ),
        params![hour],
        |r| Ok((r.get::<String>(0)?, agg_row(r, 1)?)),
    )
}

/// The aggregates a report over `hours` (hour numbers, end exclusive) needs: a few thousand
/// rows for months of history.
pub(super) fn report_rows(c: &Db<'_>, hours: Range<i64>) -> DbResult<ReportRows> {
    let (since, until) = (hours.start, hours.end);
    let mut out = ReportRows {
        before: totals_before(c, since)?.into_iter().collect(),
        ..Default::default()
    };
    out.hours = c.query_rows(
        &format!("SELECT path, hour, {AGG_COLS} FROM report_hours WHERE hour >= ?1 AND hour < ?2"),
        params![since, until],
        |r| Ok((r.get(0)?, r.get(1)?, agg_row(r, 2)?)),
    )?;
    out.waits = c.query_rows(
        "SELECT path, hour, bin, count FROM report_waits WHERE hour >= ?1 AND hour < ?2",
        params![since, until],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    Ok(out)
}

/// A report's inputs from the database behind `c`: the rows over `hours` and the share view at
/// `diagnose_at_ms`.
pub(super) fn report_figures(
    c: &Db<'_>,
    policy: &PolicySettings,
    hours: Range<i64>,
    diagnose_at_ms: i64,
    now_ms: i64,
) -> DbResult<ReportFigures> {
    Ok(ReportFigures {
        rows: report_rows(c, hours)?,
        diagnose: read_shares(c, policy, diagnose_at_ms, now_ms)?,
    })
}

/// The ledger's figures now, for the Prometheus exposition.
pub(super) fn metric_figures(
    c: &Db<'_>,
    policy: &PolicySettings,
    now_ms: i64,
) -> DbResult<MetricFigures> {
    Ok(MetricFigures {
        totals: totals_before(c, i64::MAX)?,
        shares: read_shares(c, policy, now_ms, now_ms)?,
        unsettled: super::unsettled::count(c)?,
    })
}

/// The rows of `report_waits` from hour `?1` on, summed per group and bin in two parts: the
/// hours before `?2` (one row, its hour the latest of them) and the hours from `?2` on. The
/// paths are found by a skip through the primary key (each next path one seek), then each
/// path's range of hours: a scan of the whole table is never needed.
const WAIT_ROWS_SINCE: &str = "WITH RECURSIVE p(path) AS (SELECT MIN(path) FROM report_waits \
     UNION ALL SELECT (SELECT MIN(path) FROM report_waits WHERE path > p.path) FROM p \
     WHERE p.path IS NOT NULL) \
     SELECT w.path, MAX(w.hour), w.bin, SUM(w.count) FROM p JOIN report_waits w \
     ON w.path = p.path AND w.hour >= ?1 GROUP BY w.path, w.bin, w.hour >= ?2";

/// One row of the wait histograms (`report_waits`): path, hour, bin, count.
pub type WaitRow = (String, i64, i64, i64);

/// The rows of the wait histograms from hour `since` on, for the Prometheus exposition (which
/// keeps the closed hours' sums itself, so a scrape reads only the recent rows): per group and
/// bin, the hours before `seal` summed into one row (its hour the latest of them), and the
/// hours from `seal` on summed into another.
pub(super) fn wait_rows_since(c: &Db<'_>, since: i64, seal: i64) -> DbResult<Vec<WaitRow>> {
    c.query_rows(WAIT_ROWS_SINCE, params![since, seal], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })
}

/// A database opened read-only, outside a running broker (`mssbroker shares --db`,
/// `report --db`, the report benchmark). Refuses a database newer than this build.
pub struct LedgerReader {
    pub(super) conn: DbConn,
}

impl LedgerReader {
    pub fn open(path: &Path) -> Result<LedgerReader, LedgerError> {
        let conn = schema::open_reader(path).map_err(|e| LedgerError::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        schema::check_version(&conn, path)?;
        Ok(LedgerReader {
            conn: DbConn::from_sqlite(conn),
        })
    }

    /// The MSS keys the ledger did not issue that the MSS reported (`mss_key`), oldest first,
    /// at most `limit`, and how many there are (none in a database older than schema 9).
    pub fn unknown_keys(
        &self,
        limit: usize,
    ) -> Result<(Vec<super::mss_key::UnknownKey>, i64), LedgerError> {
        if !self.conn.db().has_table("unknown_keys")? {
            return Ok((Vec::new(), 0));
        }
        Ok(super::mss_key::unknown_keys(&self.conn.db(), limit)?)
    }

    /// The share view at `at_ms` (see [`super::Ledger::shares`]).
    pub fn shares(
        &self,
        policy: &PolicySettings,
        at_ms: i64,
        now_ms: i64,
    ) -> Result<SharesView, LedgerError> {
        Ok(read_shares(&self.conn.db(), policy, at_ms, now_ms)?)
    }

    /// A report's inputs (see [`super::Ledger::report_figures`]).
    pub fn report_figures(
        &self,
        policy: &PolicySettings,
        hours: Range<i64>,
        diagnose_at_ms: i64,
        now_ms: i64,
    ) -> Result<ReportFigures, LedgerError> {
        Ok(report_figures(
            &self.conn.db(),
            policy,
            hours,
            diagnose_at_ms,
            now_ms,
        )?)
    }

    /// Rows of the hourly aggregates (group x hour).
    pub fn aggregate_rows(&self) -> Result<i64, LedgerError> {
        Ok(self
            .conn
            .db()
            .query_one("SELECT COUNT(*) FROM report_hours", params![], |r| r.get(0))?)
    }

    /// The naive per-group sum over every request row that the aggregates replace (for the
    /// report benchmark's comparison). Returns how many (group, state) rows it made.
    pub fn scan_requests_per_group(&self) -> Result<usize, LedgerError> {
        let mut n = 0;
        self.conn.db().for_each(
            "SELECT group_path, state, COUNT(*), SUM(bytes_done) FROM requests GROUP BY 1, 2",
            params![],
            |r| {
                r.get::<i64>(2)?;
                n += 1;
                Ok::<_, LedgerError>(())
            },
        )?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params;

    #[test]
    fn wait_rows_since_sums_every_groups_sealed_and_open_hours_through_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let c = schema::open_writer(&dir.path().join("w.db")).unwrap();
        for (i, path) in ["a", "b/c", "b/d", "z"].iter().enumerate() {
            for hour in 0..10i64 {
                for bin in [3, 8] {
                    c.execute(
                        "INSERT INTO report_waits (path, hour, bin, count) VALUES (?1, ?2, ?3, ?4)",
                        params![path, hour, bin, 1 + i as i64 + hour],
                    )
                    .unwrap();
                }
            }
        }
        let c = DbConn::from_sqlite(c);
        let c = c.db();
        // From hour 4 on, hours 4..7 summed apart from hours 7..10.
        let mut got = wait_rows_since(&c, 4, 7).unwrap();
        got.sort();
        let mut want = Vec::new();
        for (i, path) in ["a", "b/c", "b/d", "z"].iter().enumerate() {
            let sum = |hours: std::ops::Range<i64>| hours.map(|h| 1 + i as i64 + h).sum::<i64>();
            for bin in [3, 8] {
                want.push((path.to_string(), 6, bin, sum(4..7)));
                want.push((path.to_string(), 9, bin, sum(7..10)));
            }
        }
        want.sort();
        assert_eq!(got, want);
        let all: i64 = wait_rows_since(&c, i64::MIN, 0)
            .unwrap()
            .iter()
            .map(|r| r.3)
            .sum();
        assert_eq!(all, (0..4).map(|i| 2 * (10 * (1 + i) + 45)).sum::<i64>());
        assert!(wait_rows_since(&c, 10, 10).unwrap().is_empty());
        // The plan seeks the key per group: no full scan of report_waits.
        let plan: Vec<String> = c
            .sqlite()
            .expect("a SQLite ledger")
            .prepare(&format!("EXPLAIN QUERY PLAN {WAIT_ROWS_SINCE}"))
            .unwrap()
            .query_map([7, 9], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter()
                .all(|l| !l.starts_with("SCAN report_waits") && !l.starts_with("SCAN w")),
            "{plan:?}"
        );
    }
}
