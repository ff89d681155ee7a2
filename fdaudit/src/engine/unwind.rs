//! Unwinding a user stack from the modules' unwind tables (`.eh_frame`), as a debugger does:
//! [`Tables`] holds a module's and gives one frame's rule, [`unwind`] follows the rules over
//! the stack words an origin record copies. What the kernel's frame-pointer walk cannot do
//! in code built without frame pointers (Debian's libc, python3, perl).

use std::fs::File;

use fdaudit_common::ORIGIN_STACK_DEPTH;

use crate::untrusted::Bounded;

/// The top of user space (x86_64 and arm64, 48-bit): no return address is at or above it.
pub const USER_TOP: u64 = 1 << 48;

/// The most bytes read of a module for its unwind table.
pub const UNWIND_BUDGET: u64 = 8 << 20;

/// The register a frame's canonical frame address (CFA) is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CfaBase {
    /// The stack pointer (rsp).
    Sp,
    /// The frame pointer (rbp).
    Fp,
}

/// How to find the caller of a frame: its CFA (the caller's stack pointer) as a register
/// plus `cfa`, and where the return address and the caller's frame pointer are saved,
/// relative to the CFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRule {
    pub base: CfaBase,
    pub cfa: i64,
    pub ra: i64,
    /// None: the frame pointer is the caller's still.
    pub rbp: Option<i64>,
    /// The table says the frame has no caller (its return address is undefined: `_start`,
    /// a thread's start): the stack is whole.
    pub outermost: bool,
}

/// A module's unwind table: its `.eh_frame_hdr` and `.eh_frame` sections, read once
/// (within [`UNWIND_BUDGET`]) and kept for every rule asked of it.
pub struct Tables {
    hdr: Vec<u8>,
    hdr_addr: u64,
    eh: Vec<u8>,
    eh_addr: u64,
    /// (file offset, size, address) of each segment: file offsets to the addresses the
    /// table knows.
    segments: Vec<(u64, u64, u64)>,
}

impl Tables {
    /// Reads the unwind table of `module` (`len` bytes when opened). None: no table (or
    /// not x86_64: on aarch64 the return address of a function that has not saved it is
    /// in the link register, which no record carries).
    pub fn load(module: &File, len: u64) -> Option<Tables> {
        use object::{Object as _, ObjectSection as _, ObjectSegment as _};
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let data = Bounded::new(module.try_clone().ok()?, len, UNWIND_BUDGET);
        let obj = object::File::parse(&data).ok()?;
        let segments = obj
            .segments()
            .map(|seg| {
                let (start, size) = seg.file_range();
                (start, size, seg.address())
            })
            .take(256)
            .collect();
        let hdr = obj.section_by_name(".eh_frame_hdr")?;
        let eh = obj.section_by_name(".eh_frame")?;
        Some(Tables {
            hdr: hdr.data().ok()?.to_vec(),
            hdr_addr: hdr.address(),
            eh: eh.data().ok()?.to_vec(),
            eh_addr: eh.address(),
            segments,
        })
    }

    /// What keeping it costs, in bytes.
    pub fn cost(&self) -> u64 {
        (self.hdr.len() + self.eh.len() + 24 * self.segments.len() + 128) as u64
    }

    /// The unwind rule of the frame executing at file offset `off`, as the table says
    /// (`.eh_frame` found through `.eh_frame_hdr`'s search table, as a debugger or `perf
    /// --call-graph dwarf` finds it). Only the rules that need no DWARF expression: a CFA
    /// from rsp or rbp plus a constant, registers saved at the CFA plus a constant.
    pub fn rule(&self, off: u64) -> Option<FrameRule> {
        use gimli::{CfaRule, RegisterRule, UnwindSection as _, X86_64};
        let addr = self.segments.iter().find_map(|&(start, size, addr)| {
            (start..start.checked_add(size)?)
                .contains(&off)
                .then(|| addr.checked_add(off - start))?
        })?;
        let endian = gimli::LittleEndian;
        let bases = gimli::BaseAddresses::default()
            .set_eh_frame_hdr(self.hdr_addr)
            .set_eh_frame(self.eh_addr);
        let parsed = gimli::EhFrameHdr::new(&self.hdr, endian)
            .parse(&bases, 8)
            .ok()?;
        let eh_frame = gimli::EhFrame::new(&self.eh, endian);
        let mut ctx = Box::new(gimli::UnwindContext::new());
        let row = parsed
            .table()?
            .unwind_info_for_address(&eh_frame, &bases, &mut ctx, addr, |f, b, o| {
                f.cie_from_offset(b, o)
            })
            .ok()?;
        let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
            return None;
        };
        let base = match register {
            X86_64::RSP => CfaBase::Sp,
            X86_64::RBP => CfaBase::Fp,
            _ => return None,
        };
        let ra = match row.register(X86_64::RA) {
            RegisterRule::Offset(ra) => ra,
            RegisterRule::Undefined => {
                return Some(FrameRule {
                    base,
                    cfa: offset,
                    ra: 0,
                    rbp: None,
                    outermost: true,
                })
            }
            _ => return None,
        };
        let rbp = match row.register(X86_64::RBP) {
            RegisterRule::Offset(at) => Some(at),
            RegisterRule::Undefined | RegisterRule::SameValue => None,
            _ => return None,
        };
        Some(FrameRule {
            base,
            cfa: offset,
            ra,
            rbp,
            outermost: false,
        })
    }
}

