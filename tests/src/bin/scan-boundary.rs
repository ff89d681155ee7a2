//! Fixture for `fdaudit scan`'s `outside_root` rule (issue #22): holds fds opened before
//! it changed its root or mount namespace, and fds opened after, prints `ready PID` and
//! holds them until stdin closes (it closes the fds >= 3 it inherited first). Needs root (all modes but `plain`).
//!
//! Usage: scan-boundary plain | unshare ROOT | chroot ROOT OUTSIDE | exec-unshared PROG ARG...
//!
//! - `plain`: fd 7 is `/sys/fs/cgroup` (a directory, inheritable); nothing else is done.
//! - `unshare ROOT`: fd 7 as in `plain`, then `unshare(CLONE_NEWNS)`, every mount made
//!   private, a tmpfs mounted on `ROOT/sub`, `chroot(ROOT)`; then fd 8 is `/inside` (on the
//!   mount the root is on) and fd 9 `/sub/f` (on the tmpfs), both inheritable.
//! - `chroot ROOT OUTSIDE`: fd 7 is the file OUTSIDE (inheritable) and fd 10 the same
//!   file again (close-on-exec), then `chroot(ROOT)` in the same namespace; fd 8 is
//!   `/inside`.
//! - `exec-unshared PROG ARG...`: runs PROG in a mount namespace of its own (private
//!   copies of every mount), as a scanner in a container of its own would be; prints
//!   nothing of its own.

use std::ffi::CString;
use std::io::{Read as _, Write as _};

use fdaudit_tests::check;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// Opens `path` with `flags` and moves it to fd `at`.
fn open_at(path: &str, flags: libc::c_int, at: libc::c_int) {
    let p = cstr(path);
    // SAFETY: p is NUL-terminated; the fds are this process's own.
    unsafe {
        let fd = check(libc::open(p.as_ptr(), flags), &format!("open {path}"));
        let cloexec = if flags & libc::O_CLOEXEC != 0 {
            libc::O_CLOEXEC
        } else {
            0
        };
        check(libc::dup3(fd, at, cloexec), "dup3");
        check(libc::close(fd), "close");
    }
}

fn chroot(root: &str) {
    let r = cstr(root);
    // SAFETY: r is NUL-terminated.
    unsafe {
        check(libc::chroot(r.as_ptr()), &format!("chroot {root}"));
        check(libc::chdir(c"/".as_ptr()), "chdir /");
    }
}

/// A mount namespace of this process's own, every mount in it private.
fn private_mount_namespace() {
    // SAFETY: plain namespace and mount syscalls.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS), "unshare(CLONE_NEWNS)");
        check(
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ),
            "make every mount private",
        );
    }
}

fn unshare_mounts(root: &str) {
    let sub = cstr(&format!("{root}/sub"));
    private_mount_namespace();
    // SAFETY: a plain mount syscall with NUL-terminated strings.
    unsafe {
        check(
            libc::mount(
                c"tmpfs".as_ptr(),
                sub.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            ),
            "mount a tmpfs on ROOT/sub",
        );
    }
    std::fs::write(format!("{root}/sub/f"), b"f\n").expect("write ROOT/sub/f");
}

fn exec_unshared(argv: &[String]) -> ! {
    private_mount_namespace();
    use std::os::unix::process::CommandExt as _;
    let e = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    panic!("failed to exec {argv:?}: {e}");
}

fn main() {
    // Inherited fds (a test harness's lock file, a terminal's) would be outside too.
    // SAFETY: close_range(2) on this process's own fds; nothing else holds them.
    check(
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } as libc::c_int,
        "close_range(3, ~0)",
    );
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("exec-unshared") {
        exec_unshared(&args[1..]);
    }
    let dir = libc::O_RDONLY | libc::O_DIRECTORY;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["plain"] => open_at("/sys/fs/cgroup", dir, 7),
        ["unshare", root] => {
            open_at("/sys/fs/cgroup", dir, 7);
            unshare_mounts(root);
            chroot(root);
            open_at("/inside", libc::O_RDONLY, 8);
            open_at("/sub/f", libc::O_RDONLY, 9);
        }
        ["chroot", root, outside] => {
            open_at(outside, libc::O_RDONLY, 7);
            open_at(outside, libc::O_RDONLY | libc::O_CLOEXEC, 10);
            chroot(root);
            open_at("/inside", libc::O_RDONLY, 8);
        }
        _ => panic!("usage: scan-boundary plain | unshare ROOT | chroot ROOT OUTSIDE"),
    }
    let mut out = std::io::stdout();
    writeln!(out, "ready {}", std::process::id()).expect("write ready");
    out.flush().expect("flush");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
