//! The one place fdaudit installs signal handlers. Each handler only stores to an atomic,
//! write(2)s to the wake-up pipe or `_exit`s, all async-signal-safe; the long-running
//! commands poll what it stored, so they can stop cleanly and still print what they have.
//!
//! - `trace` and `bench`: [`install_stop`], SIGINT, SIGTERM and SIGHUP as [`Action::Stop`];
//! - `watch`: SIGINT and SIGTERM stop, SIGHUP is [`Action::Reload`] (rewrite the textfile);
//! - `scan`: SIGINT and SIGTERM are [`Action::Interrupt`] (a second one exits at once).

use std::{
    os::fd::{FromRawFd as _, OwnedFd},
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
};

use anyhow::{Context as _, Result};

/// The last signal caught by an [`Action::Stop`] handler since [`rearm`] (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// The first signal caught by an [`Action::Stop`] or [`Action::Interrupt`] handler (0:
/// none): the one fdaudit's exit status reports (128+N).
static FIRST: AtomicI32 = AtomicI32::new(0);
/// Whether the last [`Action::Stop`] signal came from the kernel (`SI_KERNEL`: a terminal's
/// Ctrl-C or hang-up, sent to the whole foreground process group) rather than from
/// kill(2) to fdaudit alone.
static FROM_KERNEL: AtomicBool = AtomicBool::new(false);
/// Set by an [`Action::Interrupt`] handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Set by an [`Action::Reload`] handler, cleared by [`take_reload`].
static RELOAD: AtomicBool = AtomicBool::new(false);

/// The write end of the wake-up pipe, for the handler (-1 before [`wake_pipe`]).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// What a caught signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Recorded for [`received`], and wakes the [`wake_pipe`].
    Stop,
    /// Sets [`interrupted`] (what the scanner's loops check: a [`Action::Stop`] for `watch`
    /// does not cut its periodic scan short); a second one `_exit`s at once with
    /// 128 + the signal.
    Interrupt,
    /// Sets the flag [`take_reload`] takes.
    Reload,
}

/// What to do with a signal fdaudit's caller had set to SIG_IGN (see [`crate::caller`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerIgnored {
    /// Leave it ignored (`nohup`, a shell's background job), as it is in a command `trace`
    /// starts.
    Keep,
    /// Catch it all the same.
    Catch,
}

extern "C" fn on_stop(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    FROM_KERNEL.store(code == libc::SI_KERNEL, Ordering::SeqCst);
    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    RECEIVED.store(sig, Ordering::SeqCst);
    wake();
}

extern "C" fn on_interrupt(sig: libc::c_int) {
    let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // A second signal: the user wants out now.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(i32::from(crate::exit::from_signal(sig))) };
    }
}

extern "C" fn on_reload(_sig: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
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

/// Catches each signal of `actions` from now on, doing what its [`Action`] says. No
/// SA_RESTART: a blocking poll(2) returns at once with EINTR.
pub fn install(actions: &[(libc::c_int, Action)], ignored: CallerIgnored) {
    let caller = crate::caller::CallerState::get();
    for &(sig, action) in actions {
        if ignored == CallerIgnored::Keep && caller.ignores(sig) {
            continue;
        }
        let (handler, flags) = match action {
            Action::Stop => (on_stop as *const () as usize, libc::SA_SIGINFO),
            Action::Interrupt => (on_interrupt as *const () as usize, 0),
            Action::Reload => (on_reload as *const () as usize, 0),
        };
        // SAFETY: every handler is async-signal-safe (atomics, write(2), _exit).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler;
            sa.sa_flags = flags;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// `trace` and `bench`: SIGINT, SIGTERM and SIGHUP stop from now on; a signal fdaudit's
/// caller ignored (`nohup`, a shell's background job) stays ignored, as it does in a
/// command `trace` starts.
pub fn install_stop() {
    install(
        &[
            (libc::SIGINT, Action::Stop),
            (libc::SIGTERM, Action::Stop),
            (libc::SIGHUP, Action::Stop),
        ],
        CallerIgnored::Keep,
    );
}

/// The signal an [`Action::Stop`] handler caught, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The first signal that stopped or interrupted fdaudit, if any: its exit status is then
/// 128 + that signal ([`crate::exit::from_signal`]).
pub fn first_received() -> Option<i32> {
    match FIRST.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// fdaudit's exit status after a signal stopped it: 128 + [`first_received`] (130 if
/// none was recorded).
pub fn exit_status() -> u8 {
    crate::exit::from_signal(first_received().unwrap_or(libc::SIGINT))
}

/// Whether the last [`received`] signal came from the kernel (a terminal's Ctrl-C or
/// hang-up, which the whole foreground process group got) rather than kill(2) to fdaudit.
pub fn from_kernel() -> bool {
    FROM_KERNEL.load(Ordering::SeqCst)
}

/// Forgets the last [`Action::Stop`] signal (not [`first_received`]), so that waiting can
/// go on until the next one.
pub fn rearm() {
    RECEIVED.store(0, Ordering::SeqCst);
}

/// Whether an [`Action::Interrupt`] handler ran.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Whether an [`Action::Reload`] handler ran since the last call.
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}
