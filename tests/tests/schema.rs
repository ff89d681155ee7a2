//! Every record type against docs/fdaudit.schema.json, from real runs that need no root
//! (scan, bench untraced, doctor); the root tests check trace's records through the same
//! `fdaudit_tests::records`. Also: the header is the same for all four subcommands.

use std::process::{Command, Stdio};

use fdaudit_tests::{fdaudit, of_type, records};

fn json_run(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(fdaudit())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit");
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{args:?}: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    records(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn the_schema_rejects_unknown_fields_wrong_types_and_noise() {
    use serde_json::json;
    let ok = json!({"type": "note", "level": "note", "message": "x"});
    fdaudit_tests::check_record(&ok);
    for bad in [
        json!({"type": "note", "level": "note", "message": "x", "extra": 1}),
        json!({"type": "note", "level": "loud", "message": "x"}),
        json!({"type": "check", "name": "btf", "status": "ok"}),
        json!({"type": "nonsense"}),
        json!({"message": "no type"}),
        json!({"type": "read_storm", "pid": 1, "comm": "sh", "fd": 0, "target": "pipe:[1]",
               "ino": 1, "calls": 100, "small_reads": 100, "bytes": 100,
               "bytes_per_call": 1.0000000001, "block_calls": 1}),
    ] {
        let r = std::panic::catch_unwind(|| fdaudit_tests::check_record(&bad));
        assert!(r.is_err(), "accepted {bad}");
    }
}

#[test]
fn scan_bench_doctor_share_the_header_and_match_the_schema() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    let scan = json_run(&["scan", fixture, "--json"]);
    assert!(!of_type(&scan, "process").is_empty());
    assert!(!of_type(&scan, "finding").is_empty());
    assert_eq!(scan.last().unwrap()["type"], "summary");
    let bench = json_run(&[
        "bench",
        "--json",
        "--limits",
        "1024,2048",
        "--open-fds",
        "3",
        "--strategies",
        "close-loop,close-range",
        "-n",
        "2",
        "--batch",
        "2",
        "--trace-spawns",
        "0",
        "--no-pin",
    ]);
    assert_eq!(of_type(&bench, "cell").len(), 4);
    assert_eq!(of_type(&bench, "fit").len(), 2);
    let doctor = json_run(&["doctor", "--json"]);
    assert!(!of_type(&doctor, "check").is_empty());
    for (name, recs) in [("scan", &scan), ("bench", &bench), ("doctor", &doctor)] {
        let h = &recs[0];
        assert_eq!(h["command"], name);
        assert_eq!(h["schema_version"], 2);
        assert_eq!(h["fdaudit_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(h["argv"][1], name);
        assert_eq!(
            recs.iter().filter(|r| r["type"] == "header").count(),
            1,
            "one header per stream"
        );
    }
}

#[test]
fn diff_records_match_the_schema_and_exit_3_on_a_regression() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/diff");
    let run = |a: &str, b: &str| {
        Command::new(fdaudit())
            .arg("diff")
            .arg(format!("{fixtures}/{a}"))
            .arg(format!("{fixtures}/{b}"))
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .expect("run fdaudit diff")
    };
    let out = run("before.jsonl", "after.jsonl");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(recs[0]["command"], "diff");
    assert_eq!(of_type(&recs, "diff_group").len(), 4);
    assert_eq!(of_type(&recs, "diff_leak").len(), 2);
    let last = recs.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["exit_code"].as_u64()),
        (Some("summary"), Some(3))
    );
    let out = run("bench-a.jsonl", "bench-a.jsonl");
    assert_eq!(out.status.code(), Some(0));
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(recs.last().unwrap()["exit_reason"], "ok");
    // A trace against a bench is bad input: exit 2, one line on stderr.
    let out = run("before.jsonl", "bench-a.jsonl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("compare two traces or two benches"),
        "{err}"
    );
}

