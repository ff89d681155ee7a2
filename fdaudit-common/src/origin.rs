//! `trace --origin`: the calls that create an fd without close-on-exec (or clear the flag),
//! declared once in [`for_each_origin_call!`], and the record the programs send for each.
//!
//! Generated from the table: [`OriginCall`] (the kind of call, its JSON name), the syscall
//! numbers per architecture ([`origin_sysno`]) and [`OriginCall::of_sysno`]. The rule that
//! says whether one call made an inheritable fd is [`inheritable`], pure, so that the user
//! side unit-tests what the eBPF side runs. Native syscalls only: an x86_64 compat (ia32)
//! call is not recorded (its fds are reported with an unknown origin).

use crate::RecordHeader;

/// Frames of the user stack kept per origin (bpf_get_stack, frame-pointer walk).
pub const ORIGIN_STACK_DEPTH: usize = 16;
/// Words copied from the top of the user stack (from the saved user sp): where the caller
/// of a libc wrapper built without frame pointers is found (see `fdaudit::tracer::origin`).
pub const ORIGIN_SP_WORDS: usize = 32;
/// Capacity of [`crate::MAP_ORIGIN_PENDING`]: calls in flight (one per thread at most).
pub const MAX_ORIGIN_PENDING: u32 = 16384;

/// Slots of [`crate::MAP_ORIGIN_GATE`] (a power of two): indexed by `tid & (slots - 1)`.
pub const ORIGIN_GATE_SLOTS: u32 = 1 << 16;

/// `O_CLOEXEC` (= `SOCK_CLOEXEC`, `EFD_CLOEXEC`, `EPOLL_CLOEXEC`, `IN_CLOEXEC`,
/// `SFD_CLOEXEC`, `TFD_CLOEXEC`) on x86_64 and aarch64.
pub const O_CLOEXEC: u64 = 0o2_000_000;
/// `MFD_CLOEXEC`.
pub const MFD_CLOEXEC: u64 = 1;
/// `FD_CLOEXEC`.
pub const FD_CLOEXEC: u64 = 1;
/// fcntl commands.
pub const F_DUPFD: u64 = 0;
pub const F_SETFD: u64 = 2;

/// Calls `$cb` with the table: `Variant "json name" = x86_64, aarch64;` (`NONE` where the
/// architecture lacks the call). fcntl appears twice (F_DUPFD, F_SETFD): one number.
#[macro_export]
macro_rules! for_each_origin_call {
    ($cb:ident) => {
        $cb! {
            Open "open" = 2, NONE;
            Openat "openat" = 257, 56;
            Openat2 "openat2" = 437, 437;
            Creat "creat" = 85, NONE;
            Socket "socket" = 41, 198;
            Socketpair "socketpair" = 53, 199;
            Accept "accept" = 43, 202;
            Accept4 "accept4" = 288, 242;
            Pipe "pipe" = 22, NONE;
            Pipe2 "pipe2" = 293, 59;
            Dup "dup" = 32, 23;
            Dup2 "dup2" = 33, NONE;
            Dup3 "dup3" = 292, 24;
            Fcntl "fcntl" = 72, 25;
            MemfdCreate "memfd_create" = 319, 279;
            Eventfd "eventfd" = 284, NONE;
            Eventfd2 "eventfd2" = 290, 19;
            EpollCreate "epoll_create" = 213, NONE;
            EpollCreate1 "epoll_create1" = 291, 20;
            InotifyInit "inotify_init" = 253, NONE;
            InotifyInit1 "inotify_init1" = 294, 26;
            Signalfd "signalfd" = 282, NONE;
            Signalfd4 "signalfd4" = 289, 74;
            TimerfdCreate "timerfd_create" = 283, 85;
        }
    };
}

