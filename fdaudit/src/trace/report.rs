//! Rendering of trace results: a line per spawn, the summary table, JSON objects.

use std::collections::BTreeMap;

use serde::Serialize;

use anyhow::Result;

use super::{
    chains::{Chains, Link},
    counts::SyscallCounts,
    decode::{Event, Exit, LeakedFd, Spawn},
    filter::Filter,
    flags::SpawnFlags,
    reads,
    session::Session,
    stamp::Stamper,
    strategy::Strategy,
    TraceArgs, TraceRecord,
};
use crate::{
    lossless_field,
    output::{
        self,
        color::Paint,
        count, fmt_ns, stream,
        table::{Cell, Col, Table, Term},
        text::Lossless,
    },
};

lossless_field!(GroupExecPath, "exec_path");
lossless_field!(GroupParentComm, "parent_comm");

/// What a strategy costs, as a colour: close_range is the cheap, correct way; the sweeps
/// whose cost grows with NOFILE are red, those that grow with the fds open yellow.
pub fn strategy_paint(s: &str) -> Option<Paint> {
    match s {
        "close-range" => Some(Paint::Good),
        "close-loop" | "fcntl-scan" | "poll-scan" => Some(Paint::Bad),
        "procfd-walk" => Some(Paint::Warn),
        _ => None,
    }
}

/// One line for a spawn, as it happens; coloured when `term` takes colour.
pub fn spawn_line(s: &Spawn, term: Term) -> String {
    let parent = s.parent_comm.escaped();
    let mut line = if s.exec_ok {
        format!(
            "{parent}[{}] -> {} {}",
            s.parent_pid,
            s.pid,
            s.exec_path.escaped()
        )
    } else {
        let path = if s.exec_path.is_empty() {
            String::new()
        } else {
            format!(" {}", s.exec_path.escaped())
        };
        let errno = match (s.exec_error, s.exec_errno) {
            (Some(name), _) => format!(": {name}"),
            (None, Some(n)) => format!(": errno {n}"),
            (None, None) => String::new(),
        };
        format!(
            "{parent}[{}] -> {} {}{path}{errno} ({} attempts), exited",
            s.parent_pid,
            s.pid,
            term.paint("EXEC FAILED", Paint::Bad),
            s.exec_attempts
        )
    };
    if let Some(tid) = s.exec_tid {
        line.push_str(&format!(" (exec by thread {tid})"));
    }
    if let Some(c) = s.identity.container_label() {
        line.push_str(&format!(" in {c}"));
    }
    if s.argv.len() > 1 {
        let args: Vec<String> = s.argv[1..]
            .iter()
            .map(|a| {
                if a.is_empty() {
                    "''".to_owned()
                } else {
                    output::escape_bytes(a)
                }
            })
            .collect();
        line.push_str(" (");
        line.push_str(&args.join(" "));
        line.push(')');
    }
    if s.window_ns > 0 {
        line.push_str(&format!(
            "  window {} (untraced ~{})",
            fmt_ns(s.window_ns as f64),
            fmt_ns(s.window_corrected_ns as f64)
        ));
    }
    if !s.flags.contains(SpawnFlags::NO_SYSCALLS) {
        let name = s.strategy.as_str();
        let shown = match strategy_paint(name) {
            Some(p) => term.paint(name, p),
            None => name.to_string(),
        };
        line.push_str(&format!("  {shown}"));
        if let Some(b) = s.close_loop_bound {
            line.push_str(&format!(" to {b}"));
        }
        let counts = window_counts(s);
        if !counts.is_empty() {
            line.push_str(": ");
            line.push_str(&counts.join(", "));
        }
    }
    if s.leaked_count > 0 {
        let fds: Vec<String> = s
            .leaked_fds
            .iter()
            .map(|f| match (f.family, f.protocol) {
                (Some(fam), Some(p)) => {
                    format!("{} {} {fam} {p} {}", f.fd, f.kind, f.target.escaped())
                }
                _ if f.deleted => format!("{} {} {} (deleted)", f.fd, f.kind, f.target.escaped()),
                _ => format!("{} {} {}", f.fd, f.kind, f.target.escaped()),
            })
            .collect();
        let leaked = term.paint(&format!("LEAKED {}:", s.leaked_count), Paint::Alarm);
        line.push_str(&format!("  {leaked} {}", fds.join(", ")));
    }
    if !s.flags.is_empty() {
        line.push_str(&format!(
            "  [{}]",
            s.flags.names().collect::<Vec<_>>().join(",")
        ));
    }
    line
}

