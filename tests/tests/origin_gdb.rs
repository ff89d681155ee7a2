//! `trace --origin`'s stacks against gdb as ground truth: the same program run under
//! `gdb -batch -ex 'break CALL' -ex run -ex bt` and under `fdaudit trace --origin` gives, for
//! every frame both show, the same return address (as module and file offset) and the same
//! function name. Programs built without frame pointers: a `-O2 -fomit-frame-pointer` C
//! program, Debian's /usr/bin/python3.11 and /usr/bin/perl. Root only (eBPF); host only
//! (gcc, gdb, Debian's interpreters: xtask/src/vm/build.rs leaves it out of the guests).
//!
//! Frames that differ, and why: gdb's frame 0 is the breakpoint at the wrapper's entry,
//! fdaudit's the instruction after the syscall in it (the same function: compared by module
//! only; their names differ too, gdb reading libc6-dbg's `__libc_open64` where fdaudit
//! reads `.dynsym`'s alias `__open`); gdb adds virtual frames for inlined calls (no address
//! in its `bt`: left out here) and stops at `main` (its "backtrace past-main" default);
//! fdaudit's stack goes on past it (to `_start`) or ends where its copy of the stack does
//! (`stack_partial`). A function
//! without a symbol in `.dynsym` (a static one of python3.11) is `??` to gdb and unnamed to
//! fdaudit: compared by address only.

use fdaudit_tests::{records, require_root};
use serde_json::Value;

/// One frame: its module's file name and the offset in it, and the function's name.
#[derive(Debug, Clone, PartialEq)]
struct At {
    module: String,
    offset: u64,
    name: Option<String>,
}

/// gdb's frames at the first stop of breakpoint `brk` in `argv`, virtual (inlined) frames
/// left out, each placed in its module by gdb's `info proc mappings`.
fn gdb_frames(brk: &str, argv: &[&str]) -> (Vec<At>, String) {
    let out = std::process::Command::new("gdb")
        .args(["-batch", "-nx", "-iex", "set debuginfod enabled off"])
        .args(["-ex", "set breakpoint pending on", "-ex", brk, "-ex", "run"])
        .args([
            "-ex",
            "bt",
            "-ex",
            "info proc mappings",
            "-ex",
            "kill",
            "--args",
        ])
        .args(argv)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("gdb is installed by .ci/setup");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // 0xSTART 0xEND 0xSIZE 0xOFFSET PERMS PATH
    let maps: Vec<(u64, u64, u64, String)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
            (f.len() >= 6 && f[5].starts_with('/'))
                .then(|| Some((hex(f[0])?, hex(f[1])?, hex(f[3])?, base(f[5]))))?
        })
        .collect();
    let mut frames = Vec::new();
    for l in text.lines().filter(|l| l.starts_with('#')) {
        // "#1  0x000055555555522d in open_config ()" (a real frame) or "#0  name (args) at
        // file:line" (frame 0, or a virtual frame of an inlined call when not first).
        let rest = l.split_once(' ').map_or("", |(_, r)| r).trim_start();
        let (addr, name) = match rest.split_once(" in ") {
            Some((a, n)) if a.starts_with("0x") => (u64::from_str_radix(&a[2..], 16).ok(), n),
            _ => (None, rest),
        };
        let name = name.split([' ', '(']).next().unwrap_or("");
        let name = (name != "??").then(|| name.to_string());
        match addr {
            Some(a) => {
                let m = maps.iter().find(|m| m.0 <= a && a < m.1);
                frames.push(At {
                    module: m.map_or_else(String::new, |m| m.3.clone()),
                    offset: m.map_or(0, |m| a - m.0 + m.2),
                    name,
                });
            }
            None if frames.is_empty() => frames.push(At {
                module: String::new(),
                offset: 0,
                name,
            }),
            None => {} // an inlined call's virtual frame
        }
    }
    (frames, text)
}

