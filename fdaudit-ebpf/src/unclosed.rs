//! `fdaudit unclosed`: the live set of the followed processes' fds, kept in the kernel by
//! `unclosed_enter` and `unclosed_exit` (the origin programs' code built in its own mode:
//! they send no origin record). At sys_exit of an fd-making call of the shared table, one
//! UNCLOSED_LIVE entry per fd made (the call, its site, the time, close-on-exec); at
//! sys_enter of close(), the entry is marked closed. Entries are written in place, found
//! by a lookup: a process uses the same few fd numbers again and again, and a lookup costs
//! a fraction of the hash update and delete it replaces (bucket lock, free list); a closed
//! entry stays for the next fd of its number (userspace removes a gone process's entries).
//! The write order and the check word ([`UnclosedLive::state`]) let a reader tell a copy
//! made mid-write. A dup2/dup3 over an fd rewrites its entry (same key). close_range and
//! an exec's close-on-exec closes are left to userspace, which holds every entry against
//! the process's fd table (the truth) when it reads the set. A call that fails with EMFILE
//! or ENFILE is kept per process in UNCLOSED_FULL.
//!
//! A site is the stack id of the kernel's frame-pointer walk (`bpf_get_stackid`) and, where
//! the innermost frame (a libc wrapper) keeps no frame pointer, its caller's return
//! address: the walk skips that caller, so two call sites in one function would share a
//! stack id. Which stack word holds it follows from the wrapper's unwind rule, which only
//! userspace reads (`.eh_frame`): it writes the slot per stack id into UNCLOSED_RA_SLOTS;
//! until then each call keeps its own words in UNCLOSED_PENDING.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{
        bpf_ktime_get_ns, bpf_probe_read_user,
        generated::bpf_probe_read_user as bpf_probe_read_user_raw,
    },
    programs::{tracing::StackIdContext as _, RawTracePointContext},
};
use fdaudit_common::{
    pending_what, ra_from, ra_slot, task_btf, OriginCall, OriginPending, UnclosedFull,
    UnclosedLive, UnclosedSiteKey, ORIGIN_FDS, ORIGIN_SP_WORDS, UNCLOSED_OWNER_SLOTS,
};

use crate::{
    arch,
    kernel::{self, conf, stat_add, Task},
    STATS, TRACKED, UNCLOSED_FULL, UNCLOSED_LIVE, UNCLOSED_OWNERS, UNCLOSED_PENDING,
    UNCLOSED_RA_SLOTS, UNCLOSED_SITES, UNCLOSED_SITE_SCRATCH, UNCLOSED_STACKS,
};

/// close(fd) at sys_enter by `task` (current), its raw tracepoint's registers at `raw`
/// (the fd is gone whatever close returns, EINTR included; an fd that was not open has no
/// entry). A process whose slot in UNCLOSED_OWNERS it holds (made() writes it) goes to the
/// live set at once; another is looked up in TRACKED first (the slot is a filter: a
/// followed process whose slot another took pays that lookup, none is missed). An entry
/// is the closing process's only if written since that process began: a process that got
/// the tgid of a gone one whose entries userspace has not yet read (and so its slot) began
/// after they were written, and cannot mark them closed (that would hide what the gone
/// process held). Before 5.11 (no BTF task pointer) TRACKED alone decides.
#[inline(always)]
pub fn closed(task: Task, raw: u64) {
    let tgid = (task.pid_tgid() >> 32) as u32;
    let since = if conf!(task_btf) == u64::from(task_btf::NONE) {
        if TRACKED.get_ptr(tgid).is_none() {
            return;
        }
        1
    } else {
        let owner = UNCLOSED_OWNERS.get(tgid & OWNER_MASK) == Some(&tgid);
        if !owner && TRACKED.get_ptr(tgid).is_none() {
            return;
        }
        kernel::process_start_ns(task)
    };
    let Ok(fd) = arch::Regs::current(raw, task).word(conf!(regs_arg0)) else {
        return;
    };
    if let Some(e) = UNCLOSED_LIVE.get_ptr_mut(u64::from(tgid) << 32 | (fd & 0xffff_ffff)) {
        use core::ptr::{addr_of_mut, read_volatile, write_volatile};
        // SAFETY: pointer from a map lookup, valid for this program run; aligned accesses.
        unsafe {
            if read_volatile(addr_of_mut!((*e).time_ns)) >= since {
                write_volatile(addr_of_mut!((*e).time_ns), 0);
            }
        }
    }
}