/// The window's syscall counts, for the spawn line.
fn window_counts(s: &Spawn) -> Vec<String> {
    let mut counts = Vec::new();
    let c = &s.calls;
    if c.close_calls > 0 {
        counts.push(format!("close {} ({} EBADF)", c.close_calls, c.close_ebadf));
    }
    if c.close_range_calls > 0 {
        let r: Vec<String> = s
            .close_ranges
            .iter()
            .map(|[a, b, f]| format!("close_range({a}, {}, {})", bound(*b), range_flags(*f)))
            .collect();
        counts.push(r.join(" "));
    }
    if c.fcntl_calls() > 0 {
        counts.push(format!("fcntl {}", c.fcntl_calls()));
    }
    if c.poll_calls > 0 {
        counts.push(format!("poll {} (nfds {})", c.poll_calls, c.poll_nfds_max));
    }
    if c.getdents64_calls > 0 {
        counts.push(format!("getdents64 {}", c.getdents64_calls));
    }
    if s.exec_attempts > 1 {
        counts.push(format!("exec attempts {}", s.exec_attempts));
    }
    counts
}

fn bound(b: u32) -> String {
    if b == u32::MAX {
        "~0U".into()
    } else {
        b.to_string()
    }
}

/// close_range() flags by name.
pub fn range_flags(f: u32) -> String {
    let mut names = Vec::new();
    if f & 2 != 0 {
        names.push("UNSHARE");
    }
    if f & 4 != 0 {
        names.push("CLOEXEC");
    }
    if names.is_empty() {
        "0".into()
    } else {
        names.join("|")
    }
}

/// Totals over a trace.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct TraceTotals {
    /// Every window counter, summed (`poll_nfds_max`: the largest).
    #[serde(flatten)]
    pub calls: SyscallCounts,
    /// fcntl() calls of either kind (`fcntl_setfd_calls + fcntl_getfd_calls`).
    pub fcntl_calls: u64,
    /// fds leaked at each process's last exec (what reached the image that runs).
    pub leaked_fds: u64,
    /// Processes whose last exec leaked an fd.
    pub spawns_with_leaks: u64,
    /// Of those, the ones that leaked an fd other than what the traced command itself
    /// inherited (unless `--no-baseline`) and the `--ignore-fd` ones: what `--fail-on-leak`
    /// fails on.
    pub spawns_with_new_leaks: u64,
    /// fds that crossed an exec into an image that exec'd again (a spawn helper such as
    /// jspawnhelper, a shell's `exec`): reported per record, not counted as leaks above.
    pub transient_leaked_fds: u64,
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
    pub close_median: u64,
    pub close_max: u64,
    pub window_median_ns: u64,
    pub window_p95_ns: u64,
    pub strategy: String,
    /// fds that reached the last image of each spawn.
    pub leaked_fds: u64,
    /// fds that crossed into images that exec'd again (not counted as leaks).
    pub transient_fds: u64,
}

/// The summary JSON object (last line with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub spawns: u64,
    pub lost_records: u64,
    pub untracked_forks: u64,
    /// (process, fd) read counters not kept because the kernel's table was full (`--reads`).
    pub read_table_full: u64,
    pub fork_only_children: u64,
    /// The probes' measured cost per counted syscall (what `window_corrected_ns` subtracts).
    pub probe_cost_ns: u64,
    /// One close() of a closed fd, untraced, measured at start.
    pub close_cost_ns: u64,
    pub leaks_only: bool,
    /// The fds the traced command inherited from fdaudit's caller (the baseline).
    pub inherited_fds: Vec<LeakedFd>,
    /// The command's own exit status (shell-like: 128+N when killed by signal N); null
    /// with `-p` or when it had not exited.
    pub command_status: Option<u8>,
    /// fdaudit's exit status.
    pub exit_code: u8,
    /// Why fdaudit exits with `exit_code`: "command" (CMD's own status), "leak"
    /// (`--fail-on-leak`, CMD exited 0), "interrupted", or "ok".
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
    /// Ctrl-C, SIGTERM or SIGHUP before CMD exited.
    Interrupted,
}

