//! What fdaudit hands to scripts and CI: where records go (`-o`, never CMD's stdout), the
//! records themselves (schema, lossless strings), exit codes, bad input and closed output.
//! Tests that load eBPF are `#[ignore = "needs root and BTF"]` (`.ci/run` runs them as root).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use fdaudit_tests::{b64, fdaudit, guard, of_type, records, require_root, temp_path};
use serde_json::Value;

/// The root tests load programs: one at a time.
fn run(args: &[&str]) -> Output {
    Command::new(fdaudit())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exactly one line, an `error:` one.
fn assert_one_error_line(o: &Output, contains: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(contains), "{contains:?} in {err}");
}

/// A `-o` file's records, removed afterwards.
fn file_records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    let _ = std::fs::remove_file(path);
    records(&text)
}

#[test]
fn duration_must_be_finite_and_positive_before_anything_starts() {
    for bad in ["inf", "0", "nan", "-1", "1e308", "-0", "soon"] {
        let o = run(&["trace", &format!("--duration={bad}"), "--", "true"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--duration {bad}: {err}");
        assert!(err.contains("--duration"), "{err}");
        assert!(!err.contains("tracing"), "started anyway: {err}");
    }
}

/// The PIDs /proc shows (this PID namespace's).
fn visible_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

#[test]
fn kernel_thread_pid_is_an_error() {
    // Any kernel thread will do (kthreadd is PID 2 outside a PID namespace).
    let pids = visible_pids();
    let kthread = pids.iter().copied().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, r)| r.split(' ').nth(6)?.parse::<u64>().ok())
                .is_some_and(|f| f & 0x0020_0000 != 0)
        })
    });
    match kthread {
        Some(pid) => {
            // Each command says why in its own terms (a kernel thread neither spawns nor
            // has fds of its own).
            for (cmd, why) in [
                ("trace", "is a kernel thread: it never spawns programs"),
                (
                    "unclosed",
                    "is a kernel thread: it has no fd table of its own",
                ),
            ] {
                let o = run(&[cmd, "-p", &pid.to_string()]);
                assert_one_error_line(&o, why);
            }
        }
        None => no_kernel_thread_is_no_process(&pids),
    }
}

#[test]
fn tracing_fdaudit_itself_is_an_error() {
    // The shell's PID is fdaudit's once it execs it.
    let o = Command::new("sh")
        .args(["-c", "exec \"$0\" trace -p $$"])
        .arg(fdaudit())
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    assert_one_error_line(&o, "is this fdaudit itself");
}

/// No kernel thread in /proc: kernel threads belong to the initial PID namespace only, so
/// this must be a nested one, where a kernel thread's PID names no process.
fn no_kernel_thread_is_no_process(pids: &[u32]) {
    // The initial PID namespace has a fixed inode number (PROC_PID_INIT_INO).
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        ns.to_str(),
        Some("pid:[4026531836]"),
        "no kernel thread in /proc, yet this is the initial PID namespace"
    );
    // No process can have pid_max itself (PIDs are below it). Not the first free PID: the
    // fdaudit this test starts may be given it, and would then trace itself.
    let absent: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("pid_max is a number");
    assert!(!pids.contains(&absent));
    let o = run(&["trace", "-p", &absent.to_string()]);
    assert_one_error_line(&o, &format!("no process with PID {absent}"));
}

