//! fdaudit: audits how processes hand file descriptors to their children.
//!
//! A library only so that the binary's `.init_array` entry and `main` live in main.rs: its
//! modules are private, so the compiler sees what nothing uses.

use std::process::ExitCode;

use clap::Parser as _;

mod arch;
mod bench;
mod caller;
mod cgroup;
mod cli;
mod demo;
mod diff;
mod doctor;
mod engine;
mod exit;
mod fdkind;
mod held;
mod output;
mod procfs_util;
mod runtime;
mod scan;
mod signals;
mod spawner;
mod stats;
mod sys;
mod trace;
mod unclosed;
mod untrusted;
mod usage;
mod watch;

pub use caller::capture_at_start;

/// The eBPF object built by build.rs (empty when built with FDAUDIT_SKIP_EBPF=1).
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fdaudit-ebpf.o"));

/// fdaudit's `main`: parses the command line, runs the command, and turns its result into
/// the exit status.
pub fn main() -> ExitCode {
    use output::{is_broken_pipe, stream};
    stream::guard_std_fds();
    let cli = cli::Cli::parse();
    match cli::run(cli).and_then(|code| stream::finish().map(|()| code)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`fdaudit ... | head`): the output is incomplete, so not 0,
        // but there is no one to tell; 141 as for a program SIGPIPE ended.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::BROKEN_PIPE),
        Err(e) => {
            stream::report_error(&e);
            ExitCode::from(exit::ERROR)
        }
    }
}
