//! `fdaudit unclosed`: the live set of the followed processes' fds, kept in the kernel by
//! `unclosed_enter` and `unclosed_exit` (the origin programs' code built in its own mode:
//! they send no origin record). At sys_exit of an fd-making call of the shared table, one
//! UNCLOSED_LIVE entry per fd made (the call, a stack id, the time, close-on-exec); at
//! sys_enter of close(), the entry goes. A dup2/dup3 over an fd replaces its entry (same
//! key). close_range and an exec's close-on-exec closes are left to userspace, which holds
//! every entry against the process's fd table (the truth) when it reads the set. A call
//! that fails with EMFILE or ENFILE is kept per process in UNCLOSED_FULL.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, generated::bpf_probe_read_user},
    programs::{tracing::StackIdContext as _, RawTracePointContext},
};
use fdaudit_common::{
    pending_what, OriginCall, OriginPending, UnclosedFull, UnclosedLive, ORIGIN_FDS,
    ORIGIN_SP_WORDS,
};

use crate::{
    arch,
    kernel::{conf, read_kernel, stat_add},
    STATS, TRACKED, UNCLOSED_FULL, UNCLOSED_LIVE, UNCLOSED_SITES, UNCLOSED_SITE_SCRATCH,
    UNCLOSED_STACKS,
};

/// close(fd) of a followed process, at sys_enter, its pt_regs at `regs` (the fd is gone
/// whatever close returns, EINTR included; an fd that was not open has no entry). The
/// argument is read only for a followed process: another's close costs one map lookup.
#[inline(always)]
pub fn closed(regs: u64) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if TRACKED.get_ptr(tgid).is_none() {
        return;
    }
    let Ok(fd) = arch::arg(regs, conf!(regs_arg0)) else {
        return;
    };
    let _ = UNCLOSED_LIVE.remove(u64::from(tgid) << 32 | (fd & 0xffff_ffff));
}

/// A call of the table failed with `errno` (EMFILE/ENFILE): counted, the first kept.
#[inline(always)]
pub fn full(ctx: &RawTracePointContext, p: &OriginPending, errno: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if let Some(f) = UNCLOSED_FULL.get_ptr_mut(tgid) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        unsafe { (*f).count += 1 };
        return;
    }
    let first = UnclosedFull {
        // SAFETY: a helper without arguments.
        time_ns: unsafe { bpf_ktime_get_ns() },
        count: 1,
        stack_id: stack_id(ctx),
        call: p.call,
        errno,
        tid: pid_tgid as u32,
    };
    // By reference: the helper copies the value (no copy of ours).
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = UNCLOSED_FULL.insert(tgid, &first, BPF_NOEXIST as u64);
}

/// The stack id of the current user stack (frame pointers), its site's words kept the
/// first time; negative when bpf_get_stackid failed (the map full, no user stack).
#[inline(always)]
fn stack_id(ctx: &RawTracePointContext) -> i32 {
    let id = match ctx.get_stackid(&UNCLOSED_STACKS, BPF_F_USER_STACK as u64) {
        Ok(id) => id as i32,
        Err(e) => return e,
    };
    if UNCLOSED_SITES.get_ptr(id as u32).is_none() {
        keep_site(ctx, id as u32);
    }
    id
}

/// Keeps the user sp and the words above it for a new site (once per stack id).
#[inline(always)]
fn keep_site(ctx: &RawTracePointContext, id: u32) {
    let Some(s) = UNCLOSED_SITE_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let regs: u64 = ctx.arg(0);
    let sp: u64 = read_kernel(regs + conf!(regs_sp)).unwrap_or(0);
    // SAFETY: a per-CPU array value, ours for this program run; the helper fails instead
    // of faulting.
    unsafe {
        (*s).pid = (bpf_get_current_pid_tgid() >> 32) as u32;
        (*s).sp = sp;
        let r = bpf_probe_read_user(
            core::ptr::addr_of_mut!((*s).sp_words).cast(),
            (ORIGIN_SP_WORDS * 8) as u32,
            sp as *const _,
        );
        (*s).nsp_words = if r == 0 { ORIGIN_SP_WORDS as u32 } else { 0 };
        // The helper copies the value (a copy here would be a memmove call).
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = UNCLOSED_SITES.insert(id, &*s, BPF_NOEXIST as u64);
    }
}

/// The call of `p` succeeded: its fds `fds[..n]` enter the live set, or (F_SETFD, FIOCLEX,
/// FIONCLEX) `fds[0]`'s close-on-exec changes. `execs`: the process's execs seen, read at
/// the call's sys_enter (which found it tracked).
#[inline(always)]
pub fn made(
    ctx: &RawTracePointContext,
    p: &OriginPending,
    execs: u32,
    fds: &[i32; ORIGIN_FDS],
    n: usize,
) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // A flag change on an existing fd: at == 2 (the fd given), no new fd.
    if p.at == 2 || p.what == pending_what::SETS_CLOEXEC {
        let key = u64::from(tgid) << 32 | (fds[0] as u32) as u64;
        if let Some(e) = UNCLOSED_LIVE.get_ptr_mut(key) {
            let cloexec = u32::from(p.what == pending_what::SETS_CLOEXEC);
            // SAFETY: pointer from a map lookup, valid for this program run.
            unsafe { (*e).cloexec = cloexec };
        }
        return;
    }
    let entry = UnclosedLive {
        // SAFETY: a helper without arguments.
        time_ns: unsafe { bpf_ktime_get_ns() },
        stack_id: stack_id(ctx),
        call: p.call,
        // io_uring_setup's ring fd always has close-on-exec.
        cloexec: u32::from(
            p.what == pending_what::CLOEXEC || p.call == OriginCall::IoUringSetup as u32,
        ),
        execs,
    };
    for (i, &fd) in fds.iter().enumerate() {
        if i >= n {
            break;
        }
        if fd < 0 {
            continue;
        }
        // By reference: the helper copies the value (no copy of ours per fd).
        #[allow(clippy::needless_borrows_for_generic_args)]
        if UNCLOSED_LIVE
            .insert(u64::from(tgid) << 32 | fd as u64, &entry, 0)
            .is_err()
        {
            // The set is full: the fd will read `not seen`; the gates know the run is
            // incomplete.
            stat_add(&STATS, |s| &mut s.unclosed_full);
        }
    }
}
