//! Loading the embedded eBPF object, checking what the machine offers, attaching programs.

use std::{
    path::Path,
    sync::OnceLock,
    time::{Duration, Instant},
};

use aya::{
    maps::{ArrayOfMaps, Map, MapData, MapError, ProgramArray, RingBuf},
    programs::{Program, ProgramError, ProgramType, RawTracePoint},
    sys::{is_helper_supported, BpfHelper},
    Ebpf, EbpfError, EbpfLoader,
};
use aya_obj::generated::bpf_map_type;
use fdaudit_common::{
    Config, GLOBAL_CONFIG, MAP_EVENTS, MAP_EVENTS_GROWN, MAP_EXEC_CHAIN, MAP_ORIGIN_CHAIN,
    MAP_ORIGIN_GATE, MAP_ORIGIN_MADE, MAP_ORIGIN_SEEN, MAP_READS, MAP_READ_PATHS, MAP_TRACKED,
    MAP_UNCLOSED_FULL, MAP_UNCLOSED_LIVE, MAP_UNCLOSED_SITES, MAP_UNCLOSED_STACKS,
};
use thiserror::Error;

use crate::engine::btf::{self, BtfError};

pub mod caps;
mod failed_exec;
mod fentry;
mod kernel;
pub mod misses;
mod programs;
pub mod python;
mod raw;
mod report;
mod subprogs;
mod tp;

pub use caps::{effective_caps, has_cap, missing_trace_caps};
pub use failed_exec::{
    attach_failed_exec, attach_failed_exec_loaded, attach_loaded_failed_exec, failed_exec_program,
    FAILED_EXEC_PROGRAMS,
};
pub use fentry::{attach_fentry, detach_after_exit, detach_fentry, probe_fentry};
pub use kernel::{task_btf, KernelBtf};
pub use misses::MissedRuns;
pub use programs::{
    mode_programs, FentrySpec, ProgramSpec, TpSpec, FENTRY_PROGRAMS, PROGRAMS, SYSCALL_PREFIX,
    TP_PROGRAMS, TP_READ_PROGRAMS, UNCLOSED_IO_URING,
};
pub use report::{one_line, verifier_summary};
pub use tp::{
    attach_loaded_tp, attach_tp, attach_tp_reads, detach_tp, ia32_syscalls, probe_tp,
    probe_tp_reads, IA32_UNSEEN,
};

/// Loads one raw tracepoint or tracepoint program into the kernel (the verifier and the
/// JIT) without attaching it.
pub fn load_program(prog: &mut Program, name: &'static str) -> Result<(), LoadError> {
    let loaded = match prog {
        Program::RawTracePoint(p) => p.load(),
        Program::TracePoint(p) => p.load(),
        _ => return Err(LoadError::MissingProgram(name)),
    };
    loaded.map_err(|source| LoadError::Verifier {
        name,
        summary: verifier_summary(&source),
        source,
    })
}

/// Attaches a program of [`PROGRAMS`] loaded beforehand (see [`load_program`]).
pub fn attach_loaded(ebpf: &mut Ebpf, spec: &ProgramSpec) -> Result<(), LoadError> {
    attach(ebpf, spec.name, spec)
}

/// [`attach_loaded`] for a program borrowed on its own (from [`Ebpf::programs_mut`]).
pub fn attach_program(prog: &mut Program, spec: &ProgramSpec) -> Result<(), LoadError> {
    let p: &mut RawTracePoint = prog.try_into().map_err(|source| LoadError::Verifier {
        name: spec.name,
        summary: "not a raw tracepoint program".into(),
        source,
    })?;
    p.attach(spec.tracepoint)
        .map_err(|source| LoadError::Attach {
            name: spec.name,
            tracepoint: spec.tracepoint,
            source,
        })?;
    Ok(())
}

