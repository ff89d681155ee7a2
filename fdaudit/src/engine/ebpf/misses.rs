//! Runs the kernel skipped: `bpf_prog_info.recursion_misses` (5.12+), per program.
//!
//! A tracing program must not run while another run of it is in progress on the same CPU.
//! On a preemptible kernel (`preempt=full`, `lazy`) a raw tracepoint or fentry program can
//! be preempted, and when its hook fires again on that CPU meanwhile, the kernel skips the
//! program and counts a miss instead (raw tracepoints since 6.2, trampolines since 5.12).
//! A skipped exec, fork or exit program loses a record; a skipped syscall program loses a
//! count. fdaudit reads the counters at start and at the end and says what was skipped.
//!
//! aya 0.14's `ProgramInfo` keeps `bpf_prog_info` to itself and has no accessor for the
//! field, so the info is read here with BPF_OBJ_GET_INFO_BY_FD, using aya-obj's binding of
//! the structure. The kernel writes back how much of the structure it knows: a kernel
//! before 5.12 stops short of `recursion_misses`, and the count is unknown there.

use std::{
    collections::BTreeMap,
    mem::{offset_of, size_of},
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
};

use aya::Ebpf;
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info, bpf_prog_type};

/// One program's skipped runs: `None` when the kernel has no such counter (before 5.12).
pub fn recursion_misses(fd: BorrowedFd<'_>) -> std::io::Result<Option<u64>> {
    // SAFETY: both are plain C structures for which all-zero bytes are valid.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = std::ptr::from_mut(&mut info) as u64;
    // SAFETY: the kernel writes at most `info_len` bytes into `info`, which outlives the
    // call, and writes the length it filled back into `attr`.
    unsafe { super::raw::bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    // SAFETY: the kernel filled the `info` member.
    let filled = unsafe { attr.info.info_len } as usize;
    let end = offset_of!(bpf_prog_info, recursion_misses) + size_of::<u64>();
    Ok((filled >= end).then_some(info.recursion_misses))
}

/// Whether the kernel counts skipped runs (`recursion_misses`, 5.12+): loads the smallest
/// socket filter (`r0 = 0; exit`) and reads its info. Needs CAP_BPF (or an unprivileged
/// BPF sysctl that allows socket filters); false when the probe cannot load.
pub fn probe() -> bool {
    super::raw::load_minimal(bpf_prog_type::BPF_PROG_TYPE_SOCKET_FILTER, None)
        .is_ok_and(|fd| matches!(recursion_misses(fd.as_fd()), Ok(Some(_))))
}

/// Skipped runs of every loaded program, by program name; `None` when the kernel has no
/// counter (before 5.12) or a program's info could not be read.
pub fn read_all(ebpf: &Ebpf) -> MissedRuns {
    let mut counts = BTreeMap::new();
    for (name, prog) in ebpf.programs() {
        let Ok(fd) = prog.fd() else {
            continue; // not loaded (not wanted in this session)
        };
        match recursion_misses(fd.as_fd()) {
            Ok(Some(n)) => {
                counts.insert(name.to_string(), n);
            }
            Ok(None) | Err(_) => return MissedRuns::Unknown,
        }
    }
    MissedRuns::Known(counts)
}

/// Runs the kernel skipped per program, or unknown (a kernel before 5.12). In JSON
/// (`trace/report/json.rs`): an object of counts by program name, or the
/// string `"unknown"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissedRuns {
    Unknown,
    Known(BTreeMap<String, u64>),
}

impl Default for MissedRuns {
    fn default() -> Self {
        MissedRuns::Known(BTreeMap::new())
    }
}

impl MissedRuns {
    /// What was skipped since `baseline` (programs are fresh, so it should be all zero; a
    /// program missing from it counts from zero).
    pub fn since(&self, baseline: &MissedRuns) -> MissedRuns {
        match (self, baseline) {
            (MissedRuns::Known(now), MissedRuns::Known(base)) => MissedRuns::Known(
                now.iter()
                    .map(|(name, n)| {
                        let before = base.get(name).copied().unwrap_or(0);
                        (name.clone(), n.saturating_sub(before))
                    })
                    .collect(),
            ),
            _ => MissedRuns::Unknown,
        }
    }

