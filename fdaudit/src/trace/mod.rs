//! `fdaudit trace`: follow a process tree with eBPF; per spawn, the fds that crossed execve
//! and what the child did between fork and exec.

pub mod chains;
mod child;
pub mod filter;
mod following;
pub mod perfetto;
pub mod plan;
pub mod reads;
pub mod report;
pub mod stamp;
pub mod targets;
mod verbose;

use std::{
    ffi::OsString,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::held::start_held;
use crate::{
    cgroup::Followed,
    engine::{
        ebpf::BackendChoice,
        session::{Session, SessionEnd},
        wait,
    },
    exit,
    output::stream,
    procfs_util,
};
use plan::TracePlan;
use report::{Ending, ExitReason, Reporter};
use verbose::{verbose_calibration, verbose_exit, verbose_origins, verbose_startup};

/// Every JSON object `trace --json` prints, one per line, tagged by `"type"`.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceRecord<'a> {
    Spawn(Box<report::json::SpawnJson<'a>>),
    ReadStorm(reads::ReadStorm),
    /// What to change for a group that leaks or sweeps fds up to NOFILE.
    Advice(Box<report::Advice>),
    Summary(Box<report::Summary>),
}

/// Arguments of `fdaudit trace`.
#[derive(Debug, clap::Args)]
#[command(
    // `--duration -1` is a bad value, not an option named -1.
    allow_negative_numbers = true,
    after_help = "Records go to -o FILE; without it, to stderr with -- CMD or --demo (CMD keeps \
stdout and stderr as given, as under strace), to stdout with -p.\n\nExit status: the command's \
own status with -- CMD (128+N when killed by signal N, 127 when it could not be exec'd), else \
0; 3 when the command exited 0 and a gate failed: --fail-on-leak (a spawn leaked an fd), \
--fail-on-strategy (a spawn used one of the strategies) or --max-closes (a spawn made more \
closing calls); 4 when the command exited 0, a gate was set and none failed, but the trace \
is known to be incomplete (records lost: no gate passes on it); 2 on an error; \
128+N after signal N stopped fdaudit (130 after Ctrl-C, 143 after SIGTERM). A SIGINT, SIGTERM \
or SIGHUP sent to fdaudit alone is passed on to -- CMD, which is killed if it has not exited \
after --kill-after."
)]
pub struct TraceArgs {
    /// Trace this running process and all its descendants (repeatable).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pids: Vec<u32>,

    /// Trace every process in this cgroup and the cgroups below it, also those that start
    /// or move in later: a path on the cgroup2 hierarchy (`/system.slice/nginx.service`) or
    /// under its mount point.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pids", "command"])]
    pub cgroup: Option<std::path::PathBuf>,

    /// Stop tracing after this many seconds (e.g. 30, 1.5); a command still running is
    /// then waited for, untraced.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,

    /// Write the records (text or JSON) to this file instead of stderr (-- CMD) or stdout (-p).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write the spawns shown as a Perfetto trace to FILE (for Perfetto UI or
    /// trace_processor): a track per process, a slice per spawn from fork to exec, the
    /// window's syscalls as counters, each leaked fd an instant event, exec chains as flows.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,

    /// Also write a JUnit XML report to FILE: a test case per gate set and per group
    /// (parent → exec, strategy), failing with the gates' verdict lines (docs/ci.md).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    // --sarif turns on --origin (a location is the origin's frame).
    #[command(flatten)]
    pub sarif: crate::output::sarif::SarifArgs,

    /// When a signal stops fdaudit while it runs -- CMD: how long to go on tracing the
    /// command (which got the signal too) before killing it with SIGKILL.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration, default_value = "5")]
    pub kill_after: Duration,

    /// With -- CMD: stop tracing when CMD exits and say how many traced processes it left
    /// running. By default the trace goes on until all of them have exited, as strace -f
    /// does (--duration or Ctrl-C ends it sooner: a daemon may never exit).
    #[arg(long, conflicts_with_all = ["pids", "cgroup"])]
    pub no_wait_tree: bool,

    /// Attach only the scheduler tracepoints: leaked fds, no syscall counts, near-zero cost.
    // Spelled `--leaks-only` in 0.1.0, too close to --only-leaks (#25 item 5): a hidden alias
    // for one release.
    #[arg(long = "no-syscalls", alias = "leaks-only", conflicts_with = "reads")]
    pub no_syscalls: bool,

