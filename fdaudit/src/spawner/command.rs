//! The hidden `fdaudit __spawner` command that `bench` and the tests run: one close method,
//! N spawns, timings as text or JSON.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::{CloseMethod, Spawner};
use crate::{stats, sys};

/// One spawn of `__spawner --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpawnTime {
    /// Always `"spawn_time"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub strategy: CloseMethod,
    /// Wall time from just before fork/posix_spawn to waitpid's return, CLOCK_MONOTONIC.
    pub ns: u64,
    /// The child's exit code (128 + signal when killed).
    pub exit_code: i32,
}

/// The last line of `__spawner --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpawnSummary {
    /// Always `"summary"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub strategy: CloseMethod,
    /// Soft RLIMIT_NOFILE while spawning.
    pub nofile: u64,
    /// Fds open in the spawner, counting 0–2.
    pub open_fds: u64,
    pub spawns: u64,
    /// Spawns whose child did not exit 0.
    pub failures: u64,
    pub median_ns: u64,
}

/// Arguments of the internal `__spawner` command.
#[derive(Debug, Clone, clap::Args)]
pub struct SpawnerArgs {
    /// What the child does with inherited fds between fork and exec.
    #[arg(long, value_enum)]
    pub strategy: CloseMethod,
    /// Number of spawns, one after another.
    #[arg(short = 'n', long = "spawns", default_value_t = 1)]
    pub n: u64,
    /// Soft RLIMIT_NOFILE to set first (at most the hard limit).
    #[arg(long)]
    pub nofile: Option<u64>,
    /// Fds to hold open, counting 0–2 (not close-on-exec); fds inherited beyond 0–2 are
    /// closed at start either way, so the table is exactly 0..K.
    #[arg(long)]
    pub open_fds: Option<u64>,
    /// Pin the spawner (and so its children) to this CPU, for steadier timings.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// After setup print `ready <pid>`, then wait for a line on stdin before spawning.
    #[arg(long)]
    pub wait_stdin: bool,
    /// Print one JSON object per spawn and a summary, after the last spawn.
    #[arg(long)]
    pub json: bool,
    /// The command to spawn (default /bin/true).
    #[arg(last = true)]
    pub cmd: Vec<OsString>,
}

impl SpawnerArgs {
    /// The arguments after `__spawner` that reproduce these settings.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--strategy".into(),
            self.strategy.name().into(),
            "-n".into(),
            self.n.to_string().into(),
        ];
        if let Some(l) = self.nofile {
            a.extend(["--nofile".into(), l.to_string().into()]);
        }
        if let Some(k) = self.open_fds {
            a.extend(["--open-fds".into(), k.to_string().into()]);
        }
        if let Some(c) = self.cpu {
            a.extend(["--cpu".into(), c.to_string().into()]);
        }
        if self.wait_stdin {
            a.push("--wait-stdin".into());
        }
        if self.json {
            a.push("--json".into());
        }
        if !self.cmd.is_empty() {
            a.push("--".into());
            a.extend(self.cmd.iter().cloned());
        }
        a
    }
}

/// `fdaudit __spawner`.
pub fn run(args: SpawnerArgs) -> anyhow::Result<u8> {
    sys::close_inherited_fds().context("failed to close inherited fds")?;
    if let Some(c) = args.cpu {
        sys::pin_to_cpu(c).with_context(|| format!("failed to pin to CPU {c}"))?;
    }
    if let Some(l) = args.nofile {
        sys::set_nofile(l).context("failed to set RLIMIT_NOFILE")?;
    }
    let _held = match args.open_fds {
        Some(k) => sys::hold_fds(k).context("failed to open the fds to hold")?,
        None => Vec::new(),
    };
    let mut spawner =
        Spawner::new(args.strategy, &args.cmd).context("failed to prepare the spawner")?;
    let open_fds = sys::count_open_fds();
    let mut times = Vec::with_capacity(args.n as usize);
    if args.wait_stdin {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {}", std::process::id()).context("failed to write to stdout")?;
        out.flush().context("failed to write to stdout")?;
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("failed to read stdin")?;
    }
    for _ in 0..args.n {
        let r = spawner
            .spawn_once()
            .with_context(|| format!("failed to spawn with {}", args.strategy))?;
        times.push(r);
    }
    let failures = times.iter().filter(|r| !r.success()).count() as u64;
    let ns: Vec<u64> = times.iter().map(|r| r.ns).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        // A child's output without a final newline must not glue onto the first object.
        writeln!(out).context("failed to write to stdout")?;
        for r in &times {
            let t = SpawnTime {
                kind: "spawn_time".into(),
                strategy: args.strategy,
                ns: r.ns,
                exit_code: sys::wait_status_code(r.status),
            };
            crate::output::json_line(&mut out, &t).context("failed to write to stdout")?;
        }
        let s = SpawnSummary {
            kind: "summary".into(),
            strategy: args.strategy,
            nofile: spawner.nofile(),
            open_fds,
            spawns: args.n,
            failures,
            median_ns: stats::median(&ns).unwrap_or(0),
        };
        crate::output::json_line(&mut out, &s).context("failed to write to stdout")?;
    } else {
        writeln!(
            out,
            "{}: {} spawns of {}, NOFILE {}, {} fds open: median {} ns, {} failed",
            args.strategy,
            args.n,
            Path::new(OsStr::from_bytes(spawner.path().as_bytes())).display(),
            spawner.nofile(),
            open_fds,
            stats::median(&ns).unwrap_or(0),
            failures
        )
        .context("failed to write to stdout")?;
    }
    out.flush().context("failed to write to stdout")?;
    Ok(if failures == 0 { 0 } else { 1 })
}