#[test]
fn scan_input_errors_exit_2_with_one_line() {
    assert_one_error_line(
        &run(&["scan", "-p", "999999999"]),
        "no process with PID 999999999",
    );
    let dir = temp_path("not-a-procfs");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let o = run(&["scan", dir.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_one_error_line(&o, "is not a procfs");
    assert_one_error_line(&run(&["scan", "/nonexistent-procfs"]), "not a directory");
    assert_one_error_line(
        &run(&["scan", "--json", "-p", "999999999"]),
        "no process with PID",
    );
}

#[test]
#[ignore = "needs root: drops to nobody to scan root's process"]
fn scan_of_an_unreadable_pid_exits_2() {
    require_root();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(fdaudit())
        .args(["scan", "-p", "1", "--fail-on", "low"])
        .output()
        .expect("run setpriv");
    assert_one_error_line(&o, "cannot read the fds of PID 1");
}

#[test]
fn error_messages_escape_control_and_bidi_characters() {
    let o = run(&["scan", "/tmp/\x1b[31mred\u{202e}txt"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        !err.contains('\x1b') && !err.contains('\u{202e}'),
        "{err:?}"
    );
    assert!(err.contains("\\u{1b}[31mred\\u{202e}txt"), "{err}");
}

/// `sh -c 'exec "$0" ARGS >&-'`: fdaudit with its stdout closed.
fn with_closed_stdout(args: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$0\" {args} >&-"))
        .arg(fdaudit())
        .output()
        .expect("run sh")
}

/// A reader that went away (`fdaudit scan | head`): nothing on stderr, status 141, as a
/// shell reports for a program SIGPIPE ended. The pipe's read end is closed before fdaudit
/// starts, so its first write fails with EPIPE.
#[test]
fn a_pipe_with_no_reader_exits_141_quietly() {
    use std::os::fd::FromRawFd as _;
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    for args in [
        vec!["scan", fixture],
        vec!["scan", fixture, "--json"],
        vec!["doctor", "--json"],
    ] {
        let mut fds = [0i32; 2];
        // SAFETY: pipe fills the array; the read end is closed at once, the write end
        // given to the child and owned by the Stdio.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        unsafe { libc::close(fds[0]) };
        let w = unsafe { std::process::Stdio::from_raw_fd(fds[1]) };
        let o = Command::new(fdaudit())
            .args(&args)
            .stdout(w)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("error"), "{args:?}: {}", stderr(&o));
    }
}

fn diff_fixtures() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/diff")
}

