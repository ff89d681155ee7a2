//! `fdaudit trace`: follow a process tree with eBPF; per spawn, the fds that crossed execve
//! and what the child did between fork and exec.

pub mod chains;
pub mod filter;
pub mod reads;
pub mod report;
pub mod session;
pub mod stamp;
pub mod strategy;

use std::{
    ffi::OsString,
    io::Write as _,
    sync::atomic::{AtomicI32, Ordering},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::output;
use report::Collector;
use session::{Event, Session, SessionOptions};

/// Arguments of `fdaudit trace`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: the command's own status with `-- CMD` (128+N when killed by \
signal N), else 0; 3 with --fail-on-leak when a spawn leaked an fd; 2 on an error; 130 \
after Ctrl-C."
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

    /// Stop after this many seconds (e.g. 30, 1.5).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,

    /// Attach only the scheduler tracepoints: leaked fds, no syscall counts, near-zero cost.
    #[arg(long, conflicts_with = "reads")]
    pub leaks_only: bool,

    /// Also count read()/readv()/pread64() calls per process and fd; flag byte-at-a-time reads.
    #[arg(long)]
    pub reads: bool,

    /// Exit with status 3 when any spawn leaked an fd (for CI).
    #[arg(long)]
    pub fail_on_leak: bool,

    /// Trace the built-in workload: a spawner holding a credentials file and a listening
    /// socket, spawning with a leaking, a close-loop, a poll-scan and a close_range strategy.
    #[arg(long, conflicts_with_all = ["pids", "command"])]
    pub demo: bool,

    /// Do not print a line per spawn, only the summary.
    #[arg(short, long)]
    pub quiet: bool,

    /// The command to start and trace from its first instruction.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Exit status with --fail-on-leak when a spawn leaked.
pub const EXIT_LEAK: u8 = 3;
/// Exit status after Ctrl-C / SIGTERM.
pub const EXIT_INTERRUPTED: u8 = 130;

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

