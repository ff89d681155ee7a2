//! fdaudit's eBPF programs. Built for bpfel-unknown-none by `xtask::build_ebpf`.
//!
//! Every hook is a raw tracepoint: no tracefs, no kprobes, attachable under lockdown; where
//! the kernel allows BPF trampolines, the syscall counts can come from fentry/fexit programs
//! on the counted syscalls instead (the fentry backend), so other syscalls pay nothing. Two
//! optional syscall tracepoints on the exec syscalls' exit record why an exec failed.
//! Per-process counters live in the TRACKED hash map, keyed by tgid; one record goes to the
//! ring buffer per exec and per exit of a traced process, never one per syscall.
//! Kernel struct offsets come from BTF at load time through the CONFIG global.
#![no_std]
// On the host (clippy over the workspace) this is an ordinary binary with an empty main.
#![cfg_attr(target_arch = "bpf", no_main)]

mod arch;
mod fdwalk;
mod kernel;

/// Asserts at compile time that static `$ident` is named `$name` (a common-crate constant).
macro_rules! map_named {
    ($ident:ident, $name:path) => {
        const _: () = assert!(fdaudit_common::same_name(stringify!($ident), $name));
    };
}

use aya_ebpf::{
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user_str_bytes,
    },
    macros::{fentry, fexit, map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{FEntryContext, FExitContext, RawTracePointContext, TracePointContext},
};
use fdaudit_common::{
    flags, sysno, Config, Counters, ExecFailure, ExitRecord, FdCache, HotSlot, PathsRecord,
    ReadKey, ReadStat, RecordHeader, RecordKind, SpawnRecord, SpawnScratch, Stats, TaskState,
    CONFIG_MAGIC, EXEC_CHAIN_LEN, GLOBAL_CONFIG, HOT_SLOTS, MAP_EVENTS, MAP_EXEC_CHAIN,
    MAP_EXEC_FAILS, MAP_EXEC_PENDING, MAP_EXEC_SCRATCH, MAP_HOT, MAP_READS, MAP_SCRATCH,
    MAP_STATS, MAP_TRACKED, MAX_EXEC_FAILS, MAX_RANGES, MAX_READS, MAX_TRACKED,
};
use kernel::{conf, read_kernel, stat_add};

// `#[map]` names each map after its static; `map_named!` checks at compile time that the
// name is the `MAP_*` constant userspace looks the map up by.
// The loader sizes the ring from the CPU count (`trace --buffer-pages`); 8 MiB otherwise.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);
map_named!(EVENTS, MAP_EVENTS);

#[map]
static TRACKED: HashMap<u32, TaskState> = HashMap::with_max_entries(MAX_TRACKED, 0);
map_named!(TRACKED, MAP_TRACKED);

#[map]
static SCRATCH: PerCpuArray<SpawnScratch> = PerCpuArray::with_max_entries(1, 0);
map_named!(SCRATCH, MAP_SCRATCH);

#[map]
static STATS: PerCpuArray<Stats> = PerCpuArray::with_max_entries(1, 0);
map_named!(STATS, MAP_STATS);

#[map]
static HOT: Array<HotSlot> = Array::with_max_entries(HOT_SLOTS, 0);
map_named!(HOT, MAP_HOT);

/// The bounded exec walk's later stages, reached by tail calls (see fdwalk::bounded).
#[map]
static EXEC_CHAIN: ProgramArray = ProgramArray::with_max_entries(EXEC_CHAIN_LEN, 0);
map_named!(EXEC_CHAIN, MAP_EXEC_CHAIN);

#[map]
static READS: HashMap<ReadKey, ReadStat> = HashMap::with_max_entries(MAX_READS, 0);
map_named!(READS, MAP_READS);

#[map]
static EXEC_FAILS: LruHashMap<u32, ExecFailure> = LruHashMap::with_max_entries(MAX_EXEC_FAILS, 0);
map_named!(EXEC_FAILS, MAP_EXEC_FAILS);

