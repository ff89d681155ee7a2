//! The session's one per-process table: what the engine keeps of a traced process between
//! its records, with one lifetime rule.
//!
//! ```text
//!  spawn or exit record ──▶ parent      the process that forked it: --origin looks up an
//!  origin record ─────────┘             inherited fd in the ancestors' calls (origin.rs),
//!                                       a frame in the parent's maps (symbolize.rs)
//!  spawn record, exec ok ─▶ image       its name as the kernel names an image: the parent
//!                                       of its next exec when no fork was seen
//!                                       (exec_parent.rs)
//!                       └─▶ exec_path   the kernel's absolute path: the runtime of a parent
//!                                       gone, or exec'd again, before it was read
//!                                       (runtimes.rs, trace only)
//!  parent read live ─────▶ runtime      its image's runtime, by start time, until its next
//!                                       exec (runtimes.rs, trace only)
//!  spawn record, exec ok ─▶ ia32        whether its image is ia32, until its exit record
//!                                       (ia32.rs, where the backend does not count ia32)
//!
//!  exit record ─▶ Processes::exited (after complete.rs has named its failed exec):
//!                 forgotten if it has no parent and no runtime; else image and
//!                 exec_path dropped, parent and runtime kept for its descendants'
//!                 records still to come ─▶ forgotten once MAX_EXITED processes
//!                 exited after it. What origin.rs keeps by pid goes with it.
//! ```
//!
//! An exited process is not forgotten at once: a grandchild's leaked fd is matched to its
//! grandparent's call after both have exited (the kernel says nothing of a fork, so which
//! descendants are left is not known here), and a zombie parent's runtime is still asked
//! for by its children's execs. The last [`MAX_EXITED`] exited processes are kept; the
//! table as a whole holds at most [`MAX_PROCESSES`] (emptied when full, as the other
//! per-pid hints: a process whose exit record was lost to a full ring buffer must not stay).

use std::collections::{HashMap, VecDeque};

use crate::runtime::{Nofile, Runtime};

/// Exited processes kept for their descendants' records.
pub const MAX_EXITED: usize = 1 << 14;
/// Processes kept in all.
pub const MAX_PROCESSES: usize = 1 << 16;

/// What is kept of one traced process.
#[derive(Debug, Default)]
pub struct Process {
    /// The process that forked it, as a spawn, exit or origin record said.
    pub parent: Option<u32>,
    /// Its latest image's name (the file name, cut to 15 bytes).
    pub image: Option<Vec<u8>>,
    /// Its latest exec path as the kernel gave it, when absolute (kept only where runtimes
    /// are named).
    pub exec_path: Option<Vec<u8>>,
    /// Its image's runtime as read live: (start time, runtime, NOFILE), until its next exec.
    pub runtime: Option<(u64, (Runtime, Option<Nofile>))>,
    /// Whether its latest image is ia32 (asked only where the backend does not count ia32
    /// syscalls: ia32.rs), until its exit record.
    ia32: Option<bool>,
    /// The number of the exit that ended it (its place in [`Processes::exits`]).
    exit: Option<u64>,
}

/// Every traced process the engine keeps something of, by pid (see the module's rule).
#[derive(Debug, Default)]
pub struct Processes {
    by_pid: HashMap<u32, Process>,
    /// The exited processes in exit order, with the number of their exit.
    exits: VecDeque<(u32, u64)>,
    /// Exits seen so far.
    exit_count: u64,
}

impl Processes {
    /// `pid`'s entry, made empty if it has none. A record of a process already exited is
    /// another process with the same pid: its entry starts again.
    pub fn entry(&mut self, pid: u32) -> &mut Process {
        if self.by_pid.len() >= MAX_PROCESSES && !self.by_pid.contains_key(&pid) {
            self.by_pid.clear();
            self.exits.clear();
        }
        let p = self.by_pid.entry(pid).or_default();
        if p.exit.is_some() {
            *p = Process::default();
        }
        p
    }

    /// `pid`'s parent.
    pub fn parent(&self, pid: u32) -> Option<u32> {
        self.by_pid.get(&pid)?.parent
    }

    /// Learns `pid`'s parent from a spawn or exit record, unless one is known.
    pub fn note_parent(&mut self, pid: u32, parent: u32) {
        if parent != 0 && parent != pid {
            self.entry(pid).parent.get_or_insert(parent);
        }
    }

    /// Sets `pid`'s parent from an origin record (the kernel's answer as of the call).
    pub fn set_parent(&mut self, pid: u32, parent: u32) {
        self.entry(pid).parent = Some(parent);
    }

    /// `pid`'s latest image name.
    pub fn image(&self, pid: u32) -> Option<&[u8]> {
        self.by_pid.get(&pid)?.image.as_deref()
    }

    /// `pid`'s latest absolute exec path.
    pub fn exec_path(&self, pid: u32) -> Option<&[u8]> {
        self.by_pid.get(&pid)?.exec_path.as_deref()
    }