/// How the syscall counts are collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Raw `sys_enter`/`sys_exit` tracepoints: every kernel since 4.17, but every syscall of
    /// every process on the machine runs a program while attached.
    RawTp,
    /// The counted syscalls' own tracepoints (`syscalls/sys_enter_close`, ...; tracefs and
    /// CONFIG_FTRACE_SYSCALLS): every syscall takes the slow path, but only the counted ones
    /// run a program. Native syscalls only (no x86_64 `int $0x80` ones).
    Tp,
    /// fentry/fexit (BPF trampolines) on the counted syscalls only: other syscalls pay
    /// nothing. Needs a kernel that accepts BPF_PROG_TYPE_TRACING programs (5.5+, and not
    /// forbidden by lockdown or the distribution). Native syscalls only.
    Fentry,
}

impl Backend {
    /// Its name (`raw-tp`), as `--backend` spells it: clap's, from the variant
    /// ([`crate::engine::names`]).
    pub fn as_str(self) -> &'static str {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        crate::engine::names::value_names::<Backend>(&NAMES)[self as usize]
    }

    /// Sees only native syscalls: an x86_64 ia32 (`int $0x80`) syscall is not counted
    /// ([`ia32_syscalls`] says whether the kernel runs any).
    pub fn native_only(self) -> bool {
        self != Backend::RawTp
    }
}

/// Why `auto` passes over fentry, as `-v` and doctor say it.
pub const FENTRY_OPT_IN: &str = "fentry is opt-in, --backend fentry";
/// Why `auto` takes tp where it loads and attaches, else raw-tp: tp cost bystanders and
/// traced processes the least on every workload measured (docs/performance.md). Where the
/// kernel runs ia32 syscalls, which tp does not see, the run says so in a note
/// (`Session::unseen`, [`IA32_UNSEEN`]): auto never counts fewer silently.
pub const AUTO_TP: &str = "tp costs least here";

/// `--backend`: a backend, or `auto`: tp where its tracepoints work, else raw-tp (fentry is
/// opt-in until it is shown faster and safe on real hardware).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    #[default]
    Auto,
    Fentry,
    Tp,
    RawTp,
}

impl BackendChoice {
    /// `FDAUDIT_BACKEND` (auto, fentry, tp or raw-tp) when set, so a test suite can be run
    /// once per backend; else auto.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("FDAUDIT_BACKEND") {
            Err(_) => Ok(BackendChoice::Auto),
            Ok(v) => <Self as clap::ValueEnum>::from_str(&v, true)
                .map_err(|_| format!("FDAUDIT_BACKEND={v}: use auto, fentry, tp or raw-tp")),
        }
    }
}

