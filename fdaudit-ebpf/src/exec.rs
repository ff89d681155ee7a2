//! Exec: one spawn record per successful exec of a traced process, with the fds it kept.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use fdaudit_common::{
    flags, PathsRecord, RecordHeader, RecordKind, SpawnRecord, TaskState, MAX_RANGES,
};

use crate::{
    conf, configured, credns, current_tgid, fdwalk,
    fork::{add_hot_counts, claim_hot, fd_cache_of},
    in_followed_cgroup,
    kernel::{self, stat_add},
    origin_record::MODULES_SENT,
    EXEC_CHAIN, ORIGIN_SEEN, SCRATCH, STATS, TRACKED, ZERO_TASK,
};

// ---------------------------------------------------------------------------------------------
// sched_process_exec: TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm).
// Fires in exec_binprm() after begin_new_exec(), so close-on-exec fds are already closed and
// the fd table holds exactly what the new image inherited. Raw tracepoint, since 4.17.
//
// Two forms of the same program; userspace loads one, chosen by probing for bpf_loop:
// - sched_process_exec walks the fd table under bpf_loop (5.17+), any table size;
// - sched_process_exec_bounded (for 5.10 and 5.15) walks it with bounded loops in chunks
//   chained by tail calls (EXEC_CHAIN, since 4.2), up to BOUNDED_MAX_FDS fds, and marks
//   records whose table was larger BOUNDED_WALK.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(ctx: RawTracePointContext) -> i32 {
    let _ = try_sched_process_exec(&ctx, false);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec_bounded(ctx: RawTracePointContext) -> i32 {
    if try_sched_process_exec(&ctx, true) == Ok(true) {
        // The window state is saved: go on with the walk. A tail call does not return
        // (and is only allowed here, in the program's own int-returning function).
        // SAFETY: EXEC_CHAIN holds programs of this program's type, filled by the loader.
        unsafe { EXEC_CHAIN.tail_call(&ctx, fdwalk::CHAIN_FDS) };
        // Not reached unless the slot is empty: send what there is.
        if let Some(scratch) = SCRATCH.get_ptr_mut(0) {
            // SAFETY: pointer from a per-CPU array lookup, valid for this run.
            let scratch = unsafe { &mut *scratch };
            scratch.spawn.header.flags |= flags::FDTABLE_TRUNCATED;
            output_spawn(&mut scratch.spawn, &mut scratch.paths);
        }
    }
    0
}

/// Tail-call stage of the bounded walk: the next chunk of the fd table (EXEC_CHAIN slot
/// fdwalk::CHAIN_FDS). Never attached.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn exec_walk_fds(ctx: RawTracePointContext) -> i32 {
    fdwalk::bounded::fds_stage(&ctx, &EXEC_CHAIN);
    0
}

/// Tail-call stage of the bounded walk: the leaked files' paths, then the record goes out
/// (EXEC_CHAIN slot fdwalk::CHAIN_PATHS). Never attached.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn exec_walk_paths(_ctx: RawTracePointContext) -> i32 {
    fdwalk::bounded::paths_stage();
    0
}

/// Sends the finished records: the paths record first (so userspace has it when the spawn
/// comes; `pid` and `exec_ns` set by the exec program), then the spawn up to its last leaked
/// fd. Variable length: bpf_ringbuf_output takes a bounded size; the reserve helper would
/// want a constant one.
#[inline(always)]
pub(crate) fn output_spawn(rec: &mut SpawnRecord, paths: &mut PathsRecord) {
    // Both records to the same ring, so that the paths come first.
    let ring = crate::Ring::now();
    if rec.npaths > 0 {
        paths.header = RecordHeader {
            kind: RecordKind::Paths as u32,
            flags: 0,
        };
        paths.npaths = rec.npaths;
        let len = PathsRecord::sent_len(rec.npaths as usize);
        // SAFETY: `len` is at most the size of the record, which lives in the map value.
        let bytes =
            unsafe { core::slice::from_raw_parts((paths as *const PathsRecord).cast::<u8>(), len) };
        if ring.output(bytes, crate::wake::FOLLOWED).is_err() {
            stat_add(&STATS, |s| &mut s.lost_records);
            rec.npaths = 0;
            rec.header.flags |= flags::PATH_PARTIAL;
        }
    }
    let len = SpawnRecord::sent_len(rec.nfds as usize);
    // SAFETY: as above.
    let bytes =
        unsafe { core::slice::from_raw_parts((rec as *const SpawnRecord).cast::<u8>(), len) };
    if ring.output(bytes, crate::wake::spawn(ring)).is_err() {
        stat_add(&STATS, |s| &mut s.lost_records);
    }
}

