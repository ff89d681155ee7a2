//! `trace --origin`: where each inheritable fd of the followed tree was made. Two programs of
//! their own, attached only with the option (so a trace without it runs none of this): at
//! sys_enter of a call in the origin table (`fdaudit_common::for_each_origin_call!`) made by
//! a tracked process without its close-on-exec flag, the call is stashed per thread; at its
//! sys_exit, if it succeeded, one [`OriginRecord`] goes to the ring buffer with the new fd(s),
//! their file identity and the user stack. Closes are not tracked: userspace keeps the last
//! origin per (process, fd) and matches it to a leaked fd by the file's identity.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        generated::{bpf_get_stack, bpf_probe_read_user},
    },
    macros::raw_tracepoint,
    programs::RawTracePointContext,
    EbpfContext,
};
use fdaudit_common::{
    inheritable, FdAt, OriginCall, OriginPending, OriginRecord, RecordHeader, RecordKind,
    ORIGIN_GATE_SLOTS, ORIGIN_SP_WORDS, ORIGIN_STACK_DEPTH,
};

use crate::{
    arch,
    compat::in_compat_syscall,
    configured, current_tgid, fdwalk,
    kernel::{conf, read_kernel, stat_add},
    ORIGIN_GATE, ORIGIN_PENDING, ORIGIN_SEEN, STATS, TRACKED,
};

// raw_syscalls/sys_enter: TP_PROTO(struct pt_regs *regs, long id) (4.17+). Leaves at the
// syscall number unless it is one of the table's.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn origin_enter(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_enter(&ctx);
    0
}

fn try_origin_enter(ctx: &RawTracePointContext) -> Result<(), i64> {
    let raw_id: i64 = ctx.arg(1);
    let Some(call) = OriginCall::of_sysno(raw_id) else {
        return Ok(());
    };
    if conf!(origin) == 0 || !configured() || TRACKED.get_ptr(current_tgid()).is_none() {
        return Ok(());
    }
    // An ia32 call's number means another call (the table is native only).
    if in_compat_syscall() {
        return Ok(());
    }
    let regs: u64 = ctx.arg(0);
    let a = [
        arch::arg(regs, conf!(regs_arg0))?,
        arch::arg(regs, conf!(regs_arg1))?,
        arch::arg(regs, conf!(regs_arg2))?,
        arch::arg(regs, conf!(regs_arg3))?,
    ];
    // openat2(dfd, path, struct open_how *how, size): how->flags is its first u64.
    let Some(at) = inheritable(call, &a, || read_user::<u64>(a[2]).unwrap_or(0)) else {
        return Ok(());
    };
    let (at, addr) = match at {
        FdAt::Result => (0, 0),
        FdAt::Pair(p) => (1, p),
        FdAt::Given(fd) => (2, fd),
    };
    let pending = OriginPending {
        call: call as u32,
        at,
        addr,
        cmd: if call == OriginCall::Fcntl { a[1] } else { 0 },
    };
    let key = bpf_get_current_pid_tgid();
    ORIGIN_PENDING.insert(key, pending, 0).map_err(i64::from)?;
    let tid = key as u32;
    if let Some(g) = ORIGIN_GATE.get_ptr_mut(tid & GATE_MASK) {
        // SAFETY: pointer from an array lookup, valid for this program run.
        unsafe { *g = tid };
    }
    Ok(())
}

const GATE_MASK: u32 = ORIGIN_GATE_SLOTS - 1;

// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret) (4.17+). Every thread
// but one with a pending call leaves after one array load (ORIGIN_GATE); two threads whose
// tids collide in it lose the older call's origin (its fd then reads "before tracing").
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn origin_exit(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_exit(&ctx);
    0
}

