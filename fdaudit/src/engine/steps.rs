//! One verdict for each step of an exec chain, for every front end (`trace`'s lines, records
//! and summary, `watch`'s counters). A spawn whose image exec'd again without forking
//! (`env CMD`, a shell's `exec`, Java's jspawnhelper) passed its fds on to the next image,
//! whose own record says which of them crossed: the step's fds are transient, not leaks.
//! Whether a step exec's again is known only at its process's next record, so a spawn with
//! fds is held until its process execs again (flagged [`SpawnFlags::EXECD_AGAIN`]), exits,
//! or [`GRACE`] passes (then it is final: what the image holds crossed). Records leave in
//! the order they came.
//!
//! A runtime's own helper is a step too: a spawner that execs its own image
//! (`/proc/self/exe`, as runc does for `runc init`) and whose image then crossed a boundary
//! (runc's init moves into the container's cgroup) or re-exec'd a sealed copy of itself
//! (runc's memfd copy) sets up a sandbox for what runs next, and got the fds it needs for
//! that (runc's sync socket, pipe and `exec.fifo`: plumbing only). Those records are flagged [`SpawnFlags::OWN_IMAGE`]: their fds
//! are transient, and what reaches the image the helper's child execs (the container's
//! entrypoint) is judged there, as every other record is. A multi-call binary's applet
//! (busybox's `sh` runs `sleep` as `/proc/self/exe`) crosses nothing: its fds are its own.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::{
    flags::SpawnFlags,
    spawn::{Event, LeakedFd, Spawn},
};
use crate::fdkind::FdKind;

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
    /// Processes running their spawner's own image (helpers if they cross a boundary),
    /// until they exec another or exit.
    helpers: HashSet<u32>,
}

/// The exec paths that name the exec'ing process's own image.
fn names_own_image(path: &[u8]) -> bool {
    matches!(path, b"/proc/self/exe" | b"/proc/thread-self/exe")
}

/// How a helper's re-exec stays the runtime's: its own image again, or a copy of it
/// exec'd from an fd (`/dev/fd/6`: runc's sealed memfd copy of itself, its guard against
/// CVE-2019-5736, which the kernel may also leave unnamed: a partial path). `None`: another
/// image (an entrypoint exec'd in the helper's own process), judged as every spawn is.
fn reexec_stays_own(s: &Spawn) -> Option<SelfExec> {
    let path = s.exec_path.raw.as_slice();
    let from_fd = ["/dev/fd/", "/proc/self/fd/"].iter().any(|p| {
        path.strip_prefix(p.as_bytes())
            .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
    });
    if names_own_image(path) {
        Some(SelfExec::Image)
    } else if from_fd || s.flags.contains(SpawnFlags::PATH_PARTIAL) {
        Some(SelfExec::SealedCopy)
    } else {
        None
    }
}

