//! Command-line interface: one subcommand per module.

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::{bench, diff, doctor, scan, trace, watch};

/// Audits how processes hand file descriptors to their children: fds that leak across
/// execve, and the close loops that make spawning slow under high RLIMIT_NOFILE.
#[derive(Debug, Parser)]
#[command(name = "fdaudit", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// When to colour the output for people (never JSON): auto = when stdout is a terminal,
    /// unless NO_COLOR is set (CLICOLOR_FORCE forces it).
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t)]
    pub color: crate::output::color::ColorChoice,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inventory every process's fds from procfs and report what would leak into children.
    Scan(scan::ScanArgs),
    /// Follow a process tree with eBPF and report, per spawn, leaked fds and pre-exec close cost.
    Trace(trace::TraceArgs),
    /// Run as a node agent: trace every spawn (or a cgroup's), scan now and then, and export
    /// Prometheus metrics labelled by container.
    Watch(watch::WatchArgs),
    /// Follow processes and report the fds they opened and never closed, grouped by the
    /// code that opened them, with each one's headroom before its NOFILE limit.
    Unclosed(crate::unclosed::UnclosedArgs),
    /// Measure what each fd-closing strategy costs per spawn across RLIMIT_NOFILE limits, or
    /// what your own spawner does (`-- CMD`, traced).
    Bench(bench::BenchArgs),
    /// Compare two `trace --json` (or `bench --json`) outputs: per group the strategy,
    /// closes, window and leaks; new and fixed leaks; exit 3 on a regression.
    Diff(diff::DiffArgs),
    /// Check this machine and these privileges for tracing; load and attach every program.
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(crate::usage::CompletionsArgs),
    /// Internal: the spawner that `bench` and the tests run (one strategy, N spawns).
    #[command(name = "__spawner", hide = true)]
    Spawner(crate::spawner::SpawnerArgs),
    /// Internal: the built-in workload of `trace --demo`.
    #[command(name = "__demo", hide = true)]
    Demo(crate::demo::DemoArgs),
    /// Internal: write the manual pages into a directory (`cargo xtask man`).
    #[command(name = "__man", hide = true)]
    Man(crate::usage::ManArgs),
}

