//! Calibration: what the probes add to each counted syscall, so windows can be shown as the
//! untraced estimate.
//!
//! Measured lazily ([`super::session::Session::probe_cost_ns`]): the first spawn whose
//! window made a counted syscall asks for it, while the programs are attached and the
//! traced command runs; a trace with no such spawn (`-- /bin/true`) never pays the ~5 ms
//! of forks and waits. The calibration's two processes write exit records like any traced
//! process: the session drops them by pid.

use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData};
use fdaudit_common::TaskState;

use crate::sys;

/// What [`measure`] found.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The probes' cost per counted syscall, ns.
    pub probe_cost_ns: f64,
    /// The untraced close() cost it was measured against (the one given, or a new
    /// measurement when the first result was lost in the noise), ns.
    pub close_cost_ns: f64,
    /// The calibration's traced processes (child and grandchild of each round): their
    /// records are not the trace's.
    pub pids: Vec<u32>,
}

/// [`probe_cost_ns`] with `n` closes, and once more with ten times as many when the first
/// result is lost in the noise.
pub fn measure(
    tracked: &mut HashMap<MapData, u32, TaskState>,
    n: u32,
    untraced_ns: f64,
) -> Result<Measured> {
    let first = probe_cost_ns(tracked, n, untraced_ns)?;
    if first.probe_cost_ns > 0.0 {
        return Ok(first);
    }
    // Lost in the noise (a loaded machine, an emulated guest's clock): once more, ten
    // times longer.
    let n = n * 10;
    let untraced = sys::close_cost_ns(n);
    let mut second = probe_cost_ns(tracked, n, untraced)?;
    second.pids.extend(first.pids);
    Ok(second)
}

/// Measures what the probes add to one close(): a traced child forks a grandchild (so the
/// grandchild is in a spawn window exactly as a real one, HOT slot and all) that times
/// `n` close() calls on a closed fd (CPU time: the traced command may be running beside
/// it); the difference with the untraced cost is the answer.
pub fn probe_cost_ns(
    tracked: &mut HashMap<MapData, u32, TaskState>,
    n: u32,
    untraced_ns: f64,
) -> Result<Measured> {
    let mut go = [0i32; 2];
    let mut back = [0i32; 2];
    // SAFETY: pipe2 fills the arrays we own.
    unsafe {
        if libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) != 0
            || libc::pipe2(back.as_mut_ptr(), libc::O_CLOEXEC) != 0
        {
            return Err(std::io::Error::last_os_error()).context("pipe2");
        }
    }
    let bad_fd = sys::closed_fd();
    // SAFETY: the children only make async-signal-safe calls, then _exit().
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        unsafe {
            let mut b = 0u8;
            libc::read(go[0], (&mut b as *mut u8).cast(), 1);
            let g = libc::fork();
            if g == 0 {
                let t = sys::time_closes(bad_fd, n);
                libc::write(back[1], (&t as *const u64).cast(), 8);
                libc::_exit(0);
            }
            libc::waitpid(g, std::ptr::null_mut(), 0);
            // After the grandchild's time: its pid, for the caller to drop its records.
            let gpid = g as u32;
            libc::write(back[1], (&gpid as *const u32).cast(), 4);
            libc::_exit(0);
        }
    }
    let inserted = tracked.insert(pid as u32, TaskState::default(), 0);
    let (mut ns, mut grandchild) = (0u64, 0u32);
    // SAFETY: plain fd I/O on the pipes we created; waitpid on our child. The reply is the
    // grandchild's time (8 bytes), then its pid (4 bytes, written once it was reaped).
    unsafe {
        libc::close(go[0]);
        libc::close(back[1]);
        libc::write(go[1], [1u8].as_ptr().cast(), 1);
        let mut buf = [0u8; 12];
        let mut got = 0usize;
        while got < buf.len() {
            let r = libc::read(back[0], buf[got..].as_mut_ptr().cast(), buf.len() - got);
            if r < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if r <= 0 {
                break;
            }
            got += r as usize;
        }
        libc::close(go[1]);
        libc::close(back[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        if got == buf.len() {
            ns = u64::from_ne_bytes(buf[..8].try_into().unwrap_or_default());
            grandchild = u32::from_ne_bytes(buf[8..].try_into().unwrap_or_default());
        }
    }
    inserted.context("failed to track the calibration child")?;
    let traced = ns as f64 / f64::from(n);
    Ok(Measured {
        probe_cost_ns: (traced - untraced_ns).max(0.0),
        close_cost_ns: untraced_ns,
        pids: vec![pid as u32, grandchild],
    })
}