// The record's and the TRACKED entry's fields copied or cleared with
// kernel::copy_words/zero_words sit at 8-aligned offsets of 8-aligned map values.
const _: () = assert!(
    core::mem::offset_of!(TaskState, counters).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, counters).is_multiple_of(8)
        && core::mem::offset_of!(TaskState, parent_comm).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, parent_comm).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, comm).is_multiple_of(8)
        && core::mem::offset_of!(TaskState, credns).is_multiple_of(8)
        && core::mem::offset_of!(TaskState, image).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, image_credns).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, prev_credns).is_multiple_of(8)
        && core::mem::offset_of!(SpawnRecord, exec_credns).is_multiple_of(8)
);

/// Fills the spawn record and starts a new window; with `bounded`, leaves the record in
/// SCRATCH for the tail-called walk and returns Ok(true) when the caller must chain.
#[inline(always)]
fn try_sched_process_exec(ctx: &RawTracePointContext, bounded: bool) -> Result<bool, i64> {
    if !configured() {
        return Ok(false);
    }
    let tgid = current_tgid();
    if TRACKED.get_ptr(tgid).is_none() {
        // A process that entered the followed cgroup without a traced fork (moved in by a
        // runtime before it execs the payload, or cloned into it): traced from this exec on.
        if !in_followed_cgroup() {
            return Ok(false);
        }
        // From a zeroed static, not a default built on the stack (a 184-byte memset): by
        // reference, or it is copied there.
        #[allow(clippy::needless_borrows_for_generic_args)]
        if TRACKED.insert(tgid, &ZERO_TASK, 0).is_err() {
            stat_add(&STATS, |s| &mut s.tracked_full);
            return Ok(false);
        }
    }
    let Some(st) = TRACKED.get_ptr_mut(tgid) else {
        return Ok(false);
    };
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return Ok(false);
    };
    // SAFETY: both pointers come from map lookups and stay valid for this program run.
    let (st, scratch) = unsafe { (&mut *st, &mut *scratch) };
    let rec = &mut scratch.spawn;
    let now = unsafe { bpf_ktime_get_ns() };
    let old_pid: u64 = ctx.arg(1);
    let bprm: u64 = ctx.arg(2);

    fill_spawn(rec, st, tgid, now, old_pid as u32);

    kernel::read_exec_names(rec, bprm);
    // The paths record goes out with the spawn (output_spawn); its header now.
    scratch.paths.pid = tgid;
    scratch.paths.exec_ns = now;
    if !bounded {
        fdwalk::walk_fds();
        // The walk wrote the records through lookups of its own (see walk_fds): send them
        // from a fresh one.
        if let Some(scratch) = SCRATCH.get_ptr_mut(0) {
            // SAFETY: pointer from a per-CPU array lookup, valid for this program run.
            let scratch = unsafe { &mut *scratch };
            output_spawn(&mut scratch.spawn, &mut scratch.paths);
        }
    } else {
        fdwalk::bounded::start(rec);
    }

    open_new_window(st, tgid, now);
    Ok(bounded)
}

