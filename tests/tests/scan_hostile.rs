//! `fdaudit scan` against hostile input (issue #11): forged `/proc/net/unix` lines, FIFOs
//! and huge files in a fixture procfs tree, a FUSE server that never answers, signals
//! mid-scan. Root-only tests are `#[ignore = "needs root"]`; none loads eBPF.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{check, require_root};
use serde_json::Value;

/// The records of a `--json` stream, each checked against the schema (header first).
fn json_lines(stdout: &[u8]) -> Vec<Value> {
    fdaudit_tests::records(&String::from_utf8_lossy(stdout))
}

/// Whether a `note` record's message contains `text` (in `--json` mode notes are records).
fn has_note(lines: &[Value], text: &str) -> bool {
    lines
        .iter()
        .any(|v| v["type"] == "note" && v["message"].as_str().is_some_and(|m| m.contains(text)))
}

fn summary(lines: &[Value]) -> &Value {
    lines
        .iter()
        .rfind(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"))
}

/// A fresh directory under the target dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("fdaudit-{name}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: c is NUL-terminated.
    check(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, "mkfifo");
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("create dirs");
    std::fs::write(p, text).expect("write fixture file");
}

const STATUS: &str = "Name:\tvictim\nState:\tS\nPPid:\t1\nUid:\t0\t0\t0\t0\nVmSize:\t100 kB\n";