/// A runtime's hand-off to its helper is plumbing: sockets, pipes, FIFOs (runc's sync
/// socket, log pipe, `exec.fifo`). A helper that holds anything else (a directory, a file,
/// a device) is judged as every spawn is: a host directory in `runc init` is
/// CVE-2024-21626, whose fd never reaches the entrypoint (only the cwd made from it does).
fn is_plumbing(f: &LeakedFd) -> bool {
    matches!(f.kind, FdKind::Socket | FdKind::Pipe | FdKind::Fifo)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SelfExec {
    /// `/proc/self/exe`.
    Image,
    /// An fd's copy of the image.
    SealedCopy,
}

impl Steps {
    /// Takes a batch of records; returns those judged, in order.
    pub fn push(&mut self, events: Vec<Event>, now: Instant) -> Vec<Event> {
        for mut ev in events {
            self.mark_own_image(&mut ev);
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

    /// Flags a runtime's helper's records ([`SpawnFlags::OWN_IMAGE`]); forgets a helper
    /// that exec'd another image or exited.
    fn mark_own_image(&mut self, ev: &mut Event) {
        match ev {
            Event::Spawn(s) if s.exec_ok => {
                let own = if s.flags.contains(SpawnFlags::REEXEC) {
                    reexec_stays_own(s).filter(|_| self.helpers.contains(&s.pid))
                } else {
                    names_own_image(&s.exec_path.raw).then_some(SelfExec::Image)
                };
                if let Some(how) = own {
                    // A helper sets up a sandbox (it crossed a boundary: runc's init moved
                    // into the container's cgroup) or guards its image (a sealed copy); an
                    // applet of a multi-call binary does neither.
                    let sets_up = s.boundary.is_some() || how == SelfExec::SealedCopy;
                    if sets_up && s.leaked_fds.iter().all(is_plumbing) {
                        s.flags |= SpawnFlags::OWN_IMAGE;
                    }
                    self.helpers.insert(s.pid);
                } else {
                    self.helpers.remove(&s.pid);
                }
            }
            Event::Exit(e) => {
                self.helpers.remove(&e.pid);
            }
            Event::Spawn(_) => {}
        }
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

    #[test]
    fn a_runtime_s_own_helper_is_transient_until_it_execs_another_image() {
        let t = Instant::now();
        let mut st = Steps::default();
        let exec = |pid: u32, path: &str, flags: SpawnFlags| {
            let mut s = crate::trace::report::tests::spawn("runc", path, 0, 0, 3);
            s.pid = pid;
            s.flags = flags;
            // Every record here crossed into another cgroup, as runc's init does.
            let host = fdaudit_common::CredNs {
                read: u32::MAX,
                cgroup: 1,
                ..Default::default()
            };
            let container = fdaudit_common::CredNs { cgroup: 2, ..host };
            s.boundary = crate::engine::boundary::Boundary::across(&[&host], &container);
            Event::Spawn(Box::new(s))
        };
        let own = |evs: &[Event]| -> Vec<(u32, bool)> {
            evs.iter()
                .filter_map(|e| match e {
                    Event::Spawn(s) => Some((s.pid, s.flags.contains(SpawnFlags::OWN_IMAGE))),
                    Event::Exit(_) => None,
                })
                .collect()
        };
        // runc execs /proc/self/exe (runc init), which re-execs its memfd copy; then execs
        // nothing more and exits; an unrelated /bin/true of pid 21 is not a helper.
        let mut out = st.push(
            vec![
                exec(20, "/proc/self/exe", SpawnFlags::empty()),
                exec(20, "/dev/fd/6", SpawnFlags::REEXEC),
                exec(21, "/bin/true", SpawnFlags::empty()),
                exit(20),
            ],
            t,
        );
        out.extend(st.finish());
        assert_eq!(own(&out), [(20, true), (20, true), (21, false)]);
        assert!(out.iter().all(|e| match e {
            Event::Spawn(s) => s.flags.transient() == (s.pid == 20),
            Event::Exit(_) => true,
        }));
        // A multi-call binary's applet (busybox sh runs `sleep` as /proc/self/exe) crosses
        // no boundary: its fds are its own.
        let mut applet = crate::trace::report::tests::spawn("busybox", "/proc/self/exe", 0, 0, 1);
        applet.pid = 40;
        let out = st.push(vec![Event::Spawn(Box::new(applet)), exit(40)], t);
        assert_eq!(own(&out), [(40, false)]);
        // runc's init re-exec'd its sealed copy before it was moved into the container's
        // cgroup (a race with its parent): still the helper.
        let bare = |path: &str, flags: SpawnFlags| {
            let mut s = crate::trace::report::tests::spawn("runc", path, 0, 0, 3);
            s.pid = 50;
            s.flags = flags;
            Event::Spawn(Box::new(s))
        };
        let out = st.push(
            vec![
                bare("/proc/self/exe", SpawnFlags::empty()),
                bare("/dev/fd/6", SpawnFlags::REEXEC),
                exit(50),
            ],
            t,
        );
        assert_eq!(own(&out), [(50, false), (50, true)]);
        // A helper that holds more than plumbing (CVE-2024-21626: a host directory in runc's
        // init) is judged as every spawn is.
        let mut cve = crate::trace::report::tests::spawn("runc", "/dev/fd/6", 0, 0, 1);
        cve.pid = 50;
        cve.flags = SpawnFlags::REEXEC;
        cve.leaked_fds = vec![crate::trace::report::tests::leaked_fd(7, 1, 2)];
        let out = st.push(
            vec![
                bare("/proc/self/exe", SpawnFlags::empty()),
                Event::Spawn(Box::new(cve)),
                exit(50),
            ],
            t,
        );
        assert_eq!(own(&out), [(50, false), (50, false)]);
        // A helper that execs another image (a re-exec not of its own) is judged there.
        let mut out = st.push(
            vec![
                exec(30, "/proc/self/exe", SpawnFlags::empty()),
                exec(30, "/bin/sh", SpawnFlags::REEXEC),
            ],
            t,
        );
        out.extend(st.finish());
        assert_eq!(own(&out)[0], (30, true));
        assert!(!own(&out)[1].1, "{:?}", own(&out));
    }
}
