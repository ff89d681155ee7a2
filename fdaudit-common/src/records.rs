//! What the programs send on the ring buffer ([`crate::MAP_EVENTS`]): a header, then the
//! spawn, paths and exit records, with their partial-data and fd flags.

use crate::counters::counters_struct;
use crate::{ARGV_LEN, COMP_LEN, MAX_DEPTH, MAX_FDS, MAX_PATHS, MAX_RANGES, NAME_LEN, PATH_LEN};

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
    /// ([`crate::BOUNDED_MAX_FDS`] fds): leaked fds above it are missing. Set together with
    /// FDTABLE_TRUNCATED; a newer kernel has no such bound.
    pub const BOUNDED_WALK: u32 = 1 << 9;
    /// The window made compat (ia32, `int $0x80`) syscalls; they are counted by their
    /// meaning, mapped through [`crate::sysno_ia32::to_native`].
    pub const COMPAT_SYSCALLS: u32 = 1 << 10;
    /// On an exit record: the process exec'd, but the kernel skipped the exec program (a
    /// run of it was preempted on that CPU and its hook fired again: recursion protection),
    /// so no spawn record was sent. Userspace reports the spawn from the exit, without the
    /// image's path, argv or leaked fds.
    pub const EXEC_MISSED: u32 = 1 << 11;
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
    /// `trace --origin`: a call made an inheritable fd: [`crate::OriginRecord`].
    Origin = 4,
    /// `trace --origin`: the close-on-exec call that made the fd of the origin record sent
    /// next ([`crate::OriginCreatedRecord`]).
    OriginCreated = 5,
    /// `trace --origin`: the modules (build id, file offset) of a process's stack at its
    /// first origin record ([`crate::OriginModulesRecord`]).
    OriginModules = 6,
    /// `trace --origin`: the Python frames of the thread's origin record sent before it
    /// (a modules record may come between them) ([`crate::PyFramesRecord`]).
    PyFrames = 7,
    /// `trace --origin`: the top of the user stack at a call site's first origin
    /// ([`crate::StackCopyRecord`]).
    StackCopy = 8,
}

impl RecordKind {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Spawn),
            2 => Some(Self::Exit),
            3 => Some(Self::Paths),
            4 => Some(Self::Origin),
            5 => Some(Self::OriginCreated),
            6 => Some(Self::OriginModules),
            7 => Some(Self::PyFrames),
            8 => Some(Self::StackCopy),
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

// `Counters` (and `COUNTER_NAMES`): generated from the counter table.
crate::counter_table!(counters [doc name] => counters_struct);

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
    /// RLIMIT_NOFILE's soft and hard limits at exec: what the new image starts with, which
    /// the child inherited from its parent at fork (and may have changed before exec'ing);
    /// what a close loop in the child walks to. `nofile_max` 0: not read.
    pub nofile_cur: u64,
    pub nofile_max: u64,
    /// [`TaskState::credns`](crate::TaskState::credns) at this exec: the last exec'd image
    /// in the ancestry when the process was forked (what the code that made the inherited
    /// fds ran as), kept across its exec chain.
    pub image_credns: crate::CredNs,
    /// [`TaskState::image`](crate::TaskState::image) at this exec: what the image that
    /// exec'd ran as (for a re-exec, the chain's previous image, whose code made the fds it
    /// passes on too; for a first exec, the same as `image_credns`).
    pub prev_credns: crate::CredNs,
    /// The new image's credentials and namespaces, after exec installed them.
    pub exec_credns: crate::CredNs,
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
    /// The cgroup (v2) the process exited in (bpf_get_current_cgroup_id): a spawn reported
    /// at its exit (a failed exec, an exec the kernel skipped the program of) names its
    /// cgroup and container by it.
    pub cgroup_id: u64,
    /// 1 when the process exited without ever exec'ing (a fork-only child).
    pub never_execd: u32,
    pub exit_code: u32,
    pub comm: [u8; 16],
    pub counters: Counters,
}
