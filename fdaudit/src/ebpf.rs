//! Loading the embedded eBPF object, checking what the machine offers, attaching programs.

use std::{
    path::Path,
    sync::OnceLock,
    time::{Duration, Instant},
};

use aya::{
    maps::ProgramArray,
    programs::{Program, ProgramError, ProgramType, RawTracePoint, TracePoint},
    sys::{is_helper_supported, BpfHelper},
    Ebpf, EbpfError, EbpfLoader,
};
use fdaudit_common::{Config, GLOBAL_CONFIG, MAP_EXEC_CHAIN, MAP_READS};
use thiserror::Error;

use crate::btf::{self, Btf, BtfError};

/// A program in the object and the raw tracepoint it attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramSpec {
    pub name: &'static str,
    pub tracepoint: &'static str,
    /// A syscall tracepoint: slows every syscall on the machine while attached.
    pub syscall: bool,
    /// Only needed for `trace --reads`.
    pub reads_only: bool,
}

/// Every program in the object, in attach order: the scheduler hooks first, so that a spawn
/// never has syscall counts without its fork being seen.
pub const PROGRAMS: [ProgramSpec; 5] = [
    ProgramSpec {
        name: "sched_process_fork",
        tracepoint: "sched_process_fork",
        syscall: false,
        reads_only: false,
    },
    ProgramSpec {
        name: "sched_process_exec",
        tracepoint: "sched_process_exec",
        syscall: false,
        reads_only: false,
    },
    ProgramSpec {
        name: "sched_process_exit",
        tracepoint: "sched_process_exit",
        syscall: false,
        reads_only: false,
    },
    ProgramSpec {
        name: "sys_enter",
        tracepoint: "sys_enter",
        syscall: true,
        reads_only: false,
    },
    ProgramSpec {
        name: "sys_exit",
        tracepoint: "sys_exit",
        syscall: true,
        reads_only: true,
    },
];

/// The optional programs on the exec syscalls' exit tracepoints (syscalls category), with
/// the tracepoint each attaches to: they record a failed exec's errno and path
/// ([`fdaudit_common::MAP_EXEC_FAILS`]). Only execve exits run them; other syscalls pay the
/// syscall tracepoint's "is it enabled" bit test. Without tracefs or
/// CONFIG_FTRACE_SYSCALLS, trace runs without them.
pub const EXEC_EXIT_PROGRAMS: [(&str, &str); 2] = [
    ("exec_exit", "sys_exit_execve"),
    ("execat_exit", "sys_exit_execveat"),
];

/// Loads and attaches [`EXEC_EXIT_PROGRAMS`].
pub fn attach_exec_exit(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    for (name, _) in EXEC_EXIT_PROGRAMS {
        let prog = ebpf
            .program_mut(name)
            .ok_or(LoadError::MissingProgram(name))?;
        load_program(prog, name)?;
    }
    attach_exec_exit_loaded(ebpf)
}

/// Attaches [`EXEC_EXIT_PROGRAMS`], loaded beforehand (see [`load_concurrently`]).
pub fn attach_exec_exit_loaded(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    for (name, tracepoint) in EXEC_EXIT_PROGRAMS {
        let prog: &mut TracePoint = ebpf
            .program_mut(name)
            .ok_or(LoadError::MissingProgram(name))?
            .try_into()
            .map_err(|source| LoadError::Verifier {
                name,
                summary: "not a tracepoint program".into(),
                source,
            })?;
        prog.attach("syscalls", tracepoint)
            .map_err(|source| LoadError::AttachTracepoint {
                name,
                tracepoint,
                source,
            })?;
    }
    Ok(())
}

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

