//! The session's one per-process table: what the engine keeps of a traced process between
//! its records, forgotten in one place, once the batch holding its exit record is complete.
//!
//! ```text
//!  spawn record, exec ok ──▶ image       its name as the kernel names an image: the parent
//!                                        of its next exec when no fork was seen
//!                                        (exec_parent.rs)
//!                       └──▶ exec_path   the kernel's absolute path: the runtime of a parent
//!                                        gone, or exec'd again, before it was read
//!                                        (runtimes.rs, trace only)
//!  exit record ──────────▶ Processes::exited, after complete.rs has named its failed exec
//! ```
//!
//! The runtime cache (runtimes.rs, by pid and start time, dropped at the process's next
//! exec) and `--origin`'s parents and exec paths (origin.rs, in the decoder) keep their own.

use std::collections::HashMap;

use super::spawn::Event;

/// What is kept of one traced process.
#[derive(Debug, Default)]
pub struct Process {
    /// Its latest image's name (the file name, cut to 15 bytes).
    pub image: Option<Vec<u8>>,
    /// Its latest exec path as the kernel gave it, when absolute (kept only where runtimes
    /// are named).
    pub exec_path: Option<Vec<u8>>,
}

/// Every traced process the engine keeps something of, by pid, until its exit.
#[derive(Debug, Default)]
pub struct Processes {
    by_pid: HashMap<u32, Process>,
}

impl Processes {
    /// `pid`'s entry, made empty if it has none.
    pub fn entry(&mut self, pid: u32) -> &mut Process {
        self.by_pid.entry(pid).or_default()
    }

    /// `pid`'s latest image name.
    pub fn image(&self, pid: u32) -> Option<&[u8]> {
        self.by_pid.get(&pid)?.image.as_deref()
    }

    /// `pid`'s latest absolute exec path.
    pub fn exec_path(&self, pid: u32) -> Option<&[u8]> {
        self.by_pid.get(&pid)?.exec_path.as_deref()
    }

    /// The one clean-up at exit: forgets each process whose exit record is in `events`.
    pub fn exited(&mut self, events: &[Event]) {
        for ev in events {
            if let Event::Exit(e) = ev {
                self.by_pid.remove(&e.pid);
            }
        }
    }
}
