//! The traced command once released ([`crate::held`] forks and holds it): waited for, or
//! abandoned when tracing fails.

use anyhow::Result;

/// Waits for the command until it exits; a signal to fdaudit (Ctrl-C) stops the wait.
pub fn wait_for_command(pid: u32) -> Result<Option<i32>> {
    loop {
        if let Some(st) = crate::tracer::wait::try_wait(pid)? {
            return Ok(Some(st));
        }
        if crate::signals::received().is_some() {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Tracing failed (the output could not be written: a full file system, a reader gone):
/// detach, and with `-- CMD` wait for the command, untraced, rather than orphan it; then the
/// error ends fdaudit (exit 2).
pub fn abandon(
    session: crate::tracer::session::Session,
    child: Option<u32>,
    e: anyhow::Error,
) -> anyhow::Error {
    drop(session);
    if let Some(pid) = child {
        // stderr, not the records stream: that is what failed.
        eprintln!(
            "fdaudit: tracing stopped ({e:#}); waiting for the command (pid {pid}) to exit, untraced"
        );
        let _ = wait_for_command(pid);
    }
    e
}
