//! `fdaudit`: audits how processes hand file descriptors to their children.

use std::process::ExitCode;

/// Records what the caller gave fdaudit (signal mask, ignored signals, closed stdio) before
/// the Rust runtime changes any of it (it fills closed fds 0-2 with /dev/null): see
/// `fdaudit::caller` and `output::stream::guard_std_fds`.
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_CALLER: extern "C" fn() = fdaudit::capture_at_start;

fn main() -> ExitCode {
    fdaudit::main()
}
