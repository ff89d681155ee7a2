//! `trace --origin`'s records (see origin.rs): the origin record of a call that made fds
//! inheritable, with the fds' identity and the user stack, and before it the kept call that
//! created an fd made inheritable later.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_ktime_get_ns,
        generated::{bpf_get_stack, bpf_probe_read_kernel, bpf_probe_read_user},
    },
    programs::RawTracePointContext,
    EbpfContext,
};
use fdaudit_common::{
    origin_flags, OriginCall, OriginCreatedRecord, OriginMade, OriginRecord, RecordHeader,
    RecordKind, ORIGIN_FDS, ORIGIN_SP_WORDS, ORIGIN_STACK_DEPTH, PY_CHAIN_AFTER_ORIGIN,
};

use crate::{
    arch, fdwalk,
    kernel::{conf, read_kernel, stat_add, Task},
    ORIGIN_CHAIN, ORIGIN_MADE, ORIGIN_SEEN, STATS,
};

/// ORIGIN_SEEN's value: records lost before the next one (low bits), and this bit once the
/// process's modules were sent (origin_modules.rs).
pub const MODULES_SENT: u32 = 1 << 31;

/// Who made the fds of a record: the task (current), its pid and tgid, and its parent
/// (read at the call's sys_enter from `TRACKED`).
#[derive(Clone, Copy)]
pub struct Made {
    pub task: Task,
    /// The fd table, read once for all the fds (none for a marker record, which has no fds:
    /// the verifier then visits no look-up on that path).
    pub table: Option<fdwalk::FdTable>,
    pub regs: arch::Regs,
    pub pid_tgid: u64,
    pub parent_pid: u32,
}

/// The ORIGIN_MADE entry of `fd` of process `tgid`, else of its parent (a forked child has
/// its parent's fds), if it still describes the file the fd holds.
#[inline(always)]
fn creator(
    table: Option<fdwalk::FdTable>,
    tgid: u32,
    parent: u32,
    fd: i32,
) -> Option<*const OriginMade> {
    let file = table?.file(fd as u32).ok()?;
    for owner in [tgid, parent] {
        if owner == 0 {
            continue;
        }
        if let Some(m) = ORIGIN_MADE.get_ptr(u64::from(owner) << 32 | fd as u64) {
            // SAFETY: pointer from a map lookup, valid for this program run.
            if unsafe { (*m).file } == file {
                return Some(m);
            }
        }
    }
    None
}

/// Sends the kept creator of `fd` (an [`OriginCreatedRecord`]), if any; whether it did.
#[inline(always)]
fn send_creator(
    ring: crate::Ring,
    table: Option<fdwalk::FdTable>,
    tgid: u32,
    parent: u32,
    fd: i32,
) -> bool {
    let Some(m) = creator(table, tgid, parent, fd) else {
        return false;
    };
    let Some(mut entry) = ring.reserve::<OriginCreatedRecord>() else {
        return false;
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: `rec` points at the reserved record; `m` is a map value pointer valid for
    // this program run.
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::OriginCreated as u32,
            flags: 0,
        };
        (*rec).pid = tgid;
        (*rec).fd = fd;
        // A helper's copy: a struct copy this size is a call of memmove, a subprogram
        // (see no_fds). (A map value: the read does not fail.)
        bpf_probe_read_kernel(
            core::ptr::addr_of_mut!((*rec).made).cast(),
            core::mem::size_of::<OriginMade>() as u32,
            m.cast(),
        );
    }
    // The origin record right after it wakes the reader if need be.
    entry.submit(crate::wake::FOLLOWED);
    true
}

// The record's name is written by two word stores.
const _: () = assert!(core::mem::offset_of!(OriginRecord, comm) % 8 == 0);

