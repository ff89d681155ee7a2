//! `fdaudit doctor`: can `trace` work here, and if not, what to do.
//!
//! Any user gets the kernel, BTF, tracefs, capability and limit checks; root (or a user with
//! CAP_BPF and CAP_PERFMON) also gets every program loaded, attached and detached again.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

mod features;

use crate::{
    engine::btf,
    engine::ebpf::{self, caps, BackendChoice},
    output::{
        self,
        stream::{self, Dest, StdStream},
    },
};

/// Arguments of `fdaudit doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object per check instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write the checks (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// An optional feature this kernel lacks; nothing fdaudit does today needs it.
    Absent,
    /// Worth knowing, does not stop `trace`.
    Warn,
    /// `trace` cannot work until this is fixed.
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: String,
    pub status: Status,
    pub detail: String,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
    Check {
        kind: "check",
        name: name.into(),
        status,
        detail: detail.into(),
    }
}

use crate::sys::TRACEFS;

/// How the verifier took one program (`doctor --json`, after the checks).
#[derive(Debug, Serialize)]
pub struct ProgramFigures {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The program as named in the object (the bounded exec walk has three).
    pub name: &'static str,
    /// Instructions the verifier processed; null before 5.16 (no bpf_prog_info field).
    pub verified_insns: Option<u32>,
    /// Wall time of the load (verification and JIT).
    pub load_ns: u64,
}

pub fn run(args: DoctorArgs) -> Result<u8> {
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "doctor",
    )?;
    let (checks, programs) = collect_with_programs();
    if args.json {
        for c in &checks {
            stream::record(c)?;
        }
        for p in &programs {
            stream::record(p)?;
        }
    } else {
        use output::{
            color::Paint,
            table::{Cell, Col, Table},
        };
        let mut t = Table::new([
            Col::new("check"),
            Col::new("status"),
            Col::new("detail").text(),
        ]);
        for c in &checks {
            let status = match c.status {
                Status::Ok => Cell::painted("ok", Some(Paint::Good)),
                Status::Absent => Cell::from("absent"),
                Status::Warn => Cell::painted("warn", Some(Paint::Warn)),
                Status::Fail => Cell::painted("FAIL", Some(Paint::Alarm)),
            };
            t.add_row([c.name.as_str().into(), status, c.detail.as_str().into()]);
        }
        stream::text(&format!("{t}\n"))?;
    }
    let failed: Vec<&Check> = checks.iter().filter(|c| c.status == Status::Fail).collect();
    if let Some(first) = failed.first() {
        let msg = format!("trace cannot work here: {}: {}", first.name, first.detail);
        if args.json {
            stream::note(stream::Level::Warning, &msg);
        } else {
            crate::diag!("error: {}", output::escape(&msg));
        }
        return Ok(crate::exit::FAILED);
    }
    Ok(crate::exit::OK)
}

/// Runs every check, in order, with the verifier's figures of each program loaded.
pub fn collect_with_programs() -> (Vec<Check>, Vec<ProgramFigures>) {
    let mut checks = Vec::new();
    let uname = crate::sys::uname().unwrap_or_else(|| "unknown".into());
    checks.push(check("kernel", Status::Ok, uname));
    if !crate::arch::SUPPORTED {
        checks.push(check(
            "architecture",
            Status::Fail,
            format!(
                "{}: the programs know the syscall registers of x86_64 and aarch64 only",
                std::env::consts::ARCH
            ),
        ));
    }

    let (btf, btf_ok) = btf_check();
    checks.push(btf);

    let caps = ebpf::effective_caps();
    let root = unsafe { libc::geteuid() } == 0;
    checks.push(tracefs_check(root));

    let missing = ebpf::missing_trace_caps(caps);
    checks.extend(caps_checks(caps, missing.as_deref()));

    let (soft, hard) = crate::sys::nofile().unwrap_or((0, 0));
    let detail = format!("soft {soft}, hard {hard}");
    checks.push(check("rlimit_nofile", Status::Ok, detail));

    if crate::EBPF_OBJECT.is_empty() {
        checks.push(check(
            "ebpf_object",
            Status::Fail,
            "built without the eBPF object (FDAUDIT_SKIP_EBPF=1): rebuild without that variable",
        ));
        return (checks, Vec::new());
    }
    if missing.is_some() || !btf_ok {
        checks.push(check(
            "programs",
            Status::Fail,
            "not loaded: needs the capabilities and BTF above",
        ));
        return (checks, Vec::new());
    }
    checks.extend(features::checks());
    let (progs, figures) = program_checks();
    checks.extend(progs);
    (checks, figures)
}

