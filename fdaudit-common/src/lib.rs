//! Types shared by the eBPF programs (`fdaudit-ebpf`) and the userspace loader (`fdaudit`).
//!
//! Every type is `#[repr(C)]`, `Copy`, made of fixed-width integers, with its padding written
//! out, so both sides agree on the layout byte for byte. Layout is checked by `const` asserts.
#![no_std]

/// Ring buffer carrying [`PathsRecord`], [`SpawnRecord`] and [`ExitRecord`] to userspace.
pub const MAP_EVENTS: &str = "EVENTS";
/// tgid -> [`TaskState`] for every process of the traced tree.
pub const MAP_TRACKED: &str = "TRACKED";
/// Scratch space (one [`SpawnScratch`] per CPU) the exec program fills before output.
pub const MAP_SCRATCH: &str = "SCRATCH";
/// Per-CPU array of [`Stats`] (one entry, index 0); userspace sums the CPUs.
pub const MAP_STATS: &str = "STATS";
/// [`ReadKey`] -> [`ReadStat`]: per-(process, open file) read counters (`trace --reads`).
pub const MAP_READS: &str = "READS";
/// Array of [`HotSlot`] indexed by `tgid & Config::hot_mask`: the close() fast path.
pub const MAP_HOT: &str = "HOT";
/// tgid -> [`ExecFailure`]: the last failed exec of a traced process (path and errno),
/// written by the optional `exec_exit` programs (syscall tracepoints).
pub const MAP_EXEC_FAILS: &str = "EXEC_FAILS";
/// tgid -> user pointer to the path of the exec in progress (set at sys_enter in a window).
pub const MAP_EXEC_PENDING: &str = "EXEC_PENDING";
/// Per-CPU scratch [`ExecFailure`] the fexit programs fill before the insert (the eBPF stack
/// is too small for it).
pub const MAP_EXEC_SCRATCH: &str = "EXEC_SCRATCH";
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
/// Slots of the HOT array (a power of two; pids up to this never collide).
pub const HOT_SLOTS: u32 = 1 << 16;
/// Capacity of the READS map.
pub const MAX_READS: u32 = 16384;
/// Upper bound on fd-table words (64 fds each) the exec program walks: 2^20 fds.
pub const MAX_FD_WORDS: u32 = 1 << 14;

/// Name of the program array holding the bounded exec walk's tail-call stages.
pub const MAP_EXEC_CHAIN: &str = "EXEC_CHAIN";
/// Slots of [`MAP_EXEC_CHAIN`].
pub const EXEC_CHAIN_LEN: u32 = 2;
/// fds the bounded exec walk looks at: chunks of [`BOUNDED_CHUNK_FDS`] chained by tail calls
/// (the kernel allows 32 in a row).
pub const BOUNDED_MAX_FDS: u32 = BOUNDED_CHUNK_FDS * 24;
/// fds one stage of the bounded walk looks at (one bounded loop).
pub const BOUNDED_CHUNK_FDS: u32 = 128;

/// Syscall numbers the programs look at, for the architecture being built: the host's for
/// userspace, `bpf_target_arch` for the eBPF object (set by `xtask::build_ebpf`).
/// Syscalls an architecture lacks (aarch64 has no open, poll or dup2) are [`sysno::NONE`].
pub mod sysno {
    /// A number no syscall has.
    pub const NONE: i64 = i64::MIN;

    /// x86_64 (arch/x86/entry/syscalls/syscall_64.tbl).
    pub mod x86_64 {
        pub const READ: i64 = 0;
        pub const OPEN: i64 = 2;
        pub const CLOSE: i64 = 3;
        pub const POLL: i64 = 7;
        pub const PREAD64: i64 = 17;
        pub const READV: i64 = 19;
        pub const DUP2: i64 = 33;
        pub const EXECVE: i64 = 59;
        pub const FCNTL: i64 = 72;
        pub const GETDENTS64: i64 = 217;
        pub const OPENAT: i64 = 257;
        pub const PPOLL: i64 = 271;
        pub const DUP3: i64 = 292;
        pub const EXECVEAT: i64 = 322;
        pub const CLOSE_RANGE: i64 = 436;
        pub const OPENAT2: i64 = 437;
    }

