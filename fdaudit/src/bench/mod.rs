//! `fdaudit bench`: what each fd-closing strategy costs per spawn, and how the cost grows
//! with RLIMIT_NOFILE.
//!
//! Every cell (NOFILE × fds open × strategy) runs `fdaudit __spawner` (see
//! [`crate::spawner`]) in batches. Batches of all cells are interleaved in a shuffled order,
//! round after round, so drift (frequency scaling, other load) hits all cells alike; the
//! first spawn of every batch is a warm-up and is dropped. Timing runs are untraced; as
//! root, a separate traced pass runs a few spawns per cell under fdaudit's own tracer to
//! count the syscalls and leaked fds per spawn.

pub mod plot;
pub mod report;
pub mod traced;

use crate::stats;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::spawner::{self, SpawnTime, SpawnerArgs, Strategy};
use report::{CellReport, FitReport};
use traced::{TraceError, TracedSpawn, Tracer};

/// Arguments of `fdaudit bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Soft RLIMIT_NOFILE values to measure (comma separated; `hard` = the hard limit).
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384,hard")]
    pub limits: Vec<String>,
    /// Fds open in the spawner, counting 0–2 (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "3,1000")]
    pub open_fds: Vec<u64>,
    /// Strategies to measure (comma separated; default all).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub strategies: Vec<Strategy>,
    /// Timed spawns per cell.
    #[arg(short = 'n', long = "spawns", default_value_t = 200)]
    pub n: u64,
    /// Timed spawns per spawner run (each run adds one warm-up spawn).
    #[arg(long, default_value_t = 20)]
    pub batch: u64,
    /// The program to spawn; arguments for it go after `--`.
    #[arg(long, default_value = "/bin/true")]
    pub cmd: OsString,
    /// Arguments for `--cmd`.
    #[arg(last = true)]
    pub cmd_args: Vec<OsString>,
    /// Pin the spawners (and their children) to this CPU; default: the last CPU allowed.
    #[arg(long, conflicts_with = "no_pin")]
    pub cpu: Option<usize>,
    /// Let the scheduler place spawners and children anywhere (noisier on a busy machine).
    #[arg(long)]
    pub no_pin: bool,
    /// Spawns per cell in the traced pass (root only; 0 skips it).
    #[arg(long, default_value_t = 3)]
    pub trace_spawns: u64,
    /// One JSON object per line instead of tables (`"type"`: machine, cell, fit).
    #[arg(long)]
    pub json: bool,
    /// Draw per-spawn time against NOFILE into this .svg or .png file (repeatable).
    #[arg(long, value_name = "FILE")]
    pub plot: Vec<PathBuf>,
}

/// The machine the numbers come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Always `"machine"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub libc: String,
    pub hard_nofile: u64,
    pub command: String,
    /// The CPU spawners and children were pinned to, if any.
    pub pinned_cpu: Option<usize>,
}

impl Machine {
    fn detect(hard: u64, pinned_cpu: Option<usize>) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        // SAFETY: uname fills the struct we pass.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let kernel = if unsafe { libc::uname(&mut u) } == 0 {
            let f = |b: &[libc::c_char]| {
                // SAFETY: uname NUL-terminates each field.
                unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            };
            format!("{} {} {}", f(&u.sysname), f(&u.release), f(&u.machine))
        } else {
            "unknown kernel".into()
        };
        extern "C" {
            fn gnu_get_libc_version() -> *const libc::c_char;
        }
        // SAFETY: returns a static NUL-terminated string.
        let glibc = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
        Machine {
            kind: "machine",
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            libc: format!("glibc {}", glibc.to_string_lossy()),
            hard_nofile: hard,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            pinned_cpu,
        }
    }

    fn line(&self) -> String {
        format!(
            "machine: {}, {} cores, {}, {}, hard RLIMIT_NOFILE {}",
            self.cpu, self.cores, self.kernel, self.libc, self.hard_nofile
        )
    }
}