/// Whether BTF is there and has every offset: the check, and whether it passed.
fn btf_check() -> (Check, bool) {
    match btf::Btf::from_sys_fs() {
        Ok(b) => match btf::config_from_btf(&b) {
            Ok(cfg) => match btf::boundary_groups_missing(&cfg.credns)[..] {
                [] => (
                    check(
                        "btf",
                        Status::Ok,
                        format!("{} has every offset fdaudit needs", btf::VMLINUX_BTF),
                    ),
                    true,
                ),
                ref missing => (
                    check(
                        "btf",
                        Status::Warn,
                        format!(
                            "{} lacks members of the boundary group(s) {}: spawn boundaries \
                             compare the rest only",
                            btf::VMLINUX_BTF,
                            missing.join(", ")
                        ),
                    ),
                    true,
                ),
            },
            Err(e) => (
                check(
                    "btf",
                    Status::Fail,
                    format!("{e}: this kernel's layout is not supported"),
                ),
                false,
            ),
        },
        Err(e) => (
            check(
                "btf",
                Status::Fail,
                format!("{e}: boot a kernel built with CONFIG_DEBUG_INFO_BTF=y"),
            ),
            false,
        ),
    }
}

/// The capabilities held, and a warning without CAP_SYS_PTRACE or CAP_DAC_READ_SEARCH (the
/// four the README lists).
fn caps_checks(caps: u64, missing: Option<&str>) -> Vec<Check> {
    let names = [
        ("CAP_BPF", caps::CAP_BPF),
        ("CAP_PERFMON", caps::CAP_PERFMON),
        ("CAP_SYS_ADMIN", caps::CAP_SYS_ADMIN),
        ("CAP_SYS_PTRACE", caps::CAP_SYS_PTRACE),
        ("CAP_DAC_READ_SEARCH", caps::CAP_DAC_READ_SEARCH),
    ];
    let held: Vec<&str> = names
        .iter()
        .filter(|(_, c)| ebpf::has_cap(caps, *c))
        .map(|(n, _)| *n)
        .collect();
    let mut checks = vec![match missing {
        None => check(
            "capabilities",
            Status::Ok,
            format!("held: {}", held.join(", ")),
        ),
        Some(m) => check(
            "capabilities",
            Status::Fail,
            format!("missing {m}: tracing needs CAP_BPF and CAP_PERFMON; run with sudo"),
        ),
    }];
    if missing.is_none() && !ebpf::has_cap(caps, caps::CAP_SYS_PTRACE) {
        checks.push(check(
            "ptrace",
            Status::Warn,
            "no CAP_SYS_PTRACE: leaked fd paths of other users' processes may be partial",
        ));
    }
    if missing.is_none() && !ebpf::has_cap(caps, caps::CAP_DAC_READ_SEARCH) {
        checks.push(check(
            "dac_read_search",
            Status::Warn,
            "no CAP_DAC_READ_SEARCH: /proc/PID/{status,limits,cgroup} of other users' \
             processes may be unreadable (runtimes, NOFILE advice, containers); grant it \
             beside CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE",
        ));
    }
    checks
}

