//! A SIGKILL of fdaudit at any step of its start-up (and at the hand-off of its links on
//! exit) leaves nothing of it in the kernel beyond the documented linger: every BPF program
//! and map it held is freed within a bounded time, and no child it forked without exec
//! (the held command, the calibration child, the hand-off child) outlives it for longer.
//! Each step is reached deterministically through the test-only pause points
//! (`FDAUDIT_TEST_PAUSE`, `fdaudit/src/engine/pause.rs`). Needs root.

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fdaudit_tests::{default_stop_signals, fdaudit, guard, temp_path};

/// Every pause point, in the order a `trace -- CMD` reaches them (the engine's
/// `pause::STEPS`).
const STEPS: [&str; 7] = [
    "held",
    "maps",
    "early-attach",
    "attached",
    "tracked",
    "calibrate",
    "hand-off",
];

/// How long after the SIGKILL everything must be gone: the hand-off child's linger (2 s)
/// and the kernel's grace periods, with room for a loaded machine.
const BOUND: Duration = Duration::from_secs(10);

/// `/proc/PID/stat`'s state letter and parent pid.
fn state_and_ppid(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    Some((state, f.next()?.parse().ok()?))
}

/// Gone, or a zombie waiting for its new parent.
fn gone(pid: u32) -> bool {
    !matches!(state_and_ppid(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

/// The children of `parent` that still run fdaudit's own image (forked, never exec'd).
fn fdaudit_children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| matches!(state_and_ppid(p), Some((_, pp)) if pp == parent))
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| fdaudit_tests::is_fdaudit_comm(&c))
        })
        .collect()
}

/// The BPF objects `pid`'s fds hold, from their fdinfo: ("prog" | "map", id). A link's
/// fdinfo names its program.
fn bpf_ids(pid: u32) -> BTreeSet<(&'static str, u32)> {
    let mut ids = BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
    {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for l in info.lines() {
            let (kind, v) = match l.split_once(':') {
                Some(("prog_id", v)) => ("prog", v),
                Some(("map_id", v)) => ("map", v),
                _ => continue,
            };
            if let Ok(id) = v.trim().parse() {
                ids.insert((kind, id));
            }
        }
    }
    ids
}

