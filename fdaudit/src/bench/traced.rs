//! The traced pass: runs a spawner under fdaudit's own tracer and counts, per spawn, the
//! syscalls the child made between fork and exec and the fds it leaked.
//!
//! Everything the bench needs from `fdaudit::trace` goes through [`Tracer`], so the bench
//! builds and runs (without traced columns) while tracing is not available.

use std::process::Command;

/// What the tracer saw for one spawn of the spawner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracedSpawn {
    pub close_calls: u64,
    pub close_range_calls: u64,
    pub fcntl_setfd_calls: u64,
    pub poll_calls: u64,
    pub getdents64_calls: u64,
    /// Fds ≥ 3 the exec'd program got from its parent.
    pub leaked_fds: u64,
    pub exec_ok: bool,
}

/// Why the traced pass cannot run.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("not root: the traced columns need root (CAP_BPF and CAP_PERFMON)")]
    NotRoot,
    #[error("fdaudit's tracer is not available in this build")]
    NotAvailable,
    #[error("{0}")]
    Other(#[from] anyhow::Error),
}

/// A tracing session reused for every cell.
pub struct Tracer {
    _private: (),
}

impl Tracer {
    /// Loads and attaches the tracer (root only).
    pub fn start() -> Result<Tracer, TraceError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(TraceError::NotRoot);
        }
        Err(TraceError::NotAvailable)
    }

    /// Runs `spawner` (a `__spawner … --wait-stdin` command), tracks it once it is ready,
    /// lets it make its `spawns` spawns and returns what the tracer saw for each of its
    /// children, in order.
    pub fn run(&mut self, _spawner: Command, _spawns: u64) -> Result<Vec<TracedSpawn>, TraceError> {
        Err(TraceError::NotAvailable)
    }
}
