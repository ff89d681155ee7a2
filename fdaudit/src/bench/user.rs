//! `bench -- CMD ARGS…`: the user's own spawner, run under each `--limits` value (its soft
//! RLIMIT_NOFILE, the hard limit unchanged) `--runs` times, traced from its first
//! instruction by the same session and follow loop as `trace`; every spawn its tree makes
//! (fork to exec) is collected with its probe-corrected window, strategy, closing calls and
//! leaked fds (less those the command itself inherited, as `trace` counts them).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};

use super::traced::{BenchTracer, TraceError};
use super::user_report::{self, UserCellReport, UserFitReport, UserRun, UserSpawn};
use crate::engine::{
    flags::SpawnFlags,
    follow::{follow, End, Sink, Until},
    session::Session,
    spawn::{Event, Spawn},
};
use crate::held::{self, HeldOptions};

/// How long to go on following what CMD left running after it exited.
const TREE_GRACE: Duration = Duration::from_secs(10);
/// After a signal: how long CMD has to exit before it is killed.
const KILL_AFTER: Duration = Duration::from_secs(2);

/// The follow loop's sink for one run: the root's own exec gives the baseline, every
/// forked spawn after it is collected.
struct UserSink {
    root: u32,
    /// (fd, inode) of what the root inherited; None until its exec is seen.
    baseline: Option<Vec<(u32, u64)>>,
    spawns: Vec<UserSpawn>,
}

impl UserSink {
    fn add(&mut self, s: &Spawn) {
        let fds: Vec<(u32, u64)> = s.leaked_fds.iter().map(|f| (f.fd, f.ino)).collect();
        let spawn = UserSpawn {
            window_ns: s.window_corrected_ns,
            strategy: s.strategy,
            close_calls: s.calls.close_calls,
            close_range_calls: s.calls.close_range_calls,
            leaked_fds: s.leaked_count.into(),
        };
        // An exec without a fork seen, or a process's second exec: not a new fork.
        let no_fork = s.flags.intersects(SpawnFlags::NO_FORK | SpawnFlags::REEXEC);
        self.take(s.pid, no_fork, fds, spawn);
    }

    /// The root's first exec (no fork) sets the baseline to its fds `fds`; any other exec
    /// without a fork (or a re-exec) goes on a spawn already seen (an exec chain): not
    /// counted again; a forked one is a spawn,
    /// its `leaked_fds` less the baseline's fds it got.
    fn take(&mut self, pid: u32, no_fork: bool, fds: Vec<(u32, u64)>, mut spawn: UserSpawn) {
        if pid == self.root && no_fork && self.baseline.is_none() {
            self.baseline = Some(fds);
            return;
        }
        if no_fork {
            return;
        }
        let base = self.baseline.as_deref().unwrap_or(&[]);
        let inherited = fds.iter().filter(|f| base.contains(f)).count() as u64;
        spawn.leaked_fds = spawn.leaked_fds.saturating_sub(inherited);
        self.spawns.push(spawn);
    }
}

impl Sink for UserSink {
    fn events(&mut self, _session: &mut Session, events: Vec<Event>) -> anyhow::Result<()> {
        for ev in events {
            match ev {
                Event::Spawn(s) => self.add(&s),
                Event::Exit(e) => {
                    if let Some(s) = &e.failed_exec {
                        self.add(s);
                    }
                }
            }
        }
        Ok(())
    }
}

