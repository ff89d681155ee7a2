//! Types shared by the eBPF programs (`fdaudit-ebpf`) and the userspace loader (`fdaudit`).
//!
//! Every type is `#[repr(C)]`, `Copy`, made of fixed-width integers, with its padding written
//! out, so both sides agree on the layout byte for byte. Layout is checked by `const` asserts.
#![no_std]

/// The first ring buffer carrying [`PathsRecord`], [`SpawnRecord`], [`ExitRecord`] and
/// [`OriginRecord`] to userspace.
pub const MAP_EVENTS: &str = "EVENTS";
/// One-slot array of maps: once userspace puts a bigger ring buffer in slot 0, every record
/// goes there instead of [`MAP_EVENTS`].
pub const MAP_EVENTS_GROWN: &str = "EVENTS_GROWN";
/// Size of the template ring the object declares as [`MAP_EVENTS_GROWN`]'s inner map
/// (created and dropped at load; the kernel does not compare inner ring sizes): a power of
/// two that is a whole number of pages on 4, 16 and 64 KiB-page kernels.
pub const RING_TEMPLATE_BYTES: u32 = 64 << 10;
/// tgid -> [`TaskState`] for every process of the traced tree.
pub const MAP_TRACKED: &str = "TRACKED";
/// Scratch space (one [`SpawnScratch`] per CPU) the exec program fills before output.
pub const MAP_SCRATCH: &str = "SCRATCH";
/// Per-CPU array of [`Stats`] (one entry, index 0); userspace sums the CPUs.
pub const MAP_STATS: &str = "STATS";
/// [`ReadKey`] -> [`ReadStat`]: per-(process, open file) read counters (`trace --reads`).
pub const MAP_READS: &str = "READS";
/// [`ReadKey`] -> [`FdPath`]: the path of a file read a byte at a time, walked in the kernel
/// when its read counter became a storm ([`STORM_MIN_SMALL_READS`]), while it was open.
pub const MAP_READ_PATHS: &str = "READ_PATHS";
/// Array of [`HotSlot`] indexed by `tgid & Config::hot_mask`: the close() fast path.
pub const MAP_HOT: &str = "HOT";
/// tgid -> [`FailedExec`]: the last failed exec of a traced process (path and errno),
/// written by the optional `failed_exec` programs (syscall tracepoints).
pub const MAP_FAILED_EXECS: &str = "FAILED_EXECS";
/// tgid -> user pointer to the path of the exec in progress (set at sys_enter in a window).
pub const MAP_EXEC_PENDING: &str = "EXEC_PENDING";
/// Per-CPU scratch [`FailedExec`] the fexit programs fill before the insert (the eBPF stack
/// is too small for it).
pub const MAP_EXEC_SCRATCH: &str = "EXEC_SCRATCH";
/// Array of [`OriginGateSlot`] indexed by [`gate_slot`] of the thread: the thread with
/// a `trace --origin` or `unclosed` call between its sys_enter and exit, and the call, so
/// that sys_exit leaves after one array load for every other thread.
pub const MAP_ORIGIN_GATE: &str = "ORIGIN_GATE";
/// tgid -> 1 once the process sent an origin record: its first one wakes fdaudit's reader at
/// once, so that its memory map is read while it lives (an LRU map: stale entries age out).
pub const MAP_ORIGIN_SEEN: &str = "ORIGIN_SEEN";
/// (tgid << 32 | fd) -> [`OriginMade`]: the call that made the fd with close-on-exec, kept
/// (no ring record) to name it when a later call makes the fd inheritable.
pub const MAP_ORIGIN_MADE: &str = "ORIGIN_MADE";
/// A per-CPU [`OriginMade`] being filled (too large for the BPF stack).
pub const MAP_ORIGIN_MADE_SCRATCH: &str = "ORIGIN_MADE_SCRATCH";
/// `trace --origin`'s tail call to `origin_modules` (slot 0), the program that sends a
/// process's modules with its first origin record ([`OriginModulesRecord`]).
pub const MAP_ORIGIN_CHAIN: &str = "ORIGIN_CHAIN";
/// [`MAP_ORIGIN_CHAIN`]'s slots: `origin_modules`, then `origin_stack_copy`.
pub const ORIGIN_CHAIN_MODULES: u32 = 0;
pub const ORIGIN_CHAIN_STACK_COPY: u32 = 1;
pub const ORIGIN_CHAIN_LEN: u32 = 2;
/// `trace --origin`: the call sites whose stack was copied ([`StackSiteKey`], LRU).
pub const MAP_STACK_SITES: &str = "STACK_SITES";
/// (tgid << 32 | fd) -> [`UnclosedLive`]: the live set of `fdaudit unclosed`.
pub const MAP_UNCLOSED_LIVE: &str = "UNCLOSED_LIVE";
/// Stack id -> user stack (BPF_MAP_TYPE_STACK_TRACE): the creating call sites.
pub const MAP_UNCLOSED_STACKS: &str = "UNCLOSED_STACKS";
/// [`UnclosedSiteKey`] -> [`UnclosedSite`]: the words at the user sp when the site was
/// first seen.
pub const MAP_UNCLOSED_SITES: &str = "UNCLOSED_SITES";
/// Stack id -> where its caller's return address is ([`unclosed::ra_slot`]).
pub const MAP_UNCLOSED_RA_SLOTS: &str = "UNCLOSED_RA_SLOTS";
/// `tgid & (UNCLOSED_OWNER_SLOTS - 1)` -> the tgid that last put an fd into the live set there:
/// a close() by that process goes straight to the live set, another's looks in TRACKED first.
pub const MAP_UNCLOSED_OWNERS: &str = "UNCLOSED_OWNERS";
/// (tgid << 32 | fd) -> [`UnclosedPending`]: a call's words kept before its slot was known.
pub const MAP_UNCLOSED_PENDING: &str = "UNCLOSED_PENDING";
/// A per-CPU [`UnclosedPending`] being filled (too large for the BPF stack).
pub const MAP_UNCLOSED_SITE_SCRATCH: &str = "UNCLOSED_SITE_SCRATCH";
/// tgid -> [`UnclosedFull`]: a process's fd-making calls that failed with EMFILE/ENFILE.
pub const MAP_UNCLOSED_FULL: &str = "UNCLOSED_FULL";
/// Name of the global holding the [`Config`].
pub const GLOBAL_CONFIG: &str = "CONFIG";

