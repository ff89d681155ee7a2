//! Fixture: writes to the file named by its first argument everything a process inherits
//! from whoever started it, one `key value` line each, so that a run under `fdaudit trace`
//! can be compared with a run without it: ignored signals and the signal mask (captured
//! before the Rust runtime changes SIGPIPE), closed stdio, fds with their flags, environment,
//! limits, cwd, umask, credentials, session, process group, nice value and affinity.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

static IGNORED: AtomicU64 = AtomicU64::new(0);
static BLOCKED: AtomicU64 = AtomicU64::new(0);
static STDIO_CLOSED: AtomicU64 = AtomicU64::new(0);

/// Before main, so before the Rust runtime ignores SIGPIPE and opens /dev/null on closed
/// stdio fds.
#[used]
#[link_section = ".init_array"]
static CAPTURE: extern "C" fn() = capture;

extern "C" fn capture() {
    let (mut ign, mut blk, mut closed) = (0u64, 0u64, 0u64);
    // SAFETY: queries only (null new action, null new mask, F_GETFD).
    unsafe {
        for sig in 1..=64 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                ign |= 1 << (sig - 1);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
        for sig in 1..=64 {
            if libc::sigismember(&set, sig) == 1 {
                blk |= 1 << (sig - 1);
            }
        }
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                closed |= 1 << fd;
            }
        }
    }
    IGNORED.store(ign, Ordering::Relaxed);
    BLOCKED.store(blk, Ordering::Relaxed);
    STDIO_CLOSED.store(closed, Ordering::Relaxed);
}

fn main() {
    let out_path = std::env::args_os()
        .nth(1)
        .expect("usage: print-inherited OUTPUT_FILE");
    let mut r = String::new();
    let _ = writeln!(r, "ignored {:016x}", IGNORED.load(Ordering::Relaxed));
    let _ = writeln!(r, "blocked {:016x}", BLOCKED.load(Ordering::Relaxed));
    let closed = STDIO_CLOSED.load(Ordering::Relaxed);
    let _ = writeln!(r, "stdio_closed {closed:03b}");

    // Fds as the runtime left them; a closed stdio fd the runtime filled is not listed.
    let dir = std::fs::read_dir("/proc/self/fd").expect("read /proc/self/fd");
    let mut fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    for fd in fds {
        if fd < 3 && closed & (1 << fd) != 0 {
            continue;
        }
        let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
            continue; // the listing's own fd, closed by now
        };
        // SAFETY: fcntl queries on an fd number.
        let (fdflags, flflags) = unsafe {
            (
                libc::fcntl(fd, libc::F_GETFD),
                libc::fcntl(fd, libc::F_GETFL),
            )
        };
        let _ = writeln!(
            r,
            "fd {fd} {} fdflags {fdflags:#x} flags {flflags:#o}",
            target.display()
        );
    }

    let status = std::fs::read_to_string("/proc/self/status").expect("read status");
    for line in status.lines() {
        let key = line.split(':').next().unwrap_or("");
        if [
            "Umask",
            "SigBlk",
            "ShdPnd",
            "SigPnd",
            "CapInh",
            "CapPrm",
            "CapEff",
            "CapBnd",
            "CapAmb",
            "NoNewPrivs",
            "Seccomp",
            "Uid",
            "Gid",
            "Groups",
            "Cpus_allowed_list",
            "Mems_allowed_list",
        ]
        .contains(&key)
        {
            let _ = writeln!(
                r,
                "status {}",
                line.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("stat has a comm") + 2..]
        .split(' ')
        .collect();
    // Fields after the comm, from 0: 0 state, 2 pgrp, 3 session, 4 tty_nr, 5 tpgid,
    // 16 nice, 38 policy.
    for (name, i) in [
        ("pgrp", 2),
        ("session", 3),
        ("tty", 4),
        ("tpgid", 5),
        ("nice", 16),
    ] {
        let _ = writeln!(r, "{name} {}", fields.get(i).unwrap_or(&"?"));
    }
    for line in std::fs::read_to_string("/proc/self/limits")
        .expect("read limits")
        .lines()
    {
        let _ = writeln!(
            r,
            "limit {}",
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    for f in ["oom_score_adj", "personality", "loginuid", "sessionid"] {
        let v = std::fs::read_to_string(format!("/proc/self/{f}")).unwrap_or_default();
        let _ = writeln!(r, "{f} {}", v.trim());
    }
    let _ = writeln!(
        r,
        "cwd {}",
        std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    );
    let mut env: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("env {}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    env.sort();
    for e in env {
        let _ = writeln!(r, "{e}");
    }
    std::fs::write(&out_path, r).expect("write the report");
}
