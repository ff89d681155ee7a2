//! What the summary adds up: the totals, the groups of spawns by parent and path, the
//! `--fail-on-leak` policy, and the summary record itself.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::super::{
    chains::{Chains, Link, MadeBy, Spawner},
    reads, TraceRecord,
};
use crate::engine::{
    counts::SyscallCounts,
    flags::SpawnFlags,
    maker::SpawnerCode,
    origin::Origin,
    spawn::{Exit, LeakedFd, Spawn},
    strategy::Strategy,
};
use crate::{
    engine::ebpf::MissedRuns,
    fdkind::FdKind,
    lossless_field,
    output::{count, text::Lossless},
};

lossless_field!(GroupExecPath, "exec_path");
lossless_field!(GroupParentComm, "parent_comm");

/// Totals over a trace.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct TraceTotals {
    /// Every window counter, summed (`poll_nfds_max`: the largest).
    #[serde(flatten, serialize_with = "super::json::counts")]
    pub calls: SyscallCounts,
    /// fcntl() calls of either kind (`fcntl_setfd_calls + fcntl_getfd_calls`).
    pub fcntl_calls: u64,
    /// fds leaked at each process's last exec (what reached the image that runs), less
    /// those of `leaked_inherited_fds`.
    #[serde(rename = "leaked_fd_count")]
    pub leaked_fds: u64,
    /// fds the traced command itself inherited from fdaudit's caller that also reached a
    /// spawn's last image: passed on, not counted in `leaked_fds` (0 with `--no-baseline`,
    /// which counts them there).
    #[serde(rename = "leaked_inherited_fd_count")]
    pub leaked_inherited_fds: u64,
    /// Processes whose last exec leaked an fd (an inherited one alone does not count).
    pub spawns_with_leaks: u64,
    /// Of those, the ones that leaked an fd other than what the traced command itself
    /// inherited (unless `--no-baseline`) and the `--ignore-fd` ones: what `--fail-on-leak`
    /// fails on.
    pub spawns_with_new_leaks: u64,
    /// fds that crossed an exec into an image that exec'd again (a spawn helper such as
    /// jspawnhelper, a shell's `exec`): reported per record, not counted as leaks above.
    #[serde(rename = "transient_leaked_fd_count")]
    pub transient_leaked_fds: u64,
    /// Of `leaked_fds`, those that crossed a privilege or namespace boundary (critical).
    #[serde(rename = "critical_leaked_fd_count")]
    pub critical_leaked_fds: u64,
    pub window_ns: u64,
    pub window_corrected_ns: u64,
}

/// One row of the summary: spawns grouped by parent, exec path (`first → last` for an
/// exec chain) and strategy.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// The container the spawns ran in (`docker:0123456789ab`), when they ran in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(flatten)]
    pub parent_comm: Lossless<Vec<u8>, GroupParentComm>,
    /// The exec path, or `first → last` (`first → … → last`) for an exec chain.
    #[serde(flatten)]
    pub exec_path: Lossless<Vec<u8>, GroupExecPath>,
    pub spawns: u64,
    #[serde(rename = "close_calls_median")]
    pub close_median: u64,
    #[serde(rename = "close_calls_max")]
    pub close_max: u64,
    pub window_median_ns: u64,
    pub window_p95_ns: u64,
    pub strategy: String,
    /// fds that reached the last image of each spawn (the inherited ones apart).
    #[serde(rename = "leaked_fd_count")]
    pub leaked_fds: u64,
    /// fds the traced command inherited from fdaudit's caller that reached the last image.
    #[serde(rename = "leaked_inherited_fd_count")]
    pub leaked_inherited_fds: u64,
    /// fds that crossed into images that exec'd again (not counted as leaks).
    #[serde(rename = "transient_leaked_fd_count")]
    pub transient_fds: u64,
    /// The runtime of the (first) spawning process, from its image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::runtime::Runtime>,
    /// What the advice needs (the runtime, NOFILE, the walk, a leak's origin).
    #[serde(skip)]
    pub spawner: Spawner,
}