/// Loads and attaches every program, reporting each with the verifier's figures, then
/// detaches all by dropping them.
fn program_checks() -> (Vec<Check>, Vec<ProgramFigures>) {
    let kernel = match ebpf::KernelBtf::read() {
        Ok(k) => k,
        Err(e) => {
            return (
                vec![check("programs", Status::Fail, e.to_string())],
                Vec::new(),
            )
        }
    };
    let mut bpf = match ebpf::open(&kernel.config) {
        Ok(b) => b,
        Err(e) => {
            return (
                vec![check("maps", Status::Fail, ebpf::one_line(&e))],
                Vec::new(),
            )
        }
    };
    let maps = "created (ring buffer, hash maps, per-CPU arrays)";
    let mut out = vec![check("maps", Status::Ok, maps), ring_growth_check(&bpf)];
    let mut figures = Vec::new();
    for spec in &ebpf::PROGRAMS {
        out.push(match ebpf::load_and_attach_measured(&mut bpf, spec) {
            Ok(loaded) => {
                let insns: Option<u32> = loaded.iter().map(|l| l.verified_insns).sum();
                let ms: f64 = loaded.iter().map(|l| l.load_time.as_secs_f64() * 1e3).sum();
                let how = match loaded.len() {
                    1 => String::new(),
                    n => format!(" as {n} programs chained by tail calls (bounded fd walk)"),
                };
                figures.extend(loaded.iter().map(|l| ProgramFigures {
                    kind: "program",
                    name: l.name,
                    verified_insns: l.verified_insns,
                    load_ns: u64::try_from(l.load_time.as_nanos()).unwrap_or(u64::MAX),
                }));
                check(
                    format!("program {}", spec.name),
                    Status::Ok,
                    format!(
                        "loaded{how} and attached to raw tracepoint {}; verifier: {}, {ms:.1} ms",
                        spec.tracepoint,
                        insns
                            .map(|n| format!("{n} insns"))
                            .unwrap_or_else(|| "insn count not reported (before 5.16)".into()),
                    ),
                )
            }
            Err(e) => check(
                format!("program {}", spec.name),
                Status::Fail,
                ebpf::one_line(&e),
            ),
        });
    }
    out.push(backend_check(&mut bpf, &kernel));
    // Optional: without them a failed exec is reported without its errno and path.
    let failed_exec = ebpf::attach_failed_exec(&mut bpf).map_err(|e| ebpf::one_line(&e));
    for (name, tracepoint) in ebpf::FAILED_EXEC_PROGRAMS {
        out.push(match &failed_exec {
            Ok(()) => check(
                format!("program {name}"),
                Status::Ok,
                format!("loaded and attached to tracepoint syscalls/{tracepoint}"),
            ),
            Err(e) => check(
                format!("program {name}"),
                Status::Warn,
                format!("{e}: failed execs are reported without errno and path"),
            ),
        });
    }
    drop(bpf); // closes every link and program fd: nothing stays attached
    (out, figures)
}

/// Whether the ring buffer can grow under a burst: a ring put in the object's growth slot,
/// as `trace` does when a burst needs it ([`crate::engine::drain`]).
fn ring_growth_check(bpf: &aya::Ebpf) -> Check {
    let grown = ebpf::create_ring(fdaudit_common::RING_TEMPLATE_BYTES)
        .and_then(|(ring, _reader)| ebpf::RingSlot::of(bpf)?.fill(&ring));
    match grown {
        Ok(()) => check(
            "ring growth",
            Status::Ok,
            "a bigger ring buffer can take over under a burst",
        ),
        Err(e) => check(
            "ring growth",
            Status::Warn,
            format!(
                "{}: a burst may lose records; trace --buffer-pages N sets a bigger ring from the start",
                ebpf::one_line(&e)
            ),
        ),
    }
}

/// Which backend `trace` will count syscalls with, and why: as trace's `auto` (or
/// FDAUDIT_BACKEND) chooses, the fentry programs (whether they would work, for the record),
/// then the tp ones are loaded, attached and detached; raw-tp when tp does not work.
fn backend_check(bpf: &mut aya::Ebpf, kernel: &ebpf::KernelBtf) -> Check {
    let choice = match BackendChoice::from_env() {
        Ok(c) => c,
        Err(e) => return check("backend", Status::Fail, e),
    };
    let raw_tp = "raw-tp: every syscall on the machine runs the sys_enter program while \
                  tracing";
    let ia32 = if kernel.ia32 {
        format!("; {}", ebpf::IA32_UNSEEN)
    } else {
        String::new()
    };
    let forced = |b: &str| format!("FDAUDIT_BACKEND={b}");
    let mut passed_over = Vec::new();
    if choice == BackendChoice::Auto {
        passed_over.push(match fentry_attaches(bpf, kernel) {
            Ok(()) => format!("{}; it loads and attaches here", ebpf::FENTRY_OPT_IN),
            Err(why) => format!("{}; it would not work here: {why}", ebpf::FENTRY_OPT_IN),
        });
    }
    if choice == BackendChoice::Fentry {
        match fentry_attaches(bpf, kernel) {
            Ok(()) => {
                return check(
                    "backend",
                    Status::Ok,
                    format!(
                        "fentry: {} programs on {}close and the other counted syscalls loaded, \
                         attached and detached; other syscalls pay nothing ({}){ia32}",
                        ebpf::FENTRY_PROGRAMS.len(),
                        ebpf::SYSCALL_PREFIX,
                        forced("fentry")
                    ),
                )
            }
            Err(why) => {
                return check(
                    "backend",
                    Status::Fail,
                    format!("{}, but {why}", forced("fentry")),
                )
            }
        }
    }
    if matches!(choice, BackendChoice::Tp | BackendChoice::Auto) {
        match tp_attaches(bpf) {
            Ok(()) => {
                let why = match choice {
                    BackendChoice::Auto => {
                        format!("auto: {}; {}", passed_over.join("; "), ebpf::AUTO_TP)
                    }
                    _ => forced("tp"),
                };
                return check(
                    "backend",
                    Status::Ok,
                    format!(
                        "tp: {} programs on syscalls/sys_enter_close and the other counted \
                         syscalls' tracepoints loaded, attached and detached; other syscalls \
                         take the slow path but run no program ({why}){ia32}",
                        ebpf::TP_PROGRAMS.iter().filter(|p| p.here).count()
                    ),
                );
            }
            Err(why) if choice == BackendChoice::Tp => {
                return check(
                    "backend",
                    Status::Fail,
                    format!("{}, but {why}", forced("tp")),
                )
            }
            Err(why) => passed_over.push(format!("tp would not work here: {why}")),
        }
    }
    let why = match choice {
        BackendChoice::Auto => format!("auto: {}", passed_over.join("; ")),
        _ => forced("raw-tp"),
    };
    check("backend", Status::Ok, format!("{raw_tp} ({why})"))
}

