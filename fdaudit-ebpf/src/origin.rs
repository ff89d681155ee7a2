//! `trace --origin`: where each inheritable fd of the followed tree was made. Two programs of
//! their own, attached only with the option (so a trace without it runs none of this): at
//! sys_enter of a call in the origin table (`fdaudit_common::for_each_origin_call!`) made by
//! a tracked process, what the call does ([`effect`]) is kept in the thread's slot of
//! ORIGIN_GATE; at its sys_exit, if it succeeded:
//! - made inheritable fds (no cloexec flag, FIONCLEX, F_SETFD without FD_CLOEXEC, recvmsg's
//!   SCM_RIGHTS without MSG_CMSG_CLOEXEC): one [`OriginRecord`] to the ring buffer with the
//!   fds, their file identity, the user stack and, for an fd made inheritable after its
//!   creation, the call that created it (from ORIGIN_MADE);
//! - made fds with close-on-exec: no ring record, only an ORIGIN_MADE entry per fd (the
//!   call, its time and stack), so that a later FIONCLEX names it;
//! - set close-on-exec again (FIOCLEX, F_SETFD FD_CLOEXEC): a record without stack, so the
//!   fd's older origin no longer counts;
//! - io_uring_setup (whose opens no syscall hook sees): a marker record.
//!
//! `fdaudit unclosed` has its own pair (`unclosed_enter`, `unclosed_exit`), the same code
//! built with `UNCLOSED = true`: it keeps the live set of fds instead ([`crate::unclosed`]),
//! and its sys_enter also sees close(). A compile-time mode gives each program only its own
//! paths and maps: less to verify at load, and no test of the other mode's per syscall.
//!
//! An ia32 call of the table is not followed: a marker record names it. Closes are not
//! tracked: userspace keeps the last origins per (process, fd) and matches them to a
//! leaked fd by the file's identity.

use core::sync::atomic::{compiler_fence, Ordering};

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::raw_tracepoint, programs::RawTracePointContext};
use fdaudit_common::{
    effect, gate_slot, origin_flags, pending_what, sysno, Effect, FdAt, OriginCall, OriginGateSlot,
    OriginPending, CMSGHDR_SIZE, EMFILE, ENFILE, MMSGHDR_SIZE, MSGHDR_CONTROL, MSGHDR_CONTROLLEN,
    ORIGIN_CMSGS, ORIGIN_FDS, ORIGIN_MSGS, PY_CHAIN_AFTER_MADE, SCM_RIGHTS, SOL_SOCKET,
};

use crate::{
    arch,
    compat::{ia32_origin_call, in_compat_syscall_of, IA32_UNSHARE},
    configured, fdwalk,
    kernel::{conf, stat_add, Task},
    origin_record::{emit, file_at, frames_and_words, Made},
    unclosed, ORIGIN_GATE, ORIGIN_MADE, ORIGIN_MADE_SCRATCH, STATS, TRACKED,
};

// raw_syscalls/sys_enter: TP_PROTO(struct pt_regs *regs, long id) (4.17+). Leaves at the
// syscall number unless it is one of the table's (native or i386).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn origin_enter(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_enter::<false>(&ctx);
    0
}

// raw_syscalls/sys_enter, as origin_enter: `fdaudit unclosed`'s (close() too).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn unclosed_enter(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_enter::<true>(&ctx);
    0
}

