//! A 32-bit (ia32) program's syscalls are invisible to the native-only `tp` backend (the
//! kernel's native syscall tracepoints skip compat syscalls): its spawns are flagged
//! `ia32_unseen`, strategy `unknown`, never a silent "none, 0 closes"; `raw-tp` counts them.
//! Root only; gcc builds the static `-m32 -nostdlib` fixture (no multilib needed).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use fdaudit_tests::{fdaudit, temp_path};
use serde_json::Value;

/// Forks; the child closes fds 3..1023 one by one (ia32 close, 6) and execs /bin/true
/// (execve, 11); the parent waits (waitpid, 7) and exits (1). Every call is `int $0x80`.
const FIXTURE: &str = r#"
static int sys1(int nr, int a) {
    int r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a) : "memory");
    return r;
}
static int sys3(int nr, int a, int b, int c) {
    int r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return r;
}
void _start(void) {
    static char path[] = "/bin/true";
    static char *argv[] = { path, 0 };
    static char *envp[] = { 0 };
    int pid = sys1(2, 0);
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++) sys1(6, fd);
        sys3(11, (int)path, (int)argv, (int)envp);
        sys1(1, 127);
    }
    int st = 0;
    sys3(7, pid, (int)&st, 0);
    sys1(1, 0);
}
"#;

fn build() -> PathBuf {
    let src = temp_path("ia32-spawn.c");
    let exe = temp_path("ia32-spawn");
    std::fs::write(&src, FIXTURE).expect("write the fixture");
    let st = Command::new("gcc")
        .args(["-m32", "-static", "-nostdlib", "-ffreestanding", "-fno-pic"])
        .args(["-fno-stack-protector", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is installed by .ci/setup");
    assert!(st.success(), "gcc -m32: {st}");
    let _ = std::fs::remove_file(&src);
    exe
}

/// The /bin/true spawn of a trace of `exe` with `backend`, and the text run's line for it.
fn traced(exe: &str, backend: &str) -> (Value, String) {
    let (spawns, _, out) = common::trace(&["--backend", backend], &[exe]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spawn = spawns
        .into_iter()
        .find(|s| s["exec_path"] == "/bin/true")
        .expect("the /bin/true spawn");
    let out = Command::new(fdaudit())
        .args(["trace", "--backend", backend, "--", exe])
        .output()
        .expect("run fdaudit trace");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(" /bin/true "))
        .unwrap_or_else(|| panic!("no line: {text}"))
        .to_string();
    (spawn, line)
}

fn flags(s: &Value) -> Vec<&str> {
    s["flags"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect())
}

#[test]
#[ignore = "needs root and BTF"]
fn an_ia32_spawn_under_tp_is_flagged_not_a_silent_zero() {
    let _g = common::guard();
    let exe = build();
    let exe_s = exe.to_str().expect("utf-8 temp path").to_string();
    let runs = Command::new(&exe).status();
    if let Err(e) = &runs {
        // No ia32 emulation here: the kernel refuses the image (ENOEXEC), and there is
        // nothing 32-bit for a backend to miss.
        assert_eq!(e.raw_os_error(), Some(libc::ENOEXEC), "{e}");
        let _ = std::fs::remove_file(&exe);
        return;
    }
    assert!(runs.unwrap().success(), "the fixture runs");
    let (tp, tp_line) = traced(&exe_s, "tp");
    let (raw, _) = traced(&exe_s, "raw-tp");
    let _ = std::fs::remove_file(&exe);
    assert!(flags(&tp).contains(&"ia32_unseen"), "{tp}");
    assert_eq!(tp["strategy"], "unknown", "{tp}");
    assert!(
        tp_line.contains("[ia32_unseen]") && tp_line.contains("unknown"),
        "{tp_line}"
    );
    // raw-tp sees the 1021 ia32 closes: a close loop, flagged compat_syscalls, not unseen.
    assert_eq!(raw["close_calls"], 1021, "{raw}");
    assert!(!flags(&raw).contains(&"ia32_unseen"), "{raw}");
}