const OWNER_MASK: u32 = UNCLOSED_OWNER_SLOTS - 1;

/// Writes `new` over the entry at `e`: the fields, the check word, the time last. A copy
/// that mixes the old entry's words with the new one's fails the check (a reader reads it
/// again); the entry is not marked closed on the way, which would hide a live fd (a dup2
/// over it, a close-on-exec change) from a read made meanwhile.
///
/// # Safety
/// `e` comes from a lookup of UNCLOSED_LIVE in this program run.
#[inline(always)]
unsafe fn rewrite(e: *mut UnclosedLive, new: &UnclosedLive) {
    use core::ptr::{addr_of_mut, write_volatile};
    write_volatile(addr_of_mut!((*e).stack_id), new.stack_id);
    write_volatile(addr_of_mut!((*e).call), new.call);
    write_volatile(addr_of_mut!((*e).cloexec), new.cloexec);
    write_volatile(addr_of_mut!((*e).execs), new.execs);
    write_volatile(addr_of_mut!((*e).ra), new.ra);
    write_volatile(addr_of_mut!((*e).ra_from), new.ra_from);
    write_volatile(addr_of_mut!((*e).check), new.check);
    write_volatile(addr_of_mut!((*e).time_ns), new.time_ns);
}

/// A call of the table failed with `errno` (EMFILE/ENFILE): counted, the first kept
/// (`pid_tgid`: the thread's).
#[inline(always)]
pub fn full(
    ctx: &RawTracePointContext,
    regs: arch::Regs,
    pid_tgid: u64,
    p: &OriginPending,
    errno: u32,
) {
    let tgid = (pid_tgid >> 32) as u32;
    if let Some(f) = UNCLOSED_FULL.get_ptr_mut(tgid) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        unsafe { (*f).count += 1 };
        return;
    }
    // SAFETY: a helper without arguments.
    let time_ns = unsafe { bpf_ktime_get_ns() };
    let site = site(ctx, regs, tgid, u32::MAX, time_ns, None);
    let first = UnclosedFull {
        time_ns,
        count: 1,
        stack_id: site.stack_id,
        call: p.call,
        errno,
        tid: pid_tgid as u32,
        ra: site.ra,
        ra_from: site.ra_from,
        _pad: 0,
    };
    // By reference: the helper copies the value (no copy of ours).
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = UNCLOSED_FULL.insert(tgid, &first, BPF_NOEXIST as u64);
}

/// A call site: the stack id and what tells apart the sites that share it.
struct Site {
    stack_id: i32,
    ra: u64,
    ra_from: u32,
}

/// The call site of the current user stack (frame pointers, then the caller's return
/// address at the stack id's slot), its words kept the first time it is seen; the stack id
/// is negative when bpf_get_stackid failed (the map full, no user stack). Before userspace
/// has learned the slot, the call's own words are kept under (`tgid`, `fd`). `prev`: the
/// site of the entry this call's fd is written over (stack id, ra, ra_from), whose writer
/// looked its site up: the same site needs no look-up of UNCLOSED_SITES (a process opens
/// its fd numbers again and again from the same code). Its words are read as they are: a
/// mix of two writes that a thread sharing the fd number races in could only skip keeping
/// a site's words, never name another site.
#[inline(always)]
fn site(
    ctx: &RawTracePointContext,
    regs: arch::Regs,
    tgid: u32,
    fd: u32,
    time_ns: u64,
    prev: Option<(u32, u64, u32)>,
) -> Site {
    let id = match ctx.get_stackid(&UNCLOSED_STACKS, BPF_F_USER_STACK as u64) {
        Ok(id) => id as u32,
        Err(e) => {
            return Site {
                stack_id: e,
                ra: 0,
                ra_from: ra_from::NONE,
            }
        }
    };
    // The user sp, read only where a word above it is: a stack id that is its site alone
    // (frame pointers all the way, as in Go) pays no read at a site seen before.
    let user_sp = || regs.word(conf!(regs_sp)).unwrap_or(0);
    let slot = UNCLOSED_RA_SLOTS.get(id).copied().unwrap_or(ra_slot::NONE);
    let (ra, from, sp) = match slot {
        ra_slot::UNKNOWN => (u64::from(fd), ra_from::PENDING, user_sp()),
        ra_slot::NONE => (0, ra_from::NONE, 0),
        k => {
            let sp = user_sp();
            // SAFETY: the helper fails instead of faulting.
            match unsafe { bpf_probe_read_user((sp + 8 * u64::from(k - 1)) as *const u64) } {
                Ok(ra) => (ra, ra_from::WORD, sp),
                Err(_) => (0, ra_from::NONE, sp),
            }
        }
    };
    let key = UnclosedSiteKey {
        stack_id: id,
        _pad: 0,
        ra: if from == ra_from::WORD { ra } else { 0 },
    };
    let seen_here = from != ra_from::PENDING && prev == Some((id, ra, from));
    // By reference: no copy of the key per call.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let new = !seen_here && UNCLOSED_SITES.get_ptr(&key).is_none();
    if new || from == ra_from::PENDING {
        let sp = if slot == ra_slot::NONE { user_sp() } else { sp };
        keep_words(
            tgid,
            sp,
            time_ns,
            new.then_some(&key),
            (from == ra_from::PENDING).then_some(fd),
        );
    }
    Site {
        stack_id: id as i32,
        ra,
        ra_from: from,
    }
}