fn base(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// fdaudit's frames of `origin`.
fn our_frames(origin: &Value) -> Vec<At> {
    let stack = origin["stack"].as_array().expect("a stack");
    // The machine's frames only: a CPython's own frames (found_by python) come first and
    // gdb's bt has no counterpart for them.
    stack
        .iter()
        .filter(|f| f["found_by"] != "python")
        .map(|f| At {
            module: f["module"].as_str().map(base).unwrap_or_default(),
            offset: f["offset"].as_u64().unwrap_or(0),
            name: f["symbol"]
                .as_str()
                .map(|s| s.split('+').next().unwrap_or(s).to_string()),
        })
        .collect()
}

/// Checks that every frame of the program that both show (from the first outside libc:
/// gdb stops at the wrapper's entry, fdaudit at its syscall, which for fcntl is in an inner
/// function of libc's, one frame more) is the same return address and, where both name it,
/// the same function; returns how many were compared.
fn same_frames(ours: &[At], gdb: &[At], context: &str) -> usize {
    let outside = |f: &[At]| f.iter().skip(1).position(|a| a.module != "libc.so.6");
    let (Some(a0), Some(b0)) = (outside(ours), outside(gdb)) else {
        panic!("no frame outside libc: {context}");
    };
    let (ours, gdb) = (&ours[a0..], &gdb[b0..]);
    let n = ours.len().min(gdb.len());
    for i in 1..n {
        let (a, b) = (&ours[i], &gdb[i]);
        assert_eq!(
            (&a.module, a.offset),
            (&b.module, b.offset),
            "frame {i} differs: ours {a:?}, gdb's {b:?}\n{context}"
        );
        // (libc's by address only: gdb names them from libc6-dbg's symbols,
        // `__libc_start_main_impl`, fdaudit from `.dynsym`, `__libc_start_main`)
        if let (Some(x), Some(y), false) = (&a.name, &b.name, a.module == "libc.so.6") {
            assert_eq!(x, y, "frame {i} is named differently\n{context}");
        }
    }
    n - 1
}

/// The origin of the leaked `/etc/hostname` in the spawn of /bin/true of a trace of `argv`.
fn traced_origin(name: &str, argv: &[&str]) -> Value {
    let (out, text) = fdaudit_tests::trace_to_file(name, |c| {
        c.arg("--origin").arg("--").args(argv);
    });
    fdaudit_tests::assert_success(&out);
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
    leaked
        .iter()
        .find(|l| l["target"] == "/etc/hostname")
        .unwrap_or_else(|| panic!("/etc/hostname did not leak: {spawn}"))["origin"]
        .clone()
}

/// Runs both and compares; at least `want` frames past the first compared, and the
/// function `named` among them (by both).
fn check(name: &str, brk: &str, argv: &[&str], want: usize, named: &str) {
    let origin = traced_origin(name, argv);
    let (gdb, text) = gdb_frames(brk, argv);
    let ours = our_frames(&origin);
    let context = format!("ours: {ours:#?}\ngdb's: {gdb:#?}\ngdb said:\n{text}\norigin: {origin}");
    assert_eq!(ours[0].module, "libc.so.6", "{context}");
    let compared = same_frames(&ours, &gdb, &context);
    eprintln!("{name}: {compared} frames compared\n{context}");
    assert!(compared >= want, "{compared} frames compared\n{context}");
    assert!(
        ours.iter().any(|f| f.name.as_deref() == Some(named))
            && gdb.iter().any(|f| f.name.as_deref() == Some(named)),
        "{named} not among both's frames\n{context}"
    );
}

const FIXTURE_FP_LESS: &str = r#"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int open_config(const char *path) {
    int fd = open(path, O_RDONLY);
    return fd < 0 ? -1 : fd + 0 * path[0];
}
__attribute__((noinline)) int setup(int n) {
    int fd = open_config("/etc/hostname");
    return fd >= 0 ? fd + n : -1;
}