    /// Also count read()/readv()/pread64() calls per process and open file; flag byte-at-a-time reads.
    #[arg(long)]
    pub reads: bool,

    /// Also record which call made each leaked fd inheritable (open, socket, pipe, dup,
    /// fcntl, ioctl(FIONCLEX), recvmsg's SCM_RIGHTS, eventfd...: the process, thread, time and
    /// user stack, and the call that created an fd made inheritable later): `origin` beside
    /// each leaked fd, else "before tracing" (open when fdaudit attached) or "not seen" (why).
    #[arg(long)]
    pub origin: bool,

    /// Ring buffer size in pages (a power of two), fixed. Default: 1 MiB, grown once 64 KiB
    /// of records have gone through it (or 128 KiB waited at once) to room for 256 of the
    /// largest spawn records per CPU (at least 8 MiB).
    #[arg(long, value_name = "PAGES")]
    pub buffer_pages: Option<u64>,

    /// Exit with status 3 when a spawn leaked an fd and the command itself exited 0 (for CI).
    /// fds the traced command inherited from fdaudit's caller do not count, nor with -p those
    /// the processes held (inheritable) when fdaudit attached (see --no-baseline).
    /// `=boundary`: only leaks into an image that runs with other credentials or in other
    /// namespaces or root than the last exec'd image of its ancestry (the critical ones).
    #[arg(
        long,
        value_name = "WHICH",
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "any"
    )]
    pub fail_on_leak: Option<report::LeakGate>,

    /// Exit with status 3 when a spawn used one of these strategies (close-loop,
    /// fcntl-scan, poll-scan, procfd-walk, …; comma-separated or repeated) and the command
    /// itself exited 0. Every spawn is judged, whatever the output filters show.
    #[arg(
        long,
        value_name = "STRATEGY",
        value_enum,
        value_delimiter = ',',
        conflicts_with = "no_syscalls"
    )]
    pub fail_on_strategy: Vec<crate::engine::strategy::Strategy>,

    /// Exit with status 3 when a spawn made more than N fd-closing calls between fork and
    /// exec (close() calls plus close_range() calls; one close_range() counts once) and the
    /// command itself exited 0. Every spawn is judged, whatever the output filters show.
    #[arg(long, value_name = "N", conflicts_with = "no_syscalls")]
    pub max_closes: Option<u64>,

    /// With --fail-on-leak: do not count leaks of this fd number (repeatable).
    #[arg(long = "ignore-fd", value_name = "FD", requires = "fail_on_leak")]
    pub ignore_fds: Vec<u32>,

    /// With --fail-on-leak: forgive leaks of this kind (socket, pipe, regular, …) or of
    /// files matching this path glob (`/run/*.sock`; `*` matches `/` too); repeatable.
    #[arg(long, value_name = "KIND|GLOB", requires = "fail_on_leak", value_parser = report::Allowed::parse)]
    pub allow_leak: Vec<report::Allowed>,

    /// With --fail-on-leak: count only leaks of this kind (socket, regular, directory, …;
    /// repeatable).
    #[arg(long, value_name = "KIND", requires = "fail_on_leak", value_parser = report::parse_kind)]
    pub fail_on_leak_kind: Vec<crate::fdkind::FdKind>,

    #[command(flatten)]
    pub policy_exit_code: exit::PolicyCode,

    /// The exit status when a gate was set and none failed, but the trace is known to be
    /// incomplete (records lost), instead of 4: see --policy-exit-code (1 to 125, not 2).
    #[arg(long, value_name = "N", default_value_t = exit::INCOMPLETE, value_parser = exit::parse_verdict_code)]
    pub incomplete_exit_code: u8,

    /// With --fail-on-leak: also count the fds the traced command inherited from
    /// fdaudit's caller (with -p: those the processes held when fdaudit attached).
    #[arg(long)]
    pub no_baseline: bool,

    /// Trace the built-in workload: a spawner holding a credentials file and a listening
    /// socket, spawning with a leaking, a close-loop, a poll-scan and a close_range strategy.
    #[arg(long, conflicts_with_all = ["pids", "command", "cgroup"])]
    pub demo: bool,

    /// Print only warnings and the gates' verdicts: no spawn lines, notes or summary
    /// (with --json the records are all still written).
    #[arg(short, long)]
    pub quiet: bool,

    /// Prefix each spawn line with the time of its exec, like strace: -t HH:MM:SS, -tt with
    /// microseconds, -ttt seconds since the epoch.
    #[arg(short = 't', action = clap::ArgAction::Count)]
    pub time: u8,

    /// Prefix each spawn line with the seconds since the previous one, like strace -r.
    #[arg(short = 'r')]
    pub relative: bool,

    /// Show only spawns whose exec path matches this glob (`*` matches `/` too; repeatable).
    #[arg(long, value_name = "GLOB", help_heading = FILTERS)]
    pub exec: Vec<String>,

    /// Show only spawns of this program (its name as in ps, the file name cut to 15
    /// bytes; repeatable).
    #[arg(long, value_name = "NAME", help_heading = FILTERS)]
    pub comm: Vec<String>,

    /// Show only spawns whose parent has this name (repeatable).
    #[arg(long, value_name = "NAME", help_heading = FILTERS)]
    pub parent_comm: Vec<String>,

    /// Show only spawns that leaked an fd (what is traced stays the same; --no-syscalls
    /// instead traces less).
    #[arg(long, help_heading = FILTERS)]
    pub only_leaks: bool,

    /// Show only spawns that made at least N close() calls before exec.
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = FILTERS)]
    pub min_closes: u32,

    /// How to hook the counted syscalls: fentry (trampolines on those only), tp (their own
    /// tracepoints) or raw-tp (sys_enter/sys_exit: every syscall runs a program); auto: tp
    /// where its tracepoints load and attach, else raw-tp (fentry is opt-in). Only raw-tp
    /// sees x86_64 32-bit (int $0x80) syscalls: auto with tp says so when the kernel runs any.
    #[arg(long, value_enum, default_value_t, env = "FDAUDIT_BACKEND")]
    pub backend: BackendChoice,

    /// Print the backend used and where start-up and exit time went.
    #[arg(short, long)]
    pub verbose: bool,

    /// The command to start and trace from its first instruction. `--` before it is
    /// optional (as with strace): everything from the first argument that is not an option
    /// of fdaudit's is the command's.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Help heading of the output filters.
