//! Spawn boundaries (issues #22, #37): a leak into an image that runs with other
//! credentials, in other namespaces or under another root than the last exec'd image of its
//! ancestry (however many forks came between) is critical, in trace's JSON and text and for
//! `--fail-on-leak=boundary`. Root only (eBPF, namespaces); the CVE shape is in
//! boundary_cve.rs.

use std::process::{Command, Stdio};

use fdaudit_tests::{records, require_root, trace_to_file};
use serde_json::Value;

/// The command: a uid drop, a new mount namespace, then neither; fd 7 leaks into
/// all three `/bin/true`s.
const THREE_TRUES: &str = "exec 7</etc/hostname; \
    setpriv --reuid=65534 --regid=65534 --clear-groups /bin/true; \
    unshare -m /bin/true; /bin/true";

fn trues(text: &str) -> Vec<Value> {
    records(text)
        .into_iter()
        .filter(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .collect()
}

fn fd7(spawn: &Value) -> &Value {
    spawn["leaked_fds"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["fd"] == 7))
        .unwrap_or_else(|| panic!("fd 7 did not leak: {spawn}"))
}

#[test]
#[ignore = "needs root and BTF"]
fn a_uid_drop_and_a_new_mount_namespace_are_boundaries_and_their_leaks_critical() {
    require_root();
    let (out, text) = trace_to_file("boundary.jsonl", |c| {
        c.args(["--", "bash", "-c", THREE_TRUES]);
    });
    fdaudit_tests::assert_success(&out);
    let t = trues(&text);
    assert_eq!(t.len(), 3, "three spawns of /bin/true: {text}");
    let b0 = &t[0]["boundary"];
    assert_eq!(b0["uid"], serde_json::json!([0, 65534]), "{}", t[0]);
    assert_eq!(b0["euid"], serde_json::json!([0, 65534]));
    assert_eq!(b0["gid"], serde_json::json!([0, 65534]));
    assert!(
        b0.get("mnt_namespace").is_none(),
        "setpriv keeps the namespace: {b0}"
    );
    assert_eq!(
        b0["cap_effective"][1], 0,
        "a non-root uid has no capabilities: {b0}"
    );
    let b1 = &t[1]["boundary"];
    let own_mnt = std::fs::read_link("/proc/self/ns/mnt").expect("own mnt ns");
    let own = format!("{}", b1["mnt_namespace"][0]);
    assert!(
        own_mnt.to_string_lossy().contains(&own),
        "mnt_ns starts at ours ({own_mnt:?}): {b1}"
    );
    assert_ne!(b1["mnt_namespace"][0], b1["mnt_namespace"][1]);
    assert!(b1.get("uid").is_none(), "unshare keeps the uid: {b1}");
    assert!(
        t[2].get("boundary").is_none(),
        "the third crosses nothing: {}",
        t[2]
    );
    assert_eq!(fd7(&t[0])["critical"], true);
    assert_eq!(fd7(&t[1])["critical"], true);
    assert!(fd7(&t[2]).get("critical").is_none(), "{}", t[2]);
    let summary = records(&text)
        .into_iter()
        .find(|r| r["type"] == "summary")
        .expect("a summary");
    assert_eq!(
        summary["totals"]["critical_leaked_fd_count"], 2,
        "{summary}"
    );
    // setpriv and unshare themselves run as bash did.
    for r in records(&text) {
        if r["type"] == "spawn" && r["exec_path"] != "/bin/true" {
            assert!(r.get("boundary").is_none(), "{r}");
        }
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn the_text_line_says_critical_and_what_changed() {
    require_root();
    let out = Command::new(fdaudit_tests::fdaudit())
        .args(["trace", "--", "bash", "-c", THREE_TRUES])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    fdaudit_tests::assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("/bin/true")).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("CRITICAL: LEAKED 1 across a boundary (uid 0→65534")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("CRITICAL") && l.contains("mnt_namespace ")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("LEAKED 1:") && !l.contains("CRITICAL")),
        "{err}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn fail_on_leak_boundary_fails_only_on_a_leak_across_a_boundary() {
    require_root();
    let run = |gate: &str, script: &str| {
        Command::new(fdaudit_tests::fdaudit())
            .args(["trace", "-q", gate, "--", "bash", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output()
            .expect("run fdaudit trace")
    };
    let plain = "exec 7</etc/hostname; /bin/true";
    let crossing = "exec 7</etc/hostname; unshare -m /bin/true";
    let o = run("--fail-on-leak=boundary", crossing);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--fail-on-leak=boundary: 1 spawn leaked fds across a boundary"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run("--fail-on-leak=boundary", plain);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run("--fail-on-leak", plain);
    assert_eq!(
        o.status.code(),
        Some(3),
        "a plain leak fails the plain gate"
    );
}

/// Issue #37 finding 5 (a): root forks, the child drops to nobody without exec'ing and
/// forks again, and only the grandchild execs, fd 7 still open. The fd was made by code
/// that ran as root: the grandchild's image crossed a boundary although its parent at fork
/// was nobody already.
#[test]
#[ignore = "needs root and BTF"]
fn a_uid_drop_one_fork_before_the_exec_is_a_boundary() {
    require_root();
    let fixture = fdaudit_tests::target_bin("boundary-forks");
    let script = format!(
        "exec 7</etc/hostname; {} drop /bin/true; /bin/true",
        fixture.display()
    );
    let (out, text) = trace_to_file("boundary-drop.jsonl", |c| {
        c.args(["--fail-on-leak=boundary", "--", "bash", "-c", &script]);
    });
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on-leak=boundary fails: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = trues(&text);
    assert_eq!(t.len(), 2, "two spawns of /bin/true: {text}");
    let b = &t[0]["boundary"];
    for key in ["uid", "euid", "suid", "gid", "egid", "sgid"] {
        assert_eq!(b[key], serde_json::json!([0, 65534]), "{key}: {}", t[0]);
    }
    assert_eq!(b["cap_effective"][1], 0, "nobody has no capabilities: {b}");
    assert_eq!(fd7(&t[0])["critical"], true, "{}", t[0]);
    assert!(
        t[1].get("boundary").is_none(),
        "bash's own /bin/true crosses nothing: {}",
        t[1]
    );
    assert!(fd7(&t[1]).get("critical").is_none(), "{}", t[1]);
}

/// A directory holding /bin/true and what it needs to run (the shared objects this test
/// has mapped, the ELF interpreter /bin/true asks for, the loader's cache): a root to
/// chroot into, with this system's layout.
fn mini_root() -> std::path::PathBuf {
    let root = fdaudit_tests::temp_path("chroot-root");
    let copy = |from: &str, to: &str| {
        let dst = root.join(to.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().expect("a parent")).expect("mkdir in the root");
        std::fs::copy(from, &dst).unwrap_or_else(|e| panic!("copy {from} into the root: {e}"));
    };
    copy("/bin/true", "/bin/true");
    // This test's own shared objects: libc among them, which is all /bin/true needs.
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mut libs: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/') && p.contains(".so"))
        .collect();
    libs.dedup();
    for path in libs {
        copy(path, path);
    }
    let elf = std::fs::read("/bin/true").expect("read /bin/true");
    let interp = elf_interpreter(&elf).expect("/bin/true names its ELF interpreter");
    copy(&interp, &interp);
    if std::path::Path::new("/etc/ld.so.cache").exists() {
        copy("/etc/ld.so.cache", "/etc/ld.so.cache");
    }
    root
}

/// PT_INTERP of a 64-bit little-endian ELF: the program interpreter's path.
fn elf_interpreter(elf: &[u8]) -> Option<String> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let (phoff, phentsize, phnum) = (u64_at(0x20)? as usize, u16_at(0x36)?, u16_at(0x38)?);
    (0..usize::from(phnum)).find_map(|i| {
        let ph = phoff + i * usize::from(phentsize);
        let is_interp = elf.get(ph..ph + 4)? == 3u32.to_le_bytes();
        let (off, len) = (u64_at(ph + 8)? as usize, u64_at(ph + 32)? as usize);
        let bytes = elf.get(off..off + len)?;
        is_interp.then(|| String::from_utf8_lossy(bytes.strip_suffix(&[0]).unwrap_or(bytes)).into())
    })
}

/// Issue #37 finding 5 (c): a chroot with no namespace change, a host `/` fd (fd 7) open
/// across it: the changed root is the boundary (`root_inode`), and the fixture's own exec,
/// which runs where bash did, crosses nothing.
#[test]
#[ignore = "needs root and BTF"]
fn a_chroot_without_a_namespace_change_is_a_boundary() {
    require_root();
    let root = mini_root();
    let script = format!(
        "exec 7</; {} chroot {} /bin/true",
        fdaudit_tests::target_bin("boundary-forks").display(),
        root.display()
    );
    let (out, text) = trace_to_file("boundary-chroot.jsonl", |c| {
        c.args(["--fail-on-leak=boundary", "--", "bash", "-c", &script]);
    });
    // The text line names it too.
    let text_run = Command::new(fdaudit_tests::fdaudit())
        .args(["trace", "--", "bash", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    use std::os::unix::fs::MetadataExt as _;
    let (host, new) = (
        std::fs::metadata("/").expect("stat /").ino(),
        std::fs::metadata(&root).expect("stat the root").ino(),
    );
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on-leak=boundary fails: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = trues(&text);
    assert_eq!(t.len(), 1, "one spawn of /bin/true: {text}");
    let b = &t[0]["boundary"];
    assert_eq!(
        b["root_inode"],
        serde_json::json!([host, new]),
        "the root moved from / to the mini root: {}",
        t[0]
    );
    assert!(
        b.get("mnt_namespace").is_none(),
        "no namespace changed: {b}"
    );
    assert!(b.get("uid").is_none(), "no uid changed: {b}");
    let fd = fd7(&t[0]);
    assert_eq!(fd["critical"], true, "{fd}");
    assert_eq!(fd["kind"], "directory", "{fd}");
    for r in records(&text) {
        if r["type"] == "spawn" && r["exec_path"] != "/bin/true" {
            assert!(r.get("boundary").is_none(), "{r}");
        }
    }
    fdaudit_tests::assert_success(&text_run);
    let err = String::from_utf8_lossy(&text_run.stderr);
    assert!(
        err.lines().any(|l| l.contains("/bin/true")
            && l.contains(&format!(
                "CRITICAL: LEAKED 1 across a boundary (root_inode {host}→{new}"
            ))),
        "{err}"
    );
}

/// An exec chain is one spawn, judged at its last exec: a crossing at an earlier exec of
/// the chain (setpriv's exec of `env` as nobody) still makes the last image's leaks critical
/// (`env`'s exec of /bin/true changes nothing of its own).
#[test]
#[ignore = "needs root and BTF"]
fn a_crossing_inside_an_exec_chain_is_the_chains_boundary() {
    require_root();
    let script = "exec 7</etc/hostname; \
        setpriv --reuid=65534 --regid=65534 --clear-groups env /bin/true";
    let (out, text) = trace_to_file("boundary-chain.jsonl", |c| {
        c.args(["--fail-on-leak=boundary", "--", "bash", "-c", script]);
    });
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on-leak=boundary fails: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = trues(&text);
    assert_eq!(t.len(), 1, "one spawn of /bin/true: {text}");
    assert_eq!(
        t[0]["boundary"]["uid"],
        serde_json::json!([0, 65534]),
        "{}",
        t[0]
    );
    assert_eq!(fd7(&t[0])["critical"], true, "{}", t[0]);
}

/// A setuid-root helper run by nobody opens a root-only file, drops back to nobody and execs
/// a program of the user's: the ancestry ran as nobody and so does the last image, but the
/// fd was made by the helper's image, which ran as root: a re-exec is compared with the image
/// that exec'd as well as with the ancestry.
#[test]
#[ignore = "needs root and BTF"]
fn a_setuid_helper_that_drops_back_before_its_exec_is_a_boundary() {
    require_root();
    use std::os::unix::fs::PermissionsExt as _;
    let dir = fdaudit_tests::temp_path("setuid-helper");
    std::fs::create_dir(&dir).expect("the helper's directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let helper = dir.join("helper");
    std::fs::copy(fdaudit_tests::target_bin("boundary-forks"), &helper).expect("copy fixture");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755))
        .expect("setuid root");
    let secret = dir.join("secret");
    std::fs::write(&secret, b"root only\n").expect("the secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // `; :` keeps bash from exec'ing the helper in its own process: a child of bash's image.
    let script = format!(
        "{} helper {} /bin/true; :",
        helper.display(),
        secret.display()
    );
    let (out, text) = trace_to_file("boundary-helper.jsonl", |c| {
        c.args(["--fail-on-leak=boundary", "--", "setpriv", "--reuid=65534"])
            .args(["--regid=65534", "--clear-groups", "bash", "-c", &script]);
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on-leak=boundary fails: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = trues(&text);
    assert_eq!(t.len(), 1, "one spawn of /bin/true: {text}");
    let b = &t[0]["boundary"];
    assert_eq!(b["euid"], serde_json::json!([0, 65534]), "{}", t[0]);
    assert_eq!(b["suid"], serde_json::json!([0, 65534]), "{}", t[0]);
    assert!(b.get("uid").is_none(), "the real uid stayed nobody's: {b}");
    let fd8 = t[0]["leaked_fds"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["fd"] == 8))
        .unwrap_or_else(|| panic!("fd 8 did not leak: {}", t[0]));
    assert_eq!(fd8["critical"], true, "{fd8}");
}

/// The false-positive side: a shell that execs a child with nothing changed, a child of a
/// child, and a privilege drop that exec's (setpriv, as `su` does): only the drop's own
/// exec is a boundary, not the spawns of the image that runs as nobody from then on.
#[test]
#[ignore = "needs root and BTF"]
fn only_the_exec_that_crosses_is_a_boundary() {
    require_root();
    let script = "exec 7</etc/hostname; bash -c 'exec /bin/true'; \
        sh -c '/bin/true; :'; \
        setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '/bin/true; :'";
    let (out, text) = trace_to_file("boundary-plain.jsonl", |c| {
        c.args(["--", "bash", "-c", script]);
    });
    fdaudit_tests::assert_success(&out);
    let t = trues(&text);
    assert_eq!(t.len(), 3, "three spawns of /bin/true: {text}");
    for s in &t {
        assert!(s.get("boundary").is_none(), "no change before it: {s}");
        assert!(fd7(s).get("critical").is_none(), "{s}");
    }
    let crossed: Vec<Value> = records(&text)
        .into_iter()
        .filter(|r| r["type"] == "spawn" && r.get("boundary").is_some())
        .collect();
    assert_eq!(crossed.len(), 1, "only setpriv's bash: {crossed:?}");
    assert!(
        crossed[0]["exec_path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/bash")),
        "{}",
        crossed[0]
    );
    assert_eq!(crossed[0]["boundary"]["uid"], serde_json::json!([0, 65534]));
}