/// Loads the programs `names` (raw tracepoints or tracepoints), one thread each, and
/// returns each one's result in the order of `names`. The verifier of privileged loads
/// takes no global lock, so the kernel checks them on every core at once and start-up
/// waits for the slowest (the exec program: 10-30 ms here) rather than for the sum.
pub fn load_concurrently(ebpf: &mut Ebpf, names: &[&'static str]) -> Vec<Result<(), LoadError>> {
    let mut results: Vec<Result<(), LoadError>> = names
        .iter()
        .map(|&n| Err(LoadError::MissingProgram(n)))
        .collect();
    std::thread::scope(|s| {
        let running: Vec<_> = ebpf
            .programs_mut()
            .filter_map(|(n, prog)| {
                let i = names.iter().position(|&w| w == n)?;
                let name = names[i];
                Some((i, s.spawn(move || load_program(prog, name))))
            })
            .collect();
        for (i, handle) in running {
            results[i] = handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
    results
}

/// Attaches a program of [`PROGRAMS`] loaded beforehand (see [`load_concurrently`]).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Raw `sys_enter`/`sys_exit` tracepoints: every kernel since 4.17, but every syscall of
    /// every process on the machine takes the tracepoint's slow path while attached.
    RawTp,
    /// fentry/fexit (BPF trampolines) on the counted syscalls only: other syscalls pay
    /// nothing. Needs a kernel that accepts BPF_PROG_TYPE_TRACING programs (5.5+, and not
    /// forbidden by lockdown or the distribution).
    Fentry,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::RawTp => "raw-tp",
            Backend::Fentry => "fentry",
        }
    }
}

/// Why `auto` counts with raw tracepoints, as `-v` and doctor say it.
pub const AUTO_REASON: &str = "auto: fentry is opt-in, --backend fentry";

/// `--backend`: a backend, or `auto` (raw-tp for now; fentry is opt-in until it is shown
/// faster and safe on real hardware).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    #[default]
    Auto,
    Fentry,
    RawTp,
}

impl BackendChoice {
    /// `FDAUDIT_BACKEND` (auto, fentry or raw-tp) when set, so a test suite can be run once
    /// per backend; else auto.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("FDAUDIT_BACKEND") {
            Err(_) => Ok(BackendChoice::Auto),
            Ok(v) => <Self as clap::ValueEnum>::from_str(&v, true)
                .map_err(|_| format!("FDAUDIT_BACKEND={v}: use auto, fentry or raw-tp")),
        }
    }
}

/// The entry-point prefix of syscall `foo`'s handler (`__x64_sys_foo`), per architecture.
#[cfg(target_arch = "x86_64")]
pub const SYSCALL_PREFIX: &str = "__x64_sys_";
#[cfg(target_arch = "aarch64")]
pub const SYSCALL_PREFIX: &str = "__arm64_sys_";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const SYSCALL_PREFIX: &str = "__se_sys_";

/// A program of the fentry backend and the syscall it hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FentrySpec {
    pub name: &'static str,
    /// The syscall (`close`): the program hooks [`SYSCALL_PREFIX`]`close`.
    pub syscall: &'static str,
    /// fexit (after the syscall, with its result) rather than fentry.
    pub exit: bool,
    /// Only needed for `trace --reads`.
    pub reads_only: bool,
}

impl FentrySpec {
    /// The kernel function hooked (`__x64_sys_close`).
    pub fn function(&self) -> String {
        format!("{SYSCALL_PREFIX}{}", self.syscall)
    }
}

const fn entry(name: &'static str, syscall: &'static str) -> FentrySpec {
    FentrySpec {
        name,
        syscall,
        exit: false,
        reads_only: false,
    }
}

const fn read_exit(name: &'static str, syscall: &'static str) -> FentrySpec {
    FentrySpec {
        name,
        syscall,
        exit: true,
        reads_only: true,
    }
}

/// The fentry backend's programs: the same counts as `sys_enter` and `sys_exit`, one
/// program per counted syscall.
pub const FENTRY_PROGRAMS: [FentrySpec; 13] = [
    entry("fentry_close", "close"),
    entry("fentry_close_range", "close_range"),
    entry("fentry_fcntl", "fcntl"),
    entry("fentry_poll", "poll"),
    entry("fentry_ppoll", "ppoll"),
    entry("fentry_getdents64", "getdents64"),
    entry("fentry_execve", "execve"),
    entry("fentry_execveat", "execveat"),
    entry("fentry_dup2", "dup2"),
    entry("fentry_dup3", "dup3"),
    read_exit("fexit_read", "read"),
    read_exit("fexit_readv", "readv"),
    read_exit("fexit_pread64", "pread64"),
];

