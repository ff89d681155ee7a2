//! The bench matrix: its cells, the timed pass (shuffled rounds of batches), the traced
//! pass, and the per-cell report built from both.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

use super::report::{self, CellReport};
use super::traced::{BenchTracer, TraceError, TracedSpawn};
use crate::output::progress;
use crate::spawner::{CloseMethod, SpawnTime, SpawnerArgs};
use crate::stats;

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellKey {
    pub nofile: u64,
    pub open_fds: u64,
    pub strategy: CloseMethod,
}

/// What the timed and the traced passes measured for one cell.
#[derive(Debug, Default)]
pub struct Samples {
    pub times: Vec<u64>,
    pub failures: u64,
    pub traced: Vec<TracedSpawn>,
}

/// A small deterministic shuffle (xorshift), so runs are reproducible.
pub fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// Runs `fdaudit __spawner` for a cell.
pub struct Runner {
    pub exe: PathBuf,
    pub cmd: Vec<OsString>,
    pub cpu: Option<usize>,
    /// What the command wrote on stderr in the first batch where a spawn exited non-zero:
    /// shown once at the end, beside the failure count.
    pub first_failure_text: std::cell::RefCell<Option<String>>,
}

impl Runner {
    fn spawner_args(&self, k: CellKey, n: u64, wait_stdin: bool) -> SpawnerArgs {
        SpawnerArgs {
            strategy: k.strategy,
            n,
            nofile: Some(k.nofile),
            open_fds: Some(k.open_fds),
            cpu: self.cpu,
            wait_stdin,
            json: true,
            cmd: self.cmd.clone(),
        }
    }