/// The summary JSON object (last line with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub spawns: u64,
    /// Records lost between the kernel and the decoder: the ring buffer was full, or
    /// fdaudit's queue behind it (`queue_dropped_records` of them).
    pub lost_records: u64,
    pub queue_dropped_records: u64,
    /// Runs of each program the kernel skipped (a run preempted and its hook fired again on
    /// that CPU): by program name, or "unknown" before Linux 5.12. A skipped exec, fork or
    /// exit program loses a record, a skipped syscall program a count.
    #[serde(serialize_with = "super::json::missed_runs")]
    pub bpf_missed_runs: MissedRuns,
    pub untracked_forks: u64,
    /// (process, fd) read counters not kept because the kernel's table was full (`--reads`).
    pub read_table_full: u64,
    pub fork_only_children: u64,
    /// The probes' measured cost per counted syscall (what `window_corrected_ns` subtracts).
    pub probe_cost_ns: u64,
    /// One close() of a closed fd, untraced, measured at start.
    pub close_cost_ns: u64,
    /// `--no-syscalls` (schema 1 named the key after the flag's 0.1.0 spelling).
    pub no_syscalls: bool,
    /// The fds the traced command inherited from fdaudit's caller (the baseline).
    #[serde(serialize_with = "super::json::baseline_fds")]
    pub inherited_fds: Vec<LeakedFd>,
    /// The command's own exit status (shell-like: 128+N when killed by signal N); null
    /// with `-p` or when it had not exited.
    pub command_status: Option<u8>,
    /// fdaudit's exit status.
    pub exit_code: u8,
    /// Why fdaudit exits with `exit_code`: "command" (CMD's own status), "leak"
    /// (`--fail-on-leak`, CMD exited 0), "strategy" (`--fail-on-strategy`), "closes"
    /// (`--max-closes`), "interrupted", or "ok".
    pub exit_reason: ExitReason,
    pub totals: TraceTotals,
    pub groups: Vec<Group>,
    pub partial: Vec<String>,
    /// Each with its `"type":"read_storm"`, as on its own line.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "tagged_storms"
    )]
    pub read_storms: Vec<reads::ReadStorm>,
}

impl Summary {
    /// The notes said as warnings (records the kernel could not keep or skipped): the first
    /// of `partial`, as [`partial_notes`] orders them.
    pub fn warnings(&self) -> &[String] {
        let n =
            usize::from(self.lost_records > 0) + usize::from(self.bpf_missed_runs.note().is_some());
        &self.partial[..n.min(self.partial.len())]
    }
}

/// The summary's `partial` notes: lost records first, then the runs the kernel skipped
/// (both said as warnings, see [`Summary::warnings`]), then the spawns' partial-data flags.
pub fn partial_notes(
    lost_records: u64,
    queue_dropped: u64,
    ring_bytes: u64,
    missed: &MissedRuns,
    flags: Vec<String>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if lost_records > 0 {
        notes.push(super::lost_note(lost_records, queue_dropped, ring_bytes));
    }
    notes.extend(missed.note());
    notes.extend(flags);
    notes
}

fn tagged_storms<S: serde::Serializer>(v: &[reads::ReadStorm], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().cloned().map(TraceRecord::ReadStorm))
}

/// Why `trace` exits with its status (the summary's `exit_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// Nothing to report: 0.
    Ok,
    /// CMD's own exit status (0 included when nothing failed the policy).
    Command,
    /// `--fail-on-leak` and a spawn leaked an fd while CMD exited 0.
    Leak,
    /// `--fail-on-strategy` and a spawn used one of those strategies while CMD exited 0.
    Strategy,
    /// `--max-closes` and a spawn made more closing calls while CMD exited 0.
    Closes,
    /// A gate was set, none failed on what was seen and CMD exited 0, but the trace is
    /// known to be incomplete (records lost, runs skipped, forks untraced): no gate passes
    /// on it ([`super::Losses`]).
    Incomplete,
    /// Ctrl-C, SIGTERM or SIGHUP before CMD exited.
    Interrupted,
}

/// What `--allow-leak` forgives: a kind of file, or targets matching a glob.
#[derive(Debug, Clone)]
pub enum Allowed {
    Kind(FdKind),
    Path(glob::Pattern),
}

impl Allowed {
    /// `--allow-leak`'s value: a kind name (`socket`, `pipe`, …) or a path glob (`*`
    /// matches `/` too).
    pub fn parse(s: &str) -> Result<Allowed, String> {
        if let Some(k) = FdKind::from_name(s) {
            return Ok(Allowed::Kind(k));
        }
        if !s.starts_with('/') && !s.contains('*') {
            return Err(format!(
                "{s:?} is neither a kind ({}) nor a path glob (starting with / or holding *)",
                FdKind::ALL.map(FdKind::as_str).join(", ")
            ));
        }
        glob::Pattern::new(s)
            .map(Allowed::Path)
            .map_err(|e| format!("{s:?} is not a valid glob: {e}"))
    }

    fn forgives(&self, f: &LeakedFd) -> bool {
        match self {
            Allowed::Kind(k) => f.kind == *k,
            Allowed::Path(p) => p.matches(&f.target.lossy()),
        }
    }
}

/// `--fail-on-leak-kind`'s value: a kind name.
pub fn parse_kind(s: &str) -> Result<FdKind, String> {
    FdKind::from_name(s).ok_or_else(|| {
        format!(
            "{s:?} is not a kind of file: one of {}",
            FdKind::ALL.map(FdKind::as_str).join(", ")
        )
    })
}