/// Whether the kernel still has BPF object `id` (`bpftool prog|map show id N`).
fn loaded((kind, id): (&str, u32)) -> bool {
    Command::new("bpftool")
        .args([kind, "show", "id", &id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("bpftool is installed by .ci/setup")
        .success()
}

/// Starts `trace -- CMD` paused at `step`, SIGKILLs it there and returns what was left
/// after [`BOUND`]: BPF objects still loaded and fdaudit children still running (both
/// cleaned up before returning, so a failure leaves the shared machine as it was).
fn kill_at(step: &str) -> (Vec<(&'static str, u32)>, Vec<u32>) {
    let out = temp_path("startup.jsonl");
    // One spawn whose window makes counted closes: its record asks for the calibration.
    let mut tracer = default_stop_signals(&mut Command::new(fdaudit()))
        .env("FDAUDIT_TEST_PAUSE", step)
        .args(["trace", "--json", "-o"])
        .arg(&out)
        .arg("--")
        .arg(fdaudit())
        .args(["__spawner", "--strategy", "close-loop", "--nofile", "64"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fdaudit trace");
    let pid = tracer.id();
    let (tx, rx) = mpsc::channel();
    let stderr = tracer.stderr.take().unwrap();
    // Not joined: a child left behind may hold the pipe open.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let want = format!("paused {step}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said = Vec::new();
    while !said.contains(&want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => said.push(line),
            // Where the kernel has no syscall tracepoints (tp, failed_exec) nothing is handed
            // off: fdaudit detaches at its exit and ends without reaching the step.
            Err(mpsc::RecvTimeoutError::Disconnected)
                if step == "hand-off" && !fdaudit_tests::syscall_tracepoints() =>
            {
                let status = tracer.wait().expect("reap fdaudit");
                assert!(status.success(), "fdaudit failed: {status}: {said:?}");
                let _ = std::fs::remove_file(&out);
                return (Vec::new(), fdaudit_children(pid));
            }
            Err(_) => {
                let _ = tracer.kill();
                panic!("fdaudit never said {want:?}; it said: {said:?}");
            }
        }
    }
    while !matches!(state_and_ppid(pid), Some(('T', _))) {
        assert!(Instant::now() < deadline, "fdaudit did not stop at {step}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let held = bpf_ids(pid);
    let children = fdaudit_children(pid);
    tracer.kill().expect("SIGKILL fdaudit");
    tracer.wait().expect("reap fdaudit");
    let deadline = Instant::now() + BOUND;
    let left = loop {
        let progs: Vec<_> = held.iter().copied().filter(|&o| loaded(o)).collect();
        let kids: Vec<u32> = children.iter().copied().filter(|&c| !gone(c)).collect();
        if (progs.is_empty() && kids.is_empty()) || Instant::now() >= deadline {
            break (progs, kids);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for &c in &left.1 {
        // SAFETY: a process this test made fdaudit fork, found by its parent pid and name.
        unsafe { libc::kill(c as i32, libc::SIGKILL) };
    }
    let _ = std::fs::remove_file(&out);
    left
}

#[test]
#[ignore = "needs root and BTF"]
fn a_sigkill_at_any_startup_step_leaves_nothing_attached() {
    let _g = guard();
    let mut failures = Vec::new();
    for step in STEPS {
        let (objects, children) = kill_at(step);
        if !objects.is_empty() || !children.is_empty() {
            failures.push(format!(
                "{step}: {} s after the SIGKILL, BPF objects still loaded {objects:?}, \
                 fdaudit children still running {children:?}",
                BOUND.as_secs()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
#[ignore = "needs root and BTF"]
fn when_duration_ends_before_the_command_nothing_stays_attached_while_fdaudit_waits() {
    let _g = guard();
    let out = temp_path("duration.jsonl");
    let mut tracer = Command::new(fdaudit())
        .args(["trace", "--json", "--duration", "0.3", "-o"])
        .arg(&out)
        .args(["--", "sleep", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fdaudit trace");
    let pid = tracer.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&out).is_ok_and(|t| t.contains("--duration ended")) {
        assert!(Instant::now() < deadline, "--duration never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    // fdaudit now waits for the command (up to 3 s), untraced: it holds no BPF object,
    // and no child of it does.
    let held = bpf_ids(pid);
    let children = fdaudit_children(pid);
    let status = tracer.wait().expect("wait for fdaudit");
    let _ = std::fs::remove_file(&out);
    assert!(status.success(), "fdaudit: {status}");
    assert!(
        held.iter().all(|(kind, _)| *kind != "prog") && children.is_empty(),
        "while waiting for the command after --duration, fdaudit held {held:?} and its \
         children {children:?} kept the programs attached"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn once_trace_has_exited_pgrep_f_finds_nothing_by_its_command_line() {
    let _g = guard();
    // A word only this run's command line holds.
    let marker = format!("fdaudit-pgrep-marker-{}", std::process::id());
    let out = Command::new(fdaudit())
        .args(["trace", "-q", "--", "sh", "-c"])
        .arg(format!(": {marker}"))
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    fdaudit_tests::assert_success(&out);
    // The hand-off child keeps the trace events registered a moment after fdaudit exits
    // (where syscall tracepoints are: the tp backend); it must not answer to the command.
    // What `pgrep -f` and `pgrep -x` look at, read here (the guests have no pgrep).
    let procs: Vec<(u32, String, String)> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != std::process::id())
        .filter_map(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((p, comm.trim_end().to_owned(), cmdline))
        })
        .collect();
    let found: Vec<_> = procs.iter().filter(|p| p.2.contains(&marker)).collect();
    assert!(
        found.is_empty(),
        "pgrep -f would find {found:?} after fdaudit trace exited: a process of fdaudit \
         still has its command line"
    );
    if fdaudit_tests::syscall_tracepoints() {
        assert!(
            procs.iter().any(|p| p.1 == "fdaudit-detach"),
            "no hand-off child (comm fdaudit-detach) right after the trace: nothing was checked"
        );
    }
}
