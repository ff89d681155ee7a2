//! Fixture for the bench tests: prints each open fd ≥ 3 as `fd<TAB>target`, one a line.
//!
//! It probes fds with fcntl(F_GETFD) instead of reading /proc/self/fd, so it opens no fd
//! of its own while it looks.

fn main() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        eprintln!("bench-fdlist: getrlimit failed");
        std::process::exit(2);
    }
    let soft = libc::c_int::try_from(lim.rlim_cur).unwrap_or(libc::c_int::MAX);
    for fd in 3..soft {
        // SAFETY: F_GETFD only queries the fd.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|p| p.display().to_string())
                .unwrap_or_else(|e| format!("? ({e})"));
            println!("{fd}\t{target}");
        }
    }
}
