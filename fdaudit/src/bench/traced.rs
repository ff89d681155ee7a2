//! The traced pass: runs a spawner under fdaudit's own tracer
//! ([`crate::engine::session`]) and counts, per spawn, the syscalls the child made between
//! fork and exec and the fds it leaked.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};

use crate::engine::{
    counts::SyscallCounts,
    follow::{follow, End, Sink, Until},
    session::{Session, SessionOptions},
    spawn::{Event, Spawn},
    wait::Waiter,
};

/// What the tracer saw for one spawn of the spawner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracedSpawn {
    /// The child's syscalls between fork and exec.
    pub calls: SyscallCounts,
    /// Fds ≥ 3 the exec'd program got from its parent.
    pub leaked_fds: u64,
    pub exec_ok: bool,
}

impl TracedSpawn {
    fn from_spawn(s: &Spawn) -> TracedSpawn {
        TracedSpawn {
            calls: s.calls,
            leaked_fds: s.leaked_count.into(),
            exec_ok: s.exec_ok,
        }
    }
}

/// Why the traced pass cannot run.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("not root: the traced columns need root (CAP_BPF and CAP_PERFMON)")]
    NotRoot,
    /// The cause chain is printed by whoever reports it, once.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// How long one traced spawner may take, and how long to keep polling after it exits.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const DRAIN: Duration = Duration::from_millis(500);

/// A tracing session reused for every cell.
pub struct BenchTracer {
    pub(super) session: Session,
    /// The follow loop's wait: no roots (the sink ends it), the signal pipe.
    pub(super) waiter: Waiter,
}

/// The traced pass as a sink of the follow loop: the spawns of one spawner's children,
/// until it has exited and all of them are seen (or [`DRAIN`] after its exit).
struct SpawnerSink<'a> {
    child: &'a mut std::process::Child,
    pid: u32,
    spawns: u64,
    seen: Vec<TracedSpawn>,
    exited_at: Option<Instant>,
}

impl Sink for SpawnerSink<'_> {
    fn events(&mut self, _session: &mut Session, events: Vec<Event>) -> anyhow::Result<()> {
        for ev in events {
            if let Event::Spawn(s) = ev {
                if s.parent_pid == self.pid {
                    self.seen.push(TracedSpawn::from_spawn(&s));
                }
            }
        }
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }

    fn tick(&mut self, _session: &mut Session, now: Instant) -> anyhow::Result<bool> {
        if self.exited_at.is_none()
            && self
                .child
                .try_wait()
                .context("failed to wait for the spawner")?
                .is_some()
        {
            self.exited_at = Some(now);
        }
        Ok(self
            .exited_at
            .is_some_and(|t| self.seen.len() as u64 >= self.spawns || now - t > DRAIN))
    }
}

impl BenchTracer {
    /// Loads and attaches the tracer (root only).
    pub fn start() -> Result<BenchTracer, TraceError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(TraceError::NotRoot);
        }
        let session = Session::start(&SessionOptions {
            backend: crate::engine::ebpf::BackendChoice::from_env().map_err(anyhow::Error::msg)?,
            ..SessionOptions::default()
        })
        .context("failed to start the tracer")?;
        let waiter = Waiter::new(crate::signals::wake_pipe()?, &[]);
        Ok(BenchTracer { session, waiter })
    }

    /// Runs `spawner` (a `__spawner … --wait-stdin` command), tracks it once it is ready,
    /// lets it make its `spawns` spawns and returns what the tracer saw for each of its
    /// children, in order.
    pub fn run(
        &mut self,
        mut spawner: Command,
        spawns: u64,
    ) -> Result<Vec<TracedSpawn>, TraceError> {
        let mut child = spawner
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("failed to start the spawner")?;
        let result = self.follow(&mut child, spawns);
        if result.is_err() {
            let _ = child.kill();
        }
        let _ = child.wait();
        result
    }

    /// Tracks the spawner once it says it is ready, starts it, and collects its spawns.
    fn follow(
        &mut self,
        child: &mut std::process::Child,
        spawns: u64,
    ) -> Result<Vec<TracedSpawn>, TraceError> {
        let (pid, mut stdout) = self.track_when_ready(child)?;
        // Drain the spawner's stdout meanwhile, so a chatty command cannot block it.
        let drain = std::thread::spawn(move || {
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest);
        });
        child
            .stdin
            .take()
            .context("no spawner stdin")?
            .write_all(b"go\n")
            .context("failed to start the spawner")?;
        let seen = self.collect(child, pid, spawns)?;
        let _ = drain.join();
        self.check_finished(child, seen, spawns)
    }

    /// Waits for the spawner's `ready <pid>` line and tracks that pid; returns it and the
    /// rest of the spawner's stdout.
    fn track_when_ready(
        &mut self,
        child: &mut std::process::Child,
    ) -> Result<(u32, BufReader<std::process::ChildStdout>), TraceError> {
        let mut stdout = BufReader::new(child.stdout.take().context("no spawner stdout")?);
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .context("failed to read the spawner's ready line")?;
        let pid: u32 = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("spawner said {line:?}, not `ready <pid>`"))?;
        self.session
            .track(pid)
            .context("failed to track the spawner")?;
        Ok((pid, stdout))
    }

    /// The spawns of `pid`'s children, followed until it has exited and all `spawns` are
    /// seen (or [`DRAIN`] after its exit); an error after [`RUN_TIMEOUT`] or on a signal.
    fn collect(
        &mut self,
        child: &mut std::process::Child,
        pid: u32,
        spawns: u64,
    ) -> Result<Vec<TracedSpawn>, TraceError> {
        let until = Until {
            deadline: Some(Instant::now() + RUN_TIMEOUT),
            ..Until::default()
        };
        let mut sink = SpawnerSink {
            child,
            pid,
            spawns,
            seen: Vec::new(),
            exited_at: None,
        };
        let (end, _) = follow(&mut self.session, &mut self.waiter, &until, &mut sink)
            .context("failed to follow the spawner")?;
        match end {
            End::Deadline => {
                Err(anyhow!("the traced spawner did not finish in {RUN_TIMEOUT:?}").into())
            }
            End::Signal(sig) => Err(anyhow!("stopped by signal {sig}").into()),
            _ => Ok(sink.seen),
        }
    }

    /// `seen`, once the spawner has exited well and the tracer saw every one of its spawns.
    fn check_finished(
        &self,
        child: &mut std::process::Child,
        seen: Vec<TracedSpawn>,
        spawns: u64,
    ) -> Result<Vec<TracedSpawn>, TraceError> {
        let status = child.wait().context("failed to wait for the spawner")?;
        // Exit 1 says some children exited non-zero: the timed pass counts those as
        // failures, so the traced one reports them too rather than giving up.
        if !status.success() && status.code() != Some(1) {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(anyhow!("traced spawner failed ({status}): {}", err.trim()).into());
        }
        if seen.len() as u64 != spawns {
            let lost = self.session.lost_records().unwrap_or(0);
            return Err(anyhow!(
                "the tracer saw {} of {spawns} spawns ({lost} records lost)",
                seen.len()
            )
            .into());
        }
        Ok(seen)
    }
}
