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

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
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
            &file["mode"],
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
            &sock["proto"],
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
        (&r["kind"], &r["mode"], &r["cloexec"]),
        (&"pipe".into(), &"r".into(), &true.into())
    );
    assert_eq!(
        (&w["kind"], &w["mode"], &w["cloexec"]),
        (&"pipe".into(), &"w".into(), &false.into())
    );
    assert_eq!(r["target"], w["target"], "both ends of one pipe");
    let memfd = f("memfd");
    assert_eq!(
        (
            &memfd["kind"],
            &memfd["target"],
            &memfd["mode"],
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
        .filter(|v| v["pid"] == fx.pid && v["kind"] == "inheritable_fd")
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
        .filter(|v| v["kind"] == "shared_description")
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
        Some(1),
        "{}",
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not readable"), "{stderr}");
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
    assert_eq!(out.status.code(), Some(1));
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
        .filter(|f| f["kind"] == "shared_description" && f["fd"] == 7)
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
