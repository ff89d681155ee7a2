//! `trace`'s arguments resolved once, as ripgrep's low-level arguments become its high-level
//! ones: [`TracePlan::new`] is the only reader of [`TraceArgs`] (besides clap), and each
//! part of `trace` takes from the plan what it needs (the session's options, the
//! reporter's, the output filter, how long to follow), never a flag to derive again.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};

use super::{filter::Filter, report, targets::HeldFd, TraceArgs};
use crate::{
    cgroup::Followed,
    engine::{counting::Counting, drain, ebpf::BackendChoice, session::SessionOptions},
    output::stream::{Dest, StdStream},
};

/// What `trace` was asked to do, resolved from its arguments.
#[derive(Debug)]
pub struct TracePlan {
    /// `-p`: the running processes to follow.
    pub pids: Vec<u32>,
    /// `-- CMD`, or the built-in workload with `--demo`.
    pub command: Vec<OsString>,
    /// `--cgroup`.
    pub cgroup: Option<PathBuf>,
    /// What the kernel counts (`--no-syscalls`, `--reads`).
    pub counting: Counting,
    /// The records' stream, `--perfetto`, `--junit` and how much to say.
    pub out: OutputPlan,
    /// How long to follow.
    pub follow: FollowPlan,
    /// The exit statuses of a failed gate and of an incomplete trace.
    pub codes: (u8, u8),
    origin: bool,
    buffer_pages: Option<u64>,
    backend: BackendChoice,
    report: report::ReportOptions,
    filter: FilterArgs,
}

/// Where `trace` writes and how much it says.
#[derive(Debug)]
pub struct OutputPlan {
    /// `-o FILE`, else stdout (or stderr when fdaudit runs a command).
    pub records: Dest,
    pub json: bool,
    /// Only warnings and verdicts on the text stream.
    pub quiet: bool,
    pub verbose: bool,
    pub perfetto: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    /// `--sarif FILE`, `--source-root DIR`.
    pub sarif: crate::output::sarif::SarifArgs,
}

/// How long `trace` follows the processes.
#[derive(Debug, Clone, Copy)]
pub struct FollowPlan {
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--kill-after`: how long a command is still traced after a signal stopped fdaudit.
    pub kill_after: Duration,
    /// Follow what the command left running after its exit (no `--no-wait-tree`).
    pub wait_tree: bool,
}

/// The output filters' arguments, made into a [`Filter`] when tracing starts.
#[derive(Debug)]
struct FilterArgs {
    exec: Vec<String>,
    comm: Vec<String>,
    parent_comm: Vec<String>,
    only_leaks: bool,
    min_closes: u32,
}

impl TracePlan {
    /// Resolves `args`: checks the exit codes asked for, and with `--demo` makes the command
    /// fdaudit's own demo workload.
    pub fn new(args: TraceArgs) -> Result<TracePlan> {
        let codes = (args.policy_exit_code.code, args.incomplete_exit_code);
        if codes.0 == codes.1 {
            anyhow::bail!(
                "--policy-exit-code and --incomplete-exit-code are both {}: give them different statuses, so that a failed gate and an incomplete trace stay apart",
                codes.1
            );
        }
        let command = if args.demo {
            let me = std::env::current_exe().context("failed to find fdaudit's own executable")?;
            vec![me.into_os_string(), "__demo".into()]
        } else {
            args.command
        };
        // With a command, stdout and stderr are the command's; fdaudit writes where strace does.
        let default = if command.is_empty() {
            StdStream::Stdout
        } else {
            StdStream::Stderr
        };
        Ok(TracePlan {
            counting: Counting::new(!args.no_syscalls, args.reads),
            out: OutputPlan {
                records: Dest::new(args.output.as_deref(), default),
                json: args.json,
                quiet: args.quiet,
                verbose: args.verbose,
                perfetto: args.perfetto,
                junit: args.junit,
                sarif: args.sarif.clone(),
            },
            follow: FollowPlan {
                duration: args.duration,
                kill_after: args.kill_after,
                wait_tree: !args.no_wait_tree,
            },
            report: report::ReportOptions {
                json: args.json,
                quiet: args.quiet,
                no_baseline: args.no_baseline,
                held_at_attach: None,
                ignore_fds: args.ignore_fds,
                allow: args.allow_leak,
                kinds: args.fail_on_leak_kind,
                gates: report::GateOptions {
                    leak_gate: args.fail_on_leak,
                    strategies: args.fail_on_strategy,
                    max_closes: args.max_closes,
                },
                time: args.time,
                relative: args.relative,
            },
            filter: FilterArgs {
                exec: args.exec,
                comm: args.comm,
                parent_comm: args.parent_comm,
                only_leaks: args.only_leaks,
                min_closes: args.min_closes,
            },
            codes,
            // --sarif turns on --origin: a location is the origin's frame.
            origin: args.origin || args.sarif.sarif.is_some(),
            buffer_pages: args.buffer_pages,
            backend: args.backend,
            pids: args.pids,
            command,
            cgroup: args.cgroup,
        })
    }

    /// The `-p` targets checked in /proc (or the error that there is nothing to trace).
    pub fn targets(&self) -> Result<Vec<u32>> {
        super::targets::check_targets(
            &self.pids,
            !self.command.is_empty(),
            self.cgroup.is_some(),
            super::targets::Follower::Trace,
        )
    }

    /// The output filters (`--exec`, `--comm`, `--parent-comm`, `--only-leaks`,
    /// `--min-closes`); Err names a bad glob.
    pub fn filter(&self) -> Result<Filter> {
        let f = &self.filter;
        Filter::new(&f.exec, &f.comm, &f.parent_comm, f.only_leaks, f.min_closes)
    }

    /// What the session attaches, following `followed` (`--cgroup`); Err on a bad
    /// `--buffer-pages`.
    pub fn session_options(&self, followed: Option<&Followed>) -> Result<SessionOptions> {
        let ring_bytes = self
            .buffer_pages
            .map(|p| drain::ring_bytes_from_pages(p, drain::page_size()))
            .transpose()?;
        Ok(SessionOptions {
            counting: self.counting,
            origin: self.origin,
            unclosed: false,
            ring_bytes,
            backend: self.backend,
            cgroup: followed.map(|f| (f.id, f.level)),
            cgroup_dir: followed.map(|f| f.dir.clone()),
            agent: false,
        })
    }

    /// What the reporter takes, and with `-p` what the processes held at attach.
    pub fn report_options(&self, held: Option<Vec<HeldFd>>) -> report::ReportOptions {
        report::ReportOptions {
            held_at_attach: held,
            ..self.report.clone()
        }
    }
}
