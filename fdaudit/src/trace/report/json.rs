//! `trace --json`'s wire types: each record is built from the engine's values (as tracexec's
//! `JsonExecEvent::new` is) and adds what only trace knows, the time since the header and
//! which leaked fds the traced command itself inherited. The engine's [`Spawn`] knows no
//! wire format; the keys, their order and what is left out when empty are declared here.

use serde::{Serialize, Serializer};

use crate::{
    cgroup::Identity,
    engine::{
        boundary::Boundary,
        counts::SyscallCounts,
        ebpf::MissedRuns,
        flags::SpawnFlags,
        origin::{Call, FoundBy, Frame, Origin},
        spawn::{ArgvField, ExecPathField, LeakedFd, ParentCommField, Spawn, Target},
        strategy::Strategy,
    },
    fdkind::FdKind,
    output::text::Lossless,
    runtime::Runtime,
};

/// A spawn record (`"type":"spawn"`): a traced child that completed an exec, or a failed one.
#[derive(Debug, Serialize)]
pub struct SpawnJson<'a> {
    /// ns from the header record to the exec (to the exit for a failed exec).
    time_ns: u64,
    parent_pid: u32,
    #[serde(flatten)]
    parent_comm: &'a Lossless<Vec<u8>, ParentCommField>,
    pid: u32,
    /// Thread id that called exec, when it was not the main thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    exec_tid: Option<u32>,
    #[serde(flatten)]
    exec_path: &'a Lossless<Vec<u8>, ExecPathField>,
    /// Every argument, empty ones included.
    #[serde(flatten)]
    argv: &'a Lossless<Vec<Vec<u8>>, ArgvField>,
    exec_ok: bool,
    exec_attempts: u32,
    /// For a failed exec: the errno the exec returned (2 for ENOENT), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    exec_errno: Option<i32>,
    /// `exec_errno` by name ("ENOENT").
    #[serde(skip_serializing_if = "Option::is_none")]
    exec_error: Option<&'static str>,
    /// fork to exec, nanoseconds, as measured (probes included). 0 when the fork was not seen.
    window_ns: u64,
    /// `window_ns` less the probes' own cost per counted syscall: the untraced estimate.
    window_corrected_ns: u64,
    /// The window's syscall counters, one key each.
    #[serde(flatten, serialize_with = "counts")]
    calls: &'a SyscallCounts,
    /// (first, last, flags) of the first close_range() calls.
    close_ranges: &'a [[u32; 3]],
    #[serde(serialize_with = "strategy")]
    strategy: Strategy,
    /// For `close-loop`: the fd the loop ran up to (exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    close_loop_bound: Option<u32>,
    leaked_fds: Vec<LeakedFdJson<'a>>,
    /// Number of leaked fds (may exceed `leaked_fds.len()` when truncated).
    leaked_fd_count: u32,
    /// Redirected or inherited stdio (fds 0-2), shown apart from leaks.
    stdio: Vec<LeakedFdJson<'a>>,
    /// Partial-data markers and `reexec`, as a list of names in bit order.
    #[serde(serialize_with = "flag_names")]
    flags: SpawnFlags,
    /// What changed between the last exec'd image in the ancestry and the new image, each
    /// field as `[before, after]`; absent when nothing did or no earlier image was seen.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crossings")]
    boundary: Option<&'a Boundary>,
    /// cgroup (id from the kernel at exec, path), container, and pid in its own namespace.
    #[serde(flatten)]
    identity: &'a Identity,
    /// The parent's runtime, from its image.
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a Runtime>,
}

impl<'a> SpawnJson<'a> {
    /// The record of `s`, exec'd `time_ns` after the header; `inherited` says which of its
    /// fds the traced command itself inherited (the baseline).
    pub fn new(s: &'a Spawn, time_ns: u64, inherited: &dyn Fn(&LeakedFd) -> bool) -> Self {
        let fds = |list: &'a [LeakedFd]| {
            list.iter()
                .map(|f| LeakedFdJson::new(f, inherited(f)))
                .collect()
        };
        SpawnJson {
            time_ns,
            parent_pid: s.parent_pid,
            parent_comm: &s.parent_comm,
            pid: s.pid,
            exec_tid: s.exec_tid,
            exec_path: &s.exec_path,
            argv: &s.argv,
            exec_ok: s.exec_ok,
            exec_attempts: s.exec_attempts,
            exec_errno: s.exec_errno,
            exec_error: s.exec_error,
            window_ns: s.window_ns,
            window_corrected_ns: s.window_corrected_ns,
            calls: &s.calls,
            close_ranges: &s.close_ranges,
            strategy: s.strategy,
            close_loop_bound: s.close_loop_bound,
            leaked_fds: fds(&s.leaked_fds),
            leaked_fd_count: s.leaked_count,
            stdio: fds(&s.stdio),
            flags: s.flags,
            boundary: s.boundary.as_ref(),
            identity: &s.identity,
            runtime: s.runtime.as_ref(),
        }
    }
}