int main(int argc, char **argv) {
    (void)argv;
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (setup(argc - 1) < 0) return 10;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

#[test]
#[ignore = "needs root, gdb and gcc"]
fn an_o2_program_without_frame_pointers_has_gdb_s_frames() {
    require_root();
    let _g = fdaudit_tests::guard();
    let exe = fdaudit_tests::build_c_fixture_with(
        "origin-gdb-o2",
        FIXTURE_FP_LESS,
        &["-O2", "-fomit-frame-pointer"],
    );
    let path = exe.to_str().expect("utf-8").to_string();
    // open_config, setup, main: what gdb shows (it stops at main).
    check("origin-gdb-o2.jsonl", "break open64", &[&path], 3, "setup");
    let _ = std::fs::remove_file(&exe);
}

/// Five functions deep, each with a frame of 1.5 KiB (a volatile array, read after its
/// call: no tail call), none with a frame pointer: the origin record's 256 bytes of stack
/// hold only the innermost one's; the stack copy of the call site holds them all.
const FIXTURE_DEEP: &str = r#"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define FRAME 1500
__attribute__((noinline)) int open_config(const char *path, int n) {
    volatile char buf[FRAME];
    buf[n % FRAME] = 1;
    int fd = open(path, O_RDONLY);
    return fd < 0 ? -1 : fd + buf[(n * 7) % FRAME] * 0;
}
#define LEVEL(name, next) \
__attribute__((noinline)) int name(int n) { \
    volatile char buf[FRAME]; \
    buf[n % FRAME] = 1; \
    int fd = next; \
    return fd < 0 ? -1 : fd + buf[(n * 3) % FRAME] * 0; \
}
LEVEL(level4, open_config("/etc/hostname", n + 1))
LEVEL(level3, level4(n + 1))
LEVEL(level2, level3(n + 1))
LEVEL(level1, level2(n + 1))

int main(int argc, char **argv) {
    (void)argv;
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (level1(argc - 1) < 0) return 10;
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

#[test]
#[ignore = "needs root, gdb and gcc"]
fn a_deep_stack_without_frame_pointers_is_unwound_to_main_as_gdb_does() {
    require_root();
    let _g = fdaudit_tests::guard();
    let exe = fdaudit_tests::build_c_fixture_with(
        "origin-gdb-deep",
        FIXTURE_DEEP,
        &["-O2", "-fomit-frame-pointer"],
    );
    let path = exe.to_str().expect("utf-8").to_string();
    // open_config, level4 .. level1, main: what gdb shows (it stops at main); 7.5 KiB of
    // frames, which only the call site's stack copy holds.
    check(
        "origin-gdb-deep.jsonl",
        "break open64",
        &[&path],
        6,
        "level1",
    );
    let _ = std::fs::remove_file(&exe);
}

#[test]
#[ignore = "needs root and gcc"]
fn every_origin_of_a_call_site_gets_the_frames_its_copy_unwound() {
    require_root();
    let _g = fdaudit_tests::guard();
    // The same call path twice: the second call's site is known (its stack is not copied
    // again, or copied again if its registers differ); both fds leak.
    let twice = FIXTURE_DEEP.replace(
        "if (level1(argc - 1) < 0) return 10;",
        "if (level1(argc - 1) < 0 || level1(argc - 1) < 0) return 10;",
    );
    assert_ne!(twice, FIXTURE_DEEP, "the fixture's main changed");
    let exe = fdaudit_tests::build_c_fixture_with(
        "origin-deep-twice",
        &twice,
        &["-O2", "-fomit-frame-pointer"],
    );
    let (out, text) = fdaudit_tests::trace_to_file("origin-deep-twice.jsonl", |c| {
        c.arg("--origin").arg("--").arg(&exe);
    });
    fdaudit_tests::assert_success(&out);
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    let leaked: Vec<&Value> = spawn["leaked_fds"]
        .as_array()
        .expect("leaked_fds")
        .iter()
        .filter(|l| l["target"] == "/etc/hostname")
        .collect();
    assert_eq!(leaked.len(), 2, "{spawn}");
    for l in leaked {
        let names: Vec<String> = our_frames(&l["origin"])
            .into_iter()
            .filter_map(|f| f.name)
            .collect();
        for want in ["open_config", "level4", "level1", "main"] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from fd {}'s stack: {names:?}\n{spawn}",
                l["fd"]
            );
        }
    }
    let _ = std::fs::remove_file(&exe);
}

