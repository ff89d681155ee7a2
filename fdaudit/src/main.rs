//! `fdaudit`: audits how processes hand file descriptors to their children.

use std::process::ExitCode;

use clap::Parser as _;
use fdaudit::{
    cli::Cli,
    output::{is_broken_pipe, stream},
};

/// Records what the caller gave fdaudit (signal mask, ignored signals, closed stdio) before
/// the Rust runtime changes any of it (it fills closed fds 0-2 with /dev/null): see
/// `fdaudit::caller` and [`stream::guard_std_fds`].
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_CALLER: extern "C" fn() = fdaudit::caller::capture_at_start;

fn main() -> ExitCode {
    stream::guard_std_fds();
    let cli = Cli::parse();
    match fdaudit::cli::run(cli).and_then(|code| stream::finish().map(|()| code)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`fdaudit ... | head`): the output is incomplete, so not 0,
        // but there is no one to tell.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(fdaudit::exit::ERROR),
        Err(e) => {
            stream::report_error(&e);
            ExitCode::from(fdaudit::exit::ERROR)
        }
    }
}
