//! SVG line charts of a report's time series (plotters, SVG backend): achieved vs target share
//! per group, cumulative bytes per group, pending requests per class, wait percentiles.
//! Every data series is drawn 2 px wide (axes and target lines 1 px), with its name in the
//! legend, so a page can be checked for one series per group.
//! A series with a single point (one bucket with data) has that point marked with a dot, since
//! a line through one point draws nothing; the page's default range is bucketed by the hour
//! (`range::BucketRule::Chart`) so a short history draws lines. Every chart spans the report's
//! whole range of buckets (a group's share or the waits have points only where something
//! happened), and waits are drawn in the unit that suits the longest (ms, s, min or h).

use plotters::prelude::*;

use super::{Bucket, Figures, Report};
use crate::ledger::aggregates::HOUR_MS;

/// One line.
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// The time axis every chart of a report shares: the report's buckets, from the first to the
/// last, counted in hours (hourly buckets) or days (daily and weekly), so every chart covers the
/// same range whatever hours a series has points in, and ticks fall on whole hours or days.
#[derive(Debug, Clone, Copy)]
struct TimeAxis {
    from: i64,
    to: i64,
    unit_ms: i64,
}

impl TimeAxis {
    /// The axis of `r`'s buckets, or `None` when it has none.
    fn of(r: &Report) -> Option<TimeAxis> {
        let unit_ms = match r.bucket {
            Bucket::Hour => HOUR_MS,
            Bucket::Day | Bucket::Week => 24 * HOUR_MS,
        };
        let from = r.series.first()?.start_ms.div_euclid(unit_ms);
        let to = r.series.last()?.start_ms.div_euclid(unit_ms);
        Some(TimeAxis {
            from,
            // One bucket still gets an axis one unit long.
            to: to.max(from + 1),
            unit_ms,
        })
    }

    /// Where an instant (a bucket's start) is on the axis.
    fn x(&self, ms: i64) -> i64 {
        ms.div_euclid(self.unit_ms)
    }

    /// A tick's label: day and time over up to two days, else month and day.
    fn label(&self, x: i64) -> String {
        let Ok(t) = jiff::Timestamp::from_millisecond(x.saturating_mul(self.unit_ms)) else {
            return String::new();
        };
        let z = t.to_zoned(jiff::tz::TimeZone::UTC);
        if (self.to - self.from) * self.unit_ms <= 2 * 24 * HOUR_MS {
            z.strftime("%d %H:%M").to_string()
        } else {
            z.strftime("%m-%d").to_string()
        }
    }
}

/// A chart's SVG, or a note when there is nothing to draw.
fn line_chart(
    caption: &str,
    axis: Option<TimeAxis>,
    series: &[Series],
    targets: &[(usize, f64)],
    y_desc: &str,
    y_fmt: &dyn Fn(&f64) -> String,
) -> String {
    let axis = match axis {
        Some(a) if series.iter().any(|s| !s.points.is_empty()) => a,
        _ => return "<p class=\"empty\">no data in this range</p>".into(),
    };
    let (x0, x1) = (axis.from, axis.to);
    let y_max = y_top(series, targets, y_desc);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 300)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 16))
                .margin(8)
                // Half of the last tick's label lies right of the plot: room for it.
                .margin_right(RIGHT_MARGIN)
                .x_label_area_size(28)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, 0f64..y_max)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(235, 235, 235))
                .x_labels(6)
                .x_label_formatter(&|x| axis.label(*x))
                .y_labels(6)
                .y_label_formatter(y_fmt)
                .y_desc(y_desc)
                .draw()?;
            for (i, s) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                let points = || s.points.iter().map(|&(ms, v)| (axis.x(ms), v));
                chart
                    .draw_series(LineSeries::new(points(), color.stroke_width(2)))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 12, y + 4)], color.filled())
                    });
                // One point draws no line: mark it so the series is seen.
                if let [_] = s.points.as_slice() {
                    chart.draw_series(points().map(|p| Circle::new(p, 4, color.filled())))?;
                }
            }
            for &(i, t) in targets {
                let color = Palette99::pick(i).to_rgba();
                chart.draw_series(DashedLineSeries::new(
                    [(x0, t), (x1, t)],
                    6,
                    4,
                    color.stroke_width(1),
                ))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
            root.present()?;
            Ok(())
        };
        if let Err(e) = draw() {
            return format!("<p class=\"empty\">chart not drawn: {e}</p>");
        }
    }
    svg
}

/// The chart's right margin in pixels: half the widest tick label ("28 20:00" in 12 px
/// sans-serif is about 50 px wide) and some air.
const RIGHT_MARGIN: u32 = 36;

/// The top of the y axis: 8% over the highest point or target; counts and durations get at
/// least a few whole units of axis.
fn y_top(series: &[Series], targets: &[(usize, f64)], y_desc: &str) -> f64 {
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(targets.iter().map(|t| t.1))
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    if y_desc == "share of bytes" {
        y_max
    } else {
        y_max.max(5.0)
    }
}

