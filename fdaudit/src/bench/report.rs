//! What the bench reports: per-cell results, fits, and their rendering for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::output::color::Paint;
use crate::output::fmt_ns;
use crate::output::table::{Cell, Col, Table, Term};
use crate::spawner::CloseMethod;
use crate::stats::LinearFit;

/// NOFILE values the fit predicts the per-spawn cost at.
pub const PREDICT_AT: [u64; 3] = [65536, 524288, 1048576];

/// A published measurement: 100 spawns of /bin/true at NOFILE 524288.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Published {
    pub who: &'static str,
    /// The loop strategy ours is compared with.
    pub like: CloseMethod,
    pub nofile: u64,
    pub spawns: u64,
    pub loop_s: f64,
    pub close_range_s: f64,
}

/// The figures that started the project.
pub const PUBLISHED: [Published; 2] = [
    Published {
        who: "SBCL run-program (published)",
        like: CloseMethod::CloseLoop,
        nofile: 524288,
        spawns: 100,
        loop_s: 11.63,
        close_range_s: 0.153,
    },
    Published {
        who: "D std.process (published)",
        like: CloseMethod::PollScan,
        nofile: 524288,
        spawns: 100,
        loop_s: 3.876,
        close_range_s: 0.080,
    },
];

/// One cell of the matrix: a strategy at one NOFILE with some fds open.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CellReport {
    pub strategy: CloseMethod,
    pub nofile: u64,
    pub open_fds: u64,
    /// Timed (untraced) spawns.
    pub spawns: u64,
    /// Spawns whose child did not exit 0.
    pub failures: u64,
    pub median_ns: u64,
    pub p95_ns: u64,
    /// This cell's median over close-range's at the same NOFILE and open fds (2 decimals).
    #[serde(serialize_with = "crate::output::round2_opt")]
    pub close_range_speedup: Option<f64>,
    /// Medians over the traced spawns (absent when not traced).
    pub close_calls_per_spawn: Option<u64>,
    pub close_range_calls_per_spawn: Option<u64>,
    pub fcntl_setfd_calls_per_spawn: Option<u64>,
    pub poll_calls_per_spawn: Option<u64>,
    pub getdents64_calls_per_spawn: Option<u64>,
    pub leaked_fds_per_spawn: Option<u64>,
    /// Traced spawns the counts come from.
    pub traced_spawns: u64,
    /// What the traced counts were checked against, when they were: "ok" or the mismatch.
    pub trace_check: Option<String>,
}

/// A fitted cost model for one strategy and fd count: ns per spawn = a + b·NOFILE.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FitReport {
    pub strategy: CloseMethod,
    pub open_fds: u64,
    /// b: nanoseconds per unit of NOFILE (3 decimals).
    #[serde(serialize_with = "crate::output::round3")]
    pub ns_per_fd: f64,
    /// Half-width of b's 95% confidence interval (3 decimals); absent (null) when only two
    /// limits were fitted, which say nothing about it.
    #[serde(serialize_with = "crate::output::round3_opt")]
    pub ns_per_fd_ci95: Option<f64>,
    /// The model predicting beyond the measured limits is flat (the mean cost): true for
    /// the strategies that make a fixed number of syscalls, false for the loops, which
    /// make one per possible fd (see [`CloseMethod::is_loop`]).
    pub flat: bool,
    /// The data show b > 0 at 95% confidence.
    pub slope_significant: bool,
    /// a: nanoseconds per spawn at NOFILE 0 (whole ns).
    #[serde(serialize_with = "crate::output::round_ns")]
    pub intercept_ns: f64,
    /// Coefficient of determination (3 decimals).
    #[serde(serialize_with = "crate::output::round3")]
    pub r2: f64,
    pub limits_fitted: usize,
    pub predictions: Vec<Prediction>,
}

/// The fitted per-spawn cost at one NOFILE.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Prediction {
    pub nofile: u64,
    /// Fitted ns per spawn (whole ns).
    #[serde(serialize_with = "crate::output::round_ns")]
    pub ns: f64,
    /// Beyond the NOFILE values measured.
    pub extrapolated: bool,
}

