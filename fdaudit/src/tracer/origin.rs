//! `trace --origin`: which call made each leaked fd inheritable. The kernel sends one
//! [`OriginRecord`] per call of the origin table (`fdaudit_common::for_each_origin_call!`)
//! made by a traced process without close-on-exec; closes are not tracked. [`Origins`]
//! keeps the last few origins per (process, fd) with the file's identity (inode number and
//! superblock dev) and matches a leaked fd to one only if the identity is the same, so an
//! fd closed and reused for another file is never blamed on the first call. A spawn's fd
//! inherited through fork is looked up in the process's own table, then in its parent's
//! and further ancestors' (as of before the exec); an exec chain keeps the table (same pid).
//!
//! The stack: the kernel's frame-pointer walk (bpf_get_stack), plus the top words of the
//! user stack. Debian's glibc is built without frame pointers, so a walk that starts inside
//! a libc wrapper (open64) skips the function that called it: that frame is recovered as
//! the first word above the user sp that is a return address into an executable mapping
//! (the bytes before it are a call instruction). Such frames are marked
//! `"found_by": "stack-scan"`; they are a heuristic (a stale return address left on the
//! stack can match too). Each address is resolved to its module and file offset while the
//! process lives (/proc/PID/maps, read when the record is decoded; the module's file opened
//! then, through /proc/PID/map_files), and named from the module's ELF symbol tables
//! (`.symtab`, else `.dynsym`) and DWARF line table (`addr2line`, when the module has
//! `.debug_info`) when a leaked fd needs it: [`super::symbolize`], which treats every path,
//! file and size the traced process controls as hostile and bounds what it keeps.

use std::{collections::HashMap, sync::Arc};

use fdaudit_common::{OriginCall, OriginRecord, F_DUPFD, F_SETFD};
use serde::Serialize;

pub use super::symbolize::Frame;

/// Origins kept per (process, fd): older ones are dropped.
const PER_FD: usize = 4;
/// Ancestors looked at for an inherited fd.
const MAX_ANCESTORS: usize = 32;

/// The origin of a leaked fd, as JSON: the call, or why it is unknown.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Origin {
    Known(Box<Call>),
    Unknown { unknown: &'static str },
}

impl Origin {
    /// The syscall's name, or "unknown": a metric label (`watch --origin`).
    pub fn label(&self) -> &str {
        match self {
            Origin::Known(c) => &c.syscall,
            Origin::Unknown { .. } => "unknown",
        }
    }
}

/// What no origin was found for: an fd open before the trace began (the traced command's
/// inheritance), or one made by a call fdaudit does not record (an ia32 compat call, a
/// record lost to a full ring).
pub const BEFORE_TRACING: &str = "before tracing";

/// One call that made an fd inheritable.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Call {
    /// The syscall's name; fcntl with its command: `fcntl(F_DUPFD)`, `fcntl(F_SETFD)`.
    pub syscall: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Kernel timestamp of the call's return (CLOCK_MONOTONIC ns).
    pub time_ns: u64,
    /// User stack, innermost first.
    pub stack: Vec<Frame>,
}

/// One recorded origin: the call, the file's identity and the raw frames.
#[derive(Debug, Clone)]
struct Entry {
    ino: u64,
    dev: u32,
    call: Arc<Call>,
}

/// The origin table of a session.
#[derive(Default)]
pub struct Origins {
    by_fd: HashMap<(u32, i32), Vec<Entry>>,
    parent: HashMap<u32, u32>,
    /// Frames resolved and named (bounded: [`super::symbolize`]).
    sym: super::symbolize::Symbolizer,
}

impl Origins {
    /// Keeps the origin `rec` reports (its frames resolved against the live process).
    pub fn record(&mut self, rec: &OriginRecord) {
        let Some(call) = OriginCall::from_u32(rec.call) else {
            return;
        };
        if rec.parent_pid != 0 {
            self.parent.insert(rec.pid, rec.parent_pid);
        }
        let stack = self.frames(rec);
        let call = Arc::new(Call {
            syscall: syscall_name(call, rec.cmd),
            pid: rec.pid,
            tid: rec.tid,
            comm: String::from_utf8_lossy(&crate::tracer::fdtarget::cstr(&rec.comm)).into_owned(),
            time_ns: rec.time_ns,
            stack,
        });
        for i in 0..2 {
            if rec.fd[i] < 0 {
                continue;
            }
            let list = self.by_fd.entry((rec.pid, rec.fd[i])).or_default();
            if list.len() == PER_FD {
                list.remove(0);
            }
            list.push(Entry {
                ino: rec.ino[i],
                dev: rec.dev[i],
                call: Arc::clone(&call),
            });
        }
    }

