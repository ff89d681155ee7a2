//! `fdaudit bench` on a small matrix: every cell is reported with sane statistics, the fit
//! and the plot come out; as root, the traced counts match what each strategy does.

use std::process::Command;

use fdaudit_tests::{fdaudit, require_root};
use serde_json::Value;

/// Runs `fdaudit bench --json` on the 3 limits × 2 open-fd counts × 3 strategies matrix.
fn bench(extra: &[&str]) -> Vec<Value> {
    let out = Command::new(fdaudit())
        .args([
            "bench",
            "--limits",
            "256,512,1024",
            "--open-fds",
            "3,20",
            "--strategies",
            "none,close-loop,close-range",
            "-n",
            "3",
            "--batch",
            "3",
            "--json",
        ])
        .args(extra)
        .output()
        .expect("failed to run fdaudit bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed: {}\nstderr: {stderr}",
        out.status
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// The traced columns of a cell: the median per spawn of each counter.
const TRACED: [&str; 6] = [
    "close_calls_per_spawn",
    "close_range_calls_per_spawn",
    "fcntl_setfd_calls_per_spawn",
    "poll_calls_per_spawn",
    "getdents64_calls_per_spawn",
    "leaked_fds_per_spawn",
];

#[test]
fn small_matrix_reports_every_cell() {
    let dir = std::env::temp_dir().join(format!("fdaudit-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("bench.svg");
    let svg_arg = svg.to_str().expect("UTF-8 temp path");
    let objs = bench(&["--trace-spawns", "0", "--plot", svg_arg]);
    let machine = objs.first().expect("a machine line");
    assert_eq!(machine["type"], "machine", "first line names the machine");
    assert!(
        machine["kernel"]
            .as_str()
            .is_some_and(|k| k.starts_with("Linux")),
        "{machine}"
    );
    let cells: Vec<_> = objs.iter().filter(|o| o["type"] == "cell").collect();
    assert_eq!(
        cells.len(),
        3 * 2 * 3,
        "limits × open fds × strategies cells:\n{objs:?}"
    );
    for c in &cells {
        for k in [
            "strategy",
            "nofile",
            "open_fds",
            "spawns",
            "median_ns",
            "p95_ns",
        ] {
            assert!(!c[k].is_null(), "cell lacks {k}: {c}");
        }
        assert_eq!(c["spawns"], 3, "{c}");
        assert_eq!(c["failures"], 0, "{c}");
        let (m, p) = (
            c["median_ns"].as_u64().unwrap(),
            c["p95_ns"].as_u64().unwrap(),
        );
        assert!(m > 0 && p >= m, "median {m} and p95 {p}: {c}");
        // Without the traced pass the traced columns are null, not made-up zeros.
        for k in TRACED {
            assert!(c[k].is_null(), "untraced cell has {k}: {c}");
        }
        assert!(c["trace_check"].is_null(), "{c}");
    }
    let fits: Vec<_> = objs.iter().filter(|o| o["type"] == "fit").collect();
    assert_eq!(fits.len(), 2 * 3, "one fit per strategy and open-fd count");
    let svg_text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(
        svg_text.contains("<svg") && svg_text.contains("close-loop"),
        "plot content"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
#[ignore = "needs root and BTF"]
fn traced_counts_match_each_strategy() {
    require_root();
    let objs = bench(&["--trace-spawns", "2"]);
    let cells: Vec<_> = objs.iter().filter(|o| o["type"] == "cell").collect();
    assert_eq!(cells.len(), 3 * 2 * 3);
    for c in &cells {
        for k in TRACED {
            assert!(c[k].is_u64(), "traced cell lacks a count for {k}: {c}");
        }
        let (s, l, k) = (
            c["strategy"].as_str().unwrap(),
            c["nofile"].as_u64().unwrap(),
            c["open_fds"].as_u64().unwrap(),
        );
        let close = c["close_calls_per_spawn"]
            .as_u64()
            .unwrap_or_else(|| panic!("traced close count: {c}"));
        let ranges = c["close_range_calls_per_spawn"]
            .as_u64()
            .expect("traced close_range count");
        let leaked = c["leaked_fds_per_spawn"]
            .as_u64()
            .expect("traced leak count");
        match s {
            "close-loop" => assert_eq!((close, ranges, leaked), (l - 3, 0, 0), "{c}"),
            "close-range" => assert_eq!((close, ranges, leaked), (0, 1, 0), "{c}"),
            "none" => assert_eq!((close, ranges, leaked), (0, 0, k - 3), "{c}"),
            other => panic!("unexpected strategy {other}"),
        }
        assert_eq!(c["trace_check"], "ok", "{c}");
    }
}
