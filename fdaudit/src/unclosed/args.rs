//! The command line of `fdaudit unclosed`.

use std::{ffi::OsString, path::PathBuf};

use crate::exit;

/// Arguments of `fdaudit unclosed`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Reports at the end (CMD's exit, the followed processes' exit, Ctrl-C) and \
every --interval. Fds open before tracing started are counted as `before tracing`, never given \
a stack; fds with no creation seen as `not seen` (docs/unclosed.md)."
)]
pub struct UnclosedArgs {
    /// Follow these running processes and their descendants.
    #[arg(short = 'p', long = "pid", value_name = "PID", num_args = 1..)]
    pub pids: Vec<u32>,

    /// Follow every process in this cgroup and the cgroups below it: those there now, and
    /// those that fork or exec there later; a path on the cgroup2 hierarchy
    /// (`/system.slice/nginx.service`) or under its mount point.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pids", "command"])]
    pub cgroup: Option<PathBuf>,

    /// Also report every SECONDS (default: only at the end).
    // A negative number is taken as the value, for run()'s message on it.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub interval: Option<f64>,

    /// Hide fds younger than SECONDS.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub min_age: f64,

    /// Show the N stacks holding most fds.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// JSON records (docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Write the report to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write flame-graph folded stacks (weight: outstanding fds) to FILE at each
    /// report (`flamegraph.pl FILE > fds.svg`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Also write the outstanding fds as a gzipped pprof profile (sample type
    /// outstanding_fds/count, one sample per stack) to FILE at each report
    /// (`go tool pprof -top FILE`).
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Exit 3 when a followed process (CMD exiting 0) exits holding fds it opened while
    /// followed; the verdict names the call sites.
    #[arg(long)]
    pub fail_on_unclosed: bool,

    /// Exit 3 when a followed process's outstanding set grew by N fds or more over the run
    /// (N at least 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fail_on_growth: Option<u64>,

    #[command(flatten)]
    pub policy_exit_code: exit::PolicyCode,

    /// The exit status when a gate was set and none failed, but the run is known to be
    /// incomplete (the live set was full, forks not followed), instead of 4: see
    /// --policy-exit-code (1 to 125, not 2).
    #[arg(long, value_name = "N", default_value_t = exit::INCOMPLETE, value_parser = exit::parse_verdict_code)]
    pub incomplete_exit_code: u8,

    /// The command to run and follow.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}
