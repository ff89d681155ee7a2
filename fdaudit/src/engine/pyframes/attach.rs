//! The Python frames' place in the origin table (`engine::origin::Origins`): a
//! [`PyFramesRecord`] comes right after the origin record it belongs to (same pid and
//! tid), or (flag `MADE`) stands for a call that made fds with close-on-exec, matched later
//! to the `created_by` of a FIONCLEX by (pid, time).

use std::collections::{HashMap, VecDeque};

use fdaudit_common::{py_flags, PyFramesRecord};

use super::{Registry, Resolver};
use crate::engine::symbolize::Frame;

/// Close-on-exec calls' Python frames kept for a later FIONCLEX.
const MADE_KEPT: usize = 1024;

#[derive(Default)]
pub struct PyOrigins {
    pub registry: Registry,
    resolver: Resolver,
    made: HashMap<(u32, u64), Box<PyFramesRecord>>,
    made_order: VecDeque<(u32, u64)>,
}

impl PyOrigins {
    pub fn new(registry: Registry) -> PyOrigins {
        PyOrigins {
            registry,
            ..PyOrigins::default()
        }
    }

    /// A Python record: for an origin, its thread and frames (to put first in the stack of
    /// the origin that thread recorded just before); a `MADE` one is kept for
    /// [`PyOrigins::made_frames`].
    pub fn record(&mut self, rec: Box<PyFramesRecord>) -> Option<((u32, u32), Vec<Frame>)> {
        if rec.flags & py_flags::MADE != 0 {
            let key = (rec.pid, rec.time_ns);
            if self.made_order.len() >= MADE_KEPT {
                if let Some(old) = self.made_order.pop_front() {
                    self.made.remove(&old);
                }
            }
            self.made_order.push_back(key);
            self.made.insert(key, rec);
            return None;
        }
        Some((
            (rec.pid, rec.tid),
            self.resolver.frames(&self.registry, &rec),
        ))
    }

    /// Reads the code objects of a batch's Python records first, before the slower work
    /// of the records before them (a short script may exit soon after its origin): those
    /// of origins, and those of the close-on-exec calls a creator record names.
    pub fn prefetch(&mut self, raw: &[Vec<u8>]) {
        use crate::engine::seen::{origin_message, OriginMessage};
        let mut made: HashMap<(u32, u64), Box<PyFramesRecord>> = HashMap::new();
        for bytes in raw {
            match origin_message(bytes) {
                Some(OriginMessage::Python(rec)) if rec.flags & py_flags::MADE != 0 => {
                    // (as many as the batch holds)
                    made.insert((rec.pid, rec.time_ns), rec);
                }
                Some(OriginMessage::Python(rec)) => {
                    self.resolver.frames(&self.registry, &rec);
                }
                Some(OriginMessage::Created(c)) => {
                    let key = (c.made.pid, c.made.time_ns);
                    if let Some(rec) = made.get(&key).or_else(|| self.made.get(&key)) {
                        self.resolver.frames(&self.registry, rec);
                    }
                }
                _ => {}
            }
        }
    }

    /// The Python frames of the close-on-exec call of `pid` at `time_ns`, if kept (named
    /// now: the process lives, it is making the fd inheritable).
    pub fn made_frames(&mut self, pid: u32, time_ns: u64) -> Vec<Frame> {
        match self.made.remove(&(pid, time_ns)) {
            Some(rec) => self.resolver.frames(&self.registry, &rec),
            None => self.unsupported(pid).into_iter().collect(),
        }
    }

    /// The statement for a CPython process whose frames are not read.
    pub fn unsupported(&self, pid: u32) -> Option<Frame> {
        self.registry.unsupported(pid)
    }

    pub fn forget(&mut self, pid: u32) {
        self.registry.forget(pid);
        self.resolver.forget(pid);
    }
}
