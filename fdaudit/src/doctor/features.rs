//! The kernel features fdaudit uses, probed one by one (never guessed from the version):
//! found, or missing and what that costs.

use std::path::Path;

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{is_map_supported, is_program_supported},
};
use fdaudit_common::BOUNDED_MAX_FDS;

use super::{check, Check, Status};
use crate::engine::{btf, cgroup_filter, ebpf};

/// One row per feature. Needs CAP_BPF (the probes load tiny programs).
pub fn checks() -> Vec<Check> {
    let mut out = Vec::new();
    let mut row = |name: &str, found: bool, status_missing: Status, cost: String| {
        let (status, detail) = if found {
            (Status::Ok, "found".to_string())
        } else {
            (status_missing, format!("missing: {cost}"))
        };
        out.push(check(format!("feature {name}"), status, detail));
    };
    row(
        "btf",
        Path::new(btf::VMLINUX_BTF).exists(),
        Status::Fail,
        "no kernel struct offsets: trace cannot run (needs CONFIG_DEBUG_INFO_BTF=y)".into(),
    );
    row(
        "ring buffer",
        is_map_supported(MapType::RingBuf).unwrap_or(false),
        Status::Fail,
        "no way to send records: trace cannot run (needs 5.8+)".into(),
    );
    row(
        "raw tracepoints",
        is_program_supported(ProgramType::RawTracePoint).unwrap_or(false),
        Status::Fail,
        "no hooks: trace cannot run (needs 4.17+)".into(),
    );
    let forced = std::env::var(ebpf::EXEC_WALK_ENV).ok();
    row(
        "bpf_loop",
        ebpf::has_bpf_loop(),
        Status::Warn,
        format!(
            "trace walks each exec's fd table with bounded loops in tail-called chunks: \
             leaked fds from {BOUNDED_MAX_FDS} up are not seen, and records of processes \
             with larger tables carry the bounded_walk flag"
        ),
    );
    if let Some(f) = forced {
        out.push(check(
            "exec walk",
            Status::Warn,
            format!("forced by {}={f}", ebpf::EXEC_WALK_ENV),
        ));
    }
    let mut row = |name: &str, found: bool, cost: &str| {
        let (status, detail) = if found {
            (Status::Ok, "found".to_string())
        } else {
            (Status::Absent, cost.to_string())
        };
        out.push(check(format!("feature {name}"), status, detail));
    };
    row(
        "fentry",
        is_program_supported(ProgramType::Tracing).unwrap_or(false),
        "--backend fentry cannot work here; trace counts with tp or raw tracepoints",
    );
    row(
        "recursion-miss counter",
        ebpf::misses::probe(),
        "not on this kernel: runs the kernel skips (a program preempted and its hook fired again on that CPU) \
         cannot be counted: trace's bpf_missed_runs says \"unknown\" (needs 5.12+)",
    );
    row(
        "kprobes",
        is_program_supported(ProgramType::KProbe).unwrap_or(false),
        "not on this kernel; fdaudit does not use them (trace uses raw tracepoints)",
    );
    out.push(cgroup_filter_check());
    out
}

/// How `--cgroup` finds the cgroup's processes on this kernel ([`cgroup_filter::way`]).
fn cgroup_filter_check() -> Check {
    // Either way works: which one is a fact about the kernel, not a problem.
    let forced = std::env::var(cgroup_filter::ENV).ok();
    check(
        "cgroup filter",
        if forced.is_some() {
            Status::Warn
        } else {
            Status::Ok
        },
        format!(
            "--cgroup (trace, watch, unclosed) uses {}; the root cgroup (whole-host watch) needs none{}",
            cgroup_filter::way().describe(),
            forced.map_or_else(String::new, |f| format!(" (forced by {}={f})", cgroup_filter::ENV))
        ),
    )
}
