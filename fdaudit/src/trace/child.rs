//! The traced command once released ([`crate::held`] forks and holds it): waited for, or
//! abandoned when tracing fails.

use anyhow::Result;

/// Waits for the command until it exits; a signal to fdaudit (Ctrl-C) stops the wait.
pub fn wait_for_command(pid: u32) -> Result<Option<i32>> {
    loop {
        if let Some(st) = crate::engine::wait::try_wait(pid)? {
            return Ok(Some(st));
        }
        if crate::signals::received().is_some() {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Detaches `session` before the summary, and with `untraced` (`--duration` ended while the
/// command runs) waits for that command, untraced; its status. The links are handed to a
/// child that closes them after fdaudit's exit ([`Session::detach_after_exit`]) only when
/// fdaudit exits next: while it waits for the command that child would keep every program
/// attached, machine-wide, for as long as the command runs.
///
/// [`Session::detach_after_exit`]: crate::engine::session::Session::detach_after_exit
pub fn detach_then_wait(
    mut session: crate::engine::session::Session,
    untraced: Option<u32>,
) -> Result<Option<i32>> {
    if untraced.is_none() {
        session.detach_after_exit();
    }
    drop(session);
    let Some(pid) = untraced else {
        return Ok(None);
    };
    crate::output::stream::note(
        crate::output::stream::Level::Note,
        &format!(
            "--duration ended: probes detached; waiting for the command (pid {pid}) to exit, untraced"
        ),
    );
    wait_for_command(pid)
}

/// Tracing failed (the output could not be written: a full file system, a reader gone):
/// detach, and with `-- CMD` wait for the command, untraced, rather than orphan it; then the
/// error ends fdaudit (exit 2).
pub fn abandon(
    session: crate::engine::session::Session,
    child: Option<u32>,
    e: anyhow::Error,
) -> anyhow::Error {
    drop(session);
    if let Some(pid) = child {
        // stderr, not the records stream: that is what failed; and without a panic when the
        // stream was stderr (`-- CMD`'s records go there) and its reader is gone.
        crate::diag!(
            "fdaudit: tracing stopped ({e:#}); waiting for the command (pid {pid}) to exit, untraced"
        );
        let _ = wait_for_command(pid);
    }
    e
}