#[map]
static EXEC_SCRATCH: PerCpuArray<ExecFailure> = PerCpuArray::with_max_entries(1, 0);
map_named!(EXEC_SCRATCH, MAP_EXEC_SCRATCH);

#[map]
static EXEC_PENDING: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_EXEC_FAILS, 0);
map_named!(EXEC_PENDING, MAP_EXEC_PENDING);

/// Offsets and options, written by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static CONFIG: Config = Config::ZEROED;
map_named!(CONFIG, GLOBAL_CONFIG);

/// Whether userspace filled [`CONFIG`]: without its offsets every kernel read would be at
/// the wrong place, so the programs that start tracking (fork) or count (exec, exit,
/// reads) do nothing until it has.
#[inline(always)]
fn configured() -> bool {
    conf!(magic) == CONFIG_MAGIC as u64
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

/// Whether the current process is in the followed cgroup (`trace --cgroup`) or below it.
/// bpf_get_current_ancestor_cgroup_id (tracing programs since 5.7) gives the id of current's
/// cgroup-v2 ancestor at a depth, 0 when current is not that deep.
#[inline(always)]
fn in_followed_cgroup() -> bool {
    let id = conf!(cgroup_id);
    let level = conf!(cgroup_level) as i32;
    // SAFETY: the helper only reads current's css_set.
    id != 0 && unsafe { bpf_get_current_ancestor_cgroup_id(level) } == id
}

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
    let parent_tgid = current_tgid();
    // The child starts in its parent's cgroup (clone3's CLONE_INTO_CGROUP aside: such a
    // child is caught at its exec below).
    if !configured() || TRACKED.get_ptr(parent_tgid).is_none() && !in_followed_cgroup() {
        return Ok(());
    }
    let child: u64 = ctx.arg(1);
    let child_tgid: u32 = read_kernel(child + conf!(task_tgid))?;
    if child_tgid == parent_tgid {
        return Ok(()); // a new thread of a traced process: covered by its tgid
    }
    let mut st = TaskState {
        fork_ns: unsafe { bpf_ktime_get_ns() },
        parent_pid: parent_tgid,
        in_window: 1,
        flags: 0,
        ..Default::default()
    };
    st.parent_comm = bpf_get_current_comm().unwrap_or_default();
    // copy_process() has given the child its own fd table by now: cache where it is.
    st.cache = fd_cache_of(child).unwrap_or_default();
    claim_hot(child_tgid, &st.cache);
    if TRACKED.insert(child_tgid, st, 0).is_err() {
        stat_add(&STATS, |s| &mut s.tracked_full);
        release_hot(child_tgid);
    }
    Ok(())
}