/// Linux capability numbers fdaudit cares about.
pub mod caps {
    pub const CAP_SYS_PTRACE: u32 = 19;
    pub const CAP_SYS_ADMIN: u32 = 21;
    pub const CAP_PERFMON: u32 = 38;
    pub const CAP_BPF: u32 = 39;
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

/// Effective capabilities of this process, from /proc/self/status (CapEff, parsed by
/// procfs-core).
pub fn effective_caps() -> u64 {
    procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_or(0, |s| s.capeff)
}

pub fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// The capabilities tracing lacks, named, or None when it has what it needs.
pub fn missing_trace_caps(caps: u64) -> Option<String> {
    let admin = has_cap(caps, caps::CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !admin && !has_cap(caps, caps::CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !admin && !has_cap(caps, caps::CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// The offsets of the running kernel, from its BTF.
pub fn kernel_config() -> Result<Config, LoadError> {
    Ok(KernelBtf::read()?.config)
}

/// The running kernel's BTF, read once: fdaudit's index of it (its raw bytes are what aya
/// parses, only to load fentry programs) and the offsets from it.
pub struct KernelBtf {
    pub btf: Btf,
    pub config: Config,
}

impl KernelBtf {
    pub fn read() -> Result<Self, LoadError> {
        let btf = Btf::from_sys_fs().map_err(LoadError::NoBtf)?;
        let config = btf::config_from_btf(&btf).map_err(LoadError::Offsets)?;
        Ok(KernelBtf { btf, config })
    }

    /// aya's parse of the same bytes (FEntry::load looks the hooked function up in it).
    pub fn for_aya(&self) -> Result<aya::Btf, LoadError> {
        aya::Btf::parse(self.btf.bytes(), aya::Endianness::default()).map_err(LoadError::AyaBtf)
    }
}

/// Creates the maps of the embedded object with `config` written into its CONFIG global.
/// Programs are not loaded yet: see [`load_and_attach`].
pub fn open(config: &Config) -> Result<Ebpf, LoadError> {
    let loader = spawn_loader()
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    open_with(loader, config)
}

/// Makes an `EbpfLoader` on a thread of its own, without aya's parse of vmlinux BTF where
/// that can be avoided; join it when the loader is needed.
///
/// aya 0.14's `EbpfLoader::new()` always reads and parses /sys/kernel/btf/vmlinux (17-50 ms
/// and ~30 MB of fresh memory on this project's CI machine) for CO-RE relocations, which
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

/// [`open`] with a loader made beforehand ([`spawn_loader`]), so that a caller can do its
/// own work meanwhile.
pub fn open_with<'a>(mut loader: EbpfLoader<'a>, config: &'a Config) -> Result<Ebpf, LoadError> {
    if crate::EBPF_OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    if let Some(missing) = missing_trace_caps(effective_caps()) {
        return Err(LoadError::NoPrivileges { missing });
    }
    if !Path::new(btf::VMLINUX_BTF).exists() {
        return Err(LoadError::NoBtf(BtfError::Malformed("file missing")));
    }
    // Only the --reads programs write the read table (16384 preallocated entries, ~0.5 ms
    // of the kernel's map creation): without --reads it gets one.
    if config.reads == 0 {
        loader.map_max_entries(MAP_READS, 1);
    }
    // No CO-RE relocations in Rust programs: aya needs no target BTF to load the object.
    loader
        .btf(None)
        .override_global(GLOBAL_CONFIG, config, true)
        .load(crate::EBPF_OBJECT)
        .map_err(|e| match is_eperm(&e) {
            true => LoadError::NoPrivileges {
                missing: "permission to create BPF maps (EPERM)".into(),
            },
            false => LoadError::Maps(e),
        })
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

/// One program as the verifier took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub name: &'static str,
    /// Wall time of the BPF_PROG_LOAD call (verification and JIT).
    pub load_time: Duration,
    /// Instructions the verifier processed (`bpf_prog_info.verified_insns`, 5.16+).
    pub verified_insns: Option<u32>,
}

/// The bounded exec walk's tail-call stages, by [`MAP_EXEC_CHAIN`] slot.
const EXEC_CHAIN_STAGES: [&str; 2] = ["exec_walk_fds", "exec_walk_paths"];

/// Loads one program into the kernel (verifier) and attaches it.
pub fn load_and_attach(ebpf: &mut Ebpf, spec: &ProgramSpec) -> Result<(), LoadError> {
    load_and_attach_measured(ebpf, spec).map(drop)
}

/// [`load_and_attach`], returning each program the verifier took, with its figures: one,
/// or for the exec program's bounded walk the entry and its tail-call stages.
pub fn load_and_attach_measured(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
) -> Result<Vec<Loaded>, LoadError> {
    if spec.name != "sched_process_exec" || exec_walk() == ExecWalk::Loop {
        let loaded = load_one(ebpf, spec.name, spec.name)?;
        attach(ebpf, spec.name, spec)?;
        return Ok(vec![loaded]);
    }
    let mut all = Vec::new();
    for (slot, stage) in (0u32..).zip(EXEC_CHAIN_STAGES) {
        all.push(load_one(ebpf, stage, spec.name)?);
        let fd = raw_tracepoint(ebpf, stage, spec.name)?
            .fd()
            .and_then(|fd| fd.try_clone().map_err(Into::into))
            .map_err(|source| LoadError::Verifier {
                name: spec.name,
                summary: format!("no fd for {stage}"),
                source,
            })?;
        let map = ebpf
            .map_mut(MAP_EXEC_CHAIN)
            .ok_or(LoadError::MissingMap(MAP_EXEC_CHAIN))?;
        let mut chain = ProgramArray::try_from(map).map_err(|e| LoadError::Chain(e.into()))?;
        chain
            .set(slot, &fd, 0)
            .map_err(|e| LoadError::Chain(e.into()))?;
    }
    let entry = "sched_process_exec_bounded";
    all.push(load_one(ebpf, entry, spec.name)?);
    attach(ebpf, entry, spec)?;
    Ok(all)
}

fn raw_tracepoint<'a>(
    ebpf: &'a mut Ebpf,
    prog: &str,
    name: &'static str,
) -> Result<&'a mut RawTracePoint, LoadError> {
    ebpf.program_mut(prog)
        .ok_or(LoadError::MissingProgram(name))?
        .try_into()
        .map_err(|source| LoadError::Verifier {
            name,
            summary: "not a raw tracepoint program".into(),
            source,
        })
}

/// Loads `prog` (reported as `name`), timing the verifier.
fn load_one(ebpf: &mut Ebpf, prog: &'static str, name: &'static str) -> Result<Loaded, LoadError> {
    let p = raw_tracepoint(ebpf, prog, name)?;
    let t0 = Instant::now();
    p.load().map_err(|source| LoadError::Verifier {
        name,
        summary: verifier_summary(&source),
        source,
    })?;
    let load_time = t0.elapsed();
    let verified_insns = p.info().ok().and_then(|i| i.verified_instruction_count());
    Ok(Loaded {
        name: prog,
        load_time,
        verified_insns,
    })
}

fn attach(ebpf: &mut Ebpf, prog: &str, spec: &ProgramSpec) -> Result<(), LoadError> {
    raw_tracepoint(ebpf, prog, spec.name)?
        .attach(spec.tracepoint)
        .map_err(|source| LoadError::Attach {
            name: spec.name,
            tracepoint: spec.tracepoint,
            source,
        })?;
    Ok(())
}

/// Loads one fentry-backend program against `btf` and attaches it.
fn load_and_attach_fentry(
    prog: &mut Program,
    spec: &FentrySpec,
    btf: &aya::Btf,
) -> Result<(), LoadError> {
    let function = spec.function();
    let fail = |source| LoadError::Fentry {
        name: spec.name,
        function: function.clone(),
        source,
    };
    match prog {
        Program::FEntry(p) => {
            p.load(&function, btf).map_err(fail)?;
            p.attach().map_err(fail)?;
        }
        Program::FExit(p) => {
            p.load(&function, btf).map_err(fail)?;
            p.attach().map_err(fail)?;
        }
        _ => return Err(LoadError::MissingProgram(spec.name)),
    }
    Ok(())
}

/// Loads and attaches every fentry-backend program (the read ones only with `reads`), one
/// after the other: each attach rewrites the hooked function's entry under ftrace's lock
/// anyway, and attaching from one thread per program was no faster in a 6.12 guest
/// (0.36–0.62 s against 0.29 s).
pub fn attach_fentry(ebpf: &mut Ebpf, btf: &aya::Btf, reads: bool) -> Result<(), LoadError> {
    for spec in FENTRY_PROGRAMS.iter().filter(|p| reads || !p.reads_only) {
        let prog = ebpf
            .program_mut(spec.name)
            .ok_or(LoadError::MissingProgram(spec.name))?;
        load_and_attach_fentry(prog, spec, btf)?;
    }
    Ok(())
}

/// Detaches and unloads the fentry-backend programs (all of them, or the ones a failed
/// [`attach_fentry`] attached), one thread each: removing a trampoline waits for RCU
/// grace periods, which concurrent removals share (13 one after the other took 1.3 s in a
/// 6.12 guest).
pub fn detach_fentry(ebpf: &mut Ebpf) {
    std::thread::scope(|s| {
        for (name, prog) in ebpf.programs_mut() {
            if !FENTRY_PROGRAMS.iter().any(|p| p.name == name) {
                continue;
            }
            // Not loaded is the usual case after a failure: nothing to undo.
            match prog {
                Program::FEntry(p) => drop(s.spawn(move || p.unload())),
                Program::FExit(p) => drop(s.spawn(move || p.unload())),
                _ => {}
            }
        }
    });
}

/// Whether the kernel accepts a tracing (fentry) program on [`SYSCALL_PREFIX`]`close`,
/// found by loading the smallest one (`r0 = 0; exit`): a refusal costs one syscall, where
/// trying the real programs first needs aya's own parse of vmlinux BTF (~20 ms) and
/// aya's `is_program_supported` parses it too. Err is the reason, in one line.
pub fn probe_fentry(btf: &Btf) -> Result<(), String> {
    /// The head of `union bpf_attr` for BPF_PROG_LOAD (include/uapi/linux/bpf.h), up to
    /// attach_btf_id; the kernel zero-fills the fields after `size`.
    #[repr(C)]
    #[derive(Default)]
    struct ProgLoadAttr {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
        prog_btf_fd: u32,
        func_info_rec_size: u32,
        func_info: u64,
        func_info_cnt: u32,
        line_info_rec_size: u32,
        line_info: u64,
        line_info_cnt: u32,
        attach_btf_id: u32,
    }
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_TRACING: u32 = 26;
    const BPF_TRACE_FENTRY: u32 = 24;
    let function = format!("{SYSCALL_PREFIX}close");
    let id = btf
        .func_id(&function)
        .ok_or_else(|| format!("{function} is not in the kernel BTF"))?;
    // mov64 r0, 0; exit
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_TRACING,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: BPF_TRACE_FENTRY,
        attach_btf_id: id,
        ..Default::default()
    };
    // SAFETY: bpf(2) reads `attr` (which outlives the call) and the buffers it points to.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoadAttr,
            std::mem::size_of::<ProgLoadAttr>() as u32,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "the kernel refuses tracing programs on {function} (BPF_PROG_LOAD: {e})"
        ));
    }
    // SAFETY: closing the program fd we just got.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

