//! The symbolizer's bounds: a record's CPU time, and maps kept under a size; what it keeps
//! of a record beside its frames.

use std::{collections::HashMap, time::Duration};

use fdaudit_common::OriginRecord;

use super::{Symbolizer, MAX_PIDS};

impl Symbolizer {
    /// The copied stack words the last [`Symbolizer::stack`] read (bit i: word i): the
    /// only ones its result depends on.
    pub fn words_read(&self) -> u64 {
        self.words_read
    }

    /// Learns the text range of `rec`'s process (its own frames are found there once its
    /// maps are gone).
    pub fn note_code(&mut self, rec: &OriginRecord) {
        if rec.start_code < rec.end_code {
            let range = (rec.start_code, rec.end_code);
            insert_bounded(&mut self.code, MAX_PIDS, rec.pid, range);
        }
    }
}

/// The calling thread's CPU time (what a record costs, whatever else runs on the CPUs).
pub(super) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Inserts into a map kept under `max` entries (emptied when full: the entries are hints).
pub(super) fn insert_bounded<K: std::hash::Hash + Eq, V>(
    m: &mut HashMap<K, V>,
    max: usize,
    k: K,
    v: V,
) {
    if m.len() >= max && !m.contains_key(&k) {
        m.clear();
    }
    m.insert(k, v);
}