/// Claims `tgid`'s HOT slot so its syscalls skip the hash lookup; when another process in a
/// window holds it, marks it overflowed so both are counted through TRACKED instead.
#[inline(always)]
fn claim_hot(tgid: u32, cache: &FdCache) {
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
fn fd_cache_of(task: u64) -> Result<FdCache, i64> {
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
fn fd_is_open(cache: &mut FdCache, fd: u32) -> Result<bool, i64> {
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
fn take_counters(tgid: u32, st: &TaskState) -> Counters {
    let mut c = st.counters;
    let (calls, ebadf) = release_hot(tgid);
    c.close_calls += calls;
    c.close_ebadf += ebadf;
    c
}

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
fn output_spawn(rec: &mut SpawnRecord, paths: &mut PathsRecord) {
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
        if EVENTS.output::<[u8]>(bytes, 0).is_err() {
            stat_add(&STATS, |s| &mut s.lost_records);
            rec.npaths = 0;
            rec.header.flags |= flags::PATH_PARTIAL;
        }
    }
    let len = SpawnRecord::sent_len(rec.nfds as usize);
    // SAFETY: as above.
    let bytes =
        unsafe { core::slice::from_raw_parts((rec as *const SpawnRecord).cast::<u8>(), len) };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        stat_add(&STATS, |s| &mut s.lost_records);
    }
}

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
        if TRACKED.insert(tgid, TaskState::default(), 0).is_err() {
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
    rec.old_pid = old_pid as u32;
    rec.parent_pid = st.parent_pid;
    rec.fork_ns = st.fork_ns;
    rec.exec_ns = now;
    rec.parent_comm = st.parent_comm;
    rec.comm = bpf_get_current_comm().unwrap_or_default();
    // SAFETY: the helper only reads current's css_set.
    rec.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    rec.counters = take_counters(tgid, st);
    if st.counters.close_range_calls as usize > MAX_RANGES {
        rec.header.flags |= flags::RANGES_TRUNCATED;
    }

    kernel::read_exec_names(rec, bprm);
    // The paths record goes out with the spawn (output_spawn); its header now.
    scratch.paths.pid = tgid;
    scratch.paths.exec_ns = now;
    if !bounded {
        fdwalk::walk_fds(rec);
        output_spawn(rec, &mut scratch.paths);
    } else {
        fdwalk::bounded::start(rec);
    }

    // The process stays traced: its children are spawns too, and what the new image does
    // before exec'ing again (a spawn helper's close loop, a shell's `exec`) opens a new window.
    st.in_window = 1;
    st.execs += 1;
    st.fork_ns = now;
    st.flags = 0;
    st.counters = Default::default();
    // begin_new_exec() may have given the process a new fd table (unshare_files()).
    st.cache = fd_cache_of(kernel::current_task()).unwrap_or_default();
    claim_hot(tgid, &st.cache);
    Ok(bounded)
}

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
    if let Some(mut entry) = EVENTS.reserve::<ExitRecord>(0) {
        let rec = ExitRecord {
            header: RecordHeader {
                kind: RecordKind::Exit as u32,
                flags: st.flags,
            },
            pid: tgid,
            parent_pid: st.parent_pid,
            fork_ns: st.fork_ns,
            exit_ns: unsafe { bpf_ktime_get_ns() },
            never_execd: u32::from(st.execs == 0 && st.in_window != 0),
            exit_code: exit_code as u32,
            comm: bpf_get_current_comm().unwrap_or_default(),
            counters,
        };
        entry.write(rec);
        entry.submit(0);
    } else {
        stat_add(&STATS, |s| &mut s.lost_records);
    }
    let _ = TRACKED.remove(tgid);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Compat syscalls: a task in an ia32 syscall (int $0x80, or a 32-bit process) has TS_COMPAT
// in thread_info.status, set by the kernel's 32-bit entry for the duration of the call
// (what in_ia32_syscall() tests, x86_64 since 4.6); its number is from the i386 table and its
// arguments are in bx, cx, dx.

/// Whether the current task is in a compat syscall. A direct load through the BTF-typed
/// task pointer (bpf_get_current_task_btf, 5.11+): CONFIG is read-only, so the verifier
/// knows the offset and checks it against task_struct; no probe-read on the close() path.
/// Before 5.11 the helper does not exist: the loader sets task_btf to 0, the verifier (which
/// knows CONFIG's values) never visits the call, and a probe-read of the same field runs
/// instead.
#[inline(always)]
#[cfg(not(bpf_target_arch = "aarch64"))]
fn in_compat_syscall() -> bool {
    let off = conf!(task_ti_status);
    if off == fdaudit_common::NO_OFFSET as u64 {
        return false;
    }
    let status = if conf!(task_btf) == 0 {
        read_kernel::<u32>(kernel::current_task() + off).unwrap_or(0)
    } else {
        // SAFETY: the helper returns current's task_struct, valid for this program run;
        // the load is at a BTF offset inside it, which the verifier checks.
        unsafe {
            let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
            core::ptr::read_volatile(task.add(off as usize).cast::<u32>())
        }
    };
    status & fdaudit_common::sysno_ia32::TS_COMPAT != 0
}

/// aarch64: no compat syscalls are told apart (32-bit arm tasks are not handled).
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
fn in_compat_syscall() -> bool {
    false
}

/// The native (x86_64) number of a compat syscall the programs count, or -1.
#[inline(always)]
fn compat_native(id: i64) -> i64 {
    #[cfg(not(bpf_target_arch = "aarch64"))]
    {
        fdaudit_common::sysno_ia32::to_native(id)
    }
    #[cfg(bpf_target_arch = "aarch64")]
    {
        let _ = id;
        -1
    }
}

/// Whether `id` is a compat read, readv or pread64 (i386 numbers; never on aarch64).
#[inline(always)]
fn compat_read(id: i64) -> bool {
    #[cfg(not(bpf_target_arch = "aarch64"))]
    {
        use fdaudit_common::sysno_ia32 as c;
        matches!(id, c::READ | c::READV | c::PREAD64)
    }
    #[cfg(bpf_target_arch = "aarch64")]
    {
        let _ = id;
        false
    }
}

/// Native numbers of the calls sys_enter counts. Syscalls an architecture lacks are all
/// sysno::NONE (aarch64: poll, dup2), so their patterns repeat there.
#[allow(unreachable_patterns)]
#[inline(always)]
fn counted_native(id: i64) -> bool {
    matches!(
        id,
        sysno::CLOSE
            | sysno::CLOSE_RANGE
            | sysno::FCNTL
            | sysno::POLL
            | sysno::PPOLL
            | sysno::GETDENTS64
            | sysno::EXECVE
            | sysno::EXECVEAT
            | sysno::DUP2
            | sysno::DUP3
    )
}

// ---------------------------------------------------------------------------------------------
// raw_syscalls/sys_enter: TP_PROTO(struct pt_regs *regs, long id). Runs for every syscall on
// the machine while attached, so it leaves at the first check: the syscall id, then the
// tgid lookup. Arguments come from pt_regs (offsets from BTF, per architecture: arch.rs;
// bx/cx/dx for an x86_64 compat syscall).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> i32 {
    let _ = try_sys_enter(&ctx);
    0
}

