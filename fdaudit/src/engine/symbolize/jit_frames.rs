//! The symbolizer's side of JIT frames ([`super::super::jit`]): which frames lie in a JIT's
//! code, the kernel's frame-pointer frames kept through it, and their names from the
//! process's perf map when the frames are named.

use super::{partial, FoundBy, Frame, Symbolizer};
use crate::engine::jit;
use crate::engine::process::Processes;
use crate::engine::unwind::{self, CfaBase, ChainEnd};

/// How the function a return address points into keeps its caller's frame pointer chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeps {
    /// Its unwind table says its frame address is the frame pointer.
    ByRule,
    /// JIT code of a runtime that keeps frame pointers.
    Assumed,
}

impl Symbolizer {
    /// The process (`pid` or an ancestor: a forked child runs its parent's code) whose
    /// anonymous executable memory holds `addr`, noted for its perf map.
    pub(super) fn jit_code_pid(&mut self, pid: u32, addr: u64, parent: &Processes) -> Option<u32> {
        let mut p = pid;
        for _ in 0..4 {
            let anon = |s: &Symbolizer| {
                s.anon_exec
                    .get(&p)
                    .is_some_and(|r| r.iter().any(|&(a, b)| (a..b).contains(&addr)))
            };
            if anon(self) {
                self.note_jit(p);
                return Some(p);
            }
            // Reading the maps (once per record) also reads their anonymous ranges.
            if self.mapping(p, addr, true).is_some() {
                return None; // a file's
            }
            if anon(self) {
                self.note_jit(p);
                return Some(p);
            }
            match parent.parent(p) {
                Some(pp) if pp != p => p = pp,
                _ => break,
            }
        }
        None
    }

    /// How the function holding return address `ret` keeps the frame pointer chain: by its
    /// unwind rule, or assumed: code without unwind rule (JIT code in anonymous memory, or
    /// generated code inside the runtime's own module, as V8's embedded builtins, which
    /// V8 may also copy elsewhere) of a runtime that keeps frame pointers; None: it may not.
    fn keeps_fp(&mut self, pid: u32, ret: u64, parent: &Processes) -> Option<Keeps> {
        let at = ret.checked_sub(1)?;
        if let Some(rule) = self.frame_rule(pid, at, parent) {
            return (rule.base == CfaBase::Fp).then_some(Keeps::ByRule);
        }
        let owner = match self.jit_code_pid(pid, at, parent) {
            Some(p) => p,
            None => {
                let (_, live) = self.mapping_in_tree(pid, at, false, parent)?;
                let p = live?;
                self.note_jit(p);
                p
            }
        };
        if self.jit.keeps_fp(owner) {
            return Some(Keeps::Assumed);
        }
        // A forked child that ran its parent's code when it made the call and has exec'd
        // since: the parent's runtime, if the parent maps the code too.
        let pp = parent.parent(owner).filter(|&pp| pp != owner)?;
        let mapped = self.jit_code_pid(pp, at, &Processes::default()).is_some()
            || self.mapping(pp, at, true).is_some();
        self.note_jit(pp);
        (mapped && self.jit.keeps_fp(pp)).then_some(Keeps::Assumed)
    }