/// Which leaked fds `--fail-on-leak` ignores.
#[derive(Debug, Clone, Default)]
pub struct LeakPolicy {
    /// fds the traced command inherited: (fd, inode). Empty with `--no-baseline`.
    pub baseline: Vec<(u32, u64)>,
    /// `--ignore-fd`.
    pub ignore_fds: Vec<u32>,
}

impl LeakPolicy {
    /// The leaked fds of a spawn that count against the policy. fds beyond the record's list
    /// (`fds_truncated`) count: they cannot be shown to be inherited.
    pub fn new_leaks(&self, s: &Spawn) -> u64 {
        let listed = s
            .leaked_fds
            .iter()
            .filter(|f| !self.ignore_fds.contains(&f.fd) && !self.baseline.contains(&(f.fd, f.ino)))
            .count() as u64;
        listed + u64::from(s.leaked_count).saturating_sub(s.leaked_fds.len() as u64)
    }
}

/// What the summary needs from an exec record.
fn link<'a>(s: &'a Spawn, policy: &LeakPolicy) -> Link<'a> {
    Link {
        pid: s.pid,
        reexec: s.flags.contains(SpawnFlags::REEXEC),
        container: s.identity.container_label(),
        parent_comm: &s.parent_comm,
        exec_path: &s.exec_path,
        strategy: s.strategy.as_str(),
        closed_fds: !matches!(s.strategy, Strategy::None | Strategy::Unknown),
        close_calls: s.calls.close_calls,
        window_ns: s.window_corrected_ns,
        leaked: s.leaked_count,
        new_leaks: policy.new_leaks(s),
    }
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
}

impl Collector {
    pub fn add(&mut self, s: &Spawn) {
        let t = &mut self.totals;
        t.calls += s.calls;
        t.fcntl_calls += s.calls.fcntl_calls();
        t.window_ns += s.window_ns;
        t.window_corrected_ns += s.window_corrected_ns;
        for f in s.flags.partial().names() {
            *self.flag_counts.entry(f).or_default() += 1;
        }
        self.chains.add(&link(s, &self.policy));
    }

