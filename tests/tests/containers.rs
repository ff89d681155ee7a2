//! Real containers: podman (Debian's, with runc: crun refuses this machine's hybrid cgroup
//! layout) on a busybox-static image imported here, traced by `fdaudit trace`. A plain
//! container start hands runc's init its sync socket, pipe and `exec.fifo` (runc's own
//! helper, `/proc/self/exe`): transient, and nothing reaches the entrypoint, so no leak and
//! nothing critical; `--preserve-fds 1` hands the entrypoint a host file: a critical leak
//! across the mount namespace. Root only (podman, eBPF). docs/fleet.md says what it took.

use std::path::PathBuf;
use std::process::Command;

use fdaudit_tests::{records, require_root};
use serde_json::Value;

const IMAGE: &str = "localhost/fdaudit-test-busybox:1";

/// podman's own limits exceed this machine's (RLIMIT_NOFILE hard 20000, no
/// CAP_SYS_RESOURCE) and it lowers its RLIMIT_NPROC to 32768 before it starts runc, so the
/// container's limits are set at or below those.
const PODMAN_RUN: [&str; 8] = [
    "--runtime",
    "runc",
    "run",
    "--rm",
    "--ulimit",
    "nofile=1024:20000",
    "--ulimit",
    "nproc=32768:32768",
];

/// Imports a busybox-static root filesystem as [`IMAGE`] once (no registry needed).
fn image() -> &'static str {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let dir = fdaudit_tests::temp_path("busybox-root");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir the image's /bin");
        std::fs::copy("/bin/busybox", bin.join("busybox"))
            .expect("copy /bin/busybox (Debian's busybox-static, installed by .ci/setup)");
        for applet in ["sh", "cat", "true", "ls", "sleep"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet link");
        }
        let tar = dir.with_extension("tar");
        run(Command::new("tar")
            .arg("-C")
            .arg(&dir)
            .arg("-cf")
            .arg(&tar)
            .arg("."));
        run(Command::new("podman").arg("import").arg(&tar).arg(IMAGE));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&tar);
    });
    IMAGE
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The entrypoints sleep a second: fdaudit names a container from its cgroup id, resolved
/// by a walk of the cgroup hierarchy, and `podman run --rm` removes the cgroup as soon as
/// the entrypoint exits (docs/fleet.md).
///
/// `podman run` of `entrypoint` under `fdaudit trace`, through `bash -c` so that `prefix`
/// can open fds first; the records and the container's id (from `--cidfile`).
fn trace_podman(
    name: &str,
    prefix: &str,
    podman_args: &str,
    entrypoint: &str,
) -> (Vec<Value>, String) {
    let cidfile: PathBuf = fdaudit_tests::temp_path(&format!("{name}.cid"));
    let script = format!(
        "{prefix} exec podman {} --cidfile {} {podman_args} {} {entrypoint}",
        PODMAN_RUN.join(" "),
        cidfile.display(),
        image()
    );
    let (out, text) = fdaudit_tests::trace_to_file(&format!("{name}.jsonl"), |c| {
        c.args(["--", "bash", "-c", &script]);
    });
    fdaudit_tests::assert_success(&out);
    let id = std::fs::read_to_string(&cidfile).expect("podman wrote --cidfile");
    let _ = std::fs::remove_file(&cidfile);
    (records(&text), id.trim().to_string())
}

fn spawns<'a>(recs: &'a [Value], exec: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["type"] == "spawn" && r["exec_path"] == exec)
        .collect()
}

fn summary(recs: &[Value]) -> &Value {
    recs.iter()
        .find(|r| r["type"] == "summary")
        .expect("a summary record")
}