    /// Continues `rest` (the innermost frame's callers) with the kernel's frame-pointer
    /// frames past its last one, when that one is in the kernel's walk too and each
    /// function on the way keeps a frame pointer; frames that rest on JIT code keeping one
    /// say so ([`JIT_FRAME_POINTER`]).
    pub(super) fn through_jit(
        &mut self,
        pid: u32,
        walk: &[u64],
        rest: &mut Vec<(u64, FoundBy)>,
        parent: &Processes,
    ) -> Option<Option<&'static str>> {
        let &(last, _) = rest.last()?;
        let mut how = Vec::new();
        let more = jit::frames_past(walk, last, |ret| {
            let k = self.keeps_fp(pid, ret, parent);
            how.push(k);
            k.is_some()
        });
        if more.is_empty() {
            return None;
        }
        for f in found_by(more, &how) {
            if rest.len() >= fdaudit_common::ORIGIN_STACK_DEPTH {
                break;
            }
            rest.push(f);
        }
        // The frames now end where the kernel's walk does (complete unless it was cut at
        // its depth), or where a function on the way keeps no frame pointer.
        let to_the_end = rest.last().map(|r| r.0) == walk.last().copied()
            && walk.len() < fdaudit_common::ORIGIN_STACK_DEPTH;
        Some((!to_the_end).then_some(partial::FP_ENDS))
    }

    /// The frames past `last`, the last return address a stack copy's unwinding by the
    /// unwind tables reached, when it lies in JIT code without an unwind table (a perf
    /// map's region) of a runtime that keeps frame pointers there: the frame-pointer chain
    /// from `bp` (the frame pointer in `last`'s frame, as the tables' rules left it) over
    /// the copied `words` above `sp`, kept while each function on the way keeps a frame
    /// pointer, and why they stop short, if they do. None: `last` is no such code.
    pub(super) fn past_jit_in_copy(
        &mut self,
        pid: u32,
        last: u64,
        (bp, sp, words): (u64, u64, &[u64]),
        depth: usize,
        parent: &Processes,
    ) -> Option<(Vec<(u64, FoundBy)>, ChainEnd)> {
        if self.keeps_fp(pid, last, parent)? != Keeps::Assumed {
            return None;
        }
        let (chain, end) = unwind::fp_chain(bp, sp, words, depth);
        let mut how = Vec::new();
        let kept = unwind::kept_while(&chain, last, |ret| {
            let k = self.keeps_fp(pid, ret, parent);
            how.push(k);
            k.is_some()
        });
        // Stopped at a function that keeps no frame pointer: the chain's words past it
        // are garbage, and nothing says where its caller is.
        let end = if kept.len() < chain.len() {
            ChainEnd::NotCode
        } else {
            end
        };
        Some((found_by(kept, &how), end))
    }

    /// Names a frame in JIT code from its process's perf map (read again if it changed),
    /// or says why it has no name.
    pub(super) fn name_jit_frame(&mut self, f: &mut Frame) {
        let Some(pid) = f.jit_pid else {
            return;
        };
        match self.jit.name(pid, f.addr) {
            Ok(n) => {
                f.symbol = Some(n.symbol);
                f.module = Some(n.map);
                f.code = n.code;
                f.unnamed = None;
            }
            Err(why) => f.unnamed = Some(why),
        }
    }

    /// Notes `pid` for its perf map and runtime, with its exec path as fdaudit saw it (the
    /// runtime of a process gone since is told from it).
    fn note_jit(&mut self, pid: u32) {
        let exe = self.exe.get(&pid).map(|(path, _)| path.clone());
        self.jit.note(pid, exe.as_deref());
    }

    /// A report is being made: perf maps are checked again for changes.
    pub fn begin_report(&mut self) {
        self.jit.begin_report();
    }
}

/// How each of `kept` (frames of a frame-pointer walk, each kept because the function of
/// the frame before it keeps a frame pointer: `how`) was found: past the first JIT code,
/// by the frame pointer of generated code that has no unwind table and is assumed to keep
/// one because its runtime does (V8; the JVM with `-XX:+PreserveFramePointer`).
fn found_by(kept: Vec<u64>, how: &[Option<Keeps>]) -> Vec<(u64, FoundBy)> {
    let mut assumed = false;
    kept.into_iter()
        .zip(how)
        .map(|(a, &k)| {
            assumed |= k == Some(Keeps::Assumed);
            let by = if assumed {
                FoundBy::JitFramePointer
            } else {
                FoundBy::FramePointers
            };
            (a, by)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_past_the_first_jit_code_say_they_rest_on_its_frame_pointer() {
        let how = [
            Some(Keeps::ByRule),
            Some(Keeps::Assumed),
            Some(Keeps::ByRule),
        ];
        assert_eq!(
            found_by(vec![1, 2, 3], &how),
            [
                (1, FoundBy::FramePointers),
                (2, FoundBy::JitFramePointer),
                (3, FoundBy::JitFramePointer)
            ]
        );
        // Fewer frames kept than asked of (the walk stopped at a function without one).
        let how = [Some(Keeps::Assumed), None];
        assert_eq!(found_by(vec![7], &how), [(7, FoundBy::JitFramePointer)]);
    }
}
