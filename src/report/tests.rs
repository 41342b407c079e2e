//! A report worked by hand, on a real ledger file with a manual clock, across an hour (and
//! usage window) boundary.

use std::sync::Arc;
use std::time::Duration;

use mss_adapters::{EventKind, MssEvent};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::config::Settings;
use crate::domain::RetrySettings;
use crate::ledger::aggregates::wait_bin;
use crate::ledger::{Ledger, LedgerOptions, NewRequest, RequestInput};
use crate::tests::TestConfig;

/// The shared test configuration with windowed usage, `daq` as the priority class and two
/// groups a (1/4) and b (3/4).
fn config() -> Settings {
    TestConfig::new()
        .with(
            r#"
[usage]
model = "windows"
interval_secs = 3600
depth = 2
decay = 0.5
[[priority_classes]]
access_mode = "daq"
mss_priority = 100
[shares]
a = 1
b = 3
"#,
        )
        .settings()
}

const MIN: i64 = 60_000;
const H0: i64 = 1_000 * HOUR_MS;

fn request(policy: &PolicySettings, crid: &str, group: &str, size: u64) -> NewRequest {
    let mode = if group == "daq" { "daq" } else { group };
    NewRequest {
        input: RequestInput {
            station: "st".into(),
            client_request_id: crid.into(),
            user: "u".into(),
            file: format!("/f/{crid}"),
            size_bytes: size,
            access_mode: mode.into(),
            physics_group: "x".into(),
            volume: None,
            direction: mss_adapters::Direction::Read,
            extras: Default::default(),
        },
        group: policy.group_by_path(group).unwrap(),
        benefit: size,
    }
}

fn ev(l: &Ledger, id: i64, seq: u64, kind: EventKind) -> MssEvent {
    MssEvent {
        seq,
        key: l.mss_key(id),
        attempt: 1,
        at_ms: 0,
        kind,
    }
}

fn fig<'a>(groups: &'a [Figures], path: &str) -> &'a Figures {
    groups.iter().find(|f| f.path == path).unwrap()
}

fn upper(wait_ms: i64) -> Option<f64> {
    Some(bin_upper_ms(wait_bin(wait_ms)).round())
}

