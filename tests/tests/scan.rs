//! Live tests of `fdaudit scan`: a fixture process (src/bin/scan-fixture.rs) holds fds of
//! known kinds and the real command line (the workspace's fdaudit binary) must report them
//! exactly. The environment may leak fds into the fixture, so the
//! fixture reports its baseline and the checks compare against it.
//!
//! The `setpriv` tests (run as uid 65534) need root and util-linux's setpriv; without root
//! they print why and pass.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use fdaudit_tests::require_root;
use serde_json::Value;

const FIXTURE: &str = env!("CARGO_BIN_EXE_scan-fixture");

/// A running scan-fixture and the fds it announced.
struct Fixture {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    baseline: BTreeSet<u64>,
    fd: BTreeMap<String, u64>,
}

impl Fixture {
    /// Starts the fixture, through `setpriv` as nobody when `as_nobody`.
    fn start(as_nobody: bool) -> Fixture {
        let mut cmd = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", FIXTURE]);
            c
        } else {
            Command::new(FIXTURE)
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {FIXTURE}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("failed to read the fixture's line");
        let mut pid = None;
        let mut baseline = BTreeSet::new();
        let mut fd = BTreeMap::new();
        for kv in line.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("bad fixture line {line:?}"));
            match k {
                "pid" => pid = Some(v.parse().expect("pid")),
                "baseline" => {
                    baseline = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.parse().expect("fd"))
                        .collect()
                }
                _ => {
                    fd.insert(k.to_owned(), v.parse().expect("number"));
                }
            }
        }
        Fixture {
            stdin: child.stdin.take(),
            child,
            pid: pid.unwrap_or_else(|| panic!("no pid in fixture line {line:?}")),
            baseline,
            fd,
        }
    }

    fn fd(&self, name: &str) -> u64 {
        self.fd[name]
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF: the fixture exits
        let _ = self.child.wait();
    }
}

fn cli(as_nobody: bool, args: &[&str]) -> Output {
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(fdaudit_tests::fdaudit());
        c
    } else {
        Command::new(fdaudit_tests::fdaudit())
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("failed to run fdaudit: {e}"))
}

