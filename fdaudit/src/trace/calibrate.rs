//! Calibration: what the probes add to each counted syscall, so windows can be shown as the
//! untraced estimate.

use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData, RingBuf};
use fdaudit_common::TaskState;

use crate::sys;

/// The maps calibration uses: the traced set, and the ring buffer its processes' records
/// are dropped from.
pub struct Maps<'a> {
    pub tracked: &'a mut HashMap<MapData, u32, TaskState>,
    pub events: &'a mut RingBuf<MapData>,
}

/// [`probe_cost_ns`] with `n` closes, and once more with ten times as many when the first
/// result is lost in the noise. Returns the probes' cost and the untraced close() cost
/// (`untraced_ns`, or its new measurement), ns.
pub fn measure(maps: &mut Maps<'_>, n: u32, untraced_ns: f64) -> Result<(f64, f64)> {
    let cost = probe_cost_ns(maps, n, untraced_ns)?;
    if cost > 0.0 {
        return Ok((cost, untraced_ns));
    }
    // Lost in the noise (a loaded machine, an emulated guest's clock): once more, ten
    // times longer.
    let n = n * 10;
    let untraced = sys::close_cost_ns(n);
    Ok((probe_cost_ns(maps, n, untraced)?, untraced))
}

/// Measures what the probes add to one close(): a traced child forks a grandchild (so the
/// grandchild is in a spawn window exactly as a real one, HOT slot and all) that times
/// `n` close() calls on a closed fd; the difference with the untraced cost is the answer.
pub fn probe_cost_ns(maps: &mut Maps<'_>, n: u32, untraced_ns: f64) -> Result<f64> {
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
            libc::_exit(0);
        }
    }
    let inserted = maps.tracked.insert(pid as u32, TaskState::default(), 0);
    let mut ns = 0u64;
    // SAFETY: plain fd I/O on the pipes we created; waitpid on our child.
    unsafe {
        libc::close(go[0]);
        libc::close(back[1]);
        libc::write(go[1], [1u8].as_ptr().cast(), 1);
        libc::read(back[0], (&mut ns as *mut u64).cast(), 8);
        libc::close(go[1]);
        libc::close(back[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    inserted.context("failed to track the calibration child")?;
    // The calibration processes' exit records (written before they could be reaped).
    while maps.events.next().is_some() {}
    let traced = ns as f64 / f64::from(n);
    Ok((traced - untraced_ns).max(0.0))
}