    pub fn add_exit(&mut self, e: &Exit) {
        self.fork_only += u64::from(e.never_execd);
        self.chains.exit(e.pid);
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
        t.transient_leaked_fds = l.transient_fds;
        t.spawns_with_new_leaks = l.spawns_with_new_leaks;
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
                transient_fds: r.transient_fds,
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

/// The summary table for people: in a narrow terminal the percentiles go first, paths
/// are shortened in the middle; a container column when any group ran in a container, the
/// transient column only when an exec chain had any.
pub fn summary_table(groups: &[Group], term: Term) -> String {
    let transient = groups.iter().any(|g| g.transient_fds > 0);
    let containers = groups.iter().any(|g| g.container.is_some());
    let mut cols = Vec::new();
    if containers {
        cols.push(Col::new("container"));
    }
    cols.extend([
        Col::new("parent"),
        Col::new("exec").path(),
        Col::new("spawns"),
        Col::new("close/spawn med").short("closes"),
        Col::new("max").drop(4),
        Col::new("window med").short("window"),
        Col::new("p95").drop(3),
        Col::new("strategy"),
        Col::new("leaked fds").short("leaked"),
    ]);
    if transient {
        cols.push(Col::new("transient fds").short("transient").drop(2));
    }
    let mut t = Table::new(cols);
    for g in groups {
        let mut row = Vec::new();
        if containers {
            row.push(Cell::from(g.container.clone().unwrap_or_default()));
        }
        row.extend([
            Cell::from(g.parent_comm.escaped()),
            g.exec_path.escaped().into(),
            g.spawns.to_string().into(),
            g.close_median.to_string().into(),
            g.close_max.to_string().into(),
            fmt_ns(g.window_median_ns as f64).into(),
            fmt_ns(g.window_p95_ns as f64).into(),
            Cell::painted(g.strategy.as_str(), strategy_paint(&g.strategy)),
            Cell::painted(
                g.leaked_fds.to_string(),
                (g.leaked_fds > 0).then_some(Paint::Alarm),
            ),
        ]);
        if transient {
            row.push(Cell::painted(
                g.transient_fds.to_string(),
                (g.transient_fds > 0).then_some(Paint::Warn),
            ));
        }
        t.add_row(row);
    }
    t.render_for(term)
}

/// The name of a spawn's parent when the kernel record has none (its fork was not seen):
/// `fdaudit` for fdaudit itself (the traced command's own re-exec), else what procfs says.
fn parent_name(ppid: u32) -> Vec<u8> {
    if ppid == std::process::id() {
        return b"fdaudit".to_vec();
    }
    std::fs::read(format!("/proc/{ppid}/comm"))
        .ok()
        .map(|mut c| {
            if c.last() == Some(&b'\n') {
                c.pop();
            }
            c
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| b"?".to_vec())
}

/// Per-event handling and final output of `trace`: a line (or JSON record) per spawn as it
/// comes, the summary at the end, all on the records stream ([`stream`]).
pub struct Reporter<'a> {
    args: &'a TraceArgs,
    /// The spawns the filters keep: what is printed and summed.
    collector: Collector,
    /// Every spawn, when filters are set: `--fail-on-leak` judges them all.
    unfiltered: Option<Chains>,
    filter: Filter,
    /// Exec records the filters left out.
    hidden: u64,
    stamper: Stamper,
    term: Term,
    root_inherited: Vec<LeakedFd>,
    seen_root_exec: Vec<u32>,
    probe_cost_ns: f64,
    close_cost_ns: f64,
    leaks_only: bool,
    ring_bytes: u64,
}

/// What to say when records were lost: in the JSON summary's `partial` notes, on stderr, and
/// on the totals line.
pub fn lost_note(lost: u64, ring_bytes: u64) -> String {
    format!(
        "{lost} records LOST: the {} MiB ring buffer was full, some spawns are missing; raise --buffer-pages (now {})",
        ring_bytes >> 20,
        ring_bytes / crate::trace::drain::page_size()
    )
}

/// How the run ended, for the summary.
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub command_status: Option<u8>,
    pub exit_code: u8,
    pub exit_reason: ExitReason,
}

impl<'a> Reporter<'a> {
    pub fn new(args: &'a TraceArgs, s: &Session, filter: Filter) -> Self {
        let collector = Collector {
            policy: LeakPolicy {
                baseline: Vec::new(),
                ignore_fds: args.ignore_fds.clone(),
            },
            ..Collector::default()
        };
        Reporter {
            args,
            collector,
            unfiltered: filter.is_active().then(Chains::default),
            filter,
            hidden: 0,
            stamper: Stamper::new(args.time, args.relative),
            term: stream::term(),
            root_inherited: Vec::new(),
            seen_root_exec: Vec::new(),
            probe_cost_ns: s.probe_cost_ns().round(),
            close_cost_ns: s.close_cost_ns(),
            leaks_only: s.leaks_only(),
            ring_bytes: s.ring_bytes(),
        }
    }

    pub fn handle(&mut self, ev: Event, roots: &[u32]) -> Result<()> {
        match ev {
            Event::Spawn(s) => {
                // The traced command's own exec (or a -p root's re-exec) is not a spawn: what it
                // inherited came from fdaudit's caller, the baseline every spawn starts from.
                if roots.contains(&s.pid)
                    && s.flags.contains(SpawnFlags::NO_FORK)
                    && !self.seen_root_exec.contains(&s.pid)
                {
                    self.seen_root_exec.push(s.pid);
                    self.set_baseline(&s.leaked_fds);
                    return Ok(());
                }
                self.report_spawn(s)?;
            }
            Event::Exit(mut e) => {
                if let Some(s) = e.failed_spawn.take() {
                    self.report_spawn(s)?;
                }
                self.collector.add_exit(&e);
                if let Some(all) = &mut self.unfiltered {
                    all.exit(e.pid);
                }
            }
        }
        Ok(())
    }