/// Why the programs could not be loaded or attached.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("this fdaudit was built without its eBPF object (FDAUDIT_SKIP_EBPF=1); rebuild it without that variable")]
    NoObject,
    #[error("missing {missing}: tracing needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); run it with sudo")]
    NoPrivileges { missing: String },
    #[error("kernel BTF is not available at {}: fdaudit needs a kernel built with CONFIG_DEBUG_INFO_BTF=y", btf::VMLINUX_BTF)]
    NoBtf(#[source] BtfError),
    #[error("aya could not parse the kernel BTF")]
    AyaBtf(#[source] aya::BtfError),
    #[error("the kernel BTF lacks a structure fdaudit reads")]
    Offsets(#[source] BtfError),
    #[error("failed to create the BPF maps")]
    Maps(#[source] EbpfError),
    #[error("the object has no map {0}")]
    MissingMap(&'static str),
    #[error("failed to create a ring buffer")]
    Ring(#[source] MapError),
    #[error("failed to put the grown ring buffer in its slot (an array of maps holding a ring buffer needs Linux 5.10)")]
    RingSlot(#[source] MapError),
    #[error("the object has no program {0}")]
    MissingProgram(&'static str),
    #[error("the verifier rejected {name}: {summary}")]
    Verifier {
        name: &'static str,
        summary: String,
        #[source]
        source: ProgramError,
    },
    #[error("the kernel refused the fentry program {name} on {function}")]
    Fentry {
        name: &'static str,
        function: String,
        #[source]
        source: ProgramError,
    },
    #[error("failed to fill the exec walk's tail-call map")]
    Chain(#[source] EbpfError),
    #[error("failed to attach {name} to raw tracepoint {tracepoint}")]
    Attach {
        name: &'static str,
        tracepoint: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("failed to attach {name} to tracepoint syscalls/{tracepoint}")]
    AttachTracepoint {
        name: &'static str,
        tracepoint: &'static str,
        #[source]
        source: ProgramError,
    },
}

/// Creates the maps of the embedded object with `config` written into its CONFIG global.
/// Programs are not loaded yet: see [`load_and_attach`].
pub fn open(config: &Config) -> Result<Ebpf, LoadError> {
    open_with_ring(config, None)
}

/// As [`open`], with the ring buffer ([`MAP_EVENTS`]) `ring_bytes` long (a power-of-two
/// multiple of the page size) rather than the object's default.
pub fn open_with_ring(config: &Config, ring_bytes: Option<u32>) -> Result<Ebpf, LoadError> {
    let loader = spawn_loader()
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    open_with(loader, config, ring_bytes)
}

/// A ring buffer `bytes` long (a power-of-two multiple of the page size) for the grown
/// slot ([`RingSlot::fill`]), and its reader, mapped.
pub fn create_ring(bytes: u32) -> Result<(MapData, RingBuf<MapData>), LoadError> {
    let def =
        aya_obj::Map::new_from_params(bpf_map_type::BPF_MAP_TYPE_RINGBUF as u32, 0, 0, bytes, 0);
    let map = MapData::create(def, MAP_EVENTS_GROWN, None).map_err(LoadError::Ring)?;
    // A second handle on the same map, for the slot: the reader keeps the first.
    let slot =
        MapData::from_fd(dup(map.fd()).map_err(LoadError::Ring)?).map_err(LoadError::Ring)?;
    let reader = RingBuf::try_from(Map::RingBuf(map)).map_err(LoadError::Ring)?;
    Ok((slot, reader))
}

fn dup(fd: &impl std::os::fd::AsFd) -> Result<std::os::fd::OwnedFd, MapError> {
    fd.as_fd().try_clone_to_owned().map_err(MapError::IoError)
}

/// [`MAP_EVENTS_GROWN`], the one-slot array of maps where the programs look for a grown
/// ring buffer, through a handle of its own, so that another thread can fill it.
pub struct RingSlot(ArrayOfMaps<MapData, MapData>);

impl RingSlot {
    pub fn of(ebpf: &Ebpf) -> Result<RingSlot, LoadError> {
        let Some(Map::ArrayOfMaps(outer)) = ebpf.map(MAP_EVENTS_GROWN) else {
            return Err(LoadError::MissingMap(MAP_EVENTS_GROWN));
        };
        let outer = MapData::from_fd(dup(outer.fd()).map_err(LoadError::RingSlot)?)
            .map_err(LoadError::RingSlot)?;
        let outer = ArrayOfMaps::try_from(Map::ArrayOfMaps(outer)).map_err(LoadError::RingSlot)?;
        Ok(RingSlot(outer))
    }

    /// Puts `ring` ([`create_ring`]) in the slot: from then on the programs' records go to
    /// it. The kernel waits for an RCU grace period in every update of an array of maps
    /// (`maybe_wait_bpf_programs`: milliseconds), so this is never on a path a
    /// user waits on.
    pub fn fill(mut self, ring: &MapData) -> Result<(), LoadError> {
        self.0.set(0, ring, 0).map_err(LoadError::RingSlot)
    }
}

/// Makes an `EbpfLoader` on a thread of its own, without aya's parse of vmlinux BTF where
/// that can be avoided; join it when the loader is needed.
///
/// aya 0.14's `EbpfLoader::new()` always reads and parses /sys/kernel/btf/vmlinux (tens of
/// milliseconds and megabytes of fresh memory: docs/performance.md) for CO-RE relocations, which
/// fdaudit's programs do not have ([`open_with`] sets `btf(None)`); the loader's fields
/// are private, so there is no constructor without it. The thread therefore first takes a
/// filesystem root of its own (unshare(CLONE_FS) gives it a private root and cwd, then it
/// chroots into /sys/kernel/btf, under which no `sys/kernel/btf/vmlinux` exists): aya's
/// read fails at once and the loader starts without BTF, as `btf(None)` leaves it
/// anyway. The root is this thread's alone and goes with it; the thread does nothing else.
/// Without CAP_SYS_CHROOT (CAP_BPF and CAP_PERFMON only) the chroot fails and aya parses as
/// before, on this thread, while the caller does its own work.
pub fn spawn_loader() -> std::thread::JoinHandle<EbpfLoader<'static>> {
    std::thread::spawn(|| {
        // SAFETY: unshare(CLONE_FS) affects only this thread's root, cwd and umask (it is
        // allowed in a multithreaded process); chroot then changes this thread's root.
        unsafe {
            if libc::unshare(libc::CLONE_FS) == 0 {
                libc::chroot(c"/sys/kernel/btf".as_ptr());
            }
        }
        let mut loader = EbpfLoader::new();
        loader.btf(None); // frees a parse made anyway, here rather than on the caller
        loader
    })
}

/// [`open_with_ring`] with a loader made beforehand ([`spawn_loader`]), so that a caller
/// can do its own work meanwhile.
pub fn open_with<'a>(
    mut loader: EbpfLoader<'a>,
    config: &'a Config,
    ring_bytes: Option<u32>,
) -> Result<Ebpf, LoadError> {
    if crate::EBPF_OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    if let Some(missing) = missing_trace_caps(effective_caps()) {
        return Err(LoadError::NoPrivileges { missing });
    }
    if !Path::new(btf::VMLINUX_BTF).exists() {
        return Err(LoadError::NoBtf(BtfError::Malformed("file missing")));
    }
    // Only the --reads programs write the read table (16384 preallocated entries, which
    // the kernel clears at creation): without --reads it gets one.
    if config.reads == 0 {
        loader.map_max_entries(MAP_READS, 1);
        loader.map_max_entries(MAP_READ_PATHS, 1);
    }
    // Likewise the --origin programs' maps (two preallocated LRU tables of 16384 and an
    // array, all cleared at creation): without --origin no program
    // touches them.
    if config.origin == 0 {
        for map in [
            MAP_ORIGIN_SEEN,
            MAP_ORIGIN_MADE,
            fdaudit_common::MAP_PY_PROCS,
            fdaudit_common::MAP_STACK_SITES,
        ] {
            loader.map_max_entries(map, 1);
        }
    }
    // `fdaudit unclosed` shares the origin programs' gate (the calls in flight).
    if config.origin == 0 && config.unclosed == 0 {
        loader.map_max_entries(MAP_ORIGIN_GATE, 1);
    }
    // Its own maps: the stack map is preallocated (a kernel bucket of 127 frames per
    // entry), so only `unclosed` gets it whole.
    if config.unclosed == 0 {
        for map in [
            MAP_UNCLOSED_LIVE,
            MAP_UNCLOSED_STACKS,
            MAP_UNCLOSED_SITES,
            MAP_UNCLOSED_FULL,
            fdaudit_common::MAP_UNCLOSED_RA_SLOTS,
            fdaudit_common::MAP_UNCLOSED_PENDING,
            fdaudit_common::MAP_UNCLOSED_OWNERS,
        ] {
            loader.map_max_entries(map, 1);
        }
    }
    // No CO-RE relocations in Rust programs: aya needs no target BTF to load the object.
    loader
        .btf(None)
        .override_global(GLOBAL_CONFIG, config, true);
    if let Some(bytes) = ring_bytes {
        loader.map_max_entries(MAP_EVENTS, bytes);
    }
    loader
        .load(&object_for_this_kernel())
        .map_err(|e| match is_eperm(&e) {
            true => LoadError::NoPrivileges {
                missing: "permission to create BPF maps (EPERM)".into(),
            },
            false => LoadError::Maps(e),
        })
}

/// `BPF_F_NO_PREALLOC`: a hash map's entries are allocated as they are inserted.
const BPF_F_NO_PREALLOC: u32 = 1;

/// The embedded object as this kernel should load it. From Linux 6.1 (eBPF programs
/// allocate map entries with bpf_mem_alloc, safe in any context), the traced-process table
/// ([`MAP_TRACKED`]) is created without preallocating its 32768 entries (~8 MB), which
/// takes most of `BPF_MAP_CREATE`'s time off the start-up's critical path. Before 6.1 the kernel WARNs (a kernel stack trace in dmesg) when a
/// tracing program uses a hash map that is not preallocated, so there the object is
/// loaded as built. aya 0.14 has no call to change a map's flags (libbpf's
/// `bpf_map__set_map_flags`), so the flags word of the map's definition is patched in a
/// copy of the object.
fn object_for_this_kernel() -> std::borrow::Cow<'static, [u8]> {
    let new_enough = aya::util::KernelVersion::current()
        .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 1, 0));
    match new_enough
        .then(|| with_map_flags(crate::EBPF_OBJECT, MAP_TRACKED, BPF_F_NO_PREALLOC))
        .flatten()
    {
        Some(patched) => std::borrow::Cow::Owned(patched),
        None => std::borrow::Cow::Borrowed(crate::EBPF_OBJECT),
    }
}

/// A copy of the ELF object `obj` whose hash map `name` (a legacy `bpf_map_def` in the
/// `maps` section, as aya-ebpf's `#[map]` writes it: type, key size, value size, max
/// entries, flags, as little-endian u32s) has `flags`; None when the object has no such
/// map.
fn with_map_flags(obj: &[u8], name: &str, flags: u32) -> Option<Vec<u8>> {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
    let file = object::File::parse(obj).ok()?;
    let sym = file.symbols().find(|s| s.name() == Ok(name))?;
    let section = file.section_by_index(sym.section_index()?).ok()?;
    if section.name() != Ok("maps") {
        return None;
    }
    let def = usize::try_from(section.file_range()?.0 + sym.address()).ok()?;
    let word = |i: usize| -> Option<u32> {
        let b = obj.get(def + 4 * i..def + 4 * i + 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    };
    if word(0)? != bpf_map_type::BPF_MAP_TYPE_HASH as u32 {
        return None;
    }
    let mut out = obj.to_vec();
    out.get_mut(def + 16..def + 20)?
        .copy_from_slice(&(word(4)? | flags).to_le_bytes());
    Some(out)
}

fn is_eperm(e: &EbpfError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.raw_os_error() == Some(libc::EPERM);
        }
        cur = err.source();
    }
    false
}

/// How the exec program walks the fd table on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecWalk {
    /// Under bpf_loop (5.17+): any table size.
    Loop,
    /// Bounded loops in tail-called chunks (5.10, 5.15): the first
    /// [`fdaudit_common::BOUNDED_MAX_FDS`] fds, records flagged `bounded_walk`.
    Bounded,
}

/// Environment variable that forces an [`ExecWalk`] (`loop` or `bounded`), to test the
/// bounded walk on a kernel that has bpf_loop.
pub const EXEC_WALK_ENV: &str = "FDAUDIT_EXEC_WALK";

/// Whether the kernel offers bpf_loop to raw tracepoint programs, probed once by loading a
/// two-instruction program that calls it (never by kernel version: backports exist).
pub fn has_bpf_loop() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        is_helper_supported(ProgramType::RawTracePoint, BpfHelper::BPF_FUNC_loop).unwrap_or(false)
    })
}