fn try_sys_enter(ctx: &RawTracePointContext) -> Result<(), i64> {
    let raw_id: i64 = ctx.arg(1);
    if !counted_native(raw_id) && compat_native(raw_id) < 0 {
        return Ok(());
    }
    on_syscall(raw_id, ctx.arg(0), true)
}

/// Counts syscall `raw_id` (one of those counted, native or, with `may_be_compat`, an
/// x86_64 compat number) of the current process; `regs` is the syscall's `struct pt_regs *`,
/// from the raw tracepoint or the fentry backend (which hooks the native entry points only).
#[inline(always)]
fn on_syscall(raw_id: i64, regs: u64, may_be_compat: bool) -> Result<(), i64> {
    // Every count is for a process inside its fork..exec window, and every such process
    // owns its HOT slot (or marked the slot as overflowed): one array access, no hashing,
    // tells all other processes on the machine to leave.
    let tgid = current_tgid();
    let Some(slot) = HOT.get_ptr_mut(tgid & conf!(hot_mask) as u32) else {
        return Ok(());
    };
    // SAFETY: pointer from an array lookup, valid for this program run.
    let slot = unsafe { &mut *slot };
    if slot.tgid != tgid && slot.overflow == 0 {
        return Ok(()); // nobody in a window hashes here: not traced
    }
    let compat = may_be_compat && in_compat_syscall();
    if slot.tgid == tgid && raw_id == sysno::CLOSE && !compat {
        // The path a close loop takes 2^20 times.
        slot.close_calls += 1;
        let fd: u64 = arch::arg(regs, conf!(regs_arg0))?;
        if !fd_is_open(&mut slot.cache, fd as u32)? {
            slot.close_ebadf += 1;
        }
        return Ok(());
    }
    let Some(st) = TRACKED.get_ptr_mut(tgid) else {
        return Ok(());
    };
    // SAFETY: pointer from a map lookup, valid for this program run.
    let st = unsafe { &mut *st };
    if st.in_window == 0 {
        return Ok(());
    }
    // Argument registers and the call's x86_64 number.
    let (id, args) = if compat {
        st.flags |= flags::COMPAT_SYSCALLS;
        let args = ArgRegs {
            arg0: conf!(regs_bx),
            arg1: conf!(regs_cx),
            arg2: conf!(regs_arg2), // dx
            compat: true,
        };
        (compat_native(raw_id), args)
    } else if counted_native(raw_id) {
        let args = ArgRegs {
            arg0: conf!(regs_arg0),
            arg1: conf!(regs_arg1),
            arg2: conf!(regs_arg2),
            compat: false,
        };
        (raw_id, args)
    } else {
        return Ok(()); // an ia32 number made through the 64-bit entry: another call
    };
    count_in_window(st, id, &args, regs)
}