/// Superblock magics (include/uapi/linux/magic.h) that tell pseudo filesystems apart: the
/// kernel programs and userspace's file-kind classification both use them.
pub mod fs_magic {
    pub const PROC_SUPER: u64 = 0x9fa0;
    pub const PIPEFS: u64 = 0x5049_5045;
    pub const SOCKFS: u64 = 0x534f_434b;
    pub const ANON_INODE_FS: u64 = 0x0904_1934;
    pub const PIDFS: u64 = 0x5049_4446;
    pub const TMPFS: u64 = 0x0102_1994;
    pub const HUGETLBFS: u64 = 0x9584_58f6;
    pub const BPF_FS: u64 = 0xcafe_4a11;
}

/// Leaked fds carried in one spawn record; more are counted and flagged as truncated.
pub const MAX_FDS: usize = 64;
/// close_range() calls whose arguments are kept per window.
pub const MAX_RANGES: usize = 4;
/// Bytes of the exec'd file name kept.
pub const PATH_LEN: usize = 256;
/// Bytes of the argument vector (NUL separated) kept.
pub const ARGV_LEN: usize = 256;
/// Bytes of a leaked fd's dentry name kept.
pub const NAME_LEN: usize = 64;
/// Leaked fds whose full path the kernel program builds (the first ones found).
pub const MAX_PATHS: usize = 8;
/// Path components kept per path (deeper paths are cut at the top and flagged).
pub const MAX_DEPTH: usize = 16;
/// Bytes kept per path component.
pub const COMP_LEN: usize = 48;
/// Capacity of the TRACKED map.
pub const MAX_TRACKED: u32 = 32768;
/// Slots of the HOT array (a power of two). Only a process between its fork and its exec
/// holds one, so a few are taken at a time: two such processes collide only when their pids
/// are equal modulo this (then both are counted through TRACKED). 4096 slots are 192 KiB;
/// 65536 were 3 MiB, whose creation was ~0.5 ms of every start (docs/performance.md).
pub const HOT_SLOTS: u32 = 1 << 12;
/// Capacity of the READS map.
pub const MAX_READS: u32 = 16384;
/// Capacity of the READ_PATHS map (storms are rare; ~780 bytes an entry).
pub const MAX_READ_PATHS: u32 = 512;
/// A (process, open file) is a read storm when it made at least this many small reads:
/// calls that returned 1 or 2 bytes. The kernel names the file when the count reaches it.
pub const STORM_MIN_SMALL_READS: u64 = 64;
/// Upper bound on fd-table words (64 fds each) the exec program walks: 2^20 fds.
pub const MAX_FD_WORDS: u32 = 1 << 14;