/// Sends an origin record for call `call` of the current thread: `fds[..n]` with their
/// identity; with the user sp the user stack too; for an fd made inheritable after
/// its creation (FIONCLEX, F_SETFD) the call that created it, when kept.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn emit(
    ctx: &RawTracePointContext,
    made: Made,
    sp: Option<u64>,
    call: u32,
    cmd: u64,
    fds: &[i32; ORIGIN_FDS],
    n: usize,
    mut flags: u32,
) -> Result<(), i64> {
    let Made {
        task,
        table,
        regs,
        pid_tgid,
        parent_pid,
    } = made;
    let tgid = (pid_tgid >> 32) as u32;
    let seen = ORIGIN_SEEN.get_ptr_mut(tgid);
    let ring = crate::Ring::now();
    // FIONCLEX and F_SETFD make an existing fd inheritable: its creator goes first.
    let given = call == OriginCall::Ioctl as u32
        || (call == OriginCall::Fcntl as u32 && cmd == fdaudit_common::F_SETFD);
    if sp.is_some() && given && send_creator(ring, table, tgid, parent_pid, fds[0]) {
        flags |= origin_flags::CREATED;
    }
    let Some(mut entry) = ring.reserve::<OriginRecord>() else {
        stat_add(&STATS, |s| &mut s.lost_records);
        // Counted per process: its next record says how many went before it.
        match seen {
            // SAFETY: pointer from a map lookup, valid for this program run.
            Some(v) => unsafe { *v += 1 },
            None => {
                let _ = ORIGIN_SEEN.insert(tgid, 1, 0);
            }
        }
        return Ok(());
    };
    stat_add(&STATS, |s| &mut s.origin_records);
    let rec = entry.as_mut_ptr();
    // SAFETY: `rec` points at the reserved record, written field by field before submit.
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::Origin as u32,
            flags,
        };
        (*rec).pid = tgid;
        (*rec).tid = pid_tgid as u32;
        (*rec).parent_pid = parent_pid;
        (*rec).call = call;
        // `n` is not used below: the verifier then prunes the paths that differ in it
        // (unused slots of `fds` hold -1).
        (*rec).nfd = n as u32;
        (*rec).lost = seen.map(|v| *v & !MODULES_SENT).unwrap_or(0);
        (*rec).cmd = cmd;
        (*rec).time_ns = bpf_ktime_get_ns();
        // Straight into the record (a zeroed default would be a memset call).
        crate::kernel::task_comm_into(task, core::ptr::addr_of_mut!((*rec).comm).cast());
        for (i, &fd) in fds.iter().enumerate() {
            let (ino, dev) = identity(table, fd);
            (*rec).fd[i] = fd;
            (*rec).ino[i] = ino;
            (*rec).dev[i] = dev;
        }
    }
    if let Some(sp) = sp {
        // SAFETY: as above.
        unsafe { user_stack(ctx, task, sp, rec) };
    } else {
        // SAFETY: as above.
        // (volatile: adjacent zero stores would be merged into a memset call)
        unsafe {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*rec).nstack), 0);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*rec).nsp_words), 0);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*rec).start_code), 0);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*rec).end_code), 0);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*rec).sp), 0);
        }
    }
    // A process's first record wakes the reader, which then reads its memory map while it
    // most likely lives; the others come with the next wake-up.
    let first = seen.is_none();
    // The process's modules go with its first record sent with a stack, not its first
    // record: that one may have been lost to a full ring.
    // SAFETY: pointer from a map lookup, valid for this program run.
    let modules_due = sp.is_some() && seen.is_none_or(|v| unsafe { *v } & MODULES_SENT == 0);
    match seen {
        // SAFETY: as above.
        Some(v) if modules_due => unsafe { *v |= MODULES_SENT },
        Some(_) => {}
        None => {
            let _ = ORIGIN_SEEN.insert(tgid, if modules_due { MODULES_SENT } else { 0 }, 0);
        }
    }
    entry.submit(if first {
        crate::wake::NOW
    } else {
        crate::wake::quiet_unless_filling(ring)
    });
    if modules_due {
        // The process's modules too (origin_modules.rs, which then goes on to the Python
        // walk): a tail call, so that this program does not verify that walk (it clears
        // MODULES_SENT again when the kernel could not read the innermost frame's build
        // id). Not reached unless the slot is empty.
        // SAFETY: ORIGIN_CHAIN holds programs of this program's type, filled by the loader.
        unsafe { ORIGIN_CHAIN.tail_call(ctx, fdaudit_common::ORIGIN_CHAIN_MODULES) };
    }
    if sp.is_some() {
        // A new call site's stack copy (stack_copy.rs; then the Python walk), as above. A
        // site copied before is told here, without the tail call (whose program would take
        // the task and its registers again).
        if !crate::stack_copy::site_key(regs, tgid).is_some_and(|k| crate::stack_copy::copied(&k)) {
            // SAFETY: as above.
            unsafe { ORIGIN_CHAIN.tail_call(ctx, fdaudit_common::ORIGIN_CHAIN_STACK_COPY) };
        }
        crate::python::walk(ctx, tgid, PY_CHAIN_AFTER_ORIGIN);
    }
    Ok(())
}

