//! `trace --origin`: the resolved stacks of each process's last call sites, so that a call
//! site that makes fds in a loop is unwound and resolved once, not once per record.
//!
//! A stack is a function of the record's stack fields alone (the frame-pointer walk, the
//! user sp, the text range, and of the words copied above the sp those the unwinder read:
//! a loop's counter or a buffer among them changes from call to call and is not looked at)
//! and of the process's mappings, which [`super::symbolize`] reads once and keeps: a record
//! whose stack fields and read words equal an earlier record's of the same process gets
//! that record's stack. The unwinder reads the same words again for the same values (which
//! word it reads next follows from the rules and the words read before). An exec forgets the process's
//! stacks (another image, other mappings). Only a stack whose every frame has its module is
//! kept: one without may still learn it (the modules record that follows, a later read of
//! the maps).

use std::collections::HashMap;

use fdaudit_common::{OriginRecord, ORIGIN_SP_WORDS, ORIGIN_STACK_DEPTH};

use super::stack::{partial, Stack};

/// Call sites kept per process (the most recent first).
const PER_PID: usize = 8;
/// Processes kept (emptied when full: the stacks are only a shortcut).
const MAX_PIDS: usize = 256;
/// Bytes the kept stacks may hold (their strings: module paths a traced process names, and
/// build ids); emptied when more would be kept.
const MAX_BYTES: usize = 4 << 20;

/// What a stack is computed from: the record's stack fields, and the words the unwinder
/// read (bit i of `read`: `sp_words[i]`; the others are not compared).
struct Site {
    nstack: u32,
    nsp_words: u32,
    stack: [u64; ORIGIN_STACK_DEPTH],
    start_code: u64,
    end_code: u64,
    sp: u64,
    read: u64,
    sp_words: [u64; ORIGIN_SP_WORDS],
}

impl Site {
    fn of(rec: &OriginRecord, read: u64) -> Site {
        Site {
            nstack: rec.nstack,
            nsp_words: rec.nsp_words,
            stack: rec.stack,
            start_code: rec.start_code,
            end_code: rec.end_code,
            sp: rec.sp,
            read,
            sp_words: rec.sp_words,
        }
    }

    /// Whether `rec`'s stack is this site's.
    fn is(&self, rec: &OriginRecord) -> bool {
        self.nstack == rec.nstack
            && self.nsp_words == rec.nsp_words
            && self.stack == rec.stack
            && self.start_code == rec.start_code
            && self.end_code == rec.end_code
            && self.sp == rec.sp
            && (0..ORIGIN_SP_WORDS)
                .filter(|i| self.read & (1 << i) != 0)
                .all(|i| self.sp_words[i] == rec.sp_words[i])
    }
}

/// The last call sites' stacks, per process.
#[derive(Default)]
pub struct StackMemo {
    by_pid: HashMap<u32, Vec<(Box<Site>, Stack)>>,
    /// What the kept entries hold (`cost`), within `MAX_BYTES`.
    bytes: usize,
    /// Records answered from a kept stack, and stacks computed (for tests and the docs).
    pub hits: u64,
    pub misses: u64,
}

impl StackMemo {
    /// The stack computed for an earlier record of `rec`'s process with the same stack
    /// fields, if kept.
    pub fn get(&mut self, rec: &OriginRecord) -> Option<Stack> {
        let list = self.by_pid.get_mut(&rec.pid);
        let Some((list, i)) =
            list.and_then(|l| l.iter().position(|(s, _)| s.is(rec)).map(|i| (l, i)))
        else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        // The most recent first: a loop's site is found at once.
        list[..=i].rotate_right(1);
        Some(list[0].1.clone())
    }

    /// Keeps `stack`, computed for `rec` from the words in `read` (bit i: `sp_words[i]`).
    pub fn put(&mut self, rec: &OriginRecord, stack: &Stack, read: u64) {
        let all_known = !stack.frames.is_empty() && stack.frames.iter().all(|f| f.module.is_some());
        if !all_known || stack.partial == Some(partial::NO_MODULE) {
            return;
        }
        let add = cost(stack);
        if (self.by_pid.len() >= MAX_PIDS && !self.by_pid.contains_key(&rec.pid))
            || self.bytes + add > MAX_BYTES
        {
            self.by_pid.clear();
            self.bytes = 0;
        }
        if add > MAX_BYTES {
            return;
        }
        let list = self.by_pid.entry(rec.pid).or_default();
        for (_, old) in list.drain((PER_PID - 1).min(list.len())..) {
            self.bytes -= cost(&old);
        }
        list.insert(0, (Box::new(Site::of(rec, read)), stack.clone()));
        self.bytes += add;
    }

