//! fdaudit's eBPF programs. Built for bpfel-unknown-none by `xtask::build_ebpf`.
//!
//! Hooks, by kernel interface:
//! - raw tracepoints (BPF_PROG_TYPE_RAW_TRACEPOINT: no tracefs, no kprobes, attachable under
//!   lockdown): `sched_process_fork`, `sched_process_exec`, `sched_process_exit` (the
//!   tracking and the one record per exec and exit, always), `sys_enter`/`sys_exit` for the
//!   raw-tp backend's syscall counts and `--reads`, and `trace --origin`'s pair;
//! - syscall tracepoints (BPF_PROG_TYPE_TRACEPOINT on `syscalls/sys_enter_<name>` and
//!   `sys_exit_<name>`, named through tracefs; CONFIG_FTRACE_SYSCALLS): the tp backend's
//!   counts, one program per counted syscall (what `--backend auto` takes where they load and
//!   attach), and the two optional ones on the exec syscalls' exit that record why an exec
//!   failed;
//! - fentry/fexit (BPF trampolines, BPF_PROG_TYPE_TRACING, 5.5+): the opt-in fentry backend's
//!   counts, on the counted syscalls only, so other syscalls pay nothing.
//!
//! Per-process counters live in the TRACKED hash map, keyed by tgid; one record goes to the
//! ring buffer per exec and per exit of a traced process, never one per syscall.
//! Kernel struct offsets come from BTF at load time through the CONFIG global.
//!
//! One module per hook family: `fork` (start tracking; the fd-table cache and close() hot
//! slot), `exec` (the spawn record, its fd walk in `fdwalk`), `exit`, `syscalls` (the window's
//! counts on sys_enter, `--reads` on sys_exit; ia32 numbers in `compat`), `tp` (the tp
//! backend), `failed_exec` (why an exec failed), `fentry` (the fentry backend) and `origin`
//! (`trace --origin`). The maps and the config are here.
#![no_std]
// On the host (clippy over the workspace) this is an ordinary binary with an empty main.
#![cfg_attr(target_arch = "bpf", no_main)]

mod arch;
mod compat;
mod credns;
mod exec;
mod exit;
mod failed_exec;
mod fdwalk;
mod fentry;
mod fork;
mod io_uring;
mod kernel;
mod origin;
mod origin_modules;
mod origin_record;
mod python;
mod readpath;
mod stack_copy;
mod syscalls;
mod tp;
mod unclosed;

/// Asserts at compile time that static `$ident` is named `$name` (a common-crate constant).
macro_rules! map_named {
    ($ident:ident, $name:path) => {
        const _: () = assert!(fdaudit_common::same_name(stringify!($ident), $name));
    };
}