    /// aarch64 (the generic table, include/uapi/asm-generic/unistd.h).
    pub mod aarch64 {
        use super::NONE;
        pub const READ: i64 = 63;
        pub const OPEN: i64 = NONE;
        pub const CLOSE: i64 = 57;
        pub const POLL: i64 = NONE;
        pub const PREAD64: i64 = 67;
        pub const READV: i64 = 65;
        pub const DUP2: i64 = NONE;
        pub const EXECVE: i64 = 221;
        pub const FCNTL: i64 = 25;
        pub const GETDENTS64: i64 = 61;
        pub const OPENAT: i64 = 56;
        pub const PPOLL: i64 = 73;
        pub const DUP3: i64 = 24;
        pub const EXECVEAT: i64 = 281;
        pub const CLOSE_RANGE: i64 = 436;
        pub const OPENAT2: i64 = 437;
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
    pub const READ: i64 = 3;
    pub const CLOSE: i64 = 6;
    pub const EXECVE: i64 = 11;
    pub const FCNTL: i64 = 55;
    pub const DUP2: i64 = 63;
    pub const READV: i64 = 145;
    pub const POLL: i64 = 168;
    pub const PREAD64: i64 = 180;
    pub const GETDENTS64: i64 = 220;
    pub const FCNTL64: i64 = 221;
    pub const PPOLL: i64 = 309;
    pub const DUP3: i64 = 330;
    pub const EXECVEAT: i64 = 358;
    pub const PPOLL_TIME64: i64 = 414;
    pub const CLOSE_RANGE: i64 = 436;

    /// The x86_64 number of the same call, or -1 for a call the programs do not count.
    /// (Compat syscalls exist only on x86_64 here: the programs call this only there.)
    pub const fn to_native(id: i64) -> i64 {
        use super::sysno::x86_64 as n;
        match id {
            READ => n::READ,
            CLOSE => n::CLOSE,
            EXECVE => n::EXECVE,
            FCNTL | FCNTL64 => n::FCNTL,
            DUP2 => n::DUP2,
            READV => n::READV,
            POLL => n::POLL,
            PREAD64 => n::PREAD64,
            GETDENTS64 => n::GETDENTS64,
            PPOLL | PPOLL_TIME64 => n::PPOLL,
            DUP3 => n::DUP3,
            EXECVEAT => n::EXECVEAT,
            CLOSE_RANGE => n::CLOSE_RANGE,
            _ => -1,
        }
    }

    /// `TS_COMPAT` in `thread_info.status` (arch/x86/include/asm/thread_info.h): the task
    /// is in a compat syscall (what the kernel's in_ia32_syscall() tests).
    pub const TS_COMPAT: u32 = 0x0002;
}

/// Partial-data markers carried in [`RecordHeader::flags`].
pub mod flags {
    /// More fds leaked than [`super::MAX_FDS`]; the list is cut, `nfds` holds the true count.
    pub const FDS_TRUNCATED: u32 = 1 << 0;
    /// A kernel read failed while building the record; some fields may be zero.
    pub const READ_FAILED: u32 = 1 << 1;
    /// The argument vector was longer than [`super::ARGV_LEN`].
    pub const ARGV_TRUNCATED: u32 = 1 << 2;
    /// More close_range() calls than [`super::MAX_RANGES`]; only the first are kept.
    pub const RANGES_TRUNCATED: u32 = 1 << 3;
    /// The fork was not seen (the process existed before tracing began): no window time.
    pub const NO_FORK: u32 = 1 << 4;
    /// The fd-table walk stopped at its bound before the end of the table.
    pub const FDTABLE_TRUNCATED: u32 = 1 << 5;
    /// Syscall tracepoints were not attached (`--leaks-only`): counters are absent.
    pub const NO_SYSCALLS: u32 = 1 << 6;
    /// A leaked file's path was deeper than [`super::MAX_DEPTH`] or a component longer than
    /// [`super::COMP_LEN`]; or more files leaked than [`super::MAX_PATHS`] have paths; or a
    /// name (the exec'd file, a leaked file's) was longer than its buffer.
    pub const PATH_PARTIAL: u32 = 1 << 7;
    /// The window started at this process's previous exec, not at a fork: an exec chain
    /// (a spawn helper such as Java's jspawnhelper, a shell's `exec`, `env CMD`).
    pub const REEXEC: u32 = 1 << 8;
    /// Reduced data: the kernel lacks bpf_loop (before 5.17), so the exec program walked
    /// the fd table in its bounded form, and the table was larger than that form looks at
    /// ([`super::BOUNDED_MAX_FDS`] fds): leaked fds above it are missing. Set together with
    /// FDTABLE_TRUNCATED; a newer kernel has no such bound.
    pub const BOUNDED_WALK: u32 = 1 << 9;
    /// The window made compat (ia32, `int $0x80`) syscalls; they are counted by their
    /// meaning, mapped through [`super::sysno_ia32::to_native`].
    pub const COMPAT_SYSCALLS: u32 = 1 << 10;
}

/// Markers on one fd, in [`FdInfo::fd_flags`].
pub mod fd_flags {
    /// The file has no name left (inode->i_nlink == 0): deleted while open.
    pub const DELETED: u32 = 1 << 0;
    /// The dentry name was longer than [`super::NAME_LEN`] - 1 bytes and is cut.
    pub const NAME_CUT: u32 = 1 << 1;
}

/// Record kinds on the ring buffer.
#[repr(u32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A traced process completed an exec: [`SpawnRecord`].
    Spawn = 1,
    /// A traced process exited (its whole thread group): [`ExitRecord`].
    Exit = 2,
    /// Paths of a spawn's leaked files: [`PathsRecord`], sent just before its spawn.
    Paths = 3,
}

