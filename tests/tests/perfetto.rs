//! `trace --perfetto FILE` read back by an independent decoder: upstream Perfetto's own
//! schema (the classes PyPI's `perfetto` package generated from perfetto_trace.proto) and
//! the protobuf runtime, through `tests/fixtures/perfetto/decode.py`; compared with the
//! JSON records of the same run. Needs root (it traces) and `.ci/setup`'s venv.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use fdaudit_tests::{assert_success, of_type, temp_path};
use serde_json::Value;

/// The venv `.ci/setup` installs perfetto and protobuf into (`FDAUDIT_PERFETTO_PYTHON`
/// names another interpreter that has both).
const PYTHON: &str = "/opt/fdaudit-ci/perfetto-venv/bin/python";

/// The trace as the independent decoder reads it (see decode.py for the shape).
fn decode(trace: &Path) -> Value {
    let python = std::env::var("FDAUDIT_PERFETTO_PYTHON").unwrap_or_else(|_| PYTHON.into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/perfetto/decode.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("failed to run {python} ({e}): run .ci/setup"));
    assert!(
        out.status.success(),
        "decode.py failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("decode.py prints JSON")
}

/// A slice as the decoder saw it: begin and end events of one track, in order.
#[derive(Debug, Clone)]
struct Slice {
    begin: u64,
    end: u64,
    name: String,
    flows: Vec<u64>,
}

/// The slices of every track, by track uuid, in time order.
fn slices(t: &Value) -> BTreeMap<u64, Vec<Slice>> {
    let mut open: BTreeMap<u64, Vec<(u64, &Value)>> = BTreeMap::new();
    let mut done: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut events: Vec<&Value> = t["events"].as_array().unwrap().iter().collect();
    events.sort_by_key(|e| u(&e["ts"]));
    for e in events {
        let track = u(&e["track_uuid"]);
        match e["type"].as_str().unwrap() {
            "TYPE_SLICE_BEGIN" => open.entry(track).or_default().push((u(&e["ts"]), e)),
            "TYPE_SLICE_END" => {
                let (begin, b) = open
                    .get_mut(&track)
                    .and_then(Vec::pop)
                    .expect("an open slice");
                let flows = b["flow_ids"].as_array().unwrap().iter().map(u).collect();
                let name = b["name"].as_str().unwrap().to_string();
                let end = u(&e["ts"]);
                done.entry(track).or_default().push(Slice {
                    begin,
                    end,
                    name,
                    flows,
                });
            }
            _ => {}
        }
    }
    assert!(
        open.values().all(Vec::is_empty),
        "unclosed slices: {open:?}"
    );
    done
}

/// The process tracks of each pid, in the order they were described.
fn process_tracks(t: &Value) -> BTreeMap<u64, Vec<(u64, String)>> {
    let mut by_pid: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
    for tr in t["tracks"].as_array().unwrap() {
        if let Some(p) = tr.get("process") {
            let name = p["process_name"].as_str().unwrap().to_string();
            by_pid
                .entry(u(&p["pid"]))
                .or_default()
                .push((u(&tr["uuid"]), name));
        }
    }
    by_pid
}

fn basename(path: &Value) -> &str {
    let p = path.as_str().expect("an exec path");
    p.rsplit('/').next().unwrap()
}

/// The clocks, the sequence and the schema: every field known, MONOTONIC said.
fn check_clocks(t: &Value) {
    assert_eq!(
        u(&t["unknown_fields"]),
        0,
        "fields upstream's schema does not know"
    );
    assert_eq!(t["primary_trace_clock"], "BUILTIN_CLOCK_MONOTONIC");
    let clocks: BTreeSet<&str> = (t["clocks"].as_array().unwrap().iter())
        .map(|c| c["clock"].as_str().unwrap())
        .collect();
    assert_eq!(
        clocks,
        BTreeSet::from(["BUILTIN_CLOCK_BOOTTIME", "BUILTIN_CLOCK_MONOTONIC"])
    );
    assert_eq!(
        u(&t["first_packet_flags"]),
        1,
        "SEQ_INCREMENTAL_STATE_CLEARED"
    );
    for e in t["events"].as_array().unwrap() {
        assert_eq!(u(&e["clock_id"]), 3, "BUILTIN_CLOCK_MONOTONIC: {e}");
        assert_eq!(u(&e["sequence"]), 1, "{e}");
    }
}

/// Checks the decoded trace against the run's spawn records: one process track per traced
/// process, a slice per record lasting its `window_ns` and ending at its exec (`time_ns` on
/// the same clock, from the header), the window's counters, the leaks and the chain's flow.
fn check(spawns: &[&Value], t: &Value) {
    check_clocks(t);
    let tracks = process_tracks(t);
    let slices = slices(t);
    let pids: BTreeSet<u64> = spawns.iter().map(|s| u(&s["pid"])).collect();
    assert_eq!(
        tracks.keys().copied().collect::<BTreeSet<_>>(),
        pids,
        "a track per process"
    );
    let mut next_track: BTreeMap<u64, usize> = BTreeMap::new();
    let mut current: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    let mut header_offset = None;
    let mut flows = Vec::new();
    for s in spawns {
        let pid = u(&s["pid"]);
        let reexec = s["flags"]
            .as_array()
            .unwrap()
            .contains(&Value::from("reexec"));
        let (track, nth) = if reexec {
            let (track, nth) = current[&pid];
            (track, nth + 1)
        } else {
            let i = next_track.entry(pid).or_default();
            let (track, name) = &tracks[&pid][*i];
            *i += 1;
            assert_eq!(name, basename(&s["exec_path"]), "the process's name: {s}");
            (*track, 0)
        };
        current.insert(pid, (track, nth));
        let slice = &slices[&track][nth];
        assert_eq!(
            slice.end - slice.begin,
            u(&s["window_ns"]),
            "{slice:?} for {s}"
        );
        let offset = slice.end - u(&s["time_ns"]);
        assert_eq!(
            *header_offset.get_or_insert(offset),
            offset,
            "the exec at time_ns: {s}"
        );
        assert!(slice.name.ends_with(basename(&s["exec_path"])), "{slice:?}");
        assert_eq!(slice.flows.len(), 1, "{slice:?}");
        flows.push((track, slice.flows[0]));
        check_counters(t, s, track, slice);
        check_leaks(t, s, track, slice.end);
    }
    let flow_of: BTreeMap<u64, u64> = flows.iter().copied().collect();
    let distinct: BTreeSet<u64> = flow_of.values().copied().collect();
    assert_eq!(
        distinct.len(),
        flow_of.len(),
        "a flow per process: {flows:?}"
    );
    assert!(
        flows.iter().all(|(track, f)| flow_of[track] == *f),
        "{flows:?}"
    );
}

/// Each non-zero counter of the record: its track under the process, the value from the
/// fork, 0 at the exec.
fn check_counters(t: &Value, s: &Value, process: u64, slice: &Slice) {
    for key in ["close_calls", "close_range_calls", "fcntl_setfd_calls"] {
        let n = u(&s[key]);
        if n == 0 {
            continue;
        }
        let track = t["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tr| tr["name"] == key && tr["parent_uuid"].as_u64() == Some(process));
        let track = u(&track.unwrap_or_else(|| panic!("no {key} track for {s}"))["uuid"]);
        let at = |ts| {
            let e = t["events"].as_array().unwrap().iter().find(|e| {
                u(&e["track_uuid"]) == track && u(&e["ts"]) == ts && e["type"] == "TYPE_COUNTER"
            });
            u(&e.unwrap_or_else(|| panic!("no {key} value at {ts}"))["counter_value"])
        };
        assert_eq!((at(slice.begin), at(slice.end)), (n, 0), "{key} of {s}");
    }
}

/// Each leaked fd an instant at the exec naming the fd and its target.
fn check_leaks(t: &Value, s: &Value, track: u64, exec: u64) {
    let instants: Vec<&Value> = (t["events"].as_array().unwrap().iter())
        .filter(|e| u(&e["track_uuid"]) == track && u(&e["ts"]) == exec)
        .filter(|e| e["type"] == "TYPE_INSTANT")
        .collect();
    let leaks = s["leaked_fds"].as_array().unwrap();
    assert_eq!(instants.len(), leaks.len(), "{instants:?} for {s}");
    for (l, e) in leaks.iter().zip(instants) {
        assert_eq!(e["annotations"]["fd"], l["fd"], "{e}");
        assert_eq!(e["annotations"]["kind"], l["kind"], "{e}");
        let name = format!("leaked fd {}: {}", l["fd"], l["target"].as_str().unwrap());
        assert_eq!(e["name"], name.as_str(), "{e}");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn the_perfetto_timeline_matches_the_json_records() {
    let _g = guard();
    let secret = secret_file();
    let pf = temp_path("trace.pftrace");
    let script = [
        spawner("close-loop", 1024, 3, 2),
        fixture(&["chain", secret.as_str()]),
        fixture(&["leak7", secret.as_str()]),
        vec!["true".into()],
    ]
    .map(|c| c.join(" "))
    .join("; ");
    let pf_arg = pf.display().to_string();
    let (objs, out) = trace_records(&["--perfetto", &pf_arg], &["sh", "-c", &script]);
    assert_success(&out);
    let t = decode(&pf);
    let _ = std::fs::remove_file(&pf);
    let spawns = of_type(&objs, "spawn");
    // The workload did what the checks need: close loops, an exec chain, a leak.
    assert!(spawns
        .iter()
        .any(|s| s["strategy"] == "close-loop" && u(&s["close_calls"]) > 1000));
    assert!(spawns
        .iter()
        .any(|s| s["flags"].as_array().unwrap().contains(&"reexec".into())));
    assert!(spawns.iter().any(|s| s["leaked_fds"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["fd"] == 7)));
    check(&spawns, &t);

    // The checks catch a timeline that is off: a slice 1 ns too long, a leak without its
    // fd, a chain's flow broken.
    let broken = |edit: &dyn Fn(&mut Value) -> bool| {
        let mut bad = t.clone();
        let events = bad["events"].as_array_mut().unwrap();
        assert!(events.iter_mut().any(edit), "nothing to break");
        let caught = std::panic::catch_unwind(|| check(&spawns, &bad)).is_err();
        assert!(caught, "the checks passed a broken trace");
    };
    broken(&|e| {
        let end = e["type"] == "TYPE_SLICE_END";
        if end {
            e["ts"] = (u(&e["ts"]) + 1).into();
        }
        end
    });
    broken(&|e| {
        let leak = e["type"] == "TYPE_INSTANT";
        if leak {
            e["annotations"]["fd"] = 99.into();
        }
        leak
    });
    broken(&|e| {
        let reexec = e["name"].as_str().is_some_and(|n| n.starts_with("exec → "));
        if reexec {
            e["flow_ids"] = serde_json::json!([u(&e["flow_ids"][0]) + 1000]);
        }
        reexec
    });
}

#[test]
fn a_perfetto_file_that_cannot_be_created_fails_before_tracing() {
    let marker = temp_path("ran");
    let out = std::process::Command::new(fdaudit_tests::fdaudit())
        .args([
            "trace",
            "--perfetto",
            "/nonexistent/fdaudit/x.pftrace",
            "--",
            "touch",
        ])
        .arg(&marker)
        .output()
        .expect("run fdaudit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("failed to create /nonexistent/fdaudit/x.pftrace"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command was not started");
}
