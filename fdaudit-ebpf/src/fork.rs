//! Fork: start tracking a traced process's child, and the per-process fd-table cache and
//! close() hot slot it sets up (used by the exec, exit and syscall programs).

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::raw_tracepoint, programs::RawTracePointContext};
use fdaudit_common::{Counters, FdCache, HotSlot, TaskState};

use crate::{
    configured, current_tgid, in_followed_cgroup,
    kernel::{conf, read_kernel, stat_add},
    HOT, STATS, TRACKED,
};

// ---------------------------------------------------------------------------------------------
// sched_process_fork: TP_PROTO(struct task_struct *parent, struct task_struct *child).
// Raw tracepoint, stable since 4.17 (bpf_raw_tracepoint_open). Fires in kernel_clone() for
// every new task, threads included; current is the parent.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> i32 {
    let _ = try_sched_process_fork(&ctx);
    0
}

fn try_sched_process_fork(ctx: &RawTracePointContext) -> Result<(), i64> {
    if !configured() {
        return Ok(());
    }
    let parent_tgid = current_tgid();
    // Kept for the child's image below: the entry stays where it is while the child's is
    // inserted (hash map elements are not moved, and are freed only after an RCU grace).
    let parent = TRACKED.get_ptr_mut(parent_tgid);
    // The child starts in its parent's cgroup (clone3's CLONE_INTO_CGROUP aside: such a
    // child is caught at its exec below).
    if parent.is_none() && !in_followed_cgroup() {
        return Ok(());
    }
    let child: u64 = ctx.arg(1);
    let child_tgid: u32 = read_kernel(child + conf!(task_tgid))?;
    if child_tgid == parent_tgid {
        // A new thread of a traced process: covered by its tgid, unless (`unclosed`) it was
        // cloned without CLONE_FILES, with a table of its own (see unclosed::unshared).
        if conf!(unclosed) != 0 && parent.is_some() {
            let theirs: u64 = read_kernel(child + conf!(task_files))?;
            let ours: u64 = read_kernel(crate::kernel::current_task() + conf!(task_files))?;
            if theirs != ours {
                stat_add(&STATS, |s| &mut s.unclosed_split_tables);
            }
        }
        return Ok(());
    }
    // Built in the map value, not on the stack (TaskState is too big for it): inserted from
    // the zeroed static, then filled in place.
    #[allow(clippy::needless_borrows_for_generic_args)]
    if TRACKED.insert(child_tgid, &crate::ZERO_TASK, 0).is_err() {
        stat_add(&STATS, |s| &mut s.tracked_full);
        return Ok(());
    }
    let Some(st) = TRACKED.get_ptr_mut(child_tgid) else {
        return Ok(());
    };
    // SAFETY: pointer from a map lookup, valid for this program run.
    let st = unsafe { &mut *st };
    st.fork_ns = unsafe { bpf_ktime_get_ns() };
    st.parent_pid = parent_tgid;
    st.in_window = 1;
    crate::kernel::current_comm_into(&mut st.parent_comm);
    // SAFETY: pointer from the map lookup above, valid for this program run.
    inherit_image(parent.map(|p| unsafe { &mut *p }), st);
    // copy_process() has given the child its own fd table by now: cache where it is.
    st.cache = fd_cache_of(child).unwrap_or_default();
    claim_hot(child_tgid, &st.cache);
    Ok(())
}

/// Gives the child what its execs will be compared with and the image its code runs as:
/// both the parent's image, the last exec'd one in its ancestry, whatever the parent did
/// since (a privilege drop, unshare or chroot between its exec and this fork is what the
/// comparison is for). A parent not traced yet (a followed cgroup's) or not seen exec'ing
/// (a tree's root added by userspace) gives what it runs as now, and a traced one keeps
/// that as its own.
#[inline(always)]
fn inherit_image(parent: Option<&mut TaskState>, child: &mut TaskState) {
    if let Some(parent) = parent {
        if parent.image.read == 0 {
            crate::credns::read_current(crate::kernel::current_task(), &mut parent.image);
            if parent.credns.read == 0 {
                crate::kernel::copy_words(&mut parent.credns, &parent.image);
            }
        }
        crate::kernel::copy_words(&mut child.image, &parent.image);
    } else {
        crate::credns::read_current(crate::kernel::current_task(), &mut child.image);
    }
    crate::kernel::copy_words(&mut child.credns, &child.image);
}

