//! `fdaudit`: audits how processes hand file descriptors to their children.

use std::process::ExitCode;

use clap::Parser as _;
use fdaudit::{cli::Cli, diag, output::is_broken_pipe};

/// Records what the caller gave fdaudit (signal mask, ignored signals, closed stdio) before
/// the Rust runtime changes any of it: see `fdaudit::caller`.
#[used]
#[link_section = ".init_array"]
static CAPTURE_CALLER: extern "C" fn() = fdaudit::caller::capture_at_start;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match fdaudit::cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        // The reader of our output went away (`fdaudit ... | head`): nothing to say.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            diag!("error: {e}");
            for cause in e.chain().skip(1) {
                diag!("caused by: {cause}");
            }
            ExitCode::from(fdaudit::exit::ERROR)
        }
    }
}
