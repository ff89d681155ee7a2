//! `--plot`: per-spawn time against NOFILE as small multiples: one panel per strategy, all
//! on the same log-log scales, one line per number of open fds, labelled at its end (no
//! legend to look up). Close-range is drawn in grey in every other panel for comparison,
//! dashed lines extend each fit to the largest NOFILE predicted, crosses mark the published
//! figures. (One shared panel drew ten strategies whose costs differ by a few per cent as
//! one smudge.)

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{CellReport, FitReport, PREDICT_AT, PUBLISHED};
use crate::spawner::CloseMethod;

/// Errors while drawing the plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("plot file must end in .svg or .png: {0}")]
    Extension(String),
    #[error("cannot write the plot {path}: {why}")]
    Unwritable { path: String, why: String },
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

/// The plot's format, from the file name's extension.
fn format_of(path: &Path) -> Result<&'static str, PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "svg" => Ok("svg"),
        "png" => Ok("png"),
        _ => Err(PlotError::Extension(path.display().to_string())),
    }
}

/// Checks, before anything is measured, that the plot can be written to `path`: a known
/// extension, an existing writable directory, not a directory itself, and a font to draw
/// the text with.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    format_of(path)?;
    let unwritable = |why: String| PlotError::Unwritable {
        path: path.display().to_string(),
        why,
    };
    if path.is_dir() {
        return Err(unwritable("it is a directory".into()));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(unwritable(format!("no directory {}", dir.display())));
    }
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(|_| unwritable("the path contains a NUL byte".into()))?;
    // SAFETY: access reads a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(unwritable(format!(
            "directory {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )));
    }
    register_font()
}

/// Panels per row.
const COLS: usize = 5;
const PANEL: (u32, u32) = (380, 330);
/// Space right of each panel's plotting area for the end-of-line labels.
const LABEL_MARGIN: u32 = 78;

/// Draws the plot into `path` (.svg or .png, by extension).
pub fn plot(
    path: &Path,
    cells: &[CellReport],
    fits: &[FitReport],
    title: &str,
) -> Result<(), PlotError> {
    let format = format_of(path)?;
    if cells.is_empty() {
        return Err(PlotError::Empty);
    }
    register_font()?;
    let n = strategies(cells).len();
    let cols = n.clamp(1, COLS);
    let rows = n.div_ceil(COLS).max(1);
    let size = (PANEL.0 * cols as u32, PANEL.1 * rows as u32 + 70);
    if format == "svg" {
        let root = SVGBackend::new(path, size).into_drawing_area();
        draw(&root, cells, fits, title, (rows, cols))?;
        root.present().map_err(|e| PlotError::Draw(e.to_string()))
    } else {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        draw(&root, cells, fits, title, (rows, cols))?;
        root.present().map_err(|e| PlotError::Draw(e.to_string()))
    }
}

fn strategies(cells: &[CellReport]) -> Vec<CloseMethod> {
    let mut v: Vec<CloseMethod> = cells.iter().map(|c| c.strategy).collect();
    v.sort();
    v.dedup();
    v
}

/// Colour of the line for the `i`-th number of open fds.
fn open_color(i: usize) -> RGBColor {
    const C: [RGBColor; 4] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
    ];
    C[i % C.len()]
}

const GREY: RGBColor = RGBColor(150, 150, 150);

/// Spreads label positions (pixel y, sorted or not) so neighbours are at least `gap` apart,
/// moving each as little as possible and keeping them inside `lo..=hi`.
pub fn spread_labels(ys: &[i32], gap: i32, lo: i32, hi: i32) -> Vec<i32> {
    let mut order: Vec<usize> = (0..ys.len()).collect();
    order.sort_by_key(|&i| ys[i]);
    let mut placed: Vec<i32> = order.iter().map(|&i| ys[i].clamp(lo, hi)).collect();
    for k in 1..placed.len() {
        placed[k] = placed[k].max(placed[k - 1] + gap);
    }
    if let Some(last) = placed.last_mut() {
        *last = (*last).min(hi);
    }
    for k in (0..placed.len().saturating_sub(1)).rev() {
        placed[k] = placed[k].min(placed[k + 1] - gap);
    }
    let mut out = vec![0; ys.len()];
    for (k, &i) in order.iter().enumerate() {
        out[i] = placed[k];
    }
    out
}

/// A series in one panel: its points (measured), the dashed extension, colour and label.
struct Series {
    measured: Vec<(f64, f64)>,
    extension: Vec<(f64, f64)>,
    color: RGBColor,
    width: u32,
    label: String,
}

