//! Syscall register access for the architecture the object is built for
//! (`bpf_target_arch`, set by `xtask::build_ebpf`). Offsets into `struct pt_regs` come from
//! the running kernel's BTF through CONFIG (see `fdaudit::arch` for which member each is);
//! what differs here is how wide the saved syscall number is.

use aya_ebpf::helpers::generated::{bpf_probe_read_kernel, bpf_task_pt_regs};
use fdaudit_common::task_btf;

use crate::kernel::{conf, read_kernel, Task};

/// The current syscall's saved user registers. From 5.15 (CONFIG's `task_btf` is REGS) the
/// BTF-typed pointer bpf_task_pt_regs gives, read by direct loads (the verifier checks each
/// against `struct pt_regs`; CONFIG's offsets are constants to it); before, the address the
/// raw syscall tracepoint passes, read by bpf_probe_read_kernel (a helper call per read, on
/// the hot path of the open family). Both are current's `task_pt_regs`, the registers
/// saved at syscall entry.
#[derive(Clone, Copy)]
pub struct Regs {
    raw: u64,
    btf: *const u8,
}

impl Regs {
    /// The registers of the syscall whose raw tracepoint passed `raw`, made by `task`
    /// (current).
    #[inline(always)]
    pub fn current(raw: u64, task: Task) -> Self {
        let btf = if direct() {
            // SAFETY: the helper takes current's task_struct and returns its saved user
            // pt_regs, valid for this program run.
            unsafe { bpf_task_pt_regs(task.btf() as *mut _) as *const u8 }
        } else {
            core::ptr::null()
        };
        Regs { raw, btf }
    }

    /// The pt_regs word at `offset` (a CONFIG offset).
    #[inline(always)]
    pub fn word(self, offset: u64) -> Result<u64, i64> {
        self.load(offset)
    }

    /// The `T` at `offset`: a u64 word, or aarch64's 32-bit `syscallno`.
    #[inline(always)]
    fn load<T>(self, offset: u64) -> Result<T, i64> {
        if direct() {
            // SAFETY: a load at a BTF offset of struct pt_regs, which the verifier checks
            // (a fault reads as 0).
            Ok(unsafe { core::ptr::read_volatile(self.btf.wrapping_add(offset as usize).cast()) })
        } else {
            read_kernel(self.raw + offset)
        }
    }
}

/// Whether [`Regs`] reads by direct loads (a constant to the verifier).
#[inline(always)]
fn direct() -> bool {
    conf!(task_btf) >= u64::from(task_btf::REGS)
}

/// A syscall argument at syscall entry: the `pt_regs` word at `offset`.
#[inline(always)]
pub fn arg(regs: u64, offset: u64) -> Result<u64, i64> {
    read_kernel(regs + offset)
}

/// The words at the start of `struct pt_regs` that [`args`] reads in one probe-read:
/// all of x86_64's (r15 .. ss, the arguments in di, si, dx, r10, r8), aarch64's x0 .. x20
/// (the arguments in x0 .. x5).
const REGS_WORDS: usize = 21;

/// The first four syscall arguments at syscall entry, and the fifth if `fifth` (else 0).
/// Through probe-reads, one bpf_probe_read_kernel of the registers' words instead of one
/// per argument (a helper call each, on every call of the table). An offset past those
/// words is an error (CONFIG is read-only: the verifier knows the offsets and visits no
/// check that cannot fail).
#[inline(always)]
pub fn args(regs: Regs, fifth: bool) -> Result<[u64; 5], i64> {
    if direct() {
        return Ok([
            regs.word(conf!(regs_arg0))?,
            regs.word(conf!(regs_arg1))?,
            regs.word(conf!(regs_arg2))?,
            regs.word(conf!(regs_arg3))?,
            if fifth {
                regs.word(conf!(regs_arg4))?
            } else {
                0
            },
        ]);
    }
    let mut w = core::mem::MaybeUninit::<[u64; REGS_WORDS]>::uninit();
    // SAFETY: the helper writes the whole buffer (zeroes on failure) or fails; it
    // tolerates any source address. Into the local directly: aya's typed wrapper would
    // copy the array out (a memmove call: see origin.rs, no_fds).
    let r = unsafe {
        bpf_probe_read_kernel(
            w.as_mut_ptr().cast(),
            (REGS_WORDS * 8) as u32,
            regs.raw as *const _,
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
pub fn exit_syscall_nr(regs: Regs) -> Result<i64, i64> {
    regs.word(conf!(regs_nr)).map(|nr| nr as i64)
}

/// The syscall number at syscall exit: aarch64's `syscallno` (s32).
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
pub fn exit_syscall_nr(regs: Regs) -> Result<i64, i64> {
    regs.load::<i32>(conf!(regs_nr)).map(i64::from)
}