impl BenchTracer {
    /// Runs `cmd` once with soft RLIMIT_NOFILE `nofile` (stdout to /dev/null), traced from
    /// its first instruction, until it and what it left running have exited (at most
    /// [`TREE_GRACE`] after it), or a signal stops bench.
    pub fn run_user(
        &mut self,
        cmd: &[OsString],
        nofile: u64,
        cpu: Option<usize>,
    ) -> Result<UserRun, TraceError> {
        let held = held::start_held_with(
            cmd,
            HeldOptions {
                nofile: Some(nofile),
                null_stdout: true,
                cpu,
            },
        )?;
        let pid = held.pid;
        // Its exit wakes the follow loop (a pidfd): the exit record can come before the
        // command is reapable, and nothing else would wake a loop with no tick (two runs
        // waited forever so in CI).
        self.waiter.set_roots(&[pid]);
        if let Err(e) = self.session.track(pid) {
            // SAFETY: killing and reaping our own child, which has not exec'd yet.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
                libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
            }
            return Err(e.context("failed to track the command").into());
        }
        let name = held.name.clone();
        if let Err(errno) = held.release()? {
            let err = std::io::Error::from_raw_os_error(errno);
            return Err(anyhow!("failed to exec {name}: {err}: check the command").into());
        }
        let mut sink = UserSink {
            root: pid,
            baseline: None,
            spawns: Vec::new(),
        };
        let exit_code = self.follow_user(pid, &mut sink)?;
        Ok(UserRun {
            spawns: sink.spawns,
            exit_code,
        })
    }

    /// Follows CMD `pid` to its exit (its exit code), then its leftover tree; on a signal,
    /// stops it as `trace` does and returns None.
    fn follow_user(&mut self, pid: u32, sink: &mut UserSink) -> anyhow::Result<Option<u8>> {
        let until = Until {
            child: Some(pid),
            ..Until::default()
        };
        let (end, _) = follow(&mut self.session, &mut self.waiter, &until, sink)
            .context("failed to follow the command")?;
        let status = match end {
            End::Exited(st) => st,
            End::Signal(sig) => {
                let (session, waiter) = (&mut self.session, &mut self.waiter);
                held::stop_command(pid, sig, KILL_AFTER, |deadline| {
                    let until = Until {
                        child: Some(pid),
                        deadline: Some(deadline),
                        ..Until::default()
                    };
                    let (again, _) = follow(session, waiter, &until, sink)?;
                    Ok(match again {
                        End::Exited(st) => Some(st),
                        _ => None,
                    })
                })?;
                return Ok(None);
            }
            other => return Err(anyhow!("following the command ended early ({other:?})")),
        };
        if self.session.traced_alive() > 0 {
            let until = Until {
                tree: true,
                deadline: Some(Instant::now() + TREE_GRACE),
                ..Until::default()
            };
            let (end, _) = follow(&mut self.session, &mut self.waiter, &until, sink)
                .context("failed to follow what the command left running")?;
            if let End::Signal(_) = end {
                return Ok(None);
            }
        }
        Ok(Some(crate::exit::from_wait_status(status)))
    }
}

/// Every run at every limit, and whether a signal cut them short.
#[derive(Debug, Default)]
pub struct UserRuns {
    pub by_limit: BTreeMap<u64, Vec<UserRun>>,
    pub interrupted: bool,
}

