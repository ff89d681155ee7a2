//! The pure part of `fdaudit unclosed`: the live set held against the fd tables
//! ([`reconcile`]: the table is the truth) and the outstanding fds grouped by creating
//! stack ([`group`]). No file is read here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use fdaudit_common::OriginCall;

use crate::engine::unclosed::LiveEntry;

/// A live process's fd table as /proc showed it at the report.
#[derive(Debug, Clone, Default)]
pub struct ProcTable {
    pub comm: String,
    pub fds: BTreeSet<i32>,
    /// RLIMIT_NOFILE's soft limit (None: unreadable, or unlimited).
    pub nofile_soft: Option<u64>,
    /// Execs the kernel counted for it (close-on-exec entries older than the last are
    /// stale).
    pub execs: u32,
}

/// One outstanding fd with the call that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outstanding {
    pub pid: u32,
    pub fd: i32,
    pub call: Option<OriginCall>,
    pub stack_id: i32,
    pub time_ns: u64,
    /// Its process had exited when read (no fd table to check it against).
    pub exited: bool,
}

/// What a process holds, by where each fd came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcSummary {
    pub pid: u32,
    pub comm: String,
    /// Fds in its table (for an exited process: its outstanding entries).
    pub open: u64,
    /// Made while followed, by a call fdaudit saw, and not closed.
    pub outstanding: u64,
    /// Open when fdaudit attached: never given a stack.
    pub before_tracing: u64,
    /// In the table with no creation seen (made by a path the hooks do not see, inherited
    /// from a parent, or the live set was full).
    pub not_seen: u64,
    pub nofile_soft: Option<u64>,
    pub exited: bool,
}

impl ProcSummary {
    /// Fds it can still open before EMFILE.
    pub fn headroom(&self) -> Option<i64> {
        self.nofile_soft.map(|l| l as i64 - self.open as i64)
    }
}

/// The live set held against the tables.
#[derive(Debug, Default)]
pub struct Reconciled {
    pub outstanding: Vec<Outstanding>,
    pub procs: Vec<ProcSummary>,
    /// Entries to drop from the kernel's set: closed (their fd is gone from the table, or
    /// a close-on-exec fd older than the last exec), or of an exited process (reported now).
    pub forget: Vec<(u32, i32)>,
}

/// The last of the standard fds.
const STDERR: i32 = 2;

/// Holds `entries` against the live processes' `tables` (pid -> table; a pid without one
/// has exited) and the fds each root had at attach.
pub fn reconcile(
    entries: &[LiveEntry],
    tables: &BTreeMap<u32, ProcTable>,
    at_attach: &HashMap<u32, HashSet<i32>>,
) -> Reconciled {
    let mut out = Reconciled::default();
    let mut by_pid: BTreeMap<u32, Vec<&LiveEntry>> = BTreeMap::new();
    for e in entries {
        by_pid.entry(e.pid).or_default().push(e);
    }
    let outstanding = |e: &LiveEntry, exited| Outstanding {
        pid: e.pid,
        fd: e.fd,
        call: OriginCall::from_u32(e.live.call),
        stack_id: e.live.stack_id,
        time_ns: e.live.time_ns,
        exited,
    };
    for (&pid, list) in &by_pid {
        if tables.contains_key(&pid) {
            continue;
        }
        out.forget.extend(list.iter().map(|e| (e.pid, e.fd)));
        // What it held at its exit, as valgrind's `--track-fds` lists it: not its stdio
        // (0-2), which a shell's redirection or a command substitution's subshell points
        // elsewhere with a dup2 and a process never closes.
        let held: Vec<&&LiveEntry> = list.iter().filter(|e| e.fd > STDERR).collect();
        if held.is_empty() {
            continue;
        }
        out.outstanding
            .extend(held.iter().map(|e| outstanding(e, true)));
        out.procs.push(ProcSummary {
            pid,
            open: held.len() as u64,
            outstanding: held.len() as u64,
            exited: true,
            ..Default::default()
        });
    }
    let none = HashSet::new();
    for (&pid, t) in tables {
        let mut s = ProcSummary {
            pid,
            comm: t.comm.clone(),
            open: t.fds.len() as u64,
            nofile_soft: t.nofile_soft,
            ..Default::default()
        };
        let mut made: HashSet<i32> = HashSet::new();
        for e in by_pid.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            let closed_by_exec = e.live.cloexec != 0 && e.live.execs < t.execs;
            if !t.fds.contains(&e.fd) || closed_by_exec {
                out.forget.push((pid, e.fd));
                continue;
            }
            made.insert(e.fd);
            out.outstanding.push(outstanding(e, false));
        }
        s.outstanding = made.len() as u64;
        let attach = at_attach.get(&pid).unwrap_or(&none);
        for fd in t.fds.iter().filter(|fd| !made.contains(fd)) {
            if attach.contains(fd) {
                s.before_tracing += 1;
            } else {
                s.not_seen += 1;
            }
        }
        out.procs.push(s);
    }
    out.procs
        .sort_by(|a, b| b.outstanding.cmp(&a.outstanding).then(a.pid.cmp(&b.pid)));
    out
}

/// The outstanding fds of one creating stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub stack_id: i32,
    pub count: u64,
    /// The creating calls' names and how many fds each made.
    pub calls: BTreeMap<&'static str, u64>,
    /// A few (pid, fd) of the group, newest first, for their targets.
    pub samples: Vec<(u32, i32)>,
    pub oldest_ns: u64,
    pub pids: BTreeSet<u32>,
}

/// Sample fds kept per group.
pub const SAMPLES: usize = 3;

/// Groups the fds older than `min_age_ns` at `now_ns` by stack, most fds first (then the
/// oldest first).
pub fn group(out: &[Outstanding], now_ns: u64, min_age_ns: u64) -> Vec<Group> {
    let mut by: HashMap<i32, Vec<&Outstanding>> = HashMap::new();
    for o in out {
        if now_ns.saturating_sub(o.time_ns) >= min_age_ns {
            by.entry(o.stack_id).or_default().push(o);
        }
    }
    let mut groups: Vec<Group> = by
        .into_iter()
        .map(|(stack_id, mut list)| {
            list.sort_by_key(|o| std::cmp::Reverse(o.time_ns));
            let mut calls = BTreeMap::new();
            for o in &list {
                *calls.entry(o.call.map_or("?", |c| c.name())).or_default() += 1;
            }
            Group {
                stack_id,
                count: list.len() as u64,
                calls,
                samples: list.iter().take(SAMPLES).map(|o| (o.pid, o.fd)).collect(),
                oldest_ns: list.iter().map(|o| o.time_ns).min().unwrap_or(0),
                pids: list.iter().map(|o| o.pid).collect(),
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.oldest_ns.cmp(&b.oldest_ns))
            .then(a.stack_id.cmp(&b.stack_id))
    });
    groups
}

/// An age for people: `850ms`, `12.3s`, `4m05s`.
pub fn age(ns: u64) -> String {
    let ms = ns / 1_000_000;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60)
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
pub(super) mod tests;
