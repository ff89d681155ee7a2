//! `fdaudit trace --reads`: byte-at-a-time reads are flagged with strace's count, block reads
//! are not. Root only (eBPF); CI runs it as root.

use std::process::{Command, Stdio};

use fdaudit_tests::{records, require_root};
use serde_json::Value;

const ENV: [&str; 4] = [
    "env",
    "-i",
    "PATH=/usr/bin:/bin",
    "FDAUDIT_TEST=byte-at-a-time-reads",
];
const LOOP: &str = "printenv; seq 1 300 | while read l; do :; done";

fn storms(cmd: &[&str]) -> Vec<Value> {
    let (out, text) = fdaudit_tests::trace_to_file("reads.jsonl", |c| {
        c.args(["--reads", "--"]).args(cmd);
    });
    fdaudit_tests::assert_success(&out);
    records(&text)
        .into_iter()
        .filter(|r| r["type"] == "read_storm")
        .collect()
}

/// read() calls on fd 0 that strace sees for the same command.
fn strace_reads_on_stdin(cmd: &[&str]) -> u64 {
    let log = std::env::temp_dir().join(format!("fdaudit-reads-{}.strace", std::process::id()));
    let st = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=read", "-o"])
        .arg(&log)
        .args(cmd)
        .stdout(Stdio::null())
        .stdin(Stdio::null())
        .status()
        .expect("strace is installed by .ci/setup");
    assert!(st.success());
    let text = std::fs::read_to_string(&log).expect("strace log");
    let _ = std::fs::remove_file(&log);
    text.lines().filter(|l| l.contains(" read(0,")).count() as u64
}

#[test]
#[ignore = "needs root and BTF"]
fn while_read_under_dash_and_bash_is_flagged_with_the_strace_count() {
    require_root();
    for shell in ["dash", "bash"] {
        let mut cmd: Vec<&str> = ENV.to_vec();
        cmd.extend([shell, "-c", LOOP]);
        let flagged = storms(&cmd);
        let s = flagged
            .iter()
            .find(|s| s["fd"] == 0 && s["target"].as_str().unwrap_or("").starts_with("pipe:"))
            .unwrap_or_else(|| panic!("{shell}: no storm on the pipe: {flagged:?}"));
        let calls = s["calls"].as_u64().unwrap();
        let expected = strace_reads_on_stdin(&cmd);
        let diff = (calls as f64 - expected as f64).abs() / expected as f64;
        assert!(
            diff <= 0.05,
            "{shell}: fdaudit {calls} read calls, strace {expected}"
        );
        // seq 1 300 writes 1092 bytes: one read per byte plus the one at end of file.
        assert!(calls >= 1092, "{shell}: {s}");
        assert!(s["bytes_per_call"].as_f64().unwrap() <= 1.0);
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn block_reads_are_not_flagged() {
    require_root();
    let big = std::env::temp_dir().join(format!("fdaudit-reads-big-{}", std::process::id()));
    std::fs::write(&big, "line of text\n".repeat(200_000)).unwrap();
    let script = format!("cat {} | wc -l", big.display());
    let flagged = storms(&["sh", "-c", &script]);
    let _ = std::fs::remove_file(&big);
    assert!(flagged.is_empty(), "{flagged:?}");
}

/// A storm's file is named even when its process is gone by the end of the trace: it is
/// looked up while the process still reads.
#[test]
#[ignore = "needs root and BTF"]
fn the_file_of_a_storm_is_named_after_its_process_exits() {
    require_root();
    let file = std::env::temp_dir().join(format!("fdaudit-reads-lines-{}", std::process::id()));
    std::fs::write(&file, "a line of text\n".repeat(40)).unwrap();
    let inner = format!("while read l; do sleep 0.02; done < {}", file.display());
    let script = format!("dash -c '{inner}'; sleep 0.5");
    let flagged = storms(&["sh", "-c", &script]);
    let _ = std::fs::remove_file(&file);
    let s = flagged
        .iter()
        .find(|s| s["fd"] == 0)
        .unwrap_or_else(|| panic!("no storm on fd 0: {flagged:?}"));
    assert_eq!(s["target"], file.display().to_string(), "{s}");
}

/// #26 item 8: a reader that is gone within milliseconds of its storm still has its file
/// named by path, not `inode N`: the kernel walks the path while the file is open. The
/// issue's python3 one-liner (on a 1000-byte file, as /etc/hostname may be shorter than a
/// storm; where python3 is installed: the QEMU guests have none) and dash's `while read`,
/// which reads a byte at a time and exits at once. Three runs each, as a look-up from /proc
/// after the fact wins the race now and then.
#[test]
#[ignore = "needs root and BTF"]
fn the_file_of_a_reader_that_exits_at_once_is_named_by_its_path() {
    require_root();
    let file = std::env::temp_dir().join(format!("fdaudit-reads-fast-{}", std::process::id()));
    std::fs::write(&file, "a".repeat(99).repeat(10) + "\n").unwrap();
    let name = file.display().to_string();
    let python = format!("import os; fd=os.open({name:?}, 0); [os.read(fd,1) for _ in range(500)]");
    let dash = format!("while read l; do :; done < {name}");
    let has_python = Command::new("python3")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mut readers = vec![("dash", vec!["dash", "-c", dash.as_str()], 991)];
    if has_python {
        readers.push(("python3", vec!["python3", "-c", python.as_str()], 500));
    }
    for (comm, cmd, small) in readers {
        for run in 0..3 {
            let flagged = storms(&cmd);
            let s = flagged
                .iter()
                .find(|s| s["comm"] == comm)
                .unwrap_or_else(|| panic!("{comm} run {run}: no storm: {flagged:?}"));
            assert_eq!(s["target"], name, "{comm} run {run}: {s}");
            assert_eq!(s["small_reads"], small, "{comm} run {run}: {s}");
        }
    }
    let _ = std::fs::remove_file(&file);
}
