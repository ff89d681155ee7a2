//! What differs between the architectures fdaudit runs on (x86_64, aarch64): where the
//! syscall arguments and number sit in `struct pt_regs`. Syscall numbers are in
//! `fdaudit_common::sysno`, selected the same way.
//!
//! The offsets are looked up by a function the caller passes (the BTF reader's), so this
//! module knows register names only and does not import the reader that calls it.

/// `pt_regs` offsets the syscall programs read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallRegs {
    pub arg0: u32,
    pub arg1: u32,
    pub arg2: u32,
    /// The fourth argument (`trace --origin`: socketpair's array, accept4's flags).
    pub arg3: u32,
    /// The fifth (`trace --origin`: perf_event_open's flags).
    pub arg4: u32,
    /// The user stack pointer (`trace --origin`).
    pub sp: u32,
    pub nr: u32,
    pub exit_arg0: u32,
}

/// Whether fdaudit's programs know this machine's registers and syscall numbers.
pub const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// x86_64: arguments in di, si, dx, r10; the number in orig_ax; di intact at exit.
#[cfg(not(target_arch = "aarch64"))]
pub fn syscall_regs<E>(offset: impl Fn(&str, &str) -> Result<u32, E>) -> Result<SyscallRegs, E> {
    Ok(SyscallRegs {
        arg0: offset("pt_regs", "di")?,
        arg1: offset("pt_regs", "si")?,
        arg2: offset("pt_regs", "dx")?,
        arg3: offset("pt_regs", "r10")?,
        arg4: offset("pt_regs", "r8")?,
        sp: offset("pt_regs", "sp")?,
        nr: offset("pt_regs", "orig_ax")?,
        exit_arg0: offset("pt_regs", "di")?,
    })
}

/// aarch64: arguments in regs[0..3]; the number in syscallno; x0 is the return value at
/// exit, the first argument is kept in orig_x0.
#[cfg(target_arch = "aarch64")]
pub fn syscall_regs<E>(offset: impl Fn(&str, &str) -> Result<u32, E>) -> Result<SyscallRegs, E> {
    let regs = offset("pt_regs", "regs")?;
    Ok(SyscallRegs {
        arg0: regs,
        arg1: regs + 8,
        arg2: regs + 16,
        arg3: regs + 24,
        arg4: regs + 32,
        sp: offset("pt_regs", "sp")?,
        nr: offset("pt_regs", "syscallno")?,
        exit_arg0: offset("pt_regs", "orig_x0")?,
    })
}
