//! What `bench -- CMD` reports per NOFILE: the user's spawns (cost, strategy, closing
//! calls, leaks), a fit of the cost against NOFILE, and their tables for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::report::CellReport;
use crate::engine::strategy::Strategy;
use crate::output::color::Paint;
use crate::output::fmt_ns;
use crate::output::table::{Cell, Col, Table, Term};
use crate::stats::{self, LinearFit};

/// One spawn of the user's spawner tree, as the tracer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserSpawn {
    /// Fork to exec less the probes' own cost ([`Spawn::window_corrected_ns`]).
    pub window_ns: u64,
    pub strategy: Strategy,
    pub close_calls: u64,
    pub close_range_calls: u64,
    /// Fds that crossed the exec, less those CMD itself inherited from fdaudit's caller.
    pub leaked_fds: u64,
}

/// What one run of CMD at one NOFILE gave.
#[derive(Debug, Default)]
pub struct UserRun {
    pub spawns: Vec<UserSpawn>,
    /// CMD's exit code (128+N when killed by signal N); None when a signal stopped bench.
    pub exit_code: Option<u8>,
}

/// The user's spawner at one NOFILE (`"type":"user_cell"`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UserCellReport {
    /// CMD ARGS… as one line (lossy UTF-8).
    pub spawner: String,
    pub nofile: u64,
    /// Runs of CMD, and those that exited non-zero (or were killed).
    pub runs: u64,
    pub failed_runs: u64,
    /// Spawns (fork to exec) seen over all runs.
    pub spawns: u64,
    /// Fork to exec, probe cost taken out: median and 95th percentile (null: no spawns).
    pub window_median_ns: Option<u64>,
    pub window_p95_ns: Option<u64>,
    /// The most common strategy (null: no spawns), and whether others were seen too.
    pub strategy: Option<&'static str>,
    pub strategy_mixed: bool,
    /// Spawns per strategy.
    pub strategy_counts: BTreeMap<&'static str, u64>,
    /// Medians per spawn (null: no spawns).
    pub close_calls_per_spawn: Option<u64>,
    pub close_range_calls_per_spawn: Option<u64>,
    pub leaked_fds_per_spawn: Option<u64>,
    /// Leaked fds over all spawns.
    pub leaked_fd_count: u64,
}

/// The user's per-spawn cost against NOFILE (`"type":"user_fit"`): ns = a + b·NOFILE.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UserFitReport {
    pub spawner: String,
    /// b, ns per unit of NOFILE (3 decimals), and its 95% half-width (null: two limits).
    #[serde(serialize_with = "crate::output::round3")]
    pub ns_per_fd: f64,
    #[serde(serialize_with = "crate::output::round3_opt")]
    pub ns_per_fd_ci95: Option<f64>,
    /// The data show b > 0 at 95% confidence: the spawner's cost grows with NOFILE.
    pub slope_significant: bool,
    #[serde(serialize_with = "crate::output::round_ns")]
    pub intercept_ns: f64,
    #[serde(serialize_with = "crate::output::round3")]
    pub r2: f64,
    pub limits_fitted: usize,
}

/// One cell from the runs at `nofile`.
pub fn user_cell(spawner: &str, nofile: u64, runs: &[UserRun]) -> UserCellReport {
    let spawns: Vec<&UserSpawn> = runs.iter().flat_map(|r| &r.spawns).collect();
    let med =
        |f: fn(&UserSpawn) -> u64| stats::median(&spawns.iter().map(|s| f(s)).collect::<Vec<_>>());
    let windows: Vec<u64> = spawns.iter().map(|s| s.window_ns).collect();
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    for s in &spawns {
        *counts.entry(s.strategy.as_str()).or_default() += 1;
    }
    // The most common; a tie goes to the costlier one (it is what to fix).
    let strategy = counts
        .iter()
        .max_by_key(|(name, n)| {
            let rank = Strategy::from_name(name)
                .and_then(|s| s.cost_rank())
                .unwrap_or(0);
            (**n, rank)
        })
        .map(|(name, _)| *name);
    UserCellReport {
        spawner: spawner.to_owned(),
        nofile,
        runs: runs.len() as u64,
        failed_runs: runs.iter().filter(|r| r.exit_code != Some(0)).count() as u64,
        spawns: spawns.len() as u64,
        window_median_ns: stats::median(&windows),
        window_p95_ns: stats::percentile(&windows, 95.0),
        strategy,
        strategy_mixed: counts.len() > 1,
        strategy_counts: counts,
        close_calls_per_spawn: med(|s| s.close_calls),
        close_range_calls_per_spawn: med(|s| s.close_range_calls),
        leaked_fds_per_spawn: med(|s| s.leaked_fds),
        leaked_fd_count: spawns.iter().map(|s| s.leaked_fds).sum(),
    }
}

