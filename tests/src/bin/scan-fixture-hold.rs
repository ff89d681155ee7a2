//! Benchmark fixture for `fdaudit scan`: opens about N fds (a mix of regular files,
//! directories, pipes, unix socket pairs and TCP sockets, every other one without
//! close-on-exec), prints `ready PID FDS` and holds them until stdin closes.
//!
//! Usage: scan-fixture-hold N

use std::io::{Read as _, Write as _};

fn check(ret: libc::c_int, what: &str) -> libc::c_int {
    if ret < 0 {
        panic!("failed to {what}: {}", std::io::Error::last_os_error());
    }
    ret
}

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
                // SAFETY: plain socket(2); bind/listen on 127.0.0.1:0 for every other one.
                let s = check(
                    unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) },
                    "create a socket",
                );
                if i.is_multiple_of(2) {
                    let addr = libc::sockaddr_in {
                        sin_family: libc::AF_INET as libc::sa_family_t,
                        sin_port: 0,
                        sin_addr: libc::in_addr {
                            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                        },
                        sin_zero: [0; 8],
                    };
                    // SAFETY: addr is a valid sockaddr_in.
                    unsafe {
                        check(
                            libc::bind(
                                s,
                                (&addr as *const libc::sockaddr_in).cast(),
                                std::mem::size_of_val(&addr) as u32,
                            ),
                            "bind",
                        );
                        check(libc::listen(s, 1), "listen");
                    }
                }
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
