//! `fdaudit unclosed`: fds the followed processes opened and never closed, grouped by the
//! code that opened them, with each process's headroom before its NOFILE limit and the
//! moment a call failed with EMFILE. The kernel keeps the live set (the origin programs'
//! `unclosed` mode: [`crate::engine::unclosed`]); this front end is one more sink of the
//! one follow loop, reading the set at the end, every `--interval` and at an EMFILE, and
//! holding it against each process's fd table ([`model::reconcile`]). docs/unclosed.md.

mod gate;
mod model;
mod procs;
mod report;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    ffi::OsString,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use fdaudit_common::{OriginCall, ENFILE};

use crate::{
    engine::{
        counting::Counting,
        follow::{follow, End, Sink, Until},
        session::{Session, SessionOptions},
        spawn::Event,
        unclosed::{execs_of, LiveMaps},
        wait::Waiter,
    },
    exit,
    output::stream::{self, Dest, StdStream},
};
use model::{group, reconcile, ProcTable};
use report::{Emfile, Report, Shown};

/// Arguments of `fdaudit unclosed`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Reports at the end (CMD's exit, the followed processes' exit, Ctrl-C) and \
every --interval. Fds open before tracing started are counted as `before tracing`, never given \
a stack; fds with no creation seen as `not seen` (docs/unclosed.md)."
)]
pub struct UnclosedArgs {
    /// Follow these running processes and their descendants.
    #[arg(short = 'p', long = "pid", value_name = "PID", num_args = 1..)]
    pub pids: Vec<u32>,

    /// Also report every SECONDS (default: only at the end).
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<f64>,

    /// Hide fds younger than SECONDS.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub min_age: f64,

    /// Show the N stacks holding most fds.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// JSON records (docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Write the report to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write flame-graph folded stacks (weight: outstanding fds) to FILE at each
    /// report (`flamegraph.pl FILE > fds.svg`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Exit 3 when a followed process (CMD exiting 0) exits holding fds it opened while
    /// followed; the verdict names the call sites.
    #[arg(long)]
    pub fail_on_unclosed: bool,

    /// Exit 3 when a followed process's outstanding set grew by N fds or more over the run.
    #[arg(long, value_name = "N")]
    pub fail_on_growth: Option<u64>,

    #[command(flatten)]
    pub policy_exit_code: exit::PolicyCode,

    /// The exit status when a gate was set and none failed, but the run is known to be
    /// incomplete (the live set was full, forks not followed), instead of 4: see
    /// --policy-exit-code (1 to 125, not 2).
    #[arg(long, value_name = "N", default_value_t = exit::INCOMPLETE, value_parser = exit::parse_verdict_code)]
    pub incomplete_exit_code: u8,

    /// The command to run and follow.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Runs `fdaudit unclosed`.
pub fn run(args: UnclosedArgs) -> Result<u8> {
    if let Some(i) = args.interval.filter(|&i| !(i > 0.0 && i.is_finite())) {
        anyhow::bail!("--interval {i}: give a positive number of seconds");
    }
    if !(args.min_age >= 0.0 && args.min_age.is_finite()) {
        anyhow::bail!(
            "--min-age {}: give a number of seconds, 0 or more",
            args.min_age
        );
    }
    let pids = crate::trace::targets::check_targets(&args.pids, !args.command.is_empty(), false)?;
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "unclosed",
    )?;
    let signal_rd = crate::signals::wake_pipe()?;
    crate::signals::install_stop();
    let Attached {
        mut session,
        maps,
        child,
        roots,
        at_attach,
    } = match attach(&args.command, &pids)? {
        Ok(a) => a,
        Err((msg, code)) => {
            stream::report_error(&anyhow::anyhow!(msg));
            return Ok(code);
        }
    };
    let mut waiter = Waiter::new(signal_rd, &roots);
    let mut sink = UnclosedSink {
        maps,
        roots: roots.clone(),
        at_attach,
        every: args.interval.map(Duration::from_secs_f64),
        next: None,
        min_age_ns: (args.min_age * 1e9) as u64,
        top: args.top,
        folded: args.folded.clone(),
        gates: gate::Gates::new(args.fail_on_unclosed, args.fail_on_growth),
        emfile_seen: HashSet::new(),
    };
    let until = Until {
        child,
        ..Default::default()
    };
    let (end, _) = follow(&mut session, &mut waiter, &until, &mut sink)?;
    finish(&args, &session, &mut sink, end, child)
}

