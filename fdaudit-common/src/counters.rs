//! The counter table: every counter of the fork..exec window and every syscall the programs
//! look at, declared once, in [`for_each_counter!`]. Generated from it: [`crate::Counters`]
//! (the layout both sides share), [`crate::sysno`] and [`crate::sysno_ia32`] (the numbers
//! per architecture, `to_native`), the eBPF crate's counted-syscall filter and its fentry and
//! fexit programs, and on the user side `FENTRY_PROGRAMS` and `SyscallCounts` (the JSON
//! keys). What increments a counter stays hand-written: `count_in_window` in the eBPF crate.

/// Calls the macro `$cb` with the table (after any `$args`), in four groups:
///
/// - `counters { $(#[doc] name: kind, probe;)* }`: the `u32` fields of `Counters`, in layout
///   order (the order of the JSON keys too). `kind` says how the user side carries one:
///   `sum` (added up over spawns), `max` (the largest is kept), `kernel` (not in
///   `SyscallCounts`: the decoder reads it itself). `probed` or `-`: whether the counter
///   counts calls that went through a counting probe (`SyscallCounts::probed`).
/// - `counted { $(name CONST program = x86_64, aarch64, [i386 | i386...];)* }`: the syscalls
///   sys_enter counts, each with the fentry program that counts it in the fentry backend
///   (attach order), its `sysno` constant and numbers: x86_64
///   (arch/x86/entry/syscalls/syscall_64.tbl), aarch64 (the generic table,
///   include/uapi/asm-generic/unistd.h; `NONE` where the architecture lacks the call) and
///   i386 (syscall_32.tbl; several numbers when ia32 has variants of the call, the first
///   one names `sysno_ia32::CONST`).
/// - `reads { ... }`: the same for the read syscalls `--reads` counts (sys_exit, fexit).
/// - `others { $(name CONST = x86_64, aarch64;)* }`: numbers no program counts.
///
/// A new counter is a line in `counters` (and its syscalls' lines in `counted`) plus its
/// rule in `count_in_window`.
#[macro_export]
macro_rules! for_each_counter {
    ($cb:ident $($args:tt)*) => {
        $cb! {
            $($args)*
            counters {
                /// close() calls.
                close_calls: sum, probed;
                /// close() calls that failed with EBADF (the fd was not open).
                close_ebadf: sum, -;
                /// close_range() calls (the first ones' arguments are kept in `ranges`).
                close_range_calls: sum, probed;
                /// fcntl(F_SETFD) calls.
                fcntl_setfd_calls: sum, probed;
                /// fcntl(F_GETFD) calls.
                fcntl_getfd_calls: sum, probed;
                /// poll()/ppoll() calls.
                poll_calls: sum, probed;
                /// The largest nfds of a poll()/ppoll() call (a maximum, not a sum, when
                /// added up).
                poll_nfds_max: max, -;
                /// getdents64() calls.
                getdents64_calls: sum, probed;
                /// Opens of /proc/self/fd (or /proc/PID/fd, /dev/fd).
                procfd_opens: sum, probed;
                /// execve()/execveat() calls, failed ones included.
                exec_attempts: kernel, -;
                /// dup2()/dup3() calls: shells and posix_spawn file actions redirect fds
                /// with them.
                dup_calls: sum, probed;
            }
            counted {
                close CLOSE fentry_close = 3, 57, [6];
                close_range CLOSE_RANGE fentry_close_range = 436, 436, [436];
                fcntl FCNTL fentry_fcntl = 72, 25, [55 | 221]; // i386 fcntl, fcntl64
                poll POLL fentry_poll = 7, NONE, [168];
                ppoll PPOLL fentry_ppoll = 271, 73, [309 | 414]; // i386 ppoll, ppoll_time64
                getdents64 GETDENTS64 fentry_getdents64 = 217, 61, [220];
                execve EXECVE fentry_execve = 59, 221, [11];
                execveat EXECVEAT fentry_execveat = 322, 281, [358];
                dup2 DUP2 fentry_dup2 = 33, NONE, [63];
                dup3 DUP3 fentry_dup3 = 292, 24, [330];
            }
            reads {
                read READ fexit_read = 0, 63, [3];
                readv READV fexit_readv = 19, 65, [145];
                pread64 PREAD64 fexit_pread64 = 17, 67, [180];
            }
            others {
                open OPEN = 2, NONE;
                openat OPENAT = 257, 56;
                openat2 OPENAT2 = 437, 437;
            }
        }
    };
}

