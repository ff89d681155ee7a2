//! scan's boundary finding (issue #43 item 6): a process that holds an inheritable fd its
//! own credentials could not have opened (root's 0600 key held by a process running as
//! nobody) is rated critical; a file of its own is not. The holder runs as nobody through
//! `setpriv`, handed the fd by root across the exec.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use fdaudit_tests::{fdaudit, guard, temp_path, KillOnDrop};
use serde_json::Value;

const NOBODY: u32 = 65534;

/// Runs `sleep` as nobody holding `file` (opened read-only by root) at fd 7 without
/// close-on-exec, scans it as root, and returns its finding on fd 7.
fn finding_of_held(file: &Path) -> Value {
    let c_file = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: open is async-signal-safe.
    finding_of(move || unsafe { libc::open(c_file.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })
}

/// Runs `sleep` as nobody holding at fd 7, without close-on-exec, what `open` (run by
/// root in the child before the exec, async-signal-safe) returns; scans it as root and
/// returns its finding on fd 7.
fn finding_of(open: impl Fn() -> libc::c_int + Send + Sync + 'static) -> Value {
    let holder = hold(open);
    finding_in(&[holder.0.id()], holder.0.id())
}

/// Starts `sleep` as nobody holding at fd 7, without close-on-exec, what `open` (run by
/// root in the child before the exec) returns; returns once it runs as nobody, killed when
/// dropped (a test that panics does not leave it).
fn hold(open: impl Fn() -> libc::c_int + Send + Sync + 'static) -> KillOnDrop {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        // Killed by the test: long enough for 40 scans in an arm64 guest under emulation
        // (30 s was not: the holder had exited, its fd table empty).
        .args(["sleep", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: open, dup2 and fcntl are async-signal-safe; dup2's copy has no close-on-exec.
    // An fd opened at 7 itself is left as it is by dup2 (close-on-exec kept): its flag is
    // cleared instead.
    unsafe {
        cmd.pre_exec(move || {
            let fd = open();
            let at7 = match fd {
                7 => libc::fcntl(7, libc::F_SETFD, 0) == 0,
                fd => fd >= 0 && libc::dup2(fd, 7) == 7,
            };
            if !at7 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let holder = KillOnDrop(cmd.spawn().expect("failed to start setpriv"));
    assert!(
        runs_as_nobody(holder.0.id(), "sleep"),
        "the holder never ran sleep as nobody"
    );
    holder
}

/// Waits up to 5 s for `pid` to run `comm` as nobody.
fn runs_as_nobody(pid: u32, comm: &str) -> bool {
    for _ in 0..500 {
        let now = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let uid = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid());
        if now.trim_end() == comm && uid.is_ok_and(|u| u == NOBODY) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Scans `pids` as root on one worker (in pid order) and returns the finding on fd 7 of
/// `pid`.
fn finding_in(pids: &[u32], pid: u32) -> Value {
    let mut cmd = Command::new(fdaudit());
    cmd.args(["scan", "--json", "--threads", "1"]);
    for p in pids {
        cmd.args(["-p", &p.to_string()]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit");
    let text = String::from_utf8_lossy(&out.stdout);
    let records = fdaudit_tests::records(&text);
    records
        .into_iter()
        .find(|r| r["type"] == "finding" && r["pid"] == pid && r["fd"] == 7)
        .unwrap_or_else(|| panic!("no finding on fd 7 of {pid}: {text}"))
}

/// A directory nobody cannot write, with root's 0600 key and a 0600 file of nobody's:
/// (the directory, the key, nobody's file).
fn key_and_own(name: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_path(name);
    std::fs::create_dir(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let key = dir.join("token");
    std::fs::write(&key, "secret\n").expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let own = dir.join("notes");
    std::fs::write(&own, "mine\n").expect("own file");
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::chown(&own, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    (dir, key, own)
}

#[test]
#[ignore = "needs root"]
fn a_file_beyond_the_holders_credentials_is_critical_its_own_is_not() {
    let _g = guard();
    let (dir, key, own) = key_and_own("creds");

    let f = finding_of_held(&key);
    assert_eq!(
        f["severity"], "critical",
        "root's 0600 file held by nobody: {f}"
    );
    let reason = f["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("could not have opened it (r)") && reason.contains("mode 0600"),
        "{f}"
    );
    assert!(reason.contains("runs as uid 65534"), "{f}");

    let f = finding_of_held(&own);
    assert_eq!(f["severity"], "low", "nobody's own read-only file: {f}");
    assert!(
        !f["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("could not have opened"),
        "{f}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root"]
fn root_s_socket_held_by_nobody_is_critical() {
    let _g = guard();
    let f = finding_of(|| {
        let mut sv = [0; 2];
        // SAFETY: socketpair is async-signal-safe; sv is valid for two ints.
        match unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } {
            0 => sv[0],
            _ => -1,
        }
    });
    assert_eq!(
        f["severity"], "critical",
        "root's socket held by nobody: {f}"
    );
    assert!(
        f["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("root made this socket"),
        "{f}"
    );
}

/// As nobody, a process swaps its fd 7 between an O_PATH fd of root's key (any user who can
/// reach a file can hold one) and a file of its own, and is scanned just before nobody's
/// holder of that key, on the same worker: scan knows a file again from an earlier fd's
/// statx (linkstat.rs), and a swap between the fd's fdinfo, its link and its statx must not
/// lend the key the swapper's file's owner. 40 scans, the key critical in every one.
#[test]
#[ignore = "needs root"]
fn a_process_swapping_its_fds_cannot_lend_root_s_key_its_own_owner() {
    let _g = guard();
    let (dir, key, own) = key_and_own("creds-swap");
    let swapper = Swapper::start(&key, &own);
    let s = swapper.0;
    let c_key = std::ffi::CString::new(key.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: open is async-signal-safe.
    let holder =
        hold(move || unsafe { libc::open(c_key.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) });
    let h = holder.0.id();
    let swapping = runs_as_nobody(s, "swapper")
        && (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::read_link(format!("/proc/{s}/fd/7")).is_ok()
        });
    let mut low = Vec::new();
    if swapping {
        for _ in 0..40 {
            let f = finding_in(&[s, h], h);
            if f["severity"] != "critical" {
                low.push(f);
            }
        }
    }
    drop(holder);
    drop(swapper);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(swapping, "the swapper never ran as nobody with its fd 7");
    assert!(s < h, "the swapper ({s}) is not scanned first ({h})");
    assert!(
        low.is_empty(),
        "root's key held by nobody rated below critical: {low:?}"
    );
}

/// A forked process (comm `swapper`) that becomes nobody and swaps its fd 7, without
/// close-on-exec, between an O_PATH fd of a file and an fd of another, until dropped (a
/// test that panics does not leave it spinning).
struct Swapper(u32);

impl Swapper {
    fn start(key: &Path, own: &Path) -> Swapper {
        let c_key = std::ffi::CString::new(key.as_os_str().as_encoded_bytes()).expect("no NUL");
        let c_own = std::ffi::CString::new(own.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: the child makes only async-signal-safe system calls (prctl, setgroups,
        // setgid, setuid, open, dup2, _exit) and never returns.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                libc::prctl(libc::PR_SET_NAME, c"swapper".as_ptr());
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(NOBODY) != 0
                    || libc::setuid(NOBODY) != 0
                {
                    libc::_exit(1);
                }
                // (setuid cleared it: /proc/PID would stay root's, not nobody's)
                libc::prctl(libc::PR_SET_DUMPABLE, 1);
                let k = libc::open(c_key.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                let o = libc::open(c_own.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if k < 0 || o < 0 {
                    libc::_exit(2);
                }
                loop {
                    libc::dup2(k, 7);
                    libc::dup2(o, 7);
                }
            }
            Swapper(pid as u32)
        }
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) and waitpid(2) of our own child.
        unsafe {
            libc::kill(self.0 as libc::pid_t, libc::SIGKILL);
            libc::waitpid(self.0 as libc::pid_t, std::ptr::null_mut(), 0);
        }
    }
}