impl RecordKind {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Spawn),
            2 => Some(Self::Exit),
            3 => Some(Self::Paths),
            _ => None,
        }
    }
}

/// First field of every record.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// A [`RecordKind`] value.
    pub kind: u32,
    /// [`flags`] bits.
    pub flags: u32,
}

/// One close_range(first, last, flags) call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CloseRange {
    pub first: u32,
    pub last: u32,
    pub flags: u32,
    pub _pad: u32,
}

/// What a child did between fork and exec, counted in the kernel.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub close_calls: u32,
    pub close_ebadf: u32,
    pub close_range_calls: u32,
    pub fcntl_setfd_calls: u32,
    pub fcntl_getfd_calls: u32,
    pub poll_calls: u32,
    pub poll_nfds_max: u32,
    pub getdents64_calls: u32,
    pub procfd_opens: u32,
    pub exec_attempts: u32,
    /// Other fd-creating or fd-probing calls seen (dup2/dup3 onto high fds), informational.
    pub dup_calls: u32,
    pub _pad: u32,
    pub ranges: [CloseRange; MAX_RANGES],
}

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
/// wanted too (that one is counted through [`MAP_TRACKED`] instead).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HotSlot {
    pub tgid: u32,
    pub overflow: u32,
    pub close_calls: u32,
    pub close_ebadf: u32,
    pub cache: FdCache,
}

/// Per-process state kept in [`MAP_TRACKED`], keyed by tgid.
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
}

/// Kind of file, as the kernel program sees it; userspace refines anon inodes by name.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FdInfo {
    pub fd: u32,
    /// inode->i_mode (S_IFMT bits and permissions).
    pub mode: u32,
    /// file->f_flags (O_ACCMODE, O_APPEND, ...).
    pub f_flags: u32,
    /// Socket family (AF_*) when the file is a socket, else 0.
    pub family: u16,
    /// Socket type (SOCK_STREAM, ...) when the file is a socket, else 0.
    pub sock_type: u16,
    pub ino: u64,
    /// inode->i_sb->s_magic: tells pipefs, sockfs, anon_inodefs, tmpfs, procfs apart.
    pub magic: u64,
    /// inode->i_sb->s_dev (kernel dev_t encoding).
    pub dev: u32,
    /// inode->i_rdev for device files (kernel dev_t encoding).
    pub rdev: u32,
    /// [`fd_flags`] bits.
    pub fd_flags: u32,
    pub _pad: u32,
    /// NUL-terminated dentry name ("[eventfd]", "memfd:x", a file's basename).
    pub name: [u8; NAME_LEN],
}

