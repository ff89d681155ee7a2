//! Live-test fixture for `fdaudit scan`: opens fds of known kinds, prints one line
//!
//! `pid=P baseline=0,1,2 file=F sock=S port=N pipe_r=R pipe_w=W memfd=M dir=D`
//!
//! and holds them until stdin closes. `baseline` lists the fds it had before opening any
//! (what the environment leaked into it), so tests compare against it, not an absolute list.
//! - `file`: /etc/passwd, O_RDONLY | O_CLOEXEC
//! - `sock`: TCP socket listening on 127.0.0.1:`port`, inheritable
//! - `pipe_r` / `pipe_w`: a pipe; the read end close-on-exec, the write end inheritable
//! - `memfd`: memfd "scan-fixture", inheritable
//! - `dir`: /tmp, O_RDONLY | O_DIRECTORY, inheritable

use std::io::{Read as _, Write as _};

use fdaudit_tests::{check, listen_loopback};

fn main() {
    let mut baseline: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .expect("failed to list /proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    baseline.sort_unstable();
    // read_dir's own fd was open while listing; drop it if it is not open any more.
    // SAFETY: fcntl(F_GETFD) only queries.
    baseline.retain(|&fd| unsafe { libc::fcntl(fd as i32, libc::F_GETFD) } >= 0);

    // SAFETY: plain syscalls on NUL-terminated strings and local buffers.
    unsafe {
        let file = check(
            libc::open(c"/etc/passwd".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
            "open /etc/passwd",
        );
        let (sock, port) = listen_loopback(4);
        let mut p = [0; 2];
        check(libc::pipe(p.as_mut_ptr()), "create a pipe");
        check(
            libc::fcntl(p[0], libc::F_SETFD, libc::FD_CLOEXEC),
            "set FD_CLOEXEC",
        );
        let memfd = check(
            libc::memfd_create(c"scan-fixture".as_ptr(), 0),
            "memfd_create",
        );
        let dir = check(
            libc::open(c"/tmp".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY),
            "open /tmp",
        );
        let base: Vec<String> = baseline.iter().map(u32::to_string).collect();
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "pid={} baseline={} file={file} sock={sock} port={port} pipe_r={} pipe_w={} memfd={memfd} dir={dir}",
            std::process::id(),
            base.join(","),
            p[0],
            p[1],
        )
        .expect("failed to write to stdout");
        out.flush().expect("failed to flush stdout");
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
