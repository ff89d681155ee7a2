//! `fdaudit trace -p` on running processes, and bad input: one line, nothing left attached.
//! These load the real eBPF programs, so they need root (CI runs them as root).

use crate::common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};

use common::*;
use fdaudit_tests::{default_stop_signals, fdaudit, records, target_bin, temp_path};
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
    // With -p the records go to stdout.
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(recs.last().unwrap()["type"], "summary");
    assert_eq!(recs.last().unwrap()["exit_reason"], "ok");
}

/// Reads the tracer's output until it says it is attached (its "tracing ..." note, a line
/// or a JSON record); returns what it read.
fn wait_attached(stream: &mut impl std::io::BufRead) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stream
                .read_line(&mut line)
                .expect("read the tracer's output")
                > 0,
            "tracer ended early: {seen}"
        );
        seen.push_str(&line);
        if line.contains("tracing ") && line.contains("Ctrl-C to stop") {
            return seen;
        }
    }
}

/// Waits until the tracer's `-o` file holds its "tracing ..." note.
fn wait_attached_file(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains("Ctrl-C to stop")) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!(
        "the tracer never said it was attached in {}",
        path.display()
    );
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
    // With -p and --json every record, the "tracing ..." note included, is on stdout.
    let mut tracer = Command::new(fdaudit())
        .args(["trace", "--json", "-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tracer");
    let mut reader = BufReader::new(tracer.stdout.take().unwrap());
    let mut stdout = wait_attached(&mut reader);
    fx.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(fx.wait().unwrap().success());
    std::io::Read::read_to_string(&mut reader, &mut stdout).unwrap();
    let status = tracer.wait().unwrap();
    assert!(status.success(), "tracer: {status}");
    let spawns: Vec<Value> = records(&stdout)
        .into_iter()
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
                "execve_exit",
                "execveat_exit",
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

    // A command that cannot be exec'd: as a shell says, 127 for ENOENT, with path and errno.
    let out = Command::new(fdaudit())
        .args(["trace", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: failed to exec /nonexistent/cmd: ENOENT"),
        "{err}"
    );

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
    let file = temp_path("ctrl-c.jsonl");
    let mut tracer = default_stop_signals(&mut Command::new(fdaudit()))
        .args(["trace", "--json", "-o"])
        .arg(&file)
        .args(["--", "sh", "-c", "exec sleep 31.4159 >/dev/null 2>&1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_attached_file(&file);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    assert_eq!(tracer.wait().unwrap().code(), Some(130));
    let recs = records(&std::fs::read_to_string(&file).unwrap());
    let _ = std::fs::remove_file(&file);
    let last = recs.last().unwrap();
    assert_eq!(last["type"], "summary", "{last}");
    assert_eq!(last["exit_reason"], "interrupted", "{last}");
    assert_eq!(last["exit_code"], 130, "{last}");
    // fdaudit passed the SIGINT on (tests/tests/trace_signals.rs checks the command ended).

    assert_eq!(settled_programs(), before, "programs left attached");
}

#[test]
#[ignore = "needs root and BTF"]
fn no_syscalls_reports_leaks_without_syscall_counts() {
    let _g = guard();
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (spawns, summary, _) = trace(&["--no-syscalls"], &as_strs(&cmd));
    assert_eq!(spawns.len(), 1);
    assert_eq!(spawns[0]["leaked_fds"][0]["fd"], 7);
    assert_eq!(spawns[0]["strategy"], "unknown");
    assert!(spawns[0]["flags"]
        .as_array()
        .unwrap()
        .contains(&Value::from("no_syscalls")));
    assert_eq!(summary["no_syscalls"], true);

    // While it runs, no syscall program is in the kernel: only the scheduler hooks.
    let before = settled_programs();
    let mut tracer = Command::new(fdaudit())
        .args(["trace", "--no-syscalls", "--", "sleep", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The records (text here) go to stderr with -- CMD: keep reading them to the end.
    let mut reader = BufReader::new(tracer.stderr.take().unwrap());
    let mut seen = wait_attached(&mut reader);
    let during = loaded_programs();
    std::io::Read::read_to_string(&mut reader, &mut seen).unwrap();
    assert!(tracer.wait().unwrap().success(), "{seen}");
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

/// The running kernel's (major, minor), from uname.
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The `map_flags` of every hash map with `entries` entries that process `pid` holds, read
/// from its fds' fdinfo (map fdinfo carries the type, sizes and flags, not the name).
fn hash_map_flags(pid: u32, entries: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
    {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        if field("map_type:").as_deref() == Some("1")
            && field("max_entries:") == Some(entries.to_string())
        {
            let flags = field("map_flags:").expect("map_flags");
            found.push(u32::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap());
        }
    }
    found
}

#[test]
#[ignore = "needs root and BTF"]
fn the_traced_process_table_is_preallocated_only_before_6_1() {
    let _g = guard();
    let out = temp_path("prealloc.txt");
    let mut tracer = Command::new(fdaudit())
        .args([
            "trace",
            "--json",
            "-o",
            out.to_str().unwrap(),
            "--",
            "sleep",
            "2",
        ])
        .spawn()
        .unwrap();
    wait_attached_file(&out);
    let flags = hash_map_flags(tracer.id(), 32768);
    assert!(tracer.wait().unwrap().success());
    let _ = std::fs::remove_file(&out);
    // Before 6.1 a tracing program on a hash map that is not preallocated makes the kernel
    // WARN; from 6.1 entries are allocated as inserted (BPF_F_NO_PREALLOC, 1), which
    // spares ~1 ms of start-up.
    let want = if kernel_version() >= (6, 1) { 1 } else { 0 };
    assert_eq!(
        flags,
        vec![want],
        "TRACKED's map_flags on {:?}",
        kernel_version()
    );
}

/// pids of the processes named `fdaudit`, with the targets of their fds.
fn fdaudit_processes() -> Vec<(u32, Vec<String>)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| fdaudit_tests::is_fdaudit_comm(&c))
        })
        .map(|pid| {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| std::fs::read_link(e.path()).ok())
                        .map(|t| t.to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            (pid, fds)
        })
        .collect()
}

/// Waits until no process named fdaudit is left, for at most `secs`; whether none is.
fn no_fdaudit_within(secs: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if fdaudit_processes().is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fdaudit_processes().is_empty()
}

/// After `trace` exits, its holder child keeps only program-less perf events on the syscall
/// trace events (the anchors that spare the next trace the unregistration's wait), no BPF
/// object, and is gone within seconds.
#[test]
#[ignore = "needs root and BTF"]
fn the_holder_keeps_only_anchors_and_goes_within_seconds() {
    let _g = guard();
    assert!(
        no_fdaudit_within(10),
        "an fdaudit is left from before: {:?}",
        fdaudit_processes()
    );
    let out = Command::new(fdaudit())
        .args(["trace", "-q", "--", "/bin/true"])
        .env_remove("FDAUDIT_BACKEND")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The holder closes its BPF fds once fdaudit has exited (slowly in an emulated guest),
    // then keeps its anchors 2 s.
    let tracepoints = fdaudit_tests::syscall_tracepoints();
    if tracepoints {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut seen = fdaudit_processes();
        let anchored_only = |holders: &[(u32, Vec<String>)]| {
            holders.len() == 1
                && holders[0].1.iter().any(|t| t == "anon_inode:[perf_event]")
                && !holders[0].1.iter().any(|t| t.starts_with("anon_inode:bpf"))
        };
        while !anchored_only(&seen) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = fdaudit_processes();
        }
        assert!(
            anchored_only(&seen),
            "one holder, with perf events (the anchors) and no BPF object left: {seen:?}"
        );
    }
    assert!(
        no_fdaudit_within(5),
        "the holder outlived its linger: {:?}",
        fdaudit_processes()
    );
    assert!(
        settled_programs().is_empty(),
        "programs left: {:?}",
        settled_programs()
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn the_btf_offsets_are_cached_per_kernel_and_binary() {
    let _g = guard();
    let dir = temp_path("btf-cache");
    let secret = secret_file();
    let leak = fixture(&["leak7", secret.as_str()]);
    // One traced leak: whether its offsets were cached, and the leaked fd's target (which
    // only right offsets find).
    let json = temp_path("btf-cache.json");
    let run = || {
        let out = Command::new(fdaudit())
            .env("FDAUDIT_CACHE_DIR", &dir)
            .args(["trace", "-v", "--json", "-o"])
            .arg(&json)
            .arg("--")
            .args(&leak)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let recs = records(&std::fs::read_to_string(&json).unwrap());
        let spawn = recs.iter().find(|r| r["type"] == "spawn").expect("a spawn");
        assert_eq!(spawn["leaked_fds"][0]["target"], secret.as_str(), "{err}");
        err.contains("(cached offsets)")
    };
    assert!(!run(), "nothing cached yet");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("btf-") && name.ends_with(".bin"), "{name}");
    assert!(run(), "the second trace reads the cache");
    // A damaged file is parsed around and written again.
    let whole = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &whole[..whole.len() / 2]).unwrap();
    assert!(!run(), "a truncated file is a miss");
    assert_eq!(std::fs::read(&files[0]).unwrap(), whole);
    assert!(run());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&json);
}