use aya_ebpf::{
    btf_maps::{self, ArrayOfMaps},
    helpers::{bpf_get_current_ancestor_cgroup_id, bpf_get_current_pid_tgid},
    macros::{btf_map, map},
    maps::{
        ring_buf::RingBufEntry, Array, CgroupArray, HashMap, LruHashMap, PerCpuArray, ProgramArray,
        RingBuf,
    },
};
use fdaudit_common::{
    cgroup_filter, Config, FailedExec, FdPath, HotSlot, OriginGateSlot, OriginMade, ReadKey,
    ReadStat, SpawnScratch, Stats, TaskState, CONFIG_MAGIC, EXEC_CHAIN_LEN, GLOBAL_CONFIG,
    HOT_SLOTS, MAP_EVENTS, MAP_EVENTS_GROWN, MAP_EXEC_CHAIN, MAP_EXEC_PENDING, MAP_EXEC_SCRATCH,
    MAP_FAILED_EXECS, MAP_FOLLOWED_CGROUP, MAP_HOT, MAP_ORIGIN_CHAIN, MAP_ORIGIN_GATE,
    MAP_ORIGIN_MADE, MAP_ORIGIN_MADE_SCRATCH, MAP_ORIGIN_SEEN, MAP_READS, MAP_READ_PATHS,
    MAP_SCRATCH, MAP_STATS, MAP_TRACKED, MAX_FAILED_EXECS, MAX_ORIGIN_MADE, MAX_ORIGIN_PENDING,
    MAX_READS, MAX_READ_PATHS, MAX_TRACKED, ORIGIN_GATE_SLOTS, RING_TEMPLATE_BYTES,
};
use fdaudit_common::{
    UnclosedFull, UnclosedLive, UnclosedPending, UnclosedSite, UnclosedSiteKey, MAP_UNCLOSED_FULL,
    MAP_UNCLOSED_LIVE, MAP_UNCLOSED_OWNERS, MAP_UNCLOSED_PENDING, MAP_UNCLOSED_RA_SLOTS,
    MAP_UNCLOSED_SITES, MAP_UNCLOSED_SITE_SCRATCH, MAP_UNCLOSED_STACKS, MAX_UNCLOSED_FULL,
    MAX_UNCLOSED_LIVE, MAX_UNCLOSED_PENDING, MAX_UNCLOSED_SITES, MAX_UNCLOSED_STACKS,
    UNCLOSED_OWNER_SLOTS, UNCLOSED_STACK_DEPTH,
};
// fdwalk sends the records through `crate::output_spawn`.
use exec::output_spawn;
use kernel::conf;

// `#[map]` names each map after its static; `map_named!` checks at compile time that the
// name is the `MAP_*` constant userspace looks the map up by.
// The first ring: the loader sizes it (1 MiB, or `trace --buffer-pages`).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
map_named!(EVENTS, MAP_EVENTS);

/// The grown ring, in slot 0 once userspace has put it there (when records come faster
/// than a trace of a lone command makes them: fdaudit's `engine::drain::under_pressure`):
/// from then on every record goes to it. A ring
/// cannot be resized once programs hold it, and a big one costs every trace its creation
/// (its pages are cleared: docs/performance.md); an array of maps lets the programs
/// switch to one made later, by a thread of its own. The inner map in the object is only
/// the template the kernel checks the ring against (type and flags; not its size, since
/// Linux 5.10).
#[btf_map]
static EVENTS_GROWN: ArrayOfMaps<GrownRing, 1> = ArrayOfMaps::new();
map_named!(EVENTS_GROWN, MAP_EVENTS_GROWN);

type GrownRing = btf_maps::RingBuf<u8, { RING_TEMPLATE_BYTES as usize }>;

/// Where a record goes: the grown ring when there is one (BPF_MAP_TYPE_ARRAY_OF_MAPS
/// lookup, since 4.12), else the first.
#[derive(Clone, Copy)]
pub(crate) enum Ring {
    First,
    Grown(&'static GrownRing),
}

impl Ring {
    #[inline(always)]
    pub(crate) fn now() -> Ring {
        match EVENTS_GROWN.get(0) {
            Some(r) => Ring::Grown(r),
            None => Ring::First,
        }
    }

    #[inline(always)]
    pub(crate) fn output(self, bytes: &[u8], flags: u64) -> Result<(), i32> {
        match self {
            Ring::First => EVENTS.output::<[u8]>(bytes, flags),
            Ring::Grown(r) => r.output_untyped::<[u8]>(bytes, flags),
        }
    }

    #[inline(always)]
    pub(crate) fn reserve<U: 'static>(self) -> Option<RingBufEntry<U>> {
        match self {
            Ring::First => EVENTS.reserve::<U>(0),
            Ring::Grown(r) => r.reserve_untyped::<U>(0),
        }
    }

    #[inline(always)]
    fn query(self, what: u64) -> u64 {
        match self {
            Ring::First => EVENTS.query(what),
            // SAFETY: `r` is the ring buffer map the lookup in EVENTS_GROWN returned.
            Ring::Grown(r) => unsafe {
                aya_ebpf::helpers::bpf_ringbuf_query(core::ptr::from_ref(r).cast_mut().cast(), what)
            },
        }
    }
}

