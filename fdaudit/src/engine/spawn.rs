//! What the engine hands out: plain values, finished before any front end sees them. A
//! [`Spawn`] (a traced child's exec, or its failed execs), its [`LeakedFd`]s, a process's
//! [`Exit`], the [`Event`] that carries either, and `--reads`' [`ReadCount`]. No wire format:
//! each front end maps them to its own (`trace/report/json.rs`, watch's metrics, bench's rows).

use super::{boundary::Boundary, counts::SyscallCounts, flags::SpawnFlags, strategy::Strategy};
use crate::{cgroup::Identity, fdkind::FdKind, lossless_field, output::text::Lossless};

lossless_field!(TargetField, "target");
lossless_field!(ParentCommField, "parent_comm");
lossless_field!(ExecPathField, "exec_path");
lossless_field!(ArgvField, "argv");

/// A path or name as the kernel gave it: bytes (JSON: lossy string and `_b64` when needed).
pub type Target = Lossless<Vec<u8>, TargetField>;

/// A leaked fd: open in the new image right after exec, fd >= 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakedFd {
    pub fd: u32,
    pub kind: FdKind,
    pub target: Target,
    /// O_RDONLY / O_WRONLY / O_RDWR: "r", "w", "rw".
    pub access: &'static str,
    /// Socket family for sockets ("inet", "inet6", "unix", ...), as in `scan`.
    pub family: Option<&'static str>,
    /// Socket protocol for sockets, as in `scan`: "tcp", "udp", "raw" for inet and inet6
    /// (from the socket type: an inet stream socket is "tcp"), else the socket type
    /// ("stream", "dgram", "seqpacket").
    pub protocol: Option<&'static str>,
    pub ino: u64,
    /// inode->i_sb->s_dev (kernel encoding): with `ino`, the file's identity.
    pub dev: u32,
    /// `trace --origin`: the call that made this fd inheritable, or why it is unknown.
    pub origin: Option<super::origin::Origin>,
    /// The spawn crossed a privilege or namespace boundary ([`Spawn::boundary`]): this fd
    /// reached an image that runs as or where its holder did not.
    pub critical: bool,
    /// The file was deleted while open (no name left; `target` is its last one).
    pub deleted: bool,
    /// `target` is not the whole path (the kernel's was cut or missing and the live link
    /// was gone): the spawn then carries `path_partial`.
    pub partial: bool,
}

/// One spawn: a traced child that completed an exec, or whose every exec failed.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub parent_pid: u32,
    pub parent_comm: Lossless<Vec<u8>, ParentCommField>,
    pub pid: u32,
    /// Thread id that called exec, when it was not the main thread.
    pub exec_tid: Option<u32>,
    pub exec_path: Lossless<Vec<u8>, ExecPathField>,
    /// Every argument, empty ones included.
    pub argv: Lossless<Vec<Vec<u8>>, ArgvField>,
    pub exec_ok: bool,
    pub exec_attempts: u32,
    /// For a failed exec: the errno the exec returned (2 for ENOENT), when known.
    pub exec_errno: Option<i32>,
    /// `exec_errno` by name ("ENOENT").
    pub exec_error: Option<&'static str>,
    /// fork to exec, nanoseconds, as measured (probes included). 0 when the fork was not seen.
    pub window_ns: u64,
    /// `window_ns` less the probes' own cost per counted syscall: the untraced estimate
    /// (equal to `window_ns` until [`Spawn::correct_for_probes`]).
    pub window_corrected_ns: u64,
    /// The window's syscall counters.
    pub calls: SyscallCounts,
    /// (first, last, flags) of the first close_range() calls.
    pub close_ranges: Vec<[u32; 3]>,
    pub strategy: Strategy,
    /// For `close-loop`: the fd the loop ran up to (exclusive).
    pub close_loop_bound: Option<u32>,
    pub leaked_fds: Vec<LeakedFd>,
    /// Number of leaked fds (may exceed `leaked_fds.len()` when truncated).
    pub leaked_count: u32,
    /// Redirected or inherited stdio (fds 0-2), shown apart from leaks.
    pub stdio: Vec<LeakedFd>,
    /// Partial-data markers and `reexec`, as a list of names.
    pub flags: SpawnFlags,
    /// What changed between the last exec'd image in the ancestry and the new image
    /// (credentials, namespaces, root, cgroup); absent when nothing did or no earlier image
    /// was seen.
    pub boundary: Option<Boundary>,
    /// cgroup (id from the kernel at exec, path), container, and pid in its own namespace.
    pub identity: Identity,
    /// Kernel timestamp of the exec (CLOCK_MONOTONIC ns).
    pub exec_ns: u64,
    /// Syscalls in the window that went through a probe (the counters and the exec
    /// attempts the kernel saw): what [`Spawn::correct_for_probes`] charges for.
    pub probed: u64,
    /// `exec_path` is the first bytes of a longer name (the kernel's buffer was full).
    pub exec_path_cut: bool,
    /// The parent's runtime (`trace`: [`crate::runtime::Resolver`]), from its image.
    pub runtime: Option<crate::runtime::Runtime>,
    /// The parent's NOFILE limits, read with its runtime.
    pub parent_nofile: Option<crate::runtime::Nofile>,
    /// The child's NOFILE limits at exec, read by the exec program (inherited at fork).
    pub nofile: Option<crate::runtime::Nofile>,
}

impl Spawn {
    /// Subtracts the probes' own cost (`probe_cost_ns` per counted syscall) from the window:
    /// `window_corrected_ns`, the untraced estimate.
    pub fn correct_for_probes(&mut self, probe_cost_ns: f64) {
        let correction = (probe_cost_ns * self.probed as f64) as u64;
        self.window_corrected_ns = self.window_ns.saturating_sub(correction);
    }
}

/// A traced process exited.
#[derive(Debug, Clone)]
pub struct Exit {
    pub pid: u32,
    pub parent_pid: u32,
    /// It forked and exited without exec'ing.
    pub never_execd: bool,
    /// It tried to exec and every attempt failed: reported as a spawn with `exec_ok: false`.
    pub failed_exec: Option<Box<Spawn>>,
}

#[derive(Debug, Clone)]
pub enum Event {
    Spawn(Box<Spawn>),
    Exit(Exit),
}

impl Spawn {
    /// The [`Origin::label`](super::origin::Origin::label) of each leaked fd ("" for one
    /// without an origin: no `--origin`).
    pub fn origin_labels(&self) -> Vec<String> {
        let label = |f: &LeakedFd| f.origin.as_ref().map_or("", |o| o.label()).to_owned();
        self.leaked_fds.iter().map(label).collect()
    }
}

impl Event {
    /// The syscalls of the spawn it reports that went through a probe (0 for a plain exit).
    pub fn probed(&self) -> u64 {
        match self {
            Event::Spawn(s) => s.probed,
            Event::Exit(e) => e.failed_exec.as_ref().map_or(0, |s| s.probed),
        }
    }
}

/// Read counters for one (process, open file), from `--reads`: the kernel's entry as it is,
/// with the reader's comm decoded.
#[derive(Debug, Clone)]
pub struct ReadCount {
    pub key: fdaudit_common::ReadKey,
    pub stat: fdaudit_common::ReadStat,
    /// The reader's comm, bytes.
    pub comm: Vec<u8>,
    /// The file's path, walked by the kernel when the counter became a storm (while the
    /// file was open), if it did.
    pub kernel_path: Option<Box<fdaudit_common::FdPath>>,
}
