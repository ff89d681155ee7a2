//! A `not seen` fd told apart: what fdaudit did see of the fd's number in the processes
//! looked in (another file, or a call after the exec), and an origin record that reaches the
//! reader only after the spawn that leaked its fd was named: the spawn is named again once
//! the records read after it are decoded ([`Origins::find_again`]); one that comes later
//! still is counted, and the trace warns of it.

use std::collections::VecDeque;

use super::{Entry, Origin, Origins};
use crate::engine::process::Processes;

/// Not-seen fds kept for an origin record that may come after them.
const KEPT: usize = 64;

/// A leaked fd named `not seen`: where it was looked for.
struct Missed {
    chain: Vec<u32>,
    fd: i32,
    ino: u64,
    dev: u32,
    exec_ns: u64,
}

/// The last not-seen fds, and how many origin records came after the spawn of their fd.
#[derive(Default)]
pub(super) struct Late {
    missed: VecDeque<Missed>,
    count: u64,
}

impl Late {
    /// `fd` (file `ino` on `dev`) of the processes `chain`, leaked at `exec_ns`, had no origin.
    pub fn note(&mut self, chain: &[u32], fd: i32, (ino, dev): (u64, u32), exec_ns: u64) {
        if self.missed.len() == KEPT {
            self.missed.pop_front();
        }
        self.missed.push_back(Missed {
            chain: chain.to_vec(),
            fd,
            ino,
            dev,
            exec_ns,
        });
    }

    /// An origin of `pid`'s `fd` (file `ino` on `dev`) at `time_ns` was just kept: counted
    /// if a spawn already named that fd `not seen`.
    pub fn arrived(&mut self, pid: u32, fd: i32, (ino, dev): (u64, u32), time_ns: u64) {
        let before = self.missed.len();
        self.missed.retain(|m| {
            !(m.fd == fd
                && m.ino == ino
                && m.dev == dev
                && time_ns <= m.exec_ns
                && m.chain.contains(&pid))
        });
        self.count += (before - self.missed.len()) as u64;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// A late origin was given to its fd after all (its spawn named again).
    pub fn corrected(&mut self) {
        self.count = self.count.saturating_sub(1);
    }

    pub fn forget(&mut self, pid: u32) {
        self.missed.retain(|m| m.chain.first() != Some(&pid));
    }
}

impl Origins {
    /// [`Origins::find`] again for an fd it named `not seen`: the origin found since, if any
    /// (a record that reached the reader after the spawn).
    pub fn find_again(
        &mut self,
        procs: &Processes,
        pid_fd: (u32, u32),
        identity: (u64, u32),
        exec_ns: u64,
    ) -> Option<Origin> {
        let found = self.find_with(procs, pid_fd, identity, exec_ns, false);
        if matches!(found, Origin::Unknown { .. }) {
            return None;
        }
        self.late.corrected();
        Some(found)
    }

    /// Origin records that came after the spawn whose leaked fd they made, and after that
    /// spawn was named again: that fd stayed `not seen`.
    pub fn late_origins(&self) -> u64 {
        self.late.count()
    }

    /// What fdaudit saw of fd `fd` in the processes `chain` when none of its origins is the
    /// leaked file's before its exec at `exec_ns`: the newest such call, or nothing.
    pub(super) fn near_miss(&self, chain: &[u32], fd: i32, ino: u64, exec_ns: u64) -> String {
        let newest = chain
            .iter()
            .filter_map(|p| self.by_fd.get(p)?.get(&fd).map(|l| (p, l)))
            .flat_map(|(p, l)| l.iter().map(move |e| (p, e)))
            .max_by_key(|(_, e)| e.call.time_ns);
        let Some((p, e)) = newest else {
            return String::new();
        };
        let what = describe(e, ino, exec_ns);
        format!(
            "; fdaudit saw fd {fd} of pid {p} made by {} {what}",
            e.call.syscall
        )
    }
}

fn describe(e: &Entry, ino: u64, exec_ns: u64) -> String {
    if e.call.time_ns > exec_ns {
        format!("{} ns after the exec", e.call.time_ns - exec_ns)
    } else if e.ino != ino {
        format!("for another file (inode {})", e.ino)
    } else {
        format!("for the same inode on another device ({})", e.dev)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{tests::rec, Origin, Origins};
    use crate::engine::process::Processes;

    fn reason(o: Origin) -> String {
        match o {
            Origin::Unknown {
                reason: Some(r), ..
            } => r,
            other => panic!("not seen: {other:?}"),
        }
    }

    #[test]
    fn a_not_seen_fd_says_what_fdaudit_saw_of_its_number() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        procs.note_parent(200, 100);
        // pid 100 opened fd 3 (inode 55) at 10 and fd 4 at 50.
        o.record(&mut procs, &rec(100, 1, [3, -1], 55, 10));
        o.record(&mut procs, &rec(100, 1, [4, -1], 60, 50));
        let r = reason(o.find(&procs, (200, 3), 99, 7, 30));
        assert!(
            r.contains("fd 3 of pid 100 made by openat for another file (inode 55)"),
            "{r}"
        );
        let r = reason(o.find(&procs, (200, 4), 60, 7, 30));
        assert!(r.contains("20 ns after the exec"), "{r}");
        let r = reason(o.find(&procs, (200, 5), 61, 7, 30));
        assert!(!r.contains("fdaudit saw"), "nothing seen of fd 5: {r}");
        assert_eq!(o.late_origins(), 0);
    }

    #[test]
    fn an_origin_record_after_the_spawn_that_leaked_its_fd_is_counted() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        procs.note_parent(200, 100);
        assert!(matches!(
            o.find(&procs, (200, 3), 55, 7, 30),
            Origin::Unknown { .. }
        ));
        // Another file, and a call after the exec: not the one the spawn missed.
        o.record(&mut procs, &rec(100, 1, [3, -1], 56, 10));
        o.record(&mut procs, &rec(100, 1, [3, -1], 55, 40));
        assert_eq!(o.late_origins(), 0);
        o.record(&mut procs, &rec(100, 1, [3, -1], 55, 20));
        assert_eq!(o.late_origins(), 1);
        // Counted once.
        o.record(&mut procs, &rec(100, 1, [3, -1], 55, 21));
        assert_eq!(o.late_origins(), 1);
        // Named again, the fd has its origin: nothing stays wrong.
        let again = o.find_again(&procs, (200, 3), (55, 7), 30);
        assert!(
            matches!(&again, Some(Origin::Known(c)) if c.time_ns == 21),
            "{again:?}"
        );
        assert_eq!(o.late_origins(), 0);
        // An fd still without one is not named again, nor kept twice.
        assert!(o.find_again(&procs, (200, 9), (55, 7), 30).is_none());
        o.record(&mut procs, &rec(100, 1, [9, -1], 55, 22));
        assert_eq!(o.late_origins(), 0, "fd 9 was never named not seen by find");
    }
}
