//! Call sites' stacks unwound over a copy of their stack's top (`origin_stack_copy`'s
//! [`StackCopyRecord`], sent at a site's first origin): kept per (process, site) and used
//! for every later origin of that site, in place of the unwinding over the origin record's
//! few words. A site is what both records carry: the kernel's frame-pointer walk and the
//! user sp at the call (the same call path from the same depth). The copy is the traced
//! process's memory: read only within its bytes, every return address checked against the
//! user range, at most [`SITE_DEPTH`] frames, and [`MAX_SITES`] sites kept in all. Where
//! the unwind tables' walk ends in JIT code (no unwind table: a Java or JavaScript frame
//! above a native call, as `open64` under `FileInputStream` or `fs.openSync`), it goes on
//! by the runtime's frame pointers over the same words ([`Symbolizer::past_jit_in_copy`]).

use std::{collections::HashMap, sync::Arc};

use fdaudit_common::{stack_copy_flags, StackCopyRecord};

use super::{partial, FoundBy, Symbolizer, USER_TOP};
use crate::engine::{
    process::Processes,
    unwind::{unwind_from, ChainEnd},
};

/// Return addresses unwound per site (an interpreter's stack to `main` is deeper than the
/// kernel's walk keeps).
pub const SITE_DEPTH: usize = 64;
/// Sites kept in all (all forgotten when one more comes).
pub const MAX_SITES: usize = 4096;

/// One site's unwound callers, and why they stop short of the outermost frame, if they do.
#[derive(Debug)]
pub(in crate::engine) struct SiteFrames {
    pub callers: Vec<(u64, FoundBy)>,
    pub partial: Option<&'static str>,
}

/// One process's sites, by (frame-pointer walk, sp).
type OfPid = HashMap<(Vec<u64>, u64), Arc<SiteFrames>>;