/// Whether the fentry programs load and attach (detached again); Err is why not.
fn fentry_attaches(bpf: &mut aya::Ebpf, kernel: &ebpf::KernelBtf) -> Result<(), String> {
    ebpf::probe_fentry(kernel.btf().map_err(|e| ebpf::one_line(&e))?)?;
    let btf = kernel.for_aya().map_err(|e| ebpf::one_line(&e))?;
    let attached = ebpf::attach_fentry(bpf, &btf, true).map_err(|e| ebpf::one_line(&e));
    ebpf::detach_fentry(bpf);
    attached
}

/// Whether the tp programs load and attach (detached again); Err is why not.
fn tp_attaches(bpf: &mut aya::Ebpf) -> Result<(), String> {
    ebpf::probe_tp()?;
    let attached = ebpf::attach_tp(bpf).map_err(|e| ebpf::one_line(&e));
    ebpf::detach_tp(bpf);
    attached
}

/// tracefs names the syscall tracepoints `trace` attaches for failed execs (their errno
/// and path; `trace` mounts it when missing, as perf does); tools users compare with (perf,
/// bpftrace) want it too: as root, mount it when missing.
fn tracefs_check(root: bool) -> Check {
    match std::fs::metadata(Path::new(TRACEFS).join("events")) {
        Ok(_) => return check("tracefs", Status::Ok, format!("mounted at {TRACEFS}")),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return check(
                "tracefs",
                Status::Ok,
                format!("{TRACEFS} is not readable by this user (trace mounts it as root)"),
            )
        }
        Err(_) => {}
    }
    if !root {
        return check(
            "tracefs",
            Status::Warn,
            format!("not mounted at {TRACEFS} (as root, doctor and trace mount it)"),
        );
    }
    match crate::sys::mount_tracefs() {
        Ok(()) => check(
            "tracefs",
            Status::Ok,
            format!("was not mounted: mounted it at {TRACEFS}"),
        ),
        Err(e) => check(
            "tracefs",
            Status::Warn,
            format!("not mounted and mount failed ({e}): trace reports failed execs without errno and path"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_capabilities_the_readme_lists_are_checked() {
        let bit = |c: u32| 1u64 << c;
        let three = bit(caps::CAP_BPF) | bit(caps::CAP_PERFMON) | bit(caps::CAP_SYS_PTRACE);
        let checks = caps_checks(three, None);
        let warn = checks
            .iter()
            .find(|c| c.name == "dac_read_search")
            .unwrap_or_else(|| panic!("no CAP_DAC_READ_SEARCH check: {checks:?}"));
        assert_eq!(warn.status, Status::Warn);
        let all = caps_checks(three | bit(caps::CAP_DAC_READ_SEARCH), None);
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0]
                .detail
                .ends_with("CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH"),
            "{all:?}"
        );
    }
}