const LEAK_PY: &str = r#"
import os, subprocess
def make_key():
    fd = os.open("/etc/hostname", os.O_RDONLY)
    os.set_inheritable(fd, True)
    return fd
fd = make_key()
subprocess.run(["/bin/true"], close_fds=False)
"#;

#[test]
#[ignore = "needs root, gdb and Debian's python3.11"]
fn debian_python3_11_s_set_inheritable_has_gdb_s_frames() {
    require_root();
    let _g = fdaudit_tests::guard();
    let script = fdaudit_tests::temp_path("leak.py");
    std::fs::write(&script, LEAK_PY).expect("write the script");
    let script_s = script.to_str().expect("utf-8").to_string();
    let argv = ["/usr/bin/python3.11", script_s.as_str()];
    // ioctl(FIONCLEX) (0x5450) on the fd: os.set_inheritable.
    let origin = traced_origin("origin-gdb-py.jsonl", &argv);
    assert_eq!(origin["syscall"], "ioctl(FIONCLEX)", "{origin}");
    let brk = "break ioctl if $rsi == 0x5450";
    let (gdb, text) = gdb_frames(brk, &argv);
    let ours = our_frames(&origin);
    let context = format!("ours: {ours:#?}\ngdb's: {gdb:#?}\ngdb said:\n{text}\norigin: {origin}");
    // The interpreter's static functions (no .dynsym entry) are compared by address.
    let compared = same_frames(&ours, &gdb, &context);
    eprintln!("python3.11: {compared} frames compared\n{context}");
    // All of gdb's 17 frames (16 past the first), through the interpreter's frames of a
    // few hundred bytes each down to Py_RunMain, which only the call site's stack copy
    // holds; then libc's start and _start.
    assert!(compared >= 16, "{compared} frames compared\n{context}");
    let interpreter = ours[1..].iter().take_while(|f| f.module == "python3.11");
    assert!(
        interpreter
            .filter_map(|f| f.name.as_deref())
            .any(|n| n == "Py_RunMain"),
        "{context}"
    );
    assert_eq!(
        ours.last().and_then(|f| f.name.as_deref()),
        Some("_start"),
        "{context}"
    );
    let _ = std::fs::remove_file(&script);
}

const LEAK_PL: &str = r#"
use Fcntl;
sub make_key {
    open(my $fh, '<', '/etc/hostname') or die;
    fcntl($fh, F_SETFD, 0) or die;
    return $fh;
}
my $fh = make_key();
system("/bin/true");
"#;

#[test]
#[ignore = "needs root, gdb and Debian's perl"]
fn debian_perl_s_fcntl_has_gdb_s_frames() {
    require_root();
    let _g = fdaudit_tests::guard();
    let script = fdaudit_tests::temp_path("leak.pl");
    std::fs::write(&script, LEAK_PL).expect("write the script");
    let script_s = script.to_str().expect("utf-8").to_string();
    let argv = ["/usr/bin/perl", script_s.as_str()];
    // fcntl(fd >= 3, F_SETFD, 0): perl's own startup clears the flag of fd 0 first.
    let brk = "break fcntl64 if $rdi >= 3 && $rsi == 2 && $rdx == 0";
    // Perl_pp_ioctl, Perl_runops_standard, perl_run, main: all of gdb's frames.
    check("origin-gdb-perl.jsonl", brk, &argv, 4, "Perl_pp_ioctl");
    let _ = std::fs::remove_file(&script);
}