/// The unit a duration axis whose longest duration is `max_ms` is drawn in: its length in ms,
/// its name and its symbol. A 12 ms wait is drawn as 12 ms, not as 0 s.
fn duration_unit(max_ms: f64) -> (f64, &'static str, &'static str) {
    if max_ms < 1_000.0 {
        (1.0, "milliseconds", "ms")
    } else if max_ms < 120_000.0 {
        (1_000.0, "seconds", "s")
    } else if max_ms < 2.0 * 3_600_000.0 {
        (60_000.0, "minutes", "min")
    } else {
        (3_600_000.0, "hours", "h")
    }
}

fn leaves(r: &Report) -> Vec<&Figures> {
    r.groups
        .iter()
        .filter(|f| f.kind == "fair_share" && f.leaf)
        .collect()
}

fn per_bucket(
    r: &Report,
    path: &str,
    mut value: impl FnMut(&Figures) -> Option<f64>,
) -> Vec<(i64, f64)> {
    r.series
        .iter()
        .filter_map(|b| {
            let f = b.groups.iter().find(|f| f.path == path)?;
            Some((b.start_ms, value(f)?))
        })
        .collect()
}

/// The four charts, as (id, title, SVG).
pub fn charts(r: &Report) -> Vec<(&'static str, &'static str, String)> {
    let axis = TimeAxis::of(r);
    let groups = leaves(r);
    let pct = |v: &f64| format!("{:.0}%", v * 100.0);
    let share: Vec<Series> = groups
        .iter()
        .map(|g| Series {
            name: g.path.clone(),
            points: per_bucket(r, &g.path, |f| f.achieved_share_bytes),
        })
        .collect();
    let targets: Vec<(usize, f64)> = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.target_share.map(|t| (i, t)))
        .collect();
    let cumulative = cumulative_bytes(r, &groups);
    let classes = pending_per_class(r);
    let waits = fair_share_waits(r);
    let longest = (waits.iter().flat_map(|s| s.points.iter().map(|p| p.1))).fold(0.0, f64::max);
    let (unit_ms, unit_name, unit) = duration_unit(longest);
    let waits: Vec<Series> = (waits.into_iter())
        .map(|s| Series {
            name: s.name,
            points: s.points.iter().map(|&(t, ms)| (t, ms / unit_ms)).collect(),
        })
        .collect();
    vec![
        (
            "chart-share",
            "Achieved share of bytes per bucket (lines) vs target (dashed)",
            line_chart(
                "achieved vs target share",
                axis,
                &share,
                &targets,
                "share of bytes",
                &pct,
            ),
        ),
        (
            "chart-bytes",
            "Cumulative bytes done per group",
            line_chart(
                "cumulative bytes",
                axis,
                &cumulative,
                &[],
                "bytes",
                &|v: &f64| super::render::bytes(*v as i128),
            ),
        ),
        (
            "chart-pending",
            "Pending requests at the end of each bucket, per class",
            line_chart(
                "pending requests",
                axis,
                &classes,
                &[],
                "requests",
                &|v: &f64| format!("{v:.0}"),
            ),
        ),
        (
            "chart-wait",
            "Wait from queueing to first start, fair-share requests",
            line_chart(
                "wait percentiles",
                axis,
                &waits,
                &[],
                unit_name,
                &|v: &f64| format!("{v:.0} {unit}"),
            ),
        ),
    ]
}

/// Per group, the bytes done up to the end of each bucket.
fn cumulative_bytes(r: &Report, groups: &[&Figures]) -> Vec<Series> {
    groups
        .iter()
        .map(|g| {
            let mut sum = 0.0;
            Series {
                name: g.path.clone(),
                points: per_bucket(r, &g.path, |f| {
                    sum += f.bytes_done as f64;
                    Some(sum)
                }),
            }
        })
        .collect()
}

/// Pending requests per priority class and for all of fair share.
fn pending_per_class(r: &Report) -> Vec<Series> {
    r.groups
        .iter()
        .filter(|f| f.kind != "fair_share")
        .map(|c| Series {
            name: if c.kind == "all_fair_share" {
                "fair share (all groups)".into()
            } else {
                format!("{} (priority)", c.path)
            },
            points: per_bucket(r, &c.path, |f| Some(f.pending as f64)),
        })
        .collect()
}

/// Fair share's wait p50 and p95, in milliseconds.
fn fair_share_waits(r: &Report) -> Vec<Series> {
    let all = "(all fair share)";
    vec![
        Series {
            name: "fair share p50".into(),
            points: per_bucket(r, all, |f| f.wait_median_ms),
        },
        Series {
            name: "fair share p95".into(),
            points: per_bucket(r, all, |f| f.wait_p95_ms),
        },
    ]
}