#[map]
static TRACKED: HashMap<u32, TaskState> = HashMap::with_max_entries(MAX_TRACKED, 0);
map_named!(TRACKED, MAP_TRACKED);

/// A new TRACKED entry's value (`TaskState::default()`), inserted by reference and then
/// filled in place: a TaskState built on the stack would overflow it.
// SAFETY: TaskState is integers and arrays of them; all zeroes is its default.
static ZERO_TASK: TaskState = unsafe { core::mem::zeroed() };

#[map]
static SCRATCH: PerCpuArray<SpawnScratch> = PerCpuArray::with_max_entries(1, 0);
map_named!(SCRATCH, MAP_SCRATCH);

/// `trace --cgroup`/`watch --cgroup` before 5.14 ([`cgroup_filter::UNDER`]): the followed
/// cgroup's directory in slot 0, set by the loader.
#[map]
static FOLLOWED_CGROUP: CgroupArray = CgroupArray::with_max_entries(1, 0);
map_named!(FOLLOWED_CGROUP, MAP_FOLLOWED_CGROUP);

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

/// `trace --origin`: the CPython processes userspace found, where their frames are
/// (python.rs).
#[map]
static PY_PROCS: HashMap<u32, fdaudit_common::PyProc> =
    HashMap::with_max_entries(fdaudit_common::MAX_PY_PROCS, 0);
map_named!(PY_PROCS, fdaudit_common::MAP_PY_PROCS);

/// `trace --origin`: the Python walk, tail-called from origin_exit (python.rs).
#[map]
static PY_CHAIN: ProgramArray = ProgramArray::with_max_entries(fdaudit_common::PY_CHAIN_LEN, 0);
map_named!(PY_CHAIN, fdaudit_common::MAP_PY_CHAIN);

#[map]
static READS: HashMap<ReadKey, ReadStat> = HashMap::with_max_entries(MAX_READS, 0);
map_named!(READS, MAP_READS);

#[map]
static READ_PATHS: HashMap<ReadKey, FdPath> = HashMap::with_max_entries(MAX_READ_PATHS, 0);
map_named!(READ_PATHS, MAP_READ_PATHS);

#[map]
static FAILED_EXECS: LruHashMap<u32, FailedExec> =
    LruHashMap::with_max_entries(MAX_FAILED_EXECS, 0);
map_named!(FAILED_EXECS, MAP_FAILED_EXECS);

#[map]
static EXEC_SCRATCH: PerCpuArray<FailedExec> = PerCpuArray::with_max_entries(1, 0);
map_named!(EXEC_SCRATCH, MAP_EXEC_SCRATCH);

#[map]
static EXEC_PENDING: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_FAILED_EXECS, 0);
map_named!(EXEC_PENDING, MAP_EXEC_PENDING);

/// `trace --origin`'s and `unclosed`'s calls between sys_enter and sys_exit: the thread and
/// its call, per `gate_slot` of the thread's saved registers' address (origin.rs).
#[map]
static ORIGIN_GATE: Array<OriginGateSlot> = Array::with_max_entries(ORIGIN_GATE_SLOTS, 0);
map_named!(ORIGIN_GATE, MAP_ORIGIN_GATE);

/// The processes that sent an origin record (origin.rs: the first one wakes the reader), with
/// the count of their origin records lost to a full ring.
#[map]
static ORIGIN_SEEN: LruHashMap<u32, u32> = LruHashMap::with_max_entries(MAX_ORIGIN_PENDING, 0);
map_named!(ORIGIN_SEEN, MAP_ORIGIN_SEEN);

/// The call that made each fd with close-on-exec, per (tgid << 32 | fd) (origin.rs).
#[map]
static ORIGIN_MADE: LruHashMap<u64, OriginMade> = LruHashMap::with_max_entries(MAX_ORIGIN_MADE, 0);
map_named!(ORIGIN_MADE, MAP_ORIGIN_MADE);

