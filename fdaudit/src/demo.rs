//! `fdaudit __demo`: the built-in workload `trace --demo` runs. It holds a credentials-like
//! file and a listening socket without close-on-exec, then spawns /bin/true with the closing
//! strategies runtimes use: some leak both fds, the close loop pays for every possible fd.

use std::{ffi::OsString, net::TcpListener, os::fd::AsRawFd as _};

use anyhow::{Context as _, Result};

use crate::spawner::{CloseMethod, Spawner};
use crate::sys;

/// Arguments of the internal `__demo` command.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// The strategies the demo spawns with, in order.
pub const DEMO_STRATEGIES: [CloseMethod; 5] = [
    CloseMethod::None,
    CloseMethod::CloseLoop,
    CloseMethod::PollScan,
    CloseMethod::CloseRange,
    CloseMethod::PosixSpawn,
];

pub fn run(_args: DemoArgs) -> Result<u8> {
    sys::close_inherited_fds().context("failed to close inherited fds")?;
    let (_, hard) = sys::nofile().context("failed to read RLIMIT_NOFILE")?;
    sys::set_nofile(hard).context("failed to raise the soft RLIMIT_NOFILE")?;

    let path =
        std::env::temp_dir().join(format!("fdaudit-demo-{}-credentials", std::process::id()));
    std::fs::write(&path, b"token=not-a-real-secret\n")
        .with_context(|| format!("failed to write {}", path.display()))?;
    let secret = std::fs::File::open(&path).context("failed to open the demo file")?;
    let listener = TcpListener::bind("127.0.0.1:0").context("failed to listen on 127.0.0.1")?;
    // Both as runtimes without O_CLOEXEC discipline would have them: inheritable, and the
    // file at fd 7.
    // SAFETY: dup2/fcntl on fds we own.
    unsafe {
        libc::dup2(secret.as_raw_fd(), 7);
        let fl = libc::fcntl(listener.as_raw_fd(), libc::F_GETFD);
        libc::fcntl(listener.as_raw_fd(), libc::F_SETFD, fl & !libc::FD_CLOEXEC);
    }
    drop(secret);
    let cmd = [OsString::from("/bin/true")];
    let mut failed = 0;
    for s in DEMO_STRATEGIES {
        let mut sp = Spawner::new(s, &cmd).with_context(|| format!("failed to prepare {s}"))?;
        let r = sp
            .spawn_once()
            .with_context(|| format!("failed to spawn with {s}"))?;
        failed += u8::from(!r.success());
    }
    // SAFETY: closing the fd we dup'ed.
    unsafe { libc::close(7) };
    let _ = std::fs::remove_file(&path);
    drop(listener);
    Ok(u8::from(failed > 0))
}
