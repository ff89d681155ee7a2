//! Loading the embedded eBPF object, checking what the machine offers, attaching programs.

use std::path::Path;

use aya::{
    programs::{FEntry, FExit, ProgramError, RawTracePoint},
    Ebpf, EbpfError, EbpfLoader,
};
use fdaudit_common::{Config, GLOBAL_CONFIG};
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

/// `--backend`: a backend, or `auto` (fentry when the kernel accepts it, else raw-tp).
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
    #[error("failed to attach {name} to raw tracepoint {tracepoint}")]
    Attach {
        name: &'static str,
        tracepoint: &'static str,
        #[source]
        source: ProgramError,
    },
}

/// Effective capabilities of this process, from /proc/self/status (CapEff).
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
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

/// The running kernel's BTF, read once: its raw bytes (for aya, which needs its own parse
/// only to load fentry programs), fdaudit's parse and the offsets from it.
pub struct KernelBtf {
    pub bytes: Vec<u8>,
    pub btf: Btf,
    pub config: Config,
}

impl KernelBtf {
    pub fn read() -> Result<Self, LoadError> {
        let bytes = std::fs::read(btf::VMLINUX_BTF)
            .map_err(|source| {
                LoadError::NoBtf(BtfError::Read {
                    path: btf::VMLINUX_BTF.into(),
                    source,
                })
            })?;
        let btf = Btf::parse(&bytes).map_err(LoadError::NoBtf)?;
        let config = btf::config_from_btf(&btf).map_err(LoadError::Offsets)?;
        Ok(KernelBtf { bytes, btf, config })
    }

    /// aya's parse of the same bytes (FEntry::load looks the hooked function up in it).
    pub fn for_aya(&self) -> Result<aya::Btf, LoadError> {
        aya::Btf::parse(&self.bytes, aya::Endianness::default())
            .map_err(LoadError::AyaBtf)
    }
}

/// Creates the maps of the embedded object with `config` written into its CONFIG global.
/// Programs are not loaded yet: see [`load_and_attach`].
pub fn open(config: &Config) -> Result<Ebpf, LoadError> {
    if crate::EBPF_OBJECT.is_empty() {
        return Err(LoadError::NoObject);
    }
    if let Some(missing) = missing_trace_caps(effective_caps()) {
        return Err(LoadError::NoPrivileges { missing });
    }
    if !Path::new(btf::VMLINUX_BTF).exists() {
        return Err(LoadError::NoBtf(BtfError::Malformed("file missing")));
    }
    // No CO-RE relocations in Rust programs: aya needs no target BTF to load the object
    // (its own parse of vmlinux, in EbpfLoader::new(), cannot be avoided in aya 0.14).
    EbpfLoader::new()
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

/// Loads one program into the kernel (verifier) and attaches it.
pub fn load_and_attach(ebpf: &mut Ebpf, spec: &ProgramSpec) -> Result<(), LoadError> {
    let prog: &mut RawTracePoint = ebpf
        .program_mut(spec.name)
        .ok_or(LoadError::MissingProgram(spec.name))?
        .try_into()
        .map_err(|source| LoadError::Verifier {
            name: spec.name,
            summary: "not a raw tracepoint program".into(),
            source,
        })?;
    prog.load().map_err(|source| LoadError::Verifier {
        name: spec.name,
        summary: verifier_summary(&source),
        source,
    })?;
    prog.attach(spec.tracepoint)
        .map_err(|source| LoadError::Attach {
            name: spec.name,
            tracepoint: spec.tracepoint,
            source,
        })?;
    Ok(())
}

/// Loads one fentry-backend program against `btf` and attaches it.
pub fn load_and_attach_fentry(
    ebpf: &mut Ebpf,
    spec: &FentrySpec,
    btf: &aya::Btf,
) -> Result<(), LoadError> {
    let function = spec.function();
    let fail = |source| LoadError::Fentry {
        name: spec.name,
        function: function.clone(),
        source,
    };
    let prog = ebpf
        .program_mut(spec.name)
        .ok_or(LoadError::MissingProgram(spec.name))?;
    if spec.exit {
        let prog: &mut FExit = prog.try_into().map_err(fail)?;
        prog.load(&function, btf).map_err(fail)?;
        prog.attach().map_err(fail)?;
    } else {
        let prog: &mut FEntry = prog.try_into().map_err(fail)?;
        prog.load(&function, btf).map_err(fail)?;
        prog.attach().map_err(fail)?;
    }
    Ok(())
}

/// Loads and attaches every fentry-backend program (the read ones only with `reads`).
pub fn attach_fentry(ebpf: &mut Ebpf, btf: &aya::Btf, reads: bool) -> Result<(), LoadError> {
    for spec in FENTRY_PROGRAMS.iter().filter(|p| reads || !p.reads_only) {
        load_and_attach_fentry(ebpf, spec, btf)?;
    }
    Ok(())
}

/// Detaches and unloads whatever fentry-backend programs were attached (after a failed
/// [`attach_fentry`]), so that the raw-tracepoint backend does not count twice.
pub fn detach_fentry(ebpf: &mut Ebpf) {
    for spec in &FENTRY_PROGRAMS {
        let Some(prog) = ebpf.program_mut(spec.name) else {
            continue;
        };
        // Not loaded is the usual case: nothing to undo.
        let _ = if spec.exit {
            <&mut FExit>::try_from(prog).map(|p| p.unload())
        } else {
            <&mut FEntry>::try_from(prog).map(|p| p.unload())
        };
    }
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