#[inline(always)]
fn try_origin_enter<const UNCLOSED: bool>(ctx: &RawTracePointContext) -> Result<(), i64> {
    let raw_id: i64 = ctx.arg(1);
    // `fdaudit unclosed`: a close() takes its fd out of the live set.
    if UNCLOSED && raw_id == sysno::CLOSE {
        let task = Task::current();
        if !in_compat_syscall_of(task) {
            unclosed::closed(task, ctx.arg(0));
            return Ok(());
        }
    }
    // `fdaudit unclosed`: a thread that takes an fd table of its own (native or i386).
    if UNCLOSED && (raw_id == sysno::UNSHARE || raw_id == IA32_UNSHARE) {
        let task = Task::current();
        let compat = in_compat_syscall_of(task);
        if compat == (raw_id == IA32_UNSHARE) {
            unclosed::unshared(task, arch::Regs::current(ctx.arg(0), task), compat);
        }
        return Ok(());
    }
    let native = OriginCall::of_sysno(raw_id);
    let ia32 = ia32_origin_call(raw_id);
    if native.is_none() && ia32.is_none() {
        return Ok(());
    }
    let task = Task::current();
    let pid_tgid = task.pid_tgid();
    let tracked = TRACKED.get_ptr((pid_tgid >> 32) as u32);
    let Some(st) = tracked.filter(|_| configured()) else {
        return Ok(());
    };
    // SAFETY: pointer from a map lookup, valid for this program run.
    let parent_pid = unsafe { (*st).parent_pid };
    // An ia32 call's number means another call: it is only named, as not followed
    // (`unclosed`: counted, as the fds it may make are not kept).
    if in_compat_syscall_of(task) {
        if let Some(call) = ia32 {
            if UNCLOSED {
                stat_add(&STATS, |s| &mut s.unclosed_unseen_calls);
            }
            let (fds, flags) = (no_fds(), origin_flags::UNSEEN_IA32);
            let made = Made {
                task,
                table: None,
                regs: arch::Regs::current(ctx.arg(0), task),
                pid_tgid,
                parent_pid,
            };
            emit(ctx, made, None, call as u32, 0, &fds, 0, flags)?;
        }
        return Ok(());
    }
    let Some(call) = native else {
        return Ok(());
    };
    let regs = arch::Regs::current(ctx.arg(0), task);
    let Some(pending) = pending_of(call, regs)? else {
        return Ok(());
    };
    let owner: u64 = ctx.arg(0);
    if let Some(g) = ORIGIN_GATE.get_ptr_mut(gate_slot(owner)) {
        // The call goes into the thread's slot, no hash map: the owner first, so that a
        // thread that shares the slot and reads it at its sys_exit meanwhile sees the slot
        // taken (try_origin_exit reads the owner again after its copy).
        // SAFETY: pointer from an array lookup, valid for this program run.
        unsafe {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*g).owner), owner);
            compiler_fence(Ordering::SeqCst);
            (*g).pending = pending;
            (*g).parent_pid = parent_pid;
            if UNCLOSED {
                // (a pointer from a map lookup, valid for this program run)
                (*g).execs = (*st).execs;
            }
        }
    }
    Ok(())
}

/// What native call `call`, whose saved registers are `regs`, is about to do; none when it
/// makes or changes no fd.
#[inline(always)]
fn pending_of(call: OriginCall, regs: arch::Regs) -> Result<Option<OriginPending>, i64> {
    let a = arch::args(regs, call == OriginCall::PerfEventOpen)?;
    // openat2(dfd, path, struct open_how *how, size): how->flags is its first u64.
    let Some(e) = effect(call, &a, || read_user::<u64>(a[2]).unwrap_or(0)) else {
        return Ok(None);
    };
    let (what, at) = match e {
        Effect::Makes { at, cloexec: false } => (pending_what::INHERITABLE, at),
        Effect::Makes { at, cloexec: true } => (pending_what::CLOEXEC, at),
        Effect::SetsCloexec(fd) => (pending_what::SETS_CLOEXEC, FdAt::Given(fd)),
        Effect::Blind => (pending_what::BLIND, FdAt::Result),
    };
    let (at, addr) = at.encode();
    Ok(Some(OriginPending {
        call: call as u32,
        at,
        addr,
        cmd: match call {
            OriginCall::Fcntl | OriginCall::Ioctl => a[1],
            _ => 0,
        },
        what,
        _pad: 0,
    }))
}

// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret) (4.17+). Every thread
// but one with a pending call leaves after one array load (ORIGIN_GATE, whose slot holds
// the call; the thread is told by `regs`, no helper call); two threads that share a slot
// lose the older call's origin (its fd then reads "not seen").
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn origin_exit(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_exit::<false>(&ctx);
    0
}

// raw_syscalls/sys_exit, as origin_exit: `fdaudit unclosed`'s.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn unclosed_exit(ctx: RawTracePointContext) -> i32 {
    let _ = try_origin_exit::<true>(&ctx);
    0
}