/// `origin_exit`'s tail calls: `origin_modules` (slot 0), `origin_stack_copy` (slot 1), filled
/// by the loader.
#[map]
static ORIGIN_CHAIN: ProgramArray =
    ProgramArray::with_max_entries(fdaudit_common::ORIGIN_CHAIN_LEN, 0);
map_named!(ORIGIN_CHAIN, MAP_ORIGIN_CHAIN);

/// The call sites whose user stack was copied (stack_copy.rs), least recently used out.
#[map]
static STACK_SITES: LruHashMap<fdaudit_common::StackSiteKey, u8> =
    LruHashMap::with_max_entries(fdaudit_common::MAX_STACK_SITES, 0);
map_named!(STACK_SITES, fdaudit_common::MAP_STACK_SITES);

#[map]
static ORIGIN_MADE_SCRATCH: PerCpuArray<OriginMade> = PerCpuArray::with_max_entries(1, 0);
map_named!(ORIGIN_MADE_SCRATCH, MAP_ORIGIN_MADE_SCRATCH);

/// `fdaudit unclosed`'s live set, per (tgid << 32 | fd) (unclosed.rs). Preallocated (only
/// `unclosed` loads it whole): an insert and a delete per fd then take no allocation.
#[map]
static UNCLOSED_LIVE: HashMap<u64, UnclosedLive> = HashMap::with_max_entries(MAX_UNCLOSED_LIVE, 0);
map_named!(UNCLOSED_LIVE, MAP_UNCLOSED_LIVE);

/// The creating call sites' user stacks, one per distinct stack (bpf_get_stackid). Its
/// value size bounds the kernel's walk (UNCLOSED_STACK_DEPTH frames, not 127).
#[btf_map]
static UNCLOSED_STACKS: btf_maps::StackTrace<
    { MAX_UNCLOSED_STACKS as usize },
    0,
    { UNCLOSED_STACK_DEPTH },
> = btf_maps::StackTrace::new();
map_named!(UNCLOSED_STACKS, MAP_UNCLOSED_STACKS);

/// Per call site (stack id, caller's return address), the words at the user sp when that
/// site was first seen. Preallocated (only `unclosed` loads it whole): before 6.1 the
/// kernel WARNs when a tracing program uses a hash map that is not.
#[map]
static UNCLOSED_SITES: HashMap<UnclosedSiteKey, UnclosedSite> =
    HashMap::with_max_entries(MAX_UNCLOSED_SITES, 0);
map_named!(UNCLOSED_SITES, MAP_UNCLOSED_SITES);

/// Per stack id, where its caller's return address is (`ra_slot`), written by userspace.
#[map]
static UNCLOSED_RA_SLOTS: Array<u32> = Array::with_max_entries(MAX_UNCLOSED_STACKS, 0);
map_named!(UNCLOSED_RA_SLOTS, MAP_UNCLOSED_RA_SLOTS);

/// Per slot of tgids, the process that last put an fd into the live set (unclosed.rs).
#[map]
static UNCLOSED_OWNERS: Array<u32> = Array::with_max_entries(UNCLOSED_OWNER_SLOTS, 0);
map_named!(UNCLOSED_OWNERS, MAP_UNCLOSED_OWNERS);

/// The words of the calls made before their stack id's slot was known.
#[map]
static UNCLOSED_PENDING: LruHashMap<u64, UnclosedPending> =
    LruHashMap::with_max_entries(MAX_UNCLOSED_PENDING, 0);
map_named!(UNCLOSED_PENDING, MAP_UNCLOSED_PENDING);

#[map]
static UNCLOSED_SITE_SCRATCH: PerCpuArray<UnclosedPending> = PerCpuArray::with_max_entries(1, 0);
map_named!(UNCLOSED_SITE_SCRATCH, MAP_UNCLOSED_SITE_SCRATCH);

/// Per process, its fd-making calls that failed with EMFILE/ENFILE.
#[map]
static UNCLOSED_FULL: LruHashMap<u32, UnclosedFull> =
    LruHashMap::with_max_entries(MAX_UNCLOSED_FULL, 0);