/// Checks a cell's traced counts against what its strategy must do; `None` if untraced.
pub fn check_traced(c: &CellReport) -> Option<String> {
    let close = c.close_calls_per_spawn?;
    let mut bad = Vec::new();
    if let Some(want) = c.strategy.expected_close_calls(c.nofile, c.open_fds) {
        if close != want {
            bad.push(format!("{close} close() calls, expected {want}"));
        }
    }
    let ranges = c.close_range_calls_per_spawn.unwrap_or(0);
    let want_ranges = match c.strategy {
        CloseMethod::CloseRange | CloseMethod::CloseRangeCloexec => Some(1),
        CloseMethod::None
        | CloseMethod::CloseLoop
        | CloseMethod::FcntlLoop
        | CloseMethod::PosixSpawn => Some(0),
        _ => None,
    };
    if let Some(w) = want_ranges {
        if ranges != w {
            bad.push(format!("{ranges} close_range() calls, expected {w}"));
        }
    }
    if c.strategy == CloseMethod::FcntlLoop {
        let f = c.fcntl_setfd_calls_per_spawn.unwrap_or(0);
        if f != c.nofile - 3 {
            bad.push(format!("{f} F_SETFD calls, expected {}", c.nofile - 3));
        }
    }
    if c.strategy == CloseMethod::PollScan && c.poll_calls_per_spawn != Some(1) {
        bad.push(format!(
            "{} poll() calls, expected 1",
            c.poll_calls_per_spawn.unwrap_or(0)
        ));
    }
    if let Some(leaked) = c.leaked_fds_per_spawn {
        let want = if c.strategy.closes_fds() {
            0
        } else {
            c.open_fds.saturating_sub(3)
        };
        if leaked != want {
            bad.push(format!("{leaked} fds leaked, expected {want}"));
        }
    }
    Some(if bad.is_empty() {
        "ok".to_string()
    } else {
        bad.join("; ")
    })
}

/// Fills in each cell's speed-up of close-range over it.
pub fn add_speedups(cells: &mut [CellReport]) {
    let base: BTreeMap<(u64, u64), u64> = cells
        .iter()
        .filter(|c| c.strategy == CloseMethod::CloseRange)
        .map(|c| ((c.nofile, c.open_fds), c.median_ns))
        .collect();
    for c in cells.iter_mut() {
        c.close_range_speedup = base
            .get(&(c.nofile, c.open_fds))
            .filter(|&&b| b > 0)
            .map(|&b| c.median_ns as f64 / b as f64);
    }
}