fn try_origin_exit(ctx: &RawTracePointContext) -> Result<(), i64> {
    if conf!(origin) == 0 {
        return Ok(());
    }
    let key = bpf_get_current_pid_tgid();
    let tid = key as u32;
    let Some(g) = ORIGIN_GATE.get_ptr_mut(tid & GATE_MASK) else {
        return Ok(());
    };
    // SAFETY: pointer from an array lookup, valid for this program run.
    if tid == 0 || unsafe { *g } != tid {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { *g = 0 };
    let regs: u64 = ctx.arg(0);
    if OriginCall::of_sysno(arch::exit_syscall_nr(regs)?).is_none() {
        return Ok(());
    }
    // SAFETY: a copy out of the map value.
    let Some(p) = (unsafe { ORIGIN_PENDING.get(key) }).copied() else {
        return Ok(());
    };
    let _ = ORIGIN_PENDING.remove(key);
    let ret: i64 = ctx.arg(1);
    if ret < 0 {
        return Ok(());
    }
    let fd = match p.at {
        0 => [ret as i32, -1],
        1 => read_user::<[i32; 2]>(p.addr)?,
        _ => [p.addr as i32, -1],
    };
    emit(ctx, regs, key, &p, fd)
}

/// Sends the origin of `fd` (the call `p` of thread `pid_tgid`) with the user stack.
#[inline(always)]
fn emit(
    ctx: &RawTracePointContext,
    regs: u64,
    pid_tgid: u64,
    p: &OriginPending,
    fd: [i32; 2],
) -> Result<(), i64> {
    let tgid = (pid_tgid >> 32) as u32;
    let parent_pid = TRACKED
        .get_ptr(tgid)
        // SAFETY: pointer from a map lookup, valid for this program run.
        .map(|st| unsafe { (*st).parent_pid })
        .unwrap_or(0);
    let ring = crate::Ring::now();
    let Some(mut entry) = ring.reserve::<OriginRecord>() else {
        stat_add(&STATS, |s| &mut s.lost_records);
        return Ok(());
    };
    let rec = entry.as_mut_ptr();
    let (ino0, dev0) = identity(fd[0]);
    let (ino1, dev1) = identity(fd[1]);
    let sp: u64 = read_kernel(regs + conf!(regs_sp)).unwrap_or(0);
    let mm: u64 = read_kernel(crate::kernel::current_task() + conf!(task_mm)).unwrap_or(0);
    let start_code: u64 = read_kernel(mm + conf!(mm_start_code)).unwrap_or(0);
    let end_code: u64 = read_kernel(mm + conf!(mm_end_code)).unwrap_or(0);
    // SAFETY: `rec` points at the reserved record, written field by field before submit.
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::Origin as u32,
            flags: 0,
        };
        (*rec).pid = tgid;
        (*rec).tid = pid_tgid as u32;
        (*rec).parent_pid = parent_pid;
        (*rec).call = p.call;
        (*rec).fd = fd;
        (*rec).cmd = p.cmd;
        (*rec).time_ns = bpf_ktime_get_ns();
        (*rec).ino = [ino0, ino1];
        (*rec).dev = [dev0, dev1];
        (*rec).comm = bpf_get_current_comm().unwrap_or_default();
        // The frame-pointer walk of the user stack (bpf_get_stack, 4.18; user stack from
        // the task's saved registers).
        let n = bpf_get_stack(
            ctx.as_ptr(),
            core::ptr::addr_of_mut!((*rec).stack).cast(),
            (ORIGIN_STACK_DEPTH * 8) as u32,
            BPF_F_USER_STACK as u64,
        );
        (*rec).nstack = if n > 0 { (n / 8) as u32 } else { 0 };
        // bpf_get_stack zeroes the rest of the buffer itself, and all of it on failure.
        // The words at the user sp: the return address into the caller of a libc wrapper
        // built without frame pointers is among them (bpf_probe_read_user, 5.5).
        (*rec).start_code = start_code;
        (*rec).end_code = end_code;
        (*rec).sp = sp;
        let r = bpf_probe_read_user(
            core::ptr::addr_of_mut!((*rec).sp_words).cast(),
            (ORIGIN_SP_WORDS * 8) as u32,
            sp as *const _,
        );
        (*rec).nsp_words = if r == 0 { ORIGIN_SP_WORDS as u32 } else { 0 };
    }
    // A process's first record wakes the reader, which then reads its memory map while it
    // most likely lives; the others come with the next wake-up.
    let first = ORIGIN_SEEN.get_ptr(tgid).is_none();
    if first {
        let _ = ORIGIN_SEEN.insert(tgid, 1, 0);
    }
    entry.submit(if first {
        crate::wake::NOW
    } else {
        crate::wake::quiet_unless_filling(ring)
    });
    Ok(())
}

/// (inode number, superblock dev) of the current task's file at `fd`; zeros when absent.
#[inline(always)]
fn identity(fd: i32) -> (u64, u32) {
    if fd < 0 {
        return (0, 0);
    }
    let Ok(file) = fdwalk::current_file(fd as u32) else {
        return (0, 0);
    };
    let inode: u64 = read_kernel(file + conf!(file_inode)).unwrap_or(0);
    let ino = read_kernel(inode + conf!(inode_ino)).unwrap_or(0);
    let sb: u64 = read_kernel(inode + conf!(inode_sb)).unwrap_or(0);
    (ino, read_kernel(sb + conf!(sb_dev)).unwrap_or(0))
}

/// bpf_probe_read_user of a `T` at a user address (5.5).
#[inline(always)]
fn read_user<T>(addr: u64) -> Result<T, i64> {
    // SAFETY: the helper tolerates any address; it fails instead of faulting.
    unsafe { aya_ebpf::helpers::bpf_probe_read_user(addr as *const T) }.map_err(|e| e as i64)
}