/// The fd walk the exec program uses here: bpf_loop when the kernel has it.
pub fn exec_walk() -> ExecWalk {
    match std::env::var(EXEC_WALK_ENV).as_deref() {
        Ok("bounded") => ExecWalk::Bounded,
        Ok("loop") => ExecWalk::Loop,
        _ if has_bpf_loop() => ExecWalk::Loop,
        _ => ExecWalk::Bounded,
    }
}

/// One program as the verifier took it (its load figures).
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub name: &'static str,
    /// Wall time of the BPF_PROG_LOAD call (verification and JIT).
    pub load_time: Duration,
    /// Instructions the verifier processed (`bpf_prog_info.verified_insns`, 5.16+).
    pub verified_insns: Option<u32>,
}

/// The bounded exec walk's tail-call stages, by [`MAP_EXEC_CHAIN`] slot.
const EXEC_CHAIN_STAGES: [&str; 2] = ["exec_walk_fds", "exec_walk_paths"];
/// The bounded exec walk's entry: attached to `sched_process_exec` in the loop walk's place.
const EXEC_BOUNDED_ENTRY: &str = "sched_process_exec_bounded";

/// Loads one program into the kernel (verifier) and attaches it.
pub fn load_and_attach(ebpf: &mut Ebpf, spec: &ProgramSpec) -> Result<(), LoadError> {
    load_and_attach_measured(ebpf, spec).map(drop)
}