/// The last report, the gates' verdict and the exit status.
fn finish(
    args: &UnclosedArgs,
    session: &Session,
    sink: &mut UnclosedSink,
    end: End,
    child: Option<u32>,
) -> Result<u8> {
    let why = match end {
        End::Signal(_) => "stopped",
        End::Exited(_) => "command exited",
        _ => "end",
    };
    sink.report(session, why)?;
    // CMD's own failure, or a signal's status, wins over the gates.
    let cmd_ok = !matches!(end, End::Exited(st) if st != 0) && !matches!(end, End::Signal(_));
    let verdict = sink.gates.verdict(cmd_ok);
    if let Some(v) = &verdict {
        stream::note(stream::Level::Verdict, v);
    }
    // A gate passes no verdict on what is known to be incomplete.
    let incomplete = if sink.gates.active() && verdict.is_none() && cmd_ok {
        incomplete(session)?
    } else {
        None
    };
    if let Some(why) = &incomplete {
        stream::note(
            stream::Level::Verdict,
            &format!("incomplete: {why}: no gate passes on it"),
        );
    }
    stream::finish()?;
    if verdict.is_some() {
        return Ok(args.policy_exit_code.code);
    }
    if incomplete.is_some() {
        return Ok(args.incomplete_exit_code);
    }
    Ok(match end {
        End::Signal(sig) => {
            // The signal that stopped fdaudit is passed on to CMD (a terminal's Ctrl-C
            // already reached it).
            if let Some(pid) = child {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid as i32, sig) };
            }
            crate::signals::exit_status()
        }
        // CMD's own status, as `trace -- CMD` returns it.
        End::Exited(st) => exit::from_wait_status(st),
        _ => exit::OK,
    })
}

/// The session with the roots followed, and what was open when they were.
struct Attached {
    session: Session,
    maps: LiveMaps,
    child: Option<u32>,
    roots: Vec<u32>,
    at_attach: HashMap<u32, HashSet<i32>>,
}

/// Starts the session and follows `command` (held until then) or `pids`.
/// `Ok(Err((message, status)))`: CMD could not be exec'd.
fn attach(command: &[OsString], pids: &[u32]) -> Result<Result<Attached, (String, u8)>> {
    let held = if command.is_empty() {
        None
    } else {
        Some(crate::held::start_held(command)?)
    };
    let child = held.as_ref().map(|h| h.pid);
    let opts = SessionOptions {
        counting: Counting::Nothing,
        unclosed: true,
        ..Default::default()
    };
    let mut session = Session::start(&opts).inspect_err(|_| {
        if let Some(pid) = child {
            // SAFETY: killing and reaping our own child, which has not exec'd yet.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
        }
    })?;
    let maps = LiveMaps::take(&mut session)?;
    let roots: Vec<u32> = child.map(|c| vec![c]).unwrap_or_else(|| pids.to_vec());
    // Read before the roots are followed: an fd made meanwhile is `not seen`, never
    // wrongly `before tracing`.
    let at_attach: HashMap<u32, HashSet<i32>> = procs::at_attach(&roots).into_iter().collect();
    if let Some(pid) = child {
        session.track(pid)?;
    }
    for &pid in pids {
        session
            .track_tree(pid)
            .with_context(|| format!("failed to follow PID {pid}"))?;
    }
    if let Some(h) = held {
        let name = h.name.clone();
        if let Err(errno) = h.release()? {
            // As `trace -- CMD` says it: 127 for ENOENT, 126 otherwise.
            return Ok(Err(crate::trace::failed_exec_error(&name, errno)));
        }
    }
    stream::note(
        stream::Level::Note,
        &format!(
            "following {} process(es); Ctrl-C to report and stop",
            roots.len()
        ),
    );
    Ok(Ok(Attached {
        session,
        maps,
        child,
        roots,
        at_attach,
    }))
}

