//! The fentry backend's programs: the syscall counts from trampolines on the counted
//! syscalls only.

use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use fdaudit_common::sysno;

use crate::{
    arch,
    syscalls::{count_read, on_syscall, read_counter},
};

// The fentry backend (`--backend fentry`): the same counts as sys_enter/sys_exit, from BPF
// trampolines on the counted syscalls' entry points only (`__x64_sys_close(const struct
// pt_regs *regs)` and so on; the loader names the function, arch prefix included), so that
// every other syscall on the machine runs without a probe. BPF_PROG_TYPE_TRACING with
// BPF_TRACE_FENTRY/FEXIT, since 5.5; argument 0 is the syscall's pt_regs as in sys_enter.
// An fexit program sees the arguments then the return value: `ctx.arg(1)` is the syscall's
// result, no bpf_get_func_ret (5.17) needed.

/// One fentry program per counted syscall: `$sysno` is what sys_enter would have matched.
macro_rules! fentry_syscall {
    ($name:ident, $sysno:path) => {
        #[fentry]
        pub fn $name(ctx: FEntryContext) -> i32 {
            let _ = on_syscall($sysno, ctx.arg(0), false);
            0
        }
    };
}

/// One fexit program per read syscall (`--reads`), the same checks as sys_exit's.
macro_rules! fexit_read {
    ($name:ident) => {
        #[fexit]
        pub fn $name(ctx: FExitContext) -> i32 {
            let _ = try_fexit_read(&ctx);
            0
        }
    };
}

/// The programs, from the counter table: an fentry program per `counted` syscall, then an
/// fexit program per `reads` one (the user side attaches them by the same names:
/// `FENTRY_PROGRAMS`).
macro_rules! fentry_programs {
    (
        counted { $( ($prog:ident $sysno:ident) )* }
        reads { $( ($rprog:ident) )* }
    ) => {
        $( fentry_syscall!($prog, sysno::$sysno); )*
        $( fexit_read!($rprog); )*
    };
}

fdaudit_common::counter_table!(counted [prog sysno], reads [prog] => fentry_programs);

fn try_fexit_read(ctx: &FExitContext) -> Result<(), i64> {
    let ret: i64 = ctx.arg(1);
    let Some(tgid) = read_counter(ret) else {
        return Ok(());
    };
    count_read(tgid, arch::exit_arg0(ctx.arg(0))?, ret)
}
