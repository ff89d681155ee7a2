//! `trace --origin`: the calls that make an fd (with or without close-on-exec) or change its
//! close-on-exec flag, declared once in [`for_each_origin_call!`], and the records the
//! programs send for them.
//!
//! Generated from the table: [`OriginCall`] (the kind of call, its JSON name, how it says
//! close-on-exec: [`Rule`], where its fds are: [`Place`]), the syscall numbers per
//! architecture ([`origin_sysno`]; i386's in [`OriginCall::of_ia32`]) and
//! [`OriginCall::of_sysno`]. What one call does to the fd table is [`effect`], pure, so that
//! the user side unit-tests what the eBPF side runs (and `unclosed` can share it). Native
//! syscalls only are followed: an x86_64 compat (ia32) call of the table is sent as a
//! marker ([`origin_flags::UNSEEN_IA32`]) so that its fds read `not seen: an ia32 call`.

use crate::RecordHeader;

/// Frames of the user stack kept per origin (bpf_get_stack, frame-pointer walk).
pub const ORIGIN_STACK_DEPTH: usize = 16;
/// Words copied from the top of the user stack (from the saved user sp): where the caller
/// of a libc wrapper built without frame pointers is found (see `fdaudit::engine::origin`).
pub const ORIGIN_SP_WORDS: usize = 32;
/// Fds one record carries (a pair, or the fds of recvmsg's SCM_RIGHTS messages).
pub const ORIGIN_FDS: usize = 8;
/// recvmmsg: messages looked at; and control messages per message.
pub const ORIGIN_MSGS: usize = 4;
pub const ORIGIN_CMSGS: usize = 2;
/// Capacity of [`crate::MAP_ORIGIN_SEEN`]: processes that sent an origin record.
pub const MAX_ORIGIN_PENDING: u32 = 16384;
/// Capacity of [`crate::MAP_ORIGIN_MADE`]: fds made with close-on-exec, per (process, fd),
/// least recently used first out.
pub const MAX_ORIGIN_MADE: u32 = 4096;

/// Slots of [`crate::MAP_ORIGIN_GATE`] (a power of two): indexed by [`gate_slot`].
pub const ORIGIN_GATE_SLOTS: u32 = 1 << 16;

/// `O_CLOEXEC` (= `SOCK_CLOEXEC`, `EFD_CLOEXEC`, `EPOLL_CLOEXEC`, `IN_CLOEXEC`,
/// `SFD_CLOEXEC`, `TFD_CLOEXEC`, `OPEN_TREE_CLOEXEC`) on x86_64 and aarch64.
pub const O_CLOEXEC: u64 = 0o2_000_000;
/// `MFD_CLOEXEC`, `FAN_CLOEXEC`.
pub const MFD_CLOEXEC: u64 = 1;
pub const FAN_CLOEXEC: u64 = 1;
/// `PERF_FLAG_FD_CLOEXEC`.
pub const PERF_FLAG_FD_CLOEXEC: u64 = 8;
/// `MSG_CMSG_CLOEXEC`: recvmsg's received fds get close-on-exec.
pub const MSG_CMSG_CLOEXEC: u64 = 0x4000_0000;
/// `FD_CLOEXEC`.
pub const FD_CLOEXEC: u64 = 1;
/// fcntl commands.
pub const F_DUPFD: u64 = 0;
pub const F_SETFD: u64 = 2;
pub const F_DUPFD_CLOEXEC: u64 = 1030;
/// ioctl requests (asm-generic: the same on x86_64 and aarch64): set and clear
/// close-on-exec.
pub const FIOCLEX: u64 = 0x5451;
pub const FIONCLEX: u64 = 0x5450;
/// `SOL_SOCKET` and `SCM_RIGHTS`.
pub const SOL_SOCKET: i32 = 1;
pub const SCM_RIGHTS: i32 = 1;
/// struct msghdr (LP64): where msg_control and msg_controllen are, and its size in a
/// struct mmsghdr (with msg_len and padding).
pub const MSGHDR_CONTROL: u64 = 32;
pub const MSGHDR_CONTROLLEN: u64 = 40;
pub const MMSGHDR_SIZE: u64 = 64;
/// struct cmsghdr (LP64): its size before the data (len u64, level i32, type i32).
pub const CMSGHDR_SIZE: u64 = 16;

