//! Calibration: what the probes add to each counted syscall, so windows can be shown as the
//! untraced estimate.
//!
//! Measured lazily ([`super::session::Session::probe_cost_ns`]): the first spawn whose
//! window made a counted syscall asks for it, while the programs are attached and the
//! traced command runs; a trace with no such spawn (`-- /bin/true`) never pays for its
//! forks and waits. The calibration's three processes write exit records like any traced
//! process: the session drops them by pid.

use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData};
use aya::Ebpf;
use fdaudit_common::TaskState;

use crate::sys;

/// What [`measure`] found.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The probes' cost per counted syscall, ns.
    pub probe_cost_ns: f64,
    /// The calibration's traced processes (child and grandchildren): their records are not
    /// the trace's.
    pub pids: Vec<u32>,
}

/// The probes' cost per counted syscall, measured at the first spawn that needs it.
pub(super) struct Calibration {
    /// ns, once measured (`Session::probe_cost_ns`; 0 with --no-syscalls).
    pub(super) probe_cost_ns: Option<f64>,
    /// How long that took, ms.
    pub(super) ms: f64,
    /// The measurement failed: windows stay uncorrected, and it is not retried.
    pub(super) failed: bool,
    /// The calibration's processes: their records are dropped (each pid until its exit
    /// record, the last one it writes).
    pub(super) ignored: Vec<u32>,
}

/// The probes' cost per close(): a close() timed in a spawn window less `untraced_ns`
/// (timed at start-up, before anything was attached), and never less than one run of the
/// close() programs as the kernel times them meanwhile (`BPF_ENABLE_STATS`, the mean over
/// the machine's runs; a counted close() runs at least one). The difference
/// holds what the programs cost and the tracepoint's dispatch to them; but its two times
/// are taken milliseconds apart, and in an emulated guest the same close() loop ran 2–3×
/// slower for milliseconds at a time (the traced close came out the cheaper one), so the
/// floor is what stands then. Neither exceeds the traced close() itself. The untraced cost
/// cannot be timed again now: every close() on the machine runs the programs.
pub fn measure(
    bpf: &Ebpf,
    tracked: &mut HashMap<MapData, u32, TaskState>,
    n: u32,
    untraced_ns: f64,
) -> Result<Measured> {
    let (traced_ns, floor_ns, pids) = traced(bpf, tracked, n)?;
    Ok(Measured {
        probe_cost_ns: (traced_ns - untraced_ns)
            .max(floor_ns)
            .min(traced_ns)
            .max(0.0),
        pids,
    })
}

/// The run time (ns) and the runs the kernel counted for each loaded program of `bpf`.
fn run_totals(bpf: &Ebpf) -> Vec<(u64, u64)> {
    bpf.programs()
        .map(|(_, p)| {
            p.info()
                .map_or((0, 0), |i| (i.run_time().as_nanos() as u64, i.run_count()))
        })
        .collect()
}

/// The mean run (ns) between `before` and `after` of the programs that ran at least `n`
/// times: those on close(), not the exec, fork and exit programs (a few long runs each, for
/// the traced command's spawns meanwhile; with them the mean was 5–20× too high in a
/// guest).
fn mean_run_ns(before: &[(u64, u64)], after: &[(u64, u64)], n: u32) -> f64 {
    let (time, runs) = before
        .iter()
        .zip(after)
        .map(|(b, a)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1)))
        .filter(|&(_, runs)| runs >= u64::from(n))
        .fold((0, 0), |(t, c), (dt, dc)| (t + dt, c + dc));
    if runs == 0 {
        0.0
    } else {
        time as f64 / runs as f64
    }
}

