//! Syscall register access for the architecture the object is built for
//! (`bpf_target_arch`, set by `xtask::build_ebpf`). Offsets into `struct pt_regs` come from
//! the running kernel's BTF through CONFIG (see `fdaudit::arch` for which member each is);
//! what differs here is how wide the saved syscall number is.

use aya_ebpf::helpers::generated::bpf_probe_read_kernel;

use crate::kernel::{conf, read_kernel};

/// A syscall argument at syscall entry: the `pt_regs` word at `offset`.
#[inline(always)]
pub fn arg(regs: u64, offset: u64) -> Result<u64, i64> {
    read_kernel(regs + offset)
}

/// The words at the start of `struct pt_regs` that [`args`] reads in one probe-read:
/// all of x86_64's (r15 .. ss, the arguments in di, si, dx, r10, r8), aarch64's x0 .. x20
/// (the arguments in x0 .. x5).
const REGS_WORDS: usize = 21;

/// The first four syscall arguments at syscall entry, and the fifth if `fifth` (else 0),
/// from the syscall's pt_regs at `regs`: one bpf_probe_read_kernel of the registers' words
/// instead of one per argument (a helper call each, on every call of the table). An
/// offset past those words is an error (CONFIG is read-only: the verifier knows the
/// offsets and visits no check that cannot fail).
#[inline(always)]
pub fn args(regs: u64, fifth: bool) -> Result<[u64; 5], i64> {
    let mut w = core::mem::MaybeUninit::<[u64; REGS_WORDS]>::uninit();
    // SAFETY: the helper writes the whole buffer (zeroes on failure) or fails; it
    // tolerates any source address. Into the local directly: aya's typed wrapper would
    // copy the array out (a memmove call: see origin.rs, no_fds).
    let r = unsafe {
        bpf_probe_read_kernel(
            w.as_mut_ptr().cast(),
            (REGS_WORDS * 8) as u32,
            regs as *const _,
        )
    };
    if r != 0 {
        return Err(r);
    }
    let w = w.as_ptr().cast::<u64>();
    let pick = |off: u64| -> Result<u64, i64> {
        let i = off / 8;
        if i >= REGS_WORDS as u64 {
            return Err(-1);
        }
        // SAFETY: the helper filled all REGS_WORDS words; `i` is below that.
        Ok(unsafe { core::ptr::read_volatile(w.add(i as usize)) })
    };
    Ok([
        pick(conf!(regs_arg0))?,
        pick(conf!(regs_arg1))?,
        pick(conf!(regs_arg2))?,
        pick(conf!(regs_arg3))?,
        if fifth { pick(conf!(regs_arg4))? } else { 0 },
    ])
}

/// The first argument at syscall exit (aarch64 has put the return value in x0 by then and
/// kept the argument in orig_x0; x86_64 returns in ax and di is intact).
#[inline(always)]
pub fn exit_arg0(regs: u64) -> Result<u64, i64> {
    read_kernel(regs + conf!(regs_exit_arg0))
}

/// The syscall number at syscall exit: x86_64's `orig_ax` (unsigned long).
#[cfg(not(bpf_target_arch = "aarch64"))]
#[inline(always)]
pub fn exit_syscall_nr(regs: u64) -> Result<i64, i64> {
    read_kernel::<i64>(regs + conf!(regs_nr))
}

/// The syscall number at syscall exit: aarch64's `syscallno` (s32).
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
pub fn exit_syscall_nr(regs: u64) -> Result<i64, i64> {
    read_kernel::<i32>(regs + conf!(regs_nr)).map(i64::from)
}
