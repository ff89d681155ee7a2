//! `fdaudit trace -p` on running processes, and bad input: one line, nothing left attached.
//! These load the real eBPF programs, so they need root (CI runs them as root).

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};

use common::*;
use fdaudit_tests::{fdaudit, target_bin};
use serde_json::Value;

#[test]
#[ignore = "needs root and BTF"]
fn a_pid_that_exits_while_traced_ends_the_trace_cleanly() {
    let _g = guard();
    let mut target = Command::new("sleep").arg("1").spawn().unwrap();
    let out = Command::new(fdaudit())
        .args(["trace", "--json", "-p", &target.id().to_string()])
        .output()
        .unwrap();
    let _ = target.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    assert!(last.starts_with("{\"type\":\"summary\""), "{stdout}");
}

/// Reads the tracer's stderr until it says it is attached.
fn wait_attached(stderr: &mut impl std::io::BufRead) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("read stderr") > 0,
            "tracer ended early"
        );
        if line.contains("fdaudit: tracing") {
            return;
        }
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn attach_to_a_running_parent_with_p() {
    let _g = guard();
    let secret = secret_file();
    let mut fx = Command::new(target_bin("trace-fixture"))
        .args(["wait-then-spawn", secret.as_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fixture");
    let mut ready = String::new();
    BufReader::new(fx.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let pid: u32 = ready
        .trim()
        .strip_prefix("ready ")
        .unwrap()
        .parse()
        .unwrap();
    let mut tracer = Command::new(fdaudit())
        .args(["trace", "--json", "-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tracer");
    wait_attached(&mut BufReader::new(tracer.stderr.take().unwrap()));
    fx.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(fx.wait().unwrap().success());
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "tracer: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let spawns: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|o| o["type"] == "spawn")
        .collect();
    assert_eq!(spawns.len(), 1, "{stdout}");
    assert_eq!(u(&spawns[0]["parent_pid"]), u64::from(pid));
    assert_eq!(spawns[0]["leaked_fds"][0]["fd"], 7);
    assert_eq!(spawns[0]["leaked_fds"][0]["target"], secret.as_str());
}

/// fdaudit's programs loaded in the kernel, once the count has been stable for half a
/// second (the kernel frees a closed program a moment after its last fd goes).
fn settled_programs() -> Vec<String> {
    let mut last = loaded_programs();
    let mut stable_since = std::time::Instant::now();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = loaded_programs();
        if now != last {
            last = now;
            stable_since = std::time::Instant::now();
        } else if stable_since.elapsed() >= std::time::Duration::from_millis(500) {
            break;
        }
    }
    last
}

/// Names of fdaudit's BPF programs loaded in the kernel, via bpftool.
fn loaded_programs() -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .expect("bpftool is installed by .ci/setup");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("name ").nth(1))
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .filter(|n| {
            [
                "sched_process_fo",
                "sched_process_ex",
                "sys_enter",
                "sys_exit",
            ]
            .iter()
            .any(|p| n.starts_with(p))
        })
        .collect()
}

#[test]
#[ignore = "needs root and BTF"]
fn bad_input_gives_one_line_and_leaves_nothing_attached() {
    let _g = guard();
    let before = settled_programs();
    let out = Command::new(fdaudit())
        .args(["trace", "-p", "999999999"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: no process with PID 999999999"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = Command::new(fdaudit())
        .args(["trace", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed to start /nonexistent/cmd"));

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(fdaudit())
        .args(["trace", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");

    // Ctrl-C while tracing: a clean summary, status 130.
    let mut tracer = Command::new(fdaudit())
        // The command must not hold the test's stdout pipe open past fdaudit's exit.
        .args([
            "trace",
            "--json",
            "--",
            "sh",
            "-c",
            "exec sleep 31.4159 >/dev/null 2>&1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_attached(&mut BufReader::new(tracer.stderr.take().unwrap()));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let out = tracer.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    assert!(last.contains("\"type\":\"summary\""), "{last}");
    // The command got no SIGINT (only fdaudit did): end it.
    let _ = Command::new("pkill")
        .args(["-x", "-f", "sleep 31.4159"])
        .status();

    assert_eq!(settled_programs(), before, "programs left attached");
}

#[test]
#[ignore = "needs root and BTF"]
fn leaks_only_reports_leaks_without_syscall_counts() {
    let _g = guard();
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (spawns, summary, _) = trace(&["--leaks-only"], &as_strs(&cmd));
    assert_eq!(spawns.len(), 1);
    assert_eq!(spawns[0]["leaked_fds"][0]["fd"], 7);
    assert_eq!(spawns[0]["strategy"], "unknown");
    assert!(spawns[0]["flags"]
        .as_array()
        .unwrap()
        .contains(&Value::from("no_syscalls")));
    assert_eq!(summary["leaks_only"], true);

    // While it runs, no syscall program is in the kernel: only the scheduler hooks.
    let before = settled_programs();
    let mut tracer = Command::new(fdaudit())
        .args(["trace", "--leaks-only", "--", "sleep", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_attached(&mut BufReader::new(tracer.stderr.take().unwrap()));
    let during = loaded_programs();
    assert!(tracer.wait().unwrap().success());
    let added: Vec<&String> = during.iter().filter(|p| !before.contains(p)).collect();
    assert!(
        added.iter().any(|p| p.starts_with("sched_process_ex")),
        "{during:?}"
    );
    assert!(
        !added.iter().any(|p| p.starts_with("sys_")),
        "syscall programs attached: {added:?}"
    );
}
