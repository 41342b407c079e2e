//! What a report covers: its range and bucket, parsed from `since` / `until` / `bucket` with
//! the defaults a table and a chart each want.

use serde::{Deserialize, Serialize};

use crate::ledger::aggregates::HOUR_MS;
use crate::shares::view::format_ms;

/// Bucket size of a report's time series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    Hour,
    Day,
    Week,
}

impl Bucket {
    pub fn parse(s: &str) -> Option<Bucket> {
        match s {
            "hour" => Some(Bucket::Hour),
            "day" => Some(Bucket::Day),
            "week" => Some(Bucket::Week),
            _ => None,
        }
    }

    /// The start (hour index) of the bucket hour `h` falls in. Days are UTC days; weeks start
    /// on Monday 00:00 UTC (1970-01-01 was a Thursday).
    pub fn start_of(self, h: i64) -> i64 {
        match self {
            Bucket::Hour => h,
            Bucket::Day => h.div_euclid(24) * 24,
            Bucket::Week => {
                let day = h.div_euclid(24);
                (day - (day + 3).rem_euclid(7)) * 24
            }
        }
    }

    pub fn hours(self) -> i64 {
        match self {
            Bucket::Hour => 1,
            Bucket::Day => 24,
            Bucket::Week => 168,
        }
    }
}

/// What a report covers: `[since, until)`, widened to whole hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportRange {
    pub since_ms: i64,
    pub until_ms: i64,
    pub bucket: Bucket,
}

impl ReportRange {
    pub fn since_hour(&self) -> i64 {
        self.since_ms.div_euclid(HOUR_MS)
    }

    pub fn until_hour(&self) -> i64 {
        // The hour containing until-1 ms, exclusive end.
        (self.until_ms - 1).div_euclid(HOUR_MS) + 1
    }

    /// How many buckets `build` makes: from the start of the bucket `since` falls in (buckets
    /// are aligned to UTC days and Mondays) to the one holding `until`.
    pub fn bucket_count(&self) -> i64 {
        let first = self.bucket.start_of(self.since_hour());
        let span = self.until_hour() - first;
        (span + self.bucket.hours() - 1).div_euclid(self.bucket.hours())
    }
}

/// Why a report's range cannot be used, naming the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RangeError {
    pub field: &'static str,
    pub message: String,
}

/// The range of `since` / `until` / `bucket` as given (RFC 3339 or epoch ms; bucket `hour`,
/// `day` or `week`). Defaults: until now, since 7 days before until, the bucket by the range's
/// length (hour up to 2 days, day up to 90 days, week beyond). More than `max_buckets`
/// buckets (`limits.max_report_buckets`) is refused, naming `bucket`, or `since` if the
/// bucket was not given.
pub fn parse_range(
    since: Option<&str>,
    until: Option<&str>,
    bucket: Option<&str>,
    now_ms: i64,
    max_buckets: usize,
) -> Result<ReportRange, RangeError> {
    parse_range_for(BucketRule::Table, since, until, bucket, now_ms, max_buckets)
}

/// Which default bucket a range without `bucket` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketRule {
    /// Tables and JSON: hour up to 2 days, day up to 90 days, week beyond.
    Table,
    /// Charts (the HTML page): hour up to 7 days and 1 hour, so the default range (the last 7
    /// days) draws a line through every hour with data rather than one point per day (a
    /// broker a few hours old has one day); then day up to 90 days, week beyond. The default
    /// range is 169 hourly buckets, within `limits.max_report_buckets`' default of 2000.
    Chart,
}

impl BucketRule {
    /// The most hours (counted as `parse_range` counts them) that still get hourly buckets.
    fn hourly_up_to(self) -> i64 {
        match self {
            BucketRule::Table => 48,
            BucketRule::Chart => 7 * 24 + 1,
        }
    }
}

/// [`parse_range`] with the default bucket of `rule`.
pub fn parse_range_for(
    rule: BucketRule,
    since: Option<&str>,
    until: Option<&str>,
    bucket: Option<&str>,
    now_ms: i64,
    max_buckets: usize,
) -> Result<ReportRange, RangeError> {
    let time = |field: &'static str, v: &str| {
        crate::clock::parse_instant(v).map_err(|message| RangeError { field, message })
    };
    let until_ms = match until {
        Some(v) => time("until", v)?,
        None => now_ms,
    };
    let since_ms = match since {
        Some(v) => time("since", v)?,
        // Never before 1970, where an explicit `since` cannot be.
        None => (until_ms - 7 * 24 * HOUR_MS).max(0),
    };
    if since_ms >= until_ms {
        return Err(RangeError {
            // Without a `since`, only `until` (at 1970-01-01T00:00:00Z) can be the problem.
            field: if since.is_some() { "since" } else { "until" },
            message: format!(
                "must be before until ({} is not before {})",
                format_ms(since_ms),
                format_ms(until_ms)
            ),
        });
    }
    let hours = (until_ms - since_ms) / HOUR_MS + 1;
    let field = if bucket.is_some() { "bucket" } else { "since" };
    let bucket = match bucket {
        Some(b) => Bucket::parse(b).ok_or_else(|| RangeError {
            field: "bucket",
            message: format!("`{b}` is not one of hour, day, week"),
        })?,
        None if hours <= rule.hourly_up_to() => Bucket::Hour,
        None if hours <= 90 * 24 => Bucket::Day,
        None => Bucket::Week,
    };
    let limit = i64::try_from(max_buckets).unwrap_or(i64::MAX);
    let mut range = ReportRange {
        since_ms,
        until_ms,
        bucket,
    };
    // A chart's hourly default gives way to days where a site's limit is lower.
    if field == "since"
        && bucket == Bucket::Hour
        && hours > BucketRule::Table.hourly_up_to()
        && range.bucket_count() > limit
    {
        range.bucket = Bucket::Day;
    }
    let (bucket, buckets) = (range.bucket, range.bucket_count());
    if buckets > limit {
        return Err(RangeError {
            field,
            message: format!(
                "{buckets} buckets of one {} is more than the limit of {max_buckets} \
                 (limits.max_report_buckets): use a larger bucket or a shorter range",
                format!("{bucket:?}").to_lowercase()
            ),
        });
    }
    Ok(range)
}
impl ReportRange {
    /// The hours the ledger reads for it (hour numbers, end exclusive).
    pub fn hours(&self) -> std::ops::Range<i64> {
        self.since_hour()..self.until_hour()
    }

    /// When its `diagnose` section is taken: the end of the range, or now if that is earlier.
    pub(super) fn diagnose_at(&self, now_ms: i64) -> i64 {
        self.until_ms.min(now_ms)
    }
}
