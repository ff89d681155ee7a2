//! `trace --origin`: the top of the user stack at a call site's first origin, so that
//! userspace unwinds it from the modules' unwind tables further than the origin record's
//! words reach (a frame of a few hundred bytes, as an interpreter's, takes them all).
//! Reached only by tail call (ORIGIN_CHAIN slot `ORIGIN_CHAIN_STACK_COPY`) from
//! `origin_exit` after an origin record with a stack, or from `origin_modules` after it: its
//! copy is verified and run apart from the origin programs, and copies once per call site
//! (STACK_SITES, least recently used first out); any other origin pays one lookup.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE},
    helpers::generated::{bpf_get_stack, bpf_probe_read_user},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
    EbpfContext,
};
use fdaudit_common::{
    stack_copy_flags, RecordHeader, RecordKind, StackCopyRecord, StackSiteKey, ORIGIN_STACK_DEPTH,
    PY_CHAIN_AFTER_ORIGIN, STACK_COPY_CHUNK, STACK_COPY_CHUNKS,
};

use crate::{
    arch,
    kernel::{conf, Task},
    STACK_SITES,
};

/// `struct pt_regs` offsets of the user instruction pointer and frame pointer (the ptrace
/// ABI's layout, which does not change): x86_64 ip and bp; aarch64 pc and x29.
#[cfg(not(bpf_target_arch = "aarch64"))]
const REGS_IP: u64 = 128;
#[cfg(not(bpf_target_arch = "aarch64"))]
const REGS_BP: u64 = 32;
#[cfg(bpf_target_arch = "aarch64")]
const REGS_IP: u64 = 256;
#[cfg(bpf_target_arch = "aarch64")]
const REGS_BP: u64 = 29 * 8;

// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret) (4.17+), as origin_exit,
// whose tail call runs it. The user registers from the task's saved pt_regs (`arch::Regs`:
// direct loads from 5.15, bpf_probe_read_kernel before); bpf_get_stack (4.18) walks the
// user stack by its frame pointers; bpf_probe_read_user (5.5) copies the stack, a chunk at
// a time.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn origin_stack_copy(ctx: RawTracePointContext) -> i32 {
    let task = Task::current();
    let pid_tgid = task.pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    copy_if_new(&ctx, task, pid_tgid);
    // A CPython process's frames follow (python.rs), as they would have without this call.
    crate::python::walk(&ctx, tgid, PY_CHAIN_AFTER_ORIGIN);
    0
}

/// The call site of process `tgid`'s call whose saved registers are `regs`: its user ip,
/// sp and frame pointer (a copy is made once per key).
#[inline(always)]
pub fn site_key(regs: arch::Regs, tgid: u32) -> Option<StackSiteKey> {
    let (Ok(ip), Ok(sp), Ok(bp)) = (
        regs.word(REGS_IP),
        regs.word(conf!(regs_sp)),
        regs.word(REGS_BP),
    ) else {
        return None;
    };
    Some(StackSiteKey {
        tgid,
        _pad: 0,
        ip,
        sp,
        bp,
    })
}

/// Whether the site `key` was copied (and is still kept).
#[inline(always)]
pub fn copied(key: &StackSiteKey) -> bool {
    // SAFETY: a lookup; the value is not read.
    unsafe { STACK_SITES.get(key) }.is_some()
}

#[inline(always)]
fn copy_if_new(ctx: &RawTracePointContext, task: Task, pid_tgid: u64) {
    let tgid = (pid_tgid >> 32) as u32;
    let Some(key) = site_key(arch::Regs::current(ctx.arg(0), task), tgid) else {
        return;
    };
    if copied(&key) {
        return;
    }
    let (ip, sp, bp) = (key.ip, key.sp, key.bp);
    // A copy is large: none while a quarter of the ring waits to be read, so that a burst
    // of new sites does not crowd out the spawn records (not kept: the site's next origin
    // tries again).
    let ring = crate::Ring::now();
    if ring.query(BPF_RB_AVAIL_DATA as u64) > ring.query(BPF_RB_RING_SIZE as u64) / 4 {
        return;
    }
    let Some(mut entry) = ring.reserve::<StackCopyRecord>() else {
        return;
    };
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = STACK_SITES.insert(&key, &0, 0);
    let rec = entry.as_mut_ptr();
    let base = sp & !(STACK_COPY_CHUNK as u64 - 1);
    // SAFETY: `rec` points at the reserved record, written field by field before submit;
    // the helpers fail instead of faulting (bpf_get_stack zeroes what it does not fill).
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::StackCopy as u32,
            flags: 0,
        };
        (*rec).pid = tgid;
        (*rec).tid = pid_tgid as u32;
        (*rec).ip = ip;
        (*rec).sp = sp;
        (*rec).bp = bp;
        (*rec).base = base;
        let n = bpf_get_stack(
            ctx.as_ptr(),
            core::ptr::addr_of_mut!((*rec).stack).cast(),
            (ORIGIN_STACK_DEPTH * 8) as u32,
            BPF_F_USER_STACK as u64,
        );
        (*rec).nstack = if n > 0 { (n / 8) as u32 } else { 0 };
        // Chunk by chunk from the one that holds sp, up to the first that cannot be read
        // (the stack mapping's end: chunks are aligned, so none straddles it).
        let words = core::ptr::addr_of_mut!((*rec).words).cast::<u8>();
        let mut copied = 0u64;
        let mut flags = stack_copy_flags::AT_BOUND;
        for i in 0..STACK_COPY_CHUNKS {
            let at = i * STACK_COPY_CHUNK;
            let r = bpf_probe_read_user(
                words.add(at).cast(),
                STACK_COPY_CHUNK as u32,
                (base + at as u64) as *const _,
            );
            if r != 0 {
                flags = stack_copy_flags::AT_END;
                break;
            }
            copied += STACK_COPY_CHUNK as u64;
        }
        (*rec).nbytes = copied;
        (*rec).flags = flags;
    }
    // The origin record before it woke the reader, or comes with the next wake-up.
    entry.submit(crate::wake::quiet_unless_filling(ring));
}