#[test]
fn closed_or_full_output_exits_2() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    for args in [
        format!("scan {fixture}"),
        format!("scan {fixture} --json"),
        "doctor".to_string(),
        "doctor --json".to_string(),
        format!("diff {d}/before.jsonl {d}/after.jsonl", d = diff_fixtures()),
        format!(
            "diff {d}/bench-a.jsonl {d}/bench-b.jsonl --json",
            d = diff_fixtures()
        ),
    ] {
        let o = with_closed_stdout(&args);
        assert_eq!(o.status.code(), Some(2), "{args} >&-: {}", stderr(&o));
        assert!(
            stderr(&o).contains("failed to write the"),
            "{args}: {}",
            stderr(&o)
        );
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let o = Command::new(fdaudit())
            .args(args.split(' '))
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args} >/dev/full: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("No space left"), "{}", stderr(&o));
    }
    let o = run(&["scan", fixture, "-o", "/dev/full"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn dash_o_writes_the_records_and_nothing_to_stdout() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    for (args, command) in [
        (vec!["scan", fixture, "--json"], "scan"),
        (vec!["doctor", "--json"], "doctor"),
    ] {
        let f = temp_path("o.jsonl");
        let mut all = args.clone();
        let fs = f.to_str().unwrap().to_string();
        all.extend(["-o", fs.as_str()]);
        let o = run(&all);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", stderr(&o));
        assert!(o.stdout.is_empty(), "stdout: {:?}", o.stdout);
        let recs = file_records(&f);
        assert_eq!(recs[0]["command"], command);
    }
    // Human output too.
    let f = temp_path("o.txt");
    let o = run(&["scan", fixture, "-o", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let text = std::fs::read_to_string(&f).unwrap();
    let _ = std::fs::remove_file(&f);
    assert!(text.contains("SEVERITY"), "{text}");
}

/// A child holding an inheritable writable regular file at NOFILE 20000.
struct Holder {
    child: std::process::Child,
    file: PathBuf,
}

impl Holder {
    fn start() -> Holder {
        let file = temp_path("held.log");
        std::fs::write(&file, b"").unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 20000 && exec 5>>\"$1\" && exec sleep 60")
            .arg("sh")
            .arg(&file)
            .spawn()
            .expect("start the holder");
        // Until it holds fd 5.
        let fd5 = format!("/proc/{}/fd/5", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_link(&fd5).map_or(true, |t| t != file) {
            assert!(
                std::time::Instant::now() < deadline,
                "holder never opened fd 5"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Holder { child, file }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

#[test]
fn scan_fail_on_gives_the_same_answer_under_load() {
    let h = Holder::start();
    let pid = h.child.id().to_string();
    // Killed when dropped, so a failing run cannot leave them spinning.
    struct Busy(Vec<std::process::Child>);
    impl Drop for Busy {
        fn drop(&mut self) {
            for b in &mut self.0 {
                let _ = b.kill();
                let _ = b.wait();
            }
        }
    }
    let busy = Busy(
        (0..2)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .expect("start a busy loop")
            })
            .collect(),
    );
    let mut codes = Vec::new();
    for _ in 0..10 {
        for level in ["high", "medium"] {
            let o = run(&["scan", "-p", &pid, "--only-findings", "--fail-on", level]);
            codes.push((level, o.status.code()));
        }
    }
    drop(busy);
    // NOFILE 20000 at the 250 ns model costs 5 ms: medium, as is the writable file.
    for (level, code) in &codes {
        let want = if *level == "high" { 0 } else { 3 };
        assert_eq!(*code, Some(want), "--fail-on {level}: {codes:?}");
    }
    // --close-cost-ns moves the rating: 20000 x 1000 ns = 20 ms is high.
    let o = run(&[
        "scan",
        "-p",
        &pid,
        "--fail-on",
        "high",
        "--close-cost-ns",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(&["scan", "-p", &pid, "--json", "--close-cost-ns", "1000"]);
    let recs = records(&String::from_utf8_lossy(&o.stdout));
    let s = recs.last().unwrap();
    assert_eq!(
        (s["close_cost_ns"].as_u64(), s["worst"].as_str()),
        (Some(1000), Some("high"))
    );
}

// ---- trace (root) ----

#[test]
#[ignore = "needs root and BTF"]
fn trace_leaves_the_commands_stdout_alone() {
    let _g = guard();
    let o = run(&["trace", "--json", "--", "/bin/echo", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(o.stdout, b"hello\n", "stdout is exactly the command's");
    // Without -o the records are on stderr: every line JSON, header first, summary last.
    let recs = records(&stderr(&o));
    assert_eq!(recs.last().unwrap()["type"], "summary");

    let f = temp_path("echo.jsonl");
    let o = run(&[
        "trace",
        "--json",
        "-o",
        f.to_str().unwrap(),
        "--",
        "/bin/echo",
        "hello",
    ]);
    assert_eq!(o.stdout, b"hello\n");
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    let recs = file_records(&f);
    assert_eq!(recs[0]["type"], "header");
    assert_eq!(recs[0]["command"], "trace");
    let last = recs.last().unwrap();
    assert_eq!(last["type"], "summary");
    assert_eq!(
        (
            &last["command_status"],
            &last["exit_code"],
            &last["exit_reason"]
        ),
        (&Value::from(0), &Value::from(0), &Value::from("command"))
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn leaked_names_round_trip_exactly_and_argv_keeps_empty_elements() {
    let _g = guard();
    let dir = temp_path("names");
    std::fs::create_dir_all(&dir).unwrap();
    let evil = dir.join("x\x1b[31m\nFAKE");
    let mut raw = dir.as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/\xff\xfe");
    let bytes_name = PathBuf::from(OsStr::from_bytes(&raw));
    std::fs::write(&evil, b"").unwrap();
    std::fs::write(&bytes_name, b"").unwrap();
    let script = r#"exec 7<"$1" 8<"$2"; /bin/true "" x; true"#;
    let f = temp_path("names.jsonl");
    let o = Command::new(fdaudit())
        .args(["trace", "--json", "-o"])
        .arg(&f)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(&evil)
        .arg(&bytes_name)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let recs = file_records(&f);
    let spawn = of_type(&recs, "spawn")
        .into_iter()
        .find(|s| s["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("{recs:?}"))
        .clone();
    assert_eq!(spawn["argv"], serde_json::json!(["/bin/true", "", "x"]));
    let target = |fd: u64| -> Vec<u8> {
        let f = spawn["leaked_fds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["fd"] == fd)
            .unwrap_or_else(|| panic!("fd {fd} in {spawn}"));
        match f.get("target_b64") {
            Some(b) => b64(b.as_str().unwrap()),
            None => f["target"].as_str().unwrap().as_bytes().to_vec(),
        }
    };
    assert_eq!(target(7), evil.as_os_str().as_bytes());
    assert_eq!(target(8), raw);
    // The ESC and newline are real characters in JSON, not a pre-escaped form.
    let line = serde_json::to_string(&spawn).unwrap();
    assert!(line.contains(r"x\u001b[31m\nFAKE"), "{line}");

    // For people the same names are escaped: no raw ESC or newline reaches the terminal.
    let o = Command::new(fdaudit())
        .args(["trace", "--", "sh", "-c", script, "sh"])
        .arg(&evil)
        .arg(&bytes_name)
        .output()
        .unwrap();
    let err = stderr(&o);
    let line = err
        .lines()
        .find(|l| l.contains("-> ") && l.contains("/bin/true"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(!line.contains('\x1b'), "{line:?}");
    assert!(line.contains(r"x\u{1b}[31m\nFAKE"), "{line}");
    assert!(line.contains(r"\xff\xfe"), "{line}");
    assert!(line.contains("('' x)"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs fdaudit with fd 9 open (not close-on-exec), as a CI runner or a shell might hand it,
/// and no other fd above 2 (whatever the test harness inherited is closed).
fn trace_with_inherited_fd(args: &[&str]) -> Output {
    let extra = std::fs::File::open("/etc/hostname").expect("/etc/hostname");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&extra);
    let mut cmd = Command::new(fdaudit());
    cmd.args(args).stdin(Stdio::null());
    // SAFETY: dup2 and fcntl are async-signal-safe; fd 9 is left without close-on-exec
    // (dup2 of fd 9 onto itself would keep the flag File::open set: clear it then).
    unsafe {
        cmd.pre_exec(move || {
            let r = if fd == 9 {
                libc::fcntl(9, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 9)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for other in (3..4096).filter(|&f| f != 9) {
                libc::close(other);
            }
            Ok(())
        });
    }
    cmd.output().expect("run fdaudit")
}

#[test]
#[ignore = "needs root and BTF"]
fn fail_on_leak_ignores_what_fdaudits_caller_passed() {
    let _g = guard();
    let code = |args: &[&str]| {
        let o = trace_with_inherited_fd(args);
        (o.status.code(), stderr(&o))
    };
    let (c, e) = code(&["trace", "--fail-on-leak", "--", "/bin/true"]);
    assert_eq!(c, Some(0), "{e}");
    // sh exec's /bin/true with fd 9 still open: inherited, not a leak of the command's.
    let (c, e) = code(&[
        "trace",
        "--fail-on-leak",
        "--",
        "sh",
        "-c",
        "/bin/true; true",
    ]);
    assert_eq!(c, Some(0), "{e}");
    assert!(
        e.contains("inherited 1 fd from fdaudit's caller: 9=/etc/hostname"),
        "the baseline note: {e}"
    );
    let (c, e) = code(&[
        "trace",
        "--fail-on-leak",
        "--",
        "sh",
        "-c",
        "exec 7</etc/hostname; /bin/true",
    ]);
    assert_eq!(c, Some(3), "{e}");
    // --no-baseline counts fd 9; --ignore-fd forgives it again.
    let (c, e) = code(&[
        "trace",
        "--fail-on-leak",
        "--no-baseline",
        "--",
        "sh",
        "-c",
        "/bin/true; true",
    ]);
    assert_eq!(c, Some(3), "{e}");
    let (c, e) = code(&[
        "trace",
        "--fail-on-leak",
        "--no-baseline",
        "--ignore-fd",
        "9",
        "--",
        "sh",
        "-c",
        "/bin/true; true",
    ]);
    assert_eq!(c, Some(0), "{e}");
    // The command's own failure wins over the leak verdict, and the summary says which.
    // `trace --json --fail-on-leak -o FILE -- sh -c SCRIPT` with fd 9 inherited: the run
    // and FILE's summary record.
    let fail_on_leak = |script: &str| {
        let f = temp_path("leak.jsonl");
        let args = ["trace", "--json", "--fail-on-leak", "-o"];
        let o = trace_with_inherited_fd(
            &[&args[..], &[f.to_str().unwrap(), "--", "sh", "-c", script]].concat(),
        );
        let summary = file_records(&f).pop().unwrap();
        (o, summary)
    };
    let (o, s) = fail_on_leak("exec 7</etc/hostname; /bin/true; exit 4");
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert_eq!(
        (
            &s["exit_reason"],
            &s["command_status"],
            &s["totals"]["spawns_with_new_leaks"]
        ),
        (&Value::from("command"), &Value::from(4), &Value::from(1)),
        "{s}"
    );
    let (o, s) = fail_on_leak("exec 7</etc/hostname; /bin/true");
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        (&s["exit_reason"], &s["exit_code"]),
        (&Value::from("leak"), &Value::from(3))
    );
    assert_eq!(s["inherited_fds"][0]["fd"], 9, "{s}");
}

/// What the traced command inherited and passes on is split from its own leaks on the
/// spawn line, in the headline, the totals, the groups and the JSON records, so they all
/// agree with --fail-on-leak; --no-baseline counts everything, everywhere.
#[test]
#[ignore = "needs root and BTF"]
fn inherited_fds_are_apart_from_new_leaks_everywhere() {
    let _g = guard();
    let script = "/bin/true; exec 7</etc/passwd; /bin/true; true";
    let o = trace_with_inherited_fd(&["trace", "--fail-on-leak", "--", "sh", "-c", script]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| l.contains("] -> ")).collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0].contains("inherited 1: 9") && !lines[0].contains("LEAKED"),
        "{e}"
    );
    assert!(
        lines[1].contains("LEAKED 1: 7 regular /etc/passwd")
            && lines[1].contains("inherited 1: 9")
            && !lines[1].contains("/etc/hostname"),
        "{e}"
    );
    assert!(
        e.contains("2 spawns traced, 1 with leaked fds (1 fd)"),
        "{e}"
    );
    assert!(
        e.contains("(2 more fds the traced command itself inherited"),
        "{e}"
    );
    // JSON: the fd is marked, totals and groups count it apart.
    let f = temp_path("inherited.jsonl");
    let o = trace_with_inherited_fd(&[
        "trace",
        "--json",
        "-o",
        f.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = file_records(&f);
    let spawns: Vec<&Value> = recs.iter().filter(|r| r["type"] == "spawn").collect();
    assert_eq!(spawns.len(), 2);
    let fd9 = |s: &Value| {
        s["leaked_fds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["fd"] == 9)
            .cloned()
            .unwrap()
    };
    assert_eq!(fd9(spawns[0])["inherited"], true, "{}", spawns[0]);
    assert_eq!(fd9(spawns[1])["inherited"], true);
    let fd7 = spawns[1]["leaked_fds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fd"] == 7);
    assert_eq!(fd7.unwrap().get("inherited"), None, "{}", spawns[1]);
    let s = recs.last().unwrap();
    let t = &s["totals"];
    assert_eq!(
        (
            &t["leaked_fd_count"],
            &t["leaked_inherited_fd_count"],
            &t["spawns_with_leaks"]
        ),
        (&Value::from(1), &Value::from(2), &Value::from(1)),
        "{s}"
    );
    let groups = s["groups"].as_array().unwrap();
    let sum = |k: &str| groups.iter().map(|g| g[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (sum("leaked_fd_count"), sum("leaked_inherited_fd_count")),
        (1, 2),
        "{s}"
    );
    // --no-baseline: everything is a leak, nothing is marked.
    let o = trace_with_inherited_fd(&[
        "trace",
        "--no-baseline",
        "--",
        "sh",
        "-c",
        "/bin/true; true",
    ]);
    let e = stderr(&o);
    assert!(e.contains("LEAKED 1: 9 regular /etc/hostname"), "{e}");
    assert!(
        e.contains("1 with leaked fds (1 fd)") && !e.contains("inherited 1: 9"),
        "{e}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn duration_end_detaches_and_waits_for_the_command() {
    let _g = guard();
    let f = temp_path("dur.jsonl");
    let t = std::time::Instant::now();
    let o = run(&[
        "trace",
        "--json",
        "-o",
        f.to_str().unwrap(),
        "--duration",
        "0.5",
        "--",
        "sh",
        "-c",
        "sleep 2; exit 5",
    ]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        t.elapsed() >= std::time::Duration::from_secs(2),
        "waited for the command"
    );
    let recs = file_records(&f);
    assert!(
        of_type(&recs, "note").iter().any(|n| n["message"]
            .as_str()
            .unwrap()
            .contains("--duration ended: probes detached")),
        "{recs:?}"
    );
    let s = recs.last().unwrap();
    assert_eq!(
        (&s["command_status"], &s["exit_code"]),
        (&Value::from(5), &Value::from(5))
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn pid_of_a_zombie_or_a_thread_gets_a_warning() {
    let _g = guard();
    // A zombie: a child that exited and that we do not reap until the end.
    let mut z = Command::new("true").spawn().unwrap();
    let stat = format!("/proc/{}/stat", z.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z ")) {
        assert!(std::time::Instant::now() < deadline, "no zombie");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = run(&["trace", "--duration", "0.2", "-p", &z.id().to_string()]);
    let _ = z.wait();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: PID") && err.contains("is a zombie"),
        "{err}"
    );

    // A thread id that is not its process's leader: this test process has several.
    let me = std::process::id();
    let handle = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2)));
    let tid = std::fs::read_dir(format!("/proc/{me}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&t| t != me)
        .expect("a second thread");
    let o = run(&["trace", "--duration", "0.2", "-p", &tid.to_string()]);
    handle.join().unwrap();
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "warning: PID {tid} is a thread of process {me}: tracing process {me}"
        )),
        "{err}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn a_failed_exec_shows_its_path_and_errno() {
    let _g = guard();
    let script = "/nonexistent/cmd; true";
    let f = temp_path("failed.jsonl");
    let o = run(&[
        "trace",
        "--json",
        "-o",
        f.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let recs = file_records(&f);
    let failed: Vec<&Value> = of_type(&recs, "spawn")
        .into_iter()
        .filter(|s| s["exec_ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{recs:?}");
    let s = failed[0];
    assert_eq!(
        (&s["exec_errno"], &s["exec_error"], &s["exec_path"]),
        (
            &Value::from(2),
            &Value::from("ENOENT"),
            &Value::from("/nonexistent/cmd")
        ),
        "{s}"
    );
    let o = run(&["trace", "--", "sh", "-c", script]);
    let err = stderr(&o);
    assert!(
        err.contains("EXEC FAILED /nonexistent/cmd: ENOENT (1 attempt), exited"),
        "{err}"
    );
}

/// JSON targets are never shortened without a flag: in runs where the last /bin/true
/// outlives its shell (bash execs the last command), the stdio targets are still whole
/// (fdaudit's own stdio names them), and a target that is not whole carries path_partial.
#[test]
#[ignore = "needs root and BTF"]
fn json_stdio_targets_are_whole_or_flagged() {
    let _g = guard();
    let out_path = temp_path("tr.stdout");
    for round in 0..8 {
        let f = temp_path("stdio.jsonl");
        let o = Command::new(fdaudit())
            .args(["trace", "--json", "-o"])
            .arg(&f)
            .args([
                "--",
                "bash",
                "-c",
                "exec 7</etc/hostname; /bin/true; /bin/true",
            ])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let recs = file_records(&f);
        let spawns: Vec<&Value> = recs.iter().filter(|r| r["type"] == "spawn").collect();
        assert_eq!(spawns.len(), 2, "round {round}: {recs:?}");
        for s in spawns {
            let partial = s["flags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "path_partial");
            for io in s["stdio"].as_array().unwrap() {
                let t = io["target"].as_str().unwrap();
                assert!(
                    !t.contains('…') || partial,
                    "round {round}: {t} without path_partial: {s}"
                );
                if io["fd"] == 1 {
                    assert_eq!(t, out_path.to_str().unwrap(), "round {round}: {s}");
                }
            }
        }
    }
    let _ = std::fs::remove_file(&out_path);
}
