//! `fdaudit trace --origin`: each leaked fd names the call that made it inheritable, with
//! the user stack. Root only (eBPF); the C fixture is compiled here with gcc (the VM guests
//! have none: xtask/src/vm/build.rs leaves this test out there).

use fdaudit_tests::{records, require_root};
use serde_json::Value;

/// Opens /etc/hostname in a named function without O_CLOEXEC (fd 3), makes a socketpair in
/// another, dup2s fd 3 to 40, then forks and execs /bin/true.
const FIXTURE: &str = r#"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int open_hostname(void) { return open("/etc/hostname", O_RDONLY); }
__attribute__((noinline)) int make_pair(int sv[2]) { return socketpair(AF_UNIX, SOCK_STREAM, 0, sv); }

int main(void) {
    int sv[2];
    for (int fd = 3; fd < 1024; fd++) close(fd); /* what the test's runner passed on */
    if (open_hostname() != 3) return 10;
    if (make_pair(sv) != 0) return 11;
    if (dup2(3, 40) != 40) return 12;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

/// A pipe (fds 3, 4), then /etc/hostname opened with O_CLOEXEC (fd 5) whose flag
/// fcntl(F_SETFD, 0) clears, and an fcntl(F_DUPFD) of it to 20; then fork and exec.
const FIXTURE_FCNTL: &str = r#"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int p[2];
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (pipe(p) != 0 || p[0] != 3) return 10;
    int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
    if (fd != 5 || fcntl(fd, F_SETFD, 0) != 0) return 11;
    if (fcntl(fd, F_DUPFD, 20) != 20) return 12;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

/// One trace at a time: frames are resolved from /proc/PID/maps while the process lives, and
/// three sessions loading their programs at once on a 2-CPU machine can delay the reader
/// past the fixture's exit (its frames then have no module; docs/architecture.md).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn build_fixture() -> std::path::PathBuf {
    build("origin-fixture", FIXTURE)
}

fn build(name: &str, source: &str) -> std::path::PathBuf {
    fdaudit_tests::build_c_fixture(name, source)
}

fn origin_of(spawn: &Value, fd: u64) -> &Value {
    let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
    let l = leaked
        .iter()
        .find(|l| l["fd"] == fd)
        .unwrap_or_else(|| panic!("fd {fd} did not leak: {leaked:?}"));
    &l["origin"]
}