/// A leaked fd (or a stdio fd) in a spawn record.
#[derive(Debug, Serialize)]
pub struct LeakedFdJson<'a> {
    fd: u32,
    kind: FdKind,
    #[serde(flatten)]
    target: &'a Target,
    /// O_RDONLY / O_WRONLY / O_RDWR: "r", "w", "rw".
    access: &'static str,
    /// Socket family for sockets ("inet", "inet6", "unix", ...), as in `scan`.
    #[serde(skip_serializing_if = "Option::is_none")]
    family: Option<&'static str>,
    /// Socket protocol for sockets, as in `scan`.
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<&'static str>,
    ino: u64,
    /// `trace --origin`: the call that made this fd inheritable, or why it is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<OriginJson<'a>>,
    /// This fd reached an image that runs as or where its holder did not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    critical: bool,
    /// The file was deleted while open (no name left; `target` is its last one).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
    /// The same fd and file the traced command itself inherited from fdaudit's caller (the
    /// baseline): passed on, not this tree's leak (never with `--no-baseline`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    inherited: bool,
}

impl<'a> LeakedFdJson<'a> {
    pub fn new(f: &'a LeakedFd, inherited: bool) -> Self {
        LeakedFdJson {
            fd: f.fd,
            kind: f.kind,
            target: &f.target,
            access: f.access,
            family: f.family,
            protocol: f.protocol,
            ino: f.ino,
            origin: f.origin.as_ref().map(OriginJson::new),
            critical: f.critical,
            deleted: f.deleted,
            inherited,
        }
    }
}

/// `origin`: the call that made the fd inheritable, or why it is unknown.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum OriginJson<'a> {
    Known(CallJson<'a>),
    Unknown {
        unknown: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
    },
}

impl<'a> OriginJson<'a> {
    fn new(o: &'a Origin) -> Self {
        match o {
            Origin::Known(c) => OriginJson::Known(CallJson::new(c)),
            Origin::Unknown { unknown, reason } => OriginJson::Unknown {
                unknown,
                reason: reason.as_deref(),
            },
        }
    }
}

/// One call that made an fd inheritable, and the call that created the fd when that was
/// another.
#[derive(Debug, Serialize)]
struct CallJson<'a> {
    syscall: &'a str,
    pid: u32,
    tid: u32,
    comm: &'a str,
    /// Kernel timestamp of the call's return (CLOCK_MONOTONIC ns).
    time_ns: u64,
    /// User stack, innermost first.
    stack: Vec<FrameJson<'a>>,
    /// Why the stack stops short of its outermost frame, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_partial: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_by: Option<Box<CallJson<'a>>>,
}

impl<'a> CallJson<'a> {
    fn new(c: &'a Call) -> Self {
        CallJson {
            syscall: &c.syscall,
            pid: c.pid,
            tid: c.tid,
            comm: &c.comm,
            time_ns: c.time_ns,
            stack: c.stack.iter().map(FrameJson::new).collect(),
            stack_partial: c.stack_partial,
            created_by: c.created_by.as_deref().map(|c| Box::new(CallJson::new(c))),
        }
    }
}

/// One user stack frame: where it is, what names it, how it was found (also `unclosed`'s
/// stacks: one wire shape for a frame).
#[derive(Debug, Serialize)]
pub(crate) struct FrameJson<'a> {
    addr: u64,
    symbol: Option<&'a str>,
    file: Option<&'a str>,
    line: Option<u32>,
    module: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    build_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    found_by: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unnamed: Option<&'a str>,
}

impl<'a> FrameJson<'a> {
    pub(crate) fn new(f: &'a Frame) -> Self {
        FrameJson {
            addr: f.addr,
            symbol: f.symbol.as_deref(),
            file: f.file.as_deref(),
            line: f.line,
            module: f.module.as_deref(),
            offset: f.offset,
            build_id: f.build_id.as_deref(),
            found_by: f.found_by.map(FoundBy::as_str),
            code: f.code,
            unnamed: f.unnamed.as_deref(),
        }
    }
}

/// The window's counters, one key each in table order (flattened into the record).
pub(super) fn counts<S: Serializer>(c: &SyscallCounts, out: S) -> Result<S::Ok, S::Error> {
    out.collect_map(c.fields())
}

/// A strategy by its name (`close-loop`).
fn strategy<S: Serializer>(s: &Strategy, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(s.as_str())
}