/// BPF_MAP_TYPE_CGROUP_ARRAY, one slot: the followed cgroup's directory, for
/// [`cgroup_filter::UNDER`](crate::cgroup_filter::UNDER).
pub const MAP_FOLLOWED_CGROUP: &str = "FOLLOWED_CGROUP";
/// Name of the program array holding the bounded exec walk's tail-call stages.
pub const MAP_EXEC_CHAIN: &str = "EXEC_CHAIN";
/// `trace --origin`: CPython processes and where their frames are ([`PyProc`]).
pub const MAP_PY_PROCS: &str = "PY_PROCS";
/// `trace --origin`: the Python walk's programs, by slot ([`PY_CHAIN_LEN`]).
pub const MAP_PY_CHAIN: &str = "PY_CHAIN";
/// Slots of [`MAP_EXEC_CHAIN`].
pub const EXEC_CHAIN_LEN: u32 = 2;
/// fds the bounded exec walk looks at: chunks of [`BOUNDED_CHUNK_FDS`] chained by tail calls
/// (the kernel allows 32 in a row).
pub const BOUNDED_MAX_FDS: u32 = BOUNDED_CHUNK_FDS * 24;
/// fds one stage of the bounded walk looks at (one bounded loop).
pub const BOUNDED_CHUNK_FDS: u32 = 512;

/// Syscall numbers the programs look at, for the architecture being built: the host's for
/// userspace, `bpf_target_arch` for the eBPF object (set by `xtask::build_ebpf`).
/// Syscalls an architecture lacks (aarch64 has no open, poll or dup2) are [`sysno::NONE`].
pub mod sysno {
    /// A number no syscall has.
    pub const NONE: i64 = i64::MIN;

    /// x86_64 (arch/x86/entry/syscalls/syscall_64.tbl), from [`crate::counter_table!`].
    pub mod x86_64 {
        use crate::counters::sysno_consts;
        crate::counter_table!(counted [sysno x86_64], reads [sysno x86_64], others [sysno x86_64] => sysno_consts);
    }

    /// aarch64 (the generic table, include/uapi/asm-generic/unistd.h), from
    /// [`crate::counter_table!`].
    pub mod aarch64 {
        use super::NONE;
        use crate::counters::sysno_consts;
        crate::counter_table!(counted [sysno aarch64], reads [sysno aarch64], others [sysno aarch64] => sysno_consts);
    }

    #[cfg(any(
        bpf_target_arch = "aarch64",
        all(not(target_arch = "bpf"), target_arch = "aarch64")
    ))]
    pub use aarch64::*;
    #[cfg(not(any(
        bpf_target_arch = "aarch64",
        all(not(target_arch = "bpf"), target_arch = "aarch64")
    )))]
    pub use x86_64::*;
}

/// i386 syscall numbers (arch/x86/entry/syscalls/syscall_32.tbl): what a task passes in a
/// compat syscall (`int $0x80`, or a 32-bit process's sysenter), arguments in bx, cx, dx.
/// The programs map them to [`sysno`] before counting; a compat syscall is never counted
/// under the x86_64 number it happens to share (ia32 `read` is x86_64 `close`).
pub mod sysno_ia32 {
    // The calls' constants (READ, CLOSE, ...; FCNTL is fcntl, not fcntl64) and `to_native`,
    // from the table (crate::counter_table!).
    use crate::counters::sysno_ia32;
    crate::counter_table!(counted [sysno i386], reads [sysno i386] => sysno_ia32);

