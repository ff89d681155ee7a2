//! The programs in the object: the raw tracepoint programs and the fentry backend's, with
//! what each hooks.

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

/// `trace --origin`'s programs (fdaudit-ebpf/src/origin.rs): attached only with the option,
/// on any backend.
pub const ORIGIN_PROGRAMS: [ProgramSpec; 2] = [
    ProgramSpec {
        name: "origin_enter",
        tracepoint: "sys_enter",
        syscall: true,
        reads_only: false,
    },
    ProgramSpec {
        name: "origin_exit",
        tracepoint: "sys_exit",
        syscall: true,
        reads_only: false,
    },
];

/// `fdaudit unclosed`'s programs (the origin programs' code in its own mode, so that
/// neither pair carries the other's paths): attached only by that command.
pub const UNCLOSED_PROGRAMS: [ProgramSpec; 2] = [
    ProgramSpec {
        name: "unclosed_enter",
        tracepoint: "sys_enter",
        syscall: true,
        reads_only: false,
    },
    ProgramSpec {
        name: "unclosed_exit",
        tracepoint: "sys_exit",
        syscall: true,
        reads_only: false,
    },
];

/// `fdaudit unclosed`'s count of io_uring requests that can make fds
/// (fdaudit-ebpf/src/io_uring.rs): attached where the kernel has the event
/// (`Config::io_kiocb_opcode` found).
pub const UNCLOSED_IO_URING: ProgramSpec = ProgramSpec {
    name: "unclosed_io_uring",
    tracepoint: "io_uring_submit_req",
    syscall: false,
    reads_only: false,
};

/// The programs of `trace --origin` and of `fdaudit unclosed` that a session runs.
pub fn mode_programs(origin: bool, unclosed: bool) -> impl Iterator<Item = &'static ProgramSpec> {
    let origin = ORIGIN_PROGRAMS.iter().filter(move |_| origin);
    origin.chain(UNCLOSED_PROGRAMS.iter().filter(move |_| unclosed))
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

/// `FENTRY_PROGRAMS`, from the counter table (`fdaudit_common::counter_table!`): the
/// eBPF crate makes its fentry and fexit programs from the same lines.
macro_rules! fentry_programs {
    (
        counted { $( ($name:ident $prog:ident) )* }
        reads { $( ($rname:ident $rprog:ident) )* }
    ) => {
        /// The fentry backend's programs: the same counts as `sys_enter` and `sys_exit`, one
        /// program per counted syscall.
        pub const FENTRY_PROGRAMS: [FentrySpec; [$(stringify!($prog),)* $(stringify!($rprog),)*].len()] = [
            $( entry(stringify!($prog), stringify!($name)), )*
            $( read_exit(stringify!($rprog), stringify!($rname)), )*
        ];
    };
}

fdaudit_common::counter_table!(counted [name prog], reads [name prog] => fentry_programs);

/// A program of the tp backend and the syscall tracepoint it attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpSpec {
    /// `tp_close`.
    pub name: &'static str,
    /// `sys_enter_close`, in the `syscalls` category.
    pub tracepoint: &'static str,
    /// The syscall exists on this architecture (aarch64 has no poll or dup2).
    pub here: bool,
}

/// `TP_PROGRAMS`, from the counter table: the eBPF crate's `tp.rs` names its programs the
/// same way (`tp_` and the syscall's name).
macro_rules! tp_programs {
    (counted { $( ($name:ident $sysno:ident) )* }) => {
        /// The tp backend's programs: the same counts as `sys_enter`, one program per
        /// counted syscall, each on that syscall's own entry tracepoint.
        pub const TP_PROGRAMS: [TpSpec; [$(stringify!($name),)*].len()] = [
            $( TpSpec {
                name: concat!("tp_", stringify!($name)),
                tracepoint: concat!("sys_enter_", stringify!($name)),
                here: fdaudit_common::sysno::$sysno != fdaudit_common::sysno::NONE,
            }, )*
        ];
    };
}

fdaudit_common::counter_table!(counted [name sysno] => tp_programs);

/// `TP_READ_PROGRAMS`, from the counter table's `reads`: one program, the eBPF crate's
/// `tp_exit_read`, on each read syscall's exit tracepoint.
macro_rules! tp_read_programs {
    (reads { $( ($rname:ident $rsysno:ident) )* }) => {
        /// The tp backend's `--reads` attachments: the one program `tp_exit_read` (the
        /// exit record has no syscall-specific field, so one program serves them all and
        /// the verifier runs once, docs/performance.md) on each read
        /// syscall's exit tracepoint, where the kernel has the helpers it needs (else raw
        /// `sys_exit`).
        pub const TP_READ_PROGRAMS: [TpSpec; [$(stringify!($rname),)*].len()] = [
            $( TpSpec {
                name: TP_EXIT_READ,
                tracepoint: concat!("sys_exit_", stringify!($rname)),
                here: fdaudit_common::sysno::$rsysno != fdaudit_common::sysno::NONE,
            }, )*
        ];
    };
}

fdaudit_common::counter_table!(reads [name sysno] => tp_read_programs);

/// The one program of [`TP_READ_PROGRAMS`].
pub const TP_EXIT_READ: &str = "tp_exit_read";