map_named!(UNCLOSED_FULL, MAP_UNCLOSED_FULL);

/// Offsets and options, written by the loader (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static CONFIG: Config = Config::ZEROED;
map_named!(CONFIG, GLOBAL_CONFIG);

/// Whether userspace filled [`CONFIG`]: without its offsets every kernel read would be at
/// the wrong place, so the programs that start tracking (fork) or count (exec, exit,
/// reads) do nothing until it has.
/// When a record wakes fdaudit's reader (the `flags` of bpf_ringbuf_output/submit, 5.8+).
/// A wake-up is an irq_work that wakes the reader's poll: most of an exit record's cost in
/// the program's run, where it is dear (a paravirtualised guest: docs/performance.md). By
/// default the kernel wakes the reader only when it has read everything before the new
/// record, so one record sent without a wake-up also keeps the next one from waking it:
/// hence the explicit choices.
mod wake {
    use aya_ebpf::bindings::{
        BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
    };

    /// A record that another follows at once (a spawn's paths record): no wake-up.
    pub const FOLLOWED: u64 = BPF_RB_NO_WAKEUP as u64;
    /// A spawn record: the reader must come now, while the process lives (its cut paths
    /// and namespace pid are looked up in /proc), and it takes the quiet records before
    /// it with it.
    pub const NOW: u64 = BPF_RB_FORCE_WAKEUP as u64;

    /// A spawn record: [`NOW`], or for a reader that needs no record at once (a node
    /// agent's, `Config::quiet_spawns`) as quiet as an exit record.
    #[inline(always)]
    pub fn spawn(ring: crate::Ring) -> u64 {
        if crate::conf!(quiet_spawns) != 0 {
            quiet_unless_filling(ring)
        } else {
            NOW
        }
    }

    /// An exit record: quiet (the next spawn record or the reader's 200 ms tick brings
    /// it), unless an eighth of the ring is waiting to be read.
    #[inline(always)]
    pub fn quiet_unless_filling(ring: crate::Ring) -> u64 {
        let waiting = ring.query(BPF_RB_AVAIL_DATA as u64);
        let size = ring.query(BPF_RB_RING_SIZE as u64);
        if waiting > size / 8 {
            BPF_RB_FORCE_WAKEUP as u64
        } else {
            BPF_RB_NO_WAKEUP as u64
        }
    }
}

#[inline(always)]
fn configured() -> bool {
    conf!(magic) == CONFIG_MAGIC as u64
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

/// Whether the current process is in the followed cgroup (`trace --cgroup`) or below it,
/// the way the loader chose for this kernel (`cgroup_filter`; CONFIG is read-only, so the
/// verifier walks only the chosen way and a kernel without the other helper accepts it):
/// - the root cgroup (whole-host `watch`): every process, no helper;
/// - bpf_get_current_ancestor_cgroup_id (raw tracepoints since 5.14) gives the id of
///   current's cgroup-v2 ancestor at a depth, 0 when current is not that deep;
/// - before that, bpf_current_task_under_cgroup (tracing programs since 4.9) says whether
///   current's cgroup-v2 cgroup is the one in FOLLOWED_CGROUP or below it.
#[inline(always)]
fn in_followed_cgroup() -> bool {
    let filter = conf!(cgroup_filter);
    if filter == cgroup_filter::ALL {
        true
    } else if filter == cgroup_filter::ANCESTOR {
        let id = conf!(cgroup_id);
        let level = conf!(cgroup_level) as i32;
        // SAFETY: the helper only reads current's css_set.
        id != 0 && unsafe { bpf_get_current_ancestor_cgroup_id(level) } == id
    } else if filter == cgroup_filter::UNDER {
        // An empty slot is an error, not a match.
        FOLLOWED_CGROUP.current_task_under_cgroup(0) == Ok(true)
    } else {
        false
    }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
