//! `fdaudit unclosed`: the live set of fds the followed processes made, kept in the kernel
//! by the origin programs (a mode of theirs, [`crate::Config::unclosed`]): one
//! [`UnclosedLive`] per (tgid << 32 | fd) in [`crate::MAP_UNCLOSED_LIVE`], inserted at the
//! exit of every fd-making call of the shared table (`for_each_origin_call!`), removed at
//! close(); the creating call site's user stack once per site in
//! [`crate::MAP_UNCLOSED_STACKS`] (`bpf_get_stackid`) with the words at the user stack
//! pointer the first time that site was seen ([`UnclosedSite`]); the calls that failed with
//! EMFILE or ENFILE per process in [`crate::MAP_UNCLOSED_FULL`] ([`UnclosedFull`]).

use crate::ORIGIN_SP_WORDS;

/// Capacity of the live set (an fd made when it is full is not kept: userspace counts it
/// `not seen`).
pub const MAX_UNCLOSED_LIVE: u32 = 1 << 17;
/// Distinct creating stacks kept.
pub const MAX_UNCLOSED_STACKS: u32 = 1 << 12;
/// Frames a creating stack keeps (the kernel's walk stops there: its cost grows with it).
pub const UNCLOSED_STACK_DEPTH: usize = 32;
/// Processes whose EMFILE/ENFILE moment is kept.
pub const MAX_UNCLOSED_FULL: u32 = 1024;

/// `EMFILE` and `ENFILE`.
pub const EMFILE: i64 = 24;
pub const ENFILE: i64 = 23;

/// One live fd: the call that made it, where, when, and how close-on-exec stood.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UnclosedLive {
    /// bpf_ktime_get_ns() at the call's exit.
    pub time_ns: u64,
    /// Id in [`crate::MAP_UNCLOSED_STACKS`] (negative: bpf_get_stackid failed).
    pub stack_id: i32,
    /// [`crate::OriginCall`] value.
    pub call: u32,
    /// 1: the fd has close-on-exec (an exec of the process closes it).
    pub cloexec: u32,
    /// The process's execs seen (`TaskState::execs`) when the fd was made: a close-on-exec
    /// entry older than the process's last exec is stale.
    pub execs: u32,
}

/// What the stack id does not keep, read the first time a site was seen: the user stack
/// pointer and the words above it (a libc wrapper without frame pointers keeps its
/// caller's return address there; `fdaudit::engine::unwind`).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct UnclosedSite {
    pub pid: u32,
    /// Words copied into `sp_words` (0 when the read failed).
    pub nsp_words: u32,
    pub sp: u64,
    pub sp_words: [u64; ORIGIN_SP_WORDS],
}

/// A process's calls that failed for lack of fds: the first one (call, stack, time) and
/// how many did.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UnclosedFull {
    pub time_ns: u64,
    pub count: u64,
    pub stack_id: i32,
    /// [`crate::OriginCall`] value.
    pub call: u32,
    /// 24 (EMFILE) or 23 (ENFILE).
    pub errno: u32,
    pub tid: u32,
}

const _: () = assert!(core::mem::size_of::<UnclosedLive>() == 24);
const _: () = assert!(core::mem::size_of::<UnclosedSite>() == 16 + 8 * ORIGIN_SP_WORDS);
const _: () = assert!(core::mem::size_of::<UnclosedFull>() == 32);