#[tokio::test]
async fn a_hand_worked_report() {
    let dir = tempfile::tempdir().unwrap();
    let settings = config();
    let policy = settings.policy.clone();
    let clock = ManualClock::new(H0 + 10 * MIN);
    let options = LedgerOptions {
        path: dir.path().join("r.db"),
        commit_batch_max: 64,
        url: None,
        epoch: 1,
        retry: RetrySettings {
            max_attempts: 1,
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
        },
        metrics: Arc::new(crate::ledger::NoObserver),
        read_outputs: None,
    };
    let (l, writer) = Ledger::open(&options, policy.clone(), Arc::new(clock.clone())).unwrap();
    let p = &policy;
    let ids: Vec<i64> = l
        .accept(vec![
            request(p, "a1", "a", 1000),
            request(p, "a2", "a", 3000),
            request(p, "b1", "b", 2000),
            request(p, "d1", "daq", 500),
        ])
        .await
        .unwrap()
        .iter()
        .map(|a| a.id)
        .collect();
    let (a1, a2, b1, d1) = (ids[0], ids[1], ids[2], ids[3]);
    // Everything reaches the MSS at once.
    l.submitted(
        ids.iter()
            .map(|&id| crate::ledger::SubmittedTransfer {
                id,
                attempt: 1,
                mss_id: format!("m{id}"),
            })
            .collect(),
    )
    .await
    .unwrap();
    clock.advance_ms(5 * MIN); // H0 + 15m
    l.apply_status_events(vec![
        ev(&l, a1, 1, EventKind::Started),
        ev(&l, b1, 2, EventKind::Started),
    ])
    .await
    .unwrap();
    clock.advance_ms(15 * MIN); // H0 + 30m
    l.apply_status_events(vec![
        ev(&l, a1, 3, EventKind::Done { bytes: 1000 }),
        ev(&l, b1, 4, EventKind::Done { bytes: 2000 }),
    ])
    .await
    .unwrap();
    clock.advance_ms(35 * MIN); // H0 + 65m: the next hour
    l.apply_status_events(vec![
        ev(&l, a2, 5, EventKind::Started),
        ev(&l, d1, 6, EventKind::Started),
    ])
    .await
    .unwrap();
    clock.advance_ms(5 * MIN); // H0 + 70m
    l.apply_status_events(vec![
        ev(&l, a2, 7, EventKind::Done { bytes: 3000 }),
        ev(&l, d1, 8, EventKind::Done { bytes: 500 }),
    ])
    .await
    .unwrap();
    clock.advance_ms(5 * MIN); // H0 + 75m
    let more = l
        .accept(vec![
            request(p, "b2", "b", 4000),
            request(p, "b3", "b", 1000),
        ])
        .await
        .unwrap();
    clock.advance_ms(5 * MIN); // H0 + 80m
    l.apply_status_events(vec![ev(
        &l,
        more[0].id,
        9,
        EventKind::Failed {
            reason: "bad tape".into(),
            retryable: false,
        },
    )])
    .await
    .unwrap();
    l.cancel(more[1].id).await.unwrap();

    let range = ReportRange {
        since_ms: H0,
        until_ms: H0 + 2 * HOUR_MS,
        bucket: Bucket::Hour,
    };
    let r = super::read(&l, range, clock.now_ms()).await.unwrap();
    drop(l);
    writer.join().unwrap();

    // Whole range. Fair-share bytes done: a 1000 + 3000, b 2000.
    let a = fig(&r.groups, "a");
    let b = fig(&r.groups, "b");
    assert_eq!((a.bytes_done, a.files_done, a.accepted), (4000, 2, 2));
    assert_eq!(a.achieved_share_bytes, Some(4000.0 / 6000.0));
    assert_eq!(a.achieved_share_files, Some(2.0 / 3.0));
    assert_eq!(a.target_share, Some(0.25));
    assert!((a.deviation_pp.unwrap() - (4000.0 / 6000.0 - 0.25) * 100.0).abs() < 1e-9);
    assert!((b.deviation_pp.unwrap() - (2000.0 / 6000.0 - 0.75) * 100.0).abs() < 1e-9);
    assert_eq!(
        (b.accepted, b.done, b.failed, b.cancelled, b.pending, b.held),
        (3, 1, 1, 1, 0, 0)
    );
    // SAM: a1 and a2 were the first usage of all (share 1): back; every b went front.
    assert_eq!((a.front, a.back, b.front, b.back), (0, 2, 3, 0));
    // Waits: a1 5 min, a2 55 min; b1 5 min; d1 55 min.
    assert_eq!(a.started, 2);
    assert_eq!(a.wait_median_ms, upper(5 * MIN));
    assert_eq!(a.wait_p95_ms, upper(55 * MIN));
    assert_eq!(b.wait_median_ms, upper(5 * MIN));
    let daq = fig(&r.groups, "daq");
    assert_eq!(
        (
            daq.kind.as_str(),
            daq.target_share,
            daq.achieved_share_bytes
        ),
        ("priority", None, None)
    );
    assert_eq!((daq.bytes_done, daq.wait_median_ms), (500, upper(55 * MIN)));
    // d1 (data taking) was queued at the MSS from H0 + 10m to H0 + 65m: a1 and b1 (H0 + 15m)
    // and a2 (H0 + 65m, just before d1) all started over it, in both hours.
    assert_eq!((a.started_over_priority, b.started_over_priority), (2, 1));
    assert_eq!(daq.started_over_priority, 0);
    assert_eq!(
        r.priority_held_back,
        [format_ms(H0), format_ms(H0 + HOUR_MS)]
    );
    let all = fig(&r.groups, "(all fair share)");
    assert_eq!(
        (all.bytes_done, all.accepted, all.achieved_share_bytes),
        (6000, 5, Some(1.0))
    );

    // Per hour.
    assert_eq!(r.series.len(), 2);
    let h0 = &r.series[0].groups;
    assert_eq!(
        (fig(h0, "a").bytes_done, fig(h0, "a").pending),
        (1000, 1),
        "a2 still pending"
    );
    assert_eq!(fig(h0, "a").achieved_share_bytes, Some(1000.0 / 3000.0));
    assert_eq!(fig(h0, "daq").pending, 1);
    let h1 = &r.series[1].groups;
    assert_eq!(fig(h1, "a").achieved_share_bytes, Some(1.0));
    assert_eq!(
        (
            fig(h1, "b").accepted,
            fig(h1, "b").failed,
            fig(h1, "b").cancelled,
            fig(h1, "b").pending
        ),
        (2, 1, 1, 0)
    );

    // Diagnose: usage per window at the end (now, H0 + 80m), current window first: a2's 3000
    // was charged when it finished (this hour), a1's 1000 last hour; b's failed and cancelled
    // requests were refunded.
    let win = |path: &str| {
        r.diagnose
            .groups
            .iter()
            .find(|g| g.path == path)
            .unwrap()
            .windows
            .clone()
    };
    assert_eq!(win("a"), Some(vec![3000.0, 1000.0]));
    assert_eq!(win("b"), Some(vec![0.0, 2000.0]));

    // The renderings carry the same figures.
    let table = render::table(&r);
    assert!(
        table.contains("+41.67") && table.contains("-41.67"),
        "{table}"
    );
    assert!(table.contains("a fair-share request started while a priority-class request waited"));
    let csv = render::csv(&r);
    // a, b, daq and the fair-share total, per bucket and for the range.
    assert_eq!(
        csv.lines().count(),
        1 + 2 * 4 + 4,
        "header, 2 buckets x 4 rows, totals"
    );
    assert!(
        csv.lines()
            .any(|l| l.starts_with("total,a,fair_share,0.25,")),
        "{csv}"
    );
}

