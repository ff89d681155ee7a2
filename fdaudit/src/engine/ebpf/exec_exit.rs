//! The optional failed-exec programs: on the exec syscalls' exit tracepoints, they record a
//! failed exec's errno and path.

use aya::{programs::Program, Ebpf};

use super::{load_program, tp::attach_loaded_syscall_tps, LoadError};

/// The optional programs on the exec syscalls' exit tracepoints (syscalls category), with
/// the tracepoint each attaches to: they record a failed exec's errno and path
/// ([`fdaudit_common::MAP_EXEC_FAILS`]). Only execve exits run them; every other syscall's
/// exit on the machine pays the syscall exit tracepoint's "is it enabled" bit test
/// (docs/performance.md). Without tracefs
/// or CONFIG_FTRACE_SYSCALLS, trace runs without them.
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

/// The entry of [`EXEC_EXIT_PROGRAMS`] for program `name`: (name, tracepoint), or None
/// when `name` is not one of them.
pub fn exec_exit_program(name: &str) -> Option<(&'static str, &'static str)> {
    EXEC_EXIT_PROGRAMS.iter().find(|(n, _)| *n == name).copied()
}

/// Attaches [`EXEC_EXIT_PROGRAMS`], loaded beforehand (see [`load_program`]).
pub fn attach_exec_exit_loaded(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    attach_loaded_exec_exit(ebpf.programs_mut())
}

/// Attaches [`EXEC_EXIT_PROGRAMS`] from `progs` (name, program), loaded beforehand; the
/// others in `progs` are passed over. Err when one is missing or does not attach.
pub fn attach_loaded_exec_exit<'p>(
    progs: impl IntoIterator<Item = (&'p str, &'p mut Program)>,
) -> Result<(), LoadError> {
    let want = EXEC_EXIT_PROGRAMS.len();
    attach_loaded_syscall_tps(progs, exec_exit_program, want, "an exec_exit program")
}
