//! `fdaudit bench` on a small matrix: every cell is reported with sane statistics, the fit
//! and the plot come out, and as root the traced counts match what each strategy does.

use std::process::Command;

use fdaudit_tests::fdaudit;

#[test]
fn small_matrix_reports_every_cell_and_traces_as_root() {
    let root = unsafe { libc::geteuid() } == 0;
    let dir = std::env::temp_dir().join(format!("fdaudit-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("bench.svg");
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
            "--plot",
        ])
        .arg(&svg)
        .output()
        .expect("failed to run fdaudit bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed: {}\nstderr: {stderr}",
        out.status
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    let objs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
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
        "limits × open fds × strategies cells:\n{stdout}"
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
        assert!(
            c.get("close_calls_per_spawn").is_some() && c.get("leaked_fds_per_spawn").is_some(),
            "{c}"
        );
    }
    let fits: Vec<_> = objs.iter().filter(|o| o["type"] == "fit").collect();
    assert_eq!(fits.len(), 2 * 3, "one fit per strategy and open-fd count");
    let svg_text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(
        svg_text.contains("<svg") && svg_text.contains("close-loop"),
        "plot content"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");

    if !root {
        eprintln!("skipping the traced checks: needs root");
        return;
    }
    for c in &cells {
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