impl Default for FdInfo {
    fn default() -> Self {
        Self {
            fd: 0,
            mode: 0,
            f_flags: 0,
            family: 0,
            sock_type: 0,
            ino: 0,
            magic: 0,
            dev: 0,
            rdev: 0,
            fd_flags: 0,
            _pad: 0,
            name: [0; NAME_LEN],
        }
    }
}

/// Sent once per successful exec of a traced process. Variable length: only the first
/// `min(nfds, MAX_FDS)` entries of `fds` (the last field) are sent.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct SpawnRecord {
    pub header: RecordHeader,
    /// The process id after exec (the tgid).
    pub pid: u32,
    /// The thread id that called exec (differs from `pid` when a non-main thread exec'd).
    pub old_pid: u32,
    pub parent_pid: u32,
    /// Number of leaked fds (>= 3) found; may exceed [`MAX_FDS`].
    pub nfds: u32,
    pub fork_ns: u64,
    pub exec_ns: u64,
    pub parent_comm: [u8; 16],
    /// The new image's comm.
    pub comm: [u8; 16],
    pub counters: Counters,
    /// Exec'd file name (bprm->filename), NUL terminated.
    pub filename: [u8; PATH_LEN],
    /// Argument vector, NUL separated; `argv_len` bytes valid.
    pub argv: [u8; ARGV_LEN],
    pub argv_len: u32,
    /// Number of fds 0..=2 open after exec (stdio), as a bitmask.
    pub stdio_mask: u32,
    /// Stdio fds 0, 1, 2 (valid when the bit in `stdio_mask` is set).
    pub stdio: [FdInfo; 3],
    /// Paths sent in the [`PathsRecord`] before this record (0 when none, or when it was lost:
    /// then the `PATH_PARTIAL` flag is set).
    pub npaths: u32,
    pub _pad2: u32,
    /// The process's cgroup on the unified (v2) hierarchy at exec: its kernfs id, the inode
    /// number of the cgroup's directory (bpf_get_current_cgroup_id, since 4.18).
    pub cgroup_id: u64,
    /// Leaked fds; last, so that a record is sent only up to the last one found.
    pub fds: [FdInfo; MAX_FDS],
}

impl SpawnRecord {
    /// Bytes of a record carrying `nfds` leaked fds (at most [`MAX_FDS`]).
    pub const fn sent_len(nfds: usize) -> usize {
        let n = if nfds > MAX_FDS { MAX_FDS } else { nfds };
        core::mem::offset_of!(SpawnRecord, fds) + n * core::mem::size_of::<FdInfo>()
    }
}

/// Full paths of a spawn's first [`MAX_PATHS`] leaked files, sent just before its
/// [`SpawnRecord`] (same `pid` and `exec_ns`). Variable length: `npaths` entries are sent.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct PathsRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub npaths: u32,
    pub exec_ns: u64,
    /// Index into [`SpawnRecord::fds`] in `FdPath::index`.
    pub paths: [FdPath; MAX_PATHS],
}

impl PathsRecord {
    /// Bytes of a record carrying `npaths` paths (at most [`MAX_PATHS`]).
    pub const fn sent_len(npaths: usize) -> usize {
        let n = if npaths > MAX_PATHS {
            MAX_PATHS
        } else {
            npaths
        };
        core::mem::offset_of!(PathsRecord, paths) + n * core::mem::size_of::<FdPath>()
    }
}

/// What the exec program fills per CPU before sending the two records.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct SpawnScratch {
    pub spawn: SpawnRecord,
    pub paths: PathsRecord,
}

/// The most bytes one exec puts on the ring buffer (both records, with the ring's 8-byte
/// header each): what the ring is sized by.
pub const MAX_SPAWN_BYTES: usize =
    SpawnRecord::sent_len(MAX_FDS) + PathsRecord::sent_len(MAX_PATHS) + 2 * 8;

/// A leaked fd's path as components from the file up (leaf first), built in the kernel by
/// walking dentry->d_parent and crossing mounts, so it survives the process exiting.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct FdPath {
    /// Index of the fd in [`SpawnRecord::fds`].
    pub index: u32,
    /// Components filled in `comps`.
    pub depth: u32,
    /// 1 when the walk reached the root; 0 when it was cut (deep path or read failure).
    pub complete: u32,
    pub _pad: u32,
    pub comps: [[u8; COMP_LEN]; MAX_DEPTH],
}

