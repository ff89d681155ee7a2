//! `fdaudit bench`: what each fd-closing strategy costs per spawn, and how the cost grows
//! with RLIMIT_NOFILE.
//!
//! Every cell (NOFILE × fds open × strategy) runs `fdaudit __spawner` (see
//! [`crate::spawner`]) in batches. Batches of all cells are interleaved in a shuffled order,
//! round after round, so drift (frequency scaling, other load) hits all cells alike; the
//! first spawn of every batch is a warm-up and is dropped. Timing runs are untraced; as
//! root, a separate traced pass runs a few spawns per cell under fdaudit's own tracer to
//! count the syscalls and leaked fds per spawn.

pub mod matrix;
pub mod plot;
pub mod report;
pub mod traced;
pub mod user;
pub mod user_report;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::output::stream::{self, Dest, StdStream};
use crate::spawner::CloseMethod;
use crate::{exit, sys};
use matrix::Runner;
use report::{CellReport, FitReport};
use user::UserResults;

/// Every JSON object `bench --json` prints, one per line, tagged by `"type"`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BenchRecord<'a> {
    Machine(&'a Machine),
    Cell(&'a CellReport),
    Fit(&'a FitReport),
    UserCell(&'a user_report::UserCellReport),
    UserFit(&'a user_report::UserFitReport),
}

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
    pub strategies: Vec<CloseMethod>,
    /// Timed spawns per cell.
    #[arg(short = 'n', long = "spawns", default_value_t = 200)]
    pub n: u64,
    /// Timed spawns per spawner run (each run adds one warm-up spawn).
    #[arg(long, default_value_t = 20)]
    pub batch: u64,
    /// The program the built-in strategies spawn.
    #[arg(long, default_value = "/bin/true")]
    pub cmd: OsString,
    /// An argument for `--cmd` (repeatable, in order).
    #[arg(long = "cmd-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub cmd_args: Vec<OsString>,
    /// With -- CMD: runs of CMD per NOFILE limit, all traced and counted.
    #[arg(long, default_value_t = 3)]
    pub runs: u64,
    /// Pin the spawners (and their children) to this CPU; default: the last CPU allowed.
    #[arg(long, conflicts_with = "no_pin")]
    pub cpu: Option<usize>,
    /// Let the scheduler place spawners and children anywhere (noisier on a busy machine).
    #[arg(long)]
    pub no_pin: bool,
    /// Spawns per cell in the traced pass (root only; 0 skips it).
    #[arg(long, default_value_t = 3)]
    pub trace_spawns: u64,
    /// One JSON object per line instead of tables (`"type"`: header, machine, cell, fit, user_cell, user_fit).
    #[arg(long)]
    pub json: bool,
    /// Write the results (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Draw per-spawn time against NOFILE into this .svg or .png file (repeatable).
    #[arg(long, value_name = "FILE")]
    pub plot: Vec<PathBuf>,
    /// Your own spawner (root only): run under each --limits value, traced, and report its
    /// spawns' cost, strategy and leaks per limit (beside --strategies, if given).
    #[arg(last = true, value_name = "CMD")]
    pub spawner: Vec<OsString>,
}

/// The machine the numbers come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub libc: String,
    pub hard_nofile: u64,
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
        let kernel = sys::uname().unwrap_or_else(|| "unknown kernel".into());
        extern "C" {
            fn gnu_get_libc_version() -> *const libc::c_char;
        }
        // SAFETY: returns a static NUL-terminated string.
        let glibc = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            libc: format!("glibc {}", glibc.to_string_lossy()),
            hard_nofile: hard,
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

/// The hard RLIMIT_NOFILE, capped at the kernel's fs.nr_open when unlimited.
fn hard_limit() -> anyhow::Result<u64> {
    let (_, hard) = sys::nofile().context("failed to read RLIMIT_NOFILE")?;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    Ok(hard.min(nr_open))
}

/// Checks, before anything is measured, that `--cmd` names a program this user can run:
/// found (through PATH when it has no slash), a regular file, executable.
pub fn check_command(cmd: &std::ffi::OsStr) -> anyhow::Result<std::path::PathBuf> {
    check_program("--cmd", cmd)
}

/// [`check_command`] for `what` (`--cmd`, or CMD after `--`).
fn check_program(what: &str, cmd: &std::ffi::OsStr) -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let shown = format!("{what} {}", cmd.to_string_lossy());
    let path = crate::spawner::resolve_command(cmd)
        .with_context(|| format!("{shown}: give a path or a program on PATH"))?;
    let meta = std::fs::metadata(&path)
        .with_context(|| format!("{shown}: cannot run {}", path.display()))?;
    if meta.is_dir() {
        bail!("{shown}: {} is a directory, not a program", path.display());
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{shown}: the path contains a NUL byte"))?;
    // SAFETY: access reads a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| {
            format!("{shown}: {} is not executable by this user", path.display())
        });
    }
    Ok(path)
}

