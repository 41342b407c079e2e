//! The volumes mode's tradeoff: mounts per TB against the fair-share p95 wait, or against the
//! share error (`--chart-x share_error`), as its settings vary (`mssbroker simulate --sweep ...
//! --chart FILE.svg`, docs/volumes.md), drawn as an SVG scatter (plotters, as
//! `report::charts`): one line of points per value of the first swept key, the baselines
//! (held, pass_through) as single marked points.

use plotters::prelude::*;

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// What the point is: `key=value ...` for a volumes run, the mode for a baseline.
    pub label: String,
    /// The line it belongs to (a volumes run: the first swept key's value; `None`: baseline).
    pub line: Option<String>,
    pub wait_p95_s: f64,
    pub mounts_per_tb: f64,
    /// The largest share error over the windows, in percentage points (0 when none completed).
    pub share_error_pp: f64,
}

/// What the chart's x axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// The fair-share p95 wait, seconds.
    WaitP95,
    /// The largest share error over the windows, percentage points.
    ShareError,
}

impl XAxis {
    /// `--chart-x`'s value read.
    pub fn parse(s: &str) -> Option<XAxis> {
        match s {
            "wait_p95" => Some(XAxis::WaitP95),
            "share_error" => Some(XAxis::ShareError),
            _ => None,
        }
    }

    fn of(self, p: &Point) -> f64 {
        match self {
            XAxis::WaitP95 => p.wait_p95_s,
            XAxis::ShareError => p.share_error_pp,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            XAxis::WaitP95 => "fair-share wait p95 (s)",
            XAxis::ShareError => "share error, max over windows (pp)",
        }
    }
}

/// The chart's SVG text, or an error message when it cannot be drawn.
pub fn svg(title: &str, x: XAxis, points: &[Point]) -> Result<String, String> {
    if points.is_empty() {
        return Err("no runs to draw".into());
    }
    let x_max = points.iter().map(|p| x.of(p)).fold(1.0, f64::max) * 1.1;
    let y_max = points.iter().map(|p| p.mounts_per_tb).fold(1.0, f64::max) * 1.1;
    let mut lines: Vec<&str> = Vec::new();
    for p in points {
        if let Some(l) = p.line.as_deref() {
            if !lines.contains(&l) {
                lines.push(l);
            }
        }
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (760, 420)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(235, 235, 235))
                .x_desc(x.describe())
                .y_desc("mounts per TB")
                .draw()?;
            for (i, line) in lines.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                let mut pts: Vec<(f64, f64)> = points
                    .iter()
                    .filter(|p| p.line.as_deref() == Some(*line))
                    .map(|p| (x.of(p), p.mounts_per_tb))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(format!("volumes {line}"))
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 12, y + 4)], color.filled())
                    });
                chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
            }
            for p in points.iter().filter(|p| p.line.is_none()) {
                let at = (x.of(p), p.mounts_per_tb);
                chart
                    .draw_series([Cross::new(at, 7, BLACK.stroke_width(2))])?
                    .label(p.label.clone())
                    .legend(|(x, y)| Cross::new((x + 6, y), 5, BLACK.stroke_width(2)));
                chart.draw_series([Text::new(
                    p.label.clone(),
                    (at.0, at.1),
                    ("sans-serif", 12),
                )])?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
            root.present()?;
            Ok(())
        };
        draw().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_and_baseline_is_in_the_svg() {
        let p = |label: &str, line: Option<&str>, w: f64, m: f64| Point {
            label: label.into(),
            line: line.map(str::to_owned),
            wait_p95_s: w,
            mounts_per_tb: m,
            share_error_pp: w / 10.0,
        };
        let points = [
            p("a", Some("batch_max_bytes=1"), 10.0, 5.0),
            p("b", Some("batch_max_bytes=1"), 20.0, 3.0),
            p("c", Some("batch_max_bytes=2"), 30.0, 2.0),
            p("held", None, 50.0, 40.0),
            p("pass_through", None, 5.0, 9.0),
        ];
        let svg = svg("t", XAxis::WaitP95, &points).expect("drawn");
        assert!(svg.starts_with("<svg"));
        for name in [
            "volumes batch_max_bytes=1",
            "volumes batch_max_bytes=2",
            "held",
            "pass_through",
        ] {
            assert!(svg.contains(name), "{name} missing");
        }
        assert_eq!(
            svg.matches("<circle").count(),
            3,
            "one marker per volumes run"
        );
        assert!(super::svg("t", XAxis::WaitP95, &[]).is_err());
        let by_error = super::svg("t", XAxis::ShareError, &points).expect("drawn");
        assert!(by_error.contains("share error"));
        assert_eq!(XAxis::parse("share_error"), Some(XAxis::ShareError));
        assert_eq!(XAxis::parse("colour"), None);
    }
}
