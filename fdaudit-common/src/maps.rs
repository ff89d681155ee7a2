//! Keys and values of the maps the programs keep between events: per-process state, the
//! close() fast path, the programs' own counters, failed execs and read counters.

use crate::Counters;

/// Where a process's fd table is, cached at fork so close() can tell an open fd from EBADF
/// with one or two reads instead of walking task->files->fdt every time.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FdCache {
    pub files: u64,
    pub fdt: u64,
    pub open_fds: u64,
    pub max_fds: u32,
    pub _pad: u32,
}

/// close() counters of one in-window process, in an array slot found without hashing.
/// `tgid == 0` means the slot is free; `overflow` marks a slot another in-window process
/// wanted too (that one is counted through [`MAP_TRACKED`](crate::MAP_TRACKED) instead).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HotSlot {
    pub tgid: u32,
    pub overflow: u32,
    pub close_calls: u32,
    pub close_ebadf: u32,
    pub cache: FdCache,
}

/// Per-process state kept in [`MAP_TRACKED`](crate::MAP_TRACKED), keyed by tgid.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct TaskState {
    /// bpf_ktime_get_ns() at the start of the current window: the fork, or the previous
    /// exec of an exec chain; 0 when not seen.
    pub fork_ns: u64,
    pub parent_pid: u32,
    /// 1 once the start of the window was seen (a fork or an exec); counters only grow then.
    pub in_window: u32,
    /// Successful execs seen for this process.
    pub execs: u32,
    pub flags: u32,
    pub parent_comm: [u8; 16],
    pub counters: Counters,
    pub cache: FdCache,
    /// What each exec of this process is compared with: the last exec'd image in its
    /// ancestry when it was forked (the parent's [`image`](Self::image), inherited across any
    /// number of forks), kept across its exec chain, which is one spawn judged at its last
    /// exec. A process first seen at an exec takes that exec's image; a tree's root first
    /// seen at a fork, what it had then. `read == 0`: not known yet (nothing compared).
    pub credns: crate::CredNs,
    /// What the code of this process runs as: its own image after its last exec, else the
    /// one it inherited (what it hands to the children it forks, whatever it changed since).
    pub image: crate::CredNs,
}

/// Counters the programs keep about themselves.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records that did not fit in the ring buffer.
    pub lost_records: u64,
    /// Forks not tracked because [`MAP_TRACKED`](crate::MAP_TRACKED) was full.
    pub tracked_full: u64,
    /// Read counters not kept because [`MAP_READS`](crate::MAP_READS) was full.
    pub reads_full: u64,
    /// Fds `unclosed` could not keep: its live set was full (they read `not seen`).
    pub unclosed_full: u64,
    /// Origin records sent (`--origin`): `trace -v` sets them beside those decoded, so that
    /// an origin missing from a trace is told apart: never sent, or sent and not read.
    pub origin_records: u64,
    /// `unclosed`'s call sites kept ([`crate::MAP_UNCLOSED_SITES`]): userspace looks for
    /// new ones when it changes.
    pub unclosed_sites: u64,
    /// Threads of followed processes that took an fd table of their own (unshare with
    /// CLONE_FILES, or a thread cloned without it): `unclosed`'s live set has one table per
    /// process, so the fds of another table are not counted (counted only in `unclosed`).
    pub unclosed_split_tables: u64,
    /// Calls of the fd-making table (fds made, close-on-exec set) by followed processes that
    /// `unclosed` does not follow: i386 calls (`int $0x80`, a 32-bit process).
    pub unclosed_unseen_calls: u64,
    /// io_uring requests of followed processes that can make fds (`unclosed_io_uring`:
    /// openat, openat2, accept, socket, pipe, recvmsg, a fixed file installed as an fd),
    /// which no syscall hook sees; or, on a kernel without that hook, io_uring_setup calls.
    pub unclosed_io_uring: u64,
}

/// Bytes of the path of a failed exec kept in [`FailedExec`] (longer ones are cut).
pub const EXEC_PATH_LEN: usize = 256;
/// Entries of [`MAP_FAILED_EXECS`](crate::MAP_FAILED_EXECS) (an LRU map: stale entries age out).
pub const MAX_FAILED_EXECS: u32 = 4096;

/// Value of [`MAP_FAILED_EXECS`](crate::MAP_FAILED_EXECS): a traced process's last exec that returned an error.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FailedExec {
    /// The exec syscall's return value, negated (2 for ENOENT).
    pub errno: i32,
    /// 1 when the path was longer than [`EXEC_PATH_LEN`] - 1 bytes and `path` holds its start.
    pub path_cut: u32,
    /// The path given to execve/execveat, NUL-terminated (cut at [`EXEC_PATH_LEN`]).
    pub path: [u8; EXEC_PATH_LEN],
}

/// Key of [`MAP_READS`](crate::MAP_READS): a process and the open file it read: the `struct file` address (so
/// that a reused fd number does not merge two files, and dup'd fds count as one file) and
/// its inode number (a closed file's address is soon reused for the next open).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReadKey {
    pub pid: u32,
    pub _pad: u32,
    pub file: u64,
    pub ino: u64,
}

/// Value of [`MAP_READS`](crate::MAP_READS).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStat {
    pub calls: u64,
    pub bytes: u64,
    /// Calls that returned 1 or 2 bytes.
    pub tiny_calls: u64,
    /// inode number of the file read, to name it after the process is gone.
    pub ino: u64,
    /// Superblock magic of the file read (pipefs, sockfs, ...).
    pub magic: u64,
    /// inode->i_mode of the file read.
    pub mode: u32,
    /// The fd the file was first read through.
    pub fd: u32,
    /// comm of the reader when the entry was created.
    pub comm: [u8; 16],
}
