//! The tp backend: the counted syscalls' own tracepoints (`syscalls/sys_enter_close`, ...),
//! one program each, named through tracefs.
//!
//! The programs read a call's arguments at fixed offsets of the tracepoint's record
//! (`struct syscall_trace_enter`: the common header, `int __syscall_nr` at 8, the arguments
//! as 8-byte words from 16). That layout is the kernel's since 2.6.33, and each event's
//! `format` file states it; [`probe_tp`] reads those files and refuses the backend where
//! they say otherwise, so `auto` falls back to raw tracepoints there.
//!
//! What tp cannot see: on x86_64 an ia32 syscall (`int $0x80`, or a 32-bit process) fires
//! no native syscall tracepoint (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS), where the raw
//! `sys_enter` sees and counts it (flagged `compat_syscalls`). fentry has the same blind
//! spot (it hooks the `__x64_sys_*` entry points only). [`ia32_syscalls`] says whether the
//! kernel runs such calls at all; `trace` then says, in a note, that this backend does not
//! count them.

use std::path::{Path, PathBuf};

use aya::{programs::TracePoint, Ebpf};

use super::{program_as, LoadError, TpSpec, TP_PROGRAMS, TP_READ_PROGRAMS};
use crate::{engine::btf::Btf, sys::TRACEFS};

/// The programs this architecture has a syscall for.
fn here() -> impl Iterator<Item = &'static TpSpec> {
    TP_PROGRAMS.iter().filter(|p| p.here)
}

/// Whether every counted syscall's entry tracepoint exists (mounting tracefs when it is
/// missing, as trace does anyway for the failed-exec programs) with the record layout the
/// programs read. Err is the reason, in one line.
pub fn probe_tp() -> Result<(), String> {
    if !crate::sys::ensure_tracefs() {
        return Err(format!(
            "tracefs is not mounted at {TRACEFS} and could not be"
        ));
    }
    for spec in here() {
        let text = format_of(spec)?;
        check_layout(&text).map_err(|why| format!("syscalls/{}: {why}", spec.tracepoint))?;
    }
    Ok(())
}

/// Whether `--reads` can come from the read syscalls' exit tracepoints: they exist with
/// the record layout `tp_exit_*` read (`ret` at 16), and tracepoint programs may call
/// bpf_get_current_task_btf (5.11) and bpf_task_pt_regs (5.15), which give them the fd.
/// Err is why not, in one line (raw `sys_exit` counts the reads then).
pub fn probe_tp_reads() -> Result<(), String> {
    use aya::{
        programs::ProgramType,
        sys::{is_helper_supported, BpfHelper},
    };
    for helper in [
        BpfHelper::BPF_FUNC_get_current_task_btf,
        BpfHelper::BPF_FUNC_task_pt_regs,
    ] {
        if !is_helper_supported(ProgramType::TracePoint, helper).unwrap_or(false) {
            return Err(format!(
                "tracepoint programs cannot call {helper:?} here (5.15+)"
            ));
        }
    }
    for spec in TP_READ_PROGRAMS.iter().filter(|p| p.here) {
        let text = format_of(spec)?;
        check_exit_layout(&text).map_err(|why| format!("syscalls/{}: {why}", spec.tracepoint))?;
    }
    Ok(())
}

/// File `file` (`format`, `id`) of syscall tracepoint `tracepoint` in tracefs.
pub(super) fn syscall_event_file(tracepoint: &str, file: &str) -> PathBuf {
    Path::new(TRACEFS)
        .join("events/syscalls")
        .join(tracepoint)
        .join(file)
}

/// The `format` file of a syscall tracepoint.
fn format_of(spec: &TpSpec) -> Result<String, String> {
    let path = syscall_event_file(spec.tracepoint, "format");
    std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "no tracepoint syscalls/{} ({}: {e}; the kernel needs CONFIG_FTRACE_SYSCALLS)",
            spec.tracepoint,
            path.display()
        )
    })
}

/// The non-common fields of an event's `format`: (name, offset, size).
fn fields(format: &str) -> Vec<(&str, u32, u32)> {
    format
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let decl = l.strip_prefix("field:")?.split(';').next()?;
            let name = decl.rsplit([' ', '*']).next()?;
            let num = |key: &str| -> Option<u32> {
                l.split(';')
                    .find_map(|p| p.trim().strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some((name, num("offset:")?, num("size:")?))
        })
        .filter(|(name, _, _)| !name.starts_with("common_"))
        .collect()
}

