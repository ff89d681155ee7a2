//! Small helpers over the kernel: config access, fault-tolerant reads, stats.

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes, bpf_probe_read_user_buf,
    },
    maps::PerCpuArray,
    TASK_COMM_LEN,
};
use fdaudit_common::{flags, SpawnRecord, Stats, ARGV_LEN, PATH_LEN};

/// Reads one field of the CONFIG global. The read is volatile so the compiler cannot fold
/// the all-zero default the object is built with: the loader rewrites it before loading.
macro_rules! conf {
    ($($field:ident).+) => {
        // SAFETY: CONFIG is a plain static; a volatile read of a field is always valid.
        (unsafe { core::ptr::read_volatile(core::ptr::addr_of!(crate::CONFIG.$($field).+)) }
            as u64)
    };
}
pub(crate) use conf;

/// bpf_probe_read_kernel of a `T` at a kernel address; an error when the read faults.
#[inline(always)]
pub fn read_kernel<T>(addr: u64) -> Result<T, i64> {
    // SAFETY: bpf_probe_read_kernel tolerates any address; it fails instead of faulting.
    unsafe { bpf_probe_read_kernel(addr as *const T) }.map_err(|e| e as i64)
}

#[inline(always)]
pub fn current_task() -> u64 {
    // SAFETY: the helper takes no arguments and returns current's task_struct address.
    unsafe { bpf_get_current_task() }
}

/// Current's task_struct as the BTF-typed pointer (bpf_get_current_task_btf, 5.11+: direct
/// loads), taken once per program run and shared by what it reads of the task (a helper
/// call each is dear on the open/close path); null where CONFIG's `task_btf` is NONE (the
/// readers take probe-reads there, and the verifier never visits the helper).
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    #[inline(always)]
    pub fn current() -> Self {
        if conf!(task_btf) == u64::from(fdaudit_common::task_btf::NONE) {
            return Task(core::ptr::null());
        }
        // SAFETY: the helper returns current's task_struct, valid for this program run.
        Task(unsafe { aya_ebpf::helpers::bpf_get_current_task_btf() } as *const u8)
    }

    /// The pointer (only where `task_btf` is TASK or more).
    #[inline(always)]
    pub fn btf(self) -> *const u8 {
        self.0
    }

    /// bpf_get_current_pid_tgid()'s value (tgid << 32 | pid, both of the initial pid
    /// namespace), from the task's own fields where the pointer is there (no helper call).
    #[inline(always)]
    pub fn pid_tgid(self) -> u64 {
        if conf!(task_btf) == u64::from(fdaudit_common::task_btf::NONE) {
            return bpf_get_current_pid_tgid();
        }
        let (pid_off, tgid_off) = (conf!(task_pid) as usize, conf!(task_tgid) as usize);
        // SAFETY: current's task_struct, valid for this program run; loads at BTF offsets
        // of the fields they read, which the verifier checks.
        unsafe {
            let pid = core::ptr::read_volatile(self.0.wrapping_add(pid_off).cast::<u32>());
            let tgid = core::ptr::read_volatile(self.0.wrapping_add(tgid_off).cast::<u32>());
            u64::from(tgid) << 32 | u64::from(pid)
        }
    }
}

/// `task`'s (current's) text range (mm->start_code, mm->end_code); zeros without an mm.
/// By probe-reads, on every kernel: a pointer loaded through the BTF task pointer
/// (task->mm) has the verifier search the kernel's BTF by name for whether the member is a
/// trusted one, some milliseconds of start-up per load instruction in `--origin`'s
/// sys_exit program, for one helper call saved per origin record. The two fields are read
/// in one probe-read where they are adjacent (they are in every kernel fdaudit knows;
/// CONFIG's offsets are constants to the verifier, which visits one branch).
#[inline(always)]
pub fn current_code_range(task: Task) -> (u64, u64) {
    let base = if conf!(task_btf) == u64::from(fdaudit_common::task_btf::NONE) {
        current_task()
    } else {
        task.btf() as u64
    };
    let mm: u64 = read_kernel(base + conf!(task_mm)).unwrap_or(0);
    if conf!(mm_end_code) == conf!(mm_start_code) + 8 {
        let [start, end] = read_kernel::<[u64; 2]>(mm + conf!(mm_start_code)).unwrap_or([0; 2]);
        return (start, end);
    }
    (
        read_kernel(mm + conf!(mm_start_code)).unwrap_or(0),
        read_kernel(mm + conf!(mm_end_code)).unwrap_or(0),
    )
}

/// When `task`'s process began: its group leader's `start_time` (CLOCK_MONOTONIC, the
/// clock of bpf_ktime_get_ns), by direct loads. Only where `task_btf` is TASK or more (the
/// verifier never visits it elsewhere).
#[inline(always)]
pub fn process_start_ns(task: Task) -> u64 {
    let (leader_off, start_off) = (
        conf!(task_group_leader) as usize,
        conf!(task_start_time) as usize,
    );
    // SAFETY: current's task_struct, valid for this program run; every load is at a BTF
    // offset of the type it reads, which the verifier checks (faults read as 0).
    unsafe {
        let leader =
            core::ptr::read_volatile(task.btf().wrapping_add(leader_off).cast::<*const u8>());
        core::ptr::read_volatile(leader.wrapping_add(start_off).cast::<u64>())
    }
}

