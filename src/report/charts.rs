//! SVG line charts of a report's time series (plotters, SVG backend): achieved vs target share
//! per group, cumulative bytes per group, pending requests per class, wait percentiles.
//! Every data series is drawn 2 px wide (axes and target lines 1 px), with its name in the
//! legend, so a page can be checked for one series per group.
//! A series with a single point (one bucket with data) has that point marked with a dot, since
//! a line through one point draws nothing; the page's default range is bucketed by the hour
//! (`range::BucketRule::Chart`) so a short history draws lines.

use plotters::prelude::*;

use super::{Figures, Report};

/// One line.
pub struct Series {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// A chart's SVG, or a note when there is nothing to draw.
fn line_chart(
    caption: &str,
    series: &[Series],
    targets: &[(usize, f64)],
    y_desc: &str,
    y_fmt: &dyn Fn(&f64) -> String,
) -> String {
    let Some((x0, x1)) = x_range(series) else {
        return "<p class=\"empty\">no data in this range</p>".into();
    };
    let y_max = y_top(series, targets, y_desc);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 300)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, 0f64..y_max)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(235, 235, 235))
                .x_labels(6)
                .x_label_formatter(&|ms| short_time(*ms, x1 - x0))
                .y_labels(6)
                .y_label_formatter(y_fmt)
                .y_desc(y_desc)
                .draw()?;
            for (i, s) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(2),
                    ))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 12, y + 4)], color.filled())
                    });
                // One point draws no line: mark it so the series is seen.
                if let [only] = s.points.as_slice() {
                    chart.draw_series(std::iter::once(Circle::new(*only, 4, color.filled())))?;
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

/// The first and last time of any series (at least 1 ms apart), or `None` with no points.
fn x_range(series: &[Series]) -> Option<(i64, i64)> {
    let x0 = series
        .iter()
        .flat_map(|s| s.points.first())
        .map(|p| p.0)
        .min()?;
    let x1 = series
        .iter()
        .flat_map(|s| s.points.last())
        .map(|p| p.0)
        .max()?;
    Some((x0, x1.max(x0 + 1)))
}

/// The top of the y axis: 8% over the highest point or target; counts and seconds get at
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

fn short_time(ms: i64, span_ms: i64) -> String {
    let Ok(t) = jiff::Timestamp::from_millisecond(ms) else {
        return String::new();
    };
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    if span_ms <= 2 * 86_400_000 {
        z.strftime("%d %H:%M").to_string()
    } else {
        z.strftime("%m-%d").to_string()
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
    vec![
        (
            "chart-share",
            "Achieved share of bytes per bucket (lines) vs target (dashed)",
            line_chart(
                "achieved vs target share",
                &share,
                &targets,
                "share of bytes",
                &pct,
            ),
        ),
        (
            "chart-bytes",
            "Cumulative bytes done per group",
            line_chart("cumulative bytes", &cumulative, &[], "bytes", &|v: &f64| {
                super::render::bytes(*v as i128)
            }),
        ),
        (
            "chart-pending",
            "Pending requests at the end of each bucket, per class",
            line_chart("pending requests", &classes, &[], "requests", &|v: &f64| {
                format!("{v:.0}")
            }),
        ),
        (
            "chart-wait",
            "Wait from queueing to first start, fair-share requests",
            line_chart("wait percentiles", &waits, &[], "seconds", &|v: &f64| {
                format!("{v:.0}s")
            }),
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

/// Fair share's wait p50 and p95, in seconds.
fn fair_share_waits(r: &Report) -> Vec<Series> {
    let all = "(all fair share)";
    vec![
        Series {
            name: "fair share p50".into(),
            points: per_bucket(r, all, |f| f.wait_median_ms.map(|v| v / 1000.0)),
        },
        Series {
            name: "fair share p95".into(),
            points: per_bucket(r, all, |f| f.wait_p95_ms.map(|v| v / 1000.0)),
        },
    ]
}
