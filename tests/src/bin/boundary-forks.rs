//! Fixture for spawn boundaries that the parent at the fork does not show (issue #37,
//! finding 5): code that holds an fd changes what it runs as (a privilege drop and one more
//! fork, a chroot, a setuid helper dropping back) before a later image inherits the fd.
//! Needs root (or its setuid copy). It passes every fd it inherited on (the test's leaked
//! fd among them).
//!
//! Usage: boundary-forks drop PROG ARG... | chroot ROOT PROG ARG... | helper FILE PROG ARG...
//!
//! - `drop PROG ARG...`: forks; the child drops to uid and gid 65534 (nobody, no groups)
//!   without exec'ing, forks again, and that grandchild execs PROG. Exits with PROG's
//!   status.
//! - `chroot ROOT PROG ARG...`: `chroot(ROOT)` in the same namespaces, then execs PROG (a
//!   path inside ROOT).
//! - `helper FILE PROG ARG...`: a setuid-root helper's shape (the test installs a copy of
//!   this fixture setuid root): opens FILE as fd 8, inheritable, with the privilege it was
//!   exec'd with, drops back to its real uid and gid, then execs PROG.

use std::os::unix::process::CommandExt as _;

use fdaudit_tests::check;

/// Forks; the child runs `f` (which exits or execs), the parent waits for it and returns
/// its exit status (1 when it did not exit).
fn fork_and_wait(f: impl FnOnce()) -> i32 {
    // SAFETY: the fixture is single-threaded.
    let pid = check(unsafe { libc::fork() }, "fork");
    if pid == 0 {
        f();
        std::process::exit(127);
    }
    let mut status = 0;
    // SAFETY: waitpid on our own child into a local.
    check(unsafe { libc::waitpid(pid, &mut status, 0) }, "waitpid");
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    }
}

/// Drops to nobody: no supplementary groups, then gid, then uid (real, effective, saved).
fn drop_to_nobody() {
    // SAFETY: plain credential syscalls on this process.
    unsafe {
        check(libc::setgroups(0, std::ptr::null()), "setgroups(0)");
        check(libc::setresgid(65534, 65534, 65534), "setresgid(65534)");
        check(libc::setresuid(65534, 65534, 65534), "setresuid(65534)");
    }
}

fn chroot(root: &str) {
    let r = std::ffi::CString::new(root).expect("no NUL");
    // SAFETY: r is NUL-terminated.
    unsafe {
        check(libc::chroot(r.as_ptr()), &format!("chroot {root}"));
        check(libc::chdir(c"/".as_ptr()), "chdir /");
    }
}

/// Opens `path` read-only and moves it to fd 8, inheritable.
fn open_fd8(path: &str) {
    let p = std::ffi::CString::new(path).expect("no NUL");
    // SAFETY: p is NUL-terminated; the fds are this process's own.
    unsafe {
        let fd = check(
            libc::open(p.as_ptr(), libc::O_RDONLY),
            &format!("open {path}"),
        );
        // Opened at 8 itself (fewer fds open): kept there, not closed after a no-op dup2.
        if fd != 8 {
            check(libc::dup2(fd, 8), "dup2 to 8");
            check(libc::close(fd), "close");
        }
    }
}

/// Back to the real uid and gid, effective and saved ones included.
fn drop_to_real_ids() {
    // SAFETY: plain credential syscalls on this process.
    unsafe {
        let (uid, gid) = (libc::getuid(), libc::getgid());
        check(libc::setresgid(gid, gid, gid), "setresgid(real)");
        check(libc::setresuid(uid, uid, uid), "setresuid(real)");
    }
}

fn exec(argv: &[String]) -> ! {
    let e = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    panic!("failed to exec {argv:?}: {e}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match args.first().map(String::as_str) {
        Some("drop") if args.len() > 1 => fork_and_wait(|| {
            drop_to_nobody();
            std::process::exit(fork_and_wait(|| exec(&args[1..])))
        }),
        Some("chroot") if args.len() > 2 => {
            chroot(&args[1]);
            exec(&args[2..])
        }
        Some("helper") if args.len() > 2 => {
            open_fd8(&args[1]);
            drop_to_real_ids();
            exec(&args[2..])
        }
        _ => panic!(
            "usage: boundary-forks drop PROG ARG... | chroot ROOT PROG ARG... | \
             helper FILE PROG ARG..."
        ),
    };
    std::process::exit(status);
}