/// What `bench` measures, checked before anything is: the cells and how to spawn.
struct Setup {
    /// The hard RLIMIT_NOFILE (capped at fs.nr_open).
    hard: u64,
    /// How many NOFILE limits (the fits need two, and are weak under three).
    nlimits: usize,
    limits: Vec<u64>,
    keys: Vec<matrix::CellKey>,
    runner: Runner,
}

impl Setup {
    /// Checks the arguments (everything that can be refused is refused before minutes of
    /// measuring) and picks the cells and the CPU to pin to.
    fn check(args: &BenchArgs) -> anyhow::Result<Setup> {
        if args.n == 0 || args.batch == 0 {
            bail!("-n and --batch must be at least 1");
        }
        check_command(&args.cmd)?;
        check_spawner(args)?;
        for p in &args.plot {
            plot::check_path(p).context("failed to check --plot")?;
        }
        let hard = hard_limit()?;
        let limits = parse_limits(&args.limits, hard)?;
        let mut open_fds = args.open_fds.clone();
        open_fds.sort_unstable();
        open_fds.dedup();
        let methods = if args.strategies.is_empty() && !args.spawner.is_empty() {
            Vec::new()
        } else if args.strategies.is_empty() {
            CloseMethod::ALL.to_vec()
        } else {
            let mut s = args.strategies.clone();
            s.sort();
            s.dedup();
            s
        };
        let keys = matrix::cell_keys(&limits, &open_fds, &methods);
        if keys.is_empty() && args.spawner.is_empty() {
            bail!("nothing to measure: no cell fits the limits and fd counts given");
        }
        let mut cmd = vec![args.cmd.clone()];
        cmd.extend(args.cmd_args.iter().cloned());
        let cpu = if args.no_pin {
            None
        } else if args.cpu.is_some() {
            args.cpu
        } else {
            sys::allowed_cpus()
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
        Ok(Setup {
            hard,
            nlimits: limits.len(),
            limits,
            keys,
            runner,
        })
    }
}

/// `-- CMD`: refused before anything is measured when it cannot run or bench is not root.
fn check_spawner(args: &BenchArgs) -> anyhow::Result<()> {
    let Some(cmd) = args.spawner.first() else {
        return Ok(());
    };
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    check_program("CMD", cmd)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench -- CMD traces CMD and needs root (CAP_BPF and CAP_PERFMON): run it with sudo");
    }
    Ok(())
}

/// What the built-in strategies gave: their cells and fits, and whether a signal cut the
/// timed pass short.
#[derive(Default)]
struct Builtins {
    cells: Vec<CellReport>,
    fits: Vec<FitReport>,
    interrupted: bool,
}