/// Where a syscall's first three arguments are in pt_regs (offsets): di, si, dx for the
/// x86_64 ABI, bx, cx, dx for a compat one.
struct ArgRegs {
    arg0: u64,
    arg1: u64,
    arg2: u64,
    compat: bool,
}

/// Counts one syscall of a process inside its fork..exec window (`id` is one of those
/// `try_sys_enter` lets through, as its x86_64 number). Adding a counter: a field in
/// `Counters`, an arm here, a field in the user side's `SyscallCounts`.
#[allow(unreachable_patterns)] // sysno::NONE repeats on aarch64, as in counted_native
#[inline(always)]
fn count_in_window(st: &mut TaskState, id: i64, a: &ArgRegs, regs: u64) -> Result<(), i64> {
    let c = &mut st.counters;
    match id {
        sysno::CLOSE => {
            c.close_calls += 1;
            let fd: u64 = arch::arg(regs, a.arg0)?;
            if !fd_is_open(&mut st.cache, fd as u32)? {
                st.counters.close_ebadf += 1;
            }
        }
        sysno::CLOSE_RANGE => {
            let i = c.close_range_calls as usize;
            if i < MAX_RANGES {
                let r = &mut c.ranges[i];
                r.first = arch::arg(regs, a.arg0).unwrap_or(0) as u32;
                r.last = arch::arg(regs, a.arg1).unwrap_or(0) as u32;
                r.flags = arch::arg(regs, a.arg2).unwrap_or(0) as u32;
            }
            c.close_range_calls += 1;
        }
        sysno::FCNTL => {
            let cmd: u64 = arch::arg(regs, a.arg1)?;
            match cmd as u32 {
                1 => c.fcntl_getfd_calls += 1, // F_GETFD
                2 => c.fcntl_setfd_calls += 1, // F_SETFD
                _ => {}
            }
        }
        sysno::POLL | sysno::PPOLL => {
            let nfds: u64 = arch::arg(regs, a.arg1)?;
            let nfds = if a.compat { nfds & 0xffff_ffff } else { nfds };
            c.poll_calls += 1;
            let nfds = if nfds > u32::MAX as u64 {
                u32::MAX
            } else {
                nfds as u32
            };
            if nfds > c.poll_nfds_max {
                c.poll_nfds_max = nfds;
            }
        }
        sysno::GETDENTS64 => {
            c.getdents64_calls += 1;
            // A listing of /proc/<pid>/fd (however it was opened: /proc/self/fd, /dev/fd,
            // /proc/thread-self/fd) that starts at offset 0 is a new fd walk. Checked here
            // rather than at open(), whose path string may sit in a page not yet faulted in.
            let fd: u64 = arch::arg(regs, a.arg0)?;
            if fdwalk::is_procfd_listing(fd as u32).unwrap_or(false) {
                c.procfd_opens += 1;
            }
        }
        sysno::EXECVE | sysno::EXECVEAT => {
            c.exec_attempts += 1;
            // The path, should this exec fail (exec_exit): execve(filename, ...),
            // execveat(dirfd, filename, ...). Only the pointer: read only on failure. Not
            // for a compat exec: the syscall tracepoints ignore compat syscalls
            // (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS), so no exit would take the pointer.
            if !a.compat {
                let off = if id == sysno::EXECVEAT { a.arg1 } else { a.arg0 };
                if let Ok(p) = arch::arg(regs, off) {
                    let _ = EXEC_PENDING.insert(current_tgid(), p, 0);
                }
            }
        }
        sysno::DUP2 | sysno::DUP3 => c.dup_calls += 1,
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret). Attached only with
// `--reads`: counts read()/readv()/pread64() calls and bytes per (process, open file): the
// fd is looked up in task->files->fdt, still as it was for the read. The first checks are
// the return value and the option, so most syscalls leave at once.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let _ = try_sys_exit(&ctx);
    0
}