/// Copies the user stack's words above `sp` and keeps them: for a new site under `key`,
/// for a call made before its slot was known under (`tgid`, `pending`).
#[inline(always)]
fn keep_words(
    tgid: u32,
    sp: u64,
    time_ns: u64,
    key: Option<&UnclosedSiteKey>,
    pending: Option<u32>,
) {
    let Some(s) = UNCLOSED_SITE_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a per-CPU array value, ours for this program run; the helper fails instead
    // of faulting.
    unsafe {
        (*s).time_ns = time_ns;
        (*s).site.pid = tgid;
        (*s).site.sp = sp;
        let r = bpf_probe_read_user_raw(
            core::ptr::addr_of_mut!((*s).site.sp_words).cast(),
            (ORIGIN_SP_WORDS * 8) as u32,
            sp as *const _,
        );
        (*s).site.nsp_words = if r == 0 { ORIGIN_SP_WORDS as u32 } else { 0 };
        ((*s).site.start_code, (*s).site.end_code) = kernel::current_code_range(Task::current());
        // The helper copies the value (a copy here would be a memmove call).
        #[allow(clippy::needless_borrows_for_generic_args)]
        if let Some(key) = key {
            if UNCLOSED_SITES
                .insert(key, &(*s).site, BPF_NOEXIST as u64)
                .is_ok()
            {
                stat_add(&STATS, |s| &mut s.unclosed_sites);
            }
        }
        #[allow(clippy::needless_borrows_for_generic_args)]
        if let Some(fd) = pending {
            let _ = UNCLOSED_PENDING.insert(u64::from(tgid) << 32 | u64::from(fd), &*s, 0);
        }
    }
}

/// unshare(2) at sys_enter by `task` (current), its registers `regs` (`compat`: an i386
/// call, its flags in bx): with CLONE_FILES the thread takes a copy of the fd table for its
/// own, and the live set, one table per process, can no longer tell which table an fd or
/// a close() is in (a close in one would hide the other's fd). Counted for the gates, which
/// then pass no verdict; the call may still fail, and a process of one thread would keep
/// one table: counted all the same (nothing hides behind a count too many).
#[inline(always)]
pub fn unshared(task: Task, regs: arch::Regs, compat: bool) {
    let off = if compat {
        conf!(regs_bx)
    } else {
        conf!(regs_arg0)
    };
    let Ok(flags) = regs.word(off) else {
        return;
    };
    if flags & CLONE_FILES == 0 {
        return;
    }
    if TRACKED.get_ptr((task.pid_tgid() >> 32) as u32).is_some() {
        stat_add(&STATS, |s| &mut s.unclosed_split_tables);
    }
}

/// include/uapi/linux/sched.h
pub const CLONE_FILES: u64 = 0x400;