/// Times close() in a spawn window: a traced child forks a grandchild (so the grandchild is
/// in a spawn window exactly as a real one, HOT slot and all) that times `n` close() calls
/// on a closed fd, best of 3 (CPU time: the traced command may be running beside it); then,
/// with the kernel's run-time statistics on, a second grandchild makes `n` closes more.
/// Returns the ns per traced close(), the close() programs' mean run time while the second
/// grandchild ran (0 where the kernel keeps no statistics: before 5.8, or without the
/// privilege), and the child's and the grandchildren's pids.
fn traced(
    bpf: &Ebpf,
    tracked: &mut HashMap<MapData, u32, TaskState>,
    n: u32,
) -> Result<(f64, f64, Vec<u32>)> {
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
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the children only make async-signal-safe calls, then _exit().
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            die_with(parent);
            libc::close(go[1]);
            libc::close(back[0]);
            close_all_but(&mut [go[0], back[1]]);
            calibration_child(go[0], back[1], bad_fd, n)
        };
    }
    let inserted = tracked.insert(pid as u32, TaskState::default(), 0);
    super::pause::at("calibrate");
    // SAFETY: plain fd I/O on the pipes we created; waitpid on our child. The replies are
    // the first grandchild's time (8 bytes) and pid (4), then, after the second go, the
    // second one's pid (4), each written once that grandchild was reaped.
    let (first, second, floor_ns) = unsafe {
        libc::close(go[0]);
        libc::close(back[1]);
        libc::write(go[1], [1u8].as_ptr().cast(), 1);
        let first = read_exact::<12>(back[0]);
        let (mut second, mut floor_ns) = (None, 0.0);
        if first.is_some() {
            // Statistics on for as long as the fd is open, machine-wide: a few ms.
            let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
            let before = run_totals(bpf);
            libc::write(go[1], [1u8].as_ptr().cast(), 1);
            second = read_exact::<4>(back[0]);
            let after = run_totals(bpf);
            if stats.is_some() && second.is_some() {
                floor_ns = mean_run_ns(&before, &after, n);
            }
        }
        libc::close(go[1]);
        libc::close(back[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        (first, second, floor_ns)
    };
    inserted.context("failed to track the calibration child")?;
    let first = first.context("the calibration child did not report its time")?;
    let ns = u64::from_ne_bytes(first[..8].try_into().unwrap_or_default());
    let pid_of = |b: &[u8]| u32::from_ne_bytes(b.try_into().unwrap_or_default());
    let mut pids = vec![pid as u32, pid_of(&first[8..])];
    pids.extend(second.map(|b| pid_of(&b)));
    Ok((ns as f64 / f64::from(n), floor_ns, pids))
}

/// Makes the kernel SIGKILL this child when the thread that forked it ends (fdaudit killed,
/// whatever the moment), and ends at once if `parent` is already gone (it died between
/// the fork and the prctl: the child's parent is then a reaper). Without it a SIGKILL of
/// fdaudit while the child waited for its go left the child blocked for ever, holding
/// every BPF fd and so every program attached, machine-wide.
///
/// # Safety
/// Only in a child just forked: async-signal-safe calls.
unsafe fn die_with(parent: libc::pid_t) {
    // SAFETY: prctl and getppid are async-signal-safe and take plain arguments.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            || libc::getppid() != parent
        {
            libc::_exit(1);
        }
    }
}

/// Closes every fd from 3 up but those of `keep` (close_range(2), 5.9+; fdaudit needs
/// 5.10): the child holds none of fdaudit's BPF fds, files or pipes, so nothing of
/// fdaudit's outlives it through the child even for the moment before the kernel kills it.
///
/// # Safety
/// Only in a child just forked: async-signal-safe calls.
unsafe fn close_all_but(keep: &mut [i32]) {
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for &k in keep.iter() {
        let Ok(k) = libc::c_uint::try_from(k) else {
            continue;
        };
        if k > from {
            // SAFETY: close_range only closes fds of this process.
            unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0 as libc::c_uint) };
        }
        from = from.max(k + 1);
    }
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            from,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        )
    };
}

/// The calibration child: on each byte from `go`, a grandchild; the first times `n`
/// closes of `bad_fd` and writes the time, the second only makes them; after each is
/// reaped, its pid.
///
/// # Safety
/// Only in a child just forked: async-signal-safe calls, then `_exit`.
unsafe fn calibration_child(go: i32, back: i32, bad_fd: i32, n: u32) -> ! {
    for timed in [true, false] {
        let mut b = 0u8;
        // SAFETY: plain fd I/O, fork, waitpid and _exit (the caller's contract).
        unsafe {
            if libc::read(go, (&mut b as *mut u8).cast(), 1) != 1 {
                libc::_exit(1);
            }
            let g = libc::fork();
            if g == 0 {
                if timed {
                    let t = sys::time_closes(bad_fd, n, 3);
                    libc::write(back, (&t as *const u64).cast(), 8);
                } else {
                    sys::close_n(bad_fd, n);
                }
                libc::_exit(0);
            }
            libc::waitpid(g, std::ptr::null_mut(), 0);
            let gpid = g as u32;
            libc::write(back, (&gpid as *const u32).cast(), 4);
        }
    }
    // SAFETY: as above.
    unsafe { libc::_exit(0) }
}

/// `N` bytes from `fd`, or `None` at end of file or on an error.
fn read_exact<const N: usize>(fd: i32) -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    let mut got = 0usize;
    while got < N {
        // SAFETY: reads into the part of our buffer not yet filled.
        let r = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), N - got) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if r <= 0 {
            return None;
        }
        got += r as usize;
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::mean_run_ns;

    #[test]
    fn the_mean_run_counts_only_programs_that_ran_on_every_close() {
        // A close program (2000 runs of 40 ns, from 1000 before), an exec program (3 runs
        // of 50 µs) and one that did not run.
        let before = [(40_000, 1_000), (0, 0), (7, 1)];
        let after = [(120_000, 3_000), (150_000, 3), (7, 1)];
        assert_eq!(mean_run_ns(&before, &after, 2_000), 40.0);
        assert_eq!(mean_run_ns(&before, &after, 2_001), 0.0);
        assert_eq!(mean_run_ns(&[], &[], 1), 0.0);
    }
}
