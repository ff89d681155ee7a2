//! `fdaudit unclosed` (issue #40) on real leaking programs: a C service built with frame
//! pointers and a Python one, each leaking a known number of fds per request from one
//! named function while opening and closing others correctly, and keeping a reference to
//! every leaked object (so nothing closes them behind the test's back): the outstanding
//! count equals the growth of /proc/PID/fd over the same interval exactly, the closed fds
//! never appear, the top stack names `leak_one` (C). The EMFILE moment under a 64-fd limit,
//! the fds held before tracing, and bad input. Root only (eBPF); gcc builds the C fixture.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use fdaudit_tests::{default_stop_signals, fdaudit, guard, of_type, records, temp_path};
use serde_json::Value;

/// Leaks K fds per request (a line on stdin) from `leak_one`; `ok_one` opens and closes
/// a file and a pipe. Holds 5 fds of its own before the first request. With argv[2]
/// ("full"), a request leaks until open fails (EMFILE), then says so.
const SERVICE: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int kept[1 << 16];
static int nkept;

__attribute__((noinline)) int leak_one(void) {
    int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) kept[nkept++] = fd;
    return fd;
}

__attribute__((noinline)) void ok_one(void) {
    int fd = open("/etc/passwd", O_RDONLY);
    if (fd >= 0) close(fd);
    int p[2];
    if (pipe(p) == 0) { close(p[0]); close(p[1]); }
}

int main(int argc, char **argv) {
    int k = atoi(argv[1]);
    int full = argc > 2 && strcmp(argv[2], "full") == 0;
    for (int i = 0; i < 5; i++) kept[nkept++] = open("/etc/hosts", O_RDONLY);
    char buf[64];
    printf("ready\n"); fflush(stdout);
    while (fgets(buf, sizeof buf, stdin)) {
        if (full) {
            while (leak_one() >= 0) {}
            printf("%s\n", errno == EMFILE ? "emfile" : "other"); fflush(stdout);
            continue;
        }
        for (int i = 0; i < k; i++) leak_one();
        ok_one();
        printf("done\n"); fflush(stdout);
    }
    /* A service lives on: its call sites are resolved while it does (docs/unclosed.md). */
    sleep(1);
    return 0;
}
"#;

/// Per request: one `open()` kept in a list and one socket never closed (two fds, both
/// from `leak_one`), and a file opened and closed.
const PYTHON: &str = r#"
import socket, sys
kept = []
def leak_one():
    kept.append(open("/etc/hostname"))
    kept.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
def ok_one():
    with open("/etc/passwd") as f:
        f.read(1)
print("ready", flush=True)
for line in sys.stdin:
    leak_one()
    ok_one()
    print("done", flush=True)
"#;