/// [`load_and_attach`], returning each program the verifier took, with its figures: one,
/// or with its tail-call stages (origin_exit; the exec program's bounded walk's entry).
pub fn load_and_attach_measured(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
) -> Result<Vec<Verified>, LoadError> {
    // A program with tail calls: its stages first (origin_exit's: a process's first origin
    // record is then never without them), then it, or for the exec program's bounded
    // walk its entry, in its place.
    let (map, stages, entry): (_, &[&'static str], _) = match spec.name {
        ORIGIN_EXIT => (MAP_ORIGIN_CHAIN, &ORIGIN_CHAIN_STAGES, spec.name),
        "sched_process_exec" if exec_walk() != ExecWalk::Loop => {
            (MAP_EXEC_CHAIN, &EXEC_CHAIN_STAGES, EXEC_BOUNDED_ENTRY)
        }
        _ => (MAP_EXEC_CHAIN, &[], spec.name),
    };
    let mut all = Vec::new();
    for (slot, &stage) in (0u32..).zip(stages) {
        all.push(chain_stage(ebpf, spec, map, slot, stage)?);
    }
    all.push(load_one(ebpf, entry, spec.name)?);
    attach(ebpf, entry, spec)?;
    Ok(all)
}

/// `trace --origin`'s sys_exit program, and its tail calls by [`MAP_ORIGIN_CHAIN`] slot: a
/// process's modules with its first origin record, a call site's stack with its first.
const ORIGIN_EXIT: &str = "origin_exit";
const ORIGIN_CHAIN_STAGES: [&str; 2] = ["origin_modules", "origin_stack_copy"];

/// Loads tail-call stage `stage` of `spec`'s program and puts it in slot `slot` of the
/// program array `map`.
fn chain_stage(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    map: &'static str,
    slot: u32,
    stage: &'static str,
) -> Result<Verified, LoadError> {
    let loaded = load_one(ebpf, stage, spec.name)?;
    let fd = raw_tracepoint(ebpf, stage, spec.name)?
        .fd()
        .and_then(|fd| fd.try_clone().map_err(Into::into))
        .map_err(|source| LoadError::Verifier {
            name: spec.name,
            summary: format!("no fd for {stage}"),
            source,
        })?;
    let m = ebpf.map_mut(map).ok_or(LoadError::MissingMap(map))?;
    let mut chain = ProgramArray::try_from(m).map_err(|e| LoadError::Chain(e.into()))?;
    chain
        .set(slot, &fd, 0)
        .map_err(|e| LoadError::Chain(e.into()))?;
    Ok(loaded)
}

fn raw_tracepoint<'a>(
    ebpf: &'a mut Ebpf,
    prog: &str,
    name: &'static str,
) -> Result<&'a mut RawTracePoint, LoadError> {
    program_as(ebpf, prog, name, "a raw tracepoint")
}