const FILTERS: &str = "Output filters (the kernel still follows the whole tree)";

/// `--duration`: a finite number of seconds above 0 that fits a `Duration`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (e.g. 30 or 1.5)"))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("{s:?}: give a finite number of seconds above 0"));
    }
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero() && Instant::now().checked_add(*d).is_some())
        .ok_or_else(|| format!("{s:?} seconds is out of range"))
}

/// The exec errno of a command that could not start: the human message and exit status.
pub(crate) fn failed_exec_error(name: &str, errno: i32) -> (String, u8) {
    let err = std::io::Error::from_raw_os_error(errno);
    let code = if errno == libc::ENOENT {
        exit::NOT_EXECUTED
    } else {
        exit::NOT_EXECUTABLE
    };
    (
        format!(
            "failed to exec {name}: {} ({}): check the command exists and is executable",
            crate::sys::errno_name(errno).unwrap_or("?"),
            err.kind()
        ),
        code,
    )
}

pub fn run(args: TraceArgs) -> Result<u8> {
    let t0 = Instant::now();
    let plan = TracePlan::new(args)?;
    let (perfetto, junit, sarif) = output_files(&plan)?;
    let pids = plan.targets()?;
    let filter = plan.filter()?;
    stream::set_quiet(plan.out.quiet && !plan.out.json);
    let followed = plan.cgroup.as_deref().map(Followed::find).transpose()?;
    let signal_rd = crate::signals::wake_pipe()?;
    crate::signals::install_stop();
    let (mut session, child, held) = match attach(&plan, &pids, followed.as_ref())? {
        Attached::Tracing(session, child, held) => (*session, child, held),
        Attached::NotExecuted(code) => return Ok(code),
    };
    let root_pids: Vec<u32> = child.map(|c| vec![c]).unwrap_or_else(|| pids.clone());
    let mut waiter = wait::Waiter::new(signal_rd, &root_pids);
    let startup = t0.elapsed();
    if plan.out.verbose {
        verbose_startup(&session, startup, child.is_some());
    }
    let mut reporter = Reporter::new(plan.report_options(held), &session.at_start(), filter)
        .with_perfetto(perfetto)
        .with_sarif(sarif.is_some());
    (session.unseen()).inspect(|u| stream::note(stream::Level::Note, u));
    let mut targets = reads::LiveTargets::default();
    let mut sink = following::TraceSink {
        reporter: &mut reporter,
        roots: &root_pids,
        reads: plan
            .counting
            .reads()
            .then(|| (&mut targets, Instant::now())),
        steps: Default::default(),
    };
    let followed_until = following::follow(
        plan.follow,
        &mut session,
        &mut sink,
        &mut waiter,
        child,
        followed.as_ref(),
    );
    let following::FollowEnd {
        mut exit_status,
        timed_out,
        ended,
    } = match followed_until.and_then(|end| sink.finish().map(|()| end)) {
        Ok(end) => end,
        Err(e) => return Err(child::abandon(session, child, e)),
    };
    let end = session.at_end()?;
    let storms = read_storms(&session, &mut targets);
    let ring = ring_at_end(&end);
    let calibrated = end.calibration;
    let origins = end
        .origin_records_decoded
        .map(|decoded| (end.stats.origin_records, decoded));
    let untraced = (timed_out && exit_status.is_none())
        .then_some(child)
        .flatten();
    exit_status = child::detach_then_wait(session, untraced)?.or(exit_status);
    let ending = ending(&reporter, exit_status, &end.stats, &end.missed, plan.codes);
    let found = reporter.sarif_findings();
    let ci = reporter.finish(end, storms, ending)?;
    report::sarif::write(sarif, found, &ci)?;
    if let Some(j) = junit {
        j.write(&ci)?;
    }
    crate::output::github::report(&ci)?;
    if plan.out.verbose {
        verbose_exit(ended, child.is_some(), ring);
        verbose_origins(origins);
        if plan.counting.syscalls() {
            verbose_calibration(calibrated);
        }
    }
    Ok(ending.exit_code)
}