#[test]
fn buckets_align_to_utc_days_and_monday_weeks() {
    // Hour 0 is Thursday 1970-01-01 00:00; the Monday before is 1969-12-29, hour -72.
    assert_eq!(Bucket::Week.start_of(0), -72);
    assert_eq!(Bucket::Week.start_of(4 * 24), 4 * 24, "Monday 1970-01-05");
    assert_eq!(Bucket::Week.start_of(4 * 24 + 167), 4 * 24);
    assert_eq!(Bucket::Day.start_of(47), 24);
    assert_eq!(Bucket::Hour.start_of(47), 47);
}

#[test]
fn the_bucket_limit_counts_the_aligned_buckets_a_report_makes() {
    // 1970-01-01 23:30 to 1970-01-02 00:30: two hours, but two UTC days.
    let since = "1970-01-01T23:30:00Z";
    let until = "1970-01-02T00:30:00Z";
    let refused = parse_range(Some(since), Some(until), Some("day"), 0, 1)
        .expect_err("two day buckets are over a limit of one");
    assert_eq!(refused.field, "bucket");
    assert!(refused.message.contains("2 buckets"), "{}", refused.message);
    let range = parse_range(Some(since), Some(until), Some("day"), 0, 2).expect("two fit");
    assert_eq!(range.bucket_count(), 2);
    // The count is what `build` walks, for unaligned ranges of every bucket.
    for (since, until, bucket) in [
        ("1970-01-01T00:10:00Z", "1970-01-01T05:00:00Z", "hour"),
        ("1970-01-03T13:00:00Z", "1970-01-19T01:00:00Z", "day"),
        ("1970-01-03T13:00:00Z", "1970-03-02T01:00:00Z", "week"),
    ] {
        let range = parse_range(Some(since), Some(until), Some(bucket), 0, 10_000).expect("valid");
        let mut walked = 0;
        let mut b = range.bucket.start_of(range.since_hour());
        while b < range.until_hour() {
            walked += 1;
            b += range.bucket.hours();
        }
        assert_eq!(range.bucket_count(), walked, "{since}..{until} by {bucket}");
        let at_limit = usize::try_from(walked).expect("small");
        assert!(parse_range(Some(since), Some(until), Some(bucket), 0, at_limit).is_ok());
        assert!(parse_range(Some(since), Some(until), Some(bucket), 0, at_limit - 1).is_err());
    }
}

