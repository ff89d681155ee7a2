//! The optional failed-exec programs: on the exec syscalls' exit tracepoints, they record a
//! failed exec's errno and path.

use aya::{programs::Program, Ebpf};

use super::{load_program, tp::attach_loaded_syscall_tps, LoadError};

/// The optional programs on the exec syscalls' exit tracepoints (syscalls category), with
/// the tracepoint each attaches to: they record a failed exec's errno and path
/// ([`fdaudit_common::MAP_FAILED_EXECS`]). Only execve exits run them; every other syscall's
/// exit on the machine pays the syscall exit tracepoint's "is it enabled" bit test
/// (docs/performance.md). Without tracefs
/// or CONFIG_FTRACE_SYSCALLS, trace runs without them.
pub const FAILED_EXEC_PROGRAMS: [(&str, &str); 2] = [
    ("failed_exec", "sys_exit_execve"),
    ("failed_execat", "sys_exit_execveat"),
];

/// Loads and attaches [`FAILED_EXEC_PROGRAMS`].
pub fn attach_failed_exec(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    for (name, _) in FAILED_EXEC_PROGRAMS {
        let prog = ebpf
            .program_mut(name)
            .ok_or(LoadError::MissingProgram(name))?;
        load_program(prog, name)?;
    }
    attach_failed_exec_loaded(ebpf)
}

/// The entry of [`FAILED_EXEC_PROGRAMS`] for program `name`: (name, tracepoint), or None
/// when `name` is not one of them.
pub fn failed_exec_program(name: &str) -> Option<(&'static str, &'static str)> {
    FAILED_EXEC_PROGRAMS
        .iter()
        .find(|(n, _)| *n == name)
        .copied()
}

/// Attaches [`FAILED_EXEC_PROGRAMS`], loaded beforehand (see [`load_program`]).
pub fn attach_failed_exec_loaded(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    attach_loaded_failed_exec(ebpf.programs_mut())
}

/// Attaches [`FAILED_EXEC_PROGRAMS`] from `progs` (name, program), loaded beforehand; the
/// others in `progs` are passed over. Err when one is missing or does not attach.
pub fn attach_loaded_failed_exec<'p>(
    progs: impl IntoIterator<Item = (&'p str, &'p mut Program)>,
) -> Result<(), LoadError> {
    let want = FAILED_EXEC_PROGRAMS.len();
    attach_loaded_syscall_tps(progs, failed_exec_program, want, "a failed-exec program")
}
