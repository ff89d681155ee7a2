//! Loading the embedded eBPF object, checking what the machine offers, attaching programs.

use std::{
    path::Path,
    sync::OnceLock,
    time::{Duration, Instant},
};

use aya::{
    maps::ProgramArray,
    programs::{ProgramError, ProgramType, RawTracePoint},
    sys::{is_helper_supported, BpfHelper},
    Ebpf, EbpfError, EbpfLoader,
};
use fdaudit_common::{Config, GLOBAL_CONFIG, MAP_EVENTS, MAP_EXEC_CHAIN};
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
    #[error("failed to fill the exec walk's tail-call map")]
    Chain(#[source] EbpfError),
    #[error("failed to attach {name} to raw tracepoint {tracepoint}")]
    Attach {
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
    let btf = Btf::from_sys_fs().map_err(LoadError::NoBtf)?;
    let mut config = btf::config_from_btf(&btf).map_err(LoadError::Offsets)?;
    // Before 5.11 (task_btf 0) the programs must not reach the helper: the verifier rejects
    // an unknown helper only on a path it visits, and CONFIG's values are constants to it.
    config.task_btf = u32::from(has_task_btf());
    Ok(config)
}

/// Whether the kernel offers bpf_get_current_task_btf (5.11+) to raw tracepoint programs,
/// probed once like [`has_bpf_loop`].
pub fn has_task_btf() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        is_helper_supported(
            ProgramType::RawTracePoint,
            BpfHelper::BPF_FUNC_get_current_task_btf,
        )
        .unwrap_or(false)
    })
}

/// Creates the maps of the embedded object with `config` written into its CONFIG global.
/// Programs are not loaded yet: see [`load_and_attach`].
pub fn open(config: &Config) -> Result<Ebpf, LoadError> {
    open_with_ring(config, None)
}

/// As [`open`], with the ring buffer ([`MAP_EVENTS`]) `ring_bytes` long (a power-of-two
/// multiple of the page size) rather than the object's default.
pub fn open_with_ring(config: &Config, ring_bytes: Option<u32>) -> Result<Ebpf, LoadError> {
    if crate::EBPF_OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    if let Some(missing) = missing_trace_caps(effective_caps()) {
        return Err(LoadError::NoPrivileges { missing });
    }
    if !Path::new(btf::VMLINUX_BTF).exists() {
        return Err(LoadError::NoBtf(BtfError::Malformed("file missing")));
    }
    let mut loader = EbpfLoader::new();
    loader.override_global(GLOBAL_CONFIG, config, true);
    if let Some(bytes) = ring_bytes {
        loader.map_max_entries(MAP_EVENTS, bytes);
    }
    loader
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
