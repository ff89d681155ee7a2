//! The `fdaudit` command line, built inside this test crate so that the integration tests
//! get its path from `CARGO_BIN_EXE_scan-fixture-cli` (Cargo only sets `CARGO_BIN_EXE_*`
//! for binaries of the package under test). Same entry point as fdaudit's main.rs.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    match fdaudit::cli::run(fdaudit::cli::Cli::parse()) {
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