#[inline(always)]
fn try_origin_exit<const UNCLOSED: bool>(ctx: &RawTracePointContext) -> Result<(), i64> {
    let regs: u64 = ctx.arg(0);
    let Some(g) = ORIGIN_GATE.get_ptr_mut(gate_slot(regs)) else {
        return Ok(());
    };
    let owner_at = |g: *mut OriginGateSlot| {
        // SAFETY: pointer from an array lookup, valid for this program run.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*g).owner)) }
    };
    if regs == 0 || owner_at(g) != regs {
        return Ok(());
    }
    // SAFETY: as above.
    let (p, execs, parent_pid) = unsafe { ((*g).pending, (*g).execs, (*g).parent_pid) };
    compiler_fence(Ordering::SeqCst);
    // A thread that shares the slot took it during the copy: the call is lost, as when it
    // takes the slot before this sys_exit.
    if owner_at(g) != regs {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*g).owner), 0) };
    let task = Task::current();
    let key = task.pid_tgid();
    let saved = arch::Regs::current(regs, task);
    if OriginCall::of_sysno(arch::exit_syscall_nr(saved)?).is_none() {
        return Ok(());
    }
    let ret: i64 = ctx.arg(1);
    if UNCLOSED && (ret == -EMFILE || ret == -ENFILE) {
        unclosed::full(ctx, saved, key, &p, -ret as u32);
    }
    if ret < 0 {
        return Ok(());
    }
    let Some((fds, n, cut)) = made_fds(&p, ret)? else {
        return Ok(());
    };
    if UNCLOSED {
        unclosed::made(ctx, saved, key, &p, execs, &fds, n);
        return Ok(());
    }
    // One call of emit (each inlined copy is verified on its own paths).
    let (stack, flags) = match p.what {
        pending_what::INHERITABLE if cut => (true, origin_flags::FDS_CUT),
        pending_what::INHERITABLE => (true, 0),
        pending_what::CLOEXEC => return remember(ctx, saved, key, &p, &fds, n),
        pending_what::SETS_CLOEXEC => (false, origin_flags::CLEARED),
        _ => (false, origin_flags::UNSEEN_URING),
    };
    let sp = stack.then(|| saved.word(conf!(regs_sp)).unwrap_or(0));
    let made = Made {
        task,
        // Read once for all the fds (by probe-reads: see FdTable::probed).
        table: fdwalk::FdTable::probed().ok(),
        regs: saved,
        pid_tgid: key,
        parent_pid,
    };
    emit(ctx, made, sp, p.call, p.cmd, &fds, n, flags)
}

/// The fds the call of `p` made or changed (it returned `ret` >= 0), how many, and whether
/// some were cut (recvmsg's past [`ORIGIN_FDS`], recvmmsg's messages after the first with
/// fds); none for a recvmsg that received no fds.
#[inline(always)]
fn made_fds(p: &OriginPending, ret: i64) -> Result<Option<([i32; ORIGIN_FDS], usize, bool)>, i64> {
    let mut fds = no_fds();
    let mut n = 1;
    let mut cut = false;
    match p.at {
        0 => fds[0] = ret as i32,
        1 => {
            let pair = read_user::<[i32; 2]>(p.addr)?;
            (fds[0], fds[1], n) = (pair[0], pair[1], 2);
        }
        2 => fds[0] = p.addr as i32,
        _ => {
            // recvmsg: its message; recvmmsg (which returns how many it received): the
            // first with fds, the others' are cut.
            let msgs = if p.at == 3 { 1 } else { ret as u64 };
            let Some((data, count, m)) = scm_rights(p.addr, msgs) else {
                return Ok(None);
            };
            // One read of the whole array: the slots past `n` are not looked at.
            match read_user::<[i32; ORIGIN_FDS]>(data) {
                Ok(all) => fds = all,
                Err(_) => fds[0] = read_user::<i32>(data)?,
            }
            n = count.min(ORIGIN_FDS as u64) as usize;
            cut = count > ORIGIN_FDS as u64 || m + 1 < msgs;
        }
    }
    Ok(Some((fds, n, cut)))
}

