//! CI gates on real spawns: `trace --fail-on-strategy` and `--max-closes` on a close-loop
//! spawner and a close_range one, and `fdaudit diff` of the two traces' JSON.

use crate::common;

use std::process::{Command, Output, Stdio};

use common::{guard, spawner};
use fdaudit_tests::{
    fdaudit, missed_runs, of_type, records, temp_path, trace_to_file, without_skipped_runs,
};
use serde_json::Value;

/// Two spawns of /bin/true with NOFILE 512 and fds 3-5 open.
fn cmd(strategy: &str) -> Vec<String> {
    spawner(strategy, 512, 6, 2)
}

/// `trace --json -o FILE extra -- spawner STRATEGY`: the output and FILE's text, of a run
/// in which the kernel skipped no program run (on a preemptible kernel, as sid's, a
/// program preempted while its hook fires again on that CPU loses that run: the gates then
/// rightly add that the trace is incomplete, a verdict no test can expect). Five tries.
fn traced(strategy: &str, extra: &[&str]) -> (Output, String) {
    without_skipped_runs(5, &format!("a trace of {strategy}"), || {
        let (o, text) = trace_to_file("gates.jsonl", |c| {
            c.args(extra).arg("--").args(cmd(strategy));
        });
        let missed = missed_runs(&summary(&text));
        ((o, text), missed)
    })
}

fn summary(text: &str) -> Value {
    records(text)
        .into_iter()
        .rev()
        .find(|r| r["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {text}"))
}

fn verdicts(text: &str) -> Vec<String> {
    records(text)
        .iter()
        .filter(|r| r["type"] == "note" && r["level"] == "verdict")
        .map(|r| r["message"].as_str().unwrap().to_string())
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
#[ignore = "needs root and BTF"]
fn fail_on_strategy_fails_the_close_loop_and_passes_close_range() {
    let _g = guard();
    let (o, text) = traced(
        "close-loop",
        &["--fail-on-strategy", "close-loop,procfd-walk"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let s = summary(&text);
    assert_eq!(
        (s["exit_code"].as_u64(), s["exit_reason"].as_str()),
        (Some(3), Some("strategy"))
    );
    let v = verdicts(&text);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].starts_with(
            "--fail-on-strategy close-loop,procfd-walk: 2 spawns used it (exit status 3): pid "
        ) && v[0].contains(" /bin/true: close-loop to 512"),
        "{v:?}"
    );

    let (o, text) = traced("close-range", &["--fail-on-strategy", "close-loop"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(summary(&text)["exit_reason"], "command");
    assert!(verdicts(&text).is_empty());

    // Every spawn is judged, whatever the output filters show.
    let (o, text) = traced(
        "close-loop",
        &["--fail-on-strategy", "close-loop", "--exec", "/nonexistent"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(of_type(&records(&text), "spawn").is_empty(), "filtered out");

    // In text mode the verdict is on stderr, as --fail-on-leak's.
    let o = Command::new(fdaudit())
        .args(["trace", "-q", "--fail-on-strategy", "close-loop", "--"])
        .args(cmd("close-loop"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("verdict: --fail-on-strategy close-loop: 2 spawns used it"),
        "{}",
        stderr(&o)
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn max_closes_counts_close_and_close_range_calls() {
    let _g = guard();
    // The loop closes 3..512: 509 calls.
    let (o, text) = traced("close-loop", &["--max-closes", "100"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(summary(&text)["exit_reason"], "closes");
    let v = verdicts(&text);
    assert!(
        v.len() == 1
            && v[0].starts_with(
                "--max-closes 100: 2 spawns made more closing calls (exit status 3): pid "
            )
            && v[0].contains(" /bin/true: 509 (close 509, close_range 0)"),
        "{v:?}"
    );
    let (o, _) = traced("close-loop", &["--max-closes", "509"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "509 is not more than 509: {}",
        stderr(&o)
    );
    // close_range is one call: 1 is more than 0, not more than 1.
    let (o, text) = traced("close-range", &["--max-closes", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        verdicts(&text)[0].contains("(close 0, close_range 1)"),
        "{text}"
    );
    let (o, _) = traced("close-range", &["--max-closes", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Both gates: the exit reason is the first, each has its verdict line.
    let (o, text) = traced(
        "close-loop",
        &["--max-closes", "100", "--fail-on-strategy", "close-loop"],
    );
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(summary(&text)["exit_reason"], "strategy");
    assert_eq!(verdicts(&text).len(), 2, "{text}");
}

fn diff(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(fdaudit())
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit diff")
}

#[test]
#[ignore = "needs root and BTF"]
fn diff_of_two_traces_reports_the_strategy_change() {
    let _g = guard();
    let (o, before) = traced("close-loop", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (o, after) = traced("close-range", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (temp_path("before.jsonl"), temp_path("after.jsonl"));
    std::fs::write(&a, before).unwrap();
    std::fs::write(&b, after).unwrap();

    // The fix: better, exit 0.
    let o = diff(&a, &b, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let recs = records(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(recs[0]["command"], "diff");
    let row = of_type(&recs, "diff_group")
        .into_iter()
        .find(|g| g["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no /bin/true group: {recs:?}"))
        .clone();
    assert_eq!(row["change"], "better", "{row}");
    assert_eq!(
        (row["a"]["strategy"].as_str(), row["b"]["strategy"].as_str()),
        (Some("close-loop"), Some("close-range"))
    );
    assert_eq!(
        (
            row["a"]["close_calls_median"].as_u64(),
            row["b"]["close_calls_median"].as_u64()
        ),
        (Some(509), Some(0))
    );
    let s = recs.last().unwrap();
    assert_eq!(
        (s["type"].as_str(), s["exit_reason"].as_str()),
        (Some("summary"), Some("ok"))
    );

    // The other way round: a regression, exit 3, said in the table and the verdict.
    let o = diff(&b, &a, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("close-range → close-loop") && table.contains("worse"),
        "{table}"
    );
    assert!(stderr(&o).contains("verdict: "), "{}", stderr(&o));
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
}
