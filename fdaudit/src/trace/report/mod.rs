//! Rendering of trace results: a line per spawn ([`line`]), the summary's totals and groups
//! ([`summary`]) and its text for people ([`text`]), JSON objects; [`Reporter`] handles each
//! event and writes the end.

mod advice;
pub mod ci;
mod gates;
pub(crate) mod json;
mod line;
mod losses;
pub mod sarif;
mod summary;
mod text;

pub use advice::Advice;
pub use gates::{GateOptions, LeakGate};
pub use line::{spawn_line, strategy_paint};
pub use losses::Losses;
pub use summary::{parse_kind, Allowed, Collector, ExitReason, Group, LeakPolicy, Summary};

use summary::link;
use text::{summary_text, summary_warnings};

use anyhow::{Context as _, Result};

use super::{
    chains::Chains, filter::Filter, perfetto::Perfetto, reads, stamp::Stamper, TraceRecord,
};
use crate::engine::{
    counting::Counting,
    flags::SpawnFlags,
    session::{SessionEnd, SessionStart},
    spawn::{Event, LeakedFd, Spawn},
};
use crate::output::{count, stream, table::Term};

/// Per-event handling and final output of `trace`: a line (or JSON record) per spawn as it
/// comes, the summary at the end, all on the records stream ([`stream`]).
pub struct Reporter {
    args: ReportOptions,
    /// The spawns the filters keep: what is printed and summed.
    collector: Collector,
    /// Every spawn, when filters are set: `--fail-on-leak` judges them all (as the other
    /// gates do).
    unfiltered: Option<Chains>,
    filter: Filter,
    /// Exec records the filters left out.
    hidden: u64,
    stamper: Stamper,
    term: Term,
    root_inherited: Vec<LeakedFd>,
    seen_root_exec: Vec<u32>,
    /// The CI gates and the spawns that failed them.
    gates: gates::Gates,
    /// The session's, once measured (its windows are corrected with it).
    probe_cost_ns: Option<f64>,
    close_cost_ns: f64,
    /// What the kernel counted (the session's).
    counting: Counting,
    ring_bytes: u64,
    /// Lost records that fdaudit's queue between the ring and the decoder dropped.
    queue_dropped: u64,
    /// `--perfetto FILE`: the spawns shown, as a timeline.
    perfetto: Option<Perfetto>,
    /// `--sarif FILE`: the findings of every spawn.
    sarif: Option<sarif::Collector>,
}

/// `-p`: says once which inheritable fds the processes held at attach (what
/// `--fail-on-leak` does not count, unless `--no-baseline`).
fn held_note(held: &[crate::trace::targets::HeldFd], no_baseline: bool) {
    if held.is_empty() {
        return;
    }
    let mut by_pid: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for h in held {
        by_pid.entry(h.pid).or_default().push(h.fd.to_string());
    }
    let list: Vec<String> = by_pid
        .iter()
        .map(|(pid, fds)| match fds.len() {
            n if n > 16 => format!("pid {pid}: {} … and {} more", fds[..16].join(" "), n - 16),
            _ => format!("pid {pid}: {}", fds.join(" ")),
        })
        .collect();
    stream::note(
        stream::Level::Note,
        &format!(
            "the traced processes held {} without O_CLOEXEC when fdaudit attached ({}); {}",
            count(held.len() as u64, "inheritable fd", "inheritable fds"),
            list.join("; "),
            if no_baseline {
                "--no-baseline: --fail-on-leak counts them"
            } else {
                "--fail-on-leak does not count them (the same fd and file), --no-baseline does"
            }
        ),
    );
}

/// What to say when records were lost (`dropped` of them by fdaudit's own queue, the rest
/// by the kernel's full ring): in the JSON summary's `partial` notes, on stderr, and on the
/// totals line.
pub fn lost_note(lost: u64, dropped: u64, ring_bytes: u64) -> String {
    let size = if ring_bytes >= 1 << 20 {
        format!("{} MiB", ring_bytes >> 20)
    } else {
        format!("{} KiB", ring_bytes >> 10)
    };
    let ring = format!(
        "the {size} ring buffer was full; raise --buffer-pages (now {})",
        ring_bytes / crate::engine::drain::page_size()
    );
    let queue = format!(
        "fdaudit's decoder fell {} MiB behind the ring buffer (records slow to decode, or fdaudit kept from a CPU)",
        crate::engine::drain::MAX_QUEUE_BYTES >> 20
    );
    match dropped {
        0 => format!("{lost} records LOST: some spawns are missing: {ring}"),
        d if d >= lost => format!("{lost} records LOST: some spawns are missing: {queue}"),
        d => format!(
            "{lost} records LOST: some spawns are missing: {} because {ring}, {d} because {queue}",
            lost - d
        ),
    }
}