/// Parses `--limits` entries against the hard limit.
pub fn parse_limits(raw: &[String], hard: u64) -> anyhow::Result<Vec<u64>> {
    let mut v = Vec::new();
    for r in raw {
        let l = if r.eq_ignore_ascii_case("hard") {
            hard
        } else {
            r.trim()
                .parse::<u64>()
                .with_context(|| format!("bad NOFILE limit {r:?}"))?
        };
        if l > hard {
            bail!("NOFILE {l} is above the hard limit {hard}, which this process cannot raise");
        }
        if l < 4 {
            bail!("NOFILE {l} is too small to spawn anything");
        }
        v.push(l);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Checks, before anything is measured, that `--cmd` names a program this user can run:
/// found (through PATH when it has no slash), a regular file, executable.
pub fn check_command(cmd: &std::ffi::OsStr) -> anyhow::Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let shown = cmd.to_string_lossy();
    let path = spawner::resolve_command(cmd)
        .with_context(|| format!("--cmd {shown}: give a path or a program on PATH"))?;
    let meta = std::fs::metadata(&path)
        .with_context(|| format!("--cmd {shown}: cannot run {}", path.display()))?;
    if meta.is_dir() {
        bail!(
            "--cmd {shown}: {} is a directory, not a program",
            path.display()
        );
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("--cmd {shown}: the path contains a NUL byte"))?;
    // SAFETY: access reads a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| {
            format!(
                "--cmd {shown}: {} is not executable by this user",
                path.display()
            )
        });
    }
    Ok(path)
}

/// The hard RLIMIT_NOFILE, capped at the kernel's fs.nr_open when unlimited.
fn hard_limit() -> anyhow::Result<u64> {
    let (_, hard) = spawner::nofile_limits().context("failed to read RLIMIT_NOFILE")?;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    Ok(hard.min(nr_open))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    nofile: u64,
    open_fds: u64,
    strategy: Strategy,
}

#[derive(Debug, Default)]
struct Samples {
    times: Vec<u64>,
    failures: u64,
    traced: Vec<TracedSpawn>,
}

/// A small deterministic shuffle (xorshift), so runs are reproducible.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

struct Runner {
    exe: PathBuf,
    cmd: Vec<OsString>,
    cpu: Option<usize>,
    /// What the command wrote on stderr in the first batch where a spawn exited non-zero:
    /// shown once at the end, beside the failure count.
    first_failure_text: std::cell::RefCell<Option<String>>,
}