/// The user stack of the call into `rec`: the frame-pointer walk, the text range and the
/// words at the user sp, `sp`.
///
/// # Safety
/// `rec` points at a reserved ring record.
#[inline(always)]
unsafe fn user_stack(ctx: &RawTracePointContext, task: Task, sp: u64, rec: *mut OriginRecord) {
    let (start_code, end_code) = crate::kernel::current_code_range(task);
    // SAFETY: the caller's.
    unsafe {
        (*rec).start_code = start_code;
        (*rec).end_code = end_code;
        (*rec).sp = sp;
        let (nstack, nsp_words) = frames_and_words(
            ctx,
            sp,
            core::ptr::addr_of_mut!((*rec).stack),
            core::ptr::addr_of_mut!((*rec).sp_words),
        );
        (*rec).nstack = nstack;
        (*rec).nsp_words = nsp_words;
    }
}

/// The frame-pointer walk of the user stack into `stack` (bpf_get_stack, 4.18; the user
/// stack from the task's saved registers; it zeroes the rest of the buffer itself, and all
/// of it on failure) and the words at the user sp into `words` (bpf_probe_read_user, 5.5:
/// the return address into the caller of a libc wrapper built without frame pointers is
/// among them). Returns how many of each were filled.
///
/// # Safety
/// `stack` and `words` point at ring-record or map-value memory of their size.
#[inline(always)]
pub unsafe fn frames_and_words(
    ctx: &RawTracePointContext,
    sp: u64,
    stack: *mut [u64; ORIGIN_STACK_DEPTH],
    words: *mut [u64; ORIGIN_SP_WORDS],
) -> (u32, u32) {
    // SAFETY: the caller's; the helpers fail instead of faulting.
    unsafe {
        let n = bpf_get_stack(
            ctx.as_ptr(),
            stack.cast(),
            (ORIGIN_STACK_DEPTH * 8) as u32,
            BPF_F_USER_STACK as u64,
        );
        let r = bpf_probe_read_user(words.cast(), (ORIGIN_SP_WORDS * 8) as u32, sp as *const _);
        (
            if n > 0 { (n / 8) as u32 } else { 0 },
            if r == 0 { ORIGIN_SP_WORDS as u32 } else { 0 },
        )
    }
}

/// The `struct file` at `fd` of the table; 0 when absent.
#[inline(always)]
pub fn file_at(table: Option<fdwalk::FdTable>, fd: i32) -> u64 {
    match table {
        Some(t) if fd >= 0 => t.file(fd as u32).unwrap_or(0),
        _ => 0,
    }
}

/// (inode number, superblock dev) of the file at `fd` of the table; zeros when absent.
#[inline(always)]
fn identity(table: Option<fdwalk::FdTable>, fd: i32) -> (u64, u32) {
    let file = file_at(table, fd);
    if file == 0 {
        return (0, 0);
    }
    let inode: u64 = read_kernel(file + conf!(file_inode)).unwrap_or(0);
    let ino = read_kernel(inode + conf!(inode_ino)).unwrap_or(0);
    let sb: u64 = read_kernel(inode + conf!(inode_sb)).unwrap_or(0);
    (ino, read_kernel(sb + conf!(sb_dev)).unwrap_or(0))
}