fn try_sys_exit(ctx: &RawTracePointContext) -> Result<(), i64> {
    let ret: i64 = ctx.arg(1);
    if ret < 0 || conf!(reads) == 0 || !configured() {
        return Ok(());
    }
    let tgid = current_tgid();
    if TRACKED.get_ptr(tgid).is_none() {
        return Ok(());
    }
    let regs: u64 = ctx.arg(0);
    let raw_id = arch::exit_syscall_nr(regs)?;
    if !matches!(raw_id, sysno::READ | sysno::READV | sysno::PREAD64) && !compat_read(raw_id) {
        return Ok(());
    }
    let (id, fd) = if in_compat_syscall() {
        (compat_native(raw_id), arch::arg(regs, conf!(regs_bx))?)
    } else {
        (raw_id, arch::exit_arg0(regs)?)
    };
    if id != sysno::READ && id != sysno::READV && id != sysno::PREAD64 {
        return Ok(());
    }
    count_read(tgid, fd, ret)
}

/// Counts one read()/readv()/pread64() of `tgid` on `fd` that returned `ret` >= 0 bytes.
#[inline(always)]
fn count_read(tgid: u32, fd: u64, ret: i64) -> Result<(), i64> {
    let file = fdwalk::current_file_of_used_fd(fd as u32)?;
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    let key = ReadKey {
        pid: tgid,
        _pad: 0,
        file,
        ino: read_kernel(inode + conf!(inode_ino))?,
    };
    let tiny = u64::from(ret > 0 && ret <= 2);
    if let Some(v) = READS.get_ptr_mut(key) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        let v = unsafe { &mut *v };
        v.calls += 1;
        v.bytes += ret as u64;
        v.tiny_calls += tiny;
    } else {
        let (ino, magic, mode) = fdwalk::file_identity(file).unwrap_or((0, 0, 0));
        let v = ReadStat {
            calls: 1,
            bytes: ret as u64,
            tiny_calls: tiny,
            ino,
            magic,
            mode,
            fd: fd as u32,
            comm: bpf_get_current_comm().unwrap_or_default(),
        };
        if READS.insert(key, v, 0).is_err() {
            stat_add(&STATS, |s| &mut s.reads_full);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// syscalls/sys_exit_execve and syscalls/sys_exit_execveat (CONFIG_FTRACE_SYSCALLS, tracefs):
// format: 8 bytes of common fields, int __syscall_nr at 8, long ret at 16. Only execve exits
// run these programs; every other syscall pays the syscall tracepoint's bit test for
// "is this one enabled" (the slow path itself is already taken for sys_enter). A failed
// exec of a traced process leaves its errno and the path count_in_window noted at entry in
// EXEC_FAILS. Optional: without them, failed execs are reported without errno and path.
#[tracepoint(category = "syscalls", name = "sys_exit_execve")]
pub fn exec_exit(ctx: TracePointContext) -> u32 {
    let _ = try_exec_exit(&ctx);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_execveat")]
pub fn execat_exit(ctx: TracePointContext) -> u32 {
    let _ = try_exec_exit(&ctx);
    0
}

fn try_exec_exit(ctx: &TracePointContext) -> Result<(), i64> {
    if !configured() {
        return Ok(());
    }
    let tgid = current_tgid();
    // SAFETY: a copy of the value out of a map lookup.
    let Some(name) = (unsafe { EXEC_PENDING.get(tgid) }).copied() else {
        return Ok(());
    };
    let _ = EXEC_PENDING.remove(tgid);
    // SAFETY: offset 16 is `long ret` in this tracepoint's format.
    let ret: i64 = unsafe { ctx.read_at(16) }.map_err(i64::from)?;
    if ret >= 0 {
        return Ok(());
    }
    let Some(v) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return Ok(());
    };
    // SAFETY: pointer from a per-CPU array lookup, valid for this program run.
    let v = unsafe { &mut *v };
    v.errno = (-ret) as i32;
    v.path[0] = 0;
    // SAFETY: the helper bounds the read by the buffer and tolerates bad addresses; the
    // caller's memory is intact, as the exec failed.
    let _ = unsafe { bpf_probe_read_user_str_bytes(name as *const u8, &mut v.path) };
    // By reference: a copy of the value would not fit on the eBPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    EXEC_FAILS.insert(tgid, &*v, 0)?;
    Ok(())
}

// The fentry backend (`--backend fentry`): the same counts as sys_enter/sys_exit, from BPF
// trampolines on the counted syscalls' entry points only (`__x64_sys_close(const struct
// pt_regs *regs)` and so on; the loader names the function, arch prefix included), so that
// every other syscall on the machine runs without a probe. BPF_PROG_TYPE_TRACING with
// BPF_TRACE_FENTRY/FEXIT, since 5.5; argument 0 is the syscall's pt_regs as in sys_enter.
// An fexit program sees the arguments then the return value: `ctx.arg(1)` is the syscall's
// result, no bpf_get_func_ret (5.17) needed.

/// One fentry program per counted syscall: `$sysno` is what sys_enter would have matched.
macro_rules! fentry_syscall {
    ($name:ident, $sysno:path) => {
        #[fentry]
        pub fn $name(ctx: FEntryContext) -> i32 {
            let _ = on_syscall($sysno, ctx.arg(0), false);
            0
        }
    };
}

fentry_syscall!(fentry_close, sysno::CLOSE);
fentry_syscall!(fentry_close_range, sysno::CLOSE_RANGE);
fentry_syscall!(fentry_fcntl, sysno::FCNTL);
fentry_syscall!(fentry_poll, sysno::POLL);
fentry_syscall!(fentry_ppoll, sysno::PPOLL);
fentry_syscall!(fentry_getdents64, sysno::GETDENTS64);
fentry_syscall!(fentry_execve, sysno::EXECVE);
fentry_syscall!(fentry_execveat, sysno::EXECVEAT);
fentry_syscall!(fentry_dup2, sysno::DUP2);
fentry_syscall!(fentry_dup3, sysno::DUP3);

/// One fexit program per read syscall (`--reads`), the same checks as sys_exit's.
macro_rules! fexit_read {
    ($name:ident) => {
        #[fexit]
        pub fn $name(ctx: FExitContext) -> i32 {
            let _ = try_fexit_read(&ctx);
            0
        }
    };
}

fexit_read!(fexit_read);
fexit_read!(fexit_readv);
fexit_read!(fexit_pread64);

fn try_fexit_read(ctx: &FExitContext) -> Result<(), i64> {
    let ret: i64 = ctx.arg(1);
    if ret < 0 || conf!(reads) == 0 || !configured() {
        return Ok(());
    }
    let tgid = current_tgid();
    if TRACKED.get_ptr(tgid).is_none() {
        return Ok(());
    }
    count_read(tgid, arch::exit_arg0(ctx.arg(0))?, ret)
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