/// `Counters`, from the table's `counters`: one `u32` each, then padding to 8 bytes, then
/// the close_range() arguments.
macro_rules! counters_struct {
    (counters { $( $(#[$doc:meta])* $field:ident: $kind:ident, $probe:tt; )* } $($rest:tt)*) => {
        /// What a child did between fork and exec, counted in the kernel.
        #[repr(C)]
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $( $(#[$doc])* pub $field: u32, )*
            /// Pads the counters to a multiple of 8 bytes.
            pub _pad: [u32; COUNTER_NAMES.len() % 2],
            pub ranges: [CloseRange; MAX_RANGES],
        }

        /// The names of [`Counters`]' counter fields, in layout order.
        pub const COUNTER_NAMES: [&str; [$(stringify!($field)),*].len()] =
            [$(stringify!($field)),*];
    };
}
pub(crate) use counters_struct;

/// The `sysno` constants of one architecture (`x86_64` or `aarch64`), every group's.
macro_rules! sysno_consts {
    (
        $arch:ident
        counters { $($_c:tt)* }
        counted { $( $cn:ident $cc:ident $cp:ident = $cx:tt, $ca:tt, [$($ci:tt)*]; )* }
        reads { $( $rn:ident $rc:ident $rp:ident = $rx:tt, $ra:tt, [$($ri:tt)*]; )* }
        others { $( $on:ident $oc:ident = $ox:tt, $oa:tt; )* }
    ) => {
        $( $crate::counters::sysno_consts!(@one $arch $cc $cx $ca); )*
        $( $crate::counters::sysno_consts!(@one $arch $rc $rx $ra); )*
        $( $crate::counters::sysno_consts!(@one $arch $oc $ox $oa); )*
    };
    (@one x86_64 $c:ident $x:tt $a:tt) => {
        pub const $c: i64 = $x;
    };
    (@one aarch64 $c:ident $x:tt $a:tt) => {
        pub const $c: i64 = $a;
    };
}
pub(crate) use sysno_consts;

/// The i386 constants (each call's first number) and `to_native`.
macro_rules! sysno_ia32 {
    (
        counters { $($_c:tt)* }
        counted { $( $cn:ident $cc:ident $cp:ident = $cx:tt, $ca:tt,
                     [$ci:literal $(| $cv:literal)*]; )* }
        reads { $( $rn:ident $rc:ident $rp:ident = $rx:tt, $ra:tt,
                   [$ri:literal $(| $rv:literal)*]; )* }
        others { $($_o:tt)* }
    ) => {
        $( pub const $cc: i64 = $ci; )*
        $( pub const $rc: i64 = $ri; )*

        /// The x86_64 number of the same call, or -1 for a call the programs do not count.
        /// (Compat syscalls exist only on x86_64 here: the programs call this only there.)
        pub const fn to_native(id: i64) -> i64 {
            use super::sysno::x86_64 as n;
            match id {
                $( $ci $(| $cv)* => n::$cc, )*
                $( $ri $(| $rv)* => n::$rc, )*
                _ => -1,
            }
        }
    };
}
pub(crate) use sysno_ia32;

#[cfg(test)]
mod tests {
    use crate::{sysno, sysno_ia32, COUNTER_NAMES};

    #[test]
    fn the_table_makes_the_numbers_and_the_layout() {
        assert_eq!(sysno::x86_64::CLOSE, 3);
        assert_eq!(sysno::aarch64::POLL, sysno::NONE);
        assert_eq!(sysno::aarch64::OPENAT, 56);
        assert_eq!(sysno_ia32::to_native(221), sysno::x86_64::FCNTL);
        assert_eq!(sysno_ia32::to_native(414), sysno::x86_64::PPOLL);
        assert_eq!(sysno_ia32::to_native(sysno_ia32::READ), sysno::x86_64::READ);
        assert_eq!(sysno_ia32::to_native(5), -1); // i386 open: not counted
        assert_eq!(COUNTER_NAMES.len(), 11);
        assert_eq!(COUNTER_NAMES[0], "close_calls");
    }
}