impl Runner {
    fn spawner_args(&self, k: Key, n: u64, wait_stdin: bool) -> SpawnerArgs {
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
    fn batch(&self, k: Key, n: u64) -> anyhow::Result<Vec<(u64, i32)>> {
        let out = Command::new(&self.exe)
            .arg("__spawner")
            .args(self.spawner_args(k, n, false).to_args())
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("failed to run fdaudit __spawner")?;
        if out.status.code() == Some(crate::cli::EXIT_ERROR.into()) || out.status.code().is_none() {
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

    fn traced(&self, tracer: &mut Tracer, k: Key, n: u64) -> Result<Vec<TracedSpawn>, TraceError> {
        let mut c = Command::new(&self.exe);
        c.arg("__spawner")
            .args(self.spawner_args(k, n, true).to_args());
        tracer.run(c, n)
    }
}

fn median_of(v: &[TracedSpawn], f: impl Fn(&TracedSpawn) -> u64) -> Option<u64> {
    stats::median(&v.iter().map(f).collect::<Vec<_>>())
}

/// `fdaudit bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<u8> {
    if args.n == 0 || args.batch == 0 {
        bail!("-n and --batch must be at least 1");
    }
    // Everything that can be refused is refused before minutes of measuring.
    check_command(&args.cmd)?;
    for p in &args.plot {
        plot::check_path(p).context("failed to check --plot")?;
    }
    let hard = hard_limit()?;
    let limits = parse_limits(&args.limits, hard)?;
    let mut open_fds = args.open_fds.clone();
    open_fds.sort_unstable();
    open_fds.dedup();
    let strategies = if args.strategies.is_empty() {
        Strategy::ALL.to_vec()
    } else {
        let mut s = args.strategies.clone();
        s.sort();
        s.dedup();
        s
    };
    let mut keys = Vec::new();
    for &nofile in &limits {
        for &k in &open_fds {
            if k < 3 || k + 1 > nofile {
                crate::diag!(
                    "note: skipping {k} open fds at NOFILE {nofile} (need 3 ≤ fds < NOFILE)"
                );
                continue;
            }
            keys.extend(strategies.iter().map(|&strategy| Key {
                nofile,
                open_fds: k,
                strategy,
            }));
        }
    }
    if keys.is_empty() {
        bail!("nothing to measure: no cell fits the limits and fd counts given");
    }
    let mut cmd = vec![args.cmd.clone()];
    cmd.extend(args.cmd_args.iter().cloned());
    let cpu = if args.no_pin {
        None
    } else if args.cpu.is_some() {
        args.cpu
    } else {
        spawner::allowed_cpus()
            .context("failed to read the CPU affinity")?
            .last()
            .copied()
    };
    let runner = Runner {
        exe: std::env::current_exe().context("failed to find the fdaudit executable")?,
        cmd,
        cpu,
        first_failure_text: Default::default(),
    };
    let machine = Machine::detect(hard, cpu);
    let cmd_text = runner
        .cmd
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");

    // Timed pass: rounds of shuffled batches.
    let rounds = args.n.div_ceil(args.batch);
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(rounds * keys.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} timing [{bar:24}] {pos}/{len} eta {eta} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut samples: BTreeMap<Key, Samples> =
        keys.iter().map(|&k| (k, Samples::default())).collect();
    let mut order = keys.clone();
    // Ctrl-C stops measuring; the cells measured so far are still reported.
    crate::signals::install();
    let mut batches_done = 0u64;
    'rounds: for round in 0..rounds {
        let n = args.batch.min(args.n - round * args.batch);
        shuffle(&mut order, round + 1);
        for &k in &order {
            if crate::signals::received().is_some() {
                break 'rounds;
            }
            bar.set_message(format!("{} @ {}", k.strategy, k.nofile));
            let times = match runner.batch(k, n + 1) {
                Ok(t) => t,
                // The spawner got the terminal's Ctrl-C too: its batch is lost, not an error.
                Err(_) if crate::signals::received().is_some() => break 'rounds,
                Err(e) => return Err(e),
            };
            batches_done += 1;
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
    let interrupted = crate::signals::received().is_some();
    if interrupted {
        samples.retain(|_, s| !s.times.is_empty());
        if samples.is_empty() {
            crate::diag!("fdaudit bench: interrupted before any cell was measured");
            return Ok(crate::trace::EXIT_INTERRUPTED);
        }
        crate::diag!(
            "fdaudit bench: interrupted after {batches_done} of {} batches: the cells below \
             have fewer spawns than asked, and the traced pass is skipped",
            rounds * keys.len() as u64
        );
        keys.retain(|k| samples.contains_key(k));
    }

    // Traced pass (root only), separate so tracing does not slow the timed spawns.
    if args.trace_spawns > 0 && !interrupted {
        match Tracer::start() {
            Ok(mut tracer) => {
                let bar = if std::io::stderr().is_terminal() {
                    indicatif::ProgressBar::new(keys.len() as u64)
                } else {
                    indicatif::ProgressBar::hidden()
                };
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} tracing [{bar:24}] {pos}/{len} cells",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                for &k in &keys {
                    let t = runner
                        .traced(&mut tracer, k, args.trace_spawns)
                        .with_context(|| {
                            format!(
                                "failed to trace {} at NOFILE {} with {} fds",
                                k.strategy, k.nofile, k.open_fds
                            )
                        })?;
                    samples.get_mut(&k).expect("every key has samples").traced = t;
                    bar.inc(1);
                }
                bar.finish_and_clear();
            }
            Err(e) => crate::diag!("note: traced columns skipped: {e:#}"),
        }
    }

    let mut cells: Vec<CellReport> = samples
        .iter()
        .map(|(k, s)| {
            let traced = (!s.traced.is_empty()).then_some(&s.traced);
            let m = |f: fn(&TracedSpawn) -> u64| traced.and_then(|t| median_of(t, f));
            let mut c = CellReport {
                kind: "cell",
                strategy: k.strategy,
                nofile: k.nofile,
                open_fds: k.open_fds,
                spawns: s.times.len() as u64,
                failures: s.failures,
                median_ns: stats::median(&s.times).unwrap_or(0),
                p95_ns: stats::percentile(&s.times, 95.0).unwrap_or(0),
                close_range_speedup: None,
                close_calls_per_spawn: m(|t| t.close_calls),
                close_range_calls_per_spawn: m(|t| t.close_range_calls),
                fcntl_setfd_calls_per_spawn: m(|t| t.fcntl_setfd_calls),
                poll_calls_per_spawn: m(|t| t.poll_calls),
                getdents64_calls_per_spawn: m(|t| t.getdents64_calls),
                leaked_fds_per_spawn: m(|t| t.leaked_fds),
                traced_spawns: s.traced.len() as u64,
                trace_check: None,
            };
            c.trace_check = report::check_traced(&c);
            c
        })
        .collect();
    report::add_speedups(&mut cells);
    let fits: Vec<FitReport> = if limits.len() >= 2 {
        report::fits(&cells)
    } else {
        Vec::new()
    };

    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| anyhow::Error::new(e).context("failed to write to stdout");
    if args.json {
        crate::output::json_line(&mut out, &machine).map_err(w)?;
        for c in &cells {
            crate::output::json_line(&mut out, c).map_err(w)?;
        }
        for f in &fits {
            crate::output::json_line(&mut out, f).map_err(w)?;
        }
    } else {
        let term = crate::output::table::Term::stdout();
        let intro = format!(
            "fdaudit bench: {} timed spawns of `{cmd_text}` per cell (batches of {}, each after a \
             warm-up spawn, cells interleaved), {}; per-spawn wall time fork/posix_spawn → waitpid",
            args.n,
            args.batch.min(args.n),
            cpu.map_or_else(
                || "unpinned".to_string(),
                |c| format!("spawner and children pinned to CPU {c}")
            )
        );
        writeln!(out, "{}", term.fill(&intro, 0)).map_err(w)?;
        writeln!(out, "{}\n", term.fill(&machine.line(), 0)).map_err(w)?;
        write!(out, "{}", report::render_tables(&cells, hard, term)).map_err(w)?;
        write!(out, "{}", report::render_fits(&fits, term)).map_err(w)?;
        write!(out, "{}", report::render_published(&fits, term)).map_err(w)?;
    }
    out.flush().map_err(w)?;
    for p in &args.plot {
        let title = format!(
            "fork+exec of {cmd_text}: per-spawn time vs RLIMIT_NOFILE ({}, {})",
            machine.kernel, machine.libc
        );
        plot::plot(p, &cells, &fits, &title)
            .with_context(|| format!("failed to draw {}", p.display()))?;
        crate::diag!("plot written to {}", p.display());
    }
    let failed: u64 = cells.iter().map(|c| c.failures).sum();
    let mismatches: Vec<String> = cells
        .iter()
        .filter_map(|c| {
            c.trace_check.as_deref().filter(|t| *t != "ok").map(|t| {
                format!(
                    "{} at NOFILE {} with {} fds: {t}",
                    c.strategy, c.nofile, c.open_fds
                )
            })
        })
        .collect();
    for m in &mismatches {
        crate::diag!("trace check failed: {m}");
    }
    if failed > 0 {
        match runner.first_failure_text.borrow().as_deref() {
            Some(t) if !t.is_empty() => crate::diag!(
                "warning: {failed} spawns of `{cmd_text}` did not exit 0; the first said: {t}"
            ),
            _ => crate::diag!(
                "warning: {failed} spawns of `{cmd_text}` did not exit 0 (nothing on stderr)"
            ),
        }
    }
    Ok(if interrupted {
        crate::trace::EXIT_INTERRUPTED
    } else if failed > 0 || !mismatches.is_empty() {
        1
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_with_hard_and_dedup() {
        let raw: Vec<String> = ["4096", "1024", "hard", "20000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            parse_limits(&raw, 20000).expect("parses"),
            vec![1024, 4096, 20000]
        );
        assert!(
            parse_limits(&["30000".into()], 20000).is_err(),
            "above hard"
        );
        assert!(parse_limits(&["x".into()], 20000).is_err(), "not a number");
        assert!(parse_limits(&["2".into()], 20000).is_err(), "too small");
    }

    #[test]
    fn commands_are_checked_before_measuring() {
        assert_eq!(
            check_command("true".as_ref()).expect("on PATH").file_name(),
            Some("true".as_ref())
        );
        assert!(check_command("/bin/true".as_ref()).is_ok());
        let e = format!("{:#}", check_command("/nonexistent".as_ref()).unwrap_err());
        assert!(e.contains("No such file"), "{e}");
        let plain = std::env::temp_dir().join(format!("fdaudit-noexec-{}", std::process::id()));
        std::fs::write(&plain, "data").expect("temp file");
        let e = format!("{:#}", check_command(plain.as_os_str()).unwrap_err());
        std::fs::remove_file(&plain).expect("cleans up");
        assert!(e.contains("not executable"), "{e}");
        let e = format!("{:#}", check_command("/".as_ref()).unwrap_err());
        assert!(e.contains("is a directory"), "{e}");
        let e = format!(
            "{:#}",
            check_command("no-such-program-here".as_ref()).unwrap_err()
        );
        assert!(e.contains("not found in PATH"), "{e}");
    }

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
}
