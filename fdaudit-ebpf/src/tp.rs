//! The tp backend's programs: the syscall counts from the counted syscalls' own
//! tracepoints (`syscalls/sys_enter_<name>`), one program each.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use fdaudit_common::sysno;

use crate::syscalls::on_tracepoint;

// The tp backend (`--backend tp`): the same counts as sys_enter, from the per-syscall
// tracepoints of CONFIG_FTRACE_SYSCALLS (named through tracefs; BPF_PROG_TYPE_TRACEPOINT,
// every kernel fdaudit supports). Attaching any syscall tracepoint makes every syscall on
// the machine take the syscall slow path, as raw sys_enter does, but the kernel then runs a
// program only for the syscalls it is attached to: other syscalls pay a bit test
// (perf_syscall_enter), not a program run. Native syscalls only: on x86_64 an ia32
// (`int $0x80`) syscall fires no syscall tracepoint (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS);
// the loader says so (`fdaudit::tracer::ebpf::tp`).

/// One tracepoint program per counted syscall: `$sysno` is what sys_enter would have
/// matched. The names are the user side's `TP_PROGRAMS` (`tp_` and the syscall's name, from
/// the counter table); a unit test there checks that the object holds exactly those.
macro_rules! tp_syscall {
    ($($name:ident $sysno:ident;)*) => {
        $(
            #[tracepoint]
            pub fn $name(ctx: TracePointContext) -> u32 {
                let _ = on_tracepoint(sysno::$sysno, &ctx);
                0
            }
        )*
    };
}

tp_syscall! {
    tp_close CLOSE;
    tp_close_range CLOSE_RANGE;
    tp_fcntl FCNTL;
    tp_poll POLL;
    tp_ppoll PPOLL;
    tp_getdents64 GETDENTS64;
    tp_execve EXECVE;
    tp_execveat EXECVEAT;
    tp_dup2 DUP2;
    tp_dup3 DUP3;
}
