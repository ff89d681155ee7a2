//! What differs between the architectures fdaudit runs on (x86_64, aarch64): where the
//! syscall arguments and number sit in `struct pt_regs`. Syscall numbers are in
//! `fdaudit_common::sysno`, selected the same way.

use crate::btf::{Btf, BtfError};

/// `pt_regs` offsets the syscall programs read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallRegs {
    pub arg0: u32,
    pub arg1: u32,
    pub arg2: u32,
    pub nr: u32,
    pub exit_arg0: u32,
}

/// Whether fdaudit's programs know this machine's registers and syscall numbers.
pub const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// x86_64: arguments in di, si, dx; the number in orig_ax; di intact at exit.
#[cfg(not(target_arch = "aarch64"))]
pub fn syscall_regs(btf: &Btf) -> Result<SyscallRegs, BtfError> {
    Ok(SyscallRegs {
        arg0: btf.offset("pt_regs", "di")?,
        arg1: btf.offset("pt_regs", "si")?,
        arg2: btf.offset("pt_regs", "dx")?,
        nr: btf.offset("pt_regs", "orig_ax")?,
        exit_arg0: btf.offset("pt_regs", "di")?,
    })
}

/// aarch64: arguments in regs[0..3]; the number in syscallno; x0 is the return value at
/// exit, the first argument is kept in orig_x0.
#[cfg(target_arch = "aarch64")]
pub fn syscall_regs(btf: &Btf) -> Result<SyscallRegs, BtfError> {
    let regs = btf.offset("pt_regs", "regs")?;
    Ok(SyscallRegs {
        arg0: regs,
        arg1: regs + 8,
        arg2: regs + 16,
        nr: btf.offset("pt_regs", "syscallno")?,
        exit_arg0: btf.offset("pt_regs", "orig_x0")?,
    })
}
