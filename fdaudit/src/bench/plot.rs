//! `--plot`: per-spawn time against NOFILE, one line per strategy, log-log axes; one panel
//! per number of open fds. Dashed lines extend each fit to the largest NOFILE predicted;
//! crosses mark the published figures.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{CellReport, FitReport, PREDICT_AT, PUBLISHED};
use crate::spawner::CloseMethod;

/// Errors while drawing the plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("plot file must end in .svg or .png: {0}")]
    Extension(String),
    #[error("no TrueType font found for the plot's text (install fonts-dejavu-core); tried {0}")]
    NoFont(String),
    #[error("no cells to plot")]
    Empty,
    #[error("drawing failed: {0}")]
    Draw(String),
}

const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a system TrueType font as "sans-serif" once (plotters measures text with it,
/// for SVG too).
fn register_font() -> Result<(), PlotError> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(FONT_PATHS.join(", "))
    })
    .clone()
    .map_err(PlotError::NoFont)
}

fn color(s: CloseMethod) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(127, 127, 127), // none
        RGBColor(214, 39, 40),   // close-loop
        RGBColor(255, 127, 14),  // fcntl-loop
        RGBColor(140, 86, 75),   // procfd-walk
        RGBColor(148, 103, 189), // poll-scan
        RGBColor(31, 119, 180),  // close-range
        RGBColor(23, 190, 207),  // close-range-cloexec
        RGBColor(44, 160, 44),   // closefrom
        RGBColor(188, 189, 34),  // posix-spawn
        RGBColor(227, 119, 194), // posix-spawn-closefrom
    ];
    let i = CloseMethod::ALL.iter().position(|&x| x == s).unwrap_or(0);
    C[i]
}

/// Draws the plot into `path` (.svg or .png, by extension).
pub fn plot(
    path: &Path,
    cells: &[CellReport],
    fits: &[FitReport],
    title: &str,
) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if cells.is_empty() {
        return Err(PlotError::Empty);
    }
    register_font()?;
    let panels = cells
        .iter()
        .map(|c| c.open_fds)
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u32;
    let size = (760 * panels.max(1), 620);
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root, cells, fits, title)?;
            root.present().map_err(|e| PlotError::Draw(e.to_string()))
        }
        "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(&root, cells, fits, title)?;
            root.present().map_err(|e| PlotError::Draw(e.to_string()))
        }
        _ => Err(PlotError::Extension(path.display().to_string())),
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    cells: &[CellReport],
    fits: &[FitReport],
    title: &str,
) -> Result<(), PlotError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(e)?;
    let mut by_open: BTreeMap<u64, Vec<&CellReport>> = BTreeMap::new();
    for c in cells {
        by_open.entry(c.open_fds).or_default().push(c);
    }
    let areas = root.split_evenly((1, by_open.len()));
    let x_min = cells.iter().map(|c| c.nofile).min().unwrap_or(1) as f64 / 1.3;
    let x_max = PREDICT_AT[PREDICT_AT.len() - 1] as f64 * 1.3;
    let (y_min, y_max) = y_range(cells, fits);
    for (area, (open, cs)) in areas.iter().zip(by_open) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{open} fds open in the parent (dashed: fitted model, extrapolated)"),
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(70)
            .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("RLIMIT_NOFILE (soft limit)")
            .y_desc("wall time per spawn (ms), median")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| {
                if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y}")
                }
            })
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .draw()
            .map_err(e)?;
        let mut strategies: Vec<CloseMethod> = cs.iter().map(|c| c.strategy).collect();
        strategies.sort();
        strategies.dedup();
        for s in strategies {
            draw_method(&mut chart, &cs, fits, s, open)?;
        }
        draw_published(&mut chart)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

