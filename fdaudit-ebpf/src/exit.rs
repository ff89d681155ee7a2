//! Exit: one record when a traced process's thread group dies.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use fdaudit_common::{flags, ExitRecord, RecordHeader, RecordKind};

use crate::{
    current_tgid,
    fork::take_counters,
    kernel::{self, conf, read_kernel, stat_add},
    STATS, TRACKED,
};

// ---------------------------------------------------------------------------------------------
// sched_process_exit: TP_PROTO(struct task_struct *p[, bool group_dead]). Fires in do_exit()
// after signal->live was decremented, so live == 0 means the whole thread group is gone.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(_ctx: RawTracePointContext) -> i32 {
    let _ = try_sched_process_exit();
    0
}

fn try_sched_process_exit() -> Result<(), i64> {
    let tgid = current_tgid();
    let Some(st) = TRACKED.get_ptr(tgid) else {
        return Ok(());
    };
    let task = kernel::current_task();
    let signal: u64 = read_kernel(task + conf!(task_signal))?;
    let live: i32 = read_kernel(signal + conf!(signal_live))?;
    if live != 0 {
        return Ok(()); // another thread of the group lives on
    }
    let exit_code: i32 = read_kernel(task + conf!(task_exit_code)).unwrap_or(0);
    // SAFETY: pointer from a map lookup, valid for this program run.
    let st = unsafe { &*st };
    let counters = take_counters(tgid, st);
    let mut rec_flags = st.flags;
    let mut never_execd = st.execs == 0 && st.in_window != 0;
    if never_execd && exec_was_missed(task) {
        rec_flags |= flags::EXEC_MISSED;
        never_execd = false;
    }
    let ring = crate::Ring::now();
    if let Some(mut entry) = ring.reserve::<ExitRecord>() {
        let rec = ExitRecord {
            header: RecordHeader {
                kind: RecordKind::Exit as u32,
                flags: rec_flags,
            },
            pid: tgid,
            parent_pid: st.parent_pid,
            fork_ns: st.fork_ns,
            exit_ns: unsafe { bpf_ktime_get_ns() },
            // SAFETY: a helper without arguments.
            cgroup_id: unsafe { bpf_get_current_cgroup_id() },
            never_execd: u32::from(never_execd),
            exit_code: exit_code as u32,
            comm: bpf_get_current_comm().unwrap_or_default(),
            counters,
        };
        entry.write(rec);
        entry.submit(crate::wake::quiet_unless_filling(ring));
    } else {
        stat_add(&STATS, |s| &mut s.lost_records);
    }
    let _ = TRACKED.remove(tgid);
    Ok(())
}

/// Whether `task` (a forked child with no exec seen) exec'd all the same: the kernel skipped
/// the exec program. task_struct->self_exec_id starts equal to ->parent_exec_id at fork
/// (copy_process) and begin_new_exec() increments it; both are u64 since 5.7.
#[inline(always)]
fn exec_was_missed(task: u64) -> bool {
    let own = read_kernel::<u64>(task + conf!(task_self_exec_id));
    let parent = read_kernel::<u64>(task + conf!(task_parent_exec_id));
    matches!((own, parent), (Ok(a), Ok(b)) if a != b)
}
