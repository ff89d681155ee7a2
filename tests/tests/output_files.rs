//! `-o FILE` where the file is hostile: a FIFO nobody reads (an error at once, not a hang
//! before anything starts) and a file system that fills up while a command is traced (the
//! file keeps whole records and the command is waited for, not orphaned). A real FIFO and a
//! real, small tmpfs.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{fdaudit, guard, require_root, temp_path};

/// Runs fdaudit with `args`, killed after 20 s (a hang is a failure, not a stuck suite).
fn run_bounded(args: &[&str]) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(fdaudit())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fdaudit");
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    (child.wait_with_output().unwrap(), t0.elapsed())
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