    /// `TS_COMPAT` in `thread_info.status` (arch/x86/include/asm/thread_info.h): the task
    /// is in a compat syscall (what the kernel's in_ia32_syscall() tests).
    pub const TS_COMPAT: u32 = 0x0002;
}

mod config;
mod counters;
pub mod credns;
mod maps;
mod origin;
mod python;
mod records;
mod stack_copy;
mod unclosed;

pub use config::{cgroup_filter, task_btf, Config, CONFIG_MAGIC, NO_OFFSET};
pub use credns::{CredNs, CredNsOffsets};
pub use maps::{
    FailedExec, FdCache, HotSlot, ReadKey, ReadStat, Stats, TaskState, EXEC_PATH_LEN,
    MAX_FAILED_EXECS,
};
pub use origin::{
    effect, gate_slot, inheritable, origin_flags, origin_sysno, pending_what, Effect, FdAt,
    OriginCall, OriginCreatedRecord, OriginGateSlot, OriginMade, OriginModule, OriginModulesRecord,
    OriginPending, OriginRecord, Place, Rule, BUILD_ID_VALID, CMSGHDR_SIZE, FD_CLOEXEC, FIOCLEX,
    FIONCLEX, F_DUPFD, F_DUPFD_CLOEXEC, F_SETFD, MAX_ORIGIN_MADE, MAX_ORIGIN_PENDING, MMSGHDR_SIZE,
    MSGHDR_CONTROL, MSGHDR_CONTROLLEN, ORIGIN_CMSGS, ORIGIN_FDS, ORIGIN_GATE_SLOTS, ORIGIN_MSGS,
    ORIGIN_SP_WORDS, ORIGIN_STACK_DEPTH, SCM_RIGHTS, SOL_SOCKET,
};
pub use python::{
    py_flags, PyFramesRecord, PyProc, MAX_PY_PROCS, PY_CHAIN_AFTER_MADE, PY_CHAIN_AFTER_ORIGIN,
    PY_CHAIN_LEN, PY_DIRECT, PY_FRAMES, PY_THREADS,
};
pub use records::{
    fd_flags, flags, CloseRange, Counters, ExitRecord, FdInfo, FdPath, PathsRecord, RecordHeader,
    RecordKind, SpawnRecord, SpawnScratch, COUNTER_NAMES, MAX_SPAWN_BYTES,
};
pub use stack_copy::{
    stack_copy_flags, StackCopyRecord, StackSiteKey, MAX_STACK_SITES, STACK_COPY_BYTES,
    STACK_COPY_CHUNK, STACK_COPY_CHUNKS,
};
pub use unclosed::{
    ra_from, ra_slot, LiveState, UnclosedFull, UnclosedLive, UnclosedPending, UnclosedSite,
    UnclosedSiteKey, EMFILE, ENFILE, MAX_RA_SLOT, MAX_UNCLOSED_FULL, MAX_UNCLOSED_LIVE,
    MAX_UNCLOSED_PENDING, MAX_UNCLOSED_SITES, MAX_UNCLOSED_STACKS, UNCLOSED_OWNER_SLOTS,
    UNCLOSED_STACK_DEPTH,
};