/// Where a frame with `rule` keeps its caller's return address: its index in words above
/// the stack pointer. None when the CFA is the frame pointer (the kernel's frame-pointer
/// walk then finds the caller), for an outermost frame, or an unaligned slot.
pub fn ra_word(rule: FrameRule) -> Option<u32> {
    if rule.base != CfaBase::Sp || rule.outermost {
        return None;
    }
    let at = rule.cfa.checked_add(rule.ra)?;
    (at >= 0 && at % 8 == 0).then(|| u32::try_from(at / 8).ok())?
}

/// The return addresses above the innermost frame (at `ip`), unwound by each frame's rule
/// from its module's unwind table (`rule_at`) over the words copied above the user stack
/// pointer `sp`: the walk a debugger makes, ending where a rule is missing, needs the frame
/// pointer before any frame saved it (its value at the call is not recorded), or reads
/// beyond the copy. Nothing is guessed. With them, whether the walk reached the stack's
/// outermost frame (a rule without return address, or a return address 0): else the stack
/// shown is partial.
#[cfg(test)]
pub fn unwind(
    ip: u64,
    sp: u64,
    words: &[u64],
    rule_at: impl FnMut(u64) -> Option<FrameRule>,
) -> (Vec<u64>, bool) {
    unwind_reading(ip, sp, words, rule_at, &mut 0)
}

/// [`unwind`], which also sets in `read` bit `i` for each word `words[i]` it read (its
/// result depends on those words alone: `super::stack_memo`).
pub fn unwind_reading(
    ip: u64,
    sp: u64,
    words: &[u64],
    rule_at: impl FnMut(u64) -> Option<FrameRule>,
    read: &mut u64,
) -> (Vec<u64>, bool) {
    let (callers, whole, _) = walk(ip, sp, None, words, ORIGIN_STACK_DEPTH, rule_at, read);
    (callers, whole)
}

/// [`unwind`] from the frame pointer `bp` at the call too (when known: a rule that needs it
/// before any frame saved it then holds), for up to `depth` return addresses; with them
/// the frame pointer in the last one's frame, where the rules tell it.
pub fn unwind_from(
    ip: u64,
    sp: u64,
    bp: Option<u64>,
    words: &[u64],
    depth: usize,
    rule_at: impl FnMut(u64) -> Option<FrameRule>,
) -> (Vec<u64>, bool, Option<u64>) {
    walk(ip, sp, bp, words, depth, rule_at, &mut 0)
}

/// Why a frame-pointer chain ([`fp_chain`]) ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd {
    /// A saved frame pointer of 0: the outermost frame clears it.
    Outermost,
    /// A word it needs lies outside the copied words.
    OutOfCopy,
    /// A return address that is no user address, or a saved frame pointer that does not
    /// lead up the stack.
    NotCode,
    /// `depth` return addresses read.
    Depth,
}

