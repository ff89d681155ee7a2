//! `trace`'s side of the follow loop: the sink that reports spawns as they come, and how
//! long to follow: until the command exits, then (as strace -f does) until every process
//! it started and that is traced has exited too, unless `--no-wait-tree`.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{plan::FollowPlan, reads, report::Reporter};
use crate::{
    cgroup::Followed,
    engine::{
        follow::{self, End, Until},
        session::Session,
        spawn,
        steps::{self, Steps},
        wait,
    },
    output::{count, stream},
    procfs_util,
};

/// How often `--reads` looks for newly flagged storms to name their files (the follow
/// loop's tick).
const READS_CHECK_EVERY: Duration = Duration::from_millis(100);

/// `trace` as a sink of the follow loop: a line (or record) per spawn as it comes, and
/// with `--reads` each storm's file named while its process still runs.
pub struct TraceSink<'a> {
    pub reporter: &'a mut Reporter,
    pub roots: &'a [u32],
    /// `--reads`: the storms' files, named every [`READS_CHECK_EVERY`].
    pub reads: Option<(&'a mut reads::LiveTargets, Instant)>,
    /// Each exec chain step's verdict, as `watch` judges it.
    pub steps: Steps,
}

impl TraceSink<'_> {
    /// Reports what waits for a verdict (the trace is over: final).
    pub fn finish(&mut self) -> Result<()> {
        for ev in self.steps.finish() {
            self.reporter.handle(ev, self.roots)?;
        }
        Ok(())
    }
}

impl follow::Sink for TraceSink<'_> {
    fn events(&mut self, session: &mut Session, events: Vec<spawn::Event>) -> Result<()> {
        // What the session has to say (a failed calibration), before the batch's spawns.
        for w in session.take_warnings() {
            stream::note(stream::Level::Warning, &w);
        }
        for ev in self.steps.push(events, Instant::now()) {
            self.reporter.handle(ev, self.roots)?;
        }
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        // A step waiting for its verdict is reported within a tick of its grace.
        Some(READS_CHECK_EVERY.min(steps::GRACE / 4))
    }

    fn tick(&mut self, session: &mut Session, now: Instant) -> Result<bool> {
        for ev in self.steps.release(now) {
            self.reporter.handle(ev, self.roots)?;
        }
        if let Some((targets, checked)) = &mut self.reads {
            if now.duration_since(*checked) >= READS_CHECK_EVERY {
                targets.update(&session.read_counts(), procfs_util::fd_target);
                *checked = now;
            }
        }
        Ok(false)
    }
}

/// How following ended.
pub struct FollowEnd {
    /// The command's wait status, once it has exited.
    pub exit_status: Option<i32>,
    /// `--duration` ended it.
    pub timed_out: bool,
    /// When the end was noticed (for `-v`'s exit time).
    pub ended: Instant,
}

/// Reports records until the command exits (its wait status) and then until the traced
/// processes it left running have exited too ([`follow_tree`]), every `-p` root is gone,
/// the followed cgroup is removed, the duration ends or a signal comes; then drains what is
/// left.
pub fn follow(
    plan: FollowPlan,
    session: &mut Session,
    sink: &mut TraceSink,
    waiter: &mut wait::Waiter,
    child: Option<u32>,
    followed: Option<&Followed>,
) -> Result<FollowEnd> {
    let until = Until {
        child,
        dir: followed.map(|f| f.dir.clone()),
        deadline: plan.duration.map(|d| Instant::now() + d),
        ..Default::default()
    };
    let (mut end, mut ended) = follow::follow(session, waiter, &until, sink)?;
    if let (End::Signal(sig), Some(pid)) = (end, child) {
        let status = crate::held::stop_command(pid, sig, plan.kill_after, |deadline| {
            let until = Until {
                child,
                deadline: Some(deadline),
                ..Default::default()
            };
            let (again, at) = follow::follow(session, waiter, &until, sink)?;
            ended = at;
            Ok(match again {
                End::Exited(st) => Some(st),
                _ => None,
            })
        })?;
        return Ok(FollowEnd {
            exit_status: Some(status),
            timed_out: false,
            ended,
        });
    }
    if let (End::DirGone, Some(f)) = (end, followed) {
        stream::note(
            stream::Level::Note,
            &format!("cgroup {} was removed", f.path),
        );
    }
    let exit_status = match end {
        End::Exited(st) => Some(st),
        _ => None,
    };
    if let (Some(_), Some(pid)) = (exit_status, child) {
        if let Some((tree_end, at)) = follow_tree(plan, session, sink, waiter, pid, until.deadline)?
        {
            (end, ended) = (tree_end, at);
        }
    }
    Ok(FollowEnd {
        exit_status,
        timed_out: end == End::Deadline,
        ended,
    })
}

/// After the command `pid` exited: when traced processes it started still run, follows
/// them until they have all exited (as strace -f does), `deadline` passes or a signal
/// comes; with `--no-wait-tree` only says how many were left running. None when nothing
/// was followed.
fn follow_tree(
    plan: FollowPlan,
    session: &mut Session,
    sink: &mut TraceSink,
    waiter: &mut wait::Waiter,
    pid: u32,
    deadline: Option<Instant>,
) -> Result<Option<(End, Instant)>> {
    let left = session.traced_alive();
    if left == 0 {
        return Ok(None);
    }
    let procs = count(left as u64, "traced process", "traced processes");
    let (is, were) = if left == 1 {
        ("is", "was")
    } else {
        ("are", "were")
    };
    if !plan.wait_tree {
        stream::note(
            stream::Level::Note,
            &format!(
                "the command (pid {pid}) exited; {procs} it started {were} left running, \
                 untraced from now on (without --no-wait-tree, trace waits for them)"
            ),
        );
        return Ok(None);
    }
    stream::note(
        stream::Level::Note,
        &format!(
            "the command (pid {pid}) exited; {procs} it started {is} still running: tracing \
             until they exit (--duration or Ctrl-C stops sooner, --no-wait-tree does not wait)"
        ),
    );
    let until = Until {
        deadline,
        tree: true,
        ..Default::default()
    };
    let (end, at) = follow::follow(session, waiter, &until, sink)?;
    let why = match end {
        End::Deadline => Some("--duration ended".to_string()),
        End::Signal(sig) => Some(
            crate::sys::signal_name(sig)
                .unwrap_or("a signal")
                .to_string(),
        ),
        _ => None,
    };
    if let Some(why) = why {
        let left = session.traced_alive();
        stream::note(
            stream::Level::Note,
            &format!(
                "{why}: stopped tracing; {} the command started {} still running, untraced",
                count(left as u64, "traced process", "traced processes"),
                if left == 1 { "is" } else { "are" }
            ),
        );
    }
    Ok(Some((end, at)))
}
