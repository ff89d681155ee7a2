//! `fdaudit scan`'s `outside_root` rule (issue #22): an fd that points outside its
//! process's root or mount namespace, the runc CVE-2024-21626 shape. `scan-boundary`
//! (src/bin) opens fds, then moves into a new mount namespace and a chroot, or a chroot
//! alone; the scan must flag the fds opened before and only those. Root (unshare, chroot).

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use fdaudit_tests::require_root;
use serde_json::Value;

const FIXTURE: &str = env!("CARGO_BIN_EXE_scan-boundary");

/// A directory of the test's own: `root/` (the chroot, with `inside` and `sub/`) and
/// `outside`, next to it. Removed on drop.
struct Base(PathBuf);

impl Base {
    fn new(name: &str) -> Base {
        let b =
            std::env::temp_dir().join(format!("fdaudit-boundary-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&b);
        std::fs::create_dir_all(b.join("root/sub")).expect("create ROOT/sub");
        std::fs::write(b.join("root/inside"), b"in\n").expect("write ROOT/inside");
        std::fs::write(b.join("outside"), b"out\n").expect("write outside");
        Base(b)
    }

    fn path(&self, rel: &str) -> String {
        self.0
            .join(rel)
            .to_str()
            .expect("UTF-8 temp dir")
            .to_owned()
    }
}

impl Drop for Base {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running fixture, killed and reaped on drop (a failed assertion too).
struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
}

impl Held {
    fn start(args: &[&str]) -> Held {
        let mut child = Command::new(FIXTURE)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {FIXTURE}: {e}"));
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("failed to read the fixture's line");
        let pid = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["ready", pid] => pid.parse().expect("pid"),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("fixture {args:?} said {line:?}");
            }
        };
        Held { child, stdin, pid }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fdaudit scan ARGS --json`: exit status and records.
fn scan(args: &[&str]) -> (Option<i32>, Vec<Value>) {
    scan_with(Command::new(fdaudit_tests::fdaudit()), args)
}

/// `fdaudit scan ARGS --json` through `cmd` (fdaudit or a launcher of it).
fn scan_with(mut cmd: Command, args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = cmd
        .arg("scan")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit scan");
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "scan {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        fdaudit_tests::records(&String::from_utf8_lossy(&out.stdout)),
    )
}

/// The `outside_root` findings of `pid`, as (fd, severity, reason).
fn outside(recs: &[Value], pid: u32) -> Vec<(u64, String, String)> {
    let mut v: Vec<_> = recs
        .iter()
        .filter(|r| r["type"] == "finding" && r["pid"] == pid && r["rule"] == "outside_root")
        .map(|r| {
            (
                r["fd"].as_u64().expect("fd"),
                r["severity"].as_str().expect("severity").to_owned(),
                r["reason"].as_str().expect("reason").to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Whether the scan listed fd `fd` of `pid` with this target (it was read, not skipped).
fn listed(recs: &[Value], pid: u32, fd: u64, target: &str) -> bool {
    recs.iter()
        .filter(|r| r["type"] == "process" && r["pid"] == pid)
        .flat_map(|r| r["fds"].as_array().cloned().unwrap_or_default())
        .any(|f| f["fd"] == fd && f["target"] == target)
}

/// A host directory kept across unshare(CLONE_NEWNS) + chroot is critical, in `-p` and a
/// whole-system scan (which `--fail-on critical` fails); the fds opened inside the chroot
/// (on the root's own mount, and on a tmpfs mounted inside it) are not flagged.
#[test]
#[ignore = "needs root"]
fn a_host_directory_kept_across_unshare_and_chroot_is_critical() {
    require_root();
    let base = Base::new("unshare");
    let h = Held::start(&["unshare", &base.path("root")]);
    let pid = h.pid.to_string();
    let (code, recs) = scan(&["-p", &pid, "--fail-on", "critical"]);
    let found = outside(&recs, h.pid);
    assert_eq!(found.len(), 1, "outside_root findings: {found:?}\n{recs:?}");
    let (fd, sev, reason) = &found[0];
    assert_eq!((*fd, sev.as_str()), (7, "critical"), "{reason}");
    assert!(
        reason.starts_with(
            "fd 7 \u{2192} /sys/fs/cgroup: outside the process's mount namespace (opened before it entered it)"
        ),
        "{reason}"
    );
    assert_eq!(code, Some(3), "scan -p {pid} --fail-on critical");
    // The fds inside were read, and judged inside.
    assert!(
        listed(&recs, h.pid, 8, &base.path("root/inside")),
        "{recs:?}"
    );
    assert!(
        listed(&recs, h.pid, 9, "/sub/f") || listed(&recs, h.pid, 9, &base.path("root/sub/f")),
        "{recs:?}"
    );
    let (code, all) = scan(&["--fail-on", "critical"]);
    assert_eq!(outside(&all, h.pid), found, "whole-system scan");
    assert_eq!(code, Some(3), "scan --fail-on critical");
}

/// The same directory fd without unshare or chroot is in the process's own namespace.
#[test]
#[ignore = "needs root"]
fn the_same_directory_without_unshare_is_not_flagged() {
    require_root();
    let h = Held::start(&["plain"]);
    let (_, recs) = scan(&["-p", &h.pid.to_string()]);
    assert!(listed(&recs, h.pid, 7, "/sys/fs/cgroup"), "{recs:?}");
    assert_eq!(outside(&recs, h.pid), [], "{recs:?}");
}

/// A chroot in the scanner's own namespace: a file outside the new root is flagged
/// (critical without close-on-exec, high with), one inside it is not.
#[test]
#[ignore = "needs root"]
fn a_file_outside_a_chroot_is_flagged() {
    require_root();
    let base = Base::new("chroot");
    let out = base.path("outside");
    let h = Held::start(&["chroot", &base.path("root"), &out]);
    let (_, recs) = scan(&["-p", &h.pid.to_string()]);
    let found = outside(&recs, h.pid);
    let got: Vec<(u64, &str)> = found.iter().map(|(fd, s, _)| (*fd, s.as_str())).collect();
    assert_eq!(got, [(7, "critical"), (10, "high")], "{found:?}\n{recs:?}");
    let want = format!(
        "fd 7 \u{2192} {out}: outside the process's root directory {}; it has no close-on-exec",
        base.path("root")
    );
    assert!(found[0].2.starts_with(&want), "{}", found[0].2);
    assert!(
        listed(&recs, h.pid, 8, &base.path("root/inside")),
        "{recs:?}"
    );
}

/// fdaudit in a mount namespace of its own (a container with the host's pids): the host's
/// mounts come from pid 1's mountinfo, so the host directory in the fixture is still
/// critical.
#[test]
#[ignore = "needs root"]
fn a_scanner_in_its_own_namespace_knows_the_hosts_mounts_from_pid_1() {
    require_root();
    let base = Base::new("scanner-ns");
    let h = Held::start(&["unshare", &base.path("root")]);
    let mut cmd = Command::new(FIXTURE);
    cmd.arg("exec-unshared").arg(fdaudit_tests::fdaudit());
    let (_, recs) = scan_with(cmd, &["-p", &h.pid.to_string()]);
    let found = outside(&recs, h.pid);
    let got: Vec<(u64, &str)> = found.iter().map(|(fd, s, _)| (*fd, s.as_str())).collect();
    assert_eq!(got, [(7, "critical")], "{found:?}\n{recs:?}");
    assert!(found[0].2.contains("mount namespace"), "{}", found[0].2);
}