/// Calls `$cb` with the table: `Variant "json name" = x86_64, aarch64, [i386 | ...]:
/// rule, place;` (`NONE` where the architecture lacks the call). The rule says how the
/// call asks for close-on-exec ([`Rule`]); the place where its new fds are ([`Place`]);
/// `special` rows are decided by [`effect`] itself.
#[macro_export]
macro_rules! for_each_origin_call {
    ($cb:ident) => {
        $cb! {
            Open "open" = 2, NONE, [5]: flag(1, O_CLOEXEC), result;
            Openat "openat" = 257, 56, [295]: flag(2, O_CLOEXEC), result;
            Openat2 "openat2" = 437, 437, [437]: special, result;
            Creat "creat" = 85, NONE, [8]: never, result;
            OpenByHandleAt "open_by_handle_at" = 304, 265, [342]: flag(2, O_CLOEXEC), result;
            Socket "socket" = 41, 198, [359]: flag(1, O_CLOEXEC), result;
            Socketpair "socketpair" = 53, 199, [360]: flag(1, O_CLOEXEC), pair(3);
            Accept "accept" = 43, 202, [NONE]: never, result;
            Accept4 "accept4" = 288, 242, [364]: flag(3, O_CLOEXEC), result;
            Recvmsg "recvmsg" = 47, 212, [372]: flag(2, MSG_CMSG_CLOEXEC), msg(1);
            Recvmmsg "recvmmsg" = 299, 243, [337 | 417]: flag(3, MSG_CMSG_CLOEXEC), msgs(1);
            Pipe "pipe" = 22, NONE, [42]: never, pair(0);
            Pipe2 "pipe2" = 293, 59, [331]: flag(1, O_CLOEXEC), pair(0);
            Dup "dup" = 32, 23, [41]: never, result;
            Dup2 "dup2" = 33, NONE, [63]: never, result;
            Dup3 "dup3" = 292, 24, [330]: flag(2, O_CLOEXEC), result;
            Fcntl "fcntl" = 72, 25, [55 | 221]: special, result;
            Ioctl "ioctl" = 16, 29, [54]: special, given(0);
            MemfdCreate "memfd_create" = 319, 279, [356]: flag(1, MFD_CLOEXEC), result;
            MemfdSecret "memfd_secret" = 447, 447, [447]: flag(0, O_CLOEXEC), result;
            Eventfd "eventfd" = 284, NONE, [323]: never, result;
            Eventfd2 "eventfd2" = 290, 19, [328]: flag(1, O_CLOEXEC), result;
            EpollCreate "epoll_create" = 213, NONE, [254]: never, result;
            EpollCreate1 "epoll_create1" = 291, 20, [329]: flag(0, O_CLOEXEC), result;
            InotifyInit "inotify_init" = 253, NONE, [291]: never, result;
            InotifyInit1 "inotify_init1" = 294, 26, [332]: flag(0, O_CLOEXEC), result;
            FanotifyInit "fanotify_init" = 300, 262, [338]: flag(0, FAN_CLOEXEC), result;
            Signalfd "signalfd" = 282, NONE, [321]: never, result;
            Signalfd4 "signalfd4" = 289, 74, [327]: flag(3, O_CLOEXEC), result;
            TimerfdCreate "timerfd_create" = 283, 85, [322]: flag(1, O_CLOEXEC), result;
            Userfaultfd "userfaultfd" = 323, 282, [374]: flag(0, O_CLOEXEC), result;
            PerfEventOpen "perf_event_open" = 298, 241, [336]: flag(4, PERF_FLAG_FD_CLOEXEC), result;
            PidfdOpen "pidfd_open" = 434, 434, [434]: always, result;
            PidfdGetfd "pidfd_getfd" = 438, 438, [438]: always, result;
            IoUringSetup "io_uring_setup" = 425, 425, [425]: special, result;
        }
    };
}