/// The SCM_RIGHTS control message of the first of the `msgs` messages at user address
/// `msg` (a struct msghdr, or a vector of struct mmsghdr) that has one: (its fds' user
/// address, how many, the message's index). At sys_exit the kernel has set
/// msg_controllen to the bytes it wrote; it puts all of a message's fds in one control
/// message. Bounded: [`ORIGIN_MSGS`] messages, [`ORIGIN_CMSGS`] control messages each.
#[inline(always)]
fn scm_rights(msg: u64, msgs: u64) -> Option<(u64, u64, u64)> {
    for m in 0..ORIGIN_MSGS as u64 {
        if m >= msgs {
            break;
        }
        let hdr = msg + m * MMSGHDR_SIZE;
        let (Ok(ctl), Ok(len)) = (
            read_user::<u64>(hdr + MSGHDR_CONTROL),
            read_user::<u64>(hdr + MSGHDR_CONTROLLEN),
        ) else {
            continue;
        };
        let mut off = 0u64;
        for _ in 0..ORIGIN_CMSGS {
            if off + CMSGHDR_SIZE > len {
                break;
            }
            // struct cmsghdr: cmsg_len (size_t), cmsg_level, cmsg_type (int).
            let Ok(h) = read_user::<[u32; 4]>(ctl + off) else {
                break;
            };
            let clen = u64::from(h[0]) | u64::from(h[1]) << 32;
            if clen < CMSGHDR_SIZE || off + clen > len {
                break;
            }
            if h[2] as i32 == SOL_SOCKET && h[3] as i32 == SCM_RIGHTS {
                return Some((ctl + off + CMSGHDR_SIZE, (clen - CMSGHDR_SIZE) / 4, m));
            }
            off += (clen + 7) & !7;
        }
    }
    None
}

/// Keeps the call that made `fds` with close-on-exec in ORIGIN_MADE, one entry per fd (no
/// ring record: most fds are made so and never become inheritable).
#[inline(always)]
fn remember(
    ctx: &RawTracePointContext,
    regs: arch::Regs,
    pid_tgid: u64,
    p: &OriginPending,
    fds: &[i32; ORIGIN_FDS],
    n: usize,
) -> Result<(), i64> {
    let Some(m) = ORIGIN_MADE_SCRATCH.get_ptr_mut(0) else {
        return Ok(());
    };
    let tgid = pid_tgid >> 32;
    let sp = regs.word(conf!(regs_sp)).unwrap_or(0);
    // SAFETY: a per-CPU array value, valid and ours for this program run.
    unsafe {
        (*m).time_ns = bpf_ktime_get_ns();
        (*m).cmd = p.cmd;
        (*m).call = p.call;
        (*m).tid = pid_tgid as u32;
        (*m).pid = tgid as u32;
        let (nstack, nsp_words) = frames_and_words(
            ctx,
            sp,
            core::ptr::addr_of_mut!((*m).stack),
            core::ptr::addr_of_mut!((*m).sp_words),
        );
        (*m).nstack = nstack;
        (*m).nsp_words = nsp_words;
    }
    // Read once for all the fds (by probe-reads: see FdTable::probed).
    let table = fdwalk::FdTable::probed().ok();
    for (i, &fd) in fds.iter().enumerate() {
        if i >= n {
            break;
        }
        if fd < 0 {
            continue;
        }
        // SAFETY: as above.
        unsafe { (*m).file = file_at(table, fd) };
        // SAFETY: as above; the helper copies the value (from the map: a copy here would put
        // it on the 512-byte BPF stack).
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = ORIGIN_MADE.insert(tgid << 32 | fd as u64, unsafe { &*m }, 0);
    }
    crate::python::walk(ctx, tgid as u32, PY_CHAIN_AFTER_MADE);
    Ok(())
}

/// No fds: every slot -1, stored one by one. These programs call no subprogram (the
/// unit test `the_origin_programs_call_no_subprogram` checks the object): a `[-1; N]`
/// literal or a struct copy compiles to a call of memset or memmove, and an older verifier
/// (5.10's) cannot backtrack scalar precision through a call, so it marks every scalar
/// precise, prunes almost no state and does not finish verifying the origin programs in
/// minutes (docs/kernels.md).
#[inline(always)]
fn no_fds() -> [i32; ORIGIN_FDS] {
    // Read volatile, -1 is not a constant to the optimizer: no fill or copy of the array
    // becomes a memset of its bytes.
    let none = -1i32;
    // SAFETY: a local's address.
    [unsafe { core::ptr::read_volatile(&none) }; ORIGIN_FDS]
}

/// bpf_probe_read_user of a `T` at a user address (5.5).
#[inline(always)]
fn read_user<T>(addr: u64) -> Result<T, i64> {
    // SAFETY: the helper tolerates any address; it fails instead of faulting.
    unsafe { aya_ebpf::helpers::bpf_probe_read_user(addr as *const T) }.map_err(|e| e as i64)
}
