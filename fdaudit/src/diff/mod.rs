//! `fdaudit diff`: compares two `trace --json` (or two `bench --json`) outputs, a run
//! before a change and one after: per group the strategy, closes per spawn, window and
//! leaked fds; the leaks that are new and those that are fixed; exit 3 on a regression.

mod ci;
mod compare;
mod input;
pub mod normalise;
mod render;
mod sarif;

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::{
    exit,
    output::stream::{self, Dest, StdStream},
};

/// Arguments of `fdaudit diff`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "A regression is a new leak (an fd, by exec path, fd number, kind and \
target, that no spawn leaked before), or a group (parent and exec path; for bench, the cell) \
whose strategy grows more with NOFILE, whose closes per spawn grew beyond --closes-tolerance, \
or whose leaked fds per spawn grew; with --window-tolerance, also a longer window. Groups only \
in one run are listed as new or gone.\n\nExit status: 0 when nothing regressed, 3 on a \
regression (--policy-exit-code), 2 on bad input (a file that is not trace or bench JSON output, or one of each)."
)]
pub struct DiffArgs {
    /// The earlier run: what `fdaudit trace --json` or `fdaudit bench --json` wrote.
    #[arg(value_name = "A.jsonl")]
    pub before: PathBuf,

    /// The later run, written by the same subcommand.
    #[arg(value_name = "B.jsonl")]
    pub after: PathBuf,

    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,

    /// Write the output (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// How many percent closes per spawn may grow before it is a regression (any growth
    /// from 0 is one).
    #[arg(long, value_name = "PERCENT", default_value_t = 10.0, value_parser = parse_percent)]
    pub closes_tolerance: f64,

    /// Also judge the window (fork to exec; bench: the time per spawn): a regression when
    /// it grew by more than this many percent. Off by default: times vary from run to run.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub window_tolerance: Option<f64>,

    /// Compare paths as they are: by default a number in a path that is a pid of the same
    /// run and the random suffix of an mkstemp-style name (`tmp.aB3xZ9`) are taken out
    /// first, so that two runs of the same program compare equal (docs/diff.md).
    #[arg(long)]
    pub keep_paths: bool,

    #[command(flatten)]
    pub policy_exit_code: exit::PolicyCode,

    /// Also write a JUnit XML report to FILE: a case "no regression" failing with the
    /// verdict, one per group failing with what got worse, one per new or fixed leak.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    // Traces: each leak with its baselineState (new, unchanged, absent).
    #[command(flatten)]
    pub sarif: crate::output::sarif::SarifArgs,
}

/// A percentage: a finite number, 0 or more.
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!(
            "{s:?} is not a percentage (a number, 0 or more, e.g. 10)"
        )),
    }
}

pub fn run(args: DiffArgs) -> Result<u8> {
    let junit = (args.junit.as_deref())
        .map(crate::output::junit::JunitFile::create)
        .transpose()?;
    let sarif = args.sarif.open()?;
    let a = input::read(&args.before, args.keep_paths)?;
    let b = input::read(&args.after, args.keep_paths)?;
    if a.kind != b.kind {
        bail!(
            "{} and {} were written by different subcommands (trace and bench): compare two traces or two benches",
            crate::output::text::escape_path(&args.before),
            crate::output::text::escape_path(&args.after)
        );
    }
    let tol = compare::Tolerances {
        closes_pct: args.closes_tolerance,
        window_pct: args.window_tolerance,
    };
    let d = compare::compare(&a, &b, tol);
    let code = if d.regressed() {
        args.policy_exit_code.code
    } else {
        exit::OK
    };
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "diff",
    )?;
    render::write(&d, a.kind, args.json, code)?;
    let ci = ci::verdict_of(&d, code);
    if let Some(j) = junit {
        j.write(&ci)?;
    }
    crate::output::github::report(&ci)?;
    if let Some(file) = sarif {
        let findings = match a.kind {
            input::Kind::Trace => sarif::findings(&a, &b),
            input::Kind::Bench => Vec::new(),
        };
        file.write(&crate::output::sarif::Run {
            command: "diff",
            findings,
            exit_code: code,
            notes: Vec::new(),
        })?;
    }
    Ok(code)
}