/// How a call asks for close-on-exec.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Bit `.1` of argument `.0`.
    Flag(usize, u64),
    /// It cannot: its fd is always inheritable.
    Never,
    /// Its fd always has close-on-exec.
    Always,
    /// Decided by [`effect`] (openat2's struct, fcntl's and ioctl's commands, io_uring).
    Special,
}

/// Where a call's new fds are at its exit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The call's result.
    Result,
    /// The two ints at the user address in argument `.0`.
    Pair(usize),
    /// The fd in argument `.0`.
    Given(usize),
    /// SCM_RIGHTS control messages of the struct msghdr at argument `.0`.
    Msg(usize),
    /// As `Msg`, in each struct mmsghdr of the vector at argument `.0` (the result counts
    /// them).
    Msgs(usize),
}

macro_rules! origin_calls {
    (@rule flag($i:literal, $bit:ident)) => { Rule::Flag($i, $bit) };
    (@rule never) => { Rule::Never };
    (@rule always) => { Rule::Always };
    (@rule special) => { Rule::Special };
    (@place result) => { Place::Result };
    (@place pair($i:literal)) => { Place::Pair($i) };
    (@place given($i:literal)) => { Place::Given($i) };
    (@place msg($i:literal)) => { Place::Msg($i) };
    (@place msgs($i:literal)) => { Place::Msgs($i) };
    ($($v:ident $name:literal = $x:tt, $a:tt, [$($i:tt)|*]:
       $rule:ident $(($($ra:tt)*))?, $place:ident $(($pa:literal))?;)*) => {
        /// A call that makes an fd or changes its close-on-exec flag (the record's `call`:
        /// its index in the table).
        #[repr(u32)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum OriginCall {
            $($v,)*
        }

        impl OriginCall {
            /// Every call, in table order.
            pub const ALL: &'static [OriginCall] = &[$(OriginCall::$v,)*];

            /// The syscall's name (the JSON `syscall`; fcntl's and ioctl's command is added
            /// by the user side).
            pub const fn name(self) -> &'static str {
                match self {
                    $(OriginCall::$v => $name,)*
                }
            }

            /// How the call asks for close-on-exec.
            #[inline(always)]
            pub const fn rule(self) -> Rule {
                match self {
                    $(OriginCall::$v => origin_calls!(@rule $rule $(($($ra)*))?),)*
                }
            }

            /// Where its new fds are.
            #[inline(always)]
            pub const fn place(self) -> Place {
                match self {
                    $(OriginCall::$v => origin_calls!(@place $place $(($pa))?),)*
                }
            }

            pub fn from_u32(v: u32) -> Option<Self> {
                Self::ALL.get(v as usize).copied()
            }

            /// The call syscall `nr` (this architecture's number) is, if any.
            #[inline(always)]
            #[allow(unreachable_patterns)] // NONE repeats
            pub fn of_sysno(nr: i64) -> Option<Self> {
                match nr {
                    $(origin_sysno::$v => Some(OriginCall::$v),)*
                    _ => None,
                }
            }

            /// The call an i386 (x86_64 compat) syscall number `nr` is, if any.
            #[inline(always)]
            #[allow(unreachable_patterns)] // NONE repeats
            pub fn of_ia32(nr: i64) -> Option<Self> {
                #[allow(unused_imports)]
                use crate::sysno::NONE;
                if nr == NONE {
                    return None;
                }
                match nr {
                    $($($i)|* => Some(OriginCall::$v),)*
                    _ => None,
                }
            }
        }

        /// The table's numbers for the architecture being built (as [`crate::sysno`]).
        #[allow(non_upper_case_globals)]
        pub mod origin_sysno {
            #[allow(unused_imports)]
            use crate::sysno::NONE;
            $(
                #[cfg(any(
                    bpf_target_arch = "aarch64",
                    all(not(target_arch = "bpf"), target_arch = "aarch64")
                ))]
                pub const $v: i64 = $a;
                #[cfg(not(any(
                    bpf_target_arch = "aarch64",
                    all(not(target_arch = "bpf"), target_arch = "aarch64")
                )))]
                pub const $v: i64 = $x;
            )*
        }
    };
}
for_each_origin_call!(origin_calls);