/// How the run ended, for the summary.
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub command_status: Option<u8>,
    pub exit_code: u8,
    pub exit_reason: ExitReason,
}

/// What the reporter takes from `trace`'s arguments (built once, by `trace`'s
/// `report_options`).
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    pub json: bool,
    pub quiet: bool,
    /// `--fail-on-leak` counts what the traced command itself inherited.
    pub no_baseline: bool,
    /// `-p`: the inheritable fds the processes held when fdaudit attached, the baseline
    /// their leaks are judged against; a root's next exec is then a spawn like any other.
    /// `None` (`-- CMD`): the baseline is what the command's own exec inherited.
    pub held_at_attach: Option<Vec<crate::trace::targets::HeldFd>>,
    pub ignore_fds: Vec<u32>,
    /// `--allow-leak`, `--fail-on-leak-kind`.
    pub allow: Vec<Allowed>,
    pub kinds: Vec<crate::fdkind::FdKind>,
    /// `--fail-on-leak`, `--fail-on-strategy`, `--max-closes`.
    pub gates: GateOptions,
    /// `-t` count and `-r`.
    pub time: u8,
    pub relative: bool,
}

impl Reporter {
    pub fn new(args: ReportOptions, s: &SessionStart, filter: Filter) -> Self {
        let mut collector = Collector::new(LeakPolicy {
            baseline: Default::default(),
            ignore_fds: args.ignore_fds.clone(),
            allow: args.allow.clone(),
            kinds: args.kinds.clone(),
            boundary_only: args.gates.leak_gate == Some(gates::LeakGate::Boundary),
        });
        if let Some(held) = &args.held_at_attach {
            if !args.no_baseline {
                collector.policy.baseline = held.iter().map(|h| (h.fd, h.dev, h.ino)).collect();
            }
            held_note(held, args.no_baseline);
        }
        Reporter {
            gates: gates::Gates::new(args.gates.clone()),
            stamper: Stamper::new(args.time, args.relative),
            args,
            collector,
            unfiltered: filter.is_active().then(Chains::default),
            filter,
            hidden: 0,
            term: stream::term(),
            root_inherited: Vec::new(),
            seen_root_exec: Vec::new(),
            probe_cost_ns: (!s.counting.syscalls()).then_some(0.0),
            close_cost_ns: s.close_cost_ns,
            counting: s.counting,
            ring_bytes: s.ring_bytes,
            queue_dropped: 0,
            perfetto: None,
            sarif: None,
        }
    }

    /// Also collects the findings for `--sarif`.
    pub fn with_sarif(mut self, on: bool) -> Self {
        self.sarif = on.then(|| sarif::Collector::new(&self.args.gates));
        self
    }

    /// `--sarif`'s findings and a note when some were left out (None without `--sarif`).
    pub fn sarif_findings(
        &mut self,
    ) -> Option<(Vec<crate::output::sarif::Finding>, Option<String>)> {
        self.sarif.take().map(sarif::Collector::finish)
    }

    /// Also writes the spawns shown to this Perfetto trace.
    pub fn with_perfetto(mut self, perfetto: Option<Perfetto>) -> Self {
        self.perfetto = perfetto;
        self
    }

