//! [`SyscallCounts`]: the user-side view of the kernel's per-window [`Counters`], the one
//! struct every consumer (a spawn, the totals, the bench's traced pass, the strategy
//! classifier) uses. Its fields (the JSON keys), `From`, `probed` and `AddAssign` are made
//! from the counter table (`fdaudit_common::for_each_counter!`): a new counter is a line
//! there and its rule in the eBPF program's `count_in_window`, nothing here.

use fdaudit_common::Counters;
use serde::Serialize;

/// `SyscallCounts` from the table's `counters`, less the `kernel` ones (the decoder reads
/// those itself).
macro_rules! syscall_counts {
    (counters { $($c:tt)* } $($_rest:tt)*) => {
        syscall_counts!(@keep [] $($c)*);
    };
    // Keeps the counters the user side carries (`sum` and `max`), in table order.
    (@keep [$($kept:tt)*]) => {
        syscall_counts!(@emit $($kept)*);
    };
    (@keep [$($kept:tt)*] $(#[$doc:meta])* $f:ident: kernel, $p:tt; $($rest:tt)*) => {
        syscall_counts!(@keep [$($kept)*] $($rest)*);
    };
    (@keep [$($kept:tt)*] $(#[$doc:meta])* $f:ident: $kind:ident, $p:tt; $($rest:tt)*) => {
        syscall_counts!(@keep [$($kept)* $(#[$doc])* $f: $kind, $p;] $($rest)*);
    };
    (@probed probed, $($s:tt)*) => { $($s)* };
    (@probed -, $($s:tt)*) => {};
    (@add sum, $a:expr, $b:expr) => { $a += $b };
    (@add max, $a:expr, $b:expr) => { $a = $a.max($b) };
    (@emit $( $(#[$doc:meta])* $f:ident: $kind:ident, $p:tt; )*) => {
        /// What a child did between fork and exec, counted in the kernel. Serialised
        /// flattened into the records that carry it (one JSON key per counter).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct SyscallCounts {
            $( $(#[$doc])* pub $f: u64, )*
        }

        impl SyscallCounts {
            /// The JSON keys, in order: one per field (the tests check the schema and docs by it).
            #[cfg(test)]
            pub const KEYS: [&str; [$(stringify!($f)),*].len()] = [$(stringify!($f)),*];

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

fdaudit_common::for_each_counter!(syscall_counts);

impl SyscallCounts {
    /// fcntl() calls of either kind (F_GETFD probes and F_SETFD marks).
    pub fn fcntl_calls(&self) -> u64 {
        self.fcntl_setfd_calls + self.fcntl_getfd_calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdaudit_common::COUNTER_NAMES;
    use serde_json::Value;

    /// Counters with every counter set to its position in the table, from 1.
    fn numbered() -> Counters {
        macro_rules! numbered {
            (counters { $( $(#[$doc:meta])* $f:ident: $kind:ident, $p:tt; )* } $($_r:tt)*) => {{
                let (mut c, mut i) = (Counters::default(), 0);
                $( i += 1; c.$f = i; )*
                c
            }};
        }
        fdaudit_common::for_each_counter!(numbered)
    }

    fn value(name: &str) -> u64 {
        1 + COUNTER_NAMES.iter().position(|n| *n == name).unwrap() as u64
    }

    #[test]
    fn every_kernel_counter_is_carried_added_and_serialised() {
        let c = numbered();
        assert_eq!(
            (c.close_calls, c.exec_attempts),
            (1, value("exec_attempts") as u32)
        );
        let mut s = SyscallCounts::from(&c);
        // Not calls of their own: close_ebadf, poll_nfds_max; not here: exec_attempts.
        let probed = ["close_ebadf", "poll_nfds_max", "exec_attempts"];
        let want: u64 = COUNTER_NAMES
            .iter()
            .filter(|n| !probed.contains(n))
            .map(|n| value(n))
            .sum();
        assert_eq!(s.probed(), want);
        s += SyscallCounts::from(&c);
        let j = serde_json::to_value(s).unwrap();
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        let mut sorted = SyscallCounts::KEYS;
        sorted.sort_unstable();
        assert_eq!(keys, sorted); // serde_json's map is sorted; the output is in KEYS order
        let kernel_only: Vec<&str> = COUNTER_NAMES
            .into_iter()
            .filter(|n| !SyscallCounts::KEYS.contains(n))
            .collect();
        assert_eq!(kernel_only, ["exec_attempts"]);
        let order: Vec<&str> = COUNTER_NAMES
            .into_iter()
            .filter(|n| SyscallCounts::KEYS.contains(n))
            .collect();
        assert_eq!(order, SyscallCounts::KEYS);
        for k in keys {
            let once = value(k);
            let want = if k == "poll_nfds_max" { once } else { 2 * once };
            assert_eq!(j[k], want, "{k}");
        }
    }

    /// docs/fdaudit.schema.json's spawn and summary totals carry every counter, required
    /// in table order (`required` is an array: its order is kept); docs/json.md names each.
    #[test]
    fn the_schema_and_the_docs_have_every_counter() {
        let schema: Value =
            serde_json::from_str(include_str!("../../../docs/fdaudit.schema.json")).unwrap();
        let spawn = &schema["$defs"]["spawn"];
        let totals = &schema["$defs"]["trace_summary"]["properties"]["totals"];
        for (name, def) in [("spawn", spawn), ("totals", totals)] {
            let required: Vec<&str> = def["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{name} has no required list"))
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let first = required.iter().position(|k| *k == SyscallCounts::KEYS[0]);
            let first = first.unwrap_or_else(|| panic!("{name}: no {}", SyscallCounts::KEYS[0]));
            let run = required.get(first..first + SyscallCounts::KEYS.len());
            assert_eq!(run, Some(&SyscallCounts::KEYS[..]), "{name}: {required:?}");
            for k in SyscallCounts::KEYS {
                let p = &def["properties"][k];
                assert_eq!(
                    (&p["type"], &p["minimum"]),
                    (&"integer".into(), &0.into()),
                    "{name}.{k}"
                );
            }
        }
        let json_md = include_str!("../../../docs/json.md");
        for k in SyscallCounts::KEYS {
            assert!(
                json_md.contains(&format!("`{k}`")),
                "docs/json.md does not name {k}"
            );
        }
    }
}
