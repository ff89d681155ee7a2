//! What a trace knows it did not see, and which gates that leaves without a verdict: a gate
//! never passes on data known to be incomplete (a traced user can flood the ring buffer,
//! or stop nothing and just outrun it, to hide the one spawn that leaks).

use fdaudit_common::Stats;

use super::gates::GateOptions;
use crate::engine::ebpf::{misses, MissedRuns};

/// The session's loss counters at the end of a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Losses {
    /// Records the ring buffer had no room for (the kernel's count).
    pub lost_records: u64,
    /// Forks the kernel could not add to the traced set (TRACKED full): those processes'
    /// spawns were not seen.
    pub untracked_forks: u64,
    /// Skipped runs of the programs that write records (fork, exec, exit, a failed exec's
    /// errno): each a record lost.
    pub skipped_records: u64,
    /// Skipped runs of the syscall counters: counts are low (strategies and closing calls).
    pub skipped_counts: u64,
}

impl Losses {
    pub fn new(stats: &Stats, missed: &MissedRuns) -> Losses {
        let mut l = Losses {
            lost_records: stats.lost_records,
            untracked_forks: stats.tracked_full,
            ..Losses::default()
        };
        for (program, n) in missed.nonzero() {
            if misses::loses_records(program) {
                l.skipped_records += n;
            } else if counts_syscalls(program) {
                l.skipped_counts += n;
            }
        }
        l
    }

    /// Why the gates set in `opts` cannot pass on this trace, in words; None when no gate
    /// is set or no known loss touches them. Every gate needs every spawn's record; only
    /// `--fail-on-strategy` and `--max-closes` need the syscall counts.
    pub fn incomplete(&self, opts: &GateOptions) -> Option<String> {
        let counts_gate = !opts.strategies.is_empty() || opts.max_closes.is_some();
        if opts.leak_gate.is_none() && !counts_gate {
            return None;
        }
        let mut why = Vec::new();
        if self.lost_records > 0 {
            why.push(format!(
                "{} records lost (the ring buffer was full)",
                self.lost_records
            ));
        }
        if self.skipped_records > 0 {
            why.push(format!(
                "{} runs of the fork, exec and exit programs skipped by the kernel",
                self.skipped_records
            ));
        }
        if self.untracked_forks > 0 {
            why.push(format!(
                "{} forks not traced (the traced-process table was full)",
                self.untracked_forks
            ));
        }
        if counts_gate && self.skipped_counts > 0 {
            why.push(format!(
                "{} runs of the syscall counters skipped by the kernel",
                self.skipped_counts
            ));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
}

/// Whether `program` counts a spawn's syscalls (raw-tp's `sys_enter`, tp's and fentry's
/// counters), as opposed to `--reads`' and `--origin`'s programs, which no gate reads.
fn counts_syscalls(program: &str) -> bool {
    use crate::engine::ebpf::{FENTRY_PROGRAMS, PROGRAMS, TP_PROGRAMS};
    PROGRAMS
        .iter()
        .any(|p| p.name == program && p.syscall && !p.reads_only)
        || TP_PROGRAMS.iter().any(|p| p.name == program)
        || FENTRY_PROGRAMS
            .iter()
            .any(|p| p.name == program && !p.reads_only)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::strategy::Strategy;

    fn missed(v: &[(&str, u64)]) -> MissedRuns {
        MissedRuns::Known(v.iter().map(|(k, n)| (k.to_string(), *n)).collect())
    }

    #[test]
    fn losses_sort_skipped_runs_by_what_they_lose() {
        let stats = Stats {
            lost_records: 51_000,
            tracked_full: 2,
            reads_full: 9,
            unclosed_full: 0,
            origin_records: 0,
            unclosed_sites: 0,
            unclosed_split_tables: 0,
            unclosed_unseen_calls: 0,
            unclosed_io_uring: 0,
        };
        let l = Losses::new(
            &stats,
            &missed(&[
                ("sched_process_exec", 3),
                ("exec_walk_fds", 1),
                ("sys_enter", 40),
                ("tp_close", 5),
                ("fentry_close", 1),
                ("tp_exit_read", 7),
                ("sys_exit", 8),
                ("origin_enter", 6),
            ]),
        );
        assert_eq!(
            l,
            Losses {
                lost_records: 51_000,
                untracked_forks: 2,
                skipped_records: 4,
                skipped_counts: 46,
            }
        );
        assert_eq!(Losses::new(&stats, &MissedRuns::Unknown).skipped_counts, 0);
    }

    #[test]
    fn only_a_set_gate_that_the_loss_touches_is_incomplete() {
        let leak = GateOptions {
            leak_gate: Some(super::super::LeakGate::Any),
            ..GateOptions::default()
        };
        let closes = GateOptions {
            max_closes: Some(10),
            ..GateOptions::default()
        };
        let lost = Losses {
            lost_records: 3,
            ..Losses::default()
        };
        assert_eq!(lost.incomplete(&GateOptions::default()), None, "no gate");
        assert_eq!(
            lost.incomplete(&leak).as_deref(),
            Some("3 records lost (the ring buffer was full)")
        );
        let counts = Losses {
            skipped_counts: 5,
            ..Losses::default()
        };
        assert_eq!(counts.incomplete(&leak), None, "a leak needs no count");
        assert_eq!(
            counts.incomplete(&closes).as_deref(),
            Some("5 runs of the syscall counters skipped by the kernel")
        );
        let forks = Losses {
            untracked_forks: 1,
            skipped_records: 2,
            ..Losses::default()
        };
        let why = forks.incomplete(&closes).unwrap();
        assert!(why.contains("2 runs of the fork") && why.contains("1 forks not traced"));
        assert_eq!(Losses::default().incomplete(&leak), None);
        let all = GateOptions {
            leak_gate: Some(super::super::LeakGate::Boundary),
            strategies: vec![Strategy::CloseLoop, Strategy::PollScan],
            max_closes: Some(7),
        };
        assert_eq!(
            all.names(),
            [
                "--fail-on-leak=boundary",
                "--fail-on-strategy close-loop,poll-scan",
                "--max-closes 7"
            ]
        );
    }
}