fn series_for(
    cells: &[CellReport],
    fits: &[FitReport],
    s: CloseMethod,
    open: u64,
    color: RGBColor,
    width: u32,
    label: String,
) -> Option<Series> {
    let mut measured: Vec<(f64, f64)> = cells
        .iter()
        .filter(|c| c.strategy == s && c.open_fds == open && c.median_ns > 0)
        .map(|c| (c.nofile as f64, c.median_ns as f64 / 1e6))
        .collect();
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let &last = measured.last()?;
    let mut extension = Vec::new();
    if let Some(f) = fits.iter().find(|f| f.strategy == s && f.open_fds == open) {
        // Flat fits: a level line at the mean, from the last measured NOFILE.
        let start = if f.flat {
            (last.0, f.predictions.first().map_or(last.1, |p| p.ns / 1e6))
        } else {
            last
        };
        extension.push(start);
        extension.extend(
            f.predictions
                .iter()
                .filter(|p| p.extrapolated && p.ns > 0.0)
                .map(|p| (p.nofile as f64, p.ns / 1e6)),
        );
        if extension.len() < 2 {
            extension.clear();
        }
    }
    Some(Series {
        measured,
        extension,
        color,
        width,
        label,
    })
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    cells: &[CellReport],
    fits: &[FitReport],
    title: &str,
    (rows, cols): (usize, usize),
) -> Result<(), PlotError> {
    let e = draw_error::<DB::ErrorType>;
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(e)?;
    let (body, key) = {
        let h = root.dim_in_pixel().1;
        root.split_vertically(h.saturating_sub(26))
    };
    key.draw(&Text::new(
        "One panel per strategy, same log scales. Lines: median wall time per spawn, one per \
         number of fds open in the parent (labelled at the end); dashed: the fitted model \
         extrapolated; grey: close-range for comparison; ×: published figures.",
        (10, 4),
        ("sans-serif", 13),
    ))
    .map_err(e)?;
    let opens: Vec<u64> = cells
        .iter()
        .map(|c| c.open_fds)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let x_min = cells.iter().map(|c| c.nofile).min().unwrap_or(1) as f64 / 1.3;
    let x_max = PREDICT_AT[PREDICT_AT.len() - 1] as f64 * 1.3;
    let range = ((x_min, x_max), y_range(cells, fits));
    let panels = body.split_evenly((rows, cols));
    for (area, s) in panels.iter().zip(strategies(cells)) {
        let mut series = Vec::new();
        if s != CloseMethod::CloseRange {
            if let Some(&open) = opens.first() {
                let cr = CloseMethod::CloseRange;
                series.extend(series_for(
                    cells,
                    fits,
                    cr,
                    open,
                    GREY,
                    1,
                    "close-range".into(),
                ));
            }
        }
        for (i, &open) in opens.iter().enumerate() {
            let label = format!("{open} fds");
            series.extend(series_for(cells, fits, s, open, open_color(i), 2, label));
        }
        draw_panel(area, s, &series, range)?;
    }
    Ok(())
}

/// y in milliseconds per spawn, over measured, predicted and published values: the same
/// scale in every panel so they compare at a glance.
fn y_range(cells: &[CellReport], fits: &[FitReport]) -> (f64, f64) {
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

/// A panel's chart: log-log, NOFILE against milliseconds per spawn.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>;

/// One strategy's panel: axes, its series, the published figures it compares with, and
/// the labels at the line ends.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: CloseMethod,
    series: &[Series],
    range: ((f64, f64), (f64, f64)),
) -> Result<(), PlotError> {
    let mut chart = panel_axes(area, s, range)?;
    let ends = draw_series(&mut chart, series)?;
    draw_published(area, &mut chart, s)?;
    draw_end_labels(area, &chart, series, &ends)
}

fn draw_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// The panel's chart with its caption, axes and tick labels drawn.
fn panel_axes<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: CloseMethod,
    ((x_min, x_max), (y_min, y_max)): ((f64, f64), (f64, f64)),
) -> Result<Chart<'a, DB>, PlotError> {
    let e = draw_error::<DB::ErrorType>;
    let mut chart = ChartBuilder::on(area)
        .caption(s.name(), ("sans-serif", 16))
        .margin(6)
        .margin_right(LABEL_MARGIN)
        .x_label_area_size(34)
        .y_label_area_size(44)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("RLIMIT_NOFILE")
        .y_desc("ms per spawn")
        .x_labels(4)
        .x_label_formatter(&|x| {
            if *x >= 1e6 {
                format!("{:.0}M", x / 1e6)
            } else if *x >= 1e3 {
                format!("{:.0}k", x / 1e3)
            } else {
                format!("{x:.0}")
            }
        })
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y}")
            }
        })
        .label_style(("sans-serif", 11))
        .axis_desc_style(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    Ok(chart)
}