/// Runs the parsed command line; returns the process exit status.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    crate::output::color::init(cli.color);
    match cli.command {
        Command::Scan(a) => scan::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Watch(a) => watch::run(a),
        Command::Unclosed(a) => crate::unclosed::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Spawner(a) => crate::spawner::run(a),
        Command::Demo(a) => crate::demo::run(a),
        Command::Completions(a) => crate::usage::run_completions(Cli::command(), a),
        Command::Man(a) => crate::usage::run_man(Cli::command(), a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn trace_command(argv: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let Command::Trace(t) = cli.command else {
            panic!("{argv:?} is not trace")
        };
        t.command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn trace_takes_a_command_with_or_without_dashes() {
        let cmd = ["/bin/sh", "-c", "exit 0"];
        assert_eq!(
            trace_command(&["fdaudit", "trace", "--", "/bin/sh", "-c", "exit 0"]),
            cmd
        );
        assert_eq!(
            trace_command(&["fdaudit", "trace", "/bin/sh", "-c", "exit 0"]),
            cmd
        );
        // fdaudit's options before the command are fdaudit's; after it, the command's.
        assert_eq!(
            trace_command(&["fdaudit", "trace", "--json", "/bin/true", "--json"]),
            ["/bin/true", "--json"]
        );
        // A misspelt option is an error, not a command named `--jsn`.
        let e = Cli::try_parse_from(["fdaudit", "trace", "--jsn", "/bin/true"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn unclosed_takes_negative_seconds_for_its_own_message_and_refuses_growth_zero() {
        let parse = |args: &[&str]| {
            let argv = ["fdaudit", "unclosed"]
                .iter()
                .chain(args)
                .chain(&["--", "true"]);
            Cli::try_parse_from(argv)
        };
        let Command::Unclosed(a) = parse(&["--min-age", "-1", "--interval", "-2"])
            .unwrap()
            .command
        else {
            panic!("not unclosed");
        };
        // run() says what to give (clap would print its usage for an unknown `-1`).
        assert_eq!((a.min_age, a.interval), (-1.0, Some(-2.0)));
        let e = parse(&["--fail-on-growth", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(parse(&["--fail-on-growth", "1"]).is_ok());
    }

    #[test]
    fn bench_takes_the_childs_arguments_from_cmd_arg_and_the_spawner_after_dashes() {
        let argv = [
            "fdaudit",
            "bench",
            "--cmd",
            "/bin/sh",
            "--cmd-arg",
            "-c",
            "--cmd-arg",
            "exit 0",
            "--runs",
            "2",
            "--",
            "python3",
            "spawner.py",
            "--json",
        ];
        let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
        let Command::Bench(b) = cli.command else {
            panic!("not bench")
        };
        let strs = |v: &[std::ffi::OsString]| -> Vec<String> {
            v.iter().map(|a| a.to_string_lossy().into_owned()).collect()
        };
        assert_eq!(strs(&b.cmd_args), ["-c", "exit 0"]);
        assert_eq!(strs(&b.spawner), ["python3", "spawner.py", "--json"]);
        assert!(!b.json, "--json after -- is the spawner's");
        assert_eq!(b.runs, 2);
        let plain = Cli::try_parse_from(["fdaudit", "bench"]).expect("parses");
        let Command::Bench(b) = plain.command else {
            panic!("not bench")
        };
        assert!(b.spawner.is_empty() && b.cmd_args.is_empty());
        assert_eq!(b.runs, 3);
        // Without `--`, a word is not a spawner: bench takes no positional arguments.
        assert!(Cli::try_parse_from(["fdaudit", "bench", "python3"]).is_err());
    }

    #[test]
    fn ignore_fd_needs_fail_on_leak() {
        let e =
            Cli::try_parse_from(["fdaudit", "trace", "--ignore-fd", "9", "/bin/true"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("--fail-on-leak"), "{e}");
        let ok = [
            "fdaudit",
            "trace",
            "--fail-on-leak",
            "--ignore-fd",
            "9",
            "/bin/true",
        ];
        assert_eq!(trace_command(&ok), ["/bin/true"]);
    }

    #[test]
    fn fail_on_strategy_takes_a_list_of_trace_strategies() {
        let cli = Cli::try_parse_from([
            "fdaudit",
            "trace",
            "--fail-on-strategy",
            "close-loop,fcntl-scan",
            "--fail-on-strategy",
            "poll-scan",
            "/bin/true",
        ])
        .unwrap();
        let Command::Trace(t) = cli.command else {
            panic!("not trace")
        };
        let names: Vec<&str> = t.fail_on_strategy.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["close-loop", "fcntl-scan", "poll-scan"]);
        // bench's names are not the tracer's.
        let e = Cli::try_parse_from([
            "fdaudit",
            "trace",
            "--fail-on-strategy",
            "fcntl-loop",
            "/bin/true",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{e}");
        // --no-syscalls sees no syscalls: nothing to judge.
        for gate in [["--fail-on-strategy", "close-loop"], ["--max-closes", "5"]] {
            let mut argv = vec!["fdaudit", "trace", "--no-syscalls"];
            argv.extend(gate);
            argv.push("/bin/true");
            let e = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        }
    }

    /// `--leaks-only` (traces less) was renamed `--no-syscalls`, apart from `--only-leaks`
    /// (shows less); the old spelling still parses for a release, and --help hides it.
    #[test]
    fn old_flag_spellings_parse_and_are_hidden() {
        for flag in ["--no-syscalls", "--leaks-only"] {
            let cli = Cli::try_parse_from(["fdaudit", "trace", flag, "/bin/true"])
                .unwrap_or_else(|e| panic!("{flag}: {e}"));
            let Command::Trace(t) = cli.command else {
                panic!("{flag}: not trace")
            };
            assert!(t.no_syscalls, "{flag}");
        }
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("trace")
            .expect("trace")
            .render_long_help()
            .to_string();
        assert!(help.contains("--no-syscalls"), "{help}");
        assert!(!help.contains("--leaks-only"), "{help}");
        // watch: --syscalls, once --full (one name: it counts syscalls, as trace's
        // --no-syscalls leaves them out).
        for flag in ["--syscalls", "--full"] {
            let cli = Cli::try_parse_from(["fdaudit", "watch", flag])
                .unwrap_or_else(|e| panic!("{flag}: {e}"));
            let Command::Watch(w) = cli.command else {
                panic!("{flag}: not watch")
            };
            assert!(w.syscalls, "{flag}");
        }
        let help = cmd
            .find_subcommand_mut("watch")
            .expect("watch")
            .render_long_help()
            .to_string();
        assert!(help.contains("--syscalls"), "{help}");
        assert!(!help.contains("--full"), "{help}");
    }

    #[test]
    fn negative_numbers_are_bad_values_not_options() {
        for argv in [
            &["fdaudit", "trace", "--duration", "-1", "--", "/bin/true"][..],
            &["fdaudit", "trace", "--min-closes", "-5", "/bin/true"],
            &["fdaudit", "trace", "-p", "-3"],
        ] {
            let e = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{argv:?}: {e}"
            );
            assert!(!e.to_string().contains("'-- -"), "{argv:?}: {e}");
        }
    }
}
