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
        let RegisterRule::Offset(ra) = row.register(X86_64::RA) else {
            return None;
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
        })
    }
}

/// The return addresses above the innermost frame (at `ip`), unwound by each frame's rule
/// from its module's unwind table (`rule_at`) over the words copied above the user stack
/// pointer `sp`: the walk a debugger makes, ending where a rule is missing, needs the frame
/// pointer before any frame saved it (its value at the call is not recorded), or reads
/// beyond the copy. Nothing is guessed.
pub fn unwind(
    ip: u64,
    sp: u64,
    words: &[u64],
    mut rule_at: impl FnMut(u64) -> Option<FrameRule>,
) -> Vec<u64> {
    let word = |addr: u64| -> Option<u64> {
        let i = usize::try_from(addr.checked_sub(sp)? / 8).ok()?;
        (addr % 8 == sp % 8).then(|| words.get(i).copied())?
    };
    let at = |base: u64, off: i64| base.checked_add_signed(off);
    let (mut ip, mut sp_now, mut fp) = (ip, sp, None::<u64>);
    let mut out = Vec::new();
    while out.len() < ORIGIN_STACK_DEPTH {
        // A caller's rule is looked up inside its call instruction, not after it.
        let lookup = if out.is_empty() { ip } else { ip - 1 };
        let Some(rule) = rule_at(lookup) else {
            break;
        };
        let base = match rule.base {
            CfaBase::Sp => Some(sp_now),
            CfaBase::Fp => fp,
        };
        let Some(cfa) = base.and_then(|b| at(b, rule.cfa)).filter(|&c| c > sp_now) else {
            break;
        };
        let Some(ret) = at(cfa, rule.ra).and_then(word) else {
            break;
        };
        if ret == 0 || ret >= USER_TOP {
            break;
        }
        if let Some(off) = rule.rbp {
            fp = at(cfa, off).and_then(word);
        }
        out.push(ret);
        (ip, sp_now) = (ret, cfa);
    }
    out
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
    let mut kept = Vec::new();
    let mut last = first;
    for &a in rest {
        if !rule_at(last - 1).is_some_and(|r| r.base == CfaBase::Fp) {
            break;
        }
        kept.push(a);
        last = a;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let framed = FrameRule {
            base: CfaBase::Fp,
            cfa: 16,
            ra: -8,
            rbp: Some(-16),
        };
        let rules = |ip: u64| match ip {
            a if a == open64 => Some(leaf),
            a if a == load_key - 1 || a == main - 1 => Some(framed),
            _ => None,
        };
        assert_eq!(unwind(open64, sp, &words, rules), [load_key, main]);
        // A wrapper that keeps rbp: the frame pointer at the call is not known, so the
        // framed caller cannot be unwound past.
        let keeps = FrameRule { rbp: None, ..leaf };
        let only = |ip: u64| if ip == open64 { Some(keeps) } else { rules(ip) };
        assert_eq!(unwind(open64, sp, &words, only), [load_key]);
        // No rule: nothing.
        assert!(unwind(open64, sp, &words, |_| None).is_empty());
        // The return address beyond the copy: nothing.
        let far = FrameRule { cfa: 128, ..leaf };
        assert!(unwind(open64, sp, &words, |_| Some(far)).is_empty());
        // A kernel address is no return address.
        words[2] = u64::MAX - 7;
        assert!(unwind(open64, sp, &words, rules).is_empty());
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
        };
        let framed = FrameRule {
            base: CfaBase::Fp,
            cfa: 16,
            ra: -8,
            rbp: Some(-16),
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