/// The object's program `prog` (reported as `name`) as the program type `T`.
pub(crate) fn program_as<'a, T>(
    ebpf: &'a mut Ebpf,
    prog: &str,
    name: &'static str,
    kind: &str,
) -> Result<&'a mut T, LoadError>
where
    &'a mut T: TryFrom<&'a mut Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(prog)
        .ok_or(LoadError::MissingProgram(name))?
        .try_into()
        .map_err(|source| LoadError::Verifier {
            name,
            summary: format!("not {kind} program"),
            source,
        })
}

/// Loads `prog` (reported as `name`), timing the verifier.
fn load_one(
    ebpf: &mut Ebpf,
    prog: &'static str,
    name: &'static str,
) -> Result<Verified, LoadError> {
    let p = raw_tracepoint(ebpf, prog, name)?;
    let t0 = Instant::now();
    p.load().map_err(|source| LoadError::Verifier {
        name,
        summary: verifier_summary(&source),
        source,
    })?;
    let load_time = t0.elapsed();
    let verified_insns = p.info().ok().and_then(|i| i.verified_instruction_count());
    Ok(Verified {
        name: prog,
        load_time,
        verified_insns,
    })
}

fn attach(ebpf: &mut Ebpf, prog: &str, spec: &ProgramSpec) -> Result<(), LoadError> {
    let p = ebpf
        .program_mut(prog)
        .ok_or(LoadError::MissingProgram(spec.name))?;
    attach_program(p, spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_needed_for_tracing() {
        assert_eq!(
            missing_trace_caps(0).as_deref(),
            Some("CAP_BPF and CAP_PERFMON")
        );
        assert_eq!(missing_trace_caps(1 << caps::CAP_SYS_ADMIN), None);
        assert_eq!(
            missing_trace_caps((1 << caps::CAP_BPF) | (1 << caps::CAP_PERFMON)),
            None
        );
        assert_eq!(
            missing_trace_caps(1 << caps::CAP_BPF).as_deref(),
            Some("CAP_PERFMON")
        );
    }

    /// The flags of every map of `obj`, as aya parses them.
    fn map_flags(obj: &[u8]) -> std::collections::HashMap<String, u32> {
        let parsed = aya_obj::Object::parse(obj).expect("aya parses the object");
        parsed
            .maps
            .iter()
            .map(|(name, m)| (name.clone(), m.map_flags()))
            .collect()
    }

    #[test]
    fn only_the_named_hash_map_loses_its_preallocation() {
        if crate::EBPF_OBJECT.is_empty() {
            panic!("built without the eBPF object (FDAUDIT_SKIP_EBPF=1): this test needs it");
        }
        let before = map_flags(crate::EBPF_OBJECT);
        assert_eq!(before[MAP_TRACKED], 0, "built preallocated: {before:?}");
        let patched = with_map_flags(crate::EBPF_OBJECT, MAP_TRACKED, BPF_F_NO_PREALLOC)
            .expect("TRACKED is a hash map in `maps`");
        let after = map_flags(&patched);
        assert_eq!(after[MAP_TRACKED], BPF_F_NO_PREALLOC);
        for (name, flags) in &before {
            if name != MAP_TRACKED {
                assert_eq!(after[name], *flags, "{name} unchanged");
            }
        }
        assert_eq!(patched.len(), crate::EBPF_OBJECT.len());
        // Not a hash map (the ring buffer), or no such map: left alone.
        assert!(with_map_flags(crate::EBPF_OBJECT, MAP_EVENTS, BPF_F_NO_PREALLOC).is_none());
        assert!(with_map_flags(crate::EBPF_OBJECT, "NO_SUCH_MAP", BPF_F_NO_PREALLOC).is_none());
    }

    #[test]
    #[ignore = "needs BTF (/sys/kernel/btf/vmlinux)"]
    fn every_fentry_hook_is_a_kernel_function() {
        let kernel = KernelBtf::read().unwrap_or_else(|e| panic!("{}", one_line(&e)));
        for spec in &FENTRY_PROGRAMS {
            let f = spec.function();
            assert!(
                kernel.btf().expect("BTF").func_id(&f).is_some(),
                "{f} not in the kernel BTF"
            );
        }
        assert_eq!(
            kernel
                .btf()
                .expect("BTF")
                .func_id("no_such_function_fdaudit"),
            None
        );
    }

    #[test]
    fn the_object_holds_exactly_the_programs_the_loader_attaches() {
        if crate::EBPF_OBJECT.is_empty() {
            panic!("built without the eBPF object (FDAUDIT_SKIP_EBPF=1): this test needs it");
        }
        let parsed = aya_obj::Object::parse(crate::EBPF_OBJECT).expect("aya parses the object");
        let in_object: std::collections::BTreeSet<&str> =
            parsed.programs.keys().map(String::as_str).collect();
        let attached: std::collections::BTreeSet<&str> = PROGRAMS
            .iter()
            .map(|p| p.name)
            .chain(FENTRY_PROGRAMS.iter().map(|p| p.name))
            .chain(mode_programs(true, true).map(|p| p.name))
            .chain([UNCLOSED_IO_URING.name])
            .chain(TP_PROGRAMS.iter().map(|p| p.name))
            .chain(TP_READ_PROGRAMS.iter().map(|p| p.name))
            .chain(FAILED_EXEC_PROGRAMS.iter().map(|(name, _)| *name))
            // The bounded exec walk (kernels without bpf_loop): its entry and tail calls.
            .chain(EXEC_CHAIN_STAGES)
            .chain([EXEC_BOUNDED_ENTRY])
            // origin_exit's tail calls.
            .chain(ORIGIN_CHAIN_STAGES)
            // `--origin`'s Python walk, tail-called from origin_exit.
            .chain(python::PY_CHAIN_PROGRAMS)
            .collect();
        let unattached: Vec<_> = in_object.difference(&attached).collect();
        let missing: Vec<_> = attached.difference(&in_object).collect();
        assert!(
            unattached.is_empty() && missing.is_empty(),
            "in the object but attached nowhere: {unattached:?}; attached but not in the object: {missing:?}"
        );
    }

    #[test]
    fn every_hash_map_is_built_preallocated() {
        // Before 6.1 a tracing program on a hash map that is not preallocated makes the
        // verifier WARN in the kernel log (one guest found it); only the loader may drop the
        // preallocation, where the kernel allows it (`object_for_this_kernel`).
        if crate::EBPF_OBJECT.is_empty() {
            panic!("built without the eBPF object (FDAUDIT_SKIP_EBPF=1): this test needs it");
        }
        let parsed = aya_obj::Object::parse(crate::EBPF_OBJECT).expect("aya parses the object");
        let hash = [
            bpf_map_type::BPF_MAP_TYPE_HASH as u32,
            bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH as u32,
        ];
        let mut hashes = 0;
        for (name, map) in &parsed.maps {
            if hash.contains(&map.map_type()) {
                hashes += 1;
                assert_eq!(
                    map.map_flags() & BPF_F_NO_PREALLOC,
                    0,
                    "{name} is built without preallocation"
                );
            }
        }
        assert!(hashes > 0, "the check found no hash map to look at");
        // The one the loader patches from 6.1 is such a map.
        assert!(with_map_flags(crate::EBPF_OBJECT, MAP_TRACKED, BPF_F_NO_PREALLOC).is_some());
    }

    #[test]
    fn fentry_programs_mirror_sys_enter_and_sys_exit() {
        let mut names: Vec<&str> = FENTRY_PROGRAMS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            FENTRY_PROGRAMS.len(),
            "two programs share a name"
        );
        // fexit exactly for the --reads programs (sys_exit's job), fentry for the rest.
        assert!(FENTRY_PROGRAMS.iter().all(|p| p.exit == p.reads_only));
        assert_eq!(
            FENTRY_PROGRAMS[0].function(),
            format!("{SYSCALL_PREFIX}close")
        );
    }

    #[test]
    fn backend_from_the_environment_names_the_choices() {
        use clap::ValueEnum as _;
        for (v, want) in [
            ("auto", BackendChoice::Auto),
            ("fentry", BackendChoice::Fentry),
            ("tp", BackendChoice::Tp),
            ("raw-tp", BackendChoice::RawTp),
        ] {
            assert_eq!(BackendChoice::from_str(v, true), Ok(want));
        }
        assert!(BackendChoice::from_str("kprobe", true).is_err());
    }

    #[test]
    fn programs_are_unique_and_sched_first() {
        let mut names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
        let mut tracepoints: Vec<&str> = PROGRAMS.iter().map(|p| p.tracepoint).collect();
        names.sort_unstable();
        names.dedup();
        tracepoints.sort_unstable();
        tracepoints.dedup();
        assert_eq!(names.len(), PROGRAMS.len(), "two programs share a name");
        assert_eq!(
            tracepoints.len(),
            PROGRAMS.len(),
            "two programs share a tracepoint"
        );
        let first_syscall = PROGRAMS.iter().position(|p| p.syscall).unwrap();
        assert!(PROGRAMS[..first_syscall].iter().all(|p| !p.syscall));
        assert!(PROGRAMS[first_syscall..].iter().all(|p| p.syscall));
    }
}