#[test]
fn the_page_draws_its_default_range_by_the_hour() {
    use super::range::{parse_range_for, BucketRule};
    let now = 1_800_000_000_000 + 60_000;
    // The last 7 days, not on an hour: 169 hourly buckets for a chart, days for a table.
    let chart = parse_range_for(BucketRule::Chart, None, None, None, now, 2_000).unwrap();
    assert_eq!((chart.bucket, chart.bucket_count()), (Bucket::Hour, 169));
    let table = parse_range(None, None, None, now, 2_000).unwrap();
    assert_eq!((table.bucket, table.bucket_count()), (Bucket::Day, 8));
    // A site whose limit is under 169 gets days on the page rather than a refusal.
    let low = parse_range_for(BucketRule::Chart, None, None, None, now, 100).unwrap();
    assert_eq!(low.bucket, Bucket::Day);
    // Past 7 days and an hour the chart takes days too; a bucket given is kept.
    let since = (now - 8 * 24 * HOUR_MS).to_string();
    let long = parse_range_for(BucketRule::Chart, Some(&since), None, None, now, 2_000).unwrap();
    assert_eq!(long.bucket, Bucket::Day);
    let given = parse_range_for(BucketRule::Chart, None, None, Some("week"), now, 2_000).unwrap();
    assert_eq!(given.bucket, Bucket::Week);
    let refused = parse_range_for(BucketRule::Chart, None, None, Some("hour"), now, 100);
    assert_eq!(refused.unwrap_err().field, "bucket");
}

#[test]
fn the_default_since_is_never_before_1970() {
    // `until` early in 1970: the 7 days before it start at 1970 itself, as a given `since` must.
    let range = parse_range(None, Some("3600000"), None, 0, 2_000).expect("one hour");
    assert_eq!((range.since_ms, range.until_ms), (0, 3_600_000));
    assert!(parse_range(Some("-1"), Some("3600000"), None, 0, 2_000).is_err());
    // `until` at the epoch itself leaves nothing to report: refused, naming `until`.
    let refused = parse_range(None, Some("0"), None, 0, 2_000).expect_err("an empty range");
    assert_eq!(refused.field, "until");
    let refused = parse_range(Some("0"), Some("0"), None, 0, 2_000).expect_err("an empty range");
    assert_eq!(refused.field, "since");
}

/// One request of group `a`, accepted 10 minutes into `H0`, started 12 ms later and done in
/// that hour; nothing else happens in the three hours after. Returns its report over the four
/// hours, by the hour.
async fn one_short_wait() -> Report {
    let dir = tempfile::tempdir().unwrap();
    let settings = config();
    let policy = settings.policy.clone();
    let clock = ManualClock::new(H0 + 10 * MIN);
    let options = LedgerOptions {
        path: dir.path().join("r.db"),
        commit_batch_max: 64,
        url: None,
        epoch: 1,
        retry: RetrySettings {
            max_attempts: 1,
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
        },
        metrics: Arc::new(crate::ledger::NoObserver),
        read_outputs: None,
    };
    let (l, writer) = Ledger::open(&options, policy.clone(), Arc::new(clock.clone())).unwrap();
    let id = l
        .accept(vec![request(&policy, "a1", "a", 1000)])
        .await
        .unwrap()[0]
        .id;
    let submitted = crate::ledger::SubmittedTransfer {
        id,
        attempt: 1,
        mss_id: "m1".into(),
    };
    l.submitted(vec![submitted]).await.unwrap();
    clock.advance_ms(12);
    l.apply_status_events(vec![ev(&l, id, 1, EventKind::Started)])
        .await
        .unwrap();
    clock.advance_ms(MIN);
    l.apply_status_events(vec![ev(&l, id, 2, EventKind::Done { bytes: 1000 })])
        .await
        .unwrap();
    let range = ReportRange {
        since_ms: H0,
        until_ms: H0 + 4 * HOUR_MS,
        bucket: Bucket::Hour,
    };
    let r = super::read(&l, range, H0 + 4 * HOUR_MS).await.unwrap();
    drop(l);
    writer.join().unwrap();
    r
}

