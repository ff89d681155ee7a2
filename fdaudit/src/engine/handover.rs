//! Who may unregister a syscall trace event, and when: a lock between traces that are
//! starting and the hand-off children of traces that have ended.
//!
//! When the last perf event of a syscall trace event closes, the kernel unregisters it and
//! waits for two grace periods while it holds `event_mutex` (`perf_trace_destroy`), the
//! mutex every `perf_event_open` of a trace event takes: a trace that starts meanwhile
//! waits (docs/performance.md). The hand-off child of an ended trace keeps its anchors on
//! those events a while (`ebpf/fentry.rs`), then drops them. A starting trace holds
//! [`LOCK`] shared from the start of its load until its own programs are attached (from
//! then on its own perf events keep the events registered, and a drop is only a
//! reference), and the hand-off child drops each anchor holding it exclusively: no drop
//! begins while a trace is starting, and a trace that starts during one waits for that one
//! only, not for the rest.

use std::{
    fs::File,
    os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd},
    os::unix::fs::{DirBuilderExt, MetadataExt},
};

/// Where the lock is: a directory only root writes.
pub const LOCK_DIR: &str = "/run/fdaudit";
/// The lock file, in [`LOCK_DIR`].
pub const LOCK: &str = "/run/fdaudit/trace-events.lock";

/// How long a hand-off child waits in all for starting traces before it drops its anchors
/// anyway: a trace stopped in its start-up must not keep them forever.
const WAIT_FOR_STARTS_NS: i64 = 5_000_000_000;
/// Between two tries of the exclusive lock.
const RETRY_NS: i64 = 10_000_000;
/// After each drop: a trace waiting for the shared lock gets it before the next drop.
const BETWEEN_DROPS_NS: i64 = 5_000_000;

/// Opens [`LOCK`] (a fresh open file description: flock locks belong to it), creating it
/// and its directory where missing. None where /run is not writable, or where the
/// directory or file is not root's own (a lock another user controls could hold the
/// anchors up): the traces then go without it, as before.
pub fn open_lock() -> Option<OwnedFd> {
    let dir = std::path::Path::new(LOCK_DIR);
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return None;
        }
    }
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return None;
    }
    let path = std::ffi::CString::new(LOCK).ok()?;
    // SAFETY: a NUL-terminated path; the fd returned is ours.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh fd of our own.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.uid() == 0).then(|| file.into())
}

/// A starting trace's request for [`LOCK`], shared, made on a thread of its own (it waits
/// while a hand-off child drops an anchor, which the trace's own `perf_event_open` would
/// wait for anyway).
pub struct Starting(Option<std::thread::JoinHandle<Option<OwnedFd>>>);

/// The shared hold of [`LOCK`] (None without one): no hand-off child drops an anchor
/// while it is held. Released when dropped.
pub struct Held {
    _lock: Option<OwnedFd>,
}

/// Asks for [`LOCK`], shared, where the trace may attach to syscall trace events (`want`).
pub fn starting(want: bool) -> Starting {
    Starting(want.then(|| std::thread::spawn(|| lock_shared(open_lock()?))))
}

impl Starting {
    /// Waits for the lock: call before attaching, keep until attached.
    pub fn held(self) -> Held {
        Held {
            _lock: self.0.and_then(|t| t.join().ok()).flatten(),
        }
    }
}

/// `fd` locked shared, None when flock fails.
fn lock_shared(fd: OwnedFd) -> Option<OwnedFd> {
    loop {
        // SAFETY: flock on our own fd.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_SH) } == 0 {
            return Some(fd);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Sleeps `ns` nanoseconds. Only a raw syscall: called between fork and _exit.
fn nap(ns: i64) {
    let t = libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    };
    // SAFETY: a valid timespec; no remainder wanted.
    unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
}

/// Closes `anchors` one at a time, each while holding `lock` (from [`open_lock`], -1 for
/// none) exclusively: waits while a trace is starting, for [`WAIT_FOR_STARTS_NS`] at most
/// in all. Only raw syscalls: called between fork and _exit.
///
/// # Safety
/// `anchors` and `lock` are fds this process owns; `anchors` are closed.
pub unsafe fn drop_anchors(anchors: &[i32], lock: i32) {
    let mut waited = 0;
    for &fd in anchors.iter().filter(|&&fd| fd >= 0) {
        let mut locked = false;
        if lock >= 0 {
            loop {
                // SAFETY: flock on our own fd.
                locked = unsafe { libc::flock(lock, libc::LOCK_EX | libc::LOCK_NB) } == 0;
                if locked || waited >= WAIT_FOR_STARTS_NS {
                    break;
                }
                nap(RETRY_NS);
                waited += RETRY_NS;
            }
        }
        // SAFETY: an anchor this process owns.
        unsafe { libc::close(fd) };
        if locked {
            // SAFETY: flock on our own fd.
            unsafe { libc::flock(lock, libc::LOCK_UN) };
            nap(BETWEEN_DROPS_NS);
        }
    }
}

/// Hands the lock's fd over to the hand-off child: -1 without one.
pub fn into_raw(lock: Option<OwnedFd>) -> i32 {
    lock.map_or(-1, IntoRawFd::into_raw_fd)
}