/// Which leaked fds `--fail-on-leak` ignores.
#[derive(Debug, Clone, Default)]
pub struct LeakPolicy {
    /// fds the traced command inherited from fdaudit's caller (`-- CMD`), or that the
    /// `-p` processes held, inheritable, when fdaudit attached: (fd, device, inode), the
    /// device in the kernel's encoding (a leaked fd's `dev`). Empty with `--no-baseline`.
    pub baseline: std::collections::HashSet<(u32, u32, u64)>,
    /// `--ignore-fd`.
    pub ignore_fds: Vec<u32>,
    /// `--allow-leak`.
    pub allow: Vec<Allowed>,
    /// `--fail-on-leak-kind`: only these kinds count (all when empty).
    pub kinds: Vec<FdKind>,
    /// `--fail-on-leak=boundary`: only fds that crossed a privilege or namespace boundary
    /// (`critical`) count.
    pub boundary_only: bool,
}

impl LeakPolicy {
    /// Whether a listed leaked fd counts against the policy.
    pub fn counts(&self, f: &LeakedFd) -> bool {
        !self.ignore_fds.contains(&f.fd)
            && !self.in_baseline(f)
            && !self.allow.iter().any(|a| a.forgives(f))
            && (self.kinds.is_empty() || self.kinds.contains(&f.kind))
            && (!self.boundary_only || f.critical)
    }

    /// Whether `f` is the same fd number and the same file (device and inode) as one of the
    /// baseline's.
    pub fn in_baseline(&self, f: &LeakedFd) -> bool {
        self.baseline.contains(&(f.fd, f.dev, f.ino))
    }

    /// The leaked fds of a spawn that count against the policy. fds beyond the record's list
    /// (`fds_truncated`) count: they cannot be shown to be inherited or allowed.
    pub fn new_leaks(&self, s: &Spawn) -> u64 {
        let listed = s.leaked_fds.iter().filter(|f| self.counts(f)).count() as u64;
        let unlisted = u64::from(s.leaked_count).saturating_sub(s.leaked_fds.len() as u64);
        if self.boundary_only && s.boundary.is_none() {
            return listed;
        }
        listed + unlisted
    }
}

/// The leaked fds of `s` that the traced command itself inherited (in `policy`'s baseline).
pub fn inherited_count(s: &Spawn, policy: &LeakPolicy) -> u32 {
    s.leaked_fds
        .iter()
        .filter(|f| policy.in_baseline(f))
        .count() as u32
}

/// What the summary needs from an exec record; `image_ns`: when the spawning process's
/// current image began, if its exec was traced (who made a leaked fd, [`maker`]).
pub(super) fn link<'a>(s: &'a Spawn, policy: &LeakPolicy, image_ns: Option<u64>) -> Link<'a> {
    let first_origin = s
        .leaked_fds
        .iter()
        .filter(|f| !policy.in_baseline(f))
        .find(|f| f.origin.as_ref().and_then(origin_frame).is_some());
    Link {
        pid: s.pid,
        reexec: s.flags.contains(SpawnFlags::REEXEC),
        execd_again: s.flags.contains(SpawnFlags::EXECD_AGAIN),
        own_image: s.flags.contains(SpawnFlags::OWN_IMAGE),
        container: s.identity.container_label(),
        parent_comm: &s.parent_comm,
        exec_path: &s.exec_path,
        strategy: s.strategy.as_str(),
        closed_fds: !matches!(s.strategy, Strategy::None | Strategy::Unknown),
        close_calls: s.calls.close_calls,
        window_ns: s.window_corrected_ns,
        leaked: s.leaked_count - inherited_count(s, policy),
        inherited: inherited_count(s, policy),
        new_leaks: policy.new_leaks(s),
        critical: s
            .leaked_fds
            .iter()
            .filter(|f| f.critical && !policy.in_baseline(f))
            .count() as u32,
        spawner: Spawner {
            runtime: s.runtime.clone(),
            nofile: s.nofile.or(s.parent_nofile),
            nofile_at_exec: s.nofile.is_some(),
            walked: walked(s),
            origin: first_origin.and_then(|f| f.origin.as_ref().and_then(origin_frame)),
            made_by: None,
        },
        code: SpawnerCode::of(s, image_ns),
        leak_call: first_origin.and_then(|f| match &f.origin {
            Some(Origin::Known(call)) => Some(&**call),
            _ => None,
        }),
    }
}

/// The fds a spawn's strategy walked: a close loop's bound, a poll's nfds, the fcntl calls,
/// else its close() calls.
fn walked(s: &Spawn) -> u64 {
    match s.strategy {
        Strategy::CloseLoop => s.close_loop_bound.map_or(s.calls.close_calls, u64::from),
        Strategy::PollScan => s.calls.poll_nfds_max,
        Strategy::FcntlScan => s.calls.fcntl_calls(),
        _ => s.calls.close_calls,
    }
}