/// One name, one meaning (issue #25 item 5, schema 2): no field is an array in one record
/// and a count in another (`leaked_fds`, `fds`, `groups` were), `kind` is an fd's type only
/// (a finding's is its `rule`), durations are integer `_ns` (doctor's `load_ms` was a float).
#[test]
fn the_schema_gives_each_field_name_one_meaning() {
    let schema: serde_json::Value =
        serde_json::from_str(fdaudit_tests::SCHEMA_TEXT).expect("the schema is JSON");
    fn json_type(p: &serde_json::Value) -> String {
        if p.get("$ref").is_some() || p.get("properties").is_some() {
            return "object".into();
        }
        let of_value = |c: &serde_json::Value| if c.is_string() { "string" } else { "integer" };
        if let Some(c) = p.get("const") {
            return of_value(c).into();
        }
        if let Some(serde_json::Value::Array(e)) = p.get("enum") {
            return e.first().map_or("string", of_value).into();
        }
        let mut t: Vec<String> = match p.get("type") {
            Some(serde_json::Value::String(t)) => vec![t.clone()],
            Some(serde_json::Value::Array(ts)) => ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
            _ => ["oneOf", "anyOf"]
                .iter()
                .filter_map(|k| p.get(*k)?.as_array())
                .flatten()
                .map(json_type)
                .collect(),
        };
        t.retain(|t| t != "null");
        t.sort();
        t.dedup();
        t.join("|")
    }
    // name -> (type, where) for every property of every record.
    let mut seen: std::collections::BTreeMap<String, Vec<(String, String)>> = Default::default();
    fn walk(
        v: &serde_json::Value,
        at: &str,
        seen: &mut std::collections::BTreeMap<String, Vec<(String, String)>>,
    ) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(serde_json::Value::Object(props)) = o.get("properties") {
                    // A spawn's `boundary` maps a field to its [at fork, after exec] pair:
                    // `uid` there means what it means in `process`, twice.
                    let pairs = at.ends_with("/properties/boundary");
                    for (k, p) in props {
                        let ty = if pairs {
                            "integer".into()
                        } else {
                            json_type(p)
                        };
                        seen.entry(k.clone()).or_default().push((ty, at.to_owned()));
                    }
                }
                for (k, c) in o {
                    walk(c, &format!("{at}/{k}"), seen);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|c| walk(c, at, seen)),
            _ => {}
        }
    }
    walk(&schema, "", &mut seen);
    for (name, uses) in &seen {
        let mut types: Vec<&str> = uses.iter().map(|(t, _)| t.as_str()).collect();
        types.sort();
        types.dedup();
        // `leaked_fds_per_spawn`: bench's traced median (integer) and diff's mean (number).
        let numeric = types.iter().all(|t| *t == "integer" || *t == "number");
        assert!(
            types.len() == 1 || (numeric && name.ends_with("_per_spawn")),
            "`{name}` has two meanings: {uses:?}"
        );
        assert!(
            !name.ends_with("_ms"),
            "`{name}`: durations are integer _ns"
        );
        if name.ends_with("_ns") {
            assert_eq!(types, ["integer"], "`{name}`: {uses:?}");
        }
    }
    let kinds: Vec<&str> = seen["kind"].iter().map(|(_, at)| at.as_str()).collect();
    assert!(
        kinds.iter().all(|at| !at.ends_with("/finding")),
        "a finding's type is its `rule`: {kinds:?}"
    );
    assert_eq!(
        schema["$defs"]["header"]["properties"]["schema_version"]["const"],
        2
    );
}