/// As [`cli`], failing the test unless fdaudit exits 0.
fn cli_ok(as_nobody: bool, args: &[&str]) -> Output {
    let out = cli(as_nobody, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fdaudit {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// stdout's records, checked against the schema (the first is the header).
fn json_lines(out: &Output) -> Vec<Value> {
    fdaudit_tests::records(&String::from_utf8_lossy(&out.stdout))
}

fn of_type<'a>(lines: &'a [Value], ty: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["type"] == ty).collect()
}

/// Scans the fixture and checks its fds and findings exactly.
fn check_fixture_scan(as_nobody: bool) {
    let fx = Fixture::start(as_nobody);
    let pid = fx.pid.to_string();
    let out = cli_ok(
        as_nobody,
        &["scan", "--json", "-p", &pid, "--close-cost-ns", "1"],
    );
    let lines = json_lines(&out);
    let procs = of_type(&lines, "process");
    assert_eq!(procs.len(), 1, "one process object: {lines:?}");
    let p = procs[0];
    assert_eq!(p["pid"], fx.pid);
    assert_eq!(p["comm"], "scan-fixture");
    if as_nobody {
        assert_eq!(p["uid"], 65534);
    }
    assert!(
        p["nofile_soft"].as_u64().is_some() && p["nofile_hard"].as_u64().is_some(),
        "{p}"
    );

    let fds: BTreeMap<u64, &Value> = p["fds"]
        .as_array()
        .expect("fds list")
        .iter()
        .map(|f| (f["fd"].as_u64().expect("fd number"), f))
        .collect();
    let known = ["file", "sock", "pipe_r", "pipe_w", "memfd", "dir"];
    let mut expected: BTreeSet<u64> = fx.baseline.clone();
    expected.extend(known.iter().map(|k| fx.fd(k)));
    assert_eq!(
        fds.keys().copied().collect::<BTreeSet<_>>(),
        expected,
        "fds vs baseline + known: {p}"
    );
    assert_eq!(p["fd_count"], expected.len());

    let f = |k: &str| fds[&fx.fd(k)];
    let file = f("file");
    assert_eq!(
        (
            &file["kind"],
            &file["target"],
            &file["access"],
            &file["cloexec"]
        ),
        (
            &"regular".into(),
            &"/etc/passwd".into(),
            &"r".into(),
            &true.into()
        )
    );
    let sock = f("sock");
    assert_eq!(
        (
            &sock["kind"],
            &sock["family"],
            &sock["protocol"],
            &sock["cloexec"]
        ),
        (
            &"socket".into(),
            &"inet".into(),
            &"tcp".into(),
            &false.into()
        )
    );
    assert_eq!(sock["local"], format!("127.0.0.1:{}", fx.fd("port")));
    assert_eq!(sock["listening"], true);
    let (r, w) = (f("pipe_r"), f("pipe_w"));
    assert_eq!(
        (&r["kind"], &r["access"], &r["cloexec"]),
        (&"pipe".into(), &"r".into(), &true.into())
    );
    assert_eq!(
        (&w["kind"], &w["access"], &w["cloexec"]),
        (&"pipe".into(), &"w".into(), &false.into())
    );
    assert_eq!(r["target"], w["target"], "both ends of one pipe");
    let memfd = f("memfd");
    assert_eq!(
        (
            &memfd["kind"],
            &memfd["target"],
            &memfd["access"],
            &memfd["cloexec"]
        ),
        (
            &"memfd".into(),
            &"/memfd:scan-fixture (deleted)".into(),
            &"rw".into(),
            &false.into()
        )
    );
    let dir = f("dir");
    assert_eq!(
        (&dir["kind"], &dir["target"], &dir["cloexec"]),
        (&"directory".into(), &"/tmp".into(), &false.into())
    );

    // Findings on the known fds, exactly; the baseline's own are the environment's business.
    let findings: BTreeMap<u64, String> = of_type(&lines, "finding")
        .into_iter()
        .filter(|v| v["pid"] == fx.pid && v["rule"] == "inheritable_fd")
        .filter_map(|v| Some((v["fd"].as_u64()?, v["severity"].as_str()?.to_owned())))
        .filter(|(fd, _)| !fx.baseline.contains(fd))
        .collect();
    let want: BTreeMap<u64, String> = [
        ("sock", "critical"),
        ("dir", "high"),
        ("memfd", "medium"),
        ("pipe_w", "low"),
    ]
    .into_iter()
    .map(|(k, s)| (fx.fd(k), s.to_owned()))
    .collect();
    assert_eq!(findings, want, "{lines:?}");
    let shared: Vec<_> = of_type(&lines, "finding")
        .into_iter()
        .filter(|v| v["rule"] == "shared_description")
        .collect();
    for s in &shared {
        let fd = s["fd"].as_u64().expect("fd");
        assert!(
            fx.baseline.contains(&fd),
            "only inherited baseline fds can be shared with the parent: {s}"
        );
    }
    let summary = of_type(&lines, "summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["processes"], 1);

    // --fail-on: there is a critical finding.
    let out = cli(
        as_nobody,
        &[
            "scan",
            "-p",
            &pid,
            "--only-findings",
            "--fail-on",
            "critical",
            "--close-cost-ns",
            "1",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on met: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("critical") && text.contains(&format!("127.0.0.1:{}", fx.fd("port"))),
        "{text}"
    );
}

#[test]
fn live_fixture_exact_fds() {
    check_fixture_scan(false);
}

#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn live_fixture_exact_fds_as_nobody() {
    require_root();
    check_fixture_scan(true);
}

#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn whole_proc_as_nobody_counts_unreadable() {
    require_root();
    let out = cli_ok(true, &["scan", "--json", "--close-cost-ns", "1"]);
    let lines = json_lines(&out);
    let summary = of_type(&lines, "summary");
    assert_eq!(summary.len(), 1, "{lines:?}");
    // This test runs as root, so at least the test process itself is unreadable to nobody.
    assert!(
        summary[0]["unreadable"].as_u64().expect("unreadable") >= 1,
        "{}",
        summary[0]
    );
    // In JSON mode the counts' note is a record on the stream.
    assert!(
        of_type(&lines, "note")
            .iter()
            .any(|n| n["message"].as_str().unwrap().contains("not readable")),
        "{lines:?}"
    );
    let me = std::process::id();
    assert!(
        of_type(&lines, "process").iter().all(|p| p["pid"] != me),
        "root's test process must not be readable"
    );
}

#[test]
fn processes_vanishing_mid_scan_are_not_errors() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new("true").status();
            }
        })
    };
    for _ in 0..5 {
        let out = cli_ok(false, &["scan", "--json", "--close-cost-ns", "1"]);
        assert_eq!(of_type(&json_lines(&out), "summary").len(), 1);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().expect("churn thread");
}