fn has_flag(r: &Value, flag: &str) -> bool {
    r["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

#[test]
#[ignore = "needs root and podman"]
fn a_plain_container_start_is_no_leak_and_the_entrypoint_names_its_container() {
    require_root();
    let _g = fdaudit_tests::guard();
    let (recs, id) = trace_podman("podman-plain", "", "", "/bin/sleep 1");
    let entry = spawns(&recs, "/bin/sleep");
    assert_eq!(entry.len(), 1, "one entrypoint exec: {recs:?}");
    let entry = entry[0];
    assert_eq!(entry["container_id"], id.as_str(), "{entry}");
    assert_eq!(entry["container_runtime"], "podman", "{entry}");
    // Read from /proc while the process lives (a /bin/true may be gone first).
    assert!(
        entry.get("ns_pid").is_none_or(|p| p == 1),
        "the entrypoint is the container's pid 1: {entry}"
    );
    assert_eq!(entry["leaked_fds"], serde_json::json!([]), "{entry}");
    // The entrypoint crossed into the container's namespaces (nothing crossed with it).
    assert!(entry["boundary"]["mnt_namespace"].is_array(), "{entry}");
    // runc's init (its own image) got runc's hand-off: transient (it re-execs its sealed
    // memfd copy, flagged own_image, whether or not runc has moved it into the container's
    // cgroup by then).
    let init = spawns(&recs, "/proc/self/exe");
    assert!(!init.is_empty(), "runc exec'd its own image: {recs:?}");
    assert!(
        init.iter()
            .all(|r| has_flag(r, "own_image") || has_flag(r, "execd_again")),
        "{init:?}"
    );
    let helpers: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "spawn" && has_flag(r, "own_image"))
        .collect();
    assert!(!helpers.is_empty(), "{recs:?}");
    for r in helpers {
        assert!(r["leaked_fd_count"].as_u64().unwrap_or(0) > 0, "{r}");
    }
    let totals = &summary(&recs)["totals"];
    assert_eq!(totals["critical_leaked_fd_count"], 0, "{totals}");
    assert!(
        totals["transient_leaked_fd_count"].as_u64().unwrap_or(0) >= 3,
        "{totals}"
    );
}

#[test]
#[ignore = "needs root and podman"]
fn a_host_file_handed_in_with_preserve_fds_is_a_critical_leak_across_the_mount_namespace() {
    require_root();
    let _g = fdaudit_tests::guard();
    let secret = fdaudit_tests::temp_path("host-secret");
    std::fs::write(&secret, "not for the container\n").expect("write the host file");
    let prefix = format!("exec 3<{};", secret.display());
    let (recs, id) = trace_podman(
        "podman-preserve",
        &prefix,
        "--preserve-fds 1",
        "/bin/sleep 1",
    );
    let entry = spawns(&recs, "/bin/sleep");
    assert_eq!(entry.len(), 1, "{recs:?}");
    let entry = entry[0];
    assert_eq!(entry["container_id"], id.as_str(), "{entry}");
    let leaked = entry["leaked_fds"].as_array().expect("leaked_fds");
    let host = leaked
        .iter()
        .find(|f| f["fd"] == 3)
        .unwrap_or_else(|| panic!("fd 3 reached the entrypoint: {entry}"));
    assert_eq!(host["target"], secret.display().to_string(), "{host}");
    assert_eq!(host["critical"], true, "{host}");
    let mnt = &entry["boundary"]["mnt_namespace"];
    assert!(
        mnt.as_array().is_some_and(|m| m.len() == 2 && m[0] != m[1]),
        "the boundary names the mount namespace the container got: {entry}"
    );
    let _ = std::fs::remove_file(&secret);
    // runc's init held the host file too (more than its plumbing): judged, not transient.
    let init = recs
        .iter()
        .filter(|r| r["type"] == "spawn" && r["parent_comm"] == "runc")
        .filter(|r| {
            r["leaked_fds"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|f| f["target"] == secret.display().to_string())
            })
        })
        .collect::<Vec<_>>();
    assert!(!init.is_empty(), "{recs:?}");
    assert!(init.iter().all(|r| !has_flag(r, "own_image")), "{init:?}");
    assert!(
        summary(&recs)["totals"]["critical_leaked_fd_count"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    );
}

/// The text of watch's textfile once a line has every part of `want` (polled every 200 ms,
/// 30 s at most).
fn textfile_with(dir: &std::path::Path, want: &[&str], watch: &mut std::process::Child) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let text: String = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "prom"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        if text.lines().any(|l| want.iter().all(|w| l.contains(w))) {
            return text;
        }
        if let Ok(Some(st)) = watch.try_wait() {
            panic!("fdaudit watch exited ({st}) before {want:?} appeared: {text}");
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "no {want:?} in watch's textfile: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root and podman"]
fn watch_counts_runcs_plumbing_as_transient_and_labels_a_real_containers_leak_with_its_boundary() {
    require_root();
    let _g = fdaudit_tests::guard();
    image();
    let dir = fdaudit_tests::temp_path("containers-textfile");
    std::fs::create_dir_all(&dir).expect("mkdir the textfile directory");
    let watch = Command::new(fdaudit_tests::fdaudit())
        .args([
            "watch",
            "--no-listen",
            "--textfile-interval",
            "1",
            "--textfile",
        ])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start fdaudit watch");
    // Stopped however the test ends (a failed assertion must not leave an agent attached).
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let _ = self.0.wait();
        }
    }
    let mut stop = Stop(watch);
    let watch = &mut stop.0;
    // The first textfile is written once the programs are attached.
    textfile_with(&dir, &["fdaudit_"], watch);
    // A plain start first: runc's init got runc's plumbing, transient, never a leak.
    let plain = format!("exec podman {} {} /bin/true", PODMAN_RUN.join(" "), IMAGE);
    run(Command::new("bash").args(["-c", &plain]));
    let text = textfile_with(
        &dir,
        &["fdaudit_transient_fds_total{", "parent=\"runc\""],
        watch,
    );
    let runc_leaks: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fdaudit_leaked_fds_total{") && l.contains("parent=\"runc\""))
        .collect();
    assert!(runc_leaks.is_empty(), "{runc_leaks:#?}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("fdaudit_transient_fds_total{") && l.contains("parent=\"runc\"")),
        "{text}"
    );
    let secret = fdaudit_tests::temp_path("watch-host-secret");
    std::fs::write(&secret, "not for the container\n").expect("write the host file");
    let cidfile = fdaudit_tests::temp_path("watch.cid");
    let script = format!(
        "exec 3<{}; exec podman {} --cidfile {} --preserve-fds 1 {} /bin/sleep 1",
        secret.display(),
        PODMAN_RUN.join(" "),
        cidfile.display(),
        IMAGE
    );
    run(Command::new("bash")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null()));
    let id = std::fs::read_to_string(&cidfile).expect("podman wrote --cidfile");
    let want = format!("container_id=\"{}\"", id.trim());
    let text = textfile_with(
        &dir,
        &["fdaudit_leaked_fds_total{", &want, "child=\"sleep\""],
        watch,
    );
    drop(stop);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(&cidfile);
    let leak = text
        .lines()
        .find(|l| {
            l.starts_with("fdaudit_leaked_fds_total{")
                && l.contains(&want)
                && l.contains("child=\"sleep\"")
        })
        .expect("the entrypoint's leak");
    let boundary = leak
        .split("boundary=\"")
        .nth(1)
        .and_then(|b| b.split('"').next())
        .unwrap_or_else(|| panic!("the leak carries its boundary: {leak}"));
    assert!(boundary.split('+').any(|k| k == "mnt_namespace"), "{leak}");
}

