//! [`CloseMethod`]: what a spawned child does with the fds it inherited, between fork and
//! exec. (What the tracer *infers* a child did is [`crate::engine::strategy::Strategy`].)

use serde::{Deserialize, Serialize};

/// How the child closes (or does not close) the fds it inherited, between fork and exec.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CloseMethod {
    /// Nothing: fork + execve, every inherited fd leaks.
    None,
    /// close(fd) for every fd from 3 to the soft RLIMIT_NOFILE (L−3 calls).
    CloseLoop,
    /// fcntl(fd, F_SETFD, FD_CLOEXEC) for every fd from 3 to the soft limit (L−3 calls).
    FcntlLoop,
    /// Read /proc/self/fd with getdents64, then close the fds found.
    ProcfdWalk,
    /// One poll() over fds 0..L, then close those not POLLNVAL (D's std.process).
    PollScan,
    /// One close_range(3, ~0U, 0).
    CloseRange,
    /// One close_range(3, ~0U, CLOSE_RANGE_CLOEXEC).
    CloseRangeCloexec,
    /// glibc closefrom(3) (2.34+).
    Closefrom,
    /// posix_spawn with no file actions (leaks like `none`).
    PosixSpawn,
    /// posix_spawn with posix_spawn_file_actions_addclosefrom_np(3).
    PosixSpawnClosefrom,
}

impl CloseMethod {
    /// Every strategy, in the order tables show them.
    pub const ALL: [CloseMethod; 10] = [
        CloseMethod::None,
        CloseMethod::CloseLoop,
        CloseMethod::FcntlLoop,
        CloseMethod::ProcfdWalk,
        CloseMethod::PollScan,
        CloseMethod::CloseRange,
        CloseMethod::CloseRangeCloexec,
        CloseMethod::Closefrom,
        CloseMethod::PosixSpawn,
        CloseMethod::PosixSpawnClosefrom,
    ];

    /// The kebab-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            CloseMethod::None => "none",
            CloseMethod::CloseLoop => "close-loop",
            CloseMethod::FcntlLoop => "fcntl-loop",
            CloseMethod::ProcfdWalk => "procfd-walk",
            CloseMethod::PollScan => "poll-scan",
            CloseMethod::CloseRange => "close-range",
            CloseMethod::CloseRangeCloexec => "close-range-cloexec",
            CloseMethod::Closefrom => "closefrom",
            CloseMethod::PosixSpawn => "posix-spawn",
            CloseMethod::PosixSpawnClosefrom => "posix-spawn-closefrom",
        }
    }

    /// Whether the child gets none of the parent's fds ≥ 3 (false for the two that leak).
    pub fn closes_fds(self) -> bool {
        !matches!(self, CloseMethod::None | CloseMethod::PosixSpawn)
    }

    /// Whether the cost is one syscall per possible fd (grows with RLIMIT_NOFILE).
    pub fn is_loop(self) -> bool {
        matches!(
            self,
            CloseMethod::CloseLoop | CloseMethod::FcntlLoop | CloseMethod::PollScan
        )
    }

    /// close() calls the child makes before exec with soft limit `nofile` and `open_fds`
    /// fds open (counting 0–2), when the strategy fixes the number.
    pub fn expected_close_calls(self, nofile: u64, open_fds: u64) -> Option<u64> {
        match self {
            CloseMethod::None
            | CloseMethod::FcntlLoop
            | CloseMethod::CloseRange
            | CloseMethod::CloseRangeCloexec
            | CloseMethod::PosixSpawn => Some(0),
            CloseMethod::CloseLoop => Some(nofile.saturating_sub(3)),
            // The open fds ≥ 3; procfd-walk also closes its directory fd.
            CloseMethod::PollScan => Some(open_fds.saturating_sub(3)),
            CloseMethod::ProcfdWalk => Some(open_fds.saturating_sub(3) + 1),
            // glibc uses close_range when the kernel has it; the fallback is a walk.
            CloseMethod::Closefrom | CloseMethod::PosixSpawnClosefrom => None,
        }
    }

    /// Whether the strategy goes through posix_spawn rather than fork + exec.
    pub fn is_posix_spawn(self) -> bool {
        matches!(
            self,
            CloseMethod::PosixSpawn | CloseMethod::PosixSpawnClosefrom
        )
    }
}

impl std::fmt::Display for CloseMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
