//! `-o FILE` where the file is hostile: a FIFO nobody reads (an error at once, not a hang
//! before anything starts) and a file system that fills up while a command is traced (the
//! file keeps whole records and the command is waited for, not orphaned). A real FIFO and a
//! real, small tmpfs.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{fdaudit, guard, require_root, temp_path};

/// How long [`run_bounded`] lets fdaudit run: a hang is a failure, not a stuck suite, and an
/// emulated 5.10 guest on a busy host takes its 300-spawn trace past 20 s.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Runs fdaudit with `args`; fails the test, fdaudit killed, if it runs past [`RUN_LIMIT`].
fn run_bounded(args: &[&str]) -> (Output, Duration) {
    // Before the clock: the first call in a test process builds fdaudit.
    let exe = fdaudit();
    let t0 = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fdaudit");
    if !ends_within_limit(&mut child, t0) {
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        panic!("{args:?} still ran after {RUN_LIMIT:?}: {}", stderr(&o));
    }
    (child.wait_with_output().unwrap(), t0.elapsed())
}

/// Whether `child`, started at `t0`, exits before [`RUN_LIMIT`] has passed since.
fn ends_within_limit(child: &mut Child, t0: Instant) -> bool {
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > RUN_LIMIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_fifo_nobody_reads_is_an_error_at_once() {
    let fifo = temp_path("no-reader.fifo");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    let f = fifo.to_str().unwrap();
    for args in [
        vec!["scan", fixture, "-o", f],
        vec!["trace", "-o", f, "--", "/bin/true"],
        vec!["doctor", "-o", f],
        vec!["unclosed", "--folded", f, "--", "/bin/true"],
        vec!["unclosed", "--pprof", f, "--", "/bin/true"],
    ] {
        let (o, took) = run_bounded(&args);
        let err = stderr(&o);
        assert!(took < Duration::from_secs(10), "{args:?} hung: {err}");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains("nothing reads it: start the reader first"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_file(&fifo);
}

/// `unclosed`'s exports, rewritten at each report, are created before the command starts: a
/// path that cannot be made fails at once in one line (the run's report is not lost at its
/// end), and a negative number of seconds gets run()'s message, not clap's usage.
#[test]
fn unclosed_s_bad_exports_and_seconds_fail_before_the_command_starts() {
    let marker = temp_path("ran");
    let touch = format!("touch {}", marker.display());
    for args in [
        vec!["--folded", "/nonexistent/fdaudit/x.folded"],
        vec!["--pprof", "/nonexistent/fdaudit/x.pb.gz"],
        vec!["--min-age", "-1"],
        vec!["--interval", "-2"],
    ] {
        let mut all = vec!["unclosed"];
        all.extend(&args);
        all.extend(["--", "sh", "-c", &touch]);
        let (o, _) = run_bounded(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        let said = match args[0] {
            "--min-age" => "error: --min-age -1: give a number of seconds, 0 or more".to_string(),
            "--interval" => "error: --interval -2: give a positive number of seconds".to_string(),
            flag => {
                format!(
                    "error: failed to create {}: No such file or directory",
                    args[1]
                ) + &format!(" (os error 2) ({flag})")
            }
        };
        assert_eq!(err.trim_end(), said, "{args:?}");
        assert!(!marker.exists(), "{args:?}: the command was started");
    }
}

/// A tmpfs of `kib` KiB at a fresh directory, unmounted on drop.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(kib: u32) -> SmallFs {
        let dir = temp_path("smallfs");
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount tmpfs at {}", dir.display());
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn a_full_file_system_keeps_whole_records_and_the_command_is_waited_for() {
    require_root();
    let _g = guard();
    let fs = SmallFs::mount(64);
    let out = fs.0.join("t.jsonl");
    let done = temp_path("cmd-done");
    let _ = std::fs::remove_file(&done);
    // 300 spawns write far more than 64 KiB of records; the command outlives the failure.
    let script = format!(
        "for i in $(seq 300); do /bin/true; done; sleep 1; echo done > {}",
        done.display()
    );
    let (o, _) = run_bounded(&[
        "trace",
        "--json",
        "-o",
        out.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        Path::new(&done).exists(),
        "fdaudit exited before the command finished: {err}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.len() > 4096, "records were written before it filled");
    assert!(
        text.ends_with('\n'),
        "the last record is cut: {:?}",
        &text[text.len() - 80..]
    );
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not a whole record ({e}): {line}"));
    }
    let _ = std::fs::remove_file(&done);
}

/// `trace --json -- CMD` writes its records to stderr; when that pipe's reader goes away
/// (`2>&1 >/dev/null | head -1`), tracing stops with the broken pipe's exit status (141, as
/// a shell reports a program SIGPIPE ended), not a panic's (101), and the command is waited
/// for, untraced, not orphaned.
#[test]
#[ignore = "needs root and BTF"]
fn records_on_stderr_whose_reader_is_gone_stop_tracing_without_a_panic() {
    use std::io::BufRead as _;
    require_root();
    let _g = guard();
    let done = temp_path("cmd-done");
    // The spawns come after the reader is gone: their records find the pipe closed.
    let script = format!(
        "sleep 1; for i in 1 2 3; do /bin/true; done; sleep 1; echo done > {}",
        done.display()
    );
    let exe = fdaudit();
    let t0 = Instant::now();
    let mut child = fdaudit_tests::StopOnDrop(
        Command::new(exe)
            .args(["trace", "--json", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run fdaudit"),
    );
    let mut first = String::new();
    std::io::BufReader::new(child.0.stderr.take().expect("piped stderr"))
        .read_line(&mut first)
        .expect("read the first record");
    assert!(first.contains("\"type\":\"header\""), "{first}");
    // The reader is gone (the BufReader and the pipe's read end were dropped above).
    assert!(ends_within_limit(&mut child.0, t0), "fdaudit did not end");
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{status}: 101 is a panic");
    assert!(done.exists(), "fdaudit exited before the command finished");
    let _ = std::fs::remove_file(&done);
}
