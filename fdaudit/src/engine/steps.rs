//! One verdict for each step of an exec chain, for every front end (`trace`'s lines, records
//! and summary, `watch`'s counters). A spawn whose image exec'd again without forking
//! (`env CMD`, a shell's `exec`, Java's jspawnhelper) passed its fds on to the next image,
//! whose own record says which of them crossed: the step's fds are transient, not leaks.
//! Whether a step exec's again is known only at its process's next record, so a spawn with
//! fds is held until its process execs again (flagged [`SpawnFlags::EXECD_AGAIN`]), exits,
//! or [`GRACE`] passes (then it is final: what the image holds crossed). Records leave in
//! the order they came.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{flags::SpawnFlags, spawn::Event};

/// How long a spawn with fds waits for its process's next exec. Pass-through images exec
/// again within milliseconds; a later exec starts a chain of its own.
pub const GRACE: Duration = Duration::from_secs(1);

/// Records held at most: past it the oldest waiting spawn is judged final at once (a burst
/// of long-lived children with fds), so memory stays bounded.
const MAX_QUEUED: usize = 1 << 16;

/// The records not yet judged, in order; `Some(since)` on a spawn that waits.
#[derive(Debug, Default)]
pub struct Steps {
    queue: VecDeque<(Event, Option<Instant>)>,
}

impl Steps {
    /// Takes a batch of records; returns those judged, in order.
    pub fn push(&mut self, events: Vec<Event>, now: Instant) -> Vec<Event> {
        for ev in events {
            match &ev {
                Event::Spawn(s) if s.exec_ok => self.judge(s.pid, true),
                Event::Exit(e) => self.judge(e.pid, false),
                Event::Spawn(_) => {}
            }
            let wait = matches!(&ev, Event::Spawn(s) if s.exec_ok && s.leaked_count > 0);
            self.queue.push_back((ev, wait.then_some(now)));
        }
        self.release(now)
    }

    /// The records judged by now (a waiting spawn past [`GRACE`] is final), in order.
    pub fn release(&mut self, now: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some((_, since)) = self.queue.front() {
            let full = self.queue.len() > MAX_QUEUED;
            if !full && since.is_some_and(|t| now.duration_since(t) < GRACE) {
                break;
            }
            out.extend(self.queue.pop_front().map(|(ev, _)| ev));
        }
        out
    }

    /// Every record left, the waiting spawns final (the trace ends).
    pub fn finish(&mut self) -> Vec<Event> {
        self.queue.drain(..).map(|(ev, _)| ev).collect()
    }

    /// `pid` exec'd again (`again`) or exited: its waiting spawn is judged.
    fn judge(&mut self, pid: u32, again: bool) {
        for (ev, since) in self.queue.iter_mut().rev() {
            if let (Event::Spawn(s), Some(_)) = (ev, &since) {
                if s.pid == pid {
                    if again {
                        s.flags |= SpawnFlags::EXECD_AGAIN;
                    }
                    *since = None;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::spawn::Exit;

    fn spawn(pid: u32, leaked: u32, flags: SpawnFlags) -> Event {
        let mut s = crate::trace::report::tests::spawn("java", "/x", 0, 0, leaked);
        s.pid = pid;
        s.flags = flags;
        Event::Spawn(Box::new(s))
    }

    fn exit(pid: u32) -> Event {
        Event::Exit(Exit {
            pid,
            parent_pid: 1,
            never_execd: false,
            failed_exec: None,
        })
    }

    fn pids_flags(evs: &[Event]) -> Vec<(u32, bool)> {
        evs.iter()
            .filter_map(|e| match e {
                Event::Spawn(s) => Some((s.pid, s.flags.contains(SpawnFlags::EXECD_AGAIN))),
                Event::Exit(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_step_that_execs_again_is_transient_and_order_is_kept() {
        let t = Instant::now();
        let mut st = Steps::default();
        // jspawnhelper (11 fds), then an unrelated spawn, then jspawnhelper's exec of the
        // command: nothing leaves before the step is judged.
        let out = st.push(
            vec![
                spawn(10, 11, SpawnFlags::empty()),
                spawn(20, 0, SpawnFlags::empty()),
            ],
            t,
        );
        assert!(out.is_empty(), "{out:?}");
        let out = st.push(vec![spawn(10, 0, SpawnFlags::REEXEC)], t);
        assert_eq!(pids_flags(&out), [(10, true), (20, false), (10, false)]);
    }

    #[test]
    fn a_step_that_exits_or_outlives_the_grace_is_final() {
        let t = Instant::now();
        let mut st = Steps::default();
        assert!(st
            .push(vec![spawn(10, 2, SpawnFlags::empty())], t)
            .is_empty());
        let out = st.push(vec![exit(10)], t);
        assert_eq!(pids_flags(&out), [(10, false)]);
        assert_eq!(out.len(), 2);
        assert!(st
            .push(vec![spawn(11, 2, SpawnFlags::empty())], t)
            .is_empty());
        assert!(st.release(t + GRACE / 2).is_empty());
        assert_eq!(pids_flags(&st.release(t + GRACE)), [(11, false)]);
        assert!(st
            .push(vec![spawn(12, 2, SpawnFlags::empty())], t)
            .is_empty());
        assert_eq!(pids_flags(&st.finish()), [(12, false)]);
    }
}
