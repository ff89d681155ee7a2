//! Every exit status fdaudit returns, in one place (README's "Exit status" table lists them
//! per subcommand). `scan --fail-on`, `trace`'s gates and `diff` share [`POLICY`]; with
//! `trace -- CMD` the command's own status wins over the leak verdict unless it is 0.

/// Success, or `--fail-on`/`--fail-on-leak` had nothing to fail on.
pub const OK: u8 = 0;
/// `doctor`: tracing cannot work here; `bench`: a spawn failed or a traced count did not
/// match; `__spawner`: a child did not exit 0.
pub const FAILED: u8 = 1;
/// An error fdaudit reports (bad input, missing privileges, kernel refusal, lost output).
pub const ERROR: u8 = 2;
/// A CI policy was violated: `scan --fail-on` found a finding at or above the severity;
/// a `trace` gate (`--fail-on-leak`, `--fail-on-strategy`, `--max-closes`) failed (and CMD
/// itself exited 0); `diff` found a regression.
pub const POLICY: u8 = 3;
/// `trace`: a gate (`--fail-on-leak`, `--fail-on-strategy`, `--max-closes`) was set and
/// none failed on what was seen, CMD exited 0, but the trace is known to be incomplete
/// (records lost, runs the kernel skipped, forks not traced): no gate passes on data known
/// to be incomplete. A gate that failed on what was seen is [`POLICY`].
pub const INCOMPLETE: u8 = 4;
/// The output's reader went away (`fdaudit scan | head`): nothing is said, and the status
/// is the one a shell reports for a program SIGPIPE killed (128 + 13), as `yes | head` gives.
pub const BROKEN_PIPE: u8 = 141;
/// `trace -- CMD`: the command was found but is not executable (as a shell says).
pub const NOT_EXECUTABLE: u8 = 126;
/// `trace -- CMD`: the command could not be exec'd (as a shell says).
pub const NOT_EXECUTED: u8 = 127;
/// `trace -- CMD`: fdaudit went away before the command could exec (SIGINT's 128+N).
pub const INTERRUPTED: u8 = 130;

/// After a signal stopped fdaudit: 128+N, as a shell reports a process signal N ended
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
pub fn from_signal(sig: i32) -> u8 {
    u8::try_from(128 + sig).unwrap_or(INTERRUPTED)
}

/// A shell-like exit status from a wait status: the code, or 128+signal (1 when neither).
pub fn from_wait_status(status: i32) -> u8 {
    u8::try_from(crate::sys::wait_status_code(status)).unwrap_or(1)
}