/// Detaches everything at once except the fentry backend's programs and the exec_exit
/// tracepoints, whose links are left to a child that closes them once fdaudit has exited.
///
/// Removing a BPF trampoline waits for RCU-tasks grace periods under ftrace's lock, one
/// trampoline after the other (10 took 1.5–2 s in a 6.12 guest), and closing the last fd
/// of a link does that removal; detaching a program from a syscall trace event (a perf
/// event) waits for two grace periods too (65-85 ms each on a loaded 2-vCPU 6.18 host):
/// on fdaudit's way out, its caller would wait for all of them. The raw tracepoints go
/// first (quick), then a child that holds a copy of every BPF fd (and nothing else: not
/// the caller's pipes) waits for fdaudit to exit and exits in turn, and the kernel
/// detaches when that last copy goes. Until then those programs stay attached, writing
/// into maps nobody reads. Falls back to [`detach_fentry`] when the child cannot be made.
pub fn detach_after_exit(ebpf: &mut Ebpf) {
    for (name, prog) in ebpf.programs_mut() {
        if let Program::RawTracePoint(p) = prog {
            let _ = p.unload(); // not loaded (--leaks-only's sys_enter) is fine
        } else if !FENTRY_PROGRAMS.iter().any(|p| p.name == name) {
            let _ = prog_unload(prog);
        }
    }
    if hand_bpf_fds_to_a_child().is_err() {
        detach_fentry(ebpf);
    }
}