/// The sink: resolves new call sites as they come, reports on time and at an EMFILE.
struct UnclosedSink {
    maps: LiveMaps,
    roots: Vec<u32>,
    at_attach: HashMap<u32, HashSet<i32>>,
    every: Option<Duration>,
    next: Option<Instant>,
    min_age_ns: u64,
    top: usize,
    folded: Option<PathBuf>,
    gates: gate::Gates,
    /// Processes whose EMFILE moment was reported (a report comes at each new one; every
    /// report shows them all).
    emfile_seen: HashSet<u32>,
}

/// How often new call sites are resolved (while their processes live).
const RESOLVE_EVERY: Duration = Duration::from_millis(250);

impl Sink for UnclosedSink {
    fn events(&mut self, _session: &mut Session, _events: Vec<Event>) -> Result<()> {
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.every.map_or(RESOLVE_EVERY, |e| e.min(RESOLVE_EVERY)))
    }

    fn tick(&mut self, session: &mut Session, now: Instant) -> Result<bool> {
        self.maps.resolve_new_sites();
        let full = self.maps.full();
        if full.iter().any(|(pid, _)| !self.emfile_seen.contains(pid)) {
            self.report(session, "EMFILE")?;
        }
        if let Some(every) = self.every {
            let next = *self.next.get_or_insert(now + every);
            if now >= next {
                self.next = Some(now + every);
                self.report(session, "interval")?;
            }
        }
        Ok(false)
    }
}

impl UnclosedSink {
    /// Reads the live set, holds it against the tables and writes one report.
    fn report(&mut self, session: &Session, why: &'static str) -> Result<()> {
        self.maps.resolve_new_sites();
        let read = self.maps.read()?;
        let mut pids: Vec<u32> = read.entries.iter().map(|e| e.pid).collect();
        pids.extend(&self.roots);
        pids.extend(self.at_attach.keys());
        pids.sort_unstable();
        pids.dedup();
        let tables: BTreeMap<u32, ProcTable> = pids
            .iter()
            .filter_map(|&p| Some((p, procs::table_of(p, execs_of(session, p).unwrap_or(0))?)))
            .collect();
        let rec = reconcile(&read.entries, &tables, &self.at_attach);
        let now_ns = stream::monotonic_ns();
        let groups = group(&rec.outstanding, now_ns, self.min_age_ns);
        let shown: Vec<Shown> = groups
            .iter()
            .take(self.top)
            .map(|g| Shown {
                frames: self.maps.frames(g.stack_id, *g.pids.first().unwrap_or(&0)),
                targets: g
                    .samples
                    .iter()
                    .filter_map(|&(pid, fd)| procs::target(pid, fd))
                    .collect(),
                group: g.clone(),
            })
            .collect();
        let emfile = self.emfile(&rec.outstanding, &tables, now_ns);
        Report {
            why,
            now_ns,
            shown: &shown,
            stacks: groups.len(),
            outstanding: groups.iter().map(|g| g.count).sum(),
            procs: &rec.procs,
            emfile: &emfile,
            batched: read.batched,
        }
        .write()?;
        if let Some(path) = &self.folded {
            let stacks: Vec<_> = groups
                .iter()
                .map(|g| {
                    (
                        self.maps.frames(g.stack_id, *g.pids.first().unwrap_or(&0)),
                        g.count,
                    )
                })
                .collect();
            write_folded(path, &report::folded(&stacks))?;
        }
        if self.gates.active() {
            let held = self.held(&rec.procs, &rec.outstanding, now_ns);
            self.gates.observe(held);
        }
        self.maps.forget(&rec.forget);
        Ok(())
    }

