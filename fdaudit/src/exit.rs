//! Every exit status fdaudit returns, in one place (README's "Exit status" table lists them
//! per subcommand). `scan --fail-on` and `trace --fail-on-leak` share [`POLICY`]; with
//! `trace -- CMD` the command's own status wins over the leak verdict unless it is 0.

/// Success, or `--fail-on`/`--fail-on-leak` had nothing to fail on.
pub const OK: u8 = 0;
/// `doctor`: tracing cannot work here; `bench`: a spawn failed or a traced count did not
/// match; `__spawner`: a child did not exit 0.
pub const FAILED: u8 = 1;
/// An error fdaudit reports (bad input, missing privileges, kernel refusal, lost output).
pub const ERROR: u8 = 2;
/// A CI policy was violated: `scan --fail-on` found a finding at or above the severity;
/// `trace --fail-on-leak` saw a spawn leak an fd (and CMD itself exited 0).
pub const POLICY: u8 = 3;
/// `trace -- CMD`: the command was found but is not executable (as a shell says).
pub const NOT_EXECUTABLE: u8 = 126;
/// `trace -- CMD`: the command could not be exec'd (as a shell says).
pub const NOT_EXECUTED: u8 = 127;
/// `trace` after Ctrl-C / SIGTERM / SIGHUP.
pub const INTERRUPTED: u8 = 130;

/// A shell-like exit status from a wait status: the code, or 128+signal (1 when neither).
pub fn from_wait_status(status: i32) -> u8 {
    u8::try_from(crate::sys::wait_status_code(status)).unwrap_or(1)
}
