//! Waiting without ticks: the ring buffer, a pidfd per traced root and the signal self-pipe
//! ([`crate::signals::wake_pipe`]) in one poll(2), so that a root's exit or Ctrl-C ends the trace at once and records are
//! handled as they come.
//!
//! The ring buffer's fd is optional: a caller that drains it from another thread waits here
//! on the roots and signals only.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::procfs_util;

/// How often a root without a pidfd (kernel before 5.3) is checked for its exit.
const TICK: Duration = Duration::from_millis(100);

/// A pidfd for `pid` (pidfd_open(2), since 5.3): readable once the process has exited.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

struct Root {
    pid: u32,
    /// None when pidfd_open failed: the root is then checked in /proc every [`TICK`].
    pidfd: Option<OwnedFd>,
    gone: bool,
}

/// What one [`Waiter::wait`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Woken {
    /// A signal arrived (its handler wrote to the self-pipe).
    pub signal: bool,
    /// The ring buffer has records.
    pub records: bool,
}

/// The roots of a trace and the signal pipe, waited on together.
pub struct Waiter {
    signal_rd: OwnedFd,
    roots: Vec<Root>,
}

impl Waiter {
    /// Opens a pidfd for every root (open them before the roots can be reaped).
    pub fn new(signal_rd: OwnedFd, roots: &[u32]) -> Waiter {
        Waiter {
            signal_rd,
            roots: Self::new_roots(roots),
        }
    }

    /// Waits on `roots` from now on instead (open them before they can be reaped): bench
    /// reuses one waiter for each command it runs.
    pub fn set_roots(&mut self, roots: &[u32]) {
        self.roots = Self::new_roots(roots);
    }

    fn new_roots(roots: &[u32]) -> Vec<Root> {
        roots
            .iter()
            .map(|&pid| Root {
                pid,
                pidfd: pidfd_open(pid),
                gone: false,
            })
            .collect()
    }

    /// Blocks until a root exits, a signal arrives, `ring_fd` (if given) has records, or
    /// `deadline` passes.
    pub fn wait(&mut self, ring_fd: Option<RawFd>, deadline: Option<Instant>) -> Result<Woken> {
        let mut fds = Vec::with_capacity(self.roots.len() + 2);
        let pollin = |fd: RawFd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        fds.push(pollin(self.signal_rd.as_raw_fd()));
        fds.push(pollin(ring_fd.unwrap_or(-1))); // a negative fd is ignored by poll(2)
        let mut ticking = false;
        for r in self.roots.iter().filter(|r| !r.gone) {
            match &r.pidfd {
                Some(fd) => fds.push(pollin(fd.as_raw_fd())),
                None => ticking = true,
            }
        }
        let mut timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if ticking {
            timeout = Some(timeout.map_or(TICK, |t| t.min(TICK)));
        }
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: `fds` is a valid array of pollfds of the given length.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).context("failed to wait for records and the traced processes");
            }
        }
        let mut woken = Woken {
            signal: fds[0].revents != 0,
            records: fds[1].revents != 0,
        };
        if woken.signal {
            let mut buf = [0u8; 64];
            // SAFETY: a non-blocking read into a buffer we own.
            while unsafe { libc::read(self.signal_rd.as_raw_fd(), buf.as_mut_ptr().cast(), 64) } > 0
            {
            }
        }
        if rc < 0 {
            woken.signal = true; // EINTR: a handler ran
        }
        let mut polled = fds[2..].iter();
        for r in self.roots.iter_mut().filter(|r| !r.gone) {
            r.gone = match &r.pidfd {
                Some(_) => polled.next().is_some_and(|p| p.revents != 0),
                None => !procfs_util::alive(r.pid),
            };
        }
        Ok(woken)
    }

    /// Whether there is any root to wait for.
    pub fn has_roots(&self) -> bool {
        !self.roots.is_empty()
    }

    /// Whether every root has exited.
    pub fn all_exited(&self) -> bool {
        self.roots.iter().all(|r| r.gone)
    }
}

/// Waits for the command without blocking: its exit status once it has exited.
pub fn try_wait(pid: u32) -> Result<Option<i32>> {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    let rc = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("failed to wait for the command");
    }
    Ok((rc != 0).then_some(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_exit_and_a_signal_each_wake_the_waiter_at_once() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("spawn sleep");
        let mut waiter = Waiter::new(
            crate::signals::wake_pipe().expect("signal pipe"),
            &[child.id()],
        );
        let t = Instant::now();
        let far = Some(Instant::now() + Duration::from_secs(30));
        while !waiter.all_exited() {
            let woken = waiter.wait(None, far).expect("wait");
            assert!(!woken.signal && !woken.records, "{woken:?}");
            assert!(t.elapsed() < Duration::from_secs(10), "never woke");
        }
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(5),
            "woke after {took:?}, the root exited after 200 ms"
        );
        child.wait().expect("reap");

        // The handler's write: the next wait returns at once, flagged.
        crate::signals::wake();
        let t = Instant::now();
        let woken = waiter.wait(None, far).expect("wait");
        assert!(woken.signal, "{woken:?}");
        assert!(t.elapsed() < Duration::from_secs(1));

        // Nothing left to wake it: the deadline does.
        let t = Instant::now();
        let woken = waiter
            .wait(None, Some(Instant::now() + Duration::from_millis(50)))
            .expect("wait");
        assert_eq!(woken, Woken::default());
        assert!(t.elapsed() >= Duration::from_millis(40));
    }
}
