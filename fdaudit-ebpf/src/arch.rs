//! Syscall register access for the architecture the object is built for
//! (`bpf_target_arch`, set by `xtask::build_ebpf`). Offsets into `struct pt_regs` come from
//! the running kernel's BTF through CONFIG (see `fdaudit::arch` for which member each is);
//! what differs here is how wide the saved syscall number is.

use crate::kernel::{conf, read_kernel};

/// A syscall argument at syscall entry: the `pt_regs` word at `offset`.
#[inline(always)]
pub fn arg(regs: u64, offset: u64) -> Result<u64, i64> {
    read_kernel(regs + offset)
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