#[test]
#[ignore = "needs root and BTF"]
fn each_leaked_fd_names_its_call_and_the_open_names_its_function() {
    require_root();
    let _serial = serial();
    let exe = build_fixture();
    let (out, text) = fdaudit_tests::trace_to_file("origin.jsonl", |c| {
        c.args(["--origin", "--"]).arg(&exe);
    });
    let _ = std::fs::remove_file(&exe);
    fdaudit_tests::assert_success(&out);
    let name = exe
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let comm: String = name.chars().take(15).collect();
    let recs = records(&text);
    let spawn = recs
        .iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    let fixture_pid = spawn["parent_pid"].as_u64().expect("parent_pid");
    let open = origin_of(spawn, 3);
    assert_eq!(open["syscall"], "openat", "fd 3: {open}");
    assert_eq!(
        open["pid"], fixture_pid,
        "fd 3 was opened by the fixture: {open}"
    );
    assert_eq!(open["comm"], comm.as_str());
    assert!(open["time_ns"].as_u64().unwrap_or(0) > 0, "{open}");
    let frames = open["stack"].as_array().expect("a stack");
    let frame = frames
        .iter()
        .find(|f| {
            f["symbol"]
                .as_str()
                .unwrap_or("")
                .starts_with("open_hostname+")
        })
        .unwrap_or_else(|| panic!("no frame names open_hostname: {open}"));
    // DWARF (-g): the fixture's source line of the open() call.
    let line = FIXTURE
        .lines()
        .position(|l| l.contains("int open_hostname(void)"))
        .expect("the line")
        + 1;
    assert!(
        frame["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("origin-fixture.c"),
        "{frame}"
    );
    assert_eq!(frame["line"], line as u64, "{frame}");
    assert_eq!(origin_of(spawn, 40)["syscall"], "dup2");
    for fd in [4, 5] {
        assert_eq!(origin_of(spawn, fd)["syscall"], "socketpair", "fd {fd}");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn an_fd_from_before_the_trace_has_an_unknown_origin_and_no_origin_without_the_flag() {
    require_root();
    let _serial = serial();
    let (out, text) = fdaudit_tests::trace_to_file("origin-before.jsonl", |c| {
        c.args(["--origin", "--", "bash", "-c", "/bin/true 7</etc/hostname"]);
    });
    fdaudit_tests::assert_success(&out);
    // bash opens fd 7 itself (openat, then dup2 from the fd it got: the origin is dup2 or
    // fcntl(F_DUPFD)); an fd the traced command inherited has none.
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    let o = origin_of(&spawn, 7);
    assert!(
        o["syscall"].is_string(),
        "bash's own redirection has an origin: {o}"
    );
    let (out, text) = fdaudit_tests::trace_to_file("origin-off.jsonl", |c| {
        c.args(["--", "bash", "-c", "/bin/true 7</etc/hostname"]);
    });
    fdaudit_tests::assert_success(&out);
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .expect("a spawn");
    assert!(origin_of(&spawn, 7).is_null(), "no origin without --origin");
}

#[test]
#[ignore = "needs root and BTF"]
fn pipe_fcntl_setfd_and_f_dupfd_are_origins_and_the_cloexec_open_is_not() {
    require_root();
    let _serial = serial();
    let exe = build("origin-fcntl", FIXTURE_FCNTL);
    let (out, text) = fdaudit_tests::trace_to_file("origin-fcntl.jsonl", |c| {
        c.args(["--origin", "--"]).arg(&exe);
    });
    let _ = std::fs::remove_file(&exe);
    fdaudit_tests::assert_success(&out);
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    // glibc's pipe() is pipe2(fds, 0).
    for fd in [3, 4] {
        assert_eq!(origin_of(&spawn, fd)["syscall"], "pipe2", "fd {fd}");
    }
    // The open had O_CLOEXEC: the fd became inheritable at fcntl(F_SETFD).
    assert_eq!(origin_of(&spawn, 5)["syscall"], "fcntl(F_SETFD)");
    assert_eq!(origin_of(&spawn, 20)["syscall"], "fcntl(F_DUPFD)");
}

#[test]
#[ignore = "needs root and BTF"]
fn an_exec_chain_keeps_the_origin_and_a_grandchild_finds_its_grandparent_s() {
    require_root();
    let _serial = serial();
    // bash opens fd 7 itself, then execs env (same process), which execs /bin/true; the
    // sh it forks first is a grandchild whose /bin/true gets fd 7 from bash's call.
    let script = "exec 7</etc/hostname; sh -c '/bin/true; :'; exec env /bin/true";
    let (out, text) = fdaudit_tests::trace_to_file("origin-chain.jsonl", |c| {
        c.args(["--origin", "--", "bash", "-c", script]);
    });
    fdaudit_tests::assert_success(&out);
    let spawns: Vec<Value> = records(&text)
        .into_iter()
        .filter(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .collect();
    assert_eq!(spawns.len(), 2, "{text}");
    let origins: Vec<&Value> = spawns.iter().map(|s| origin_of(s, 7)).collect();
    let bash = origins[0]["pid"].as_u64().unwrap_or(0);
    assert!(
        bash > 0,
        "the grandchild's fd 7 has its grandparent's origin: {origins:?}"
    );
    assert_eq!(origins[0]["comm"], "bash", "{origins:?}");
    // The exec chain (bash -> env -> /bin/true) is bash's own process.
    assert_eq!(spawns[1]["pid"], bash, "{text}");
    assert_eq!(origins[1]["pid"], bash, "{origins:?}");
    assert_eq!(
        origins[0]["time_ns"], origins[1]["time_ns"],
        "the same call"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn advice_names_the_process_that_made_the_fd_not_the_shell_that_passed_it_on() {
    require_root();
    let _serial = serial();
    // bash makes fd 7 (a redirection); dash only passes it on to /bin/true.
    let script = "exec 7</etc/hostname; sh -c '/bin/true; :'; exec env /bin/true";
    let (out, text) = fdaudit_tests::trace_to_file("origin-maker.jsonl", |c| {
        c.args(["--origin", "--", "bash", "-c", script]);
    });
    fdaudit_tests::assert_success(&out);
    let recs = records(&text);
    let advice = |parent: &str, path: &str| {
        recs.iter()
            .find(|r| r["type"] == "advice" && r["parent_comm"] == parent && r["exec_path"] == path)
            .unwrap_or_else(|| panic!("no advice for {parent} -> {path}: {text}"))
            .clone()
    };
    let bash_pid = recs
        .iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/usr/bin/sh")
        .and_then(|r| r["parent_pid"].as_u64())
        .unwrap_or_else(|| panic!("no spawn of sh: {text}"));
    let ids = |a: &Value| -> Vec<String> {
        a["remedies"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|r| r["id"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // bash's own spawns: bash made the fd, bash's remedy, no maker named.
    let own = advice("bash", "/usr/bin/sh");
    assert!(own.get("made_by").is_none(), "{own}");
    assert_eq!(ids(&own), ["shell-redirection"], "{own}");
    // dash's spawn: bash made it (its pid and runtime), dash is not told to change.
    let passed = advice("sh", "/bin/true");
    assert_eq!(passed["made_by"]["pid"], bash_pid, "{passed}");
    assert_eq!(passed["made_by"]["comm"], "bash", "{passed}");
    assert_eq!(passed["made_by"]["runtime"]["name"], "bash", "{passed}");
    assert_eq!(ids(&passed), ["shell-redirection"], "{passed}");
    assert!(
        !ids(&passed).contains(&"dash-redirection".to_string()),
        "{passed}"
    );
}

/// Issue #38's stale frame: `open_listener` runs first and leaves return addresses on the
/// stack; `load_key` then opens the file through libc's `open64`, which keeps no frame
/// pointer. The caller comes from `.eh_frame`, never from a scan of stale stack words.
const FIXTURE_STALE: &str = r#"
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int open_listener(void) {
    char pad[256];
    memset(pad, 1, sizeof pad);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return s + pad[7] - 1;
}
__attribute__((noinline)) int load_key(void) {
    return open("/etc/hostname", O_RDONLY); /* the key */
}

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (open_listener() < 0 || load_key() < 0) return 10;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    /* Gone at once: its modules come from the build ids the kernel sent at the call. */
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn the_caller_of_a_libc_wrapper_is_unwound_the_same_in_every_run() {
    require_root();
    let _serial = serial();
    let exe = build("origin-stale", FIXTURE_STALE);
    let runs = 20;
    let script = format!(
        "for i in $(seq {runs}); do {} || exit 1; done",
        exe.display()
    );
    let (out, text) = fdaudit_tests::trace_to_file("origin-stale.jsonl", |c| {
        c.args(["--origin", "--", "sh", "-c", &script]);
    });
    let _ = std::fs::remove_file(&exe);
    fdaudit_tests::assert_success(&out);
    let line = FIXTURE_STALE
        .lines()
        .position(|l| l.contains("/* the key */"))
        .expect("the line")
        + 1;
    let spawns: Vec<Value> = records(&text)
        .into_iter()
        .filter(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .collect();
    assert_eq!(spawns.len(), runs, "{text}");
    for spawn in &spawns {
        let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
        let key = leaked
            .iter()
            .find(|l| l["target"] == "/etc/hostname")
            .unwrap_or_else(|| panic!("the key did not leak: {spawn}"));
        let origin = &key["origin"];
        let frames = origin["stack"].as_array().expect("a stack");
        assert!(frames.len() >= 3, "{origin}");
        // open64 (libc, named from .dynsym), then load_key from the unwind table, then main.
        for f in &frames[..3] {
            assert!(
                f["symbol"].is_string(),
                "a frame without a symbol: {origin}"
            );
        }
        let caller = &frames[1];
        assert!(
            caller["symbol"]
                .as_str()
                .is_some_and(|s| s.starts_with("load_key+")),
            "{origin}"
        );
        assert_eq!(caller["found_by"], "eh_frame", "{origin}");
        assert_eq!(caller["line"], line as u64, "{origin}");
        assert!(
            frames[2]["symbol"]
                .as_str()
                .is_some_and(|s| s.starts_with("main+")),
            "{origin}"
        );
        assert!(
            !origin.to_string().contains("open_listener"),
            "a stale frame: {origin}"
        );
    }
}

/// #38 item 3: the call's record is read after its process exec'd. The fixture stops the
/// reader (its parent, fdaudit) before the call and the new image wakes it, so fdaudit first
/// sees the record when /proc/PID/maps is the shell's.
const FIXTURE_LATE: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

__attribute__((noinline)) int load_key(void) {
    return open("/etc/hostname", O_RDONLY); /* the key */
}

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (kill(getppid(), SIGSTOP) != 0 || load_key() < 0) return 10;
    execl("/bin/sh", "sh", "-c", "sleep 0.3; kill -CONT $PPID; sleep 0.3", (char *)0);
    return 127;
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn a_call_read_after_its_process_exec_d_is_unwound_in_the_image_it_was_made_in() {
    require_root();
    let _serial = serial();
    let exe = build("origin-late", FIXTURE_LATE);
    let (out, text) = fdaudit_tests::trace_to_file("origin-late.jsonl", |c| {
        c.args(["--origin", "--"]).arg(&exe);
    });
    let _ = std::fs::remove_file(&exe);
    fdaudit_tests::assert_success(&out);
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/sh")
        .unwrap_or_else(|| panic!("no exec of the shell: {text}"));
    let key = spawn["leaked_fds"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["target"] == "/etc/hostname"))
        .unwrap_or_else(|| panic!("the key did not leak: {spawn}"));
    let origin = &key["origin"];
    let frames = origin["stack"].as_array().expect("a stack");
    // Before: the shell's maps were kept in place of the modules the kernel named at the
    // call, and the frames above main had no module ("unwinding ends…"), or a wrong one.
    assert!(origin.get("stack_partial").is_none(), "{origin}");
    let exe = exe.to_str().expect("a path");
    for f in frames {
        let module = f["module"].as_str().unwrap_or_default();
        assert!(
            module == exe || module.ends_with("/libc.so.6"),
            "a frame not in the image that made the call: {origin}"
        );
    }
    let symbols: Vec<&str> = frames.iter().filter_map(|f| f["symbol"].as_str()).collect();
    for (i, want) in ["load_key+", "main+", "__libc_start_main+", "_start+"]
        .into_iter()
        .enumerate()
    {
        let at = symbols.iter().position(|s| s.starts_with(want));
        assert!(at.is_some(), "no {want} frame: {origin}");
        if i == 0 {
            assert_eq!(at, Some(1), "{origin}");
        }
    }
}
