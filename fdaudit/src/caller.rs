//! What fdaudit's caller handed it that Rust's runtime or fdaudit itself changes: the signal
//! mask, the signals set to be ignored, and which of fds 0-2 were closed. Captured before
//! `main` (an `.init_array` entry runs before the Rust runtime ignores SIGPIPE and opens
//! /dev/null on closed stdio fds), and put back in a child between fork and exec, so that a
//! command fdaudit starts gets exactly what it would have got without fdaudit.
//!
//! `nohup fdaudit trace -- job` keeps SIGHUP ignored in `job`; `trap '' INT; fdaudit ...`
//! keeps SIGINT ignored in both fdaudit and the command.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Highest signal number Linux has (SIGRTMAX).
const MAX_SIGNAL: i32 = 64;

/// Signals ignored by the caller: bit `n - 1` for signal `n`.
static IGNORED: AtomicU64 = AtomicU64::new(0);
/// The caller's blocked-signal mask, in the kernel's layout (bit `n - 1` for signal `n`).
static BLOCKED: AtomicU64 = AtomicU64::new(0);
/// fds 0-2 that were closed at start-up (bit `fd`).
static STDIO_CLOSED: AtomicU64 = AtomicU64::new(0);
static CAPTURED: AtomicBool = AtomicBool::new(false);

/// The unit tests' binary captures through its own `.init_array` entry; fdaudit's is in
/// main.rs (an entry in this library could be left out by the linker with its object file).
#[cfg(test)]
#[used]
#[link_section = ".init_array"]
static CAPTURE_AT_START: extern "C" fn() = capture_at_start;

/// To be put in the binary's `.init_array`: glibc calls those entries from
/// `__libc_start_main`, before `main`, so before the Rust runtime sets SIGPIPE to SIG_IGN
/// and fills closed stdio fds.
pub extern "C" fn capture_at_start() {
    capture();
}

/// Records the current signal mask, ignored signals and closed stdio fds as the caller's.
fn capture() {
    let (mut ignored, mut blocked, mut closed) = (0u64, 0u64, 0u64);
    // SAFETY: sigaction/sigprocmask with a null new action only read into our structs;
    // fcntl(F_GETFD) only queries.
    unsafe {
        for sig in 1..=MAX_SIGNAL {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                ignored |= 1 << (sig - 1);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) == 0 {
            for sig in 1..=MAX_SIGNAL {
                if libc::sigismember(&set, sig) == 1 {
                    blocked |= 1 << (sig - 1);
                }
            }
        }
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                closed |= 1 << fd;
            }
        }
    }
    IGNORED.store(ignored, Ordering::Relaxed);
    BLOCKED.store(blocked, Ordering::Relaxed);
    STDIO_CLOSED.store(closed, Ordering::Relaxed);
    CAPTURED.store(true, Ordering::Release);
}

/// The caller's state, as captured at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerState {
    /// Bit `n - 1`: signal `n` was ignored (SIG_IGN).
    pub ignored: u64,
    /// Bit `n - 1`: signal `n` was blocked.
    pub blocked: u64,
    /// Bit `fd` (0-2): the fd was closed.
    pub stdio_closed: u64,
}

impl CallerState {
    /// What the caller gave fdaudit. In a test binary (where `.init_array` also ran) the
    /// same; should the capture not have run, the state now.
    pub fn get() -> CallerState {
        if !CAPTURED.load(Ordering::Acquire) {
            capture();
        }
        CallerState {
            ignored: IGNORED.load(Ordering::Relaxed),
            blocked: BLOCKED.load(Ordering::Relaxed),
            stdio_closed: STDIO_CLOSED.load(Ordering::Relaxed),
        }
    }

    /// Whether the caller had `sig` ignored: fdaudit then leaves it ignored too (a shell's
    /// background job, `nohup`), rather than install a handler for it.
    pub fn ignores(&self, sig: i32) -> bool {
        (1..=MAX_SIGNAL).contains(&sig) && self.ignored & (1 << (sig - 1)) != 0
    }

    /// Puts the caller's state back: every catchable signal to SIG_IGN or SIG_DFL as the
    /// caller had it, the caller's mask, and the stdio fds it had closed closed again.
    ///
    /// Async-signal-safe (sigaction, sigprocmask, close on values copied before the fork).
    ///
    /// # Safety
    /// Only in a child between fork and exec: it drops whatever handlers and fds 0-2
    /// fdaudit had.
    pub unsafe fn restore_in_child(&self) {
        // SAFETY (whole body): raw async-signal-safe calls on stack values.
        unsafe {
            for sig in 1..=MAX_SIGNAL {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = if self.ignores(sig) {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                libc::sigemptyset(&mut sa.sa_mask);
                // glibc refuses its own two internal signals (32, 33): they keep theirs.
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
            for fd in 0..3 {
                if self.stdio_closed & (1 << fd) != 0 {
                    libc::close(fd);
                }
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in 1..=MAX_SIGNAL {
                if self.blocked & (1 << (sig - 1)) != 0 {
                    libc::sigaddset(&mut set, sig);
                }
            }
            // Raw syscall: glibc's sigprocmask silently keeps its internal signals unblocked,
            // the kernel takes the mask as the caller had it.
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &set as *const libc::sigset_t,
                std::ptr::null_mut::<libc::sigset_t>(),
                8usize,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_before_main_sees_sigpipe_as_the_caller_left_it() {
        let st = CallerState::get();
        // The Rust runtime ignores SIGPIPE in main; the capture ran before it did. Cargo's
        // test runner does not start tests with SIGPIPE ignored.
        assert!(!st.ignores(libc::SIGPIPE), "{st:?}");
        assert!(!st.ignores(0) && !st.ignores(65));
    }

    #[test]
    fn a_child_gets_the_callers_ignored_signals_and_mask_back() {
        let st = CallerState {
            ignored: 1 << (libc::SIGHUP - 1) | 1 << (libc::SIGTERM - 1),
            blocked: 1 << (libc::SIGUSR1 - 1),
            stdio_closed: 0,
        };
        let mut out = [0i32; 2];
        // SAFETY: a pipe, a fork whose child only makes async-signal-safe calls and _exits.
        unsafe {
            assert_eq!(libc::pipe(out.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::signal(libc::SIGINT, libc::SIG_IGN); // fdaudit's, to be undone
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                st.restore_in_child();
                let mut ign = 0u64;
                for sig in 1..=MAX_SIGNAL {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction == libc::SIG_IGN
                    {
                        ign |= 1 << (sig - 1);
                    }
                }
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
                let blk = u64::from(libc::sigismember(&set, libc::SIGUSR1) == 1)
                    | u64::from(libc::sigismember(&set, libc::SIGUSR2) == 1) << 1;
                let words = [ign, blk];
                libc::write(out[1], words.as_ptr().cast(), 16);
                libc::_exit(0);
            }
            libc::close(out[1]);
            let mut words = [0u64; 2];
            assert_eq!(libc::read(out[0], words.as_mut_ptr().cast(), 16), 16);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(out[0]);
            assert_eq!(words[0], st.ignored, "ignored signals in the child");
            assert_eq!(words[1], 1, "SIGUSR1 blocked, SIGUSR2 not");
        }
    }
}
