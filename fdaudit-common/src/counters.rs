//! The counter table: every counter of the fork..exec window and every syscall the programs
//! look at, declared once, in [`counter_table!`], which also hands its users the columns
//! they ask for. Generated from it: [`crate::Counters`] (the layout both sides share),
//! [`crate::sysno`] and [`crate::sysno_ia32`] (the numbers per architecture, `to_native`),
//! the eBPF crate's counted-syscall filter and its fentry and fexit programs, and on the
//! user side `FENTRY_PROGRAMS`, `TP_PROGRAMS` and `SyscallCounts` (the JSON keys). What
//! increments a counter stays hand-written: `count_in_window` in the eBPF crate.

/// The counter table, and the one reader of its grammar: `counter_table!(GROUP [COLUMN...],
/// ... => cb)` calls the macro `cb` with `GROUP { (COLUMN...) ... }` for each group asked
/// for, one parenthesised row per line of the group, holding the columns asked for in the
/// order asked. A user names only the columns it reads, so a new column (or group) edits
/// the table and this macro, no user. The groups and their columns:
///
/// - `counters` (`doc name kind probe`): the `u32` fields of `Counters`, in layout order
///   (the order of the JSON keys too). `doc` is the line's doc attributes in brackets
///   (`[#[doc = "..."] ...]`). `kind` says how the user side carries one: `sum` (added up
///   over spawns), `max` (the largest is kept), `kernel` (not in `SyscallCounts`: the
///   decoder reads it itself). `probe` is `probed` or `-`: whether the counter counts calls
///   that went through a counting probe (`SyscallCounts::probed`).
/// - `counted` (`name sysno prog x86_64 aarch64 i386`): the syscalls sys_enter counts, each
///   with its `sysno` constant, the fentry program that counts it in the fentry backend
///   (attach order) and its numbers: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl),
///   aarch64 (the generic table, include/uapi/asm-generic/unistd.h; `NONE` where the
///   architecture lacks the call) and i386 (syscall_32.tbl) in brackets, `[n]` or
///   `[n | m ...]` when ia32 has variants of the call, the first one naming
///   `sysno_ia32::CONST`.
/// - `reads` (the same columns): the read syscalls `--reads` counts (sys_exit, fexit).
/// - `others` (`name sysno x86_64 aarch64`): numbers no program counts.
///
/// A new counter is a line in `counters` (and its syscalls' lines in `counted`) plus its
/// rule in `count_in_window`.
///
/// ```
/// macro_rules! names {
///     (reads { $( ($name:ident $x86_64:tt) )* }) => {
///         const READS: [(&str, i64); [$($x86_64),*].len()] = [$( (stringify!($name), $x86_64) ),*];
///     };
/// }
/// fdaudit_common::counter_table!(reads [name x86_64] => names);
/// assert_eq!(READS[0], ("read", 0));
/// ```
#[macro_export]
macro_rules! counter_table {
    ($($group:ident [$($col:ident)*]),+ $(,)? => $cb:ident) => {
        $crate::counter_table!(@group $cb [] [$($group [$($col)*])+] {
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
                unshare UNSHARE = 272, 97;
            }
        });
    };

    // Every group asked for is done: the callback.
    (@group $cb:ident [$($out:tt)*] [] $table:tt) => {
        $cb! { $($out)* }
    };
    // The next group asked for: its lines, parsed once into rows `([picked] columns...)`.
    (@group $cb:ident $out:tt [$group:ident $cols:tt $($more:tt)*] $table:tt) => {
        $crate::counter_table!(@rows $cb $out $group $cols [$($more)*] $table $table);
    };
    (@rows $cb:ident $out:tt counters $cols:tt $more:tt $table:tt {
        counters { $( $(# $doc:tt)* $name:ident: $kind:ident, $probe:tt; )* } $($_t:tt)*
    }) => {
        $crate::counter_table!(@cols $cb $out counters counters $cols $more $table
            [$( ([] [$(# $doc)*] $name $kind $probe) )*]);
    };
    (@rows $cb:ident $out:tt counted $cols:tt $more:tt $table:tt {
        counters $_c:tt
        counted { $( $name:ident $sysno:ident $prog:ident = $x:tt, $a:tt, $i:tt; )* }
        $($_t:tt)*
    }) => {
        $crate::counter_table!(@cols $cb $out counted syscalls $cols $more $table
            [$( ([] $name $sysno $prog $x $a $i) )*]);
    };
    (@rows $cb:ident $out:tt reads $cols:tt $more:tt $table:tt {
        counters $_c:tt counted $_d:tt
        reads { $( $name:ident $sysno:ident $prog:ident = $x:tt, $a:tt, $i:tt; )* }
        $($_t:tt)*
    }) => {
        $crate::counter_table!(@cols $cb $out reads syscalls $cols $more $table
            [$( ([] $name $sysno $prog $x $a $i) )*]);
    };
    (@rows $cb:ident $out:tt others $cols:tt $more:tt $table:tt {
        counters $_c:tt counted $_d:tt reads $_r:tt
        others { $( $name:ident $sysno:ident = $x:tt, $a:tt; )* }
    }) => {
        $crate::counter_table!(@cols $cb $out others others $cols $more $table
            [$( ([] $name $sysno $x $a) )*]);
    };
    (@rows $cb:ident $out:tt $group:ident $($_r:tt)*) => {
        compile_error!(concat!("counter_table!: no group ", stringify!($group)));
    };

    // Every column of this group is picked: the group's rows join the output.
    (@cols $cb:ident [$($out:tt)*] $group:ident $form:ident [] $more:tt $table:tt
        [$( ([$($picked:tt)*] $($_f:tt)*) )*]
    ) => {
        $crate::counter_table!(@group $cb [$($out)* $group { $( ($($picked)*) )* }] $more $table);
    };
    // The next column: appended to every row's picked columns at once, one rule per
    // column of each form of line.
    (@cols $cb:ident $out:tt $group:ident counters [doc $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $doc:tt $name:ident $kind:ident $probe:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group counters [$($cols)*] $more $table
            [$( ([$($p)* $doc] $doc $name $kind $probe) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident counters [name $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $doc:tt $name:ident $kind:ident $probe:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group counters [$($cols)*] $more $table
            [$( ([$($p)* $name] $doc $name $kind $probe) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident counters [kind $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $doc:tt $name:ident $kind:ident $probe:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group counters [$($cols)*] $more $table
            [$( ([$($p)* $kind] $doc $name $kind $probe) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident counters [probe $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $doc:tt $name:ident $kind:ident $probe:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group counters [$($cols)*] $more $table
            [$( ([$($p)* $probe] $doc $name $kind $probe) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [name $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $name] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [sysno $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $sysno] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [prog $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $prog] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [x86_64 $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $x86_64] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [aarch64 $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $aarch64] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident syscalls [i386 $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $prog:ident $x86_64:tt $aarch64:tt $i386:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group syscalls [$($cols)*] $more $table
            [$( ([$($p)* $i386] $name $sysno $prog $x86_64 $aarch64 $i386) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident others [name $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $x86_64:tt $aarch64:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group others [$($cols)*] $more $table
            [$( ([$($p)* $name] $name $sysno $x86_64 $aarch64) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident others [sysno $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $x86_64:tt $aarch64:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group others [$($cols)*] $more $table
            [$( ([$($p)* $sysno] $name $sysno $x86_64 $aarch64) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident others [x86_64 $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $x86_64:tt $aarch64:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group others [$($cols)*] $more $table
            [$( ([$($p)* $x86_64] $name $sysno $x86_64 $aarch64) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident others [aarch64 $($cols:ident)*] $more:tt $table:tt
        [$( ([$($p:tt)*] $name:ident $sysno:ident $x86_64:tt $aarch64:tt) )*]
    ) => {
        $crate::counter_table!(@cols $cb $out $group others [$($cols)*] $more $table
            [$( ([$($p)* $aarch64] $name $sysno $x86_64 $aarch64) )*]);
    };
    (@cols $cb:ident $out:tt $group:ident $form:ident [$col:ident $($_c:ident)*] $($_r:tt)*) => {
        compile_error!(concat!("counter_table!: no column ", stringify!($col), " in ", stringify!($group)));
    };
}

/// `Counters`, from the table's `counters`: one `u32` each, then padding to 8 bytes, then
/// the close_range() arguments.
macro_rules! counters_struct {
    (counters { $( ([$($doc:tt)*] $field:ident) )* }) => {
        /// What a child did between fork and exec, counted in the kernel.
        #[repr(C)]
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $( $($doc)* pub $field: u32, )*
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

/// The `sysno` constants of one architecture (the table's `x86_64` or `aarch64` column),
/// every group's.
macro_rules! sysno_consts {
    ($(
        $group:ident { $( ($c:ident $n:tt) )* }
    )*) => {
        $( $( pub const $c: i64 = $n; )* )*
    };
}
pub(crate) use sysno_consts;

/// The i386 constants (each call's first number) and `to_native`.
macro_rules! sysno_ia32 {
    ($(
        $group:ident { $( ($c:ident [$i:literal $(| $v:literal)*]) )* }
    )*) => {
        $( $( pub const $c: i64 = $i; )* )*

        /// The x86_64 number of the same call, or -1 for a call the programs do not count.
        /// (Compat syscalls exist only on x86_64 here: the programs call this only there.)
        pub const fn to_native(id: i64) -> i64 {
            use super::sysno::x86_64 as n;
            match id {
                $( $( $i $(| $v)* => n::$c, )* )*
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