/// The fit of the median window against NOFILE, over the cells with spawns (≥ 2 limits).
pub fn user_fit(cells: &[UserCellReport]) -> Option<UserFitReport> {
    let pts: Vec<(f64, f64)> = cells
        .iter()
        .filter_map(|c| Some((c.nofile as f64, c.window_median_ns? as f64)))
        .collect();
    let f = LinearFit::fit(&pts)?;
    Some(UserFitReport {
        spawner: cells.first()?.spawner.clone(),
        ns_per_fd: f.slope,
        ns_per_fd_ci95: f.slope_ci95(),
        slope_significant: !f.is_flat(),
        intercept_ns: f.intercept,
        r2: f.r2,
        limits_fitted: f.points,
    })
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The strategy column: the most common, `(mixed: …)` with the others' counts.
fn strategy_text(c: &UserCellReport) -> String {
    let Some(s) = c.strategy else {
        return "-".into();
    };
    if !c.strategy_mixed {
        return s.into();
    }
    let all: Vec<String> = c
        .strategy_counts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    format!("{s} (mixed: {})", all.join(", "))
}

/// The built-in cells at `nofile` with the fewest fds open, as `close-range 40.1 µs, …`.
fn builtins_at(builtins: &[CellReport], nofile: u64) -> Option<String> {
    let here: Vec<&CellReport> = builtins.iter().filter(|c| c.nofile == nofile).collect();
    let fewest = here.iter().map(|c| c.open_fds).min()?;
    let parts: Vec<String> = here
        .iter()
        .filter(|c| c.open_fds == fewest)
        .map(|c| format!("{} {}", c.strategy, fmt_ns(c.median_ns as f64)))
        .collect();
    Some(parts.join(", "))
}

/// One table, a row per NOFILE; with built-in cells, their medians at the same NOFILE.
pub fn render(
    cells: &[UserCellReport],
    fit: Option<&UserFitReport>,
    builtins: &[CellReport],
    term: Term,
) -> String {
    let mut out = String::new();
    let Some(first) = cells.first() else {
        return out;
    };
    let intro = format!(
        "`{}`, traced ({} per NOFILE): per spawn, fork to exec less the probes' cost",
        first.spawner,
        crate::output::count(first.runs, "run", "runs")
    );
    let _ = writeln!(out, "{}", term.fill(&intro, 0));
    let mut cols = vec![
        Col::new("NOFILE"),
        Col::new("runs (failed)").short("runs"),
        Col::new("spawns"),
        Col::new("median"),
        Col::new("p95").drop(4),
        Col::new("strategy").text(),
        Col::new("close()").drop(2),
        Col::new("close_range()").short("c_range()").drop(3),
        Col::new("leaked fds").short("leaked"),
    ];
    if !builtins.is_empty() {
        cols.push(
            Col::new("built-ins (median fork→waitpid)")
                .short("built-ins")
                .text()
                .drop(1),
        );
    }
    let mut t = Table::new(cols);
    for c in cells {
        t.add_row(row(c, builtins));
    }
    let _ = writeln!(out, "{}\n", t.render_for(term));
    if let Some(f) = fit {
        let _ = writeln!(out, "{}\n", term.fill(&fit_line(f), 0));
    }
    out
}

/// A row of [`render`]'s table.
fn row(c: &UserCellReport, builtins: &[CellReport]) -> Vec<Cell> {
    let runs = if c.failed_runs > 0 {
        Cell::painted(
            format!("{} ({})", c.runs, c.failed_runs),
            Some(Paint::Alarm),
        )
    } else {
        c.runs.to_string().into()
    };
    let ns = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| fmt_ns(v as f64));
    let mut row = vec![
        c.nofile.to_string().into(),
        runs,
        c.spawns.to_string().into(),
        ns(c.window_median_ns).into(),
        ns(c.window_p95_ns).into(),
        strategy_text(c).into(),
        opt(c.close_calls_per_spawn).into(),
        opt(c.close_range_calls_per_spawn).into(),
        Cell::painted(
            opt(c.leaked_fds_per_spawn),
            c.leaked_fds_per_spawn
                .filter(|&n| n > 0)
                .map(|_| Paint::Warn),
        ),
    ];
    if !builtins.is_empty() {
        row.push(
            builtins_at(builtins, c.nofile)
                .unwrap_or_else(|| "-".into())
                .into(),
        );
    }
    row
}

/// A duration that may be negative (a fitted intercept), as `-155 µs`.
fn signed_ns(ns: f64) -> String {
    if ns < 0.0 {
        format!("-{}", fmt_ns(-ns))
    } else {
        fmt_ns(ns)
    }
}