    /// Runs one batch of `n` spawns; returns each spawn's (ns, exit code).
    pub fn batch(&self, k: CellKey, n: u64) -> anyhow::Result<Vec<(u64, i32)>> {
        let out = Command::new(&self.exe)
            .arg("__spawner")
            .args(self.spawner_args(k, n, false).to_args())
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("failed to run fdaudit __spawner")?;
        if out.status.code() == Some(crate::exit::ERROR.into()) || out.status.code().is_none() {
            bail!(
                "__spawner for {} at NOFILE {} with {} fds failed ({}): {}",
                k.strategy,
                k.nofile,
                k.open_fds,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let times: Vec<(u64, i32)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<SpawnTime>(l).ok())
            .filter(|t| t.kind == "spawn_time")
            .map(|t| (t.ns, t.exit_code))
            .collect();
        if times.len() as u64 != n {
            bail!(
                "__spawner for {} reported {} spawns, expected {n}",
                k.strategy,
                times.len()
            );
        }
        if times.iter().any(|&(_, code)| code != 0) {
            let mut first = self.first_failure_text.borrow_mut();
            if first.is_none() {
                let text = String::from_utf8_lossy(&out.stderr);
                *first = Some(text.lines().next().unwrap_or("").trim().to_string());
            }
        }
        Ok(times)
    }

    pub fn traced(
        &self,
        tracer: &mut BenchTracer,
        k: CellKey,
        n: u64,
    ) -> Result<Vec<TracedSpawn>, TraceError> {
        let mut c = Command::new(&self.exe);
        c.arg("__spawner")
            .args(self.spawner_args(k, n, true).to_args());
        tracer.run(c, n)
    }
}

fn median_of(v: &[TracedSpawn], f: impl Fn(&TracedSpawn) -> u64) -> Option<u64> {
    stats::median(&v.iter().map(f).collect::<Vec<_>>())
}

/// Every cell that fits: `3 ≤ open fds < NOFILE`, each limit × fd count × method.
pub fn cell_keys(limits: &[u64], open_fds: &[u64], methods: &[CloseMethod]) -> Vec<CellKey> {
    let mut keys = Vec::new();
    for &nofile in limits {
        for &k in open_fds {
            if k < 3 || k + 1 > nofile {
                crate::output::stream::note(
                    crate::output::stream::Level::Note,
                    &format!("skipping {k} open fds at NOFILE {nofile} (need 3 ≤ fds < NOFILE)"),
                );
                continue;
            }
            keys.extend(methods.iter().map(|&strategy| CellKey {
                nofile,
                open_fds: k,
                strategy,
            }));
        }
    }
    keys
}

/// The timed pass: `rounds` of one batch per cell, cells shuffled each round; the first
/// spawn of every batch is a warm-up and is dropped.
///
/// Ctrl-C (SIGINT to the terminal's whole group, spawners included), SIGTERM or SIGHUP
/// stops it: the batch under way is lost, the cells measured so far are returned (cells
/// without a single batch left out) and [`Interrupted`] says how far it got.
pub fn time_cells(
    runner: &Runner,
    keys: &[CellKey],
    n: u64,
    batch: u64,
) -> anyhow::Result<(BTreeMap<CellKey, Samples>, Option<Interrupted>)> {
    let rounds = n.div_ceil(batch);
    let bar = progress(rounds * keys.len() as u64, "timing", " eta {eta} {msg}");
    let mut samples: BTreeMap<CellKey, Samples> =
        keys.iter().map(|&k| (k, Samples::default())).collect();
    let mut order = keys.to_vec();
    crate::signals::install_stop();
    let mut done = 0u64;
    'rounds: for round in 0..rounds {
        let n = batch.min(n - round * batch);
        shuffle(&mut order, round + 1);
        for &k in &order {
            if crate::signals::received().is_some() {
                break 'rounds;
            }
            if done == 1 {
                crate::engine::pause::at("bench-timed");
            }
            bar.set_message(format!("{} @ {}", k.strategy, k.nofile));
            let times = match runner.batch(k, n + 1) {
                Ok(t) => t,
                // The spawner got the terminal's Ctrl-C too: its batch is lost, not an error.
                Err(_) if crate::signals::received().is_some() => break 'rounds,
                Err(e) => return Err(e),
            };
            done += 1;
            let s = samples.get_mut(&k).expect("every key has samples");
            for &(ns, code) in &times[1..] {
                s.times.push(ns);
                if code != 0 {
                    s.failures += 1;
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if crate::signals::received().is_none() {
        return Ok((samples, None));
    }
    samples.retain(|_, s| !s.times.is_empty());
    Ok((
        samples,
        Some(Interrupted {
            batches_done: done,
            batches: rounds * keys.len() as u64,
        }),
    ))
}

/// How far an interrupted timed pass got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted {
    pub batches_done: u64,
    pub batches: u64,
}

/// The traced pass (root only), apart so tracing does not slow the timed spawns: `spawns`
/// traced spawns per cell. Says why and leaves the traced columns empty when it cannot run.
/// A stop signal ends it: the cells traced so far keep their columns, and the number of
/// cells left untraced is returned (`None`: the pass ran to its end).
pub fn trace_cells(
    runner: &Runner,
    samples: &mut BTreeMap<CellKey, Samples>,
    spawns: u64,
) -> anyhow::Result<Option<usize>> {
    let mut tracer = match BenchTracer::start() {
        Ok(t) => t,
        Err(e) => {
            crate::output::stream::note(
                crate::output::stream::Level::Note,
                &format!("traced columns skipped: {e:#}"),
            );
            return Ok(None);
        }
    };
    crate::engine::pause::at("bench-traced");
    let bar = progress(samples.len() as u64, "tracing", " cells");
    let total = samples.len();
    for (done, (k, s)) in samples.iter_mut().enumerate() {
        if crate::signals::received().is_some() {
            bar.finish_and_clear();
            return Ok(Some(total - done));
        }
        match runner.traced(&mut tracer, *k, spawns) {
            Ok(t) => s.traced = t,
            // The spawner got the terminal's Ctrl-C too: its cell is left untraced.
            Err(_) if crate::signals::received().is_some() => {
                bar.finish_and_clear();
                return Ok(Some(total - done));
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "failed to trace {} at NOFILE {} with {} fds",
                        k.strategy, k.nofile, k.open_fds
                    )
                })
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(None)
}

/// One report per cell, with its statistics, traced medians, check and speed-up.
pub fn cell_reports(samples: &BTreeMap<CellKey, Samples>) -> Vec<CellReport> {
    let mut cells: Vec<CellReport> = samples
        .iter()
        .map(|(k, s)| {
            let traced = (!s.traced.is_empty()).then_some(&s.traced);
            let m = |f: fn(&TracedSpawn) -> u64| traced.and_then(|t| median_of(t, f));
            let mut c = CellReport {
                strategy: k.strategy,
                nofile: k.nofile,
                open_fds: k.open_fds,
                spawns: s.times.len() as u64,
                failures: s.failures,
                median_ns: stats::median(&s.times).unwrap_or(0),
                p95_ns: stats::percentile(&s.times, 95.0).unwrap_or(0),
                close_range_speedup: None,
                close_calls_per_spawn: m(|t| t.calls.close_calls),
                close_range_calls_per_spawn: m(|t| t.calls.close_range_calls),
                fcntl_setfd_calls_per_spawn: m(|t| t.calls.fcntl_setfd_calls),
                poll_calls_per_spawn: m(|t| t.calls.poll_calls),
                getdents64_calls_per_spawn: m(|t| t.calls.getdents64_calls),
                leaked_fds_per_spawn: m(|t| t.leaked_fds),
                traced_spawns: s.traced.len() as u64,
                trace_check: None,
            };
            c.trace_check = report::check_traced(&c);
            c
        })
        .collect();
    report::add_speedups(&mut cells);
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation_and_varies_by_seed() {
        let mut a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        shuffle(&mut a, 1);
        shuffle(&mut b, 2);
        assert_ne!(a, b, "different seeds, different orders");
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, (0..40).collect::<Vec<_>>(), "a permutation");
    }

    #[test]
    fn cells_that_do_not_fit_are_skipped() {
        let m = [CloseMethod::None, CloseMethod::CloseRange];
        let keys = cell_keys(&[256, 1024], &[2, 3, 1000], &m);
        // 3 fds fit both limits, 1000 only 1024; 2 never.
        assert_eq!(keys.len(), 2 * 2 + 2);
        assert!(keys
            .iter()
            .all(|k| k.open_fds >= 3 && k.open_fds < k.nofile));
    }
}
