//! `fdaudit watch --textfile DIR` against a local user who can write DIR (#37 finding 3):
//! `nobody`, owner of the collector directory, plants symbolic links at every name the
//! writer could use that they can predict (the old `.fdaudit.prom.<pid>` and
//! `fdaudit.prom` itself), each pointing at a root-only file. The write must leave that
//! file alone and put the metrics in a regular DIR/fdaudit.prom.
//!
//! The root test loads the eBPF programs: run it under `flock /tmp/fdaudit-root.lock`.

use std::{
    io::{BufRead as _, BufReader, Read as _},
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use fdaudit_tests::{fdaudit, require_root};

/// Kills and reaps a child when the test ends, passed or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh directory, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = fdaudit_tests::temp_path(tag);
        std::fs::create_dir(&p).expect("create the test directory");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `CMD ARGS` as nobody:nogroup with no other groups; panics unless it succeeds.
fn as_nobody(cmd: &str, args: &[&str]) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            cmd,
        ])
        .args(args)
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "{cmd} {args:?} as nobody failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The plain file at `p` (not a link), when there is one.
fn regular_file(p: &Path) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(p)
        .ok()
        .filter(|m| m.file_type().is_file())
}

#[test]
#[ignore = "needs root"]
fn links_planted_by_the_directory_owner_are_not_written_through() {
    require_root();
    let base = TempDir::new("textfile-hostile");
    let victim = base.0.join("root-only");
    std::fs::write(&victim, "root's own\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dir = base.0.join("collector");
    std::fs::create_dir(&dir).unwrap();
    // A collector directory that nobody owns: no sticky bit, so fs.protected_symlinks does
    // not stand between root and nobody's links.
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();

    let mut cmd = Command::new(fdaudit());
    cmd.args(["watch", "--no-listen", "--scan-interval", "0"])
        .args(["--textfile-interval", "3600", "--textfile"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    fdaudit_tests::default_stop_signals(&mut cmd);
    let mut watch = Reaped(cmd.spawn().expect("start fdaudit watch"));
    let pid = watch.0.id();
    let (tx, rx) = mpsc::channel();
    let err = BufReader::new(watch.0.stderr.take().expect("piped stderr"));
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let t0 = Instant::now();
    let mut said = Vec::new();
    loop {
        let left = Duration::from_secs(90).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("fdaudit: watching") => break,
            Ok(l) => said.push(l),
            Err(e) => panic!("watch never started ({e}): {}", said.join("\n")),
        }
    }

    // Every name nobody can predict, planted once watch runs (its pid is public).
    let target = victim.to_str().unwrap();
    for name in [format!(".fdaudit.prom.{pid}"), "fdaudit.prom".to_owned()] {
        as_nobody("ln", &["-s", target, dir.join(name).to_str().unwrap()]);
    }
    // The spawns so far reach the agent with its drain thread's 200 ms tick (#44).
    std::thread::sleep(Duration::from_millis(600));
    // SIGHUP: a textfile write at once.
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    let prom = dir.join("fdaudit.prom");
    let t0 = Instant::now();
    while regular_file(&prom).is_none()
        && std::fs::read_to_string(&victim).ok().as_deref() == Some("root's own\n")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no textfile written after SIGHUP"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "root's own\n",
        "watch wrote the metrics through nobody's link into a root-only file"
    );
    let meta = regular_file(&prom).expect("fdaudit.prom is a regular file, not nobody's link");
    assert_eq!(meta.uid(), 0, "fdaudit.prom is root's");
    assert_eq!(meta.mode() & 0o7777, 0o644, "fdaudit.prom is 0644");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("# TYPE fdaudit_spawns_total counter"),
        "fdaudit.prom holds the metrics: {text}"
    );
    // The planted .fdaudit.prom.<pid> link is nobody's, left as it was; no temporary file
    // of watch's own is left.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "fdaudit.prom" && *n != format!(".fdaudit.prom.{pid}"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");

    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let st = watch.0.wait().unwrap();
    assert_eq!(st.code(), Some(0), "watch stops cleanly on SIGTERM");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's own\n");
}

/// A collector directory given as a symbolic link is refused before anything is loaded,
/// with the directory it points to in the message.
#[test]
fn a_textfile_directory_that_is_a_link_is_refused() {
    let base = TempDir::new("textfile-link");
    let real = base.0.join("real");
    std::fs::create_dir(&real).unwrap();
    let link = base.0.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // Code that follows the link would start watching (as root) or fail later (not root):
    // bounded, so such a build fails here instead of hanging.
    let mut child = Reaped(
        Command::new(fdaudit())
            .args(["watch", "--no-listen", "--textfile"])
            .arg(&link)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watch took a --textfile link and ran on"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: --textfile {}: a symbolic link; give the directory it points to ({})",
            link.display(),
            real.display()
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!real.join("fdaudit.prom").exists());
}
