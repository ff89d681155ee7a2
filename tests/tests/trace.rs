//! `fdaudit trace` against fixture spawners whose behaviour is known exactly. These load the
//! real eBPF programs and trace real children, so they need root (CI runs them as root).

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use fdaudit_tests::{fdaudit, is_root, target_bin};
use serde_json::Value;

/// The tests load programs and time syscalls: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn guard() -> Option<std::sync::MutexGuard<'static, ()>> {
    if !is_root() {
        eprintln!("skipping: tracing needs root (CI runs these as root)");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Runs `fdaudit trace --json [extra] -- cmd...`; returns (spawn objects, summary, output).
fn trace(extra: &[&str], cmd: &[&str]) -> (Vec<Value>, Value, Output) {
    let out = Command::new(fdaudit())
        .arg("trace")
        .arg("--json")
        .args(extra)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The traced command shares stdout: its own lines are not JSON objects.
    let objs: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with("{\"type\":"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
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

fn spawner(strategy: &str, nofile: u32, open_fds: u32, n: u32) -> Vec<String> {
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
fn true_spawns(strategy: &str, nofile: u32, open_fds: u32, n: u32) -> Vec<Value> {
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
    kids
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn close_loop_counts_every_close_and_every_ebadf() {
    let Some(_g) = guard() else { return };
    for s in true_spawns("close-loop", 1024, 10, 3) {
        assert_eq!(u(&s["close_calls"]), 1021, "{s}");
        // fds 3..=9 are open in the child: 7 closes succeed.
        assert_eq!(u(&s["close_ebadf"]), 1014, "{s}");
        assert_eq!(s["strategy"], "close-loop");
        assert_eq!(u(&s["close_loop_bound"]), 1024);
        assert_eq!(u(&s["leaked_count"]), 0, "{s}");
        assert!(u(&s["window_ns"]) > 0 && u(&s["window_corrected_ns"]) <= u(&s["window_ns"]));
        assert_eq!(s["flags"].as_array().unwrap().len(), 0, "{s}");
    }
}

#[test]
fn close_loop_to_the_hard_limit() {
    let Some(_g) = guard() else { return };
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    let limit = hard.rlim_max.min(1 << 20) as u32;
    for s in true_spawns("close-loop", limit, 3, 2) {
        assert_eq!(u(&s["close_calls"]), u64::from(limit - 3), "{s}");
        assert_eq!(u(&s["close_ebadf"]), u64::from(limit - 3), "{s}");
    }
}

#[test]
fn close_range_is_one_call_with_its_range() {
    let Some(_g) = guard() else { return };
    for s in true_spawns("close-range", 1024, 10, 2) {
        assert_eq!(u(&s["close_range_calls"]), 1, "{s}");
        assert_eq!(s["close_ranges"][0], serde_json::json!([3, u32::MAX, 0]));
        assert_eq!(u(&s["close_calls"]), 0);
        assert_eq!(s["strategy"], "close-range");
        assert_eq!(u(&s["leaked_count"]), 0);
    }
    if !fdaudit_tests::close_range_cloexec_supported() {
        eprintln!("skipping close-range-cloexec: this kernel refuses CLOSE_RANGE_CLOEXEC (5.11+)");
        return;
    }
    for s in true_spawns("close-range-cloexec", 1024, 10, 1) {
        assert_eq!(
            s["close_ranges"][0],
            serde_json::json!([3, u32::MAX, 4]),
            "{s}"
        );
        // CLOSE_RANGE_CLOEXEC marks them; the exec closes them: nothing leaks.
        assert_eq!(u(&s["leaked_count"]), 0);
    }
}

#[test]
fn fcntl_poll_and_procfd_scans() {
    let Some(_g) = guard() else { return };
    for s in true_spawns("fcntl-loop", 1024, 10, 1) {
        assert_eq!(u(&s["fcntl_setfd_calls"]), 1021, "{s}");
        assert_eq!(s["strategy"], "fcntl-scan");
    }
    for s in true_spawns("poll-scan", 1024, 10, 1) {
        assert_eq!(u(&s["poll_calls"]), 1, "{s}");
        assert_eq!(u(&s["poll_nfds_max"]), 1024);
        assert_eq!(u(&s["close_calls"]), 7, "only the open fds are closed");
        assert_eq!(u(&s["close_ebadf"]), 0);
        assert_eq!(s["strategy"], "poll-scan");
    }
    for s in true_spawns("procfd-walk", 1024, 10, 1) {
        assert_eq!(u(&s["procfd_opens"]), 1, "{s}");
        assert!(u(&s["getdents64_calls"]) >= 1);
        // The 7 open fds and the directory itself.
        assert_eq!(u(&s["close_calls"]), 8);
        assert_eq!(u(&s["close_ebadf"]), 0);
        assert_eq!(s["strategy"], "procfd-walk");
    }
    for s in true_spawns("none", 1024, 10, 1) {
        assert_eq!(u(&s["leaked_count"]), 7, "{s}");
        assert_eq!(s["strategy"], "none");
    }
}

fn secret_file() -> tempfile_path::TempPath {
    tempfile_path::TempPath::new("fdaudit-test-secret.key")
}

mod tempfile_path {
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

fn fixture(args: &[&str]) -> Vec<String> {
    let mut v = vec![target_bin("trace-fixture").display().to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn posix_spawn_leaks_fd_7_with_its_path() {
    let Some(_g) = guard() else { return };
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (spawns, summary, out) = trace(&[], &as_strs(&cmd));
    assert!(out.status.success());
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    let s = &spawns[0];
    assert_eq!(s["parent_comm"], "trace-fixture");
    let fds: BTreeSet<u64> = s["leaked_fds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| u(&f["fd"]))
        .collect();
    assert_eq!(fds, BTreeSet::from([7]), "{s}");
    let f = &s["leaked_fds"][0];
    assert_eq!(f["kind"], "regular");
    assert_eq!(f["target"], secret.as_str());
    assert_eq!(f["access"], "r");
    assert_eq!(u(&summary["totals"]["spawns_with_leaks"]), 1);
}

#[test]
fn fail_on_leak_sets_the_exit_status() {
    let Some(_g) = guard() else { return };
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (_, _, out) = trace(&["--fail-on-leak"], &as_strs(&cmd));
    assert_eq!(out.status.code(), Some(3));
    let (_, _, out) = trace(&["--fail-on-leak"], &as_strs(&fixture(&["vfork"])));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn vfork_thread_exec_failed_exec_and_grandchild() {
    let Some(_g) = guard() else { return };
    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["vfork"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(spawns[0]["exec_path"], "/bin/true");
    assert_eq!(spawns[0]["parent_comm"], "trace-fixture");

    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["thread-exec"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    let tid = u(&spawns[0]["exec_tid"]);
    assert_ne!(tid, u(&spawns[0]["pid"]), "exec came from a second thread");

    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["failed-exec"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(u(&spawns[0]["exec_attempts"]), 2);
    assert_eq!(spawns[0]["exec_path"], "/bin/true");

    let (spawns, summary, out) = trace(&[], &as_strs(&fixture(&["grandchild"])));
    assert!(out.status.success());
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    let root = spawns[0]["parent_pid"].clone();
    // The exec'ing process is a grandchild: its parent is the fixture's fork-only child.
    assert_eq!(spawns[0]["parent_comm"], "trace-fixture");
    assert_eq!(u(&summary["fork_only_children"]), 1, "{summary}");
    assert_ne!(root, Value::Null);
}

#[test]
fn exec_chain_counts_the_helper_and_leaks_at_the_last_exec() {
    let Some(_g) = guard() else { return };
    let secret = secret_file();
    let cmd = fixture(&["chain", secret.as_str()]);
    let (spawns, summary, out) = trace(&["--fail-on-leak"], &as_strs(&cmd));
    assert_eq!(out.status.code(), Some(0), "the last image leaked nothing");
    assert_eq!(spawns.len(), 2, "{spawns:?}");
    let (helper, fin) = (&spawns[0], &spawns[1]);
    assert_eq!(helper["leaked_fds"][0]["fd"], 7, "{helper}");
    assert_eq!(fin["exec_path"], "/bin/true");
    assert_eq!(fin["pid"], helper["pid"]);
    assert!(
        fin["flags"]
            .as_array()
            .unwrap()
            .contains(&Value::from("reexec")),
        "{fin}"
    );
    assert_eq!(
        u(&fin["close_range_calls"]),
        1,
        "the helper's close_range: {fin}"
    );
    assert_eq!(fin["strategy"], "close-range");
    assert_eq!(u(&fin["leaked_count"]), 0);
    assert!(u(&fin["window_ns"]) > 0);
    assert_eq!(u(&summary["totals"]["spawns_with_leaks"]), 0);
    assert_eq!(u(&summary["totals"]["transient_leaked_fds"]), 1);
}

#[test]
fn a_child_whose_every_exec_fails_is_a_failed_spawn() {
    let Some(_g) = guard() else { return };
    let (spawns, _, _) = trace(&[], &["sh", "-c", "/nonexistent/fdaudit-test; true"]);
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(spawns[0]["exec_ok"], false);
    assert_eq!(u(&spawns[0]["exec_attempts"]), 1);
    assert_eq!(spawns[0]["parent_comm"], "sh");
}

#[test]
fn exit_status_is_the_commands() {
    let Some(_g) = guard() else { return };
    let (_, _, out) = trace(&[], &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let (_, _, out) = trace(&[], &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
}

#[test]
fn leaks_only_reports_leaks_without_syscall_counts() {
    let Some(_g) = guard() else { return };
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

#[test]
fn a_pid_that_exits_while_traced_ends_the_trace_cleanly() {
    let Some(_g) = guard() else { return };
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
fn attach_to_a_running_parent_with_p() {
    let Some(_g) = guard() else { return };
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
fn bad_input_gives_one_line_and_leaves_nothing_attached() {
    let Some(_g) = guard() else { return };
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
fn read_storm_counts_match_the_fixture() {
    let Some(_g) = guard() else { return };
    let (_, summary, out) = trace(&["--reads"], &as_strs(&fixture(&["read-bytes", "1000"])));
    assert!(out.status.success());
    let storms = summary["read_storms"].as_array().expect("read_storms");
    let s = storms
        .iter()
        .find(|s| s["fd"] == 9)
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(
        u(&s["calls"]),
        1001,
        "1000 one-byte reads and the one that saw EOF"
    );
    assert_eq!(u(&s["bytes"]), 1000);
    assert!(s["target"].as_str().unwrap().starts_with("pipe:["));
    assert_eq!(s["comm"], "trace-fixture");
}

/// `fdaudit trace --json -- cmd` with extra environment; the spawn records of `exec_path`.
fn spawns_with_env(env: &[(&str, &str)], cmd: &[&str], exec_path: &str) -> Vec<Value> {
    let out = Command::new(fdaudit())
        .args(["trace", "--json", "--"])
        .args(cmd)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    assert!(
        out.status.success(),
        "trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("{\"type\":\"spawn\""))
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter(|s| s["exec_path"] == exec_path)
        .collect()
}

fn leaked(s: &Value) -> Vec<(u64, String)> {
    s["leaked_fds"]
        .as_array()
        .unwrap_or_else(|| panic!("no leaked_fds: {s}"))
        .iter()
        .map(|f| (u(&f["fd"]), f["target"].as_str().unwrap_or("").to_string()))
        .collect()
}

fn has_flag(s: &Value, flag: &str) -> bool {
    s["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

/// The exec walk kernels without bpf_loop get (forced here): fd 7 with its path, and a
/// table larger than its bound reported as cut, with the bounded_walk flag.
#[test]
fn bounded_walk_reports_fd_7_and_flags_a_table_past_its_bound() {
    let Some(_g) = guard() else { return };
    let forced = [("FDAUDIT_EXEC_WALK", "bounded")];
    let small = ["sh", "-c", "exec 7</etc/hostname; exec /bin/true"];
    let s = &spawns_with_env(&forced, &small, "/bin/true")[0];
    assert!(
        leaked(s).contains(&(7, "/etc/hostname".into())),
        "fd 7 missing: {s}"
    );
    assert!(!has_flag(s, "bounded_walk"), "a small table is whole: {s}");
    // fd 4000 grows the table to 4096 entries, past the bounded walk's 3072.
    let big = [
        "bash",
        "-c",
        "ulimit -n 4096 && exec 7</etc/hostname 4000</etc/hostname && exec /bin/true",
    ];
    let s = &spawns_with_env(&forced, &big, "/bin/true")[0];
    let fds = leaked(s);
    assert!(fds.contains(&(7, "/etc/hostname".into())), "{s}");
    assert!(!fds.iter().any(|(fd, _)| *fd == 4000), "{s}");
    assert!(
        has_flag(s, "bounded_walk") && has_flag(s, "fdtable_truncated"),
        "{s}"
    );
}
