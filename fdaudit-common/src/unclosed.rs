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
/// Slots of [`crate::MAP_UNCLOSED_OWNERS`] (a power of two): indexed by `tgid & (slots - 1)`.
pub const UNCLOSED_OWNER_SLOTS: u32 = 1 << 16;
/// Processes whose EMFILE/ENFILE moment is kept.
pub const MAX_UNCLOSED_FULL: u32 = 1024;
/// Call sites kept (a stack id and the caller's return address, [`UnclosedSiteKey`]).
pub const MAX_UNCLOSED_SITES: u32 = 1 << 13;
/// Calls whose stack words are kept while their stack id's return-address slot is not
/// known yet ([`UnclosedPending`]; an LRU map: the oldest go first).
pub const MAX_UNCLOSED_PENDING: u32 = 1 << 13;
/// The deepest return-address slot a wrapper's frame may put its caller's return address
/// at, in words above the stack pointer.
pub const MAX_RA_SLOT: u32 = 512;

/// Values of [`crate::MAP_UNCLOSED_RA_SLOTS`] (per stack id, written by userspace from the
/// unwind rule of the stack's innermost frame): where the caller's return address is.
pub mod ra_slot {
    /// Not learned yet: the call's stack words are kept ([`super::UnclosedPending`]).
    pub const UNKNOWN: u32 = 0;
    /// The stack id tells the call site alone (the innermost frame keeps a frame pointer,
    /// so the kernel's walk has its caller; or no unwind rule is known).
    pub const NONE: u32 = u32::MAX;
    // 1..=MAX_RA_SLOT: the return address is the word `slot - 1` above the stack pointer.
}

/// [`UnclosedLive::ra_from`]: what [`UnclosedLive::ra`] holds.
pub mod ra_from {
    /// Nothing: the stack id is the site (its slot is [`super::ra_slot::NONE`]).
    pub const NONE: u32 = 0;
    /// The caller's return address, read at the stack id's slot.
    pub const WORD: u32 = 1;
    /// The slot was not known at the call: `ra` is the fd (or `u32::MAX` for an
    /// [`super::UnclosedFull`]) under which the call's words are in
    /// [`crate::MAP_UNCLOSED_PENDING`] (`tgid << 32 | fd`), with the same `time_ns`.
    pub const PENDING: u32 = 2;
}

/// `EMFILE` and `ENFILE`.
pub const EMFILE: i64 = 24;
pub const ENFILE: i64 = 23;

/// One fd of the live set: the call that made it, where, when, and how close-on-exec stood.
///
/// The kernel writes an entry in place (a lookup, not a hash update: an fd number is used
/// again and again): close() sets `time_ns` to 0, which marks it closed (userspace drops a
/// process's closed entries once it is gone); a new fd under the same key gets its fields,
/// then `check`, then `time_ns`. A reader may copy an entry while it is being written, so an
/// entry counts only when `check` is [`UnclosedLive::check_of`] its fields
/// ([`UnclosedLive::state`]).
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
    /// With `stack_id`, the call site: see [`ra_from`].
    pub ra: u64,
    pub ra_from: u32,
    /// [`UnclosedLive::check_of`] the other fields, written after them.
    pub check: u32,
}

/// What a copy of an [`UnclosedLive`] says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// A live fd.
    Live,
    /// Closed: the key stays for the next fd of that number.
    Closed,
    /// Copied while the kernel wrote it: read it again.
    Torn,
}

impl UnclosedLive {
    /// A mix of every field but `check`: a copy that mixes two writes fails it.
    #[inline(always)]
    pub fn check_of(&self) -> u32 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let words = [
            self.time_ns,
            (self.stack_id as u32 as u64) << 32 | u64::from(self.call),
            u64::from(self.cloexec) << 32 | u64::from(self.execs),
            self.ra,
            u64::from(self.ra_from),
        ];
        let mut h: u64 = 0;
        let mut i = 0;
        while i < words.len() {
            h = (h ^ words[i]).wrapping_mul(K);
            h ^= h >> 29;
            i += 1;
        }
        (h ^ h >> 32) as u32
    }

    /// Whether this copy is of a live fd, a closed one, or torn.
    pub fn state(&self) -> LiveState {
        if self.time_ns == 0 {
            LiveState::Closed
        } else if self.check == self.check_of() {
            LiveState::Live
        } else {
            LiveState::Torn
        }
    }
}

/// Key of [`crate::MAP_UNCLOSED_SITES`]: a stack id and the caller's return address read at
/// its slot (0 when the stack id alone is the site, or for the first call seen before the
/// slot was learned). Two call sites in one function through a libc wrapper without a
/// frame pointer share a stack id (the kernel's walk from inside the wrapper skips its
/// caller); the return address tells them apart.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UnclosedSiteKey {
    pub stack_id: u32,
    pub _pad: u32,
    pub ra: u64,
}

/// A call's stack words kept while its stack id's slot is not known
/// ([`ra_from::PENDING`]): the call's time, to match its live entry.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct UnclosedPending {
    pub time_ns: u64,
    pub site: UnclosedSite,
}

/// What the stack id does not keep, read the first time a site was seen: the user stack
/// pointer and the words above it (a libc wrapper without frame pointers keeps its
/// caller's return address there; `fdaudit::engine::unwind`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct UnclosedSite {
    pub pid: u32,
    /// Words copied into `sp_words` (0 when the read failed).
    pub nsp_words: u32,
    pub sp: u64,
    pub sp_words: [u64; ORIGIN_SP_WORDS],
    /// The image the call was made in: its executable's text, mm->start_code..end_code
    /// (as [`crate::OriginRecord::start_code`]), so that the site is never resolved in the
    /// maps of an image the process exec'd since.
    pub start_code: u64,
    pub end_code: u64,
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
    /// As [`UnclosedLive::ra`] and [`UnclosedLive::ra_from`].
    pub ra: u64,
    pub ra_from: u32,
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<UnclosedLive>() == 40);
const _: () = assert!(core::mem::size_of::<UnclosedSiteKey>() == 16);
const _: () = assert!(core::mem::size_of::<UnclosedPending>() == 24 + 8 * ORIGIN_SP_WORDS + 16);
const _: () = assert!(core::mem::size_of::<UnclosedSite>() == 16 + 8 * ORIGIN_SP_WORDS + 16);
const _: () = assert!(core::mem::size_of::<UnclosedFull>() == 48);