    /// What each process holds, with its top call sites named, for the gates.
    fn held(
        &mut self,
        procs: &[model::ProcSummary],
        outstanding: &[model::Outstanding],
        now_ns: u64,
    ) -> Vec<gate::Held> {
        let mut out = Vec::new();
        for p in procs.iter().filter(|p| p.outstanding > 0) {
            let mine: Vec<_> = outstanding
                .iter()
                .filter(|o| o.pid == p.pid)
                .cloned()
                .collect();
            let sites = group(&mine, now_ns, 0)
                .iter()
                .take(3)
                .map(|g| {
                    (
                        site_name(&self.maps.frames(g.stack_id, p.pid), g.stack_id),
                        g.count,
                    )
                })
                .collect();
            out.push(gate::Held {
                pid: p.pid,
                comm: p.comm.clone(),
                exited: p.exited,
                count: p.outstanding,
                sites,
            });
        }
        out
    }

    /// The EMFILE/ENFILE moments, each with the stack holding most of its process's fds.
    fn emfile(
        &mut self,
        outstanding: &[model::Outstanding],
        tables: &BTreeMap<u32, ProcTable>,
        now_ns: u64,
    ) -> Vec<Emfile> {
        let mut out = Vec::new();
        for (pid, f) in self.maps.full() {
            self.emfile_seen.insert(pid);
            let mine: Vec<_> = outstanding
                .iter()
                .filter(|o| o.pid == pid)
                .cloned()
                .collect();
            let top = group(&mine, now_ns, 0).into_iter().next();
            out.push(Emfile {
                pid,
                comm: tables.get(&pid).map(|t| t.comm.clone()).unwrap_or_default(),
                syscall: OriginCall::from_u32(f.call).map_or("?", |c| c.name()),
                errno: if i64::from(f.errno) == ENFILE {
                    "ENFILE"
                } else {
                    "EMFILE"
                },
                count: f.count,
                age_ns: now_ns.saturating_sub(f.time_ns),
                frames: self.maps.frames(f.stack_id, pid),
                top_stack_id: top.as_ref().map(|g| g.stack_id),
                top_count: top.map_or(0, |g| g.count),
            });
        }
        out
    }
}

/// Writes `text` over FILE (`--folded`), opened as `-o` is.
fn write_folded(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut f = crate::output::stream::create(path)?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// A call site's name for a verdict: the first named frame outside the C library's
/// wrappers (the code that called open), else the innermost, else the stack id.
fn site_name(frames: &[crate::engine::origin::Frame], id: i32) -> String {
    let in_libc = |f: &&crate::engine::origin::Frame| {
        f.module
            .as_deref()
            .is_some_and(|m| m.contains("/libc.so") || m.contains("/libc-"))
    };
    frames
        .iter()
        .filter(|f| f.symbol.is_some())
        .find(|f| !in_libc(f))
        .or(frames.first())
        .and_then(|f| f.symbol.clone())
        .unwrap_or_else(|| format!("stack {id}"))
}

/// Why the run is known to be incomplete, if it is: fds the full live set could not keep,
/// forks the full traced set could not follow.
fn incomplete(session: &Session) -> Result<Option<String>> {
    let stats = session.stats()?;
    let mut why = Vec::new();
    if stats.unclosed_full > 0 {
        why.push(format!(
            "{} made while the live set was full",
            crate::output::count(stats.unclosed_full, "fd", "fds")
        ));
    }
    if stats.tracked_full > 0 {
        why.push(format!(
            "{} not followed (the traced set was full)",
            crate::output::count(stats.tracked_full, "fork", "forks")
        ));
    }
    Ok((!why.is_empty()).then(|| why.join(", ")))
}