/// Runs `cmd` `runs` times at each limit (limits in order, runs back to back), traced, on
/// `cpu` when given (bench's own cells' CPU). A signal stops it: what was measured is kept.
pub fn run_all(
    cmd: &[OsString],
    limits: &[u64],
    runs: u64,
    cpu: Option<usize>,
) -> anyhow::Result<UserRuns> {
    let mut tracer = BenchTracer::start().map_err(|e| match e {
        TraceError::NotRoot => anyhow!(
            "bench -- CMD traces CMD and needs root (CAP_BPF and CAP_PERFMON): run it with sudo"
        ),
        TraceError::Other(e) => e,
    })?;
    crate::signals::install_stop();
    let bar = crate::output::progress(limits.len() as u64 * runs, "tracing", " runs of CMD");
    let mut out = UserRuns::default();
    'limits: for &l in limits {
        for _ in 0..runs {
            if crate::signals::received().is_some() {
                out.interrupted = true;
                break 'limits;
            }
            let run = tracer.run_user(cmd, l, cpu).map_err(|e| match e {
                TraceError::NotRoot => anyhow!("not root"),
                TraceError::Other(e) => e.context(format!("failed to run CMD at NOFILE {l}")),
            })?;
            let stopped = run.exit_code.is_none();
            out.by_limit.entry(l).or_default().push(run);
            bar.inc(1);
            if stopped {
                out.interrupted = true;
                break 'limits;
            }
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// What `-- CMD` gave: a cell per NOFILE, the fit, and whether a signal cut it short.
#[derive(Default)]
pub struct UserResults {
    pub cells: Vec<UserCellReport>,
    pub fit: Option<UserFitReport>,
    pub interrupted: bool,
}

/// `-- CMD` at every limit, `--runs` times each, traced, on `cpu` when given.
pub fn measure(
    spawner: &[OsString],
    runs: u64,
    limits: &[u64],
    cpu: Option<usize>,
) -> anyhow::Result<UserResults> {
    if spawner.is_empty() {
        return Ok(UserResults::default());
    }
    let text = super::command_text(spawner);
    let runs = run_all(spawner, limits, runs, cpu)?;
    if runs.interrupted {
        crate::output::stream::note(
            crate::output::stream::Level::Warning,
            "bench interrupted: CMD's rows below have fewer runs than asked (the run under way \
             is counted as far as it got)",
        );
    }
    let cells: Vec<UserCellReport> = runs
        .by_limit
        .iter()
        .map(|(&l, r)| user_report::user_cell(&text, l, r))
        .collect();
    let fit = user_report::user_fit(&cells);
    Ok(UserResults {
        cells,
        fit,
        interrupted: runs.interrupted,
    })
}

/// 1 when a run of CMD exited non-zero, with a warning per limit; a note per limit where
/// CMD made no spawn.
pub fn exit_status(cells: &[UserCellReport]) -> u8 {
    let mut status = crate::exit::OK;
    for c in cells {
        if c.failed_runs > 0 {
            crate::output::stream::note(
                crate::output::stream::Level::Warning,
                &format!(
                    "`{}` exited non-zero (or was killed) in {} of {} at NOFILE {}",
                    c.spawner,
                    c.failed_runs,
                    crate::output::count(c.runs, "run", "runs"),
                    c.nofile
                ),
            );
            status = crate::exit::FAILED;
        }
        if c.spawns == 0 {
            crate::output::stream::note(
                crate::output::stream::Level::Note,
                &format!(
                    "`{}` made no spawn (fork then exec) at NOFILE {}",
                    c.spawner, c.nofile
                ),
            );
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::strategy::Strategy;

    fn spawn(leaked_fds: u64) -> UserSpawn {
        UserSpawn {
            window_ns: 5000,
            strategy: Strategy::None,
            close_calls: 0,
            close_range_calls: 0,
            leaked_fds,
        }
    }

    #[test]
    fn the_root_exec_is_the_baseline_and_re_execs_are_not_spawns() {
        let mut sink = UserSink {
            root: 10,
            baseline: None,
            spawns: Vec::new(),
        };
        sink.take(10, true, vec![(5, 99)], spawn(1));
        assert!(sink.spawns.is_empty(), "the root's own exec is no spawn");
        // A child got the inherited fd 5 and its own fd 7: one leak.
        sink.take(11, false, vec![(5, 99), (7, 1)], spawn(2));
        // The same child exec'ing again is the same spawn.
        sink.take(11, true, vec![(7, 1)], spawn(1));
        // Fd 5 with another file is not the inherited one: a leak.
        sink.take(12, false, vec![(5, 42)], spawn(1));
        // The root exec'ing again is no spawn either.
        sink.take(10, true, vec![(5, 99)], spawn(1));
        let leaks: Vec<u64> = sink.spawns.iter().map(|s| s.leaked_fds).collect();
        assert_eq!(leaks, [1, 1]);
        assert_eq!(sink.spawns[0].window_ns, 5000);
    }
}