fn fixture_tree() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/procfs/basic")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn fixture_tree_cli() {
    let root = fixture_tree();
    let out = cli_ok(false, &["scan", &root, "--json", "--close-cost-ns", "100"]);
    let lines = json_lines(&out);
    let pids: Vec<&Value> = of_type(&lines, "process")
        .iter()
        .map(|p| &p["pid"])
        .collect();
    assert_eq!(pids, [100, 200, 400]);
    // Container identity from PID/cgroup, namespace pid from NSpid (fixture pid 200 only).
    let procs = of_type(&lines, "process");
    let worker = procs.iter().find(|p| p["pid"] == 200).expect("pid 200");
    assert_eq!(
        worker["container_id"],
        "3f2a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"
    );
    assert_eq!(worker["container_runtime"], "containerd");
    assert_eq!(worker["pod_uid"], "8a5f6e1c-2b3d-4e5f-9a0b-1c2d3e4f5a6b");
    assert!(worker["cgroup"]
        .as_str()
        .is_some_and(|c| c.starts_with("/kubepods.slice/")));
    assert_eq!(worker["ns_pid"], 7);
    let server = procs.iter().find(|p| p["pid"] == 100).expect("pid 100");
    assert!(server.get("container_id").is_none() && server.get("ns_pid").is_none());
    let sev: Vec<(&Value, &Value, &Value)> = of_type(&lines, "finding")
        .iter()
        .map(|f| (&f["pid"], &f["fd"], &f["severity"]))
        .collect();
    assert_eq!(sev.len(), 9, "{sev:?}");
    assert_eq!(sev[0], (&100.into(), &3.into(), &"critical".into()));

    let out = cli(
        false,
        &[
            "scan",
            &root,
            "--fail-on",
            "critical",
            "--close-cost-ns",
            "100",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "--fail-on met");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("PID") && text.contains("server") && text.contains("SEVERITY"),
        "{text}"
    );
    assert!(
        text.contains("CONTAINER") && text.contains("containerd:3f2a0b9c8d7e"),
        "{text}"
    );

    let out = cli(
        false,
        &[
            "scan",
            &root,
            "--only-findings",
            "--json",
            "--user",
            "nobody",
            "--close-cost-ns",
            "100",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let lines = json_lines(&out);
    assert!(of_type(&lines, "process").is_empty());
    assert!(
        of_type(&lines, "finding").iter().all(|f| f["pid"] == 200),
        "{lines:?}"
    );

    let out = cli(
        false,
        &[
            "scan",
            &root,
            "--sort",
            "fds",
            "--fds",
            "--close-cost-ns",
            "100",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let server = text.find(" 100 ").expect("pid 100 row");
    let bro = text.rfind(" 400 ").expect("pid 400 row");
    assert!(
        text.contains("/tmp/odd\\nname"),
        "control characters escaped: {text}"
    );
    assert!(server < bro, "--sort fds: most fds first\n{text}");

    let out = cli(false, &["scan", "/nonexistent-procfs"]);
    assert_eq!(out.status.code(), Some(2), "a missing root is an error");
}

#[test]
fn inherited_fd_is_shared_with_parent_kcmp() {
    // sh opens fd 7 without close-on-exec and starts a child that inherits it.
    let mut sh = Command::new("sh")
        .args([
            "-c",
            "exec 7</etc/hostname; sleep 30 & echo $!; read _; kill $!",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("failed to start sh");
    let mut line = String::new();
    BufReader::new(sh.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("failed to read the child's pid");
    let child = line.trim().to_owned();
    let out = cli(
        false,
        &["scan", "--json", "-p", &child, "--close-cost-ns", "1"],
    );
    drop(sh.stdin.take());
    let _ = sh.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let shared: Vec<&Value> = of_type(&lines, "finding")
        .into_iter()
        .filter(|f| f["rule"] == "shared_description" && f["fd"] == 7)
        .collect();
    assert_eq!(shared.len(), 1, "{lines:?}");
    let reason = shared[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("same open file description as fd 7 of parent"),
        "{reason}"
    );
    assert_eq!(shared[0]["severity"], "low");
    let summary = of_type(&lines, "summary");
    assert!(summary[0]["kcmp_calls"].as_u64().expect("kcmp_calls") >= 1);
}

/// A comm with a newline (the kernel prints it `x\ny` in `status`) is reported as the
/// process set it: `comm_b64` decodes to the three bytes, not to a backslash and an `n`.
#[test]
fn a_comm_with_a_newline_is_reported_as_set() {
    let mut sh = Command::new("sh")
        .args(["-c", "printf 'x\\ny' > /proc/$$/comm; echo ready; read _"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sh");
    let mut line = String::new();
    BufReader::new(sh.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let pid = sh.id();
    let out = cli_ok(false, &["scan", "--json", "-p", &pid.to_string()]);
    drop(sh.stdin.take());
    let _ = sh.wait();
    let lines = json_lines(&out);
    let p = of_type(&lines, "process")
        .into_iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid}: {lines:?}"));
    let comm = match p.get("comm_b64").and_then(Value::as_str) {
        Some(b) => fdaudit_tests::b64(b),
        None => p["comm"].as_str().unwrap().as_bytes().to_vec(),
    };
    assert_eq!(comm, b"x\ny", "{p}");
}

/// Starts `cmd`, a `sleep` (possibly behind a shell's exec) that holds fd `fd`; waits until
/// it runs sleep with that fd, scans it, kills it, and returns the scan's records with its
/// process record and that fd's record.
fn scan_holder(mut cmd: Command, fd: u32) -> (Vec<Value>, Value, Value) {
    let mut holder = cmd.spawn().expect("start the holder");
    let pid = holder.id();
    let link = format!("/proc/{pid}/fd/{fd}");
    for _ in 0..500 {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if std::path::Path::new(&link).exists() && comm == "sleep\n" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = cli_ok(false, &["scan", "--json", "-p", &pid.to_string()]);
    let _ = holder.kill();
    let _ = holder.wait();
    let lines = json_lines(&out);
    let p = of_type(&lines, "process")
        .into_iter()
        .find(|p| p["pid"] == pid)
        .cloned()
        .unwrap_or_else(|| panic!("no process {pid}: {lines:?}"));
    let f = p["fds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fd"] == fd)
        .cloned()
        .unwrap_or_else(|| panic!("no fd {fd}: {p}"));
    (lines, p, f)
}

/// The severity of the finding on `fd` of the process `p`.
fn severity_of(lines: &[Value], p: &Value, fd: u32) -> Option<Value> {
    of_type(lines, "finding")
        .into_iter()
        .find(|f| f["pid"] == p["pid"] && f["fd"] == fd)
        .map(|f| f["severity"].clone())
}

/// A directory opened O_RDONLY or O_PATH without O_DIRECTORY has no flag that says it is
/// one, yet a child can openat() through it: both are directories, rated high.
#[test]
fn a_directory_opened_without_o_directory_is_a_directory() {
    use std::os::unix::process::CommandExt as _;
    let mut sleep = Command::new("sleep");
    sleep.arg("30").stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: open and dup2 are async-signal-safe; dup2's copy has no close-on-exec.
    unsafe {
        sleep.pre_exec(|| {
            for (flags, at) in [(libc::O_RDONLY, 57), (libc::O_PATH, 58)] {
                let fd = libc::open(c"/etc".as_ptr(), flags | libc::O_CLOEXEC);
                if fd < 0 || libc::dup2(fd, at) != at {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let (lines, p, fd57) = scan_holder(sleep, 57);
    let fd58 = p["fds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fd"] == 58)
        .cloned();
    for (n, fd) in [(57, Some(fd57)), (58, fd58)] {
        let fd = fd.unwrap_or_else(|| panic!("no fd {n}: {p}"));
        assert_eq!(fd["kind"], "directory", "fd {n}: {fd}");
        assert_eq!(
            severity_of(&lines, &p, n),
            Some("high".into()),
            "fd {n}: {lines:?}"
        );
    }
}

/// Another device bound over `/dev/null` in a private mount namespace reads `/dev/null` in
/// its link, but it is not the null device (1:3): not rated info.
#[test]
#[ignore = "needs root"]
fn a_device_bound_over_dev_null_is_not_rated_as_dev_null() {
    require_root();
    let mut holder = Command::new("unshare");
    holder
        .args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind /dev/zero /dev/null && exec sleep 30 7>>/dev/null",
        ])
        .stdin(Stdio::null());
    let (lines, p, fd) = scan_holder(holder, 7);
    assert_eq!(fd["target"], "/dev/null", "{fd}");
    assert_eq!(fd["kind"], "other", "{fd}");
    let sev = severity_of(&lines, &p, 7);
    assert!(sev.is_some(), "a finding for fd 7: {lines:?}");
    assert_ne!(sev, Some("info".into()), "{lines:?}");
}