    pub fn handle(&mut self, ev: Event, roots: &[u32]) -> Result<()> {
        match ev {
            Event::Spawn(s) => {
                // The traced command's own exec is not a spawn: what it inherited came from
                // fdaudit's caller, the baseline every spawn starts from. A -p root's exec
                // is one (its baseline is what it held at attach: what it opened since and
                // carries through the exec is its own leak).
                if self.args.held_at_attach.is_none()
                    && roots.contains(&s.pid)
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
                if let Some(s) = e.failed_exec.take() {
                    self.report_spawn(s)?;
                }
                self.collector.add_exit(&e);
                if let Some(p) = &mut self.perfetto {
                    p.exit(e.pid);
                }
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
                .extend(fds.iter().map(|f| (f.fd, f.dev, f.ino)));
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

    fn report_spawn(&mut self, s: Box<Spawn>) -> Result<()> {
        self.gates.judge(&s, &self.collector.policy);
        if let Some(c) = &mut self.sarif {
            c.add(&s, &self.collector.policy, &self.args.gates);
        }
        if let Some(all) = &mut self.unfiltered {
            all.add(&link(&s, &self.collector.policy, None));
        }
        if !self.filter.keeps(&s) {
            self.hidden += 1;
            return Ok(());
        }
        self.collector.add(&s);
        if let Some(p) = &mut self.perfetto {
            let policy = &self.collector.policy;
            p.spawn(&s, &|f| policy.in_baseline(f))
                .context("failed to write the Perfetto trace (--perfetto)")?;
        }
        if self.args.json {
            let policy = &self.collector.policy;
            let time_ns = stream::since_header(s.exec_ns);
            let record = json::SpawnJson::new(&s, time_ns, &|f| policy.in_baseline(f));
            stream::record(&TraceRecord::Spawn(Box::new(record)))?;
        } else if !self.args.quiet {
            let line = format!(
                "{}{}",
                self.stamper.prefix(s.exec_ns),
                spawn_line(&s, &self.collector.policy, self.term)
            );
            stream::text(&format!("{}\n", self.term.fill(&line, 4)))?;
        }
        Ok(())
    }

    /// The first CI gate that failed (`--fail-on-leak`, `--fail-on-strategy`,
    /// `--max-closes`), whatever the command's status.
    pub fn policy_failure(&self) -> Option<ExitReason> {
        self.gates.failed(self.leaked())
    }

    /// Why the gates set cannot pass on a trace that lost what `losses` counts (None: no
    /// gate set, or nothing lost that they need).
    pub fn incomplete(&self, losses: &Losses) -> Option<String> {
        losses.incomplete(&self.gates.opts)
    }

    /// Whether a process's last exec leaked an fd that the policy counts (what
    /// `--fail-on-leak` fails on), filters or not.
    pub fn leaked(&self) -> bool {
        match &self.unfiltered {
            Some(all) => all.leak_totals().spawns_with_new_leaks > 0,
            None => self.collector.totals().spawns_with_new_leaks > 0,
        }
    }

    /// Takes what the summary needs of the session's end: its ring's size, the records its
    /// queue dropped, the probes' cost once measured; returns the kernel's counters.
    fn take_end(
        &mut self,
        end: SessionEnd,
    ) -> (fdaudit_common::Stats, crate::engine::ebpf::MissedRuns) {
        (self.queue_dropped, self.ring_bytes) = (end.queue_dropped, end.ring_bytes);
        if let Some(ns) = end.probe_cost_ns {
            self.probe_cost_ns = Some(ns);
        }
        (end.stats, end.missed)
    }

    /// Writes the summary (JSON: the read storms and the summary record; text: the totals
    /// line, the table, the storms) and the notes.
    pub fn finish(
        mut self,
        end: SessionEnd,
        storms: Vec<reads::ReadStorm>,
        ending: Ending,
    ) -> Result<ci::CiVerdict> {
        let (stats, missed) = self.take_end(end);
        if let Some(p) = self.perfetto.take() {
            p.finish()
                .context("failed to write the Perfetto trace (--perfetto)")?;
        }
        let incomplete = self.incomplete(&Losses::new(&stats, &missed));
        let partial = summary::partial_notes(
            stats.lost_records,
            self.queue_dropped,
            self.ring_bytes,
            &missed,
            self.collector.partial_notes(),
        );
        let summary = Summary {
            spawns: self.collector.spawns(),
            lost_records: stats.lost_records,
            queue_dropped_records: self.queue_dropped,
            bpf_missed_runs: missed,
            untracked_forks: stats.tracked_full,
            read_table_full: stats.reads_full,
            fork_only_children: self.collector.fork_only,
            probe_cost_ns: self.probe_cost_ns.unwrap_or(0.0) as u64,
            close_cost_ns: self.close_cost_ns.round() as u64,
            no_syscalls: !self.counting.syscalls(),
            inherited_fds: self.root_inherited.clone(),
            command_status: ending.command_status,
            exit_code: ending.exit_code,
            exit_reason: ending.exit_reason,
            totals: self.collector.totals(),
            groups: self.collector.groups(),
            partial,
            read_storms: storms,
        };
        let advice = advice::advise(&summary.groups, self.close_cost_ns);
        if self.args.json {
            for s in &summary.read_storms {
                stream::record(&TraceRecord::ReadStorm(s.clone()))?;
            }
            for a in advice {
                stream::record(&TraceRecord::Advice(Box::new(a)))?;
            }
        } else if !self.args.quiet {
            let filtered = self
                .filter
                .is_active()
                .then(|| (self.filter.describe(), self.hidden));
            let mut text = Vec::new();
            summary_text(&mut text, &summary, filtered, self.term)?;
            stream::text(&String::from_utf8_lossy(&text))?;
            stream::text(&advice::advice_text(&advice, self.term))?;
        }
        self.notes(&summary);
        self.gates
            .say(self.leaked(), incomplete.as_deref(), &ending);
        let lines = self
            .gates
            .verdicts(self.leaked(), incomplete.as_deref(), &ending);
        let ci = ci::verdict(
            &self.gates,
            lines,
            incomplete.is_some(),
            &summary.groups,
            &ending,
        );
        if self.args.json {
            stream::record(&TraceRecord::Summary(Box::new(summary)))?;
        }
        Ok(ci)
    }

    /// The notes and warnings after the summary.
    fn notes(&self, summary: &Summary) {
        if !self.counting.syscalls() {
            stream::note(
                stream::Level::Note,
                "--no-syscalls: syscalls were not traced, so no close counts or strategies",
            );
        } else if self.probe_cost_ns.is_some() {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::{counts::SyscallCounts, ebpf::MissedRuns, strategy::Strategy};
    use crate::output::text::Lossless;
    use summary::TraceTotals;
    use text::summary_table;

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
            boundary: None,
            exec_ns: 0,
            identity: Default::default(),
            probed: close.into(),
            exec_path_cut: false,
            runtime: None,
            parent_nofile: None,
            nofile: None,
        }
    }

    /// A leaked regular file for tests: fd `fd`, file (`dev`, `ino`).
    pub(crate) fn leaked_fd(fd: u32, dev: u32, ino: u64) -> LeakedFd {
        LeakedFd {
            fd,
            kind: crate::fdkind::FdKind::Regular,
            target: Lossless::new(b"/etc/secret".to_vec()),
            access: "r",
            family: None,
            protocol: None,
            ino,
            dev,
            origin: None,
            critical: false,
            deleted: false,
            partial: false,
        }
    }

    /// A summary with these notes and counts, nothing traced.
    fn summary_with(lost: u64, missed: MissedRuns, flags: Vec<String>) -> Summary {
        Summary {
            spawns: 0,
            lost_records: lost,
            queue_dropped_records: 0,
            partial: summary::partial_notes(lost, 0, 4 << 20, &missed, flags),
            bpf_missed_runs: missed,
            untracked_forks: 0,
            read_table_full: 0,
            fork_only_children: 0,
            probe_cost_ns: 0,
            close_cost_ns: 0,
            no_syscalls: false,
            inherited_fds: vec![],
            command_status: Some(0),
            exit_code: 0,
            exit_reason: ExitReason::Command,
            totals: TraceTotals::default(),
            groups: vec![],
            read_storms: vec![],
        }
    }

    fn warning_lines(s: &Summary) -> Vec<String> {
        let mut text = Vec::new();
        text::summary_text(&mut text, s, None, Term::plain()).unwrap();
        String::from_utf8(text)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("WARNING: "))
            .map(String::from)
            .collect()
    }

    #[test]
    fn the_baseline_is_the_same_fd_and_file_device_and_inode_both() {
        let policy = LeakPolicy {
            baseline: [(5, 8 << 20 | 1, 42)].into(),
            ..LeakPolicy::default()
        };
        assert!(
            !policy.counts(&leaked_fd(5, 8 << 20 | 1, 42)),
            "the held file"
        );
        // The same inode number on another file system (a tmpfs, an overlay's upper
        // layer): another file, a leak.
        assert!(policy.counts(&leaked_fd(5, 0x2d, 42)), "another device");
        assert!(
            policy.counts(&leaked_fd(5, 8 << 20 | 1, 43)),
            "another inode"
        );
        assert!(
            policy.counts(&leaked_fd(6, 8 << 20 | 1, 42)),
            "another fd number"
        );
        let mut s = spawn("sh", "/bin/cat", 0, 1_000, 2);
        s.leaked_fds = vec![leaked_fd(5, 8 << 20 | 1, 42), leaked_fd(5, 0x2d, 42)];
        assert_eq!(policy.new_leaks(&s), 1);
    }

    #[test]
    fn records_the_queue_dropped_are_said_apart_from_the_ring_s() {
        let ring = lost_note(10, 0, 4 << 20);
        assert!(ring.starts_with("10 records LOST") && ring.contains("--buffer-pages"));
        let queue = lost_note(10, 10, 4 << 20);
        assert!(queue.contains("decoder fell 64 MiB behind"), "{queue}");
        assert!(!queue.contains("--buffer-pages"), "{queue}");
        let both = lost_note(10, 4, 4 << 20);
        assert!(
            both.contains("6 because the 4 MiB ring buffer was full"),
            "{both}"
        );
        assert!(both.contains("4 because fdaudit's decoder"), "{both}");
        let s = Summary {
            queue_dropped_records: 4,
            ..summary_with(10, MissedRuns::Unknown, vec![])
        };
        assert_eq!(
            serde_json::to_value(&s).unwrap()["queue_dropped_records"],
            4
        );
    }

    #[test]
    fn skipped_runs_are_said_like_lost_records() {
        let missed = MissedRuns::Known(
            [
                ("sched_process_exec", 236),
                ("sys_enter", 13_271),
                ("sys_exit", 0),
            ]
            .map(|(p, n)| (p.to_string(), n))
            .into(),
        );
        let flags = vec!["2 spawns with path_partial".to_string()];
        let s = summary_with(3, missed.clone(), flags.clone());
        assert_eq!(s.partial.len(), 3, "{:?}", s.partial);
        assert!(
            s.partial[0].starts_with("3 records LOST"),
            "{:?}",
            s.partial
        );
        assert!(
            s.partial[1].starts_with(
                "the kernel SKIPPED 13507 runs of fdaudit's programs (sys_enter 13271, sched_process_exec 236)"
            ),
            "{:?}",
            s.partial
        );
        assert_eq!(s.warnings(), &s.partial[..2]);
        let w = warning_lines(&s);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[1].contains("SKIPPED 13507 runs"), "{w:?}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["bpf_missed_runs"]["sched_process_exec"], 236);
        assert_eq!(json["bpf_missed_runs"]["sys_exit"], 0);

        // Skipped runs alone: the first note and the only warning.
        let s = summary_with(0, missed, flags.clone());
        assert_eq!(s.warnings().len(), 1);
        assert!(s.warnings()[0].contains("SKIPPED"), "{:?}", s.partial);
        assert_eq!(warning_lines(&s).len(), 1);

        // None skipped, or a kernel without the counter: no note, no warning.
        for missed in [MissedRuns::default(), MissedRuns::Unknown] {
            let s = summary_with(0, missed, flags.clone());
            assert_eq!(s.partial, flags);
            assert!(s.warnings().is_empty());
            assert!(warning_lines(&s).is_empty());
        }
        let json = serde_json::to_value(summary_with(0, MissedRuns::Unknown, vec![])).unwrap();
        assert_eq!(json["bpf_missed_runs"], "unknown");
    }

    #[test]
    fn spawn_line_names_strategy_counts_and_leaks() {
        let s = spawn("python3", "/bin/true", 19_997, 2_500_000, 0);
        assert_eq!(
            spawn_line(&s, &LeakPolicy::default(), Term::plain()),
            "python3[1] -> 2 /bin/true (-x)  window 2.50 ms (untraced ~2.50 ms)  close-loop to 20000: close 19997 (19996 EBADF)"
        );
    }

    #[test]
    fn a_failed_exec_counts_its_attempts_in_the_right_number() {
        let mut s = spawn("sh", "/nonexistent/cmd", 0, 1_000, 0);
        s.exec_ok = false;
        s.exec_error = Some("ENOENT");
        for (attempts, said) in [(1, "(1 attempt)"), (3, "(3 attempts)")] {
            s.exec_attempts = attempts;
            let line = spawn_line(&s, &LeakPolicy::default(), Term::plain());
            assert!(
                line.starts_with(&format!(
                    "sh[1] -> 2 EXEC FAILED /nonexistent/cmd: ENOENT {said}, exited"
                )),
                "{line}"
            );
        }
    }

    #[test]
    fn exec_chain_leaks_count_at_the_last_exec() {
        let mut c = Collector::default();
        let mut helper = spawn("java", "/usr/lib/jvm/lib/jspawnhelper", 0, 1_000, 14);
        helper.pid = 40;
        // As engine::steps judged it when pid 40 exec'd again.
        helper.flags = SpawnFlags::EXECD_AGAIN;
        let line = spawn_line(&helper, &LeakPolicy::default(), Term::plain());
        assert!(line.contains("  transient 14: "), "{line}");
        assert!(!line.contains("LEAKED"), "{line}");
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
        let line = spawn_line(&inside, &LeakPolicy::default(), Term::plain());
        assert!(line.contains(" in docker:3f2a0b9c8d7e "), "{line}");
        let json = serde_json::to_value(json::SpawnJson::new(&inside, 0, &|_| false)).unwrap();
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
