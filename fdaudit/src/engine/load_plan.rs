//! Which programs a session loads, and in what order the loader attaches them
//! ([`super::loader`]).

use super::{
    counting::Counting,
    ebpf::{self, BackendChoice, ExecWalk, ProgramSpec},
};

/// The exec program, whose bounded variant loads differently.
pub(super) const EXEC: &str = "sched_process_exec";

/// The fork program: where a followed cgroup's processes begin to be traced.
const FORK: &str = "sched_process_fork";

/// Which programs a session loads, and in what order they are attached.
pub(super) struct Plan {
    /// The scheduler programs (fork, exec, exit).
    pub(super) sched: Vec<&'static ProgramSpec>,
    /// The raw-tracepoint syscall counters, when raw-tp is chosen.
    pub(super) raw_syscalls: Vec<&'static ProgramSpec>,
    /// Every program loaded in one go: the required ones, then the optional failed-exec ones,
    /// then tp's entry programs where tp is tried.
    pub(super) names: Vec<&'static str>,
    /// How many of `names` are required.
    pub(super) required: usize,
    /// Where the failed-exec ones end in `names` (tp's follow).
    pub(super) failed_exec_end: usize,
    pub(super) exec_walk: ExecWalk,
    pub(super) want_failed_exec: bool,
    /// tp is chosen, or auto's first try: its programs load with the others.
    pub(super) tries_tp: bool,
    /// A cgroup is followed (`--cgroup`, `watch`): the fork program begins tracing its
    /// processes on its own, so it is attached last, once every program that sees a traced
    /// process is. Attached before the exec program, a child forked and exec'd in between
    /// was traced with its exec unseen (reported `exec_missed`, with no path nor
    /// container); before the syscall counters or `unclosed`'s programs, with calls or fds
    /// uncounted. A traced command or `--pid` tree is added by fdaudit after the attach.
    pub(super) fork_last: bool,
}

/// raw-tp's syscall counters, `--reads`'s sys_exit with `reads`.
pub(super) fn raw_syscall_specs(reads: bool) -> impl Iterator<Item = &'static ProgramSpec> {
    ebpf::PROGRAMS
        .iter()
        .filter(move |p| p.syscall && (reads || !p.reads_only))
}

impl Plan {
    /// The plan of a session that counts `counting` with `backend`, and follows a cgroup
    /// or not (`--cgroup`, `watch`: [`Plan::fork_last`]).
    pub(super) fn new(
        counting: Counting,
        backend: BackendChoice,
        follows_cgroup: bool,
        exec_walk: ExecWalk,
    ) -> Self {
        let sched: Vec<&ProgramSpec> = ebpf::PROGRAMS.iter().filter(|p| !p.syscall).collect();
        // Loaded with the others only when chosen: auto tries tp first
        // (attach_syscall_counters) and loads raw-tp's programs only if it falls back.
        let raw_syscalls: Vec<&ProgramSpec> = match (counting.syscalls(), backend) {
            (true, BackendChoice::RawTp) => raw_syscall_specs(counting.reads()).collect(),
            _ => Vec::new(),
        };
        // Optional (see ebpf::FAILED_EXEC_PROGRAMS); needless with --no-syscalls, which does
        // not count exec attempts and so reports no failed exec. FDAUDIT_FAILED_EXEC=0 leaves
        // them out: the overhead benchmark's switch (bench/trace/overhead.py).
        let want_failed_exec =
            counting.syscalls() && std::env::var_os("FDAUDIT_FAILED_EXEC").is_none_or(|v| v != "0");
        let mut plan = Plan {
            sched,
            raw_syscalls,
            names: Vec::new(),
            required: 0,
            failed_exec_end: 0,
            exec_walk,
            want_failed_exec,
            tries_tp: counting.syscalls()
                && matches!(backend, BackendChoice::Tp | BackendChoice::Auto),
            fork_last: follows_cgroup,
        };
        plan.names = plan
            .sched
            .iter()
            .filter(|p| !plan.bounded(p))
            .chain(&plan.raw_syscalls)
            .map(|p| p.name)
            .collect();
        plan.required = plan.names.len();
        if want_failed_exec {
            plan.names
                .extend(ebpf::FAILED_EXEC_PROGRAMS.map(|(n, _)| n));
        }
        plan.failed_exec_end = plan.names.len();
        // tp's entry programs, where tp is tried: loaded in the same batch, beside the exec
        // program's verifier (rather than on their own after it); attaching them is still
        // attach_syscall_counters' choice (a failed load is retried there, for its error).
        if plan.tries_tp {
            plan.names
                .extend(ebpf::TP_PROGRAMS.iter().filter(|p| p.here).map(|p| p.name));
        }
        plan
    }

    /// The bounded exec walk (5.10, 5.15) fills a tail-call map between its loads: it
    /// keeps its own sequence, after the others.
    pub(super) fn bounded(&self, p: &ProgramSpec) -> bool {
        self.exec_walk == ExecWalk::Bounded && p.name == EXEC
    }

    /// Whether `name` waits for the end of the loader's `attach_programs`
    /// ([`Plan::fork_last`]).
    pub(super) fn attached_last(&self, name: &str) -> bool {
        self.fork_last && name == FORK
    }

    /// Whether `name` may be attached while the exec program is verified (the loader's
    /// `load_all`): a scheduler hook but the exec one and the fork one of a followed cgroup.
    pub(super) fn attached_early(&self, name: &str) -> bool {
        name != EXEC && !self.attached_last(name)
    }
}
