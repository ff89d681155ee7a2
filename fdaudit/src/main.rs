//! `fdaudit`: audits how processes hand file descriptors to their children.

use std::process::ExitCode;

use clap::Parser as _;
use fdaudit::{
    cli::Cli,
    output::{is_broken_pipe, stream},
};

fn main() -> ExitCode {
    // Before anything is opened: a closed stdout must not be reused by a file fdaudit opens.
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