/// Checks a sys_exit event's `format`: `__syscall_nr` an int at 8, `ret` 8 bytes at 16.
fn check_exit_layout(format: &str) -> Result<(), String> {
    match fields(format).as_slice() {
        [("__syscall_nr", 8, 4), ("ret", 16, 8), ..] => Ok(()),
        other => Err(format!(
            "not __syscall_nr (int at 8) then ret (8 bytes at 16): {other:?}"
        )),
    }
}

/// Checks a sys_enter event's `format`: `__syscall_nr` at 8, then the (first three)
/// arguments as 8-byte fields at 16, 24, 32.
fn check_layout(format: &str) -> Result<(), String> {
    let fields = fields(format);
    let Some(((nr, 8, 4), args)) = fields.split_first().map(|(f, a)| (*f, a)) else {
        return Err(format!(
            "__syscall_nr is not an int at offset 8: {fields:?}"
        ));
    };
    if nr != "__syscall_nr" {
        return Err(format!("the first field is {nr}, not __syscall_nr"));
    }
    // The arguments the programs read (the first three); newer kernels add fields after
    // them (7.2: `__filename_val`, the string a pointer argument points to).
    for (i, (name, offset, size)) in (0u32..).zip(args.iter().take(3)) {
        if (*offset, *size) != (16 + 8 * i, 8) {
            return Err(format!(
                "argument {name} is at offset {offset} (size {size}), not {} (size 8)",
                16 + 8 * i
            ));
        }
    }
    Ok(())
}

/// Loads and attaches every tp program. On a failure the ones attached are detached again
/// (so that a fallback to raw tracepoints never counts a call twice).
pub fn attach_tp(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    attach_all(ebpf, here())
}

/// [`attach_tp`] for programs loaded beforehand and borrowed on their own (from
/// [`Ebpf::programs_mut`], while another thread loads the exec program): each of
/// [`TP_PROGRAMS`] found in `progs` by name is attached. On an error the caller detaches
/// them with [`detach_tp`].
pub fn attach_loaded_tp<'p>(
    progs: impl IntoIterator<Item = (&'p str, &'p mut aya::programs::Program)>,
) -> Result<(), LoadError> {
    let table = |name: &str| {
        here()
            .find(|s| s.name == name)
            .map(|s| (s.name, s.tracepoint))
    };
    attach_loaded_syscall_tps(progs, table, here().count(), "a tp program")
}

/// Attaches each program of `progs` (loaded beforehand) that `table` names, (name, syscall
/// tracepoint), to that tracepoint; the others are passed over. Err on the first that does
/// not attach, or when fewer than `want` were found (`what` names the missing one).
pub(super) fn attach_loaded_syscall_tps<'p>(
    progs: impl IntoIterator<Item = (&'p str, &'p mut aya::programs::Program)>,
    table: impl Fn(&str) -> Option<(&'static str, &'static str)>,
    want: usize,
    what: &'static str,
) -> Result<(), LoadError> {
    let mut attached = 0;
    for (name, prog) in progs {
        let Some((name, tracepoint)) = table(name) else {
            continue;
        };
        let prog: &mut TracePoint = prog
            .try_into()
            .map_err(|_| LoadError::MissingProgram(name))?;
        prog.attach("syscalls", tracepoint)
            .map_err(|source| LoadError::AttachTracepoint {
                name,
                tracepoint,
                source,
            })?;
        attached += 1;
    }
    match attached == want {
        true => Ok(()),
        false => Err(LoadError::MissingProgram(what)),
    }
}

/// Loads and attaches the `--reads` programs on the read syscalls' exit tracepoints (after
/// [`probe_tp_reads`]); on a failure, as [`attach_tp`], every tp program is detached.
pub fn attach_tp_reads(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    attach_all(ebpf, TP_READ_PROGRAMS.iter().filter(|p| p.here))
}

fn attach_all<'a>(
    ebpf: &mut Ebpf,
    mut specs: impl Iterator<Item = &'a TpSpec>,
) -> Result<(), LoadError> {
    let attached = specs.try_for_each(|spec| {
        let prog: &mut TracePoint = program_as(ebpf, spec.name, spec.name, "a tracepoint")?;
        // One program may serve several tracepoints (TP_READ_PROGRAMS): loaded once.
        if prog.fd().is_err() {
            prog.load().map_err(|source| LoadError::Verifier {
                name: spec.name,
                summary: super::verifier_summary(&source),
                source,
            })?;
        }
        prog.attach("syscalls", spec.tracepoint)
            .map(drop)
            .map_err(|source| LoadError::AttachTracepoint {
                name: spec.name,
                tracepoint: spec.tracepoint,
                source,
            })
    });
    if attached.is_err() {
        detach_tp(ebpf);
    }
    attached
}