    /// `pid`'s runtime as read when its start time was `start`.
    pub fn runtime(&self, pid: u32, start: u64) -> Option<&(Runtime, Option<Nofile>)> {
        let (t, rt) = self.by_pid.get(&pid)?.runtime.as_ref()?;
        (*t == start).then_some(rt)
    }

    /// Keeps what was read of `pid`'s image when its start time was `start` (an exited
    /// process's too: a zombie is still asked for by its children's execs).
    pub fn set_runtime(&mut self, pid: u32, start: u64, rt: (Runtime, Option<Nofile>)) {
        match self.by_pid.get_mut(&pid) {
            Some(p) => p.runtime = Some((start, rt)),
            None => self.entry(pid).runtime = Some((start, rt)),
        }
    }

    /// Whether `pid`'s latest image is ia32, if known.
    pub fn ia32(&self, pid: u32) -> Option<bool> {
        self.by_pid.get(&pid)?.ia32
    }

    /// Keeps whether `pid`'s latest image is ia32 (`None`: unknown, or it exited).
    pub fn set_ia32(&mut self, pid: u32, ia32: Option<bool>) {
        match ia32 {
            // Said of a new image: an exited entry with the pid is another process's.
            Some(_) => self.entry(pid).ia32 = ia32,
            None => {
                if let Some(p) = self.by_pid.get_mut(&pid) {
                    p.ia32 = None;
                }
            }
        }
    }

    /// Forgets what was read of `pid`'s image (it exec'd another).
    pub fn forget_runtime(&mut self, pid: u32) {
        if let Some(p) = self.by_pid.get_mut(&pid) {
            p.runtime = None;
        }
    }

    /// The one clean-up, for the processes whose exit records a batch held (`pids`): each
    /// keeps only what its descendants may ask for, and the exited processes beyond the last
    /// [`MAX_EXITED`] are forgotten. The pids forgotten, for what others keep by pid.
    pub fn exited(&mut self, pids: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut gone = Vec::new();
        for pid in pids {
            let Some(p) = self.by_pid.get_mut(&pid) else {
                continue;
            };
            if p.parent.is_none() && p.runtime.is_none() {
                // Nothing a descendant asks for (no --origin, not a spawner read live).
                self.by_pid.remove(&pid);
                gone.push(pid);
                continue;
            }
            self.exit_count += 1;
            (p.image, p.exec_path) = (None, None);
            p.exit = Some(self.exit_count);
            self.exits.push_back((pid, self.exit_count));
        }
        while self.exits.len() > MAX_EXITED {
            let Some((pid, n)) = self.exits.pop_front() else {
                break;
            };
            // Not another process with the pid since.
            if self.by_pid.get(&pid).is_some_and(|p| p.exit == Some(n)) {
                self.by_pid.remove(&pid);
                gone.push(pid);
            }
        }
        gone
    }

    /// Processes kept (exited ones included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_pid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_session_keeps_a_bounded_table_and_the_recent_exited_ancestors() {
        let mut procs = Processes::default();
        // A long `watch --origin`: a shell (pid 10) forks short children that fork
        // grandchildren, each batch ending with their exits.
        let n = 3 * MAX_EXITED as u32;
        let mut forgotten = 0;
        for i in 0..n {
            let (child, grandchild) = (1000 + 2 * i, 1001 + 2 * i);
            procs.set_parent(child, 10);
            procs.note_parent(grandchild, child);
            procs.entry(child).image = Some(b"sh".to_vec());
            forgotten += procs.exited([child, grandchild]).len();
        }
        assert!(
            procs.len() <= MAX_EXITED + 1,
            "{} processes kept after {} exits",
            procs.len(),
            2 * n
        );
        assert_eq!(forgotten, 2 * n as usize - MAX_EXITED);
        // The last ones are kept for their descendants: the chain up to the shell.
        let last = 1000 + 2 * (n - 1);
        assert_eq!(procs.parent(last + 1), Some(last));
        assert_eq!(procs.parent(last), Some(10));
        assert_eq!(procs.image(last), None, "an exited image is not a parent's");
        assert_eq!(procs.parent(1001), None, "the first exits are forgotten");
    }

    #[test]
    fn a_pid_used_again_is_another_process() {
        let mut procs = Processes::default();
        procs.set_parent(7, 1);
        procs.exited([7]);
        assert_eq!(procs.parent(7), Some(1), "kept for its descendants");
        // pid 7 again, forked by pid 3: its old entry does not name it.
        procs.note_parent(7, 3);
        assert_eq!(procs.parent(7), Some(3));
        // Its old exit, once far behind, does not forget the new process.
        for pid in 100..100 + MAX_EXITED as u32 + 1 {
            procs.set_parent(pid, 1);
            procs.exited([pid]);
        }
        assert_eq!(procs.parent(7), Some(3));
    }
}
