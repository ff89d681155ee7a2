//! Ctrl-C, SIGTERM and SIGHUP as a flag that long-running commands poll, so they can stop
//! cleanly and still print what they have (the handler only stores to an atomic).

use std::{
    os::fd::{FromRawFd as _, OwnedFd},
    sync::atomic::{AtomicI32, Ordering},
};

use anyhow::{Context as _, Result};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The write end of the wake-up pipe, for the handler (-1 before [`wake_pipe`]).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
    wake();
}

/// Writes a byte to the wake-up pipe (a no-op before [`wake_pipe`]). Async-signal-safe:
/// write(2) only; a full pipe already holds a wake-up.
pub fn wake() {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) of one byte from a static buffer.
        unsafe { libc::write(fd, b"s".as_ptr().cast(), 1) };
    }
}

/// Creates the self-pipe the handler writes to, so that a poll(2) including its read end
/// (returned) wakes on a signal without racing the flag. Both ends are close-on-exec and
/// non-blocking; the write end lives as long as the process.
pub fn wake_pipe() -> Result<OwnedFd> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error()).context("failed to create the signal pipe");
    }
    WAKE_FD.store(fds[1], Ordering::SeqCst);
    // SAFETY: pipe2 just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fds[0]) })
}

/// Catches SIGINT, SIGTERM and SIGHUP from now on; a signal fdaudit's caller ignored
/// (`nohup`, a shell's background job) stays ignored, as it does in a command `trace` starts.
pub fn install() {
    let caller = crate::caller::CallerState::get();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        if caller.ignores(sig) {
            continue;
        }
        // SAFETY: the handler only stores to an atomic and write(2)s, async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The signal received since [`install`], if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