/// The call of `p` succeeded: its fds `fds[..n]` enter the live set, or (F_SETFD, FIOCLEX,
/// FIONCLEX) `fds[0]`'s close-on-exec changes. `execs`: the process's execs seen, read at
/// the call's sys_enter (which found it tracked); `pid_tgid`: the thread's.
#[inline(always)]
pub fn made(
    ctx: &RawTracePointContext,
    regs: arch::Regs,
    pid_tgid: u64,
    p: &OriginPending,
    execs: u32,
    fds: &[i32; ORIGIN_FDS],
    n: usize,
) {
    let tgid = (pid_tgid >> 32) as u32;
    // A flag change on an existing fd: at == 2 (the fd given), no new fd.
    if p.at == 2 || p.what == pending_what::SETS_CLOEXEC {
        let key = u64::from(tgid) << 32 | (fds[0] as u32) as u64;
        if let Some(e) = UNCLOSED_LIVE.get_ptr_mut(key) {
            // SAFETY: pointer from a map lookup, valid for this program run.
            unsafe {
                let mut new = *e;
                if new.time_ns == 0 {
                    // Closed: nothing to change.
                    return;
                }
                new.cloexec = u32::from(p.what == pending_what::SETS_CLOEXEC);
                new.check = new.check_of();
                rewrite(e, &new);
            }
        }
        return;
    }
    // A ring whose requests no hook sees on this kernel (no io_uring_submit_req): the fds
    // it may make are not counted (crate::io_uring).
    if p.call == OriginCall::IoUringSetup as u32
        && conf!(io_kiocb_opcode) == u64::from(fdaudit_common::NO_OFFSET)
    {
        stat_add(&STATS, |s| &mut s.unclosed_io_uring);
    }
    if let Some(o) = UNCLOSED_OWNERS.get_ptr_mut(tgid & OWNER_MASK) {
        // SAFETY: pointer from an array lookup, valid for this program run; written only
        // when it changes (another CPU's close reads it).
        unsafe {
            if core::ptr::read_volatile(o) != tgid {
                core::ptr::write_volatile(o, tgid);
            }
        }
    }
    // SAFETY: a helper without arguments.
    let time_ns = unsafe { bpf_ktime_get_ns() };
    // The entry the first fd is written over, looked up once: its site, then its write.
    let first = UNCLOSED_LIVE.get_ptr_mut(u64::from(tgid) << 32 | u64::from(fds[0] as u32));
    let prev = first.map(|e| {
        use core::ptr::{addr_of, read_volatile};
        // SAFETY: pointer from the lookup just made, valid for this program run.
        unsafe {
            (
                read_volatile(addr_of!((*e).stack_id)) as u32,
                read_volatile(addr_of!((*e).ra)),
                read_volatile(addr_of!((*e).ra_from)),
            )
        }
    });
    // A call that made several fds (pipe, socketpair, recvmsg) keeps its words under the
    // first.
    let site = site(ctx, regs, tgid, fds[0] as u32, time_ns, prev);
    let mut entry = UnclosedLive {
        time_ns,
        stack_id: site.stack_id,
        ra: site.ra,
        ra_from: site.ra_from,
        call: p.call,
        // io_uring_setup's ring fd always has close-on-exec.
        cloexec: u32::from(
            p.what == pending_what::CLOEXEC || p.call == OriginCall::IoUringSetup as u32,
        ),
        execs,
        check: 0,
    };
    entry.check = entry.check_of();
    for (i, &fd) in fds.iter().enumerate() {
        if i >= n {
            break;
        }
        if fd < 0 {
            continue;
        }
        let key = u64::from(tgid) << 32 | fd as u64;
        let found = if i == 0 {
            first
        } else {
            UNCLOSED_LIVE.get_ptr_mut(key)
        };
        if let Some(e) = found {
            // SAFETY: pointer from the lookup just made.
            unsafe { rewrite(e, &entry) };
            continue;
        }
        // By reference: the helper copies the value (no copy of ours per fd).
        #[allow(clippy::needless_borrows_for_generic_args)]
        if UNCLOSED_LIVE.insert(key, &entry, 0).is_err() {
            // The set is full: the fd will read `not seen`; the gates know the run is
            // incomplete.
            stat_add(&STATS, |s| &mut s.unclosed_full);
        }
    }
}
