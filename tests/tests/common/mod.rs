//! Helpers shared by the `trace` test binaries: run `fdaudit trace --json`, the spawner and
//! the fixture, one test at a time.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::Output;

use fdaudit_tests::{fdaudit, records, target_bin};
use serde_json::Value;

/// The tests load programs and time syscalls: one at a time (asserts root first).
pub use fdaudit_tests::guard;

/// Runs `fdaudit trace --json -o FILE [extra] -- cmd...`; returns every record of FILE
/// (checked against the schema: the first is the header) and the output.
pub fn trace_records(extra: &[&str], cmd: &[&str]) -> (Vec<Value>, Output) {
    let (out, text) = fdaudit_tests::trace_to_file("trace.jsonl", |c| {
        c.args(extra).arg("--").args(cmd);
    });
    (records(&text), out)
}

/// As [`trace_records`]: (spawn records, the summary, output).
pub fn trace(extra: &[&str], cmd: &[&str]) -> (Vec<Value>, Value, Output) {
    let (objs, out) = trace_records(extra, cmd);
    let summary = objs
        .iter()
        .rev()
        .find(|o| o["type"] == "summary")
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no summary; status {}; stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let spawns = objs.into_iter().filter(|o| o["type"] == "spawn").collect();
    (spawns, summary, out)
}

pub fn spawner(strategy: &str, nofile: u32, open_fds: u32, n: u32) -> Vec<String> {
    vec![
        fdaudit().display().to_string(),
        "__spawner".into(),
        "--strategy".into(),
        strategy.into(),
        "--nofile".into(),
        nofile.to_string(),
        "--open-fds".into(),
        open_fds.to_string(),
        "-n".into(),
        n.to_string(),
    ]
}

/// Spawns of `/bin/true` (the spawner's children), checked to be `n` with no lost records.
pub fn true_spawns(strategy: &str, nofile: u32, open_fds: u32, n: u32) -> Vec<Value> {
    true_spawns_and_summary(strategy, nofile, open_fds, n).0
}

/// As [`true_spawns`], with the summary.
pub fn true_spawns_and_summary(
    strategy: &str,
    nofile: u32,
    open_fds: u32,
    n: u32,
) -> (Vec<Value>, Value) {
    let cmd = spawner(strategy, nofile, open_fds, n);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let (spawns, summary, out) = trace(&[], &cmd);
    assert!(
        out.status.success(),
        "trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary["lost_records"], 0);
    let kids: Vec<Value> = spawns
        .into_iter()
        .filter(|s| s["exec_path"] == "/bin/true")
        .collect();
    assert_eq!(kids.len(), n as usize, "{strategy}: spawns {kids:?}");
    (kids, summary)
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

pub fn secret_file() -> tempfile_path::TempPath {
    tempfile_path::TempPath::new("fdaudit-test-secret.key")
}

pub mod tempfile_path {
    /// A file in the temp dir removed on drop.
    pub struct TempPath(pub std::path::PathBuf);
    impl TempPath {
        pub fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!("{}-{name}", std::process::id()));
            std::fs::write(&p, b"hunter2\n").expect("write temp file");
            TempPath(p)
        }
        pub fn as_str(&self) -> &str {
            self.0.to_str().expect("utf-8 temp path")
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub fn fixture(args: &[&str]) -> Vec<String> {
    let mut v = vec![target_bin("trace-fixture").display().to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

pub fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
