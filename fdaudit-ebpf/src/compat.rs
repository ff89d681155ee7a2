//! Compat (ia32) syscalls: telling them apart and mapping their numbers to native ones.

use fdaudit_common::sysno;

use crate::kernel;
#[cfg(not(bpf_target_arch = "aarch64"))]
use crate::kernel::{conf, read_kernel};

// ---------------------------------------------------------------------------------------------
// Compat syscalls: a task in an ia32 syscall (int $0x80, or a 32-bit process) has TS_COMPAT
// in thread_info.status, set by the kernel's 32-bit entry for the duration of the call
// (what in_ia32_syscall() tests, x86_64 since 4.6); its number is from the i386 table and its
// arguments are in bx, cx, dx.

/// Whether the current task is in a compat syscall.
#[inline(always)]
#[cfg(not(bpf_target_arch = "aarch64"))]
pub(crate) fn in_compat_syscall() -> bool {
    in_compat_syscall_of(kernel::Task::current())
}

/// Whether the current task, `task`, is in a compat syscall. A direct load through the
/// BTF-typed task pointer (5.11+): CONFIG is read-only, so the verifier knows the offset and
/// checks it against task_struct; no probe-read on the close() path. Before 5.11 (task_btf
/// NONE, which the verifier knows) a probe-read of the same field.
#[inline(always)]
#[cfg(not(bpf_target_arch = "aarch64"))]
pub(crate) fn in_compat_syscall_of(task: kernel::Task) -> bool {
    let off = conf!(task_ti_status);
    if off == fdaudit_common::NO_OFFSET as u64 {
        return false;
    }
    let status = if conf!(task_btf) == 0 {
        read_kernel::<u32>(kernel::current_task() + off).unwrap_or(0)
    } else {
        // SAFETY: current's task_struct, valid for this program run; the load is at a BTF
        // offset inside it, which the verifier checks.
        unsafe { core::ptr::read_volatile(task.btf().add(off as usize).cast::<u32>()) }
    };
    status & fdaudit_common::sysno_ia32::TS_COMPAT != 0
}

/// aarch64: no compat syscalls are told apart (32-bit arm tasks are not handled).
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn in_compat_syscall() -> bool {
    false
}

/// aarch64: as [`in_compat_syscall`].
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn in_compat_syscall_of(_task: kernel::Task) -> bool {
    false
}

/// The native (x86_64) number of a compat syscall the programs count, or -1.
#[inline(always)]
pub(crate) fn compat_native(id: i64) -> i64 {
    #[cfg(not(bpf_target_arch = "aarch64"))]
    {
        fdaudit_common::sysno_ia32::to_native(id)
    }
    #[cfg(bpf_target_arch = "aarch64")]
    {
        let _ = id;
        -1
    }
}

/// Whether `id` is a compat read, readv or pread64 (i386 numbers; never on aarch64).
#[inline(always)]
pub(crate) fn compat_read(id: i64) -> bool {
    #[cfg(not(bpf_target_arch = "aarch64"))]
    {
        use fdaudit_common::sysno_ia32 as c;
        matches!(id, c::READ | c::READV | c::PREAD64)
    }
    #[cfg(bpf_target_arch = "aarch64")]
    {
        let _ = id;
        false
    }
}

/// `counted_native`, from the counter table's `counted` syscalls.
macro_rules! counted_native_fn {
    (counted { $( ($sysno:ident) )* }) => {
        /// Native numbers of the calls sys_enter counts. Syscalls an architecture lacks are
        /// all sysno::NONE (aarch64: poll, dup2), so their patterns repeat there.
        #[allow(unreachable_patterns)]
        #[inline(always)]
        pub(crate) fn counted_native(id: i64) -> bool {
            matches!(id, $(sysno::$sysno)|*)
        }
    };
}

fdaudit_common::counter_table!(counted [sysno] => counted_native_fn);

/// i386's unshare (arch/x86/entry/syscalls/syscall_32.tbl); none on aarch64, which tells
/// no compat calls apart.
pub(crate) const IA32_UNSHARE: i64 = if cfg!(bpf_target_arch = "aarch64") {
    fdaudit_common::sysno::NONE
} else {
    310
};

/// The origin table's call an i386 number is (x86_64 only: aarch64 tells no compat calls
/// apart).
#[inline(always)]
pub(crate) fn ia32_origin_call(nr: i64) -> Option<fdaudit_common::OriginCall> {
    if cfg!(bpf_target_arch = "aarch64") {
        None
    } else {
        fdaudit_common::OriginCall::of_ia32(nr)
    }
}