/// Where a call's new fds are found at its exit (a [`Place`] with the argument's value).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FdAt {
    /// The call's result.
    Result,
    /// The two ints at this user address (pipe, pipe2, socketpair).
    Pair(u64),
    /// This fd, when the call returned 0 (fcntl F_SETFD, ioctl FIONCLEX).
    Given(u64),
    /// The SCM_RIGHTS fds of the struct msghdr at this user address (recvmsg).
    Msg(u64),
    /// The same in the struct mmsghdr vector at this address (recvmmsg).
    Msgs(u64),
}

impl FdAt {
    /// The pending call's `at` and `addr` ([`OriginPending`]).
    #[inline(always)]
    pub fn encode(self) -> (u32, u64) {
        match self {
            FdAt::Result => (0, 0),
            FdAt::Pair(p) => (1, p),
            FdAt::Given(fd) => (2, fd),
            FdAt::Msg(p) => (3, p),
            FdAt::Msgs(p) => (4, p),
        }
    }
}

/// What one call does to the fd table, by [`effect`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Makes the fds at `at` (or, for `Given`, makes an existing fd inheritable: `cloexec`
    /// is then false). `cloexec`: the new fds have close-on-exec.
    Makes { at: FdAt, cloexec: bool },
    /// Sets close-on-exec on this fd again (FIOCLEX, F_SETFD with FD_CLOEXEC): it is no
    /// longer inheritable.
    SetsCloexec(u64),
    /// Makes fds by a path no syscall hook sees (io_uring's opens): the ring's fd.
    Blind,
}

/// [`OriginPending::what`]: the call makes inheritable fds, makes close-on-exec fds, sets
/// close-on-exec again, or sets up what fdaudit cannot follow.
pub mod pending_what {
    pub const INHERITABLE: u32 = 0;
    pub const CLOEXEC: u32 = 1;
    pub const SETS_CLOEXEC: u32 = 2;
    pub const BLIND: u32 = 3;
}

/// What call `call` with arguments `a` does to the fd table, if anything. `openat2_flags`
/// reads `open_how.flags` (user memory) when asked.
#[inline(always)]
pub fn effect(
    call: OriginCall,
    a: &[u64; 5],
    openat2_flags: impl FnOnce() -> u64,
) -> Option<Effect> {
    use OriginCall::*;
    let made = |at: FdAt, cloexec: bool| Some(Effect::Makes { at, cloexec });
    let at = match call.place() {
        Place::Result => FdAt::Result,
        Place::Pair(i) => FdAt::Pair(a[i]),
        Place::Given(i) => FdAt::Given(a[i]),
        Place::Msg(i) => FdAt::Msg(a[i]),
        Place::Msgs(i) => FdAt::Msgs(a[i]),
    };
    match call.rule() {
        Rule::Flag(i, bit) => made(at, a[i] & bit != 0),
        Rule::Never => made(at, false),
        Rule::Always => made(at, true),
        Rule::Special => match call {
            Openat2 => made(at, openat2_flags() & O_CLOEXEC != 0),
            Fcntl => match a[1] {
                F_DUPFD => made(FdAt::Result, false),
                F_DUPFD_CLOEXEC => made(FdAt::Result, true),
                F_SETFD if a[2] & FD_CLOEXEC == 0 => made(FdAt::Given(a[0]), false),
                F_SETFD => Some(Effect::SetsCloexec(a[0])),
                _ => None,
            },
            // The request is an unsigned int: the register's upper half is not its.
            Ioctl => match a[1] & 0xffff_ffff {
                FIONCLEX => made(FdAt::Given(a[0]), false),
                FIOCLEX => Some(Effect::SetsCloexec(a[0])),
                _ => None,
            },
            IoUringSetup => Some(Effect::Blind),
            _ => None,
        },
    }
}