/// The timed pass of the built-in cells, then (unless interrupted) their traced pass.
fn measure_builtins(args: &BenchArgs, setup: &Setup) -> anyhow::Result<Builtins> {
    if setup.keys.is_empty() {
        return Ok(Builtins::default());
    }
    let runner = &setup.runner;
    let (mut samples, interrupted) = matrix::time_cells(runner, &setup.keys, args.n, args.batch)?;
    if let Some(i) = interrupted {
        if samples.is_empty() {
            stream::note(
                stream::Level::Warning,
                "bench interrupted before any cell was measured",
            );
            return Ok(Builtins {
                interrupted: true,
                ..Builtins::default()
            });
        }
        stream::note(
            stream::Level::Warning,
            &format!(
                "bench interrupted after {} of {} batches: the cells below have fewer spawns \
                 than asked, and the traced pass is skipped",
                i.batches_done, i.batches
            ),
        );
    }
    let mut traced_cut = false;
    if interrupted.is_none() && args.trace_spawns > 0 {
        if let Some(left) = matrix::trace_cells(runner, &mut samples, args.trace_spawns)? {
            traced_cut = true;
            stream::note(
                stream::Level::Warning,
                &format!(
                    "bench interrupted in the traced pass: {} of {} left without traced \
                     columns (their times are complete)",
                    crate::output::count(left as u64, "cell", "cells"),
                    samples.len()
                ),
            );
        }
    }
    crate::engine::pause::at("bench-fit");
    let cells = matrix::cell_reports(&samples);
    let fits = if setup.nlimits >= 2 {
        report::fits(&cells)
    } else {
        Vec::new()
    };
    Ok(Builtins {
        cells,
        fits,
        interrupted: interrupted.is_some() || traced_cut,
    })
}

