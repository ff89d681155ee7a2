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
        assert_eq!(h["schema_version"], 1);
        assert_eq!(h["fdaudit_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(h["argv"][1], name);
        assert_eq!(
            recs.iter().filter(|r| r["type"] == "header").count(),
            1,
            "one header per stream"
        );
    }
}