/// Whether call `call` with arguments `a` makes an inheritable fd (or clears the flag),
/// and where its fd is then.
#[inline(always)]
pub fn inheritable(
    call: OriginCall,
    a: &[u64; 5],
    openat2_flags: impl FnOnce() -> u64,
) -> Option<FdAt> {
    match effect(call, a, openat2_flags)? {
        Effect::Makes { at, cloexec: false } => Some(at),
        _ => None,
    }
}

/// Bits of an origin record's [`RecordHeader::flags`].
pub mod origin_flags {
    /// Close-on-exec was set again on `fd[0]` (FIOCLEX, F_SETFD with FD_CLOEXEC): no
    /// stack; the fd is no longer inheritable.
    pub const CLEARED: u32 = 1 << 8;
    /// An ia32 call of the table (`call`) that fdaudit does not follow; no fd, no stack.
    pub const UNSEEN_IA32: u32 = 1 << 9;
    /// io_uring_setup: the ring's opens are not seen; `fd[0]` is the ring.
    pub const UNSEEN_URING: u32 = 1 << 10;
    /// More received fds than [`super::ORIGIN_FDS`]: the rest are not in the record.
    pub const FDS_CUT: u32 = 1 << 11;
    /// The [`super::OriginCreatedRecord`] sent just before names the call that made
    /// `fd[0]` with close-on-exec.
    pub const CREATED: u32 = 1 << 12;
}

/// A call in flight, from its sys_enter to its sys_exit, in the thread's
/// [`OriginGateSlot`].
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginPending {
    /// [`OriginCall`] value.
    pub call: u32,
    /// [`FdAt::encode`]'s kind: 0 the result; 1 the pair at `addr`; 2 fd `addr`; 3, 4 the
    /// message(s) at `addr`.
    pub at: u32,
    pub addr: u64,
    /// fcntl's or ioctl's command (the user side names it).
    pub cmd: u64,
    /// [`pending_what`].
    pub what: u32,
    pub _pad: u32,
}

/// A slot of [`crate::MAP_ORIGIN_GATE`]: the thread whose call is in flight there, and the
/// call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginGateSlot {
    /// The thread, by the address of its saved user registers (the raw syscall
    /// tracepoints' first argument: one `struct pt_regs` at the top of each thread's kernel
    /// stack), 0 for none: a thread tells its own slot at sys_exit without a helper call.
    pub owner: u64,
    /// `unclosed`: the process's execs seen (`TaskState::execs`) at sys_enter, so that
    /// sys_exit looks the process up no second time (no exec happens between the two).
    pub execs: u32,
    /// The process's parent (`TaskState::parent_pid`) at sys_enter, for the origin record:
    /// sys_exit looks the process up no second time.
    pub parent_pid: u32,
    pub pending: OriginPending,
}

/// The [`crate::MAP_ORIGIN_GATE`] slot of the thread whose saved registers are at `regs`:
/// kernel stacks are at least 16 KiB apart and aligned, so the bits above 14 tell them
/// apart (folded so that stacks 1 GiB apart share fewer slots).
#[inline(always)]
pub fn gate_slot(regs: u64) -> u32 {
    ((regs >> 14) ^ (regs >> 30)) as u32 & (ORIGIN_GATE_SLOTS - 1)
}

/// The call that made an fd with close-on-exec, kept per (tgid << 32 | fd) in
/// [`crate::MAP_ORIGIN_MADE`] (no ring record), and sent in an [`OriginCreatedRecord`] just
/// before the origin record of the call that later makes that fd inheritable.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OriginMade {
    /// The `struct file` address: the entry is this fd's only while the fd still holds it.
    pub file: u64,
    pub time_ns: u64,
    /// fcntl's command (F_DUPFD_CLOEXEC), else 0.
    pub cmd: u64,
    /// [`OriginCall`] value.
    pub call: u32,
    pub tid: u32,
    pub pid: u32,
    /// Frames in `stack`.
    pub nstack: u32,
    pub stack: [u64; ORIGIN_STACK_DEPTH],
    /// Words copied into `sp_words` (0 when the read failed), and the words at the user sp
    /// (as the record's: the caller of a libc wrapper is found there).
    pub nsp_words: u32,
    pub _pad: u32,
    pub sp_words: [u64; ORIGIN_SP_WORDS],
}