/// Sent when a traced process's thread group dies.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct ExitRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub parent_pid: u32,
    pub fork_ns: u64,
    pub exit_ns: u64,
    /// 1 when the process exited without ever exec'ing (a fork-only child).
    pub never_execd: u32,
    pub exit_code: u32,
    pub comm: [u8; 16],
    pub counters: Counters,
}

/// Counters the programs keep about themselves.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records that did not fit in the ring buffer.
    pub lost_records: u64,
    /// Forks not tracked because [`MAP_TRACKED`] was full.
    pub tracked_full: u64,
    /// Read counters not kept because [`MAP_READS`] was full.
    pub reads_full: u64,
    pub _reserved: u64,
}

/// Bytes of the path of a failed exec kept in [`ExecFailure`] (longer ones are cut).
pub const EXEC_PATH_LEN: usize = 256;
/// Entries of [`MAP_EXEC_FAILS`] (an LRU map: stale entries age out).
pub const MAX_EXEC_FAILS: u32 = 4096;

/// Value of [`MAP_EXEC_FAILS`]: a traced process's last exec that returned an error.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExecFailure {
    /// The exec syscall's return value, negated (2 for ENOENT).
    pub errno: i32,
    pub _pad: u32,
    /// The path given to execve/execveat, NUL-terminated (cut at [`EXEC_PATH_LEN`]).
    pub path: [u8; EXEC_PATH_LEN],
}

/// Key of [`MAP_READS`]: a process and the open file it read: the `struct file` address (so
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

/// Value of [`MAP_READS`].
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

/// Kernel struct offsets (bytes) read from /sys/kernel/btf/vmlinux at load time, plus run
/// options. Passed to the programs as the global [`GLOBAL_CONFIG`].
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_files: u32,
    pub task_mm: u32,
    pub task_comm: u32,
    pub task_signal: u32,
    pub task_exit_code: u32,
    pub signal_live: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    pub fdt_open_fds: u32,
    pub file_inode: u32,
    pub file_flags: u32,
    pub file_dentry: u32,
    pub file_private: u32,
    pub dentry_name: u32,
    pub inode_mode: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub inode_rdev: u32,
    pub sb_magic: u32,
    pub sb_dev: u32,
    pub socket_sk: u32,
    pub socket_type: u32,
    pub sk_family: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    pub bprm_filename: u32,
    /// pt_regs offsets of the first three syscall arguments at syscall entry (x86_64: di,
    /// si, dx; aarch64: regs[0..3]).
    pub regs_arg0: u32,
    pub regs_arg1: u32,
    pub regs_arg2: u32,
    /// pt_regs offset of the syscall number (x86_64: orig_ax, 8 bytes; aarch64: syscallno,
    /// 4 bytes).
    pub regs_nr: u32,
    /// pt_regs offset of the first argument at syscall exit, where aarch64 has overwritten
    /// x0 with the return value (x86_64: di; aarch64: orig_x0).
    pub regs_exit_arg0: u32,
    /// `HOT` array size - 1.
    pub hot_mask: u32,
    pub file_mnt: u32,
    pub file_pos: u32,
    pub dentry_parent: u32,
    pub vfsmount_root: u32,
    pub mount_mnt: u32,
    pub mount_parent: u32,
    pub mount_mountpoint: u32,
    /// Non-zero: count reads per fd (`trace --reads`).
    pub reads: u32,
    /// `thread_info.status` in task_struct ([`NO_OFFSET`] where the kernel has no compat
    /// syscalls to tell apart).
    pub task_ti_status: u32,
    /// pt_regs bx and cx: a compat syscall's first two arguments ([`NO_OFFSET`] off x86).
    pub regs_bx: u32,
    pub regs_cx: u32,
    /// inode->__i_nlink: 0 for a deleted file.
    pub inode_nlink: u32,
    /// [`CONFIG_MAGIC`] once userspace filled the config; the programs count nothing while
    /// it is anything else (zero: the loader did not set the global).
    pub magic: u32,
    /// `trace --cgroup`: depth of the followed cgroup below the cgroup2 root (root = 0).
    pub cgroup_level: u32,
    /// Non-zero: the kernel has bpf_get_current_task_btf (5.11+). Zero: the programs do
    /// not call it (the compat check and `--reads`' fd lookup take probe-reads instead).
    /// Also keeps `cgroup_id` 8-aligned.
    pub task_btf: u32,
    /// `trace --cgroup`: id of the followed cgroup, 0 to follow only the tracked trees. A
    /// process whose ancestor at `cgroup_level` is this cgroup is traced at its fork or exec.
    pub cgroup_id: u64,
}