/// `bpf_missed_runs`: skipped runs by program name, or `"unknown"` where the kernel keeps
/// no such counter.
pub(super) fn missed_runs<S: Serializer>(m: &MissedRuns, out: S) -> Result<S::Ok, S::Error> {
    match m {
        MissedRuns::Unknown => out.serialize_str("unknown"),
        MissedRuns::Known(counts) => counts.serialize(out),
    }
}

fn flag_names<S: Serializer>(f: &SpawnFlags, out: S) -> Result<S::Ok, S::Error> {
    out.collect_seq(f.names())
}

/// `{"uid": [0, 65534], "mnt_namespace": [A, B]}`.
fn crossings<S: Serializer>(b: &Option<&Boundary>, out: S) -> Result<S::Ok, S::Error> {
    let crossed = b.map_or(&[][..], |b| b.crossings());
    out.collect_map(crossed.iter().map(|&(k, a, b)| (k, [a, b])))
}

/// The summary's `inherited_fds`: the baseline itself (none of them marked `inherited`, as
/// the command's own exec was no spawn).
pub fn baseline_fds<S: Serializer>(fds: &[LeakedFd], out: S) -> Result<S::Ok, S::Error> {
    out.collect_seq(fds.iter().map(|f| LeakedFdJson::new(f, false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::report::tests::{leaked_fd, spawn};
    use fdaudit_common::{Counters, COUNTER_NAMES};
    use serde_json::Value;

    #[test]
    fn a_spawn_record_has_the_engine_values_under_their_keys() {
        let mut s = spawn("sh", "/bin/true", 19_997, 2_500_000, 1);
        s.leaked_fds = vec![leaked_fd(7, 1, 42)];
        // The record's own fields (trace's TraceRecord adds "type": "spawn").
        let json = serde_json::to_value(SpawnJson::new(&s, 5, &|_| false)).unwrap();
        assert_eq!(json["strategy"], "close-loop");
        assert_eq!(json["leaked_fds"][0]["fd"], 7);
        assert_eq!(json["leaked_fd_count"], 1);
        assert_eq!(json["time_ns"], 5);
        assert_eq!(json["close_calls"], 19_997);
        assert!(json.get("exec_ns").is_none(), "{json}");
        assert!(json.get("dev").is_none(), "{json}");
    }

    #[test]
    fn flags_are_names_and_a_boundary_is_before_and_after_pairs() {
        let mut s = spawn("sh", "/bin/true", 0, 0, 0);
        let json = serde_json::to_value(SpawnJson::new(&s, 0, &|_| false)).unwrap();
        assert_eq!(json["flags"], serde_json::json!([]));
        assert!(json.get("boundary").is_none(), "{json}");
        s.flags = SpawnFlags::NO_FORK | SpawnFlags::FDS_TRUNCATED;
        let before = fdaudit_common::CredNs {
            read: u32::MAX,
            mnt_ns: 4026531841,
            ..Default::default()
        };
        let exec = fdaudit_common::CredNs {
            uid: 65534,
            mnt_ns: 4026532500,
            ..before
        };
        s.boundary = Boundary::across(&[&before], &exec);
        let json = serde_json::to_value(SpawnJson::new(&s, 0, &|_| false)).unwrap();
        assert_eq!(
            json["flags"],
            serde_json::json!(["fds_truncated", "no_fork"])
        );
        assert_eq!(
            json["boundary"],
            serde_json::json!({"uid": [0, 65534], "mnt_namespace": [4026531841u64, 4026532500u64]})
        );
    }

    #[test]
    fn deleted_and_inherited_appear_only_when_true() {
        let mut s = spawn("sh", "/bin/true", 0, 0, 2);
        s.leaked_fds = vec![leaked_fd(3, 1, 42), leaked_fd(4, 1, 43)];
        s.leaked_fds[1].deleted = true;
        let json = serde_json::to_value(SpawnJson::new(&s, 0, &|f| f.fd == 4)).unwrap();
        let fds = &json["leaked_fds"];
        assert_eq!(fds[1]["deleted"], true);
        assert!(fds[0].get("deleted").is_none(), "{fds}");
        assert_eq!(fds[1]["inherited"], true);
        assert!(fds[0].get("inherited").is_none(), "{fds}");
    }

    /// Counters with every counter set to its position in the table, from 1.
    fn numbered() -> Counters {
        macro_rules! numbered {
            (counters { $( ($f:ident) )* }) => {{
                let (mut c, mut i) = (Counters::default(), 0);
                $( i += 1; c.$f = i; )*
                c
            }};
        }
        fdaudit_common::counter_table!(counters [name] => numbered)
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
            serde_json::from_str(include_str!("../../../../docs/fdaudit.schema.json")).unwrap();
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
        let json_md = include_str!("../../../../docs/json.md");
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