    /// Records what the traced command inherited, says so once, and (unless
    /// `--no-baseline`) keeps `--fail-on-leak` from counting it.
    fn set_baseline(&mut self, fds: &[LeakedFd]) {
        self.root_inherited.extend(fds.iter().cloned());
        if !self.args.no_baseline {
            self.collector
                .policy
                .baseline
                .extend(fds.iter().map(|f| (f.fd, f.ino)));
        }
        if fds.is_empty() {
            return;
        }
        let list: Vec<String> = fds
            .iter()
            .map(|f| format!("{}={}", f.fd, f.target.escaped()))
            .collect();
        stream::note(
            stream::Level::Note,
            &format!(
                "the traced command itself inherited {} from fdaudit's caller: {} (every spawn that does not close them leaks them too; {})",
                count(list.len() as u64, "fd", "fds"),
                list.join(" "),
                if self.args.no_baseline {
                    "--no-baseline: --fail-on-leak counts them"
                } else {
                    "--fail-on-leak does not count them, --no-baseline does"
                }
            ),
        );
    }

    fn report_spawn(&mut self, mut s: Box<Spawn>) -> Result<()> {
        s.time_ns = stream::since_header(s.exec_ns);
        s.correct_for_probes(self.probe_cost_ns);
        if s.parent_comm.is_empty() {
            s.parent_comm = Lossless::new(parent_name(s.parent_pid));
        }
        if let Some(all) = &mut self.unfiltered {
            all.add(&link(&s, &self.collector.policy));
        }
        if !self.filter.keeps(&s) {
            self.hidden += 1;
            return Ok(());
        }
        self.collector.add(&s);
        if self.args.json {
            stream::record(&TraceRecord::Spawn(s))?;
        } else if !self.args.quiet {
            let line = format!(
                "{}{}",
                self.stamper.prefix(s.exec_ns),
                spawn_line(&s, self.term)
            );
            stream::text(&format!("{}\n", self.term.fill(&line, 4)))?;
        }
        Ok(())
    }

    /// Whether a process's last exec leaked an fd that the policy counts (what
    /// `--fail-on-leak` fails on), filters or not.
    pub fn leaked(&self) -> bool {
        match &self.unfiltered {
            Some(all) => all.leak_totals().spawns_with_new_leaks > 0,
            None => self.collector.totals().spawns_with_new_leaks > 0,
        }
    }

    /// Writes the summary (JSON: the read storms and the summary record; text: the totals
    /// line, the table, the storms) and the notes.
    pub fn finish(
        self,
        stats: fdaudit_common::Stats,
        storms: Vec<reads::ReadStorm>,
        ending: Ending,
    ) -> Result<()> {
        let mut partial = self.collector.partial_notes();
        if stats.lost_records > 0 {
            partial.insert(0, lost_note(stats.lost_records, self.ring_bytes));
        }
        let summary = Summary {
            spawns: self.collector.spawns(),
            lost_records: stats.lost_records,
            untracked_forks: stats.tracked_full,
            read_table_full: stats.reads_full,
            fork_only_children: self.collector.fork_only,
            probe_cost_ns: self.probe_cost_ns.round() as u64,
            close_cost_ns: self.close_cost_ns.round() as u64,
            leaks_only: self.leaks_only,
            inherited_fds: self.root_inherited.clone(),
            command_status: ending.command_status,
            exit_code: ending.exit_code,
            exit_reason: ending.exit_reason,
            totals: self.collector.totals(),
            groups: self.collector.groups(),
            partial,
            read_storms: storms,
        };
        if self.args.json {
            for s in &summary.read_storms {
                stream::record(&TraceRecord::ReadStorm(s.clone()))?;
            }
        } else {
            let filtered = self
                .filter
                .is_active()
                .then(|| (self.filter.describe(), self.hidden));
            let mut text = Vec::new();
            summary_text(&mut text, &summary, filtered, self.term)?;
            stream::text(&String::from_utf8_lossy(&text))?;
        }
        self.notes(&summary);
        if self.args.json {
            stream::record(&TraceRecord::Summary(Box::new(summary)))?;
        }
        Ok(())
    }

