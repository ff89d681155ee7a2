//! How the front ends write the engine's plain values that more than one of them puts in
//! JSON (`trace`'s records, `bench`'s): the engine declares no wire format (as tracexec's
//! exporters convert its core events), so the keys and spellings live here, used through
//! `#[serde(serialize_with = ...)]` on the front ends' own record types.

use serde::{Serialize as _, Serializer};

use crate::engine::{counts::SyscallCounts, ebpf::MissedRuns, strategy::Strategy};

/// The window's counters, one key each in table order (flattened into the record).
pub fn counts<S: Serializer>(c: &SyscallCounts, out: S) -> Result<S::Ok, S::Error> {
    out.collect_map(c.fields())
}

/// A strategy by its name (`close-loop`).
pub fn strategy<S: Serializer>(s: &Strategy, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(s.as_str())
}

/// `bpf_missed_runs`: skipped runs by program name, or `"unknown"` where the kernel keeps
/// no such counter.
pub fn missed_runs<S: Serializer>(m: &MissedRuns, out: S) -> Result<S::Ok, S::Error> {
    match m {
        MissedRuns::Unknown => out.serialize_str("unknown"),
        MissedRuns::Known(counts) => counts.serialize(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdaudit_common::{Counters, COUNTER_NAMES};
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
        let j = counts(&s, serde_json::value::Serializer).unwrap();
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

    #[test]
    fn missed_runs_are_counts_by_program_or_unknown() {
        let json = |m: &MissedRuns| missed_runs(m, serde_json::value::Serializer).unwrap();
        assert_eq!(json(&MissedRuns::Unknown), serde_json::json!("unknown"));
        let known = MissedRuns::Known(
            [("sys_enter", 3), ("sched_process_exec", 0)]
                .into_iter()
                .map(|(k, n)| (k.to_owned(), n))
                .collect(),
        );
        assert_eq!(
            json(&known),
            serde_json::json!({"sched_process_exec": 0, "sys_enter": 3})
        );
    }
}