/// The return addresses of the frame-pointer chain from `bp` (the frame pointer in a frame
/// that keeps one: the caller's frame pointer saved at `bp`, the return address above it),
/// read from the words copied above the user stack pointer `sp` only, up to `depth` of
/// them. Each word is the traced process's: every return address is checked to be a user
/// address and every saved frame pointer to lead up the stack; whether the functions on
/// the way keep a frame pointer (else the chain's words are garbage) is the caller's to
/// judge ([`kept_while`]).
pub fn fp_chain(bp: u64, sp: u64, words: &[u64], depth: usize) -> (Vec<u64>, ChainEnd) {
    let word = |addr: u64| words.get(word_index(sp, addr)?).copied();
    let mut out = Vec::new();
    let mut bp = bp;
    while out.len() < depth {
        let (Some(next), Some(ret)) = (word(bp), bp.checked_add(8).and_then(word)) else {
            return (out, ChainEnd::OutOfCopy);
        };
        if ret == 0 || ret >= USER_TOP {
            return (out, ChainEnd::NotCode);
        }
        out.push(ret);
        if next == 0 {
            return (out, ChainEnd::Outermost);
        }
        if next <= bp {
            return (out, ChainEnd::NotCode);
        }
        bp = next;
    }
    (out, ChainEnd::Depth)
}

/// The index of the word at user address `addr` among words copied from the user stack
/// pointer `sp` on, if it is at or above `sp` and at a word boundary.
fn word_index(sp: u64, addr: u64) -> Option<usize> {
    let i = usize::try_from(addr.checked_sub(sp)? / 8).ok()?;
    (addr % 8 == sp % 8).then_some(i)
}

/// The walk of [`unwind_reading`] and [`unwind_from`] (bit `i` of `read` for the first 64
/// words).
fn walk(
    ip: u64,
    sp: u64,
    bp: Option<u64>,
    words: &[u64],
    depth: usize,
    mut rule_at: impl FnMut(u64) -> Option<FrameRule>,
    read: &mut u64,
) -> (Vec<u64>, bool, Option<u64>) {
    let mut word = |addr: u64| -> Option<u64> {
        let i = word_index(sp, addr)?;
        if i < 64 {
            *read |= 1 << i;
        }
        words.get(i).copied()
    };
    let at = |base: u64, off: i64| base.checked_add_signed(off);
    let (mut ip, mut sp_now, mut fp) = (ip, sp, bp);
    let mut out = Vec::new();
    while out.len() < depth {
        // A caller's rule is looked up inside its call instruction, not after it.
        let lookup = if out.is_empty() { ip } else { ip - 1 };
        let Some(rule) = rule_at(lookup) else {
            break;
        };
        if rule.outermost {
            return (out, true, fp);
        }
        let base = match rule.base {
            CfaBase::Sp => Some(sp_now),
            CfaBase::Fp => fp,
        };
        let Some(cfa) = base.and_then(|b| at(b, rule.cfa)).filter(|&c| c > sp_now) else {
            break;
        };
        let Some(ret) = at(cfa, rule.ra).and_then(&mut word) else {
            break;
        };
        if ret == 0 {
            return (out, true, fp);
        }
        if ret >= USER_TOP {
            break;
        }
        if let Some(off) = rule.rbp {
            fp = at(cfa, off).and_then(&mut word);
        }
        out.push(ret);
        (ip, sp_now) = (ret, cfa);
    }
    (out, false, fp)
}

/// The kernel's frame-pointer frames (of `walk`, after its first) that continue the stack
/// after `first`, the innermost frame's caller: none unless the innermost frame left rbp
/// alone, then one more for each function on the way whose unwind rule (`rule_at`) says
/// it keeps a frame pointer.
pub fn kernel_frames_kept(
    walk: &[u64],
    first: u64,
    mut rule_at: impl FnMut(u64) -> Option<FrameRule>,
) -> Vec<u64> {
    let (Some(&ip), Some(&second)) = (walk.first(), walk.get(1)) else {
        return Vec::new();
    };
    if rule_at(ip).is_none_or(|r| r.rbp.is_some()) {
        return Vec::new();
    }
    // The kernel's walk from the caller's rbp: its first frame is `first` itself when the
    // innermost frame had set one up, else the one after it.
    let rest = if second == first {
        &walk[2..]
    } else {
        &walk[1..]
    };
    // (a rule is looked up inside the call instruction, not after it)
    kept_while(rest, first, |at| {
        rule_at(at - 1).is_some_and(|r| r.base == CfaBase::Fp)
    })
}

