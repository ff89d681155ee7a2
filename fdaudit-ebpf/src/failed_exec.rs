//! Failed execs: the errno and path of an exec that returned an error.

use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::tracepoint,
    programs::TracePointContext,
};
use fdaudit_common::EXEC_PATH_LEN;

use crate::{configured, current_tgid, EXEC_PENDING, EXEC_SCRATCH, FAILED_EXECS};

// ---------------------------------------------------------------------------------------------
// syscalls/sys_exit_execve and syscalls/sys_exit_execveat (CONFIG_FTRACE_SYSCALLS, tracefs):
// format: 8 bytes of common fields, int __syscall_nr at 8, long ret at 16. Only execve exits
// run these programs; every other syscall pays the syscall tracepoint's bit test for
// "is this one enabled" (the slow path itself is already taken for sys_enter). A failed
// exec of a traced process leaves its errno and the path count_in_window noted at entry in
// FAILED_EXECS. Optional: without them, failed execs are reported without errno and path.
#[tracepoint(category = "syscalls", name = "sys_exit_execve")]
pub fn failed_exec(ctx: TracePointContext) -> u32 {
    let _ = try_failed_exec(&ctx);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_execveat")]
pub fn failed_execat(ctx: TracePointContext) -> u32 {
    let _ = try_failed_exec(&ctx);
    0
}

fn try_failed_exec(ctx: &TracePointContext) -> Result<(), i64> {
    if !configured() {
        return Ok(());
    }
    let tgid = current_tgid();
    // SAFETY: a copy of the value out of a map lookup.
    let Some(name) = (unsafe { EXEC_PENDING.get(tgid) }).copied() else {
        return Ok(());
    };
    let _ = EXEC_PENDING.remove(tgid);
    // SAFETY: offset 16 is `long ret` in this tracepoint's format.
    let ret: i64 = unsafe { ctx.read_at(16) }.map_err(i64::from)?;
    if ret >= 0 {
        return Ok(());
    }
    let Some(v) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return Ok(());
    };
    // SAFETY: pointer from a per-CPU array lookup, valid for this program run.
    let v = unsafe { &mut *v };
    v.errno = (-ret) as i32;
    v.path[0] = 0;
    v.path_cut = 0;
    // SAFETY: the helper bounds the read by the buffer and tolerates bad addresses; the
    // caller's memory is intact, as the exec failed.
    let read = unsafe { bpf_probe_read_user_str_bytes(name as *const u8, &mut v.path) };
    // A full buffer is a path of exactly EXEC_PATH_LEN - 1 bytes or a longer one: the byte
    // after the last one kept tells them apart.
    if read.is_ok_and(|p| p.len() == EXEC_PATH_LEN - 1) {
        // SAFETY: bpf_probe_read_user tolerates bad addresses.
        let next = unsafe { bpf_probe_read_user((name as *const u8).add(EXEC_PATH_LEN - 1)) };
        v.path_cut = u32::from(next.is_ok_and(|b| b != 0));
    }
    // By reference: a copy of the value would not fit on the eBPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    FAILED_EXECS.insert(tgid, &*v, 0)?;
    Ok(())
}