/// `open64 from main (fixture.c:12)`: the syscall and the first frame outside the C
/// library that has a symbol, for the advice.
fn origin_frame(o: &crate::engine::origin::Origin) -> Option<String> {
    let crate::engine::origin::Origin::Known(call) = o else {
        return None;
    };
    let in_libc = |f: &&crate::engine::origin::Frame| {
        f.module.as_deref().is_some_and(|m| {
            m.contains("/libc.so") || m.contains("/libc-") || m.contains("ld-musl")
        })
    };
    let frame = call
        .stack
        .iter()
        .filter(|f| f.symbol.is_some())
        .find(|f| !in_libc(f))?;
    let mut at = frame.symbol.clone().unwrap_or_default();
    if let (Some(file), Some(line)) = (&frame.file, frame.line) {
        at.push_str(&format!(" at {}:{line}", crate::runtime::base_str(file)));
    }
    Some(format!("{} in {at}", call.syscall))
}

/// Accumulates spawns for the summary. Exec records of one process are one spawn (see
/// [`Chains`]).
#[derive(Default)]
pub struct Collector {
    chains: Chains,
    totals: TraceTotals,
    pub fork_only: u64,
    flag_counts: BTreeMap<&'static str, u64>,
    /// What `--fail-on-leak` does not count.
    pub policy: LeakPolicy,
    /// When each traced process's current image began (its exec), until its exit.
    images: HashMap<u32, u64>,
    /// Each spawning process's runtime, as its spawns found it: a leaked fd's maker's.
    runtimes: HashMap<u32, crate::runtime::Runtime>,
}

impl Collector {
    /// An empty collector that judges leaks by `policy`.
    pub fn new(policy: LeakPolicy) -> Collector {
        Collector {
            policy,
            ..Collector::default()
        }
    }

    pub fn add(&mut self, s: &Spawn) {
        let t = &mut self.totals;
        t.calls += s.calls;
        t.fcntl_calls += s.calls.fcntl_calls();
        t.window_ns += s.window_ns;
        t.window_corrected_ns += s.window_corrected_ns;
        for f in s.flags.partial().names() {
            *self.flag_counts.entry(f).or_default() += 1;
        }
        let image_ns = self.images.get(&s.parent_pid).copied();
        self.chains.add(&link(s, &self.policy, image_ns));
        if s.exec_ok {
            self.images.insert(s.pid, s.exec_ns);
        }
        if let Some(rt) = &s.runtime {
            self.runtimes
                .entry(s.parent_pid)
                .or_insert_with(|| rt.clone());
        }
    }

    pub fn add_exit(&mut self, e: &Exit) {
        self.fork_only += u64::from(e.never_execd);
        self.chains.exit(e.pid);
        self.images.remove(&e.pid);
    }

    /// Spawns: exec records that were not re-execs of a process already counted.
    pub fn spawns(&self) -> u64 {
        self.chains.spawns()
    }

    /// The totals, with leaks counted at each process's last exec.
    pub fn totals(&self) -> TraceTotals {
        let mut t = self.totals.clone();
        let l = self.chains.leak_totals();
        t.spawns_with_leaks = l.spawns_with_leaks;
        t.leaked_fds = l.leaked_fds;
        t.leaked_inherited_fds = l.inherited_fds;
        t.transient_leaked_fds = l.transient_fds;
        t.spawns_with_new_leaks = l.spawns_with_new_leaks;
        t.critical_leaked_fds = l.critical_fds;
        t
    }

    pub fn groups(&self) -> Vec<Group> {
        self.chains
            .rows()
            .into_iter()
            .map(|r| Group {
                container: r.container,
                parent_comm: Lossless::new(r.parent_comm),
                exec_path: Lossless::new(r.exec_path),
                spawns: r.spawns,
                close_median: r.close_median,
                close_max: r.close_max,
                window_median_ns: r.window_median_ns,
                window_p95_ns: r.window_p95_ns,
                strategy: r.strategy,
                leaked_fds: r.leaked_fds,
                leaked_inherited_fds: r.inherited_fds,
                transient_fds: r.transient_fds,
                runtime: r.spawner.runtime.clone(),
                spawner: Spawner {
                    made_by: r.spawner.made_by.map(|m| MadeBy {
                        runtime: self.runtimes.get(&m.pid).cloned(),
                        ..m
                    }),
                    ..r.spawner
                },
            })
            .collect()
    }

    /// Human notes on partial data.
    pub fn partial_notes(&self) -> Vec<String> {
        self.flag_counts
            .iter()
            .map(|(f, n)| format!("{} with {f}", count(*n, "spawn", "spawns")))
            .collect()
    }
}