/// `diff` reads schema 1 runs (the fixtures) and schema 2 runs alike (issue #25 item 5).
#[test]
fn diff_reads_schema_1_and_schema_2_runs_alike() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/diff");
    let v1 = std::fs::read_to_string(format!("{fixtures}/after.jsonl")).expect("read fixture");
    let mut v2 = v1
        .replace("\"schema_version\": 1", "\"schema_version\": 2")
        .replace("\"close_median\"", "\"close_calls_median\"")
        .replace("\"close_max\"", "\"close_calls_max\"");
    for n in 0..10 {
        v2 = v2.replace(
            &format!("\"leaked_fds\": {n}"),
            &format!("\"leaked_fd_count\": {n}"),
        );
    }
    assert!(v2.contains("\"leaked_fd_count\"") && v2.contains("\"schema_version\": 2"));
    let dir = std::env::temp_dir().join(format!("fdaudit-schema2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let after2 = dir.join("after-v2.jsonl");
    std::fs::write(&after2, &v2).unwrap();
    let run = |b: &std::path::Path| {
        let out = Command::new(fdaudit())
            .arg("diff")
            .arg(format!("{fixtures}/before.jsonl"))
            .arg(b)
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .expect("run fdaudit diff");
        let mut recs = records(&String::from_utf8_lossy(&out.stdout));
        recs.remove(0); // the header: argv differs
        (out.status.code(), recs)
    };
    let one = run(std::path::Path::new(&format!("{fixtures}/after.jsonl")));
    let two = run(&after2);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(one.0, Some(3));
    assert_eq!(one, two, "schema 1 and schema 2 inputs compare the same");
}

/// `unclosed`'s four records (made by root runs in tests/tests/unclosed.rs, which check
/// every record they read): the schema takes them as documented and refuses a field too
/// many or of the wrong type.
#[test]
fn the_unclosed_records_are_in_the_schema() {
    use serde_json::json;
    let frame = json!({"addr": 4096, "symbol": "leak_one+0x31", "file": "svc.c", "line": 9,
                       "module": "/tmp/svc", "offset": 4096, "found_by": "eh_frame"});
    let good = [
        json!({"type": "unclosed_report", "why": "EMFILE", "outstanding": 30, "stacks": 2,
               "processes": 1, "read_by": "batch"}),
        json!({"type": "unclosed_stack", "rank": 1, "stack_id": 7, "count": 30,
               "by_syscall": {"openat": 30}, "samples": ["/etc/hostname"],
               "oldest_age_ns": 5, "pids": [12], "stack": [frame.clone()],
               "opened": 30, "closed": 0, "opened_per_min": 12.5, "closed_per_min": 0.0}),
        json!({"type": "unclosed_process", "pid": 12, "comm": "svc", "exited": false,
               "open": 38, "outstanding": 30, "before_tracing": 8, "not_seen": 0,
               "nofile_soft": 64, "headroom": -1, "growth_per_min": 6.0, "fit_r2": 0.98,
               "fit_points": 4, "limit_projection": "limit", "limit_in_secs": 0.0}),
        json!({"type": "unclosed_process", "pid": 13, "comm": "svc", "exited": false,
               "open": 8, "outstanding": 0, "before_tracing": 8, "not_seen": 0,
               "nofile_soft": 64, "headroom": 56, "growth_per_min": null, "fit_r2": null,
               "fit_points": 1, "limit_projection": "too few reports", "limit_in_secs": null}),
        json!({"type": "unclosed_emfile", "pid": 12, "comm": "svc", "syscall": "openat",
               "errno": "EMFILE", "count": 1, "age_ns": 10, "stack": [frame],
               "top_stack_id": 7, "top_count": 56}),
    ];
    for g in &good {
        fdaudit_tests::check_record(g);
    }
    for bad in [
        json!({"type": "unclosed_report", "why": "EMFILE", "outstanding": 30, "stacks": 2,
               "processes": 1, "read_by": "batch", "extra": 1}),
        json!({"type": "unclosed_process", "pid": 12, "comm": "svc", "exited": "no",
               "open": 38, "outstanding": 30, "before_tracing": 8, "not_seen": 0,
               "nofile_soft": 64, "headroom": -1, "growth_per_min": 6.0, "fit_r2": 0.98,
               "fit_points": 4, "limit_projection": "limit", "limit_in_secs": 0.0}),
        json!({"type": "unclosed_process", "pid": 12, "comm": "svc", "exited": false,
               "open": 38, "outstanding": 30, "before_tracing": 8, "not_seen": 0,
               "nofile_soft": 64, "headroom": -1, "growth_per_min": 6.0, "fit_r2": 0.98,
               "fit_points": 4, "limit_projection": "soon", "limit_in_secs": 0.0}),
        json!({"type": "unclosed_emfile", "pid": 12, "comm": "svc", "syscall": "openat",
               "errno": "EBADF", "count": 1, "age_ns": 10, "stack": [],
               "top_stack_id": null, "top_count": 0}),
    ] {
        let r = std::panic::catch_unwind(|| fdaudit_tests::check_record(&bad));
        assert!(r.is_err(), "accepted {bad}");
    }
}