/// The ring buffer's first and last sizes; a warning when a burst needed it to grow and it
/// could not.
fn ring_at_end(end: &SessionEnd) -> (u64, u64) {
    let ring_bytes = end.ring_bytes;
    if let Some(why) = &end.ring_grow_failed {
        stream::note(
            stream::Level::Warning,
            &format!(
                "the ring buffer could not grow past {} KiB under a burst ({why}): records may have been lost; --buffer-pages sets its size",
                ring_bytes >> 10
            ),
        );
    }
    if end.late_origins > 0 {
        stream::note(
            stream::Level::Warning,
            &format!(
                "{} origin records reached fdaudit after the spawn whose leaked fd they made: those fds were named 'not seen' wrongly; please report it with this trace's -v output",
                end.late_origins
            ),
        );
    }
    (end.first_ring_bytes, ring_bytes)
}

/// Opens the records stream (stdout, or stderr when fdaudit runs a command, `--demo`
/// included: it runs fdaudit's own demo workload, or `-o FILE`) and creates the
/// `--perfetto`, `--junit` and `--sarif` files: before anything starts, so that a bad path
/// fails at once.
fn output_files(
    plan: &TracePlan,
) -> Result<(
    Option<perfetto::Perfetto>,
    Option<crate::output::junit::JunitFile>,
    Option<crate::output::sarif::SarifFile>,
)> {
    stream::open(plan.out.records.clone(), plan.out.json, "trace")?;
    let perfetto = (plan.out.perfetto.as_deref())
        .map(perfetto::Perfetto::create)
        .transpose()?;
    let junit = (plan.out.junit.as_deref())
        .map(crate::output::junit::JunitFile::create)
        .transpose()?;
    let sarif = plan.out.sarif.open()?;
    Ok((perfetto, junit, sarif))
}

/// `--reads`: the byte-at-a-time read storms the kernel counted, their fds named.
fn read_storms(session: &Session, targets: &mut reads::LiveTargets) -> Vec<reads::ReadStorm> {
    if !session.counting().reads() {
        return Vec::new();
    }
    let counts = session.read_counts();
    reads::storms(&counts, |pid, fd, ino| {
        targets.resolve(pid, fd, ino, procfs_util::fd_target)
    })
}