    /// The notes and warnings after the summary.
    fn notes(&self, summary: &Summary) {
        if self.leaks_only {
            stream::note(
                stream::Level::Note,
                "--leaks-only: syscalls were not traced, so no close counts or strategies",
            );
        } else {
            stream::note(
                stream::Level::Note,
                &format!(
                    "probes cost ~{} ns per counted syscall (close() itself ~{} ns untraced); 'untraced' windows subtract it",
                    summary.probe_cost_ns, summary.close_cost_ns
                ),
            );
        }
        summary_warnings(summary);
    }
}

/// The totals line, the group table and the read storms, for people. `filtered`: the
/// filters in command-line form and the exec records they left out.
fn summary_text(
    out: &mut impl std::io::Write,
    summary: &Summary,
    filtered: Option<(String, u64)>,
    term: Term,
) -> std::io::Result<()> {
    writeln!(out)?;
    let t = &summary.totals;
    let with_leaks = format!("{} with leaked fds", t.spawns_with_leaks);
    let with_leaks = if t.spawns_with_leaks > 0 {
        term.paint(&with_leaks, Paint::Alarm)
    } else {
        with_leaks
    };
    let headline = format!(
        "{} {}, {with_leaks} ({}); {} close(), {} close_range()",
        count(summary.spawns, "spawn", "spawns"),
        if filtered.is_some() {
            "shown"
        } else {
            "traced"
        },
        count(t.leaked_fds, "fd", "fds"),
        t.calls.close_calls,
        t.calls.close_range_calls
    );
    writeln!(out, "{}", term.fill(&headline, 0))?;
    if let Some((filters, hidden)) = filtered {
        let note = format!(
            "(filters {filters}: {} traced but not shown; the kernel followed the whole tree)",
            count(hidden, "exec record", "exec records")
        );
        writeln!(out, "{}", term.fill(&note, 0))?;
    }
    if t.transient_leaked_fds > 0 {
        let note = format!(
            "({} crossed into images that exec'd again, e.g. a spawn helper; not counted as leaks)",
            count(t.transient_leaked_fds, "more fd", "more fds")
        );
        writeln!(out, "{}", term.fill(&note, 0))?;
    }
    if !summary.groups.is_empty() {
        writeln!(out, "{}", summary_table(&summary.groups, term))?;
    }
    if !summary.read_storms.is_empty() {
        writeln!(out, "\nbyte-at-a-time reads:")?;
        writeln!(out, "{}", reads::storm_table(&summary.read_storms, term))?;
    }
    if let Some(note) = summary.partial.first().filter(|_| summary.lost_records > 0) {
        let warning = term.paint(&format!("WARNING: {note}"), Paint::Alarm);
        writeln!(out, "{}", term.fill(&warning, 0))?;
    }
    Ok(())
}

/// Warnings about data the kernel side could not keep, on stderr.
fn summary_warnings(summary: &Summary) {
    let warn = |m: String| stream::note(stream::Level::Warning, &m);
    let lost = summary.partial.first().filter(|_| summary.lost_records > 0);
    if let Some(note) = lost {
        // Said everywhere someone looks: a warning record in the JSON stream (a line on
        // stderr for people), and on stderr as well when the records go elsewhere.
        warn(note.clone());
        if stream::is_json() && !stream::is_stderr() {
            crate::diag!("warning: {}", crate::output::text::escape(note));
        }
    }
    if summary.read_table_full > 0 {
        warn(format!(
            "{} reads were not counted: the per-(process, fd) table ({} entries) was full",
            summary.read_table_full,
            fdaudit_common::MAX_READS
        ));
    }
    if summary.untracked_forks > 0 {
        warn(format!(
            "{} forks were not traced (traced-process table full)",
            summary.untracked_forks
        ));
    }
    for p in summary.partial.iter().skip(usize::from(lost.is_some())) {
        warn(format!("partial data: {p}"));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::strategy::Strategy;

    /// A spawn record for tests.
    pub(crate) fn spawn(parent: &str, path: &str, close: u32, window: u64, leaked: u32) -> Spawn {
        Spawn {
            parent_pid: 1,
            parent_comm: parent.into(),
            pid: 2,
            exec_tid: None,
            exec_path: path.into(),
            argv: Lossless::new(vec![path.into(), b"-x".to_vec()]),
            exec_errno: None,
            exec_error: None,
            time_ns: 0,
            exec_ok: true,
            exec_attempts: 1,
            window_ns: window,
            window_corrected_ns: window,
            calls: SyscallCounts {
                close_calls: close.into(),
                close_ebadf: close.saturating_sub(1).into(),
                ..Default::default()
            },
            close_ranges: vec![],
            strategy: if close >= 64 {
                Strategy::CloseLoop
            } else {
                Strategy::None
            },
            close_loop_bound: (close >= 64).then_some(close + 3),
            leaked_fds: vec![],
            leaked_count: leaked,
            stdio: vec![],
            flags: SpawnFlags::empty(),
            exec_ns: 0,
            identity: Default::default(),
            probed: close.into(),
            exec_path_cut: false,
        }
    }

    #[test]
    fn spawn_line_names_strategy_counts_and_leaks() {
        let s = spawn("python3", "/bin/true", 19_997, 2_500_000, 0);
        assert_eq!(
            spawn_line(&s, Term::plain()),
            "python3[1] -> 2 /bin/true (-x)  window 2.50 ms (untraced ~2.50 ms)  close-loop to 20000: close 19997 (19996 EBADF)"
        );
    }

    #[test]
    fn exec_chain_leaks_count_at_the_last_exec() {
        let mut c = Collector::default();
        let mut helper = spawn("java", "/usr/lib/jvm/lib/jspawnhelper", 0, 1_000, 14);
        helper.pid = 40;
        let mut fin = spawn("java", "/bin/true", 15, 2_000, 0);
        fin.pid = 40;
        fin.flags = SpawnFlags::REEXEC;
        let mut other = spawn("bash", "/bin/cat", 0, 1_000, 1);
        other.pid = 41;
        c.add(&helper);
        c.add(&fin);
        c.add(&other);
        let t = c.totals();
        assert_eq!(
            (t.spawns_with_leaks, t.leaked_fds, t.transient_leaked_fds),
            (1, 1, 14)
        );
    }

    #[test]
    fn summary_groups_by_parent_and_path() {
        let mut c = Collector::default();
        c.add(&spawn("bash", "/bin/true", 3, 1_000_000, 1));
        c.add(&spawn("bash", "/bin/true", 19_997, 3_000_000, 1));
        c.add(&spawn("python3", "/bin/ls", 0, 500_000, 0));
        c.add(&spawn("bash", "/bin/true", 19_993, 2_000_000, 0));
        let g = c.groups();
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].strategy.as_str(), g[0].spawns), ("close-loop", 2));
        assert_eq!(g[0].close_max, 19_997);
        assert_eq!(g[0].close_median, 19_995, "mean of the two middle values");
        assert_eq!(g[0].leaked_fds, 1);
        assert_eq!(g[0].window_p95_ns, 3_000_000);
        assert_eq!((g[1].strategy.as_str(), g[1].spawns), ("none", 1));
        // Every spawn here is pid 2, none a re-exec: each is a spawn of its own, the last
        // leaked nothing.
        assert_eq!(c.spawns(), 4);
        assert_eq!(c.totals().spawns_with_leaks, 2);
        assert_eq!(c.totals().transient_leaked_fds, 0);
        let table = summary_table(&g, Term::plain());
        assert!(table.contains("python3"), "{table}");
        assert!(
            table.contains("close-loop") || table.contains("none"),
            "{table}"
        );
        assert!(
            !table.contains("container"),
            "no container column without containers"
        );
    }

    #[test]
    fn containers_get_a_column_and_their_own_groups() {
        let id = "3f2a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";
        let mut inside = spawn("sh", "/bin/cat", 0, 1000, 1);
        inside.identity = crate::cgroup::Identity {
            cgroup: Some(format!("/system.slice/docker-{id}.scope")),
            container: crate::cgroup::parse_path(&format!("/system.slice/docker-{id}.scope")),
            ..Default::default()
        };
        let line = spawn_line(&inside, Term::plain());
        assert!(line.contains(" in docker:3f2a0b9c8d7e "), "{line}");
        let json = serde_json::to_value(&inside).unwrap();
        assert_eq!(json["container_id"], id);
        assert_eq!(json["container_runtime"], "docker");
        let mut c = Collector::default();
        c.add(&inside);
        c.add(&spawn("sh", "/bin/cat", 0, 1000, 1));
        let g = c.groups();
        assert_eq!(
            g.len(),
            2,
            "the container's spawns are a group of their own"
        );
        let table = summary_table(&g, Term::plain());
        assert!(
            table.contains("container") && table.contains("docker:3f2a0b9c8d7e"),
            "{table}"
        );
    }
}
