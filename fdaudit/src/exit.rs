//! Every exit status fdaudit returns, in one place.

/// Success, or `--fail-on`/`--fail-on-leak` had nothing to fail on.
pub const OK: u8 = 0;
/// `scan --fail-on`: a finding at or above the severity exists. Also `doctor`: tracing
/// cannot work here; and `__spawner`: a child did not exit 0.
pub const FINDINGS: u8 = 1;
/// An error fdaudit reports (bad input, missing privileges, kernel refusal).
pub const ERROR: u8 = 2;
/// `trace --fail-on-leak`: a spawn leaked an fd.
pub const LEAK: u8 = 3;
/// `trace -- CMD`: the command could not be exec'd (as a shell says).
pub const NOT_EXECUTED: u8 = 127;
/// `trace` after Ctrl-C / SIGTERM / SIGHUP.
pub const INTERRUPTED: u8 = 130;

/// A shell-like exit status from a wait status: the code, or 128+signal (1 when neither).
pub fn from_wait_status(status: i32) -> u8 {
    u8::try_from(crate::sys::wait_status_code(status)).unwrap_or(1)
}