/// Runs fdaudit with `args`, killing it and failing when it takes longer than `limit`.
/// Returns its output and peak RSS in KiB (wait4's rusage of that very child).
#[allow(clippy::zombie_processes, reason = "reaped with wait4, for its rusage")]
fn run_within(args: &[&str], limit: Duration) -> (Output, i64) {
    let (mut cmd, rss_file) = fdaudit_tests::measured(&fdaudit_tests::fdaudit());
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fdaudit");
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let outr = std::thread::spawn(move || {
        let mut v = Vec::new();
        so.read_to_end(&mut v).map(|_| v)
    });
    let errr = std::thread::spawn(move || {
        let mut v = Vec::new();
        se.read_to_end(&mut v).map(|_| v)
    });
    let start = Instant::now();
    let pid = child.id() as libc::pid_t;
    let (status, rss) = loop {
        let mut status = 0;
        // SAFETY: rusage is written by the kernel when a child is reaped.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child, without blocking.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        check(r, "wait4");
        if r == pid {
            break (status, fdaudit_tests::peak_rss_kib(&rss_file));
        }
        if start.elapsed() > limit {
            // SAFETY: the group `measured` made: time and fdaudit.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = child.wait();
            panic!("fdaudit {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: outr.join().unwrap().expect("read stdout"),
        stderr: errr.join().unwrap().expect("read stderr"),
    };
    (out, rss)
}

/// FIFOs in place of `status`, `limits`, `fdinfo/3` and `net/unix` (one with a writer that
/// keeps it open, so a blocking read would wait forever): skipped at once and counted.
#[test]
fn fifos_in_a_fixture_tree_are_skipped_and_counted() {
    let t = TempDir::new("fifo-tree");
    let r = &t.0;
    std::fs::create_dir_all(r.join("100")).unwrap();
    mkfifo(&r.join("100/status"));
    write(&r.join("200/status"), STATUS);
    mkfifo(&r.join("200/limits"));
    std::fs::create_dir_all(r.join("200/fd")).unwrap();
    symlink("socket:[777]", r.join("200/fd/3")).unwrap();
    symlink("/srv/data", r.join("200/fd/4")).unwrap();
    write(
        &r.join("200/fdinfo/4"),
        "pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t5\n",
    );
    mkfifo(&r.join("200/fdinfo/3"));
    std::fs::create_dir_all(r.join("200/net")).unwrap();
    mkfifo(&r.join("200/net/unix"));
    // A writer on fdinfo/3: a blocking open succeeds and a blocking read waits for data.
    let _writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(r.join("200/fdinfo/3"))
        .expect("hold the FIFO open");
    let root = r.to_str().unwrap();
    let (out, _) = run_within(
        &["scan", root, "--json", "--close-cost-ns", "1"],
        Duration::from_secs(2),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    let s = summary(&lines);
    assert_eq!(s["processes"], 1, "{s}");
    assert_eq!(s["unreadable"], 1, "pid 100 (status is a FIFO): {s}");
    assert_eq!(s["unreadable_files"], 3, "limits, fdinfo/3, net/unix: {s}");
    let p = lines
        .iter()
        .find(|v| v["type"] == "process")
        .expect("process 200");
    assert_eq!(p["pid"], 200);
    assert_eq!(p["nofile_soft"], Value::Null);
    let fds = p["fds"].as_array().unwrap();
    assert_eq!(fds[0]["fd"], 3);
    assert_eq!(
        fds[0]["cloexec"],
        Value::Null,
        "fdinfo/3 is a FIFO: unknown"
    );
    assert_eq!(fds[1]["cloexec"], false);
    assert!(has_note(&lines, "3 procfs files skipped"), "{lines:?}");
}

/// A 1 GiB `limits` (sparse) is refused after the 1 MiB read limit: peak RSS stays small.
#[test]
fn a_huge_limits_file_costs_no_memory() {
    let t = TempDir::new("huge-limits");
    let r = &t.0;
    write(&r.join("300/status"), STATUS);
    std::fs::create_dir_all(r.join("300/fd")).unwrap();
    std::fs::create_dir_all(r.join("300/fdinfo")).unwrap();
    let f = std::fs::File::create(r.join("300/limits")).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let root = r.to_str().unwrap();
    let (out, rss_kib) = run_within(
        &["scan", root, "--json", "--close-cost-ns", "1"],
        Duration::from_secs(20),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    assert_eq!(summary(&lines)["unreadable_files"], 1);
    let p = lines
        .iter()
        .find(|v| v["type"] == "process")
        .expect("process 300");
    assert_eq!(p["nofile_soft"], Value::Null);
    assert!(rss_kib < 64 * 1024, "peak RSS {rss_kib} KiB");
}

/// SIGTERM mid-scan: the scan stops at its next step and still writes its summary
/// (`interrupted`), exit status 143 (128 + SIGTERM). The scan is held mid-way deterministically: a holder
/// of 3000 fds makes one process record larger than the output buffer, and stdout is a
/// 4 KiB pipe nobody reads until the signal has been sent.
#[test]
fn sigterm_ends_a_scan_with_the_partial_summary() {
    let _holder = fdaudit_tests::hold_fds(3000);
    let mut fds = [0; 2];
    // SAFETY: fds is valid for two ints.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    );
    // SAFETY: fcntl on our own pipe.
    check(
        unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 4096) },
        "F_SETPIPE_SZ",
    );
    // SAFETY: both fds were just created and are owned here only.
    let (rd, wr) = unsafe {
        use std::os::fd::FromRawFd as _;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let mut child = Command::new(fdaudit_tests::fdaudit())
        .args(["scan", "--json", "--threads", "1", "--close-cost-ns", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(wr))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fdaudit");
    // Let it fill the pipe.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the scan must still be writing"
    );
    // SAFETY: signalling our own child.
    check(
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) },
        "kill",
    );
    let mut out = Vec::new();
    BufReader::new(rd)
        .read_to_end(&mut out)
        .expect("read stdout");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    let lines = json_lines(&out);
    let s = summary(&lines);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(has_note(&lines, "interrupted"), "{err}\n{lines:?}");
}

/// A running scan-fixture (an inheritable listening TCP socket among others).
struct Fixture {
    child: Child,
    _stdin: ChildStdin,
    pid: u32,
    fd: BTreeMap<String, String>,
}

impl Fixture {
    fn start() -> Fixture {
        let mut child = Command::new(env!("CARGO_BIN_EXE_scan-fixture"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start scan-fixture");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the fixture's line");
        let fd: BTreeMap<String, String> = line
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Fixture {
            pid: fd["pid"].parse().unwrap(),
            _stdin: child.stdin.take().unwrap(),
            child,
            fd,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// strace of a scan of a live fixture (a regular file, a directory, sockets, a pipe): no
/// open of anything under a `/proc/PID/fd/` directory and no stat that may ask a file
/// system's server; the only calls through an fd link are readlink, for a socket no table
/// names its sockprotoname xattr, and statx of cached attributes: the type (a path under
/// /dev/, an inheritable "regular file") and the owner (who could have named it).
#[test]
fn no_stat_or_open_through_fd_links() {
    let fx = Fixture::start();
    let pid = fx.pid.to_string();
    let (_, text) = fdaudit_tests::strace_scan(fx.pid, &["-y"]);
    // The scan did read the fds: each fdinfo file and each link.
    let file_fd = &fx.fd["file"];
    assert!(
        text.contains(&format!("/{pid}/fdinfo>, \"{file_fd}\"")),
        "fdinfo of fd {file_fd} not read:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("readlinkat(")
            && l.contains(&format!("/{pid}/fd>, \"{file_fd}\""))),
        "the link of fd {file_fd} not read:\n{text}"
    );
    for line in text.lines() {
        let through_link =
            line.contains(&format!("/{pid}/fd>, \"")) || line.contains(&format!("/proc/{pid}/fd/"));
        if !through_link || line.contains("readlinkat(") {
            continue;
        }
        // statx of the inode's type or owner from cached attributes only (a path under
        // /dev/, whose text any user can fake in a mount namespace of its own; the owner of
        // a file in a sticky directory can rename it; issue #26; the owner, group and mode
        // of an inheritable fd's file against the holder's credentials, issue #43).
        let cached_type = line.contains("statx(")
            && line.contains("AT_STATX_DONT_SYNC")
            && [
                "STATX_TYPE,",
                "STATX_UID,",
                // and the inode's identity, to know the file again (linkstat.rs)
                "STATX_TYPE|STATX_MODE|STATX_UID|STATX_GID|STATX_INO|STATX_MNT_ID,",
            ]
            .iter()
            .any(|m| line.contains(m));
        assert!(
            cached_type || (line.contains("xattr") && line.contains("\"system.sockprotoname\"")),
            "a call through an fd link: {line}"
        );
    }
}

/// As root, nobody binds abstract unix sockets whose names hold a newline and a forged
/// /proc/net/unix line naming the inode of root's inheritable TCP listener (issue #11's
/// reproduction): the listener stays tcp, listening, `critical`, and `--fail-on critical`
/// exits 1.
#[test]
#[ignore = "needs root"]
fn forged_unix_lines_keep_a_tcp_listener_critical() {
    require_root();
    let fx = Fixture::start();
    let sock = &fx.fd["sock"];
    let sock_n: u64 = sock.parse().unwrap();
    let link = std::fs::read_link(format!("/proc/{}/fd/{sock}", fx.pid)).unwrap();
    let link = link.to_str().unwrap();
    let ino: u64 = link
        .strip_prefix("socket:[")
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not a socket: {link}"))
        .parse()
        .unwrap();
    // The names, built before fork: the child only makes async-signal-safe calls.
    let names: Vec<Vec<u8>> = ["dgram", "stream"]
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let ty = if i == 0 { "0002" } else { "0001" };
            let flags = if i == 0 { "00000000" } else { "00010000" };
            format!(
                "\0fdaudit-forge{i}\n0000000000000000: 00000002 00000000 {flags} {ty} 01 {ino:5} /run/harmless"
            )
            .into_bytes()
        })
        .collect();
    let mut p = [0; 2];
    // SAFETY: p is valid for two ints.
    check(unsafe { libc::pipe(p.as_mut_ptr()) }, "pipe");
    let (rd, wr) = (p[0], p[1]);
    let mut cmd = Command::new("sleep");
    cmd.arg("60");
    // SAFETY: the pre_exec closure only makes async-signal-safe calls (setgroups, setgid,
    // setuid, socket, bind, write) and leaves the sockets to the exec'd sleep.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for (i, name) in names.iter().enumerate() {
                let ty = if i == 0 {
                    libc::SOCK_DGRAM
                } else {
                    libc::SOCK_STREAM
                };
                let s = libc::socket(libc::AF_UNIX, ty, 0);
                let mut sa: libc::sockaddr_un = std::mem::zeroed();
                sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
                for (j, &b) in name.iter().enumerate() {
                    sa.sun_path[j] = b as libc::c_char;
                }
                let len = std::mem::size_of::<libc::sa_family_t>() + name.len();
                if s < 0 || libc::bind(s, (&sa as *const libc::sockaddr_un).cast(), len as u32) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if i == 1 && libc::listen(s, 1) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::write(wr, b"x".as_ptr().cast(), 1);
            Ok(())
        });
    }
    let mut forger = cmd.spawn().expect("start the forger as nobody");
    // SAFETY: closing our copy of the write end; reading one byte from our pipe.
    unsafe { libc::close(wr) };
    let mut b = [0u8; 1];
    // SAFETY: b is valid for one byte.
    let n = unsafe { libc::read(rd, b.as_mut_ptr().cast(), 1) };
    // SAFETY: closing our read end.
    unsafe { libc::close(rd) };
    assert_eq!(n, 1, "the forger did not bind its sockets");
    let table = std::fs::read("/proc/net/unix").unwrap();
    let forged = format!("01 {ino:5} /run/harmless\n");
    let in_table = table.windows(forged.len()).any(|w| w == forged.as_bytes());
    let fx_pid = fx.pid.to_string();
    let out = Command::new(fdaudit_tests::fdaudit())
        .args([
            "scan",
            "-p",
            &fx_pid,
            "--json",
            "--fail-on",
            "critical",
            "--close-cost-ns",
            "1",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit");
    let _ = forger.kill();
    let _ = forger.wait();
    assert!(
        in_table,
        "the forged line is not in /proc/net/unix: the attack is not in place"
    );
    let lines = json_lines(&out.stdout);
    let p = lines
        .iter()
        .find(|v| v["type"] == "process")
        .expect("process");
    let rec = p["fds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fd"] == sock_n)
        .expect("the listener's fd");
    assert_eq!(
        (&rec["family"], &rec["protocol"], &rec["listening"]),
        (&"inet".into(), &"tcp".into(), &true.into()),
        "{rec}"
    );
    assert!(
        lines
            .iter()
            .any(|v| v["type"] == "finding" && v["severity"] == "critical" && v["fd"] == sock_n),
        "no critical finding for fd {sock}: {lines:?}"
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on met: exit status 3 (#10); {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The FUSE server (src/bin/fuse-stall.rs) and its mount, torn down on drop, failure or not:
/// the server is killed first (that aborts the connection: every waiting request fails),
/// then the mount is detached. The holder dies with the server (PR_SET_PDEATHSIG); this
/// process is a child subreaper while the stall lives, so the orphaned holder is
/// reparented here and reaped, not left a zombie under a PID 1 that may not reap.
struct Stall {
    child: Child,
    _stdin: ChildStdin,
    /// The `stat` that proved the stall: stuck (uninterruptibly) until the connection is
    /// aborted, reaped after.
    probe: Option<Child>,
    dir: PathBuf,
    pid: u32,
    fd: u32,
    conn: String,
}

impl Drop for Stall {
    fn drop(&mut self) {
        // Abort the connection where fusectl is mounted; killing the server does too.
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{}/abort", self.conn), "1");
        let _ = self.child.kill();
        let _ = self.child.wait();
        // SAFETY: reaping the holder, our child since the server died; then this process
        // stops being a subreaper.
        unsafe {
            libc::waitpid(self.pid as i32, std::ptr::null_mut(), 0);
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0);
        }
        if let Some(mut p) = self.probe.take() {
            let _ = p.kill();
            let _ = p.wait(); // its request failed with the connection
        }
        let c = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is NUL-terminated.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A file open on a FUSE mount whose server never answers GETATTR: `stat` through the fd
/// link hangs (checked), and scan still finishes and lists the fd.
#[test]
#[ignore = "needs root"]
fn scan_finishes_with_a_file_open_on_an_unresponsive_fuse_mount() {
    // The guard (it asserts root): the subreaper flag below is the whole test binary's, so
    // no other root test runs while it is set (their orphans would become ours).
    let _g = fdaudit_tests::guard();
    let dir = std::env::temp_dir().join(format!("fdaudit-fuse.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: a flag on this process (see Stall).
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fuse-stall"))
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fuse-stall");
    let stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read fuse-stall's line");
    let kv: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|s| s.split_once('='))
        .collect();
    let mut stall = Stall {
        child,
        _stdin: stdin,
        probe: None,
        dir: dir.clone(),
        pid: kv
            .get("pid")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("fuse-stall said {line:?}")),
        fd: kv["fd"].parse().unwrap(),
        conn: kv["conn"].to_owned(),
    };
    // The stall is real: stat through the link does not come back within a second. It
    // stays stuck, uninterruptibly (FUSE waits out a request the server has taken), until
    // the connection goes: the stall reaps it then (timeout(1) would leave it an orphan, a
    // zombie under a PID 1 that may not reap).
    let link = format!("/proc/{}/fd/{}", stall.pid, stall.fd);
    let mut probe = Command::new("stat")
        .args(["-L", &link])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let mut answered = None;
    while answered.is_none() && std::time::Instant::now() < deadline {
        answered = probe.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    stall.probe = Some(probe);
    assert!(
        answered.is_none(),
        "stat -L {link} answered ({answered:?}): the server is not stalled"
    );
    let pid = stall.pid.to_string();
    let (out, _) = run_within(
        &["scan", "-p", &pid, "--json", "--close-cost-ns", "1"],
        Duration::from_secs(10),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out.stdout);
    let p = lines
        .iter()
        .find(|v| v["type"] == "process")
        .expect("process");
    let rec = p["fds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fd"] == stall.fd)
        .unwrap_or_else(|| panic!("fd {} not listed: {p}", stall.fd));
    assert_eq!(rec["target"], format!("{}/f", dir.display()));
    assert_eq!(rec["kind"], "regular");
    assert_eq!(rec["cloexec"], false);
    // And a whole-system scan finishes too.
    let (out, _) = run_within(&["scan", "--close-cost-ns", "1"], Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(stall);
}
