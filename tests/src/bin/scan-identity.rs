//! Fixture for `fdaudit scan` verdicts a user cannot hide (issue #26): drops to nobody
//! (uid and gid 65534, no groups; all modes but `hold-keys`), sets up one case, prints `ready PID PORT` and holds its
//! fds until stdin closes.
//!
//! Usage: scan-identity netns | leader-exit | unshare-files | deep-move BASE | hold-keys DIR
//!
//! - `netns`: an inheritable TCP listener on 127.0.0.1 and an inheritable unix listener
//!   (abstract), then `unshare(CLONE_NEWUSER | CLONE_NEWNET)`: both sockets stay in the
//!   first namespace, `/proc/PID/net` shows the new, empty one.
//! - `leader-exit`: a worker thread holds an inheritable TCP listener and the main thread
//!   exits with `exit(2)` (as `pthread_exit` does; `/proc/PID/fd` is then empty).
//! - `unshare-files`: a worker thread calls `unshare(CLONE_FILES)` and opens an inheritable
//!   TCP listener in its private fd table (`/proc/PID/fd` does not show it).
//! - `deep-move BASE`: makes 24 nested directories of 200-byte names under BASE and moves
//!   `BASE/keys` to the bottom (its path is then past PATH_MAX), then exits.
//! - `hold-keys DIR` (stays root): holds DIR (`O_DIRECTORY`) and DIR/id_rsa (writable),
//!   both inheritable; prints `ready PID DIRFD FILEFD`.

use std::io::{Read as _, Write as _};

use fdaudit_tests::{check, listen_loopback};

fn drop_to_nobody() {
    // SAFETY: plain credential syscalls.
    unsafe {
        check(libc::setgroups(0, std::ptr::null()), "setgroups");
        check(libc::setresgid(65534, 65534, 65534), "setresgid");
        check(libc::setresuid(65534, 65534, 65534), "setresuid");
    }
}

/// An inheritable unix stream socket listening on an abstract name.
fn listen_unix() -> libc::c_int {
    // SAFETY: plain socket syscalls on a local sockaddr_un.
    unsafe {
        let s = check(
            libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
            "create a unix socket",
        );
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let name = format!("fdaudit-scan-identity-{}", std::process::id());
        for (i, b) in name.bytes().enumerate() {
            addr.sun_path[i + 1] = b as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        check(
            libc::bind(s, (&addr as *const libc::sockaddr_un).cast(), len),
            "bind a unix socket",
        );
        check(libc::listen(s, 8), "listen on a unix socket");
        s
    }
}

/// Prints `ready PID PORT` and waits for stdin to close, then exits the whole process.
fn ready_and_hold(port: u16) -> ! {
    let mut out = std::io::stdout();
    writeln!(out, "ready {} {port}", std::process::id()).expect("write to stdout");
    out.flush().expect("flush stdout");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0)
}

/// As the caller (root): an inheritable `O_DIRECTORY` fd of DIR and a writable, inheritable
/// fd of DIR/id_rsa; prints `ready PID DIRFD FILEFD`.
fn hold_keys() -> ! {
    let dir = std::env::args().nth(2).expect("hold-keys DIR");
    let d = std::ffi::CString::new(dir.as_str()).expect("no NUL");
    let f = std::ffi::CString::new(format!("{dir}/id_rsa")).expect("no NUL");
    // SAFETY: NUL-terminated paths; no O_CLOEXEC, so both are inheritable.
    let (dfd, ffd) = unsafe {
        (
            check(
                libc::open(d.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY),
                "open DIR",
            ),
            check(
                libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_APPEND),
                "open DIR/id_rsa",
            ),
        )
    };
    let mut out = std::io::stdout();
    writeln!(out, "ready {} {dfd} {ffd}", std::process::id()).expect("write to stdout");
    out.flush().expect("flush stdout");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0)
}

fn main() {
    let mode = std::env::args()
        .nth(1)
        .expect("usage: scan-identity netns|leader-exit|unshare-files|deep-move BASE");
    if mode == "hold-keys" {
        hold_keys();
    }
    drop_to_nobody();
    match mode.as_str() {
        "netns" => {
            let (_tcp, port) = listen_loopback(8);
            let _unix = listen_unix();
            // SAFETY: no arguments but flags.
            check(
                unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) },
                "unshare(CLONE_NEWUSER | CLONE_NEWNET)",
            );
            ready_and_hold(port)
        }
        "leader-exit" => {
            std::thread::spawn(|| {
                let (_tcp, port) = listen_loopback(8);
                // Ready once the main thread is gone: /proc/PID/fd then lists nothing.
                let fd_dir = format!("/proc/{}/fd", std::process::id());
                for _ in 0..500 {
                    if std::fs::read_dir(&fd_dir).is_ok_and(|mut d| d.next().is_none()) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                ready_and_hold(port)
            });
            // The raw exit(2) ends only the main thread, as pthread_exit does, without
            // unwinding through Rust frames. SAFETY: nothing of this thread is used after.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
            unreachable!("exit(2) returned")
        }
        "unshare-files" => {
            let worker = std::thread::spawn(|| {
                // SAFETY: no arguments but flags.
                check(
                    unsafe { libc::unshare(libc::CLONE_FILES) },
                    "unshare(CLONE_FILES)",
                );
                let (_tcp, port) = listen_loopback(8);
                ready_and_hold(port)
            });
            let _ = worker.join();
        }
        "deep-move" => {
            let base = std::env::args().nth(2).expect("deep-move BASE");
            std::env::set_current_dir(&base).expect("chdir to BASE");
            let name = "d".repeat(200);
            for _ in 0..24 {
                std::fs::create_dir(&name).expect("mkdir");
                // Relative: the whole path is past PATH_MAX.
                std::env::set_current_dir(&name).expect("chdir");
            }
            std::fs::rename(format!("{base}/keys"), "keys").expect("move BASE/keys down");
        }
        other => panic!("unknown mode {other}"),
    }
}
