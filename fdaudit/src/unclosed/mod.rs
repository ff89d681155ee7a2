//! `fdaudit unclosed`: fds the followed processes opened and never closed, grouped by the
//! code that opened them, with each process's headroom before its NOFILE limit and the
//! moment a call failed with EMFILE. The kernel keeps the live set (the origin programs'
//! `unclosed` mode: [`crate::engine::unclosed`]); this front end is one more sink of the
//! one follow loop, reading the set at the end, every `--interval` and at an EMFILE, and
//! holding it against each process's fd table ([`model::reconcile`]). docs/unclosed.md.

mod args;
mod gate;
mod model;
mod pprof;
mod procs;
mod rates;
mod report;
mod vouch;

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
        unclosed::LiveMaps,
        wait::Waiter,
    },
    exit,
    output::stream::{self, Dest, RewrittenFile, StdStream},
};
pub use args::UnclosedArgs;
use model::{group, reconcile, ProcTable};
use rates::{History, Projection, StackRates};
use report::{Emfile, Report, Shown};
use vouch::{followed_tables, incomplete};

/// Runs `fdaudit unclosed`.
pub fn run(args: UnclosedArgs) -> Result<u8> {
    check_seconds(&args)?;
    let pids = crate::trace::targets::check_targets(
        &args.pids,
        !args.command.is_empty(),
        args.cgroup.is_some(),
        crate::trace::targets::Follower::Unclosed,
    )?;
    let followed = args
        .cgroup
        .as_deref()
        .map(crate::cgroup::Followed::find)
        .transpose()?;
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "unclosed",
    )?;
    // Before anything starts, so that a bad path fails at once.
    let (folded, pprof) = (
        export(&args.folded, "--folded")?,
        export(&args.pprof, "--pprof")?,
    );
    let signal_rd = crate::signals::wake_pipe()?;
    crate::signals::install_stop();
    let Attached {
        mut session,
        maps,
        child,
        roots,
        at_attach,
    } = match attach(&args.command, &pids, followed.as_ref())? {
        Ok(a) => a,
        Err((msg, code)) => {
            stream::report_error(&anyhow::anyhow!(msg));
            return Ok(code);
        }
    };
    // A cgroup's members are followed, not waited for: it ends at Ctrl-C or its removal.
    let mut waiter = Waiter::new(signal_rd, if followed.is_some() { &[] } else { &roots[..] });
    let mut history = History::default();
    for (&pid, fds) in &at_attach {
        history.add(pid, 0.0, fds.len() as u64);
    }
    let mut sink = UnclosedSink {
        maps,
        roots: roots.clone(),
        at_attach,
        every: args.interval.map(Duration::from_secs_f64),
        next: None,
        min_age_ns: (args.min_age * 1e9) as u64,
        top: args.top,
        folded,
        pprof,
        gates: gate::Gates::new(args.fail_on_unclosed, args.fail_on_growth),
        emfile_seen: HashSet::new(),
        start_ns: stream::monotonic_ns(),
        rates: StackRates::default(),
        next_read: None,
        history,
    };
    let until = Until {
        child,
        dir: followed.as_ref().map(|f| f.dir.clone()),
        ..Default::default()
    };
    let (end, _) = follow(&mut session, &mut waiter, &until, &mut sink)?;
    if let (End::DirGone, Some(f)) = (end, &followed) {
        stream::note(
            stream::Level::Note,
            &format!("cgroup {} was removed", f.path),
        );
    }
    let code = finish(&args, &session, &mut sink, end, child);
    // fdaudit exits next: the session's drop detaches every program without waiting for the
    // kernel to free them (up to 200 ms after the report otherwise).
    session.detach_after_exit();
    code
}

/// `--interval` and `--min-age`: finite, and positive or (the age) zero.
fn check_seconds(args: &UnclosedArgs) -> Result<()> {
    if let Some(i) = args.interval.filter(|&i| !(i > 0.0 && i.is_finite())) {
        anyhow::bail!("--interval {i}: give a positive number of seconds");
    }
    if !(args.min_age >= 0.0 && args.min_age.is_finite()) {
        anyhow::bail!(
            "--min-age {}: give a number of seconds, 0 or more",
            args.min_age
        );
    }
    Ok(())
}