/// The fit for people: a, b (± its 95% half-width) and what they say.
fn fit_line(f: &UserFitReport) -> String {
    let ci = f
        .ns_per_fd_ci95
        .map_or_else(String::new, |ci| format!(" ± {ci:.3}"));
    let verdict = match (f.limits_fitted, f.slope_significant) {
        (2, _) => "two limits: measure three or more to tell a slope from noise",
        (_, true) => "its cost grows with NOFILE",
        (_, false) => "no growth with NOFILE shown",
    };
    format!(
        "Fit over {} limits: {} + {:.3}{ci} ns·NOFILE per spawn (R² {:.3}): {verdict}",
        f.limits_fitted,
        signed_ns(f.intercept_ns),
        f.ns_per_fd,
        f.r2
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(window_ns: u64, strategy: Strategy, close_calls: u64, leaked: u64) -> UserSpawn {
        UserSpawn {
            window_ns,
            strategy,
            close_calls,
            close_range_calls: 0,
            leaked_fds: leaked,
        }
    }

    #[test]
    fn a_cell_takes_medians_the_common_strategy_and_says_mixed() {
        let runs = vec![
            UserRun {
                spawns: vec![
                    spawn(100, Strategy::CloseLoop, 1021, 0),
                    spawn(300, Strategy::CloseLoop, 1021, 0),
                ],
                exit_code: Some(0),
            },
            UserRun {
                spawns: vec![spawn(200, Strategy::None, 0, 1)],
                exit_code: Some(1),
            },
        ];
        let c = user_cell("sh x", 1024, &runs);
        assert_eq!((c.runs, c.failed_runs, c.spawns), (2, 1, 3));
        assert_eq!(c.window_median_ns, Some(200));
        assert_eq!(c.strategy, Some("close-loop"));
        assert!(c.strategy_mixed);
        assert_eq!(c.close_calls_per_spawn, Some(1021));
        assert_eq!((c.leaked_fds_per_spawn, c.leaked_fd_count), (Some(0), 1));
        assert_eq!(
            strategy_text(&c),
            "close-loop (mixed: close-loop 2, none 1)"
        );
        let empty = user_cell("sh x", 1024, &[]);
        assert_eq!((empty.strategy, empty.window_median_ns), (None, None));
    }

    #[test]
    fn the_table_has_a_row_per_limit_and_the_built_ins_beside() {
        let runs = [UserRun {
            spawns: vec![spawn(2_000_000, Strategy::CloseRange, 1, 0)],
            exit_code: Some(0),
        }];
        let cells = [user_cell("python3 s.py", 1024, &runs)];
        let builtin = |strategy, open_fds, median_ns| CellReport {
            strategy,
            nofile: 1024,
            open_fds,
            spawns: 10,
            failures: 0,
            median_ns,
            p95_ns: median_ns,
            close_range_speedup: None,
            close_calls_per_spawn: None,
            close_range_calls_per_spawn: None,
            fcntl_setfd_calls_per_spawn: None,
            poll_calls_per_spawn: None,
            getdents64_calls_per_spawn: None,
            leaked_fds_per_spawn: None,
            traced_spawns: 0,
            trace_check: None,
        };
        use crate::spawner::CloseMethod;
        let builtins = [
            builtin(CloseMethod::CloseLoop, 3, 1_500_000),
            builtin(CloseMethod::CloseLoop, 1000, 9_000_000),
        ];
        let text = render(&cells, None, &builtins, Term::plain());
        assert!(
            text.starts_with("`python3 s.py`, traced (1 run per NOFILE)"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("1024"))
            .expect("a row");
        assert!(
            row.contains("2.00 ms") && row.contains("close-range"),
            "{row}"
        );
        // The built-in at the fewest open fds only.
        assert!(
            row.contains("close-loop 1.50 ms") && !row.contains("9.00"),
            "{row}"
        );
        let alone = render(&cells, None, &[], Term::plain());
        assert!(!alone.contains("built-ins"), "{alone}");
        assert!(render(&[], None, &builtins, Term::plain()).is_empty());
    }

    #[test]
    fn the_fit_shows_a_spawner_that_grows_with_nofile() {
        let at = |nofile: u64, ns: u64| {
            let runs = [UserRun {
                spawns: vec![spawn(ns, Strategy::CloseLoop, nofile - 3, 0)],
                exit_code: Some(0),
            }];
            user_cell("x", nofile, &runs)
        };
        let cells = [at(1024, 10_000), at(4096, 40_000), at(16384, 160_500)];
        let f = user_fit(&cells).expect("three limits fit");
        assert!(f.slope_significant && f.ns_per_fd > 9.0, "{f:?}");
        assert!(user_fit(&cells[..1]).is_none(), "one limit: no fit");
        assert!(
            fit_line(&f).contains("its cost grows with NOFILE"),
            "{}",
            fit_line(&f)
        );
        assert_eq!(signed_ns(-155_000.0), "-155 µs");
    }
}