/// Detaches and unloads the tp programs (those loaded).
pub fn detach_tp(ebpf: &mut Ebpf) {
    for spec in TP_PROGRAMS.iter().chain(&TP_READ_PROGRAMS) {
        if let Ok(p) = program_as::<TracePoint>(ebpf, spec.name, spec.name, "a tracepoint") {
            let _ = p.unload();
        }
    }
}

/// Whether this kernel runs ia32 (`int $0x80`) syscalls, which the native-only backends
/// (tp, fentry) do not see: x86_64 with CONFIG_IA32_EMULATION (its entry points are in the
/// BTF). A kernel booted with `ia32_emulation=0` is counted as running them: saying too
/// much rather than too little.
pub fn ia32_syscalls(btf: &Btf) -> bool {
    cfg!(target_arch = "x86_64") && btf.func_id("__ia32_sys_close").is_some()
}

/// What a native-only backend does not count, for `trace`'s note and doctor.
pub const IA32_UNSEEN: &str = "32-bit (int $0x80) syscalls, which this kernel runs, are not \
                               counted by this backend: --backend raw-tp counts them";

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSE: &str = "name: sys_enter_close\nID: 776\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:unsigned int fd;\toffset:16;\tsize:8;\tsigned:0;\n\n\
        print fmt: \"fd: 0x%08lx\", ((unsigned long)(REC->fd))\n";

    #[test]
    fn the_record_layout_is_checked_from_the_format_file() {
        assert_eq!(check_layout(CLOSE), Ok(()));
        let execve = CLOSE.replace(
            "\tfield:unsigned int fd;\toffset:16;\tsize:8;\tsigned:0;\n",
            "\tfield:const char * filename;\toffset:16;\tsize:8;\tsigned:0;\n\
             \tfield:const char *const * argv;\toffset:24;\tsize:8;\tsigned:0;\n",
        );
        assert_eq!(check_layout(&execve), Ok(()));
        let moved = CLOSE.replace("offset:16;", "offset:12;");
        assert!(check_layout(&moved)
            .unwrap_err()
            .contains("fd is at offset 12"));
        let no_nr = CLOSE.replace("offset:8;\tsize:4", "offset:8;\tsize:8");
        assert!(check_layout(&no_nr).is_err());
        // 7.2 records the string a pointer argument points to, after the arguments.
        let strings = execve.replace(
            "\n\nprint fmt",
            "\tfield:__data_loc char[] __filename_val;\toffset:40;\tsize:4;\tsigned:0;\n\nprint fmt",
        );
        assert_eq!(check_layout(&strings), Ok(()));
    }

    /// tracefs's `events/syscalls/sys_exit_read/format` on 6.18.
    const EXIT_READ: &str = "name: sys_exit_read\nID: 841\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n\n\
        print fmt: \"0x%lx\", REC->ret\n";

    #[test]
    fn an_exit_record_is_read_only_where_ret_is_a_long_at_16() {
        assert_eq!(check_exit_layout(EXIT_READ), Ok(()));
        let moved = EXIT_READ.replace("offset:16;\tsize:8", "offset:12;\tsize:8");
        assert!(check_exit_layout(&moved).is_err());
        let int = EXIT_READ.replace(
            "long ret;\toffset:16;\tsize:8",
            "int ret;\toffset:16;\tsize:4",
        );
        assert!(check_exit_layout(&int).is_err());
    }

    #[test]
    fn every_read_syscall_has_a_tp_program_on_its_exit_tracepoint() {
        let fexit: Vec<&str> = super::super::FENTRY_PROGRAMS
            .iter()
            .filter(|p| p.reads_only)
            .map(|p| p.syscall)
            .collect();
        let tp: Vec<&str> = TP_READ_PROGRAMS
            .iter()
            .map(|p| p.tracepoint.strip_prefix("sys_exit_").unwrap())
            .collect();
        assert_eq!(tp, fexit);
        assert!(TP_READ_PROGRAMS.iter().all(|p| p.name == "tp_exit_read"));
    }

    #[test]
    fn every_counted_syscall_has_a_tp_program_on_its_own_tracepoint() {
        let fentry: Vec<&str> = super::super::FENTRY_PROGRAMS
            .iter()
            .filter(|p| !p.reads_only)
            .map(|p| p.syscall)
            .collect();
        let tp: Vec<&str> = TP_PROGRAMS
            .iter()
            .map(|p| p.tracepoint.strip_prefix("sys_enter_").unwrap())
            .collect();
        assert_eq!(tp, fentry);
        assert!(TP_PROGRAMS
            .iter()
            .all(|p| p.name == format!("tp_{}", &p.tracepoint[10..])));
    }
}