/// `--folded` or `--pprof` (`flag`) FILE, created.
fn export(path: &Option<PathBuf>, flag: &'static str) -> Result<Option<RewrittenFile>> {
    (path.as_deref())
        .map(|p| RewrittenFile::create(p, flag))
        .transpose()
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
    // A gate passes no verdict on what is known to be incomplete; without one, the report
    // says so.
    let gated = sink.gates.active() && verdict.is_none() && cmd_ok;
    let incomplete = match incomplete(session)? {
        Some(why) if gated => {
            let line = format!("incomplete: {why}: no gate passes on it");
            stream::note(stream::Level::Verdict, &line);
            Some(why)
        }
        Some(why) if !sink.gates.active() => {
            stream::note(stream::Level::Warning, &format!("incomplete: {why}"));
            None
        }
        _ => None,
    };
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
fn attach(
    command: &[OsString],
    pids: &[u32],
    followed: Option<&crate::cgroup::Followed>,
) -> Result<Result<Attached, (String, u8)>> {
    let held = if command.is_empty() {
        None
    } else {
        Some(crate::held::start_held(command)?)
    };
    let child = held.as_ref().map(|h| h.pid);
    let opts = SessionOptions {
        counting: Counting::Nothing,
        unclosed: true,
        cgroup: followed.map(|f| (f.id, f.level)),
        cgroup_dir: followed.map(|f| f.dir.clone()),
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
    // A cgroup's processes there now are followed as `-p` would follow them; the kernel
    // follows those that fork, exec or move in later.
    // fdaudit itself, when it runs there, is not one of them.
    let members = followed.map(|f| {
        let mut m = crate::cgroup::members(&f.dir);
        m.retain(|&p| p != std::process::id());
        m
    });
    let roots: Vec<u32> = match (child, &members) {
        (Some(c), _) => vec![c],
        (None, Some(m)) => m.clone(),
        (None, None) => pids.to_vec(),
    };
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
    track_members(&mut session, members.as_deref().unwrap_or(&[]))?;
    if let Some(h) = held {
        let name = h.name.clone();
        if let Err(errno) = h.release()? {
            // As `trace -- CMD` says it: 127 for ENOENT, 126 otherwise.
            return Ok(Err(crate::trace::failed_exec_error(&name, errno)));
        }
    }
    let what = match followed {
        Some(f) => format!("cgroup {} ({} process(es) now)", f.path, roots.len()),
        None => format!("{} process(es)", roots.len()),
    };
    stream::note(
        stream::Level::Note,
        &format!("following {what}; Ctrl-C to report and stop"),
    );
    Ok(Ok(Attached {
        session,
        maps,
        child,
        roots,
        at_attach,
    }))
}

/// Follows a cgroup's processes there at attach, as `-p` does; one that exited since the
/// list was read is no error.
fn track_members(session: &mut Session, members: &[u32]) -> Result<()> {
    for &pid in members {
        if session.track_tree(pid).is_err() && procs::fds_of(pid).is_some() {
            anyhow::bail!("failed to follow PID {pid} of the cgroup");
        }
    }
    Ok(())
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
    folded: Option<RewrittenFile>,
    pprof: Option<RewrittenFile>,
    gates: gate::Gates,
    /// Processes whose EMFILE moment was reported (a report comes at each new one; every
    /// report shows them all).
    emfile_seen: HashSet<u32>,
    /// When the roots were followed (CLOCK_MONOTONIC, as the kernel's times).
    start_ns: u64,
    rates: StackRates,
    history: History,
    /// When the live set is read next for the rates.
    next_read: Option<Instant>,
}

/// How often the live set is read for the rates, and the EMFILE table looked at.
const RESOLVE_EVERY: Duration = Duration::from_millis(250);
/// How often the kernel's count of call sites is checked, and new sites' return-address
/// slots learned and their stacks resolved (while their processes live): until a slot is
/// learned, each call at its stack id copies its stack words.
const LEARN_EVERY: Duration = Duration::from_millis(20);

impl Sink for UnclosedSink {
    fn events(&mut self, _session: &mut Session, _events: Vec<Event>) -> Result<()> {
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.every.map_or(LEARN_EVERY, |e| e.min(LEARN_EVERY)))
    }

    fn tick(&mut self, session: &mut Session, now: Instant) -> Result<bool> {
        self.maps.resolve_new_sites(session.stats()?.unclosed_sites);
        if self.next_read.is_none_or(|at| now >= at) {
            let read = self.maps.read()?;
            // A set past half full (closed entries of processes that come and go, which
            // each read removes) is read again at the next tick, so that it cannot fill
            // between two reads.
            let half = read.keys > fdaudit_common::MAX_UNCLOSED_LIVE as usize / 2;
            self.next_read = Some(now + if half { LEARN_EVERY } else { RESOLVE_EVERY });
            self.rates.observe(&read.entries);
            let full = self.maps.full();
            if full.iter().any(|(pid, _)| !self.emfile_seen.contains(pid)) {
                self.report(session, "EMFILE")?;
            }
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
        self.maps.resolve_new_sites(session.stats()?.unclosed_sites);
        self.maps.begin_report();
        let read = self.maps.read()?;
        self.rates.observe(&read.entries);
        // Each process with its live-set count, the largest first (read on every core).
        let mut live: HashMap<u32, usize> = HashMap::new();
        for e in &read.entries {
            *live.entry(e.pid).or_default() += 1;
        }
        for &p in self.roots.iter().chain(self.at_attach.keys()) {
            live.entry(p).or_default();
        }
        let mut pids: Vec<(usize, u32)> = live.into_iter().map(|(p, n)| (n, p)).collect();
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let tables = followed_tables(session, &pids);
        let rec = reconcile(&read.entries, &tables, &self.at_attach);
        let now_ns = stream::monotonic_ns();
        let secs = now_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        for &key in &rec.forget {
            self.rates.dropped(key, tables.contains_key(&key.0));
        }
        let projections = self.project(&rec.procs, secs);
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
                opened_closed: self.rates.of(g.stack_id),
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
            projections: &projections,
            secs,
            emfile: &emfile,
            batched: read.batched,
        }
        .write()?;
        self.exports(&groups)?;
        if self.gates.active() {
            let held = self.held(&rec.procs, &rec.outstanding, now_ns);
            self.gates.observe(held);
        }
        self.maps.forget(&rec.forget);
        Ok(())
    }

    /// `--folded` and `--pprof`: every stack (not only the --top shown), rewritten whole.
    fn exports(&mut self, groups: &[model::Group]) -> Result<()> {
        if self.folded.is_none() && self.pprof.is_none() {
            return Ok(());
        }
        let stacks: Vec<_> = groups
            .iter()
            .map(|g| {
                let frames = self.maps.frames(g.stack_id, *g.pids.first().unwrap_or(&0));
                (frames, g.stack_id, g.count)
            })
            .collect();
        if let Some(file) = &mut self.folded {
            let folded: Vec<_> = stacks.iter().map(|(f, _, n)| (f.clone(), *n)).collect();
            file.rewrite(report::folded(&folded).as_bytes())?;
        }
        if let Some(file) = &mut self.pprof {
            let unix_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64);
            let gz = pprof::encode(&pprof::profile(&stacks, unix_ns))
                .context("failed to encode the pprof profile")?;
            file.rewrite(&gz)?;
        }
        Ok(())
    }

    /// Adds each live process's open fds to its history and projects its limit; an exited
    /// process's history ends.
    fn project(&mut self, procs: &[model::ProcSummary], secs: f64) -> Vec<Projection> {
        procs
            .iter()
            .map(|p| {
                if p.exited {
                    self.history.remove(p.pid);
                    return Projection::of(None, p.open, None);
                }
                self.history.add(p.pid, secs, p.open);
                Projection::of(self.history.fit(p.pid), p.open, p.nofile_soft)
            })
            .collect()
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
