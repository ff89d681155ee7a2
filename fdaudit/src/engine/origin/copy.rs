//! A call site's stack copy ([`StackCopyRecord`], sent after the origin record of the site's
//! first call): the origin just recorded for the thread gets the frames unwound over it
//! (later origins of the site get them from the symbolizer's sites).

use std::{collections::HashMap, sync::Arc};

use fdaudit_common::{OriginRecord, StackCopyRecord};

use super::{Call, Origins, PENDING_CREATED};
use crate::engine::process::Processes;

/// Each thread's last origin with a stack: its record, its call and how many of the call's
/// frames are the machine's (the ones a copy replaces), for the copy that may follow.
#[derive(Default)]
pub(super) struct LastOrigins(HashMap<(u32, u32), Last>);

/// A thread's last origin: (its record, its call, the machine's frames in the call).
type Last = (Box<OriginRecord>, Arc<Call>, usize);

impl LastOrigins {
    pub fn note(&mut self, rec: &OriginRecord, call: &Arc<Call>, native: usize) {
        if self.0.len() >= PENDING_CREATED {
            self.0.clear();
        }
        let last = (Box::new(*rec), Arc::clone(call), native);
        self.0.insert((rec.pid, rec.tid), last);
    }

    pub fn forget(&mut self, pid: u32) {
        self.0.retain(|(p, _), _| *p != pid);
    }
}

impl Origins {
    /// Learns a call site's stack from its copy; the thread's origin recorded just before
    /// it (of that site) gets the frames unwound over it.
    pub fn stack_copy_record(&mut self, procs: &Processes, rec: &StackCopyRecord) {
        if !self.sym.learn_stack_copy(rec, procs) {
            return;
        }
        // The process's kept stacks were made without this site's frames.
        self.memo.forget(rec.pid);
        let Some((orec, old, native)) = self.copies.0.remove(&(rec.pid, rec.tid)) else {
            return;
        };
        let Some(stack) = self.sym.stack(&orec, procs, true) else {
            return;
        };
        let keep = old.stack.len().saturating_sub(native);
        if old.stack[keep..] == stack.frames[..] && old.stack_partial == stack.partial {
            return;
        }
        let mut call = (*old).clone();
        call.stack.truncate(keep);
        call.stack.extend(stack.frames);
        call.stack_partial = stack.partial;
        let new = Arc::new(call);
        self.replace_call(rec.pid, &old, &new);
    }

    /// Puts `new` wherever `pid`'s fds (and the thread's last origin) hold `old`.
    fn replace_call(&mut self, pid: u32, old: &Arc<Call>, new: &Arc<Call>) {
        for list in self
            .by_fd
            .get_mut(&pid)
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            for e in list.iter_mut().filter(|e| Arc::ptr_eq(&e.call, old)) {
                e.call = Arc::clone(new);
            }
        }
        for last in self.py_last.values_mut() {
            if Arc::ptr_eq(last, old) {
                *last = Arc::clone(new);
            }
        }
    }
}