/// fdaudit's exit status and why: CMD's own status, unless it exited 0 and a gate
/// (`--fail-on-leak`, `--fail-on-strategy`, `--max-closes`) failed on what was seen
/// ([`exit::POLICY`], or `--policy-exit-code`: `codes.0`) or, set, could not pass on a
/// trace that the kernel's counters (`stats`, `missed`) say is incomplete
/// ([`exit::INCOMPLETE`], or `--incomplete-exit-code`: `codes.1`); 128+N after signal N
/// stopped fdaudit.
fn ending(
    reporter: &Reporter,
    exit_status: Option<i32>,
    stats: &fdaudit_common::Stats,
    missed: &crate::engine::ebpf::MissedRuns,
    (policy_code, incomplete_code): (u8, u8),
) -> Ending {
    let command_status = exit_status.map(exit::from_wait_status);
    let interrupted = crate::signals::first_received().is_some();
    let policy = reporter.policy_failure();
    let incomplete = (reporter.incomplete(&report::Losses::new(stats, missed))).is_some();
    let (exit_code, exit_reason) = match (command_status, policy) {
        _ if interrupted => (crate::signals::exit_status(), ExitReason::Interrupted),
        (Some(0) | None, Some(reason)) => (policy_code, reason),
        (Some(0) | None, None) if incomplete => (incomplete_code, ExitReason::Incomplete),
        (Some(c), _) => (c, ExitReason::Command),
        (None, None) => (exit::OK, ExitReason::Ok),
    };
    Ending {
        command_status,
        exit_code,
        exit_reason,
    }
}

/// What [`attach`] leaves: a session following the roots (with `-p`, the inheritable fds
/// they held at attach: [`targets::held_at_attach`]), or the status of a command that
/// could not be exec'd (said on the records stream).
enum Attached {
    Tracing(Box<Session>, Option<u32>, Option<Vec<targets::HeldFd>>),
    NotExecuted(u8),
}

/// Starts the held command (if any), loads and attaches the programs, tracks the roots and
/// releases the command. Returns the session and the command's pid.
fn attach(plan: &TracePlan, pids: &[u32], followed: Option<&Followed>) -> Result<Attached> {
    let opts = plan.session_options(followed)?;
    let held = if plan.command.is_empty() {
        None
    } else {
        Some(start_held(&plan.command)?)
    };
    let child = held.as_ref().map(|h| h.pid);
    crate::engine::pause::at("held");
    let kill_held = |e: anyhow::Error| {
        if let Some(pid) = child {
            // SAFETY: killing and reaping our own child, which has not exec'd yet.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
        }
        e
    };
    let mut session = Session::start(&opts).map_err(kill_held)?;
    session.identify_runtimes();
    if let Some(pid) = child {
        session.track(pid).map_err(kill_held)?;
    }
    // Read before the roots are tracked: an fd opened meanwhile is not in it (it counts).
    let held_fds = (!pids.is_empty()).then(|| targets::held_at_attach(pids));
    for &pid in pids {
        session
            .track_tree(pid)
            .with_context(|| format!("failed to trace PID {pid}"))?;
    }
    crate::engine::pause::at("tracked");
    let what = match (child, followed) {
        (Some(pid), _) => format!("command (pid {pid})"),
        (None, Some(f)) => format!("cgroup {}", f.path),
        (None, None) => crate::output::count(pids.len() as u64, "process tree", "process trees"),
    };
    stream::note(
        stream::Level::Note,
        &format!(
            "tracing {what}{}; Ctrl-C to stop",
            if plan.counting.syscalls() {
                ""
            } else {
                " (leaks only)"
            }
        ),
    );
    if let Some(h) = held {
        let name = h.name.clone();
        if let Err(errno) = h.release()? {
            drop(session);
            let (msg, code) = failed_exec_error(&name, errno);
            stream::report_error(&anyhow::anyhow!(msg));
            return Ok(Attached::NotExecuted(code));
        }
    }
    Ok(Attached::Tracing(Box::new(session), child, held_fds))
}