fn prog_unload(prog: &mut Program) -> Result<(), ProgramError> {
    match prog {
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        _ => Ok(()),
    }
}

/// Forks a child that keeps this process's BPF fds open until this process exits.
fn hand_bpf_fds_to_a_child() -> std::io::Result<()> {
    let mut gone = [0i32; 2];
    // SAFETY: pipe2 fills the array we own.
    if unsafe { libc::pipe2(gone.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Every fd that is not a BPF object, listed before the fork (the child may only make
    // async-signal-safe calls).
    let mut others: Vec<i32> = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let bpf = std::fs::read_link(e.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("anon_inode:bpf"));
        if !bpf && fd != gone[0] {
            others.push(fd);
        }
    }
    // SAFETY: the child only calls setsid, close, read and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls on fds this process owns.
        unsafe {
            libc::setsid(); // out of the terminal's process group: Ctrl-C is not for it
            for &fd in &others {
                libc::close(fd);
            }
            let mut b = 0u8;
            // EOF once every copy of the write end is closed: when fdaudit has exited.
            while libc::read(gone[0], (&mut b as *mut u8).cast(), 1) != 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the read end; the write end stays open until we exit.
    unsafe { libc::close(gone[0]) };
    Ok(())
}

/// A load error in one line: its message and its causes', or the verifier's own line.
pub fn one_line(e: &LoadError) -> String {
    let mut s = e.to_string();
    if matches!(e, LoadError::Verifier { .. }) {
        return s; // already carries the verifier's own line
    }
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s.lines().next().unwrap_or_default().to_string()
}

/// One line out of a verifier log: the last line that says what went wrong.
pub fn verifier_summary(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            if let Some(path) = std::env::var_os("FDAUDIT_VERIFIER_LOG") {
                // Debugging aid: the whole log, where the user asked for it.
                let _ = std::fs::write(path, &log);
            }
            let line = log
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| {
                    !l.is_empty()
                        && !l.starts_with("processed ")
                        && !l.starts_with("verification time")
                        && !l.starts_with("stack depth")
                })
                .unwrap_or("");
            if line.is_empty() {
                io_error.to_string()
            } else {
                format!("{line} ({io_error})")
            }
        }
        other => other.to_string(),
    }
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

    #[test]
    #[ignore = "needs BTF (/sys/kernel/btf/vmlinux)"]
    fn every_fentry_hook_is_a_kernel_function() {
        let kernel = KernelBtf::read().unwrap_or_else(|e| panic!("{}", one_line(&e)));
        for spec in &FENTRY_PROGRAMS {
            let f = spec.function();
            assert!(
                kernel.btf.func_id(&f).is_some(),
                "{f} not in the kernel BTF"
            );
        }
        assert_eq!(kernel.btf.func_id("no_such_function_fdaudit"), None);
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
