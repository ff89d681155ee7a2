//! What a session tells its front end, once when it starts and once at its end, as two
//! plain values ([`super::session::Session::at_start`], [`super::session::Session::at_end`]):
//! between them a front end needs nothing of the session but its batches of events (and,
//! for `--reads`, the read counts).

use fdaudit_common::Stats;

use super::{counting::Counting, ebpf::MissedRuns};

/// A session as it started: fixed from then on.
#[derive(Debug, Clone)]
pub struct SessionStart {
    /// What the kernel counts.
    pub counting: Counting,
    /// Untraced cost of one close() on a closed fd, ns, measured before attaching.
    pub close_cost_ns: f64,
    /// The ring buffer's size at start, bytes.
    pub ring_bytes: u64,
}

/// A session at its end, read before its programs are detached.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    /// The kernel's counters: lost records (those fdaudit's queue dropped included),
    /// untracked forks, full read tables.
    pub stats: Stats,
    /// The programs' skipped runs since the session was ready.
    pub missed: MissedRuns,
    /// Lost records that fdaudit's queue between the ring and the decoder dropped.
    pub queue_dropped: u64,
    /// The first and the last ring buffer's sizes, bytes.
    pub first_ring_bytes: u64,
    pub ring_bytes: u64,
    /// Why the ring could not grow when a burst needed it to, if it could not.
    pub ring_grow_failed: Option<String>,
    /// The probes' cost per counted syscall, ns rounded, once measured (0 when no syscall
    /// was counted).
    pub probe_cost_ns: Option<f64>,
    /// The measurement itself: ns and how long it took, ms.
    pub calibration: Option<(f64, f64)>,
    /// `--origin`: origin records that came after the spawn whose leaked fd they made.
    pub late_origins: u64,
    /// `--origin`: origin records decoded (`stats.origin_records` were sent); None without.
    pub origin_records_decoded: Option<u64>,
}