    /// Learns that `pid` runs `path` (from its spawn record), if absolute.
    pub fn note_exec(&mut self, pid: u32, path: &[u8]) {
        self.sym.note_exec(pid, path);
    }

    /// Learns that `pid`'s parent is `parent` (from a spawn or exit record).
    pub fn note_parent(&mut self, pid: u32, parent: u32) {
        if parent != 0 && parent != pid {
            self.parent.entry(pid).or_insert(parent);
        }
    }

    /// The origin of fd `fd` (file `ino` on `dev`) of `pid`, open at its exec at `exec_ns`.
    pub fn find(&mut self, pid: u32, fd: u32, ino: u64, dev: u32, exec_ns: u64) -> Origin {
        let mut p = pid;
        for _ in 0..MAX_ANCESTORS {
            let hit = self.by_fd.get(&(p, fd as i32)).and_then(|list| {
                list.iter()
                    .rev()
                    .find(|e| e.ino == ino && e.dev == dev && e.call.time_ns <= exec_ns)
            });
            if let Some(e) = hit {
                let mut call = (*e.call).clone();
                self.name_frames(&mut call.stack);
                return Origin::Known(Box::new(call));
            }
            match self.parent.get(&p) {
                Some(&pp) if pp != p => p = pp,
                _ => break,
            }
        }
        Origin::Unknown {
            unknown: BEFORE_TRACING,
        }
    }

    /// A spawn record's leaked fds are to be named: its share of CPU starts now.
    pub fn begin_record(&mut self) {
        self.sym.begin_record();
    }

    /// `rec`'s frames, resolved now (the record's process may soon be gone).
    fn frames(&mut self, rec: &OriginRecord) -> Vec<Frame> {
        self.sym.frames(rec, &self.parent)
    }

    fn name_frames(&mut self, stack: &mut [Frame]) {
        self.sym.name_frames(stack);
    }
}

/// The JSON name of a call (fcntl with its command).
fn syscall_name(call: OriginCall, cmd: u64) -> String {
    match (call, cmd) {
        (OriginCall::Fcntl, F_DUPFD) => "fcntl(F_DUPFD)".into(),
        (OriginCall::Fcntl, F_SETFD) => "fcntl(F_SETFD)".into(),
        (c, _) => c.name().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pid: u32, parent: u32, fd: [i32; 2], ino: u64, time_ns: u64) -> OriginRecord {
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut r: OriginRecord = unsafe { std::mem::zeroed() };
        r.pid = pid;
        r.tid = pid;
        r.parent_pid = parent;
        r.call = OriginCall::Openat as u32;
        r.fd = fd;
        r.ino = [ino, ino + 1];
        r.dev = [7, 7];
        r.time_ns = time_ns;
        r
    }

    #[test]
    fn a_leaked_fd_matches_its_origin_only_with_the_same_file() {
        let mut o = Origins::default();
        o.record(&rec(100, 1, [3, -1], 55, 10));
        assert!(matches!(o.find(100, 3, 55, 7, 20), Origin::Known(c) if c.syscall == "openat"));
        // fd 3 reused for another file, or another dev: not this call's.
        assert_eq!(
            o.find(100, 3, 56, 7, 20),
            Origin::Unknown {
                unknown: BEFORE_TRACING
            }
        );
        assert_eq!(
            o.find(100, 3, 55, 8, 20),
            Origin::Unknown {
                unknown: BEFORE_TRACING
            }
        );
        // A call after the exec did not make the fd the exec saw.
        assert_eq!(
            o.find(100, 3, 55, 7, 5),
            Origin::Unknown {
                unknown: BEFORE_TRACING
            }
        );
    }

    #[test]
    fn an_inherited_fd_is_found_in_the_ancestors_tables() {
        let mut o = Origins::default();
        o.record(&rec(100, 1, [4, 5], 90, 10)); // a pair: both fds
        o.note_parent(200, 100);
        o.note_parent(300, 200);
        let Origin::Known(c) = o.find(300, 5, 91, 7, 50) else {
            panic!("fd 5 of the grandchild comes from pid 100's call");
        };
        assert_eq!((c.pid, c.syscall.as_str()), (100, "openat"));
        assert!(matches!(o.find(300, 4, 90, 7, 50), Origin::Known(_)));
    }

    #[test]
    fn fcntl_is_named_with_its_command() {
        assert_eq!(syscall_name(OriginCall::Fcntl, F_DUPFD), "fcntl(F_DUPFD)");
        assert_eq!(syscall_name(OriginCall::Fcntl, F_SETFD), "fcntl(F_SETFD)");
        assert_eq!(syscall_name(OriginCall::Dup2, 0), "dup2");
    }
}