/// Each upright `<text>` of an SVG: its x, font size, anchor and content.
fn svg_texts(svg: &str) -> Vec<(f64, f64, String, String)> {
    let attr = |tag: &str, name: &str| {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[at..at + tag[at..].find('"')?].to_string())
    };
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let (tag, rest) = t.split_once('>')?;
            if tag.contains("transform") {
                return None;
            }
            let content = rest[..rest.find("</text>")?].trim().to_string();
            Some((
                attr(tag, "x")?.parse().ok()?,
                attr(tag, "font-size")?.parse().ok()?,
                attr(tag, "text-anchor").unwrap_or_else(|| "start".into()),
                content,
            ))
        })
        .collect()
}

#[tokio::test]
async fn every_chart_spans_the_whole_range_and_its_labels_fit() {
    let r = one_short_wait().await;
    let hours: Vec<String> = (0..4)
        .map(|h| {
            let t = jiff::Timestamp::from_millisecond(H0 + h * HOUR_MS).unwrap();
            t.to_zoned(jiff::tz::TimeZone::UTC)
                .strftime("%d %H:%M")
                .to_string()
        })
        .collect();
    for (id, _, svg) in super::charts::charts(&r) {
        assert!(svg.contains("<svg"), "{id}: {svg}");
        let texts = svg_texts(&svg);
        // The x axis: a tick at every hour of the range, though the share and the waits have
        // a point in the first hour only.
        let ticks: Vec<&str> = (texts.iter())
            .map(|t| t.3.as_str())
            .filter(|s| hours.iter().any(|h| h == s))
            .collect();
        assert_eq!(ticks, hours, "{id}: {texts:?}");
        // No text runs past the picture's right edge (760 px), at about 0.6 em a character.
        for (x, size, anchor, text) in &texts {
            let width = text.chars().count() as f64 * size * 0.6;
            let right = match anchor.as_str() {
                "middle" => x + width / 2.0,
                "end" => *x,
                _ => x + width,
            };
            assert!(right <= 760.0, "{id}: {text:?} ends at {right:.0} px");
        }
    }
}

#[tokio::test]
async fn a_short_wait_is_shown_in_milliseconds() {
    let r = one_short_wait().await;
    let all = fig(&r.groups, "(all fair share)");
    let p50 = all.wait_median_ms.expect("a wait");
    assert!(p50 < 1000.0, "{p50}");
    let page = super::html::page(&r, H0 + 4 * HOUR_MS, false).unwrap();
    let shown = format!("<td>{p50:.0} ms</td>");
    assert!(page.contains(&shown), "{shown} not in the table");
    assert!(!page.contains("0.0 s"), "a wait shown as 0.0 s");
    let (_, _, waits) = (super::charts::charts(&r).into_iter())
        .find(|c| c.0 == "chart-wait")
        .unwrap();
    // The axis is in milliseconds (its title is drawn turned, so not among the upright texts).
    let unit =
        (waits.split('>')).any(|p| p.split('<').next().map(str::trim) == Some("milliseconds"));
    assert!(unit, "the wait axis' unit");
    let texts = svg_texts(&waits);
    let labels: Vec<&str> = (texts.iter())
        .map(|t| t.3.as_str())
        .filter(|t| t.ends_with(" ms"))
        .collect();
    assert!(labels.len() >= 3, "the wait axis' labels in ms: {texts:?}");
}