macro_rules! origin_calls {
    ($($v:ident $name:literal = $x:tt, $a:tt;)*) => {
        /// A call that can create an inheritable fd (the record's `call`: its index in the table).
        #[repr(u32)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum OriginCall {
            $($v,)*
        }

        impl OriginCall {
            /// Every call, in table order.
            pub const ALL: &'static [OriginCall] = &[$(OriginCall::$v,)*];

            /// The syscall's name (the JSON `syscall`; fcntl's command is added by the
            /// user side).
            pub const fn name(self) -> &'static str {
                match self {
                    $(OriginCall::$v => $name,)*
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

/// Where the new inheritable fd of a call is found at its exit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FdAt {
    /// The call's result.
    Result,
    /// The two ints at this user address (pipe, pipe2, socketpair).
    Pair(u64),
    /// This fd, when the call returned 0 (fcntl F_SETFD without FD_CLOEXEC).
    Given(u64),
}

/// Whether call `call` with arguments `a` creates an fd without close-on-exec (or clears
/// the flag), and where its fd is then. `openat2_flags` reads `open_how.flags` (user
/// memory) when asked. pidfd_open is not in the table: its fd is always close-on-exec.
#[inline(always)]
pub fn inheritable(
    call: OriginCall,
    a: &[u64; 4],
    openat2_flags: impl FnOnce() -> u64,
) -> Option<FdAt> {
    use OriginCall::*;
    let no = |flags: u64, bit: u64| flags & bit == 0;
    let keep = match call {
        Open => no(a[1], O_CLOEXEC),
        Openat => no(a[2], O_CLOEXEC),
        Openat2 => no(openat2_flags(), O_CLOEXEC),
        Socket => no(a[1], O_CLOEXEC),
        Socketpair => return no(a[1], O_CLOEXEC).then_some(FdAt::Pair(a[3])),
        Accept4 => no(a[3], O_CLOEXEC),
        Pipe => return Some(FdAt::Pair(a[0])),
        Pipe2 => return no(a[1], O_CLOEXEC).then_some(FdAt::Pair(a[0])),
        Dup3 => no(a[2], O_CLOEXEC),
        Fcntl => match a[1] {
            F_DUPFD => true,
            F_SETFD if no(a[2], FD_CLOEXEC) => return Some(FdAt::Given(a[0])),
            _ => false,
        },
        MemfdCreate => no(a[1], MFD_CLOEXEC),
        Eventfd2 | EpollCreate1 | InotifyInit1 => no(a[1], O_CLOEXEC),
        Signalfd4 => no(a[3], O_CLOEXEC),
        TimerfdCreate => no(a[1], O_CLOEXEC),
        Creat | Accept | Dup | Dup2 | Eventfd | EpollCreate | InotifyInit | Signalfd => true,
    };
    keep.then_some(FdAt::Result)
}

/// A call in flight, at sys_enter, keyed by the thread (pid_tgid).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginPending {
    /// [`OriginCall`] value.
    pub call: u32,
    /// 0: the result; 1: the pair at `addr`; 2: fd `addr` (F_SETFD).
    pub at: u32,
    pub addr: u64,
    /// fcntl's command (the user side names F_DUPFD and F_SETFD).
    pub cmd: u64,
}

/// Sent at the exit of a call that made an inheritable fd ([`crate::RecordKind::Origin`]).
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
    /// The new fds: `fd[1]` is -1 unless the call made a pair.
    pub fd: [i32; 2],
    /// fcntl's command, else 0.
    pub cmd: u64,
    pub time_ns: u64,
    /// The identity of each fd's file: inode number and superblock dev (kernel encoding),
    /// as the spawn record's `FdInfo` has them (0 when the read failed).
    pub ino: [u64; 2],
    pub dev: [u32; 2],
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a0: u64, a1: u64, a2: u64, a3: u64) -> [u64; 4] {
        [a0, a1, a2, a3]
    }

    #[test]
    fn only_calls_without_their_cloexec_flag_make_inheritable_fds() {
        let none = || 0;
        let ok = Some(FdAt::Result);
        assert_eq!(inheritable(OriginCall::Open, &args(0, 0, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Open, &args(0, O_CLOEXEC, 0, 0), none),
            None
        );
        assert_eq!(inheritable(OriginCall::Openat, &args(0, 0, 2, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Openat, &args(0, 0, O_CLOEXEC | 2, 0), none),
            None
        );
        assert_eq!(
            inheritable(OriginCall::Openat2, &args(0, 0, 0, 0), || O_CLOEXEC),
            None
        );
        assert_eq!(
            inheritable(OriginCall::Openat2, &args(0, 0, 0, 0), || 2),
            ok
        );
        assert_eq!(inheritable(OriginCall::Creat, &args(0, 0, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Socket, &args(1, 1 | O_CLOEXEC, 0, 0), none),
            None
        );
        assert_eq!(inheritable(OriginCall::Socket, &args(1, 1, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Socketpair, &args(1, 1, 0, 0x1000), none),
            Some(FdAt::Pair(0x1000))
        );
        assert_eq!(
            inheritable(OriginCall::Socketpair, &args(1, 1 | O_CLOEXEC, 0, 8), none),
            None
        );
        assert_eq!(inheritable(OriginCall::Accept, &args(3, 0, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Accept4, &args(3, 0, 0, O_CLOEXEC), none),
            None
        );
        assert_eq!(
            inheritable(OriginCall::Accept4, &args(3, 0, 0, 0o4000), none),
            ok
        );
        assert_eq!(
            inheritable(OriginCall::Pipe, &args(8, 0, 0, 0), none),
            Some(FdAt::Pair(8))
        );
        assert_eq!(
            inheritable(OriginCall::Pipe2, &args(8, O_CLOEXEC, 0, 0), none),
            None
        );
        assert_eq!(inheritable(OriginCall::Dup, &args(3, 0, 0, 0), none), ok);
        assert_eq!(inheritable(OriginCall::Dup2, &args(3, 40, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::Dup3, &args(3, 40, O_CLOEXEC, 0), none),
            None
        );
        assert_eq!(inheritable(OriginCall::Dup3, &args(3, 40, 0, 0), none), ok);
        assert_eq!(
            inheritable(OriginCall::MemfdCreate, &args(0, MFD_CLOEXEC, 0, 0), none),
            None
        );
        assert_eq!(
            inheritable(OriginCall::MemfdCreate, &args(0, 2, 0, 0), none),
            ok
        );
        assert_eq!(
            inheritable(OriginCall::Eventfd2, &args(0, O_CLOEXEC, 0, 0), none),
            None
        );
        assert_eq!(
            inheritable(OriginCall::EpollCreate1, &args(0, 0, 0, 0), none),
            ok
        );
        assert_eq!(
            inheritable(OriginCall::Signalfd4, &args(0, 0, 8, O_CLOEXEC), none),
            None
        );
        assert_eq!(
            inheritable(OriginCall::TimerfdCreate, &args(1, 0, 0, 0), none),
            ok
        );
    }

    #[test]
    fn fcntl_counts_f_dupfd_and_clearing_fd_cloexec_only() {
        let none = || 0;
        let f = OriginCall::Fcntl;
        assert_eq!(
            inheritable(f, &args(3, F_DUPFD, 10, 0), none),
            Some(FdAt::Result)
        );
        assert_eq!(inheritable(f, &args(3, 1030, 10, 0), none), None); // F_DUPFD_CLOEXEC
        assert_eq!(
            inheritable(f, &args(5, F_SETFD, 0, 0), none),
            Some(FdAt::Given(5))
        );
        assert_eq!(inheritable(f, &args(5, F_SETFD, FD_CLOEXEC, 0), none), None);
        assert_eq!(inheritable(f, &args(5, 1, 0, 0), none), None); // F_GETFD
        assert_eq!(inheritable(f, &args(5, 4, 0, 0), none), None); // F_SETFL
    }

    #[test]
    fn the_table_maps_numbers_both_ways() {
        for (i, c) in OriginCall::ALL.iter().enumerate() {
            assert_eq!(OriginCall::from_u32(i as u32), Some(*c));
        }
        assert_eq!(OriginCall::of_sysno(crate::sysno::CLOSE), None);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(OriginCall::of_sysno(2), Some(OriginCall::Open));
            assert_eq!(OriginCall::of_sysno(33), Some(OriginCall::Dup2));
            assert_eq!(OriginCall::of_sysno(53), Some(OriginCall::Socketpair));
        }
    }
}