#[test]
#[ignore = "needs root"]
fn a_multi_call_binarys_applet_run_as_proc_self_exe_keeps_its_leak() {
    require_root();
    let _g = fdaudit_tests::guard();
    // busybox's sh runs the sleep applet by exec'ing /proc/self/exe: the same image, but
    // a program of its own that holds fd 5; it crosses no boundary, so it is no helper.
    let (out, text) = fdaudit_tests::trace_to_file("busybox-applet.jsonl", |c| {
        c.args([
            "--",
            "/bin/busybox",
            "sh",
            "-c",
            "exec 5</bin/busybox; sleep 0; true",
        ]);
    });
    fdaudit_tests::assert_success(&out);
    let recs = records(&text);
    let applet = spawns(&recs, "/proc/self/exe");
    assert_eq!(applet.len(), 1, "{text}");
    assert!(!has_flag(applet[0], "own_image"), "{}", applet[0]);
    assert!(
        applet[0]["leaked_fds"]
            .as_array()
            .is_some_and(|l| l.iter().any(|f| f["fd"] == 5)),
        "{}",
        applet[0]
    );
    assert!(
        summary(&recs)["totals"]["leaked_fd_count"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "{text}"
    );
}

#[test]
#[ignore = "needs root and podman"]
fn trace_cgroup_follows_a_running_container_by_the_id_podman_gives() {
    require_root();
    let _g = fdaudit_tests::guard();
    image();
    // A container that holds fd 5 and spawns /bin/true every 200 ms until it is removed.
    let out = Command::new("podman")
        .args(PODMAN_RUN)
        .args(["-d", IMAGE, "/bin/sh", "-c"])
        .arg("exec 5</bin/busybox; while :; do /bin/true; sleep 0.2; done")
        .output()
        .expect("podman run -d");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let inspect = Command::new("podman")
        .args(["inspect", "--format", "{{.Id}}", &id])
        .output()
        .expect("podman inspect");
    let inspected = String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    // podman's cgroupfs manager: the container's cgroup on the v2 hierarchy.
    let cgroup = format!("/libpod_parent/libpod-{inspected}");
    let (out, text) = fdaudit_tests::trace_to_file("podman-cgroup.jsonl", |c| {
        c.args(["--duration", "2", "--cgroup", &cgroup]);
    });
    run(Command::new("podman").args(["rm", "-f", "-t", "0", &id]));
    fdaudit_tests::assert_success(&out);
    let recs = records(&text);
    let trues = spawns(&recs, "/bin/true");
    assert!(
        trues.len() >= 3,
        "the container's spawns were followed: {text}"
    );
    for s in &trues {
        assert_eq!(s["container_id"], inspected.as_str(), "{s}");
        assert_eq!(s["container_runtime"], "podman", "{s}");
        assert!(
            s["leaked_fds"]
                .as_array()
                .is_some_and(|l| l.iter().any(|f| f["fd"] == 5)),
            "{s}"
        );
    }
    // Nothing outside the container's cgroup (a spawn reported at its exit, its exec
    // missed or begun before the attach, has no exec record to name one).
    assert!(
        recs.iter()
            .filter(|r| r["type"] == "spawn" && r["exec_path"].is_string())
            .all(|r| r["container_id"] == inspected.as_str()),
        "{text}"
    );
}