/// The frames of `rest`, the kernel's frame-pointer walk on from return address `from`,
/// kept while each function on the way keeps a frame pointer (`keeps_fp`, asked of the
/// return address into it): past the first that does not, the walk's words are garbage.
pub fn kept_while(rest: &[u64], from: u64, mut keeps_fp: impl FnMut(u64) -> bool) -> Vec<u64> {
    let mut kept = Vec::new();
    let mut at = from;
    for &a in rest {
        if !keeps_fp(at) {
            break;
        }
        kept.push(a);
        at = a;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_return_address_slot_is_the_rule_s_only_for_an_sp_based_frame() {
        // Debian 12's open64 at its syscall: CFA sp+0x88, return at CFA-8: word 16.
        let open64 = FrameRule {
            base: CfaBase::Sp,
            cfa: 0x88,
            ra: -8,
            rbp: Some(-24),
            outermost: false,
        };
        assert_eq!(ra_word(open64), Some(16));
        // A leaf at its entry: the return address is at sp.
        assert_eq!(ra_word(FrameRule { cfa: 8, ..open64 }), Some(0));
        // A framed function: the kernel's walk has its caller already.
        let framed = FrameRule {
            base: CfaBase::Fp,
            cfa: 16,
            ..open64
        };
        assert_eq!(ra_word(framed), None);
        // No caller, or no word-aligned slot at or above sp: none.
        let start = FrameRule {
            outermost: true,
            ..open64
        };
        assert_eq!(ra_word(start), None);
        assert_eq!(ra_word(FrameRule { cfa: 4, ..open64 }), None);
        assert_eq!(
            ra_word(FrameRule {
                cfa: 0x8c,
                ..open64
            }),
            None
        );
    }

    #[test]
    fn unwinding_follows_each_frame_s_rule_within_the_copy_only() {
        let sp = 0x7ff0_0000_1000;
        // open64 (no frame pointer; saves rbp): CFA sp+24, rbp at CFA-16, return at CFA-8.
        // load_key (frame pointer): CFA rbp+16, return at CFA-8, rbp at CFA-16.
        // main's frame lies past the copy.
        let (open64, load_key, main) = (0x7f00_0000_0100, 0x5555_0000_1234, 0x5555_0000_2000);
        let mut words = vec![0u64; 8];
        words[1] = sp + 32; // load_key's rbp, saved by open64
        words[2] = load_key;
        words[4] = sp + 0x1000; // main's rbp
        words[5] = main;
        let leaf = FrameRule {
            base: CfaBase::Sp,
            cfa: 24,
            ra: -8,
            rbp: Some(-16),
            outermost: false,
        };
        let framed = FrameRule {
            base: CfaBase::Fp,
            cfa: 16,
            ra: -8,
            rbp: Some(-16),
            outermost: false,
        };
        let rules = |ip: u64| match ip {
            a if a == open64 => Some(leaf),
            a if a == load_key - 1 || a == main - 1 => Some(framed),
            _ => None,
        };
        let callers = |r: (Vec<u64>, bool)| r.0;
        assert_eq!(callers(unwind(open64, sp, &words, rules)), [load_key, main]);
        // main's caller is past the copy: the stack is partial. Had main's rule said it has
        // no caller (as _start's does), it would be whole.
        assert!(!unwind(open64, sp, &words, rules).1);
        let start = FrameRule {
            outermost: true,
            ..framed
        };
        let whole = |ip: u64| {
            if ip == main - 1 {
                Some(start)
            } else {
                rules(ip)
            }
        };
        assert_eq!(
            unwind(open64, sp, &words, whole),
            (vec![load_key, main], true)
        );
        // A wrapper that keeps rbp: the frame pointer at the call is not known, so the
        // framed caller cannot be unwound past.
        let keeps = FrameRule { rbp: None, ..leaf };
        let only = |ip: u64| if ip == open64 { Some(keeps) } else { rules(ip) };
        assert_eq!(callers(unwind(open64, sp, &words, only)), [load_key]);
        // No rule: nothing.
        assert!(callers(unwind(open64, sp, &words, |_| None)).is_empty());
        // The return address beyond the copy: nothing.
        let far = FrameRule { cfa: 128, ..leaf };
        assert!(callers(unwind(open64, sp, &words, |_| Some(far))).is_empty());
        // A kernel address is no return address.
        words[2] = u64::MAX - 7;
        assert!(callers(unwind(open64, sp, &words, rules)).is_empty());
    }

    /// A function of this test binary that calls nothing: its unwind table says the return
    /// address is at the stack pointer on entry (the call pushed it there).
    #[test]
    fn a_return_address_is_found_where_the_unwind_table_says() {
        let o = crate::untrusted::open_exe(std::process::id(), u64::MAX).expect("our exe");
        let (vaddr, off) =
            crate::engine::symbols::text_segment(&o.file, o.len).expect("an executable segment");
        let entry = this_binary_fn as *const () as u64;
        let base = base_address();
        let file_off = entry - base - vaddr + off;
        if cfg!(target_arch = "x86_64") {
            let rule = FrameRule {
                base: CfaBase::Sp,
                cfa: 8,
                ra: -8,
                rbp: None,
                outermost: false,
            };
            assert_eq!(
                Tables::load(&o.file, o.len).and_then(|t| t.rule(file_off)),
                Some(rule)
            );
        } else {
            assert!(Tables::load(&o.file, o.len).is_none());
        }
        // Not code: no unwind row.
        assert_eq!(Tables::load(&o.file, o.len).and_then(|t| t.rule(0)), None);
    }

    #[inline(never)]
    extern "C" fn this_binary_fn() {}

    /// Where this PIE is loaded: the first mapping of our own executable.
    fn base_address() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let line = maps
            .lines()
            .find(|l| l.ends_with(exe.to_str().expect("utf-8")))
            .expect("a mapping of the exe");
        let start = line.split('-').next().expect("start");
        u64::from_str_radix(start, 16).expect("hex")
    }

    #[test]
    fn a_frame_pointer_chain_is_read_within_the_copy_and_up_the_stack_only() {
        let sp = 0x7ff0_0000_1000u64;
        let (a, b) = (0x7f00_0000_1000u64, 0x7f00_0000_2000u64);
        let mut words = vec![0u64; 16];
        // bp sp+16: caller's bp sp+48, return a; sp+48: bp 0 (outermost), return b.
        words[2] = sp + 48;
        words[3] = a;
        words[6] = 0;
        words[7] = b;
        assert_eq!(
            fp_chain(sp + 16, sp, &words, 8),
            (vec![a, b], ChainEnd::Outermost)
        );
        assert_eq!(fp_chain(sp + 16, sp, &words, 1), (vec![a], ChainEnd::Depth));
        // A saved frame pointer past the copy, or below the current one, or between words.
        for (bad, end) in [
            (sp + 0x1000, ChainEnd::OutOfCopy),
            (sp + 8, ChainEnd::NotCode),
            (sp + 52, ChainEnd::OutOfCopy),
        ] {
            words[2] = bad;
            assert_eq!(fp_chain(sp + 16, sp, &words, 8), (vec![a], end), "{bad:#x}");
        }
        // No code address: nothing.
        words[3] = USER_TOP;
        assert_eq!(
            fp_chain(sp + 16, sp, &words, 8),
            (vec![], ChainEnd::NotCode)
        );
        words[3] = 0;
        assert_eq!(
            fp_chain(sp + 16, sp, &words, 8),
            (vec![], ChainEnd::NotCode)
        );
        // A frame pointer below the copy.
        assert_eq!(
            fp_chain(sp - 16, sp, &words, 8),
            (vec![], ChainEnd::OutOfCopy)
        );
    }

    #[test]
    fn the_kernel_s_frames_are_kept_only_through_functions_with_a_frame_pointer() {
        let (ip, caller, up, top) = (
            0x7f00_0000_0100u64,
            0x5555_0000_1000,
            0x5555_0000_2000,
            0x5555_0000_3000,
        );
        let keeps = FrameRule {
            base: CfaBase::Sp,
            cfa: 8,
            ra: -8,
            rbp: None,
            outermost: false,
        };
        let framed = FrameRule {
            base: CfaBase::Fp,
            cfa: 16,
            ra: -8,
            rbp: Some(-16),
            outermost: false,
        };
        let walk = [ip, up, top];
        // caller and up keep frame pointers: both kernel frames hold.
        let all = |a: u64| if a == ip { Some(keeps) } else { Some(framed) };
        assert_eq!(kernel_frames_kept(&walk, caller, all), [up, top]);
        // up has none: its rbp was a plain register, the frame after it is garbage.
        let no_fp_up = |a: u64| match a {
            a if a == ip => Some(keeps),
            a if a == up - 1 => Some(FrameRule {
                base: CfaBase::Sp,
                ..framed
            }),
            _ => Some(framed),
        };
        assert_eq!(kernel_frames_kept(&walk, caller, no_fp_up), [up]);
        // The innermost frame saved rbp (and used it): nothing of the kernel's walk holds.
        let saves = |a: u64| {
            if a == ip {
                Some(FrameRule {
                    rbp: Some(-16),
                    ..keeps
                })
            } else {
                Some(framed)
            }
        };
        assert!(kernel_frames_kept(&walk, caller, saves).is_empty());
    }
}
