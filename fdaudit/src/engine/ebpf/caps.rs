//! Linux capability numbers fdaudit cares about, and which of them this process has.

pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// Effective capabilities of this process, from /proc/self/status (CapEff, parsed by
/// procfs-core).
pub fn effective_caps() -> u64 {
    procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_or(0, |s| s.capeff)
}

pub fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// The capabilities tracing lacks, named, or None when it has what it needs.
pub fn missing_trace_caps(caps: u64) -> Option<String> {
    let admin = has_cap(caps, CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !admin && !has_cap(caps, CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !admin && !has_cap(caps, CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}