/// Each series' measured line (with dots unless it is a thin comparison line) and dashed
/// extension; returns where each line ends, in backend pixels.
fn draw_series<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    series: &[Series],
) -> Result<Vec<(i32, i32)>, PlotError> {
    let e = draw_error::<DB::ErrorType>;
    let mut ends = Vec::new();
    for sr in series {
        let style = sr.color.stroke_width(sr.width);
        chart
            .draw_series(LineSeries::new(sr.measured.clone(), style))
            .map_err(e)?;
        if sr.width > 1 {
            let dots = sr
                .measured
                .iter()
                .map(|&p| Circle::new(p, 3, sr.color.filled()));
            chart.draw_series(dots).map_err(e)?;
        }
        if !sr.extension.is_empty() {
            let dashed =
                DashedLineSeries::new(sr.extension.clone(), 6, 4, sr.color.stroke_width(1));
            chart.draw_series(dashed).map_err(e)?;
        }
        let end = *sr
            .extension
            .last()
            .or(sr.measured.last())
            .expect("non-empty");
        ends.push(chart.backend_coord(&end));
    }
    Ok(ends)
}

/// Published figures in the panels of the strategies they compare with.
fn draw_published<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &mut Chart<'_, DB>,
    s: CloseMethod,
) -> Result<(), PlotError> {
    let e = draw_error::<DB::ErrorType>;
    let base = area.get_base_pixel();
    for p in PUBLISHED {
        let who = p.who.split_whitespace().next().unwrap_or(p.who);
        let secs = if p.like == s {
            p.loop_s
        } else if s == CloseMethod::CloseRange {
            p.close_range_s
        } else {
            continue;
        };
        let at = (p.nofile as f64, secs * 1e3 / p.spawns as f64);
        chart
            .draw_series(std::iter::once(Cross::new(at, 5, BLACK.stroke_width(2))))
            .map_err(e)?;
        let (px, py) = chart.backend_coord(&at);
        let style = ("sans-serif", 11)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Right, VPos::Center));
        area.draw(&Text::new(
            who.to_string(),
            (px - base.0 - 8, py - base.1),
            style,
        ))
        .map_err(e)?;
    }
    Ok(())
}

/// Labels at the line ends, right of the plotting area, spread apart, each joined to its
/// line's end by a leader.
fn draw_end_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    series: &[Series],
    ends: &[(i32, i32)],
) -> Result<(), PlotError> {
    let e = draw_error::<DB::ErrorType>;
    let base = area.get_base_pixel();
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let end_ys: Vec<i32> = ends.iter().map(|p| p.1).collect();
    let label_ys = spread_labels(&end_ys, 13, yr.start + 6, yr.end - 6);
    let lx = xr.end + 10;
    for ((sr, end), ly) in series.iter().zip(ends).zip(label_ys) {
        let leader = vec![
            (end.0 - base.0, end.1 - base.1),
            (lx - 2 - base.0, ly - base.1),
        ];
        area.draw(&PathElement::new(leader, sr.color.mix(0.6).stroke_width(1)))
            .map_err(e)?;
        let style = ("sans-serif", 12)
            .into_font()
            .color(&sr.color)
            .pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(
            sr.label.clone(),
            (lx - base.0, ly - base.1),
            style,
        ))
        .map_err(e)?;
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
            "3 fds",
            "One panel per strategy",
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

    #[test]
    fn plot_paths_are_checked_before_measuring() {
        let dir = std::env::temp_dir().join(format!("fdaudit-plotchk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        assert!(check_path(&dir.join("a.svg")).is_ok());
        assert!(
            check_path(&dir.join("a.PNG")).is_ok(),
            "extension case-insensitive"
        );
        assert!(matches!(
            check_path(&dir.join("a.jpg")),
            Err(PlotError::Extension(_))
        ));
        assert!(matches!(
            check_path(&dir.join("a")),
            Err(PlotError::Extension(_))
        ));
        let e = check_path(&dir.join("missing/a.svg")).expect_err("no such directory");
        assert!(e.to_string().contains("no directory"), "{e}");
        let sub = dir.join("d.svg");
        std::fs::create_dir_all(&sub).expect("dir named like a plot");
        let e = check_path(&sub).expect_err("a directory");
        assert!(e.to_string().contains("is a directory"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleans up");
    }

    #[test]
    fn labels_are_spread_apart_within_bounds() {
        // Three labels wanting the same spot, one far away: order kept, gaps of 10.
        let ys = spread_labels(&[50, 50, 52, 200], 10, 0, 300);
        assert_eq!(ys[3], 200);
        let mut near = [ys[0], ys[1], ys[2]];
        near.sort();
        assert!(near[1] - near[0] >= 10 && near[2] - near[1] >= 10, "{ys:?}");
        assert!(
            ys[2] > ys[0] && ys[2] > ys[1],
            "the lowest stays lowest: {ys:?}"
        );
        // Crowded at the bottom edge: pushed up, not past it.
        let ys = spread_labels(&[98, 99, 100], 10, 0, 100);
        assert_eq!(ys.iter().max(), Some(&100));
        assert_eq!(ys.iter().min(), Some(&80));
        assert_eq!(spread_labels(&[], 10, 0, 100), Vec::<i32>::new());
    }
}