/// `task`'s (current's) name into `out` (16 bytes of ring-record or map-value memory):
/// two direct loads of `task->comm` through the BTF-typed pointer (the verifier allows
/// word loads inside a scalar array member), no helper call; before 5.11
/// bpf_get_current_comm.
///
/// # Safety
/// `out` points at 16 writable, 8-aligned bytes.
#[inline(always)]
pub unsafe fn task_comm_into(task: Task, out: *mut [u8; TASK_COMM_LEN]) {
    let out = out.cast::<u64>();
    if conf!(task_btf) == u64::from(fdaudit_common::task_btf::NONE) {
        // SAFETY: the caller's; the helper writes at most TASK_COMM_LEN bytes.
        unsafe {
            aya_ebpf::helpers::generated::bpf_get_current_comm(out.cast(), TASK_COMM_LEN as u32)
        };
        return;
    }
    let comm = task
        .btf()
        .wrapping_add(conf!(task_comm) as usize)
        .cast::<u64>();
    // SAFETY: current's task_struct, valid for this program run; loads inside its comm
    // member at a BTF offset, which the verifier checks; the caller's `out`.
    unsafe {
        core::ptr::write_volatile(out, core::ptr::read_volatile(comm));
        core::ptr::write_volatile(out.add(1), core::ptr::read_volatile(comm.wrapping_add(1)));
    }
}

/// The current task's name straight into `out` (a map value), zeroed if the helper fails:
/// `bpf_get_current_comm()`'s `Result` comes back through the stack and is copied byte by
/// byte, some 80 instructions.
#[inline(always)]
pub fn current_comm_into(out: &mut [u8; TASK_COMM_LEN]) {
    // SAFETY: the helper writes at most TASK_COMM_LEN bytes into `out`.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            out.as_mut_ptr().cast(),
            TASK_COMM_LEN as u32,
        )
    };
    if ret != 0 {
        zero_words(out);
    }
}

/// `*dst = *src`, 8 bytes at a time. A plain assignment of a struct or array in a map
/// value becomes a copy through the stack and back or a call of the eBPF target's
/// byte-at-a-time memmove, whose every iteration the verifier walks (112 of them for
/// `Counters`). The accesses are volatile, or LLVM turns the loop back into that memmove.
/// Both must be 8-aligned (fields at 8-aligned offsets of map values: the callers assert it).
#[inline(always)]
pub fn copy_words<T: Copy>(dst: &mut T, src: &T) {
    const { assert!(core::mem::size_of::<T>().is_multiple_of(8)) };
    let (d, s) = (
        (dst as *mut T).cast::<u64>(),
        (src as *const T).cast::<u64>(),
    );
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: in bounds of both, 8-aligned (see above).
        unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
    }
}

/// Zeroes `dst`, 8 bytes at a time (see [`copy_words`]; `T` must be valid all-zero).
#[inline(always)]
pub fn zero_words<T: Copy>(dst: &mut T) {
    const { assert!(core::mem::size_of::<T>().is_multiple_of(8)) };
    let d = (dst as *mut T).cast::<u64>();
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: in bounds, 8-aligned (see copy_words).
        unsafe { core::ptr::write_volatile(d.add(i), 0) };
    }
}

/// Adds one to a field of this CPU's STATS entry (per-CPU, so no atomics are needed).
#[inline(always)]
pub fn stat_add(map: &PerCpuArray<Stats>, field: impl Fn(&mut Stats) -> &mut u64) {
    if let Some(s) = map.get_ptr_mut(0) {
        // SAFETY: pointer from a map lookup, private to this CPU for this program run.
        *field(unsafe { &mut *s }) += 1;
    }
}

/// Whether the kernel string at `addr`, read into a buffer of `cap` bytes as `len` bytes
/// before the NUL, went on beyond the buffer.
#[inline(always)]
pub fn was_cut(addr: u64, len: usize, cap: usize) -> bool {
    len + 1 >= cap && read_kernel::<u8>(addr + (cap as u64 - 1)).is_ok_and(|b| b != 0)
}

/// Fills `filename` (bprm->filename) and `argv` (the new image's mm->arg_start..arg_end).
#[inline(always)]
pub fn read_exec_names(rec: &mut SpawnRecord, bprm: u64) {
    rec.filename[0] = 0;
    rec.argv_len = 0;
    let name = read_kernel::<u64>(bprm + conf!(bprm_filename));
    match name {
        Ok(p) => {
            // SAFETY: the helper bounds the read by the buffer and tolerates bad addresses.
            match unsafe { bpf_probe_read_kernel_str_bytes(p as *const u8, &mut rec.filename) } {
                Ok(s) => {
                    if was_cut(p, s.len(), PATH_LEN) {
                        rec.header.flags |= flags::PATH_PARTIAL;
                    }
                }
                Err(_) => rec.header.flags |= flags::READ_FAILED,
            }
        }
        Err(_) => rec.header.flags |= flags::READ_FAILED,
    }
    let Ok(mm) = read_kernel::<u64>(current_task() + conf!(task_mm)) else {
        rec.header.flags |= flags::READ_FAILED;
        return;
    };
    let (Ok(start), Ok(end)) = (
        read_kernel::<u64>(mm + conf!(mm_arg_start)),
        read_kernel::<u64>(mm + conf!(mm_arg_end)),
    ) else {
        rec.header.flags |= flags::READ_FAILED;
        return;
    };
    let mut len = end.saturating_sub(start) as usize;
    if len > ARGV_LEN {
        len = ARGV_LEN;
        rec.header.flags |= flags::ARGV_TRUNCATED;
    }
    // Read exactly `len` bytes (1..=ARGV_LEN, a bounded size the verifier accepts): with a
    // short argv and environment the area ends less than ARGV_LEN bytes below the top of
    // the stack, so a read of the whole buffer would fault there.
    // SAFETY: the helper tolerates bad addresses; the slice bounds the write.
    if len > 0
        && unsafe { bpf_probe_read_user_buf(start as *const u8, &mut rec.argv[..len]) }.is_err()
    {
        rec.header.flags |= flags::READ_FAILED;
        len = 0;
    }
    rec.argv_len = len as u32;
}