/// Sent at the exit of a call that made an inheritable fd ([`crate::RecordKind::Origin`]),
/// set close-on-exec again ([`origin_flags::CLEARED`]) or could not be followed
/// ([`origin_flags::UNSEEN_IA32`], [`origin_flags::UNSEEN_URING`]).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OriginRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub tid: u32,
    /// The process's parent as TRACKED knows it (0 when unknown).
    pub parent_pid: u32,
    /// [`OriginCall`] value.
    pub call: u32,
    /// Fds in `fd` (a pair: 2; SCM_RIGHTS: up to [`ORIGIN_FDS`]).
    pub nfd: u32,
    /// Origin records of this process lost before this one (ring buffer full).
    pub lost: u32,
    pub fd: [i32; ORIGIN_FDS],
    /// fcntl's or ioctl's command, else 0.
    pub cmd: u64,
    pub time_ns: u64,
    /// The identity of each fd's file: inode number and superblock dev (kernel encoding),
    /// as the spawn record's `FdInfo` has them (0 when the read failed).
    pub ino: [u64; ORIGIN_FDS],
    pub dev: [u32; ORIGIN_FDS],
    pub comm: [u8; 16],
    /// Frames in `stack` (bpf_get_stack bytes / 8; 0 when it failed).
    pub nstack: u32,
    /// Words copied into `sp_words` (0 when the read failed).
    pub nsp_words: u32,
    /// User return addresses, innermost first (frame-pointer walk).
    pub stack: [u64; ORIGIN_STACK_DEPTH],
    /// The main executable's text, mm->start_code..end_code: where its frames are found
    /// once the process is gone and its /proc/PID/maps with it.
    pub start_code: u64,
    pub end_code: u64,
    /// The user stack pointer at the call and the words above it.
    pub sp: u64,
    pub sp_words: [u64; ORIGIN_SP_WORDS],
}

/// Sent just before an origin record with [`origin_flags::CREATED`]
/// ([`crate::RecordKind::OriginCreated`]): a record of its own, so that the origin record
/// most calls send stays small.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OriginCreatedRecord {
    pub header: RecordHeader,
    /// The process and fd of the origin record that follows.
    pub pid: u32,
    pub fd: i32,
    pub made: OriginMade,
}

/// `struct bpf_stack_build_id`: one frame of bpf_get_stack with `BPF_F_USER_BUILD_ID`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginModule {
    /// `BPF_STACK_BUILD_ID_EMPTY` (0), `_VALID` ([`BUILD_ID_VALID`]: `build_id` and
    /// `offset` hold) or `_IP` (2: the kernel could not read it; `offset` is the address).
    pub status: i32,
    /// The module's GNU build id (20 bytes; a shorter one is zero-padded).
    pub build_id: [u8; 20],
    /// The frame's offset in the module's file.
    pub offset: u64,
}

/// [`OriginModule::status`]: build id and file offset are there.
pub const BUILD_ID_VALID: i32 = 1;

/// Sent after a process's first origin record with a stack
/// ([`crate::RecordKind::OriginModules`], by `origin_modules`, a tail call of `origin_exit`):
/// the same frame-pointer walk twice, as addresses and as (build id, file offset). Together
/// they give each module on the stack its load address, so that the stack of a process gone
/// before its /proc/PID/maps was read is still resolved and unwound.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct OriginModulesRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub tid: u32,
    /// Frames in `ips` and `modules` (0 when the walk failed).
    pub nips: u32,
    pub nmodules: u32,
    pub ips: [u64; ORIGIN_STACK_DEPTH],
    pub modules: [OriginModule; ORIGIN_STACK_DEPTH],
}

#[cfg(test)]
#[path = "origin_tests.rs"]
mod tests;
