//! Thin wrappers over the process-level system calls every subcommand needs: RLIMIT_NOFILE,
//! uname, CPU affinity, the fd table (holding, closing, counting) and the one close() cost
//! measurement. Nothing here knows about tracing, scanning or benchmarking.

use std::os::fd::{FromRawFd as _, OwnedFd};

use libc::{c_int, c_uint};

/// A system call that failed, or a limit that does not allow what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("RLIMIT_NOFILE {wanted} is above the hard limit {hard}")]
    NofileAboveHard { wanted: u64, hard: u64 },
    #[error("{wanted} open fds do not fit under the soft RLIMIT_NOFILE {nofile}")]
    TooManyFds { wanted: u64, nofile: u64 },
    #[error("{call} failed")]
    Sys {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The error of `call`, from errno.
pub fn sys_err(call: &'static str) -> SysError {
    SysError::Sys {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// The error of `call`, from a returned error number (posix_spawn style).
pub fn errno_err(call: &'static str, rc: c_int) -> SysError {
    SysError::Sys {
        call,
        source: std::io::Error::from_raw_os_error(rc),
    }
}

/// The soft and hard RLIMIT_NOFILE of this process.
pub fn nofile() -> Result<(u64, u64), SysError> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(sys_err("getrlimit(RLIMIT_NOFILE)"));
    }
    Ok((r.rlim_cur, r.rlim_max))
}

/// Sets the soft RLIMIT_NOFILE of this process to `soft` (the hard limit is kept).
pub fn set_nofile(soft: u64) -> Result<(), SysError> {
    let (_, hard) = nofile()?;
    if soft > hard {
        return Err(SysError::NofileAboveHard { wanted: soft, hard });
    }
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(sys_err("setrlimit(RLIMIT_NOFILE)"));
    }
    Ok(())
}

/// The symbolic name of an errno an exec or an open can return ("ENOENT"). A short table
/// rather than a dependency (nix) for one lookup; `None` for others (print the number).
pub fn errno_name(errno: c_int) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ELOOP => "ELOOP",
        libc::ELIBBAD => "ELIBBAD",
        libc::EINTR => "EINTR",
        libc::ESRCH => "ESRCH",
        _ => return None,
    })
}

/// The name of a signal that stops fdaudit ("SIGTERM"); `None` for others.
pub fn signal_name(sig: c_int) -> Option<&'static str> {
    Some(match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => return None,
    })
}

/// "sysname release machine" from uname(2), e.g. "Linux 6.1.0-18-amd64 x86_64".
pub fn uname() -> Option<String> {
    // SAFETY: a zeroed utsname is valid storage; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let f = |a: &[libc::c_char]| {
        let b: Vec<u8> = a
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    Some(format!(
        "{} {} {}",
        f(&u.sysname),
        f(&u.release),
        f(&u.machine)
    ))
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, SysError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, with the set's true size.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(sys_err("sched_getaffinity"));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The CPU set of `cpu` alone (for sched_setaffinity).
pub fn one_cpu(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within the set; out-of-range CPUs are ignored.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

/// Pins this process (and the children it forks from now on) to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), SysError> {
    let set = one_cpu(cpu);
    // SAFETY: sched_setaffinity reads the set with its true size.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(sys_err("sched_setaffinity"));
    }
    Ok(())
}

/// Closes every fd ≥ 3 this process inherited, so its fd table is exactly 0, 1, 2.
pub fn close_inherited_fds() -> Result<(), SysError> {
    // SAFETY: close_range only closes fds; the caller owns none of them yet (called at start).
    if unsafe { libc::syscall(libc::SYS_close_range, 3 as c_uint, c_uint::MAX, 0 as c_uint) } != 0 {
        return Err(sys_err("close_range(3, ~0U, 0)"));
    }
    Ok(())
}

/// Opens fds until `total` are open counting 0–2 (`total`−3 new ones; none close-on-exec):
/// a socketpair, up to 8 pipes and /dev/null dups for the rest. Call after
/// [`close_inherited_fds`] for an exact count. Dropping the result closes them.
pub fn hold_fds(total: u64) -> Result<Vec<OwnedFd>, SysError> {
    let (soft, _) = nofile()?;
    if total > soft {
        return Err(SysError::TooManyFds {
            wanted: total,
            nofile: soft,
        });
    }
    let want = total.saturating_sub(3) as usize;
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(want);
    let adopt = |fds: &mut Vec<OwnedFd>, raw: c_int| {
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
    };
    if want >= 2 {
        let mut sv = [0 as c_int; 2];
        // SAFETY: socketpair writes two fds into `sv`.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } != 0 {
            return Err(sys_err("socketpair"));
        }
        adopt(&mut fds, sv[0]);
        adopt(&mut fds, sv[1]);
    }
    let mut pipes = 0;
    // Leave room for at least one /dev/null so every kind is there.
    while pipes < 8 && want - fds.len() > 2 {
        let mut p = [0 as c_int; 2];
        // SAFETY: pipe2 writes two fds into `p`; flags 0 = not close-on-exec.
        if unsafe { libc::pipe2(p.as_mut_ptr(), 0) } != 0 {
            return Err(sys_err("pipe2"));
        }
        adopt(&mut fds, p[0]);
        adopt(&mut fds, p[1]);
        pipes += 1;
    }
    if fds.len() < want {
        // SAFETY: plain open of a NUL-terminated path, without O_CLOEXEC on purpose.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if null < 0 {
            return Err(sys_err("open(/dev/null)"));
        }
        adopt(&mut fds, null);
        while fds.len() < want {
            // SAFETY: dup of an fd we own; the copy is not close-on-exec.
            let d = unsafe { libc::dup(null) };
            if d < 0 {
                return Err(sys_err("dup(/dev/null)"));
            }
            adopt(&mut fds, d);
        }
    }
    Ok(fds)
}