    /// Skipped runs over every program (0 when unknown).
    pub fn total(&self) -> u64 {
        match self {
            MissedRuns::Known(m) => m.values().sum(),
            MissedRuns::Unknown => 0,
        }
    }

    /// The programs with skipped runs and their counts, largest first.
    pub fn nonzero(&self) -> Vec<(&str, u64)> {
        let MissedRuns::Known(m) = self else {
            return Vec::new();
        };
        let mut v: Vec<(&str, u64)> = m
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    /// What to say when the kernel skipped runs (None when it skipped none, or the count
    /// is unknown): in the JSON summary's `partial` notes, on stderr and in the text summary.
    pub fn note(&self) -> Option<String> {
        let skipped = self.nonzero();
        if skipped.is_empty() {
            return None;
        }
        let list: Vec<String> = skipped.iter().map(|(p, n)| format!("{p} {n}")).collect();
        let records = skipped.iter().any(|(p, _)| loses_records(p));
        Some(format!(
            "the kernel SKIPPED {} runs of fdaudit's programs ({}): a program was preempted and its hook fired again on that CPU meanwhile (bpf recursion protection); {}",
            self.total(),
            list.join(", "),
            if records {
                "spawn, fork or exit records are missing, some syscall counts are low"
            } else {
                "some syscall counts are low"
            }
        ))
    }
}

/// Whether a skipped run of `program` loses a record (exec and its walk's stages, fork,
/// exit, a failed exec's errno), not only a count.
pub fn loses_records(program: &str) -> bool {
    ["sched_process_", "exec_", "failed_exec"]
        .iter()
        .any(|p| program.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl MissedRuns {
        /// The skipped runs of `program` (0 when unknown or not loaded).
        fn of(&self, program: &str) -> u64 {
            match self {
                MissedRuns::Known(m) => m.get(program).copied().unwrap_or(0),
                MissedRuns::Unknown => 0,
            }
        }
    }

    fn known(v: &[(&str, u64)]) -> MissedRuns {
        MissedRuns::Known(v.iter().map(|(k, n)| (k.to_string(), *n)).collect())
    }

    #[test]
    fn counts_since_the_baseline_and_unknown_stays_unknown() {
        let base = known(&[("sys_enter", 2), ("sched_process_exec", 0)]);
        let end = known(&[
            ("sys_enter", 13_273),
            ("sched_process_exec", 236),
            ("sched_process_exit", 106),
        ]);
        let d = end.since(&base);
        assert_eq!(
            d,
            known(&[
                ("sys_enter", 13_271),
                ("sched_process_exec", 236),
                ("sched_process_exit", 106)
            ])
        );
        assert_eq!(d.total(), 13_613);
        assert_eq!(d.of("sched_process_exec"), 236);
        assert_eq!(end.since(&MissedRuns::Unknown), MissedRuns::Unknown);
        assert_eq!(MissedRuns::Unknown.since(&base), MissedRuns::Unknown);
        assert_eq!(MissedRuns::Unknown.note(), None);
        assert_eq!(known(&[("sys_enter", 0)]).note(), None);
    }

    #[test]
    fn record_programs_lose_records_and_counters_lose_counts() {
        for p in [
            "sched_process_exec",
            "sched_process_exec_bounded",
            "exec_walk_fds",
            "failed_exec",
            "failed_execat",
        ] {
            assert!(
                loses_records(p),
                "{p} sends a record or a failed exec's errno"
            );
        }
        for p in [
            "sys_enter",
            "sys_exit",
            "tp_close",
            "fentry_close",
            "origin_enter",
        ] {
            assert!(!loses_records(p), "{p} only counts");
        }
    }

    #[test]
    fn the_note_names_programs_and_counts_largest_first() {
        let d = known(&[
            ("sched_process_exec", 236),
            ("sys_enter", 13_271),
            ("failed_exec", 18),
            ("sys_exit", 0),
        ]);
        let note = d.note().expect("a note");
        assert!(
            note.starts_with(
                "the kernel SKIPPED 13525 runs of fdaudit's programs (sys_enter 13271, sched_process_exec 236, failed_exec 18): "
            ),
            "{note}"
        );
        assert!(note.contains("records are missing"), "{note}");
        let counts_only = known(&[("sys_enter", 5)]).note().unwrap();
        assert!(
            counts_only.ends_with("; some syscall counts are low"),
            "{counts_only}"
        );
    }
}
