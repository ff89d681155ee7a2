//! [`SyscallCounts`]: the user-side view of the kernel's per-window [`Counters`], the one
//! struct every consumer (a spawn, the totals, the bench's traced pass, the strategy
//! classifier) uses. Its fields (the JSON keys), `From`, `probed` and `AddAssign` are made
//! from the counter table (`fdaudit_common::counter_table!`): a new counter is a line
//! there and its rule in the eBPF program's `count_in_window`, nothing here.

use fdaudit_common::Counters;

/// `SyscallCounts` from the table's `counters`, less the `kernel` ones (the decoder reads
/// those itself).
macro_rules! syscall_counts {
    (counters { $($row:tt)* }) => {
        syscall_counts!(@keep [] $($row)*);
    };
    // Keeps the counters the user side carries (`sum` and `max`), in table order.
    (@keep [$($kept:tt)*]) => {
        syscall_counts!(@emit $($kept)*);
    };
    (@keep [$($kept:tt)*] ($doc:tt $f:ident kernel $p:tt) $($rest:tt)*) => {
        syscall_counts!(@keep [$($kept)*] $($rest)*);
    };
    (@keep [$($kept:tt)*] $row:tt $($rest:tt)*) => {
        syscall_counts!(@keep [$($kept)* $row] $($rest)*);
    };
    (@probed probed, $($s:tt)*) => { $($s)* };
    (@probed -, $($s:tt)*) => {};
    (@add sum, $a:expr, $b:expr) => { $a += $b };
    (@add max, $a:expr, $b:expr) => { $a = $a.max($b) };
    (@emit $( ([$($doc:tt)*] $f:ident $kind:ident $p:tt) )*) => {
        /// What a child did between fork and exec, counted in the kernel. The front ends
        /// write it flattened into the records that carry it, one key per counter
        /// ([`SyscallCounts::fields`]: `trace/report/json.rs`).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct SyscallCounts {
            $( $($doc)* pub $f: u64, )*
        }

        impl SyscallCounts {
            /// The JSON keys, in order: one per field (the tests check the schema and docs by it).
            #[cfg(test)]
            pub const KEYS: [&str; [$(stringify!($f)),*].len()] = [$(stringify!($f)),*];

            /// Each counter with its name (its JSON key), in table order.
            pub fn fields(&self) -> [(&'static str, u64); [$(stringify!($f)),*].len()] {
                [$( (stringify!($f), self.$f) ),*]
            }

            /// Syscalls that went through a counting probe (each costs the probe's time
            /// once). `poll_nfds_max` and `close_ebadf` are not calls of their own.
            pub fn probed(&self) -> u64 {
                let mut n = 0;
                $( syscall_counts!(@probed $p, n += self.$f); )*
                n
            }
        }

        impl From<&Counters> for SyscallCounts {
            fn from(c: &Counters) -> Self {
                SyscallCounts {
                    $( $f: c.$f.into(), )*
                }
            }
        }

        impl std::ops::AddAssign for SyscallCounts {
            /// Sums every counter; `poll_nfds_max` keeps the largest.
            fn add_assign(&mut self, o: Self) {
                $( syscall_counts!(@add $kind, self.$f, o.$f); )*
            }
        }
    };
}

fdaudit_common::counter_table!(counters [doc name kind probe] => syscall_counts);

impl SyscallCounts {
    /// fcntl() calls of either kind (F_GETFD probes and F_SETFD marks).
    pub fn fcntl_calls(&self) -> u64 {
        self.fcntl_setfd_calls + self.fcntl_getfd_calls
    }
}