/// Counts this process's open fds (by probing 0..soft limit with F_GETFD).
pub fn count_open_fds() -> u64 {
    let soft = nofile().map(|(s, _)| s).unwrap_or(1024);
    let soft = c_int::try_from(soft).unwrap_or(c_int::MAX);
    // SAFETY: F_GETFD only queries.
    (0..soft)
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .count() as u64
}

/// A shell-like exit status from a wait status: the code, 128+signal, or -1.
pub fn wait_status_code(status: c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    }
}

/// An fd number below the soft limit that is certainly closed (close() on it fails with
/// EBADF and changes nothing): the cheapest iteration of a close-to-limit loop.
pub fn closed_fd() -> c_int {
    let soft = nofile().map(|(s, _)| s).unwrap_or(1024);
    let mut fd = (soft.min(1 << 20) as c_int).max(64) - 1;
    // SAFETY: fcntl F_GETFD only probes.
    while fd > 3 && unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
        fd -= 1;
    }
    fd
}

/// CPU ns this thread spent in `n` close(fd) calls: the best of `rounds` rounds. CPU time,
/// not wall time, so other load on the machine does not inflate it; but where the
/// scheduler's clock ticks in jiffies (emulated guests without a stable TSC: CPU time then
/// moves in 4 ms steps, 0 for a short round) the wall time of the round is used instead.
/// Async-signal-safe (the tracer's calibration runs it in a forked child).
pub fn time_closes(fd: c_int, n: u32, rounds: u32) -> u64 {
    (0..rounds)
        .map(|_| time_once(|| close_n(fd, n)))
        .min()
        .unwrap_or(0)
}

/// `n` close(fd) calls. Async-signal-safe.
pub fn close_n(fd: c_int, n: u32) {
    for _ in 0..n {
        // SAFETY: close with a plain argument; `fd` is not open.
        unsafe { libc::close(fd) };
    }
}

/// CPU ns of one run of `f` (the wall time where CPU time ticks coarsely, see
/// [`time_closes`]). Async-signal-safe when `f` is.
fn time_once(f: impl FnOnce()) -> u64 {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let (mut cpu_a, mut cpu_b, mut wall_a, mut wall_b) = (zero, zero, zero, zero);
    // SAFETY: clock_gettime with plain arguments.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut wall_a);
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu_a);
    }
    f();
    // SAFETY: as above.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu_b);
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut wall_b);
    }
    let ns = |a: libc::timespec, b: libc::timespec| {
        ((b.tv_sec - a.tv_sec) * 1_000_000_000 + (b.tv_nsec - a.tv_nsec)).max(0) as u64
    };
    let (cpu, wall) = (ns(cpu_a, cpu_b), ns(wall_a, wall_b));
    // CPU time cannot exceed wall time, nor be 0 for real work, unless it ticks coarsely.
    if cpu == 0 || cpu > wall {
        wall
    } else {
        cpu
    }
}

/// What one close() of an unopened fd costs here, in ns (CPU time, best of three rounds of
/// `n`): the price of each iteration of a close-to-limit loop on this machine. `scan` and
/// `trace` both use it.
pub fn close_cost_ns(n: u32) -> f64 {
    time_closes(closed_fd(), n, 3) as f64 / f64::from(n)
}

/// Where tracefs is mounted on current systems.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Mounts tracefs at [`TRACEFS`] (root only), as perf does when it is missing.
pub fn mount_tracefs() -> std::io::Result<()> {
    let src = c"tracefs";
    let target = c"/sys/kernel/tracing";
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            src.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the syscall tracepoints can be named (tracefs holds `events/`); mounts tracefs
/// when it is missing and this process may.
pub fn ensure_tracefs() -> bool {
    let events = std::path::Path::new(TRACEFS).join("events");
    events.exists() || (mount_tracefs().is_ok() && events.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_more_fds_than_the_limit_is_refused() {
        let (soft, _) = nofile().expect("reads the limit");
        assert!(matches!(
            hold_fds(soft + 1),
            Err(SysError::TooManyFds { wanted, nofile }) if wanted == soft + 1 && nofile == soft
        ));
        assert_eq!(hold_fds(3).expect("holds nothing").len(), 0);
    }

    #[test]
    fn closed_fd_is_closed_and_close_costs_something() {
        let fd = closed_fd();
        // SAFETY: F_GETFD only probes.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1);
        let ns = close_cost_ns(1000);
        assert!(ns > 0.0 && ns < 100_000.0, "{ns}");
    }

    #[test]
    fn wait_status_codes() {
        assert_eq!(wait_status_code(3 << 8), 3);
        assert_eq!(wait_status_code(libc::SIGKILL), 128 + 9);
    }

    #[test]
    fn uname_names_linux() {
        assert!(uname().expect("uname works").starts_with("Linux "));
    }
}