/// A [`Config`] offset the running kernel does not have: the programs skip what needs it.
pub const NO_OFFSET: u32 = u32::MAX;

/// Value userspace puts in [`Config::magic`].
pub const CONFIG_MAGIC: u32 = 0xfda0_0001;

impl Config {
    /// All offsets zero and no magic: the eBPF side's initial value of the global, which
    /// the loader overrides.
    pub const ZEROED: Config = Config {
        task_pid: 0,
        task_tgid: 0,
        task_files: 0,
        task_mm: 0,
        task_comm: 0,
        task_signal: 0,
        task_exit_code: 0,
        signal_live: 0,
        files_fdt: 0,
        fdt_max_fds: 0,
        fdt_fd: 0,
        fdt_open_fds: 0,
        file_inode: 0,
        file_flags: 0,
        file_dentry: 0,
        file_private: 0,
        dentry_name: 0,
        inode_mode: 0,
        inode_ino: 0,
        inode_sb: 0,
        inode_rdev: 0,
        sb_magic: 0,
        sb_dev: 0,
        socket_sk: 0,
        socket_type: 0,
        sk_family: 0,
        mm_arg_start: 0,
        mm_arg_end: 0,
        bprm_filename: 0,
        regs_arg0: 0,
        regs_arg1: 0,
        regs_arg2: 0,
        regs_nr: 0,
        regs_exit_arg0: 0,
        hot_mask: 0,
        file_mnt: 0,
        file_pos: 0,
        dentry_parent: 0,
        vfsmount_root: 0,
        mount_mnt: 0,
        mount_parent: 0,
        mount_mountpoint: 0,
        reads: 0,
        task_ti_status: 0,
        regs_bx: 0,
        regs_cx: 0,
        inode_nlink: 0,
        magic: 0,
        cgroup_level: 0,
        task_btf: 0,
        cgroup_id: 0,
    };
}

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
    unsafe impl aya::Pod for super::Stats {}
    unsafe impl aya::Pod for super::ReadKey {}
    unsafe impl aya::Pod for super::ReadStat {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::HotSlot {}
    unsafe impl aya::Pod for super::FdCache {}
    unsafe impl aya::Pod for super::ExecFailure {}
}

// Layout guards: no implicit padding anywhere.
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<RecordHeader>() == 8);
    assert!(size_of::<CloseRange>() == 16);
    assert!(size_of::<Counters>() == 12 * 4 + 16 * MAX_RANGES);
    assert!(size_of::<TaskState>() == 8 + 16 + 16 + size_of::<Counters>() + 32);
    assert!(size_of::<FdInfo>() == 16 + 8 + 8 + 8 + 8 + NAME_LEN);
    assert!(size_of::<SpawnRecord>().is_multiple_of(8));
    assert!(core::mem::offset_of!(SpawnRecord, fds).is_multiple_of(8));
    assert!(SpawnRecord::sent_len(MAX_FDS + 5) == size_of::<SpawnRecord>());
    assert!(size_of::<PathsRecord>() == 24 + MAX_PATHS * size_of::<FdPath>());
    assert!(PathsRecord::sent_len(MAX_PATHS) == size_of::<PathsRecord>());
    assert!(size_of::<SpawnScratch>() == size_of::<SpawnRecord>() + size_of::<PathsRecord>());
    assert!(size_of::<ExitRecord>() == 8 + 8 + 16 + 8 + 16 + size_of::<Counters>());
    assert!(size_of::<Config>() == 50 * 4 + 8);
    assert!(size_of::<FdPath>() == 16 + COMP_LEN * MAX_DEPTH);
    assert!(size_of::<FdCache>() == 32);
    assert!(size_of::<HotSlot>() == 48);
    assert!(size_of::<ExecFailure>() == 8 + EXEC_PATH_LEN);
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