/// Fits ns per spawn against NOFILE for each (strategy, open fds) with ≥ 2 limits.
pub fn fits(cells: &[CellReport]) -> Vec<FitReport> {
    let mut groups: BTreeMap<(u64, CloseMethod), Vec<(f64, f64)>> = BTreeMap::new();
    for c in cells {
        groups
            .entry((c.open_fds, c.strategy))
            .or_default()
            .push((c.nofile as f64, c.median_ns as f64));
    }
    groups
        .into_iter()
        .filter_map(|((open_fds, strategy), pts)| {
            let f = LinearFit::fit(&pts)?;
            let flat = !strategy.is_loop();
            Some(FitReport {
                strategy,
                open_fds,
                ns_per_fd: f.slope,
                ns_per_fd_ci95: f.slope_ci95(),
                flat,
                slope_significant: !f.is_flat(),
                intercept_ns: f.intercept,
                r2: f.r2,
                limits_fitted: f.points,
                predictions: PREDICT_AT
                    .iter()
                    .map(|&n| Prediction {
                        nofile: n,
                        ns: if flat {
                            f.mean_y
                        } else {
                            f.predict(n as f64).max(0.0)
                        },
                        extrapolated: f.extrapolates(n as f64),
                    })
                    .collect(),
            })
        })
        .collect()
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// How the speed-up of close_range over a cell reads: red when the cell costs ten times
/// or more, yellow from twice.
fn speedup_paint(x: f64) -> Option<Paint> {
    if x >= 10.0 {
        Some(Paint::Bad)
    } else if x >= 2.0 {
        Some(Paint::Warn)
    } else {
        None
    }
}

/// One table per NOFILE: each strategy's time, close_range's speed-up over it, and the
/// traced counts when there are any. In a narrow terminal the less telling counts go first.
pub fn render_tables(cells: &[CellReport], hard: u64, term: Term) -> String {
    let traced = cells.iter().any(|c| c.close_calls_per_spawn.is_some());
    let mut by_limit: BTreeMap<u64, Vec<&CellReport>> = BTreeMap::new();
    for c in cells {
        by_limit.entry(c.nofile).or_default().push(c);
    }
    let mut out = String::new();
    for (limit, mut cs) in by_limit {
        cs.sort_by_key(|c| (c.open_fds, c.strategy));
        let hard_note = if limit == hard {
            " (the hard limit)"
        } else {
            ""
        };
        let _ = writeln!(out, "NOFILE {limit}{hard_note}");
        let mut cols = vec![
            Col::new("strategy"),
            Col::new("open fds").short("fds"),
            Col::new("median"),
            Col::new("p95").drop(7),
            Col::new("close_range speed-up").short("speed-up"),
        ];
        if traced {
            cols.extend([
                Col::new("close()"),
                Col::new("close_range()").short("c_range()").drop(3),
                Col::new("F_SETFD").drop(5),
                Col::new("poll()").drop(4),
                Col::new("getdents64()").short("getdents()").drop(6),
                Col::new("leaked fds").short("leaked").drop(1),
                Col::new("trace check").short("check").text().drop(2),
            ]);
        }
        let mut t = Table::new(cols);
        for c in cs {
            let name = if c.failures > 0 {
                format!("{} ({} failed)", c.strategy, c.failures)
            } else {
                c.strategy.to_string()
            };
            let mut row = vec![
                Cell::painted(name, (c.failures > 0).then_some(Paint::Alarm)),
                c.open_fds.to_string().into(),
                fmt_ns(c.median_ns as f64).into(),
                fmt_ns(c.p95_ns as f64).into(),
                c.close_range_speedup.map_or_else(
                    || Cell::from("-"),
                    |s| Cell::painted(format!("{s:.1}×"), speedup_paint(s)),
                ),
            ];
            if traced {
                let check = c.trace_check.clone().unwrap_or_else(|| "-".into());
                let bad_check = check != "ok" && check != "-";
                row.extend([
                    opt(c.close_calls_per_spawn).into(),
                    opt(c.close_range_calls_per_spawn).into(),
                    opt(c.fcntl_setfd_calls_per_spawn).into(),
                    opt(c.poll_calls_per_spawn).into(),
                    opt(c.getdents64_calls_per_spawn).into(),
                    Cell::painted(
                        opt(c.leaked_fds_per_spawn),
                        c.leaked_fds_per_spawn
                            .filter(|&n| n > 0)
                            .map(|_| Paint::Warn),
                    ),
                    Cell::painted(check, bad_check.then_some(Paint::Alarm)),
                ]);
            }
            t.add_row(row);
        }
        let _ = writeln!(out, "{}\n", t.render_for(term));
    }
    out
}

/// The fitted per-fd cost of each strategy and what it predicts beyond the measured limits.
pub fn render_fits(fits: &[FitReport], term: Term) -> String {
    let mut out = String::new();
    let Some(first) = fits.first() else {
        return "No fit: measure at least two NOFILE limits (three or more for a fair R²).\n"
            .into();
    };
    out.push_str(&fits_intro(first, term));
    let mut t = Table::new(fit_columns(first));
    for f in fits {
        t.add_row(fit_row(f));
    }
    let _ = writeln!(out, "{}\n", t.render_for(term));
    out
}

/// What the fit table shows, and a warning when two limits make its statistics meaningless.
fn fits_intro(first: &FitReport, term: Term) -> String {
    let mut out = String::new();
    let two = first.limits_fitted < 3;
    let intro = format!(
        "Fitted per-spawn cost = a + b·NOFILE (least squares over {} limits{}). The model \
         that predicts is linear for the loops (one syscall per possible fd) and flat (the mean) \
         for the rest (a fixed number of syscalls); columns marked extrapolated lie beyond the \
         largest NOFILE measured",
        first.limits_fitted,
        if two {
            ""
        } else {
            ", b ± 95% CI; `b>0` says whether the data show a slope"
        }
    );
    let _ = writeln!(out, "{}", term.fill(&intro, 0));
    if two {
        let _ = writeln!(
            out,
            "{}",
            term.fill(
                "(two limits: a line fits them exactly, so b has no confidence interval and \
                 R² means nothing; measure three or more for those)",
                0
            )
        );
    }
    out
}

/// The fit table's columns: the fit itself, then one per predicted NOFILE (as in `first`).
fn fit_columns(first: &FitReport) -> Vec<Col> {
    let mut cols = vec![
        Col::new("strategy"),
        Col::new("open fds").short("fds"),
        Col::new("b per fd"),
        Col::new("a").drop(3),
        Col::new("R²").drop(5),
        Col::new("b>0").drop(4),
        Col::new("model").drop(2),
    ];
    for p in &first.predictions {
        let (long, short) = if p.extrapolated {
            (
                format!("at {} (extrapolated)", p.nofile),
                format!("at {} (ext)", p.nofile),
            )
        } else {
            (format!("at {}", p.nofile), format!("at {}", p.nofile))
        };
        // The published figures are at 524288: that column stays longest.
        let drop = if p.nofile == 524288 { 0 } else { 1 };
        cols.push(Col::new(long).short(short).drop(drop));
    }
    cols
}

/// One fit's row of the fit table.
fn fit_row(f: &FitReport) -> Vec<String> {
    let mut row = vec![
        f.strategy.to_string(),
        f.open_fds.to_string(),
        match f.ns_per_fd_ci95 {
            Some(ci) => format!("{:.2} ± {ci:.2} ns", f.ns_per_fd),
            None => format!("{:.2} ns", f.ns_per_fd),
        },
        if f.intercept_ns < 0.0 {
            format!("-{}", fmt_ns(-f.intercept_ns))
        } else {
            fmt_ns(f.intercept_ns)
        },
        // Two points: a line through them fits exactly; R² and the slope test say nothing.
        if f.limits_fitted > 2 {
            format!("{:.3}", f.r2)
        } else {
            "-".to_string()
        },
        match (f.ns_per_fd_ci95, f.slope_significant) {
            (None, _) => "-",
            (Some(_), true) => "yes",
            (Some(_), false) => "no",
        }
        .to_string(),
        if f.flat { "flat" } else { "linear" }.to_string(),
    ];
    row.extend(f.predictions.iter().map(|p| fmt_ns(p.ns)));
    row
}

/// Ours (extrapolated from the fits with the fewest open fds) beside the published figures.
pub fn render_published(fits: &[FitReport], term: Term) -> String {
    let mut out = String::new();
    let Some(open) = fits.iter().map(|f| f.open_fds).min() else {
        return out;
    };
    let at = |s: CloseMethod, n: u64| {
        fits.iter()
            .find(|f| f.strategy == s && f.open_fds == open)
            .and_then(|f| f.predictions.iter().find(|p| p.nofile == n).cloned())
    };
    let intro = format!(
        "100 spawns of /bin/true at NOFILE 524288: published figures beside this machine's \
         (fit with {open} open fds)"
    );
    let _ = writeln!(out, "{}", term.fill(&intro, 0));
    let mut t = Table::new([
        Col::new("who").text(),
        Col::new("loop"),
        Col::new("close_range"),
        Col::new("close_range speed-up").short("speed-up"),
    ]);
    for p in PUBLISHED {
        t.add_row(vec![
            p.who.to_string(),
            format!("{} s", p.loop_s),
            format!("{} s", p.close_range_s),
            format!("{:.0}×", p.loop_s / p.close_range_s),
        ]);
        let (Some(l), Some(r)) = (at(p.like, p.nofile), at(CloseMethod::CloseRange, p.nofile))
        else {
            continue;
        };
        let tag = if l.extrapolated { ", extrapolated" } else { "" };
        t.add_row(vec![
            format!("fdaudit {} (this machine{tag})", p.like),
            fmt_ns(l.ns * p.spawns as f64),
            fmt_ns(r.ns * p.spawns as f64),
            if r.ns > 0.0 {
                format!("{:.0}×", l.ns / r.ns)
            } else {
                "-".into()
            },
        ]);
    }
    let _ = writeln!(out, "{}\n", t.render_for(term));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn cell(
        strategy: CloseMethod,
        nofile: u64,
        open_fds: u64,
        median_ns: u64,
    ) -> CellReport {
        CellReport {
            strategy,
            nofile,
            open_fds,
            spawns: 20,
            failures: 0,
            median_ns,
            p95_ns: median_ns + median_ns / 10,
            close_range_speedup: None,
            close_calls_per_spawn: None,
            close_range_calls_per_spawn: None,
            fcntl_setfd_calls_per_spawn: None,
            poll_calls_per_spawn: None,
            getdents64_calls_per_spawn: None,
            leaked_fds_per_spawn: None,
            traced_spawns: 0,
            trace_check: None,
        }
    }

    /// close-loop costs 300 µs + 250 ns per fd; close-range a flat 300 µs.
    pub(crate) fn sample() -> Vec<CellReport> {
        let mut v = Vec::new();
        for l in [1024, 4096, 16384, 20000] {
            v.push(cell(CloseMethod::CloseLoop, l, 3, 300_000 + 250 * l));
            v.push(cell(CloseMethod::CloseRange, l, 3, 300_000));
            v.push(cell(CloseMethod::PollScan, l, 3, 300_000 + 100 * l));
        }
        add_speedups(&mut v);
        v
    }

    #[test]
    fn speedups_are_over_close_range_at_the_same_cell() {
        let v = sample();
        let at = |s, l| {
            v.iter()
                .find(|c| c.strategy == s && c.nofile == l)
                .and_then(|c| c.close_range_speedup)
                .expect("speed-up")
        };
        assert!((at(CloseMethod::CloseLoop, 20000) - 5_300_000.0 / 300_000.0).abs() < 1e-9);
        assert_eq!(at(CloseMethod::CloseRange, 1024), 1.0);
    }

    #[test]
    fn fits_recover_slopes_and_flag_extrapolation() {
        let f = fits(&sample());
        let loop_fit = f
            .iter()
            .find(|f| f.strategy == CloseMethod::CloseLoop)
            .expect("loop fit");
        assert!((loop_fit.ns_per_fd - 250.0).abs() < 1e-6, "{loop_fit:?}");
        assert!((loop_fit.r2 - 1.0).abs() < 1e-9);
        let p = &loop_fit.predictions[1];
        assert_eq!(p.nofile, 524288);
        assert!(p.extrapolated);
        assert!((p.ns - (300_000.0 + 250.0 * 524288.0)).abs() < 1e-3);
        let flat = f
            .iter()
            .find(|f| f.strategy == CloseMethod::CloseRange)
            .expect("flat fit");
        assert!(flat.ns_per_fd.abs() < 1e-9, "{flat:?}");
    }

    #[test]
    fn formats_durations() {
        assert_eq!(fmt_ns(512.0), "512 ns");
        assert_eq!(fmt_ns(1_530_000.0), "1.53 ms");
        assert_eq!(fmt_ns(11_630_000_000.0), "11.6 s");
        assert_eq!(fmt_ns(80_000.0), "80.0 µs");
    }

    #[test]
    fn renders_tables_fits_and_published() {
        let v = sample();
        let tables = render_tables(&v, 20000, Term::plain());
        assert!(tables.contains("NOFILE 20000 (the hard limit)"), "{tables}");
        assert!(tables.contains("NOFILE 1024\n"), "{tables}");
        assert!(
            tables.contains("17.7×"),
            "close-loop speed-up at 20000: {tables}"
        );
        assert!(
            !tables.contains("close()"),
            "no traced columns untraced: {tables}"
        );
        let f = fits(&v);
        let fits_text = render_fits(&f, Term::plain());
        assert!(
            fits_text.contains("at 524288 (extrapolated)"),
            "{fits_text}"
        );
        assert!(fits_text.contains("250.00 ± 0.00 ns"), "{fits_text}");
        assert!(
            fits_text.contains("flat") && fits_text.contains("linear"),
            "{fits_text}"
        );
        let published = render_published(&f, Term::plain());
        assert!(
            published.contains("11.63 s") && published.contains("76×"),
            "{published}"
        );
        // 100 × (300 µs + 250 ns × 524288) = 13.1 s.
        assert!(published.contains("13.1 s"), "{published}");
        assert!(
            published.contains("this machine, extrapolated"),
            "{published}"
        );
    }

    #[test]
    fn two_limits_give_no_interval() {
        let v: Vec<CellReport> = sample()
            .into_iter()
            .filter(|c| c.nofile == 1024 || c.nofile == 20000)
            .collect();
        let f = fits(&v);
        assert!(f
            .iter()
            .all(|f| f.ns_per_fd_ci95.is_none() && !f.slope_significant));
        let text = render_fits(&f, Term::plain());
        assert!(!text.contains("inf") && !text.contains('±'), "{text}");
        assert!(
            text.contains("250.00 ns") && text.contains("no confidence interval"),
            "{text}"
        );
        let json = serde_json::to_string(&f[0]).expect("serialises");
        assert!(json.contains("\"ns_per_fd_ci95\":null"), "{json}");
    }

    #[test]
    fn traced_checks() {
        let mut c = cell(CloseMethod::CloseLoop, 1024, 3, 1);
        assert_eq!(check_traced(&c), None);
        c.close_calls_per_spawn = Some(1021);
        c.close_range_calls_per_spawn = Some(0);
        c.leaked_fds_per_spawn = Some(0);
        assert_eq!(check_traced(&c).as_deref(), Some("ok"));
        c.close_calls_per_spawn = Some(5);
        assert_eq!(
            check_traced(&c).as_deref(),
            Some("5 close() calls, expected 1021")
        );
        let mut n = cell(CloseMethod::None, 1024, 1000, 1);
        n.close_calls_per_spawn = Some(0);
        n.leaked_fds_per_spawn = Some(997);
        assert_eq!(check_traced(&n).as_deref(), Some("ok"));
        let mut r = cell(CloseMethod::CloseRange, 1024, 1000, 1);
        r.close_calls_per_spawn = Some(0);
        r.close_range_calls_per_spawn = Some(2);
        r.leaked_fds_per_spawn = Some(0);
        assert_eq!(
            check_traced(&r).as_deref(),
            Some("2 close_range() calls, expected 1")
        );
    }
}