/// Claims `tgid`'s HOT slot so its syscalls skip the hash lookup; when another process in a
/// window holds it, marks it overflowed so both are counted through TRACKED instead.
#[inline(always)]
pub(crate) fn claim_hot(tgid: u32, cache: &FdCache) {
    if let Some(slot) = HOT.get_ptr_mut(tgid & conf!(hot_mask) as u32) {
        // SAFETY: pointer from an array lookup, valid for this program run.
        let slot = unsafe { &mut *slot };
        if slot.tgid == 0 {
            *slot = HotSlot {
                tgid,
                overflow: slot.overflow,
                close_calls: 0,
                close_ebadf: 0,
                cache: *cache,
            };
        } else if slot.tgid != tgid {
            slot.overflow = 1;
        }
    }
}

/// The fd table of `task` (a task_struct address).
#[inline(always)]
pub(crate) fn fd_cache_of(task: u64) -> Result<FdCache, i64> {
    let files: u64 = read_kernel(task + conf!(task_files))?;
    let fdt: u64 = read_kernel(files + conf!(files_fdt))?;
    Ok(FdCache {
        files,
        fdt,
        open_fds: read_kernel(fdt + conf!(fdt_open_fds))?,
        max_fds: read_kernel(fdt + conf!(fdt_max_fds))?,
        _pad: 0,
    })
}

/// Whether `fd` is open in the current process: close() on it will not fail with EBADF.
///
/// The table only moves when the kernel grows it (expand_fdtable(), on allocating an fd
/// beyond it), which a close loop never does. So an fd beyond the cached table is closed
/// without a read, and the table pointer is re-checked for fds inside it and at every
/// 64th fd: a close loop to 2^20 costs one read per close within the table and one per
/// 64 beyond it.
#[inline(always)]
pub(crate) fn fd_is_open(cache: &mut FdCache, fd: u32) -> Result<bool, i64> {
    if fd >= cache.max_fds && !fd.is_multiple_of(64) {
        return Ok(false);
    }
    let fdt: u64 = read_kernel(cache.files + conf!(files_fdt))?;
    if fdt != cache.fdt {
        cache.fdt = fdt;
        cache.open_fds = read_kernel(fdt + conf!(fdt_open_fds))?;
        cache.max_fds = read_kernel(fdt + conf!(fdt_max_fds))?;
    }
    if fd >= cache.max_fds {
        return Ok(false);
    }
    let word: u64 = read_kernel(cache.open_fds + u64::from(fd / 64) * 8)?;
    Ok((word >> (fd % 64)) & 1 != 0)
}

/// Frees `tgid`'s HOT slot and returns its close() counts (calls, EBADF).
#[inline(always)]
fn release_hot(tgid: u32) -> (u32, u32) {
    if let Some(slot) = HOT.get_ptr_mut(tgid & conf!(hot_mask) as u32) {
        // SAFETY: pointer from an array lookup, valid for this program run.
        let slot = unsafe { &mut *slot };
        if slot.tgid == tgid {
            let counts = (slot.close_calls, slot.close_ebadf);
            slot.tgid = 0;
            slot.close_calls = 0;
            slot.close_ebadf = 0;
            return counts;
        }
    }
    (0, 0)
}

/// The window's counters: the hash map's plus the HOT slot's close() counts (slot freed).
#[inline(always)]
pub(crate) fn take_counters(tgid: u32, st: &TaskState) -> Counters {
    let mut c = st.counters;
    add_hot_counts(tgid, &mut c);
    c
}

/// Adds `tgid`'s HOT slot close() counts to `c` and frees the slot.
#[inline(always)]
pub(crate) fn add_hot_counts(tgid: u32, c: &mut Counters) {
    let (calls, ebadf) = release_hot(tgid);
    c.close_calls += calls;
    c.close_ebadf += ebadf;
}
