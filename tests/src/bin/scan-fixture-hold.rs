//! Benchmark fixture for `fdaudit scan`: opens about N fds (a mix of regular files,
//! directories, pipes, unix socket pairs and TCP sockets, every other one without
//! close-on-exec), prints `ready PID FDS` and holds them until stdin closes.
//!
//! Usage: scan-fixture-hold N

use std::io::{Read as _, Write as _};

use fdaudit_tests::{check, listen_loopback};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .expect("usage: scan-fixture-hold N");
    let mut fds: Vec<libc::c_int> = Vec::with_capacity(n);
    let files = [
        c"/etc/passwd",
        c"/etc/hosts",
        c"/etc/os-release",
        c"/proc/self/exe",
    ];
    let dirs = [c"/", c"/etc", c"/usr", c"/tmp", c"/var"];
    let tmp = std::env::temp_dir().join(format!("scan-fixture-hold.{}", std::process::id()));
    let tmp = std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut i = 0usize;
    while fds.len() < n {
        // 32% files, 20% directories, 24% pipes, 16% unix socketpairs, 8% TCP sockets.
        match i % 25 {
            0..=7 => {
                let (path, flags) = if i.is_multiple_of(2) {
                    (files[i % files.len()], libc::O_RDONLY)
                } else {
                    (tmp.as_c_str(), libc::O_RDWR | libc::O_CREAT)
                };
                // SAFETY: NUL-terminated path.
                fds.push(check(
                    unsafe { libc::open(path.as_ptr(), flags, 0o600) },
                    "open a file",
                ));
            }
            8..=12 => {
                let d = dirs[i % dirs.len()];
                // SAFETY: NUL-terminated path.
                fds.push(check(
                    unsafe { libc::open(d.as_ptr(), libc::O_RDONLY) },
                    "open a directory",
                ));
            }
            13..=15 => {
                let mut p = [0; 2];
                // SAFETY: p has room for two fds.
                check(unsafe { libc::pipe(p.as_mut_ptr()) }, "create a pipe");
                fds.extend(p);
            }
            16..=19 => {
                let mut p = [0; 2];
                // SAFETY: p has room for two fds.
                check(
                    unsafe {
                        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, p.as_mut_ptr())
                    },
                    "create a socket pair",
                );
                fds.extend(p);
            }
            _ => {
                // Every other one listens on 127.0.0.1:0; the rest stay unbound.
                let s = if i.is_multiple_of(2) {
                    listen_loopback(1).0
                } else {
                    // SAFETY: plain socket(2).
                    check(
                        unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) },
                        "create a socket",
                    )
                };
                fds.push(s);
            }
        }
        i += 1;
    }
    // SAFETY: unlink of our own temp file.
    unsafe { libc::unlink(tmp.as_ptr()) };
    for (k, &fd) in fds.iter().enumerate() {
        if k % 2 == 0 {
            // SAFETY: fd is ours.
            check(
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
                "set FD_CLOEXEC",
            );
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {} {}", std::process::id(), fds.len()).expect("failed to write to stdout");
    out.flush().expect("failed to flush stdout");
    drop(out);
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