/// Whether two names are equal, at compile time: the eBPF crate checks with it that each
/// map's static (whose identifier `#[map]` uses as the map's name) is named as the `MAP_*`
/// constant userspace asks for.
pub const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), Copy, made of integers and arrays of integers, with
    // explicit padding, so every bit pattern is valid and there are no uninitialised bytes.
    unsafe impl aya::Pod for super::TaskState {}
    unsafe impl aya::Pod for super::CredNs {}
    unsafe impl aya::Pod for super::Stats {}
    unsafe impl aya::Pod for super::ReadKey {}
    unsafe impl aya::Pod for super::ReadStat {}
    unsafe impl aya::Pod for super::FdPath {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::HotSlot {}
    unsafe impl aya::Pod for super::PyProc {}
    unsafe impl aya::Pod for super::FdCache {}
    unsafe impl aya::Pod for super::UnclosedLive {}
    unsafe impl aya::Pod for super::UnclosedSite {}
    unsafe impl aya::Pod for super::UnclosedFull {}
    unsafe impl aya::Pod for super::UnclosedSiteKey {}
    unsafe impl aya::Pod for super::UnclosedPending {}
    unsafe impl aya::Pod for super::FailedExec {}
    unsafe impl aya::Pod for super::OriginPending {}
    unsafe impl aya::Pod for super::OriginGateSlot {}
    unsafe impl aya::Pod for super::StackSiteKey {}
}

// Layout guards: no implicit padding anywhere.
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<RecordHeader>() == 8);
    assert!(size_of::<CloseRange>() == 16);
    // The counters, padded to 8 bytes (11 and a pad: 12), then the ranges.
    let counters = COUNTER_NAMES.len() + COUNTER_NAMES.len() % 2;
    assert!(size_of::<Counters>() == counters * 4 + 16 * MAX_RANGES);
    assert!(core::mem::offset_of!(Counters, ranges) == counters * 4);
    assert!(
        size_of::<TaskState>()
            == 8 + 16 + 16 + size_of::<Counters>() + 32 + 2 * size_of::<CredNs>()
    );
    assert!(size_of::<FdInfo>() == 16 + 8 + 8 + 8 + 8 + NAME_LEN);
    assert!(size_of::<SpawnRecord>().is_multiple_of(8));
    assert!(core::mem::offset_of!(SpawnRecord, fds).is_multiple_of(8));
    assert!(SpawnRecord::sent_len(MAX_FDS + 5) == size_of::<SpawnRecord>());
    assert!(size_of::<PathsRecord>() == 24 + MAX_PATHS * size_of::<FdPath>());
    assert!(PathsRecord::sent_len(MAX_PATHS) == size_of::<PathsRecord>());
    assert!(size_of::<SpawnScratch>() == size_of::<SpawnRecord>() + size_of::<PathsRecord>());
    assert!(size_of::<ExitRecord>() == 8 + 8 + 16 + 8 + 8 + 16 + size_of::<Counters>());
    assert!(size_of::<Config>() == 54 * 4 + 8 + 32 + size_of::<CredNsOffsets>() + 8 + 8 + 8);
    assert!(size_of::<CredNsOffsets>() == 28 * 4);
    assert!(size_of::<OriginPending>() == 32);
    assert!(size_of::<OriginGateSlot>() == 16 + size_of::<OriginPending>());
    assert!(size_of::<OriginMade>() == 24 + 16 + 8 * ORIGIN_STACK_DEPTH + 8 + 8 * ORIGIN_SP_WORDS);
    assert!(
        size_of::<OriginRecord>()
            == 8 + 16
                + 8
                + 4 * ORIGIN_FDS
                + 16
                + 12 * ORIGIN_FDS
                + 16
                + 8
                + 8 * (ORIGIN_STACK_DEPTH + 3 + ORIGIN_SP_WORDS)
    );
    assert!(size_of::<OriginCreatedRecord>() == 16 + size_of::<OriginMade>());
    assert!(size_of::<OriginModule>() == 32);
    assert!(size_of::<OriginModulesRecord>() == 24 + 40 * ORIGIN_STACK_DEPTH);
    assert!(size_of::<FdPath>() == 16 + COMP_LEN * MAX_DEPTH);
    assert!(size_of::<FdCache>() == 32);
    assert!(size_of::<HotSlot>() == 48);
    assert!(size_of::<FailedExec>() == 8 + EXEC_PATH_LEN);
    assert!(size_of::<ReadKey>() == 24);
    assert!(same_name(MAP_EVENTS, "EVENTS") && !same_name(MAP_EVENTS, "EVENT"));
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_config_is_all_zero_and_not_configured() {
        assert_eq!(Config::ZEROED, Config::default());
        assert_ne!(Config::ZEROED.magic, CONFIG_MAGIC);
    }
}