/// The spawn record's fixed part, from the window that ends at this exec; the process's
/// image identity becomes the new image's.
#[inline(always)]
fn fill_spawn(rec: &mut SpawnRecord, st: &mut TaskState, tgid: u32, now: u64, old_pid: u32) {
    rec.header = RecordHeader {
        kind: RecordKind::Spawn as u32,
        flags: st.flags,
    };
    if st.in_window == 0 {
        rec.header.flags |= flags::NO_FORK;
    } else if st.execs > 0 {
        rec.header.flags |= flags::REEXEC;
    }
    rec.pid = tgid;
    rec.old_pid = old_pid;
    rec.parent_pid = st.parent_pid;
    rec.fork_ns = st.fork_ns;
    rec.exec_ns = now;
    kernel::copy_words(&mut rec.parent_comm, &st.parent_comm);
    kernel::current_comm_into(&mut rec.comm);
    // SAFETY: the helper only reads current's css_set.
    rec.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    read_nofile(rec);
    kernel::copy_words(&mut rec.counters, &st.counters);
    add_hot_counts(tgid, &mut rec.counters);
    // sched_process_exec fires after exec installed the new credentials (commit_creds in
    // begin_new_exec, 5.9+; install_exec_creds in the binfmt loader before).
    kernel::copy_words(&mut rec.image_credns, &st.credns);
    kernel::copy_words(&mut rec.prev_credns, &st.image);
    credns::read_current(kernel::current_task(), &mut rec.exec_credns);
    // This image is what the children it forks are compared with (what the code that
    // makes their fds runs as); its own later execs, one spawn with this one, keep the
    // comparison with the ancestry, unless there was none (a process first seen here).
    kernel::copy_words(&mut st.image, &rec.exec_credns);
    if st.credns.read == 0 {
        kernel::copy_words(&mut st.credns, &rec.exec_credns);
    }
    if st.counters.close_range_calls as usize > MAX_RANGES {
        rec.header.flags |= flags::RANGES_TRUNCATED;
    }
}

/// RLIMIT_NOFILE in the asm-generic numbering (x86_64 and arm64 alike).
const RLIMIT_NOFILE: u64 = 7;

/// current->signal->rlim[RLIMIT_NOFILE] (`struct rlimit`: rlim_cur, rlim_max, unsigned
/// longs): the limits the new image starts with. Read here rather than from the parent's
/// /proc later, when it may be gone. Left 0 when the read fails.
#[inline(always)]
fn read_nofile(rec: &mut SpawnRecord) {
    let at = kernel::read_kernel::<u64>(kernel::current_task() + conf!(task_signal))
        .map(|signal| signal + conf!(signal_rlim) + RLIMIT_NOFILE * 16);
    let lim = at.and_then(kernel::read_kernel::<[u64; 2]>);
    let [cur, max] = lim.unwrap_or([0, 0]);
    rec.nofile_cur = cur;
    rec.nofile_max = max;
}

/// The process stays traced: its children are spawns too, and what the new image does
/// before exec'ing again (a spawn helper's close loop, a shell's `exec`) opens a new window.
#[inline(always)]
fn open_new_window(st: &mut TaskState, tgid: u32, now: u64) {
    st.in_window = 1;
    st.execs += 1;
    st.fork_ns = now;
    st.flags = 0;
    kernel::zero_words(&mut st.counters);
    // begin_new_exec() may have given the process a new fd table (unshare_files()).
    st.cache = fd_cache_of(kernel::current_task()).unwrap_or_default();
    claim_hot(tgid, &st.cache);
    // `--origin`: the new image's first origin record with a stack sends its modules
    // (origin_modules.rs). The old image's describe other mappings, and without its own
    // a record of the new image whose process is gone before fdaudit reads its maps has
    // no module to resolve its frames in. (The lost-record count stays: the fd table does.)
    if let Some(v) = ORIGIN_SEEN.get_ptr_mut(tgid) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        unsafe { *v &= !MODULES_SENT };
    }
}
