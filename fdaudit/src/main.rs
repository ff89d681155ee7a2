//! `fdaudit`: audits how processes hand file descriptors to their children.

use std::process::ExitCode;

use clap::Parser as _;
use fdaudit::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match fdaudit::cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("caused by: {cause}");
            }
            ExitCode::from(fdaudit::cli::EXIT_ERROR)
        }
    }
}
