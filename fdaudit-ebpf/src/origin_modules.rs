//! `trace --origin`: the modules of a process's stack, sent once per process (with its first
//! origin record sent with a stack, and again while the innermost frame's build id could not
//! be read), so that its frames are resolved even when the process
//! is gone before fdaudit reads its /proc/PID/maps. Reached only by `origin_exit`'s tail call
//! (ORIGIN_CHAIN), never attached: its work is verified and run apart from the origin
//! programs, and only for a process not seen before.

use aya_ebpf::{
    bindings::{BPF_F_USER_BUILD_ID, BPF_F_USER_STACK},
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_stack},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
    EbpfContext,
};
use fdaudit_common::{
    OriginModule, OriginModulesRecord, RecordHeader, RecordKind, BUILD_ID_VALID,
    ORIGIN_CHAIN_STACK_COPY, ORIGIN_STACK_DEPTH, PY_CHAIN_AFTER_ORIGIN,
};

use crate::{origin_record::MODULES_SENT, ORIGIN_SEEN};

// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret) (4.17+), as origin_exit,
// whose tail call (ORIGIN_CHAIN slot 0) runs it. bpf_get_stack (4.18) walks the user stack
// from the task's saved registers twice: the return addresses, then with
// BPF_F_USER_BUILD_ID each frame's module build id and file offset (the kernel reads the
// build id from the module's first page when it is in the page cache, else gives the
// address: status BPF_STACK_BUILD_ID_IP).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn origin_modules(ctx: RawTracePointContext) -> i32 {
    send_modules(&ctx);
    0
}

#[inline(always)]
fn send_modules(ctx: &RawTracePointContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(mut entry) = crate::Ring::now().reserve::<OriginModulesRecord>() else {
        // Lost to a full ring: counted, and asked again with the process's next record.
        crate::kernel::stat_add(&crate::STATS, |s| &mut s.lost_records);
        clear_sent(pid_tgid);
        return;
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: `rec` points at the reserved record, written field by field before submit;
    // the helpers fail instead of faulting and zero what they do not fill.
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::OriginModules as u32,
            flags: 0,
        };
        (*rec).pid = (pid_tgid >> 32) as u32;
        (*rec).tid = pid_tgid as u32;
        let n = bpf_get_stack(
            ctx.as_ptr(),
            core::ptr::addr_of_mut!((*rec).ips).cast(),
            (ORIGIN_STACK_DEPTH * 8) as u32,
            BPF_F_USER_STACK as u64,
        );
        let m = bpf_get_stack(
            ctx.as_ptr(),
            core::ptr::addr_of_mut!((*rec).modules).cast(),
            (ORIGIN_STACK_DEPTH * core::mem::size_of::<OriginModule>()) as u32,
            (BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) as u64,
        );
        (*rec).nips = if n > 0 { (n / 8) as u32 } else { 0 };
        (*rec).nmodules = if m > 0 {
            (m / core::mem::size_of::<OriginModule>() as i64) as u32
        } else {
            0
        };
    }
    // The innermost frame (the syscall's, always in a file: libc, the executable) without
    // its build id (not in the page cache, the mm's lock taken): its next record asks again.
    // SAFETY: as above; the record is still reserved.
    let innermost_read =
        unsafe { (*rec).nmodules > 0 && (*rec).modules[0].status == BUILD_ID_VALID };
    if !innermost_read {
        clear_sent(pid_tgid);
    }
    // The origin record just sent woke the reader; this one follows it closely.
    entry.submit(crate::wake::NOW);
    // The stack copy at a new call site (stack_copy.rs), then a CPython process's frames
    // (python.rs), as they would have come without this call.
    // SAFETY: ORIGIN_CHAIN holds programs of this program's type, filled by the loader.
    unsafe { crate::ORIGIN_CHAIN.tail_call(ctx, ORIGIN_CHAIN_STACK_COPY) };
    crate::python::walk(ctx, (pid_tgid >> 32) as u32, PY_CHAIN_AFTER_ORIGIN);
}

/// The process's next origin record with a stack sends its modules again.
#[inline(always)]
fn clear_sent(pid_tgid: u64) {
    if let Some(v) = ORIGIN_SEEN.get_ptr_mut((pid_tgid >> 32) as u32) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        unsafe { *v &= !MODULES_SENT };
    }
}