    /// Forgets `pid`'s stacks (it exec'd, or the session forgot it).
    pub fn forget(&mut self, pid: u32) {
        for (_, old) in self.by_pid.remove(&pid).unwrap_or_default() {
            self.bytes -= cost(&old);
        }
    }
}

/// What an entry keeps: its site and its frames with their strings.
fn cost(stack: &Stack) -> usize {
    let strings = |f: &super::stack::Frame| {
        [&f.symbol, &f.file, &f.module, &f.build_id]
            .iter()
            .map(|s| s.as_ref().map_or(0, String::len))
            .sum::<usize>()
    };
    std::mem::size_of::<Site>()
        + stack
            .frames
            .iter()
            .map(|f| std::mem::size_of_val(f) + strings(f))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::super::stack::Frame;
    use super::*;

    fn rec(pid: u32, ip: u64, word: u64) -> OriginRecord {
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut r: OriginRecord = unsafe { std::mem::zeroed() };
        (r.pid, r.nstack, r.nsp_words) = (pid, 2, ORIGIN_SP_WORDS as u32);
        (r.stack[0], r.stack[1], r.sp_words[3]) = (ip, 0x4000, word);
        r
    }

    fn stack(module: Option<&str>) -> Stack {
        Stack {
            frames: vec![Frame {
                addr: 0x1000,
                module: module.map(String::from),
                ..Frame::default()
            }],
            partial: None,
        }
    }

    #[test]
    fn a_site_is_answered_only_for_the_same_stack_fields_of_the_same_process() {
        let mut m = StackMemo::default();
        let a = rec(10, 0x1000, 7);
        assert_eq!(m.get(&a), None);
        // The unwinder read word 3 (the caller's return address) and not word 5.
        m.put(&a, &stack(Some("/lib/libc.so.6")), 1 << 3);
        let mut b = rec(10, 0x1000, 7);
        b.sp_words[5] = 99;
        assert_eq!(
            m.get(&b),
            Some(stack(Some("/lib/libc.so.6"))),
            "word 5 not read"
        );
        // Another word above the sp (another caller of a wrapper without frame pointers),
        // another innermost frame, another process: not the same site.
        assert_eq!(m.get(&rec(10, 0x1000, 8)), None);
        assert_eq!(m.get(&rec(10, 0x1001, 7)), None);
        assert_eq!(m.get(&rec(11, 0x1000, 7)), None);
        let mut c = rec(10, 0x1000, 7);
        c.sp += 8;
        assert_eq!(m.get(&c), None, "another sp");
        assert_eq!((m.hits, m.misses), (1, 5));
        m.forget(10);
        assert_eq!(m.get(&a), None);
    }

    #[test]
    fn a_stack_with_a_frame_without_module_is_not_kept() {
        let mut m = StackMemo::default();
        let a = rec(10, 0x1000, 7);
        m.put(&a, &stack(None), 1);
        assert_eq!(m.get(&a), None);
        let mut s = stack(Some("/x"));
        s.frames.push(Frame::default());
        m.put(&a, &s, 1);
        assert_eq!(m.get(&a), None, "an outer frame without module");
        let mut s = stack(Some("/x"));
        s.partial = Some(partial::NO_MODULE);
        m.put(&a, &s, 1);
        assert_eq!(m.get(&a), None);
    }

    #[test]
    fn the_kept_strings_are_bounded() {
        let mut m = StackMemo::default();
        let mut long = stack(Some(&"/p".repeat(2048)));
        long.frames = vec![long.frames[0].clone(); ORIGIN_STACK_DEPTH];
        for pid in 0..MAX_PIDS as u32 {
            for ip in 0..PER_PID as u64 {
                m.put(&rec(pid, 0x1000 + ip, 0), &long, 1);
                assert!(m.bytes <= MAX_BYTES, "{} bytes kept", m.bytes);
            }
        }
        let kept: usize = m.by_pid.values().flatten().map(|(_, s)| cost(s)).sum();
        assert_eq!(kept, m.bytes, "the count follows what is kept");
        m.forget(MAX_PIDS as u32 - 1);
        let kept: usize = m.by_pid.values().flatten().map(|(_, s)| cost(s)).sum();
        assert_eq!(kept, m.bytes);
    }

    #[test]
    fn the_last_sites_of_a_process_are_kept() {
        let mut m = StackMemo::default();
        for ip in 0..PER_PID as u64 + 1 {
            m.put(&rec(10, 0x1000 + ip, 0), &stack(Some("/x")), 1);
        }
        assert_eq!(m.get(&rec(10, 0x1000, 0)), None, "the oldest went");
        assert!(m.get(&rec(10, 0x1001, 0)).is_some());
        assert!(m.get(&rec(10, 0x1000 + PER_PID as u64, 0)).is_some());
    }
}