pub(crate) struct Service {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Service {
    pub(crate) fn start(cmd: &mut Command) -> Service {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the service");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the service did not start");
        Service {
            child,
            stdin,
            stdout,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One request; returns the service's answer.
    pub(crate) fn request(&mut self) -> String {
        self.stdin.write_all(b"go\n").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }

    pub(crate) fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fdaudit unclosed --json -o FILE -p PID`, running once it follows.
fn attach(pid: u32, out: &Path) -> Child {
    attach_with(pid, out, &[])
}

pub(crate) fn attach_with(pid: u32, out: &Path, extra: &[&std::ffi::OsStr]) -> Child {
    let pid = pid.to_string();
    let mut args = extra.to_vec();
    args.extend::<[&std::ffi::OsStr; 2]>(["-p".as_ref(), pid.as_ref()]);
    attach_args(out, &args)
}

/// `fdaudit unclosed --json -o FILE ARGS`, running once it follows.
pub(crate) fn attach_args(out: &Path, args: &[&std::ffi::OsStr]) -> Child {
    let child = default_stop_signals(&mut Command::new(fdaudit()))
        .args(["unclosed", "--json", "-o"])
        .arg(out)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !std::fs::read_to_string(out).is_ok_and(|t| t.contains("following")) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "fdaudit never attached"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Stops fdaudit with SIGINT and returns its records.
pub(crate) fn stop(mut tracer: Child, out: &Path) -> Vec<Value> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let st = tracer.wait().unwrap();
    let text = std::fs::read_to_string(out).unwrap();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(tracer.stderr.as_mut().unwrap(), &mut err);
    assert!(
        st.code() == Some(130) || st.success(),
        "fdaudit failed ({st}): {err}\n{text}"
    );
    let _ = std::fs::remove_file(out);
    records(&text)
}

pub(crate) fn process(recs: &[Value], pid: u32) -> &Value {
    of_type(recs, "unclosed_process")
        .into_iter()
        .rfind(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no unclosed_process for {pid}: {recs:#?}"))
}

pub(crate) fn symbols(stack: &Value) -> Vec<String> {
    stack["stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["symbol"].as_str().map(str::to_owned))
        .collect()
}

pub(crate) fn c_service(name: &str) -> PathBuf {
    fdaudit_tests::build_c_fixture(name, SERVICE)
}

/// The C service built with gcc's `flags`.
pub(crate) fn c_service_with(name: &str, flags: &[&str]) -> PathBuf {
    fdaudit_tests::build_c_fixture_with(name, SERVICE, flags)
}

#[test]
#[ignore = "needs root"]
fn a_c_service_s_leaks_are_counted_exactly_and_named_by_leak_one() {
    let _g = guard();
    let exe = c_service("unclosed-c");
    let mut svc = Service::start(Command::new(&exe).arg("3"));
    let out = temp_path("unclosed-c.jsonl");
    let folded = temp_path("unclosed-c.folded");
    let tracer = attach_with(svc.pid(), &out, &["--folded".as_ref(), folded.as_os_str()]);
    let before = svc.open_fds();
    for _ in 0..10 {
        assert_eq!(svc.request(), "done");
    }
    let grown = svc.open_fds() - before;
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(grown, 30, "the fixture leaks 3 fds per request");
    let p = process(&recs, svc.pid());
    assert_eq!(
        p["outstanding"], 30,
        "outstanding = growth of /proc/PID/fd: {p}"
    );
    // Its 5 own fds and stdio were open at attach: counted, never given a stack.
    assert_eq!(p["before_tracing"].as_u64(), Some(before as u64), "{p}");
    assert_eq!(p["not_seen"], 0, "{p}");
    let stacks = of_type(&recs, "unclosed_stack");
    let top = stacks.first().expect("a stack");
    assert_eq!(top["count"], 30, "{top}");
    let syms = symbols(top);
    assert!(
        syms.iter().any(|s| s.starts_with("leak_one")),
        "the top stack names leak_one: {syms:?}"
    );
    for s in &stacks {
        assert!(
            !symbols(s).iter().any(|f| f.starts_with("ok_one")),
            "a closed fd appears: {s}"
        );
    }
    // The folded stacks: the leak's line, outermost first, weighing 30.
    let text = std::fs::read_to_string(&folded).unwrap();
    let _ = std::fs::remove_file(&folded);
    let line = text.lines().next().unwrap_or_default();
    assert!(
        line.contains("main+") && line.contains(";leak_one+") && line.ends_with(" 30"),
        "{text}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_python_service_s_kept_files_and_sockets_are_counted_exactly() {
    let _g = guard();
    let script = temp_path("unclosed.py");
    std::fs::write(&script, PYTHON).unwrap();
    let mut svc = Service::start(Command::new("/usr/bin/python3").arg(&script));
    let out = temp_path("unclosed-py.jsonl");
    let tracer = attach(svc.pid(), &out);
    let before = svc.open_fds();
    for _ in 0..7 {
        assert_eq!(svc.request(), "done");
    }
    let grown = svc.open_fds() - before;
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&script);
    assert_eq!(grown, 14, "a file and a socket per request");
    let p = process(&recs, svc.pid());
    assert_eq!(p["outstanding"], 14, "{p}");
    assert_eq!(p["not_seen"], 0, "{p}");
    let calls: Vec<&Value> = of_type(&recs, "unclosed_stack")
        .iter()
        .map(|s| &s["by_syscall"])
        .collect();
    let sum = |name: &str| -> u64 { calls.iter().filter_map(|c| c[name].as_u64()).sum() };
    assert_eq!((sum("openat"), sum("socket")), (7, 7), "{calls:?}");
}

#[test]
#[ignore = "needs root"]
fn the_emfile_moment_names_the_call_and_the_stack_holding_most_fds() {
    let _g = guard();
    let exe = c_service("unclosed-full");
    let mut cmd = Command::new(&exe);
    cmd.args(["1", "full"]);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let mut svc = Service::start(&mut cmd);
    let out = temp_path("unclosed-full.jsonl");
    let tracer = attach(svc.pid(), &out);
    assert_eq!(svc.request(), "emfile");
    // The EMFILE report comes at the next tick.
    std::thread::sleep(Duration::from_millis(800));
    let held = svc.open_fds();
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    // fds 0..63 all open (an inherited fd above the limit, the runner's, may add one).
    assert!(held >= 64, "the fixture fills its table: {held}");
    let e = of_type(&recs, "unclosed_emfile");
    let e = e
        .first()
        .unwrap_or_else(|| panic!("no unclosed_emfile: {recs:#?}"));
    assert_eq!(
        (
            e["syscall"].as_str(),
            e["errno"].as_str(),
            e["pid"].as_u64()
        ),
        (Some("openat"), Some("EMFILE"), Some(u64::from(svc.pid()))),
        "{e}"
    );
    assert!(symbols(e).iter().any(|s| s.starts_with("leak_one")), "{e}");
    let top = of_type(&recs, "unclosed_stack")[0];
    assert_eq!(e["top_stack_id"], top["stack_id"], "{e} vs {top}");
    let p = process(&recs, svc.pid());
    assert_eq!(p["headroom"].as_i64(), Some(64 - held as i64), "{p}");
    assert_eq!(e["top_count"], p["outstanding"], "{e} vs {p}");
    assert_eq!(
        p["outstanding"].as_u64().unwrap() + p["before_tracing"].as_u64().unwrap(),
        held as u64,
        "{p}"
    );
}

#[test]
#[ignore = "needs root"]
fn fds_held_before_tracing_are_not_attributed() {
    let _g = guard();
    let exe = c_service("unclosed-before");
    let svc = Service::start(Command::new(&exe).arg("1"));
    let out = temp_path("unclosed-before.jsonl");
    let tracer = attach(svc.pid(), &out);
    let held = svc.open_fds();
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    let p = process(&recs, svc.pid());
    assert_eq!(
        (p["before_tracing"].as_u64(), p["outstanding"].as_u64()),
        (Some(held as u64), Some(0)),
        "{p}"
    );
    assert!(of_type(&recs, "unclosed_stack").is_empty(), "{recs:#?}");
}

#[test]
#[ignore = "needs root"]
fn bad_input_gets_a_one_line_error() {
    let _g = guard();
    for args in [&["unclosed", "-p", "999999999"][..], &["unclosed"][..]] {
        let out = Command::new(fdaudit()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // Nothing to follow: what unclosed takes (it has no --demo, which trace's says).
    let out = Command::new(fdaudit()).arg("unclosed").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: nothing to follow: give -p PID, --cgroup PATH or -- CMD ARGS...\n"
    );
    // A command that cannot be exec'd: 127, as `trace -- CMD` and a shell say it.
    let out = Command::new(fdaudit())
        .args(["unclosed", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("error: failed to exec /nonexistent/cmd: ENOENT"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_command_s_fds_open_at_its_exit_are_its_leaks_and_the_closed_ones_are_not() {
    let _g = guard();
    let exe = c_service("unclosed-cmd");
    let out = temp_path("unclosed-cmd.jsonl");
    let mut tracer = Command::new(fdaudit())
        .args(["unclosed", "--json", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("3")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Eight requests, then EOF: the service returns from main.
    tracer
        .stdin
        .take()
        .unwrap()
        .write_all("go\n".repeat(8).as_bytes())
        .unwrap();
    let st = tracer.wait().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&exe);
    assert!(st.success(), "{st}: {text}");
    let recs = records(&text);
    let procs = of_type(&recs, "unclosed_process");
    assert_eq!(procs.len(), 1, "{procs:?}");
    let p = procs[0];
    // Its 5 own fds of main and 3 per request, made after its exec; ok_one's file and pipe
    // were closed (the last request's too, whose fd numbers nothing reused).
    assert_eq!(
        (p["exited"].as_bool(), p["outstanding"].as_u64()),
        (Some(true), Some(5 + 3 * 8)),
        "{p}"
    );
    let stacks = of_type(&recs, "unclosed_stack");
    assert_eq!(stacks[0]["count"], 24, "{stacks:?}");
    assert!(symbols(stacks[0]).iter().any(|s| s.starts_with("leak_one")));
    assert!(
        stacks
            .iter()
            .all(|s| !symbols(s).iter().any(|f| f.starts_with("ok_one"))),
        "{stacks:?}"
    );
}

/// `unclosed [GATE] -- CMD` with `requests` lines on CMD's stdin: (status, stderr).
fn gated(gate: &[&str], cmd: &[&std::ffi::OsStr], requests: usize) -> (Option<i32>, String) {
    let mut tracer = Command::new(fdaudit())
        .args(["unclosed", "-o", "/dev/null"])
        .args(gate)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tracer
        .stdin
        .take()
        .unwrap()
        .write_all("go\n".repeat(requests).as_bytes())
        .unwrap();
    let out = tracer.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root"]
fn the_gates_fail_on_fds_held_at_exit_and_on_growth_naming_the_site() {
    let _g = guard();
    let exe = c_service("unclosed-gates");
    let svc = [exe.as_os_str(), "3".as_ref()];
    // 5 fds of main and 3 per request, held at exit.
    let (code, err) = gated(&["--fail-on-unclosed"], &svc, 8);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("verdict: --fail-on-unclosed: pid")
            && err.contains("exited holding 29 fds it opened: leak_one+"),
        "{err}"
    );
    // /bin/true closes what it opens (the loader's files): nothing to fail on.
    let (code, err) = gated(&["--fail-on-unclosed"], &["/bin/true".as_ref()], 0);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = gated(&["--fail-on-growth", "29"], &svc, 8);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("--fail-on-growth 29: pid") && err.contains("grew by 29 fds"),
        "{err}"
    );
    let (code, err) = gated(&["--fail-on-growth", "30"], &svc, 8);
    assert_eq!(code, Some(0), "29 < 30: {err}");
    let _ = std::fs::remove_file(&exe);
}

/// A command substitution's subshell points its stdout at the pipe with a dup2 and exits:
/// stdio, not an fd it held at exit (valgrind's `--track-fds` lists no stdio either), so a
/// shell script does not fail the gate; a subshell that keeps fd 7 does.
#[test]
#[ignore = "needs root"]
fn a_subshell_s_stdio_is_not_held_at_exit_and_its_fd_7_is() {
    let _g = guard();
    let sh = |script: &str| {
        gated(
            &["--fail-on-unclosed"],
            &["bash".as_ref(), "-c".as_ref(), script.as_ref()],
            0,
        )
    };
    let (code, err) = sh("x=$(echo hi); y=$(echo yo >&2); exit 0");
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = sh("x=$(echo hi); (exec 7</etc/hostname; /bin/true); exit 0");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("exited holding 1 fd it opened"), "{err}");
}

/// The main thread leaves by pthread_exit while a thread keeps fd 7, closes it at 2 s and
/// ends the process.
const LEADER_GONE_FIRST: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

static void *worker(void *arg) {
    (void)arg;
    sleep(2);
    close(7);
    return 0;
}

int main(void) {
    int fd = open("/etc/hostname", O_RDONLY);
    dup2(fd, 7);
    close(fd);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_exit(0);
}
"#;

/// A leader that exited before its threads is a zombie whose fd directory lists nothing;
/// the process lives on: its table is read through a live thread, so the reports made
/// meanwhile neither count fd 7 as held at an exit nor as closed, and the gate passes
/// once the thread closed it.
#[test]
#[ignore = "needs root"]
fn a_process_whose_main_thread_exited_first_is_read_through_a_live_thread() {
    let _g = guard();
    let exe = fdaudit_tests::build_c_fixture_with(
        "unclosed-leader-gone",
        LEADER_GONE_FIRST,
        &["-O2", "-pthread"],
    );
    let (code, err) = gated(
        &["--interval", "0.5", "--fail-on-unclosed"],
        &[exe.as_os_str()],
        0,
    );
    let _ = std::fs::remove_file(&exe);
    assert_eq!(code, Some(0), "{err}");
}

/// Seven children each dup() fds until EMFILE at the 20,000-fd hard limit, then exit;
/// the parent exits 0 once they have.
const FILL: &str = r#"
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    for (int c = 0; c < 7; c++) {
        if (fork() == 0) {
            struct rlimit r;
            getrlimit(RLIMIT_NOFILE, &r);
            r.rlim_cur = r.rlim_max;
            setrlimit(RLIMIT_NOFILE, &r);
            while (dup(0) >= 0) {}
            _exit(0);
        }
    }
    while (wait(NULL) > 0) {}
    return 0;
}
"#;

#[test]
#[ignore = "needs root"]
fn a_gate_on_a_run_whose_live_set_was_full_is_incomplete() {
    let _g = guard();
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reading our own limit.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert!(
        lim.rlim_max * 7 > 131_072,
        "7 processes at the hard limit {} cannot fill the live set",
        lim.rlim_max
    );
    let exe = fdaudit_tests::build_c_fixture("unclosed-fill", FILL);
    let (code, err) = gated(&["--fail-on-growth", "1000000"], &[exe.as_os_str()], 0);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("verdict: incomplete:") && err.contains("made while the live set was full"),
        "{err}"
    );
}

/// 300 children one after another, each dup()s 500 fds and closes them, then exits: 150,000
/// (process, fd) keys in all, more than the live set holds, none held at the end.
const CHURN: &str = r#"
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    for (int c = 0; c < 300; c++) {
        if (fork() == 0) {
            int fds[500];
            for (int i = 0; i < 500; i++) fds[i] = dup(0);
            for (int i = 0; i < 500; i++) close(fds[i]);
            _exit(0);
        }
        wait(NULL);
    }
    return 0;
}
"#;

/// The kernel keeps a closed entry for the next fd of its number (a lookup, not a hash
/// update, per open and close); those of gone processes must go, or a node whose processes
/// come and go fills the live set with closed fds.
#[test]
#[ignore = "needs root"]
fn closed_entries_of_gone_processes_do_not_fill_the_live_set() {
    let _g = guard();
    let exe = fdaudit_tests::build_c_fixture("unclosed-churn", CHURN);
    let (code, err) = gated(&["--fail-on-growth", "1"], &[exe.as_os_str()], 0);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("incomplete"), "{err}");
}

/// A thread takes an fd table of its own (`unshare`: unshare(CLONE_FILES); `int80`: the same
/// as an i386 call; `clone`: a thread cloned without CLONE_FILES) and opens /etc/hostname in
/// it; the main thread close()s that
/// number, not open in its own table, and the process exits with the thread holding it.
const SPLIT_TABLE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

static volatile int held = -1;
static char stack[1 << 16];

static int own_table(void *arg) {
    (void)arg;
    held = open("/etc/hostname", O_RDONLY);
    for (;;) pause();
}

static void *unshared(void *arg) {
    if (unshare(CLONE_FILES) != 0) _exit(20);
    return (void *)(long)own_table(arg);
}

static void *unshared_ia32(void *arg) {
    long r = -1;
#ifdef __x86_64__
    /* i386's unshare is 310 (x86_64's 310 is process_vm_readv) */
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(310), "b"(CLONE_FILES) : "memory");
#endif
    if (r != 0) _exit(23);
    return (void *)(long)own_table(arg);
}

int main(int argc, char **argv) {
    pthread_t t;
    if (argc > 1 && strcmp(argv[1], "clone") == 0) {
        int f = CLONE_VM | CLONE_FS | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
        if (clone(own_table, stack + sizeof stack, f, 0) < 0) return 21;
    } else if (pthread_create(&t, 0, argc > 1 && strcmp(argv[1], "int80") == 0 ? unshared_ia32
                                                                                : unshared, 0) != 0) {
        return 22;
    }
    while (held < 0) usleep(1000);
    close(held); /* EBADF here: the fd is in the thread's table */
    usleep(700000); /* a read of the live set meanwhile: not in /proc/PID/fd either */
    return 0;
}
"#;

/// An unprivileged user's thread with an fd table of its own holds an fd that the live set
/// (one table per process) lost: by the main thread's close() of that number, and by the
/// process's /proc/PID/fd, which is the main thread's table. Before, the gate passed (exit
/// 0); now no gate passes on such a run (incomplete, exit 4), and a run without a gate says
/// it is incomplete.
#[test]
#[ignore = "needs root"]
fn a_thread_with_its_own_fd_table_cannot_hide_a_held_fd_from_the_gate() {
    let _g = guard();
    let exe = fdaudit_tests::build_c_fixture_with("unclosed-split", SPLIT_TABLE, &["-pthread"]);
    let ways: &[&str] = if cfg!(target_arch = "x86_64") {
        &["unshare", "int80", "clone"]
    } else {
        &["unshare", "clone"]
    };
    let why = "incomplete: 1 thread took an fd table of its own";
    for &how in ways {
        let cmd = as_nobody(&exe, &[how]);
        let cmd: Vec<&std::ffi::OsStr> = cmd.iter().map(|s| s.as_os_str()).collect();
        assert_incomplete(&cmd, why);
        let (code, err) = gated(&[], &cmd, 0);
        assert_eq!(code, Some(0), "{how}: {err}");
        assert!(err.contains(&format!("warning: {why}")), "{how}: {err}");
    }
    let _ = std::fs::remove_file(&exe);
}

/// `setpriv … -- EXE ARGS`: EXE run as nobody.
fn as_nobody(exe: &std::path::Path, args: &[&str]) -> Vec<std::ffi::OsString> {
    let setpriv = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
    ];
    setpriv
        .iter()
        .map(Into::into)
        .chain([exe.as_os_str().to_owned()])
        .chain(args.iter().map(Into::into))
        .collect()
}

/// `unclosed --fail-on-unclosed -- CMD` passes no verdict: status 4, the verdict `why`.
fn assert_incomplete(cmd: &[&std::ffi::OsStr], why: &str) {
    let (code, err) = gated(&["--interval", "0.25", "--fail-on-unclosed"], cmd, 0);
    assert_eq!(code, Some(4), "{cmd:?}: {err}");
    assert!(err.contains(&format!("verdict: {why}")), "{cmd:?}: {err}");
}

/// An unprivileged user's fixture `source` (built with `flags`) runs under the gate, which
/// passes no verdict, saying `why`.
fn assert_incomplete_as_nobody(name: &str, source: &str, flags: &[&str], why: &str) {
    let exe = fdaudit_tests::build_c_fixture_with(name, source, flags);
    let cmd = as_nobody(&exe, &[]);
    let cmd: Vec<&std::ffi::OsStr> = cmd.iter().map(|s| s.as_os_str()).collect();
    assert_incomplete(&cmd, why);
    let _ = std::fs::remove_file(&exe);
}

/// A 64-bit process opens /etc/hostname by an i386 syscall (`int $0x80`, open is 5; built
/// without PIE, so that its data is below 4 GiB, where the call's pointers reach) and exits
/// holding it.
#[cfg(target_arch = "x86_64")]
const INT80_OPEN: &str = r#"
#include <unistd.h>

static const char path[] = "/etc/hostname";

int main(void) {
    long fd = -1;
#ifdef __x86_64__
    __asm__ volatile("int $0x80" : "=a"(fd) : "a"(5), "b"(path), "c"(0) : "memory");
#endif
    if (fd < 0) return 10;
    usleep(300000);
    return 0;
}
"#;

/// fdaudit does not follow i386 calls, so an unprivileged user's fd made by one is not in
/// the live set: before, `--fail-on-unclosed` passed on a process that exited holding it;
/// now the kernel counts the call and no gate passes on the run (incomplete, exit 4).
#[test]
#[ignore = "needs root"]
#[cfg(target_arch = "x86_64")] // no i386 calls elsewhere
fn an_fd_made_by_an_i386_call_cannot_pass_the_gate_unseen() {
    let _g = guard();
    let why = "incomplete: i386 syscalls that make fds or set close-on-exec (int $0x80, or a \
               32-bit process): 1;";
    assert_incomplete_as_nobody("unclosed-int80", INT80_OPEN, &["-no-pie"], why);
}

/// A process opens /etc/hostname through io_uring (IORING_OP_OPENAT, no fixed file: no
/// syscall of the fd-making table), closes the ring and exits holding the fd.
const URING_OPEN: &str = r#"
#include <fcntl.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = syscall(__NR_io_uring_setup, 4, &p);
    if (ring < 0) return 10;
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe),
                                     PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) return 11;
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
    unsigned *mask = (unsigned *)(sq + p.sq_off.ring_mask);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    unsigned t = *tail, i = t & *mask;
    memset(&sqes[i], 0, sizeof sqes[i]);
    sqes[i].opcode = IORING_OP_OPENAT;
    sqes[i].fd = AT_FDCWD;
    sqes[i].addr = (unsigned long)"/etc/hostname";
    sqes[i].open_flags = O_RDONLY;
    array[i] = i;
    __atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, 0, 0) != 1) return 12;
    unsigned head = *(unsigned *)(cq + p.cq_off.head);
    struct io_uring_cqe *cqe = (struct io_uring_cqe *)(cq + p.cq_off.cqes) +
                               (head & *(unsigned *)(cq + p.cq_off.ring_mask));
    if (cqe->res < 0) return 13;
    close(ring); /* the ring goes; the fd it made stays */
    usleep(300000);
    return 0;
}
"#;

/// An unprivileged user's fd made by an io_uring request is not in the live set: before,
/// `--fail-on-unclosed` passed on a process that exited holding it; now the kernel counts
/// the request (`unclosed_io_uring`, or the ring's setup on a kernel before 6.0) and no gate
/// passes on the run (incomplete, exit 4).
#[test]
#[ignore = "needs root"]
fn an_fd_made_by_an_io_uring_request_cannot_pass_the_gate_unseen() {
    let _g = guard();
    let why = "incomplete: io_uring requests that can make fds (openat, accept, socket, pipe, \
               recvmsg, fixed-fd install; on kernels before 6.0, rings set up): 1;";
    assert_incomplete_as_nobody("unclosed-uring", URING_OPEN, &["-O2"], why);
}

/// Opens /etc/hostname by a `syscall` instruction in its own `main` (so the innermost frame
/// is in its text), then execs `argv[1]`, which holds the fd on. Built without PIE, as is
/// [`EXEC_INTO`]: both texts start at 0x401000.
#[cfg(target_arch = "x86_64")]
const OPEN_THEN_EXEC: &str = r#"
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long fd = -1;
#ifdef __x86_64__
    __asm__ volatile("syscall" : "=a"(fd) : "a"(SYS_open), "D"("/etc/hostname"), "S"(O_RDONLY)
                     : "rcx", "r11", "memory");
#endif
    if (fd < 0 || argc < 2) return 10;
    execl(argv[1], argv[1], (char *)0);
    return 127;
}
"#;

/// What the process execs into: other functions at the same addresses.
#[cfg(target_arch = "x86_64")]
const EXEC_INTO: &str = r#"
#include <unistd.h>
__attribute__((noinline)) void b_one(void) { usleep(1); }
__attribute__((noinline)) void b_two(void) { usleep(2); }
__attribute__((noinline)) void b_three(void) { usleep(3); }
int main(void) { b_one(); b_two(); b_three(); sleep(1); return 0; }
"#;

/// A call site first read after its process exec'd (the fd survives the exec) is never
/// named in the new image: the site carries its image's text range, so the new image's maps
/// are not read for it and its frame says why it is unnamed (or, read before the exec,
/// names `main`). Before, the open's frame read `b_two+0x4`, the new image's function at
/// that address, shown as fact (8 runs of 8).
#[test]
#[ignore = "needs root"]
#[cfg(target_arch = "x86_64")] // the fixture's open is an x86_64 syscall instruction
fn a_site_read_after_its_process_exec_d_is_never_named_in_the_new_image() {
    let _g = guard();
    let flags = ["-O0", "-no-pie", "-fno-omit-frame-pointer"];
    let a = fdaudit_tests::build_c_fixture_with("unclosed-exec-a", OPEN_THEN_EXEC, &flags);
    let b = fdaudit_tests::build_c_fixture_with("unclosed-exec-b", EXEC_INTO, &flags);
    let out = temp_path("unclosed-exec.jsonl");
    let st = Command::new(fdaudit())
        .args(["unclosed", "--json", "-o"])
        .arg(&out)
        .arg("--")
        .args([&a, &b])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = [&a, &b, &out].map(std::fs::remove_file);
    assert!(st.success(), "{st}: {text}");
    let recs = records(&text);
    let stacks = of_type(&recs, "unclosed_stack");
    let open = stacks
        .iter()
        .find(|s| s["by_syscall"]["open"] == 1)
        .unwrap_or_else(|| panic!("no open: {stacks:?}"));
    let first = &open["stack"][0];
    let named_here = first["symbol"]
        .as_str()
        .is_some_and(|s| s.starts_with("main+"))
        && first["module"].as_str() == a.to_str();
    let said_gone = first["unnamed"]
        .as_str()
        .is_some_and(|s| s.ends_with("the image it was made in is gone"));
    assert!(named_here || said_gone, "{open}");
    assert!(!symbols(open).iter().any(|s| s.starts_with("b_")), "{open}");
    let modules: Vec<&str> = open["stack"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["module"].as_str())
        .collect();
    assert!(!modules.contains(&b.to_str().unwrap()), "{open}");
}