/// The y range (ms per spawn, log scale) over measured, predicted and published values.
fn y_range(cells: &[CellReport], fits: &[FitReport]) -> (f64, f64) {
    // y in milliseconds per spawn, over measured, predicted and published values.
    let mut ys: Vec<f64> = cells.iter().map(|c| c.median_ns as f64 / 1e6).collect();
    ys.extend(
        fits.iter()
            .flat_map(|f| f.predictions.iter().map(|p| p.ns / 1e6)),
    );
    for p in PUBLISHED {
        ys.push(p.loop_s * 1e3 / p.spawns as f64);
        ys.push(p.close_range_s * 1e3 / p.spawns as f64);
    }
    let ys: Vec<f64> = ys.into_iter().filter(|y| *y > 0.0).collect();
    let y_min = ys.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
    let y_max = ys.iter().copied().fold(0.0, f64::max) * 1.5;
    (y_min, y_max)
}

/// The dashed extrapolation of a fit from the last measured point; flat fits are a level
/// line at the mean.
fn extrapolation(f: &FitReport, last: (f64, f64)) -> Vec<(f64, f64)> {
    let start = if f.flat {
        let y = f.predictions.first().map_or(last.1, |p| p.ns / 1e6);
        (last.0, y)
    } else {
        last
    };
    let mut ext = vec![start];
    ext.extend(
        f.predictions
            .iter()
            .filter(|p| p.extrapolated && p.ns > 0.0)
            .map(|p| (p.nofile as f64, p.ns / 1e6)),
    );
    ext
}

/// One method's measured medians (a line with points) and its fit's extrapolation.
fn draw_method<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>,
    cs: &[&CellReport],
    fits: &[FitReport],
    s: CloseMethod,
    open: u64,
) -> Result<(), PlotError> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    let col = color(s);
    let mut pts: Vec<(f64, f64)> = cs
        .iter()
        .filter(|c| c.strategy == s && c.median_ns > 0)
        .map(|c| (c.nofile as f64, c.median_ns as f64 / 1e6))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart
        .draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
        .map_err(err)?
        .label(s.name())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))
        .map_err(err)?;
    if let (Some(f), Some(&last)) = (
        fits.iter().find(|f| f.strategy == s && f.open_fds == open),
        pts.last(),
    ) {
        chart
            .draw_series(DashedLineSeries::new(
                extrapolation(f, last),
                6,
                4,
                col.stroke_width(1),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// The published measurements (SBCL, D), as crosses.
fn draw_published<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>,
) -> Result<(), PlotError> {
    for (i, p) in PUBLISHED.iter().enumerate() {
        let col = if i == 0 { BLACK } else { RGBColor(90, 90, 90) };
        let marks = [
            (p.nofile as f64, p.loop_s * 1e3 / p.spawns as f64),
            (p.nofile as f64, p.close_range_s * 1e3 / p.spawns as f64),
        ];
        chart
            .draw_series(
                marks
                    .iter()
                    .map(move |&m| Cross::new(m, 6, col.stroke_width(2))),
            )
            .map_err(|e| PlotError::Draw(e.to_string()))?
            .label(format!("{} loop / close_range", p.who))
            .legend(move |(x, y)| Cross::new((x + 10, y), 5, col.stroke_width(2)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::report::{fits, tests::sample};
    use super::*;

    #[test]
    fn renders_svg_with_title_axes_and_legend() {
        let dir = std::env::temp_dir().join(format!("fdaudit-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cells = sample();
        let f = fits(&cells);
        let svg = dir.join("bench.svg");
        plot(&svg, &cells, &f, "fdaudit bench test").expect("draws svg");
        let text = std::fs::read_to_string(&svg).expect("reads svg");
        for want in [
            "fdaudit bench test",
            "RLIMIT_NOFILE",
            "close-loop",
            "close-range",
            "poll-scan",
            "SBCL",
            "3 fds open",
        ] {
            assert!(text.contains(want), "svg lacks {want:?}");
        }
        let png = dir.join("bench.png");
        plot(&png, &cells, &f, "fdaudit bench test").expect("draws png");
        let bytes = std::fs::read(&png).expect("reads png");
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        assert!(matches!(
            plot(&dir.join("x.jpg"), &cells, &f, "t"),
            Err(PlotError::Extension(_))
        ));
        std::fs::remove_dir_all(&dir).expect("cleans up");
    }
}
