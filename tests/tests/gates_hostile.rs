//! Gates a traced or local user tries to fool, as that user (`nobody`, via setpriv): a flood
//! that makes the trace lose the one spawn that leaks (an incomplete trace must not pass its
//! gate: exit 4), a `-p` process that opens a secret after fdaudit attached and carries it
//! through a re-exec (judged against what it held at attach, not waved through as
//! inherited), and a process that takes the pid of one `unclosed` followed, gone holding an
//! fd, and closes that fd number before the report, and a child left unreaped whose empty
//! fd directory must not read as "closed". Needs root.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{fdaudit, guard, records, temp_path, KillOnDrop};
use serde_json::Value;

/// nobody's uid and gid (Debian's nobody:nogroup).
const NOBODY: u32 = 65534;

/// A fresh directory owned by nobody holding `secret`, `held` (files nobody can read) and
/// the FIFO `go` the test releases the attacker with.
fn attacker_dir(name: &str) -> PathBuf {
    let dir = temp_path(name);
    std::fs::create_dir(&dir).expect("create the attacker's directory");
    for f in ["secret", "held"] {
        std::fs::write(dir.join(f), format!("{f}\n")).expect("write a file");
    }
    let go = std::ffi::CString::new(dir.join("go").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(go.as_ptr(), 0o600) }, 0, "mkfifo");
    for p in [
        dir.join("secret"),
        dir.join("held"),
        dir.join("go"),
        dir.clone(),
    ] {
        std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown to nobody");
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `sh -c script sh DIR`, run as nobody.
fn as_nobody(script: &str, dir: &Path) -> Vec<String> {
    [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
        "sh",
        "-c",
        script,
        "sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.display().to_string()])
    .collect()
}

/// Waits (at most 60 s) until `f` holds.
fn wait_until(what: &str, f: impl FnMut() -> bool) {
    wait_at_most(what, 60, f);
}

/// Waits (at most `secs`) until `f` holds.
fn wait_at_most(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `fdaudit trace --json -o FILE ARGS` and waits until it says it is attached. The
/// tracer is killed if the test ends before it did (a failed assertion): a stopped one too,
/// which would otherwise stay, attached, into the next tests.
fn start_trace(file: &Path, args: &[String]) -> KillOnDrop {
    let tracer = Command::new(fdaudit())
        .args(["trace", "--json", "-o"])
        .arg(file)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fdaudit trace");
    let tracer = KillOnDrop(tracer);
    wait_until("the tracer to attach", || {
        std::fs::read_to_string(file).is_ok_and(|t| t.contains("Ctrl-C to stop"))
    });
    tracer
}

/// Releases the attacker waiting on `DIR/go`: the FIFO opened without blocking (ENXIO
/// while no reader has it open), so that an attacker that never got there fails the test
/// after a minute instead of hanging it.
fn release(dir: &Path) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut go = None;
    wait_until("the attacker to open the FIFO", || {
        go = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(dir.join("go"))
            .ok();
        go.is_some()
    });
    go.expect("the FIFO")
        .write_all(b"go\n")
        .expect("write the FIFO");
}

fn last_of(recs: &[Value], ty: &str) -> Value {
    recs.iter()
        .rev()
        .find(|r| r["type"] == ty)
        .cloned()
        .unwrap_or_else(|| panic!("no {ty} record in {recs:?}"))
}

fn verdicts(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .filter(|r| r["type"] == "note" && r["level"] == "verdict")
        .map(|r| r["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// State letter of `/proc/PID/stat`.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

#[test]
#[ignore = "needs root and BTF"]
fn a_gate_on_a_trace_that_lost_records_fails_with_its_own_status() {
    let _g = guard();
    let dir = attacker_dir("flood");
    // 300 spawns while fdaudit cannot read (a one-page ring fills after a few), then the
    // one that leaks the secret (fd 9): its record has no room.
    let script = r#"echo > "$1/ready"; read x < "$1/go"
i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done
exec 9< "$1/secret"; /bin/true; exec 9<&-
echo done > "$1/done""#;
    let file = temp_path("flood.jsonl");
    let mut args: Vec<String> = ["--fail-on-leak", "--buffer-pages", "1", "--"]
        .map(String::from)
        .to_vec();
    args.extend(as_nobody(script, &dir));
    let mut tracer = start_trace(&file, &args);
    let pid = tracer.0.id();
    // Stopped only once the command runs: a trace stopped before it let the command go
    // would leave it before the FIFO.
    wait_until("the attacker to start", || dir.join("ready").exists());
    // SAFETY: stopping our own child (SIGCONT below).
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    wait_until("fdaudit to stop", || state(pid) == Some('T'));
    release(&dir);
    // (A TCG guest beside two others spawns slowly: 1000 spawns took over 60 s there.)
    wait_at_most("the flood to end", 300, || dir.join("done").exists());
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let status = tracer.0.wait().expect("wait for fdaudit");
    let recs = records(&std::fs::read_to_string(&file).unwrap_or_default());
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = last_of(&recs, "summary");
    assert!(
        summary["lost_records"].as_u64() > Some(0),
        "the flood lost nothing: {summary}"
    );
    assert_eq!(
        (status.code(), summary["exit_reason"].as_str()),
        (Some(4), Some("incomplete")),
        "a trace that lost records passed --fail-on-leak: {summary}"
    );
    let v = verdicts(&recs);
    assert!(
        v.iter().any(|l| l
            .starts_with("--fail-on-leak: the trace is INCOMPLETE, so no gate can pass on it: ")
            && l.contains("records lost")
            && l.ends_with("(exit status 4)")),
        "{v:?}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn a_p_root_that_opens_a_secret_after_attach_and_reexecs_leaks_it() {
    let _g = guard();
    let dir = attacker_dir("reexec");
    // fd 8 is held at attach (inheritable), fd 9 opened after it; then the re-exec.
    let script = r#"exec 8< "$1/held"; read x < "$1/go"; exec 9< "$1/secret"; exec sleep 0.5"#;
    let cmd = as_nobody(script, &dir);
    let mut target = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .spawn()
        .expect("start the attacker");
    let pid = target.id();
    wait_until("the attacker to hold fd 8", || {
        std::fs::read_link(format!("/proc/{pid}/fd/8")).is_ok_and(|t| t.ends_with("held"))
    });
    let file = temp_path("reexec.jsonl");
    let args = ["--fail-on-leak".to_string(), "-p".into(), pid.to_string()];
    let mut tracer = start_trace(&file, &args);
    release(&dir);
    let status = tracer.0.wait().expect("wait for fdaudit");
    let _ = target.wait();
    let recs = records(&std::fs::read_to_string(&file).unwrap_or_default());
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&dir);
    let summary = last_of(&recs, "summary");
    assert_eq!(
        (status.code(), summary["exit_reason"].as_str()),
        (Some(3), Some("leak")),
        "the secret opened after attach passed --fail-on-leak: {recs:?}"
    );
    let spawn = recs
        .iter()
        .find(|r| r["type"] == "spawn" && r["pid"] == pid)
        .unwrap_or_else(|| panic!("the re-exec is not a spawn: {recs:?}"));
    let fd = |n: u64| {
        spawn["leaked_fds"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["fd"] == n))
            .unwrap_or_else(|| panic!("fd {n} not in {spawn}"))
    };
    assert!(
        fd(9)["target"].as_str().unwrap().ends_with("/secret"),
        "{spawn}"
    );
    assert_eq!(
        fd(9).get("inherited"),
        None,
        "fd 9 was opened after attach: {spawn}"
    );
    assert_eq!(fd(8)["inherited"], true, "fd 8 was held at attach: {spawn}");
    let v = verdicts(&recs);
    assert!(
        v.iter()
            .any(|l| l.starts_with("--fail-on-leak: 1 spawn leaked fds")
                && l.contains("fd 9 ")
                && !l.contains("fd 8 ")),
        "{v:?}"
    );
}

/// Forks `cmd` until its pid is `pid` (at most 100 tries: `ns_last_pid` is set to the pid
/// before, and another fork on the machine may take it first), then waits for it. What a
/// local user gets by forking through the pids, without root.
fn run_with_pid(pid: u32, cmd: &[String]) {
    for _ in 0..100 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write ns_last_pid");
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::null())
            .spawn()
            .expect("start the attacker");
        let got = child.id();
        let status = child.wait().expect("wait for the attacker");
        if got == pid {
            assert!(status.success(), "the attacker failed: {status}");
            return;
        }
    }
    panic!("no fork got pid {pid} in 100 tries");
}

/// Starts `fdaudit unclosed -o /dev/null ARGS` with its stderr piped.
fn start_unclosed(args: &[String]) -> KillOnDrop {
    let tracer = Command::new(fdaudit())
        .args(["unclosed", "-o", "/dev/null"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fdaudit");
    KillOnDrop(tracer)
}

/// The pid the attacker's process wrote into `DIR/pid`, once it has.
fn pid_written(dir: &Path, what: &str) -> u32 {
    let pid_file = dir.join("pid");
    let mut pid = 0u32;
    wait_until(what, || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

/// Waits for `tracer`, removes the attacker's `dir`, and checks that the gate failed
/// (status 3) naming `pid` as exited holding the one fd it opened; `hidden` says how it
/// would have been hidden.
fn assert_held_at_exit(mut tracer: KillOnDrop, dir: &Path, pid: u32, hidden: &str) {
    let mut err = String::new();
    let status = {
        use std::io::Read as _;
        let mut stderr = tracer.0.stderr.take().expect("fdaudit's stderr");
        stderr
            .read_to_string(&mut err)
            .expect("read fdaudit's stderr");
        tracer.0.wait().expect("wait for fdaudit")
    };
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(
        status.code(),
        Some(3),
        "the fd pid {pid} held at its exit was hidden by {hidden}: {err}"
    );
    assert!(
        err.contains(&format!("pid {pid} ")) && err.contains("exited holding 1 fd it opened"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn a_user_with_a_gone_followed_process_s_pid_cannot_close_what_it_held() {
    let _g = guard();
    let dir = attacker_dir("reused-pid");
    let (tracer, pid) = start_with_a_gone_subshell(&dir, &[]);
    // Not followed, as nobody, in the gone process's pid: fd 7 opened and closed.
    run_with_pid(pid, &as_nobody("exec 7< /dev/null; exec 7<&-", &dir));
    release(&dir);
    assert_held_at_exit(tracer, &dir, pid, "a close in a later process with its pid");
}

/// The same, the gone process's pid held through a report instead: the first report (at 2
/// s) comes while the user's process, which has no fd 7, has the pid. Its table is not the
/// followed process's (TRACKED forgot that one at its exit), so it must not be read as the
/// gone process's: before, fd 7 read as closed there, and the gate passed.
#[test]
#[ignore = "needs root and BTF"]
fn a_user_holding_a_gone_followed_process_s_pid_through_a_report_cannot_hide_what_it_held() {
    let _g = guard();
    let dir = attacker_dir("held-pid");
    let (tracer, pid) = start_with_a_gone_subshell(&dir, &["--interval", "2"]);
    run_with_pid(pid, &as_nobody("exec sleep 3", &dir));
    release(&dir);
    assert_held_at_exit(tracer, &dir, pid, "a process with its pid through a report");
}

/// `unclosed [ARGS] --fail-on-unclosed` of a command whose followed subshell exits holding
/// fd 7 and leaves its pid; the command then waits for the attack (`release`) and exits 0.
/// Returns once the subshell is gone, with its pid.
fn start_with_a_gone_subshell(dir: &Path, args: &[&str]) -> (KillOnDrop, u32) {
    let script = r#"sh -c 'exec 7< /etc/hostname; echo $$ > "$1/pid"' sh "$1"; read x < "$1/go""#;
    let args: Vec<String> = args
        .iter()
        .chain(&["--fail-on-unclosed", "--", "sh", "-c", script, "sh"])
        .map(|s| s.to_string())
        .chain([dir.display().to_string()])
        .collect();
    let tracer = start_unclosed(&args);
    let pid = pid_written(dir, "the followed subshell's pid");
    wait_until("the followed subshell to be gone", || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    (tracer, pid)
}

/// A process releases its fd table when it begins to exit and stays a zombie until reaped:
/// its fd directory then lists nothing. A user who leaves a child unreaped (here its
/// parent execs `sleep`, which never waits) must not hide what the child held at exit
/// from the gate: the report made while it is a zombie counts it as exited holding fd 7.
#[test]
#[ignore = "needs root"]
fn a_user_who_leaves_a_child_unreaped_cannot_hide_what_it_held_at_exit() {
    let _g = guard();
    let dir = attacker_dir("unreaped");
    let script = r#"sh -c 'exec 7< /etc/hostname; echo $$ > "$1/pid"; exec /bin/true' sh "$1" &
exec sleep 3"#;
    let args: Vec<String> = ["--interval", "1", "--fail-on-unclosed", "--"]
        .iter()
        .map(|s| s.to_string())
        .chain(as_nobody(script, &dir))
        .collect();
    let tracer = start_unclosed(&args);
    let pid = pid_written(&dir, "the child's pid");
    // A zombie through the report at 1 s (its parent sleeps 3 s).
    wait_at_most("the child to be a zombie", 1, || state(pid) == Some('Z'));
    assert_held_at_exit(tracer, &dir, pid, "its parent leaving it unreaped");
}
