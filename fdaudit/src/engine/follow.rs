//! The one follow loop: waits on the ring buffer, the followed roots and the signal pipe
//! together ([`Waiter`]), hands every batch of completed events to a [`Sink`] and ends when
//! [`Until`] says so, a signal stops fdaudit, or the sink has what it wants; then drains
//! what is left in the kernel into the sink. `trace`, `watch` and `bench` are sinks.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    session::Session,
    spawn::Event,
    wait::{try_wait, Waiter},
};

/// How often a followed directory (a cgroup's) is checked for its removal: it has no fd
/// to wait on.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// What ends following, besides a signal and the sink.
#[derive(Debug, Default, Clone)]
pub struct Until {
    /// fdaudit's own child (the traced command): its exit ends following, with its status.
    pub child: Option<u32>,
    /// This directory's removal (a followed cgroup's) ends following.
    pub dir: Option<PathBuf>,
    /// The end of `--duration`.
    pub deadline: Option<Instant>,
    /// The end of the traced tree: following ends once no traced process is alive
    /// ([`Session::traced_alive`], checked every [`CHECK_EVERY`]).
    pub tree: bool,
}

/// Why following ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The child of [`Until::child`] exited with this wait status.
    Exited(i32),
    /// Every root of the [`Waiter`] has exited.
    RootsGone,
    /// The directory of [`Until::dir`] is gone.
    DirGone,
    /// No traced process is alive ([`Until::tree`]).
    TreeGone,
    /// [`Until::deadline`] passed.
    Deadline,
    /// A signal stopped fdaudit ([`crate::signals::received`]).
    Signal(i32),
    /// The sink's [`Sink::tick`] said so.
    Sink,
}

/// A front end: what it does with the events and its periodic work.
pub trait Sink {
    /// A batch of completed events (spawns corrected and named by the session), in the
    /// order the kernel wrote them.
    fn events(&mut self, session: &mut Session, events: Vec<Event>) -> Result<()>;

    /// [`Sink::tick`] runs at least this often (None: only after wake-ups).
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Runs after every wake-up, for periodic work; `Ok(true)` ends following.
    fn tick(&mut self, _session: &mut Session, _now: Instant) -> Result<bool> {
        Ok(false)
    }
}

/// Follows until `until`, a signal or the sink ends it; every record in the kernel by then
/// reaches the sink. Returns why it ended and when that was noticed.
pub fn follow(
    session: &mut Session,
    waiter: &mut Waiter,
    until: &Until,
    sink: &mut impl Sink,
) -> Result<(End, Instant)> {
    let checks = until.dir.is_some() || until.tree;
    let every = [sink.tick_every(), checks.then_some(CHECK_EVERY)]
        .into_iter()
        .flatten()
        .min();
    let mut next_check = Instant::now() + CHECK_EVERY;
    let end = loop {
        let tick = every.map(|e| Instant::now() + e);
        let wake_by = match (until.deadline, tick) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        waiter.wait(Some(session.events_fd()), wake_by)?;
        // What the drain thread has copied out (resets its ready fd; no wait).
        let events = session.poll(Duration::ZERO)?;
        sink.events(session, events)?;
        let now = Instant::now();
        if sink.tick(session, now)? {
            break End::Sink;
        }
        if let Some(sig) = crate::signals::received() {
            break End::Signal(sig);
        }
        if until.deadline.is_some_and(|d| now >= d) {
            break End::Deadline;
        }
        if let Some(pid) = until.child {
            // Cheap, and right even where pidfds are missing.
            if let Some(st) = try_wait(pid)? {
                break End::Exited(st);
            }
        } else if let Some(dir) = &until.dir {
            if !dir.exists() {
                break End::DirGone;
            }
        } else if until.tree {
            if now >= next_check {
                next_check = now + CHECK_EVERY;
                if session.traced_alive() == 0 {
                    break End::TreeGone;
                }
            }
        } else if waiter.has_roots() && waiter.all_exited() {
            break End::RootsGone;
        }
    };
    let ended = Instant::now();
    // Records are written before their process can be reaped (the exit record in
    // do_exit(), before the pidfd wakes): what is in the ring buffer now is everything.
    let events = session.drain();
    sink.events(session, events)?;
    Ok((end, ended))
}
