//! `fdaudit trace --origin`: a call site met again is not unwound again (the reader keeps
//! each process's last sites' stacks, `fdaudit::engine::stack_memo`), and that never
//! merges two sites: two opens in one function, whose frame-pointer walks are the same
//! where libc's wrapper has no frame pointer (only the words above the sp tell them apart),
//! each name their own line. Root only (eBPF); the C fixture is compiled with gcc (host
//! only: xtask/src/vm/build.rs).

use fdaudit_tests::records;
use serde_json::Value;

/// In one function: /etc/hostname opened 300 times on one line without O_CLOEXEC (the
/// last stays open: fd 3), then again on another line (fd 4); fork and exec. The same path
/// for both: Debian's open64 keeps the path in rbp, which the kernel's frame-pointer walk
/// then follows, so two paths would make two walks.
const FIXTURE: &str = r#"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char path[] = "/etc/hostname";

__attribute__((noinline)) int two_sites(int n) {
    int fd = -1;
    for (int i = 0; i < n; i++) {
        if (fd >= 0) close(fd);
        fd = open(path, O_RDONLY); /* LOOP */
    }
    int other = open(path, O_RDONLY); /* OTHER */
    return fd == 3 && other == 4 ? 0 : 1;
}

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd); /* what the test's runner passed on */
    if (two_sites(300) != 0) return 10;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

/// The fixture's line holding `marker`.
fn line_of(marker: &str) -> u64 {
    FIXTURE
        .lines()
        .position(|l| l.contains(marker))
        .expect("the marker's line") as u64
        + 1
}

/// The line of the frame of `two_sites` in the origin of leaked fd `fd`.
fn two_sites_line(spawn: &Value, fd: u64) -> u64 {
    let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
    let origin = &leaked
        .iter()
        .find(|l| l["fd"] == fd)
        .unwrap_or_else(|| panic!("fd {fd} did not leak: {leaked:?}"))["origin"];
    assert_eq!(origin["syscall"], "openat", "fd {fd}: {origin}");
    let frames = origin["stack"].as_array().expect("a stack");
    let frame = frames
        .iter()
        .find(|f| f["symbol"].as_str().unwrap_or("").starts_with("two_sites+"))
        .unwrap_or_else(|| panic!("fd {fd}: no frame names two_sites: {origin}"));
    frame["line"]
        .as_u64()
        .unwrap_or_else(|| panic!("fd {fd}: no line: {frame}"))
}

#[test]
#[ignore = "needs root and BTF"]
fn a_site_in_a_loop_and_another_in_the_same_function_each_name_their_line() {
    let _guard = fdaudit_tests::guard();
    let exe = fdaudit_tests::build_c_fixture("origin-sites", FIXTURE);
    let (out, text) = fdaudit_tests::trace_to_file("origin-sites.jsonl", |c| {
        c.args(["--origin", "--"]).arg(&exe);
    });
    let _ = std::fs::remove_file(&exe);
    fdaudit_tests::assert_success(&out);
    let recs = records(&text);
    let spawn = recs
        .iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    assert_eq!(two_sites_line(spawn, 3), line_of("/* LOOP */"), "fd 3");
    assert_eq!(two_sites_line(spawn, 4), line_of("/* OTHER */"), "fd 4");
}