/// A command line for people (lossy UTF-8, arguments joined by spaces).
pub(crate) fn command_text(cmd: &[OsString]) -> String {
    cmd.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `fdaudit bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<u8> {
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "bench",
    )?;
    let setup = Setup::check(&args)?;
    let machine = Machine::detect(setup.hard, setup.runner.cpu);
    let builtins = measure_builtins(&args, &setup)?;
    if builtins.interrupted && builtins.cells.is_empty() {
        return Ok(crate::signals::exit_status());
    }
    let user = if builtins.interrupted {
        UserResults::default()
    } else {
        user::measure(&args.spawner, args.runs, &setup.limits, setup.runner.cpu)?
    };
    let cmd_text = command_text(&setup.runner.cmd);
    let results = Results {
        machine: &machine,
        cells: &builtins.cells,
        fits: &builtins.fits,
        user: &user,
        cmd_text: &cmd_text,
        nlimits: setup.nlimits,
    };
    write_results(&args, &results)?;
    draw_plots(&args.plot, &results)?;
    // A signal during the fits or the output still ends bench as a signal does: what it
    // measured is out, and the status says it was stopped.
    if builtins.interrupted || user.interrupted || crate::signals::received().is_some() {
        return Ok(crate::signals::exit_status());
    }
    let builtin_status = exit_status(&builtins.cells, &cmd_text, &setup.runner);
    Ok(builtin_status.max(user::exit_status(&user.cells)))
}

/// Each `--plot` file, with a note on stderr for each one written.
fn draw_plots(paths: &[PathBuf], r: &Results) -> anyhow::Result<()> {
    if r.cells.is_empty() && !paths.is_empty() {
        stream::note(
            stream::Level::Note,
            "--plot draws the built-in strategies (--strategies): none measured, no plot",
        );
        return Ok(());
    }
    for p in paths {
        let title = format!(
            "fork+exec of {}: per-spawn time vs RLIMIT_NOFILE ({}, {})",
            r.cmd_text, r.machine.kernel, r.machine.libc
        );
        plot::plot(p, r.cells, r.fits, &title)
            .with_context(|| format!("failed to draw {}", p.display()))?;
        stream::note(
            stream::Level::Note,
            &format!("plot written to {}", crate::output::text::escape_path(p)),
        );
    }
    Ok(())
}

/// What a run measured, for writing and drawing.
struct Results<'a> {
    machine: &'a Machine,
    cells: &'a [CellReport],
    fits: &'a [FitReport],
    /// What `-- CMD` gave (empty without it).
    user: &'a UserResults,
    /// The spawned command line, for people.
    cmd_text: &'a str,
    /// How many NOFILE limits were measured.
    nlimits: usize,
}

/// The machine, cells and fits as JSON lines, or as the header and tables for people.
fn write_results(args: &BenchArgs, r: &Results) -> anyhow::Result<()> {
    let Results {
        machine,
        cells,
        fits,
        ..
    } = *r;
    if args.json {
        stream::record(&BenchRecord::Machine(machine))?;
        for c in cells {
            stream::record(&BenchRecord::Cell(c))?;
        }
        for f in fits {
            stream::record(&BenchRecord::Fit(f))?;
        }
        for c in &r.user.cells {
            stream::record(&BenchRecord::UserCell(c))?;
        }
        if let Some(f) = &r.user.fit {
            stream::record(&BenchRecord::UserFit(f))?;
        }
        return Ok(());
    }
    let mut out = String::new();
    write_text(&mut out, args, r).expect("formatting to a String cannot fail");
    stream::text(&out)
}

/// The header line, the machine and the tables, for people.
fn write_text(out: &mut String, args: &BenchArgs, r: &Results) -> std::fmt::Result {
    use std::fmt::Write as _;
    let Results {
        machine,
        cells,
        fits,
        cmd_text,
        nlimits,
        user,
    } = *r;
    let term = stream::term();
    if cells.is_empty() {
        writeln!(out, "{}\n", term.fill(&machine.line(), 0))?;
        let fit = user.fit.as_ref();
        return write!(
            out,
            "{}",
            user_report::render(&user.cells, fit, cells, term)
        );
    }
    let intro = format!(
        "fdaudit bench: {} timed spawns of `{cmd_text}` per cell (batches of {}, each after a \
         warm-up spawn, cells interleaved), {}; per-spawn wall time fork/posix_spawn → waitpid",
        args.n,
        args.batch.min(args.n),
        machine.pinned_cpu.map_or_else(
            || "unpinned".to_string(),
            |c| format!("spawner and children pinned to CPU {c}")
        )
    );
    writeln!(out, "{}", term.fill(&intro, 0))?;
    writeln!(out, "{}\n", term.fill(&machine.line(), 0))?;
    write!(
        out,
        "{}",
        report::render_tables(cells, machine.hard_nofile, term)
    )?;
    if nlimits < 3 {
        writeln!(out, "(fewer than 3 NOFILE limits: the fit below is weak)")?;
    }
    write!(out, "{}", report::render_fits(fits, term))?;
    write!(out, "{}", report::render_published(fits, term))?;
    let fit = user.fit.as_ref();
    write!(
        out,
        "{}",
        user_report::render(&user.cells, fit, cells, term)
    )
}

/// 1 when a spawn failed or a traced count contradicts its method (each said on stderr).
fn exit_status(cells: &[CellReport], cmd_text: &str, runner: &Runner) -> u8 {
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
        stream::note(stream::Level::Warning, &format!("trace check failed: {m}"));
    }
    if failed > 0 {
        let message = match runner.first_failure_text.borrow().as_deref() {
            Some(t) if !t.is_empty() => format!(
                "{} of `{cmd_text}` did not exit 0; the first said: {t}",
                crate::output::count(failed, "spawn", "spawns")
            ),
            _ => format!(
                "{} of `{cmd_text}` did not exit 0 (nothing on stderr)",
                crate::output::count(failed, "spawn", "spawns")
            ),
        };
        stream::note(stream::Level::Warning, &message);
    }
    if failed > 0 || !mismatches.is_empty() {
        exit::FAILED
    } else {
        exit::OK
    }
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
}