/// Callers, each with how it was found, and why they stop short, if they do.
pub(super) type Callers = (Vec<(u64, FoundBy)>, Option<&'static str>);

/// The sites of each process.
#[derive(Default)]
pub(in crate::engine) struct Sites {
    by_pid: HashMap<u32, OfPid>,
    count: usize,
}

impl Sites {
    pub fn get(&self, pid: u32, walk: &[u64], sp: u64) -> Option<Arc<SiteFrames>> {
        // (a lookup by slice: the key's Vec borrows as one only whole)
        let of_pid = self.by_pid.get(&pid)?;
        of_pid.get(&(walk.to_vec(), sp)).cloned()
    }

    fn insert(&mut self, pid: u32, walk: Vec<u64>, sp: u64, frames: SiteFrames) {
        if self.count >= MAX_SITES {
            self.by_pid.clear();
            self.count = 0;
        }
        let old = self
            .by_pid
            .entry(pid)
            .or_default()
            .insert((walk, sp), Arc::new(frames));
        if old.is_none() {
            self.count += 1;
        }
    }

    pub fn forget(&mut self, pid: u32) {
        if let Some(gone) = self.by_pid.remove(&pid) {
            self.count -= gone.len();
        }
    }
}

/// The kernel's frame-pointer walk as the key of a site: up to its first word that is no
/// user address (a walk through a frame without a frame pointer ends in garbage).
pub(super) fn walk_of(stack: &[u64], n: u32) -> Vec<u64> {
    stack[..(n as usize).min(stack.len())]
        .iter()
        .copied()
        .take_while(|&a| a != 0 && a < USER_TOP)
        .collect()
}

impl Symbolizer {
    /// Unwinds the copy `rec` carries from its registers, by the modules' unwind tables,
    /// and keeps the callers for its site; whether it kept any.
    pub fn learn_stack_copy(&mut self, rec: &StackCopyRecord, parent: &Processes) -> bool {
        self.begin_record();
        // Sent right after its origin record: made in the image that record was.
        self.image_now = self.code.get(&rec.pid).copied();
        let walk = walk_of(&rec.stack, rec.nstack);
        let (Some(&ip), Some(words)) = (walk.first(), copied_from_sp(rec)) else {
            return false;
        };
        let bp = Some(rec.bp).filter(|&b| b != 0 && b < USER_TOP);
        let (unwound, whole, fp) = unwind_from(ip, rec.sp, bp, words, SITE_DEPTH, |at| {
            self.frame_rule(rec.pid, at, parent)
        });
        let Some(&last) = unwound.last() else {
            return false;
        };
        let at_bound = rec.flags & stack_copy_flags::AT_BOUND != 0;
        let mut callers: Vec<_> = unwound.into_iter().map(|a| (a, FoundBy::EhFrame)).collect();
        let mut partial = match () {
            () if whole => None,
            () if callers.len() >= SITE_DEPTH => Some(partial::SITE_DEPTH),
            () if at_bound => Some(partial::COPY_BOUND),
            () => Some(partial::UNWIND_ENDS),
        };
        // Ended in JIT code (no unwind table there): on by its runtime's frame pointers.
        let depth = SITE_DEPTH - callers.len();
        let past = fp.filter(|_| !whole && depth > 0).and_then(|fp| {
            self.past_jit_in_copy(rec.pid, last, (fp, rec.sp, words), depth, parent)
        });
        if let Some((more, end)) = past {
            callers.extend(more);
            partial = match end {
                ChainEnd::Outermost => None,
                ChainEnd::Depth => Some(partial::SITE_DEPTH),
                ChainEnd::OutOfCopy if at_bound => Some(partial::COPY_BOUND),
                ChainEnd::OutOfCopy => Some(partial::UNWIND_ENDS),
                ChainEnd::NotCode => Some(partial::FP_ENDS),
            };
        }
        self.sites
            .insert(rec.pid, walk, rec.sp, SiteFrames { callers, partial });
        true
    }

    /// The callers kept for the site of an origin (`walk`, `sp`) of `pid`, each with how it
    /// was found, and why they stop short; None when the site's stack was not copied.
    pub(super) fn site_callers(&self, pid: u32, walk: &[u64], sp: u64) -> Option<Callers> {
        let site = self.sites.get(pid, walk, sp)?;
        Some((site.callers.clone(), site.partial))
    }
}

/// The copied words from the user sp on, if the copy holds it at a word boundary.
fn copied_from_sp(rec: &StackCopyRecord) -> Option<&[u64]> {
    let off = rec.sp.checked_sub(rec.base)?;
    if off % 8 != 0 {
        return None;
    }
    let end = usize::try_from(rec.nbytes / 8).ok()?.min(rec.words.len());
    rec.words.get(usize::try_from(off / 8).ok()?..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_kept_per_process_and_walk_within_their_bound() {
        let mut s = Sites::default();
        let frames = || SiteFrames {
            callers: vec![(1, FoundBy::EhFrame)],
            partial: None,
        };
        s.insert(7, vec![10, 20], 0x1000, frames());
        assert!(s.get(7, &[10, 20], 0x1000).is_some());
        // Another sp, another walk, another process: another site.
        assert!(s.get(7, &[10, 20], 0x1008).is_none());
        assert!(s.get(7, &[10, 21], 0x1000).is_none());
        assert!(s.get(8, &[10, 20], 0x1000).is_none());
        s.forget(7);
        assert!(s.get(7, &[10, 20], 0x1000).is_none());
        assert_eq!(s.count, 0);
        for i in 0..=MAX_SITES as u64 {
            s.insert(1, vec![i], 0, frames());
        }
        assert!(s.count <= MAX_SITES);
    }

    #[test]
    fn the_copy_is_read_from_the_sp_within_the_bytes_copied_only() {
        // SAFETY: the record is integers.
        let mut rec: Box<StackCopyRecord> = Box::new(unsafe { std::mem::zeroed() });
        rec.base = 0x7fff_0000_0400;
        rec.sp = rec.base + 0x18;
        rec.nbytes = 64;
        assert_eq!(copied_from_sp(&rec).map(<[u64]>::len), Some(5));
        // A hostile size: no more than the record holds.
        rec.nbytes = u64::MAX;
        assert_eq!(
            copied_from_sp(&rec).map(<[u64]>::len),
            Some(rec.words.len() - 3)
        );
        // An sp below the copy, or between words: nothing.
        rec.sp = rec.base - 8;
        assert!(copied_from_sp(&rec).is_none());
        rec.sp = rec.base + 4;
        assert!(copied_from_sp(&rec).is_none());
    }
}