pub fn run(mut args: TraceArgs) -> Result<u8> {
    if args.demo {
        let me = std::env::current_exe().context("failed to find fdaudit's own executable")?;
        args.command = vec![me.into_os_string(), "__demo".into()];
    }
    if args.pids.is_empty() && args.command.is_empty() {
        bail!("nothing to trace: give -p PID, -- CMD ARGS... or --demo");
    }
    for &pid in &args.pids {
        // SAFETY: signal 0 only checks that the process exists.
        if pid == 0
            || unsafe { libc::kill(pid as i32, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            bail!("no process with PID {pid}: check it with `ps -p {pid}`");
        }
    }
    let opts = SessionOptions {
        leaks_only: args.leaks_only,
        reads: args.reads,
    };
    install_signal_handlers();
    let held = if args.command.is_empty() {
        None
    } else {
        Some(start_held(&args.command)?)
    };
    let child = held.as_ref().map(|h| h.pid);
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
    if let Some(pid) = child {
        session.track(pid).map_err(kill_held)?;
    }
    for &pid in &args.pids {
        session
            .track_tree(pid)
            .with_context(|| format!("failed to trace PID {pid}"))?;
    }
    let what = match child {
        Some(pid) => format!("command (pid {pid})"),
        None => format!("{} process tree(s)", args.pids.len()),
    };
    crate::diag!(
        "fdaudit: tracing {what}{}; Ctrl-C to stop",
        if args.leaks_only { " (leaks only)" } else { "" }
    );
    if let Some(h) = held {
        h.release()?;
    }
    let mut tracer = Tracer::new(&args, &session);
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let root_pids: Vec<u32> = child.map(|c| vec![c]).unwrap_or_else(|| args.pids.clone());
    let mut exit_status: Option<i32> = None;
    loop {
        for ev in session.poll(Duration::from_millis(100))? {
            tracer.handle(ev, &root_pids)?;
        }
        if SIGNALLED.load(Ordering::SeqCst) != 0 {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if let Some(pid) = child {
            if let Some(st) = try_wait(pid)? {
                exit_status = Some(st);
                break;
            }
        } else if root_pids.iter().all(|&p| !alive(p)) {
            break;
        }
    }
    // Records written before the end are still in the ring buffer: take them all.
    for ev in session.poll(Duration::from_millis(20))? {
        tracer.handle(ev, &root_pids)?;
    }
    let stats = session.stats()?;
    let storms = if args.reads {
        reads::storms(&session.read_counts(), session::proc_fd_target)
    } else {
        Vec::new()
    };
    drop(session); // detach before printing the summary
    let leaked = tracer.collector.totals().spawns_with_leaks > 0;
    tracer.finish(stats, storms)?;

    if SIGNALLED.load(Ordering::SeqCst) != 0 && exit_status.is_none() {
        return Ok(EXIT_INTERRUPTED);
    }
    let mut code = exit_status.map(exit_code).unwrap_or(0);
    if args.fail_on_leak && leaked && code == 0 {
        crate::diag!("fdaudit: spawns leaked fds (--fail-on-leak)");
        code = EXIT_LEAK;
    }
    Ok(code)
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purposes: /proc/PID/stat state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s.get(i + 2..i + 3))
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// The command, forked and held before exec until the programs are attached.
struct Held {
    pid: u32,
    release_fd: i32,
    error_fd: i32,
    name: String,
}

impl Held {
    /// Lets the command exec; fails when the exec itself failed (no such file, ...).
    fn release(self) -> Result<()> {
        // SAFETY: writing one byte to the pipe we own, then closing it.
        let rc = unsafe { libc::write(self.release_fd, [0u8].as_ptr().cast(), 1) };
        unsafe { libc::close(self.release_fd) };
        if rc != 1 {
            return Err(std::io::Error::last_os_error()).context("failed to release the command");
        }
        // The error pipe is close-on-exec: EOF means the exec happened.
        let mut errno = [0u8; 4];
        // SAFETY: reading into a buffer we own.
        let n = unsafe { libc::read(self.error_fd, errno.as_mut_ptr().cast(), 4) };
        unsafe { libc::close(self.error_fd) };
        if n == 4 {
            let e = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            return Err(e).with_context(|| {
                format!(
                    "failed to start {}: check the command exists and is executable",
                    self.name
                )
            });
        }
        Ok(())
    }
}

/// Forks CMD with exactly fdaudit's own fds, environment and limits; it waits on a
/// close-on-exec pipe before exec, so none of fdaudit's own fds (created later) cross into it.
fn start_held(cmd: &[OsString]) -> Result<Held> {
    use std::os::unix::ffi::OsStrExt as _;
    let argv: Vec<std::ffi::CString> = cmd
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("the command has an argument with a NUL byte")?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let (mut hold, mut err) = ([0i32; 2], [0i32; 2]);
    // SAFETY: pipe2 fills arrays we own.
    if unsafe { libc::pipe2(hold.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        || unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0
    {
        return Err(std::io::Error::last_os_error()).context("failed to create the hold pipe");
    }
    // SAFETY: between fork and exec the child only makes async-signal-safe calls on memory
    // prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("failed to fork the command");
    }
    if pid == 0 {
        unsafe {
            libc::close(hold[1]);
            libc::close(err[0]);
            let mut b = 0u8;
            if libc::read(hold[0], (&mut b as *mut u8).cast(), 1) != 1 {
                // fdaudit went away before attaching: do not run untraced.
                libc::_exit(EXIT_INTERRUPTED as i32);
            }
            // Rust ignores SIGPIPE in fdaudit; the command gets the default, as from a shell.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(err[1], errno.to_ne_bytes().as_ptr().cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
        libc::close(hold[0]);
        libc::close(err[1]);
    }
    Ok(Held {
        pid: pid as u32,
        release_fd: hold[1],
        error_fd: err[0],
        name: cmd[0].to_string_lossy().into_owned(),
    })
}

/// Waits for the command without blocking: its exit status once it has exited.
fn try_wait(pid: u32) -> Result<Option<i32>> {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    let rc = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("failed to wait for the command");
    }
    Ok((rc != 0).then_some(status))
}

/// A shell-like exit status from a wait status: the code, or 128+signal.
pub fn exit_code(status: i32) -> u8 {
    u8::try_from(crate::spawner::exit_code(status)).unwrap_or(1)
}

/// Per-event handling and final output.
struct Tracer<'a> {
    args: &'a TraceArgs,
    collector: Collector,
    root_inherited: Vec<session::LeakedFd>,
    seen_root_exec: Vec<u32>,
    probe_cost_ns: f64,
    close_cost_ns: f64,
    leaks_only: bool,
}

impl<'a> Tracer<'a> {
    fn new(args: &'a TraceArgs, s: &Session) -> Self {
        Tracer {
            args,
            collector: Collector::default(),
            root_inherited: Vec::new(),
            seen_root_exec: Vec::new(),
            probe_cost_ns: s.probe_cost_ns(),
            close_cost_ns: s.close_cost_ns(),
            leaks_only: s.leaks_only(),
        }
    }

    fn handle(&mut self, ev: Event, roots: &[u32]) -> Result<()> {
        match ev {
            Event::Spawn(s) => {
                // The traced command's own exec (or a -p root's re-exec) is not a spawn: what it
                // inherited came from fdaudit's caller, the baseline every spawn starts from.
                if roots.contains(&s.pid)
                    && s.flags.contains(&"no_fork")
                    && !self.seen_root_exec.contains(&s.pid)
                {
                    self.seen_root_exec.push(s.pid);
                    self.root_inherited = s.leaked_fds.clone();
                    return Ok(());
                }
                self.report_spawn(&s)?;
            }
            Event::Exit(mut e) => {
                self.collector.add_exit(&e);
                if let Some(s) = e.failed_spawn.take() {
                    self.report_spawn(&s)?;
                }
            }
        }
        Ok(())
    }

    fn report_spawn(&mut self, s: &session::Spawn) -> Result<()> {
        self.collector.add(s);
        if self.args.json {
            output::json_line(&mut std::io::stdout().lock(), s)?;
        } else if !self.args.quiet {
            writeln!(std::io::stdout().lock(), "{}", report::spawn_line(s))?;
        }
        Ok(())
    }

    fn finish(self, stats: fdaudit_common::Stats, storms: Vec<reads::ReadStorm>) -> Result<()> {
        let groups = self.collector.groups();
        let mut out = std::io::stdout().lock();
        let summary = report::Summary {
            record_type: "summary",
            spawns: self.collector.spawns,
            lost_records: stats.lost_records,
            untracked_forks: stats.tracked_full,
            read_table_full: stats.reads_full,
            fork_only_children: self.collector.fork_only,
            probe_cost_ns: self.probe_cost_ns,
            close_cost_ns: self.close_cost_ns,
            leaks_only: self.leaks_only,
            totals: self.collector.totals(),
            groups,
            partial: self.collector.partial_notes(),
            read_storms: storms,
        };
        if self.args.json {
            for s in &summary.read_storms {
                output::json_line(&mut out, s)?;
            }
            output::json_line(&mut out, &summary)?;
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "{} spawns traced, {} with leaked fds ({} fds); {} close(), {} close_range()",
            summary.spawns,
            summary.totals.spawns_with_leaks,
            summary.totals.leaked_fds,
            summary.totals.close_calls,
            summary.totals.close_range_calls
        )?;
        if summary.totals.transient_leaked_fds > 0 {
            writeln!(
                out,
                "({} more fds crossed into images that exec'd again, e.g. a spawn helper; not counted as leaks)",
                summary.totals.transient_leaked_fds
            )?;
        }
        if !summary.groups.is_empty() {
            writeln!(out, "{}", report::summary_table(&summary.groups))?;
        }
        if !summary.read_storms.is_empty() {
            writeln!(out, "\nbyte-at-a-time reads:")?;
            writeln!(out, "{}", reads::storm_table(&summary.read_storms))?;
        }
        if !self.root_inherited.is_empty() {
            let fds: Vec<String> = self
                .root_inherited
                .iter()
                .map(|f| format!("{}={}", f.fd, f.target))
                .collect();
            crate::diag!(
                "note: the traced command itself inherited {} fd(s) from fdaudit's caller: {} (every spawn that does not close them leaks them too)",
                fds.len(),
                fds.join(" ")
            );
        }
        if self.leaks_only {
            crate::diag!(
                "note: --leaks-only: syscalls were not traced, so no close counts or strategies"
            );
        } else {
            crate::diag!(
                "note: probes cost ~{:.0} ns per counted syscall (close() itself ~{:.0} ns untraced); 'untraced' windows subtract it",
                self.probe_cost_ns, self.close_cost_ns
            );
        }
        if summary.lost_records > 0 {
            crate::diag!(
                "warning: {} records were lost (ring buffer full): some spawns are missing",
                summary.lost_records
            );
        }
        if summary.read_table_full > 0 {
            crate::diag!(
                "warning: {} reads were not counted: the per-(process, fd) table ({} entries) was full",
                summary.read_table_full,
                fdaudit_common::MAX_READS
            );
        }
        if summary.untracked_forks > 0 {
            crate::diag!(
                "warning: {} forks were not traced (traced-process table full)",
                summary.untracked_forks
            );
        }
        for p in &summary.partial {
            crate::diag!("warning: partial data: {p}");
        }
        Ok(())
    }
}
