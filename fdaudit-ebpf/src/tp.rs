//! The tp backend's programs: the syscall counts from the counted syscalls' own
//! tracepoints (`syscalls/sys_enter_<name>`), one program each; with `--reads`, the read
//! counts from the read syscalls' exit tracepoints (`syscalls/sys_exit_<name>`).

use aya_ebpf::{
    helpers::generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
    macros::tracepoint,
    programs::TracePointContext,
};
use fdaudit_common::sysno;

use crate::{
    arch,
    syscalls::{count_read, on_tracepoint, read_counter},
};

// The tp backend (`--backend tp`): the same counts as sys_enter, from the per-syscall
// tracepoints of CONFIG_FTRACE_SYSCALLS (named through tracefs; BPF_PROG_TYPE_TRACEPOINT,
// every kernel fdaudit supports). Attaching any syscall tracepoint makes every syscall on
// the machine take the syscall slow path, as raw sys_enter does, but the kernel then runs a
// program only for the syscalls it is attached to: other syscalls pay a bit test
// (perf_syscall_enter), not a program run. Native syscalls only: on x86_64 an ia32
// (`int $0x80`) syscall fires no syscall tracepoint (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS);
// the loader says so (`fdaudit::engine::ebpf::tp`).

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

// `--reads` on the tp backend: syscalls/sys_exit_read, sys_exit_readv, sys_exit_pread64
// (struct syscall_trace_exit: the common header, `int __syscall_nr` at 8, `long ret` at 16;
// the user side checks each event's `format`). The record has no arguments, so the fd comes
// from the task's saved user registers: bpf_task_pt_regs(bpf_get_current_task_btf()), 5.15+
// (the user side loads these programs only where both helpers exist, and attaches the raw
// sys_exit program instead elsewhere). Other syscalls' exits then run no program at all,
// where raw sys_exit runs one on every syscall exit on the machine.
//
// One program for every read syscall of the counter table's `reads` (the exit record has no
// syscall-specific field): the user side's `TP_READ_PROGRAMS` attach it to each exit
// tracepoint, so the verifier runs once (three loads were most of `trace --reads`'s
// start-up: docs/performance.md).
#[tracepoint]
pub fn tp_exit_read(ctx: TracePointContext) -> u32 {
    let _ = try_tp_exit_read(&ctx);
    0
}

/// Offset of `ret` in a syscall exit tracepoint's record.
const TP_EXIT_RET: usize = 16;

fn try_tp_exit_read(ctx: &TracePointContext) -> Result<(), i64> {
    // SAFETY: the record is at least 24 bytes (checked against its format by the user side).
    let ret: i64 = unsafe { ctx.read_at(TP_EXIT_RET) }.map_err(i64::from)?;
    let Some(tgid) = read_counter(ret) else {
        return Ok(());
    };
    // SAFETY: the helpers take current's task_struct and return its saved user pt_regs.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
    count_read(tgid, arch::exit_arg0(regs)?, ret)
}
