//! `fdaudit scan`'s NOFILE findings fold to one per program and limit (issue #43: 118
//! findings on a quiet machine, one per process): in `--json` (with the pids it stands for),
//! in the summary's count, for `--fail-on` and in the text. Live processes with limits set
//! here below the caller's hard limit (raising it would need CAP_SYS_RESOURCE, which a
//! container's root may lack); no root needed.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use fdaudit_tests::{fdaudit, of_type, records};
use serde_json::Value;

/// Children killed when the test ends, passed or not.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `program` (a sleep) with NOFILE `limit` (soft and hard).
fn start(program: &Path, limit: u64) -> Child {
    let mut cmd = Command::new(program);
    cmd.arg("300")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "failed to start {} with NOFILE {limit} (is the hard limit lower? run as root): {e}",
            program.display()
        )
    })
}

fn nofile_findings(lines: &[Value]) -> Vec<&Value> {
    of_type(lines, "finding")
        .into_iter()
        .filter(|f| f["rule"] == "nofile_limit")
        .collect()
}

#[test]
fn nofile_findings_fold_to_one_per_program_and_limit() {
    // Two programs: sleep, and sleep under another name (a symlink: comm is its name).
    let dir = tempfile_dir();
    let napper = dir.join("napper");
    std::os::unix::fs::symlink("/bin/sleep", &napper).expect("symlink napper");
    let sleep = Path::new("/bin/sleep");
    // Two limits at most the hard limit; rated at 1000 ns per close() (--close-cost-ns) so
    // that any limit from 1000 up is a finding.
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    let (one, other) = (hard.rlim_max.min(20000), hard.rlim_max.min(20000) - 7);
    assert!(
        other >= 1000,
        "the hard NOFILE limit {} is too low",
        hard.rlim_max
    );
    let mut kids = Kids(Vec::new());
    for _ in 0..5 {
        kids.0.push(start(sleep, one));
    }
    kids.0.push(start(sleep, other));
    for _ in 0..2 {
        kids.0.push(start(&napper, one));
    }
    let pid = |i: usize| kids.0[i].id();
    let mut args = vec![
        "scan".to_string(),
        "--json".into(),
        "--close-cost-ns".into(),
        "1000".into(),
    ];
    for i in 0..kids.0.len() {
        args.extend(["-p".to_string(), pid(i).to_string()]);
    }
    // comm is set at exec: wait until every child has exec'd sleep.
    for i in 0..kids.0.len() {
        let comm = format!("/proc/{}/comm", pid(i));
        let want = if i < 6 { "sleep\n" } else { "napper\n" };
        let t = std::time::Instant::now();
        while std::fs::read_to_string(&comm).ok().as_deref() != Some(want) {
            assert!(t.elapsed().as_secs() < 10, "{comm} never read {want:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let out = Command::new(fdaudit())
        .args(&args)
        .args(["--fail-on", "medium"])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit scan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "--fail-on medium is met: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = records(&text);
    let nofile = nofile_findings(&lines);
    let mut got: Vec<(String, Vec<u64>, u64, u64, String)> = nofile
        .iter()
        .map(|f| {
            (
                f["comm"].as_str().unwrap_or_default().to_owned(),
                f["pids"]
                    .as_array()
                    .unwrap_or_else(|| panic!("a NOFILE finding has pids: {f}"))
                    .iter()
                    .map(|p| p.as_u64().expect("a pid"))
                    .collect(),
                f["processes"].as_u64().expect("processes"),
                f["pid"].as_u64().expect("pid"),
                f["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    got.sort();
    let mut five: Vec<u64> = (0..5).map(|i| u64::from(pid(i))).collect();
    five.sort_unstable();
    let mut two: Vec<u64> = (6..8).map(|i| u64::from(pid(i))).collect();
    two.sort_unstable();
    assert_eq!(got.len(), 3, "one per program and limit: {nofile:#?}");
    assert_eq!((&got[0].0[..], &got[0].1, got[0].2), ("napper", &two, 2));
    let (a, b) = (&got[1], &got[2]);
    let (at_one, at_other) = if a.4.contains(&format!("limit {one}:")) {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!((&at_one.0[..], &at_one.1, at_one.2), ("sleep", &five, 5));
    assert_eq!(at_one.3, five[0], "pid is the lowest of pids");
    assert_eq!(
        (&at_other.0[..], &at_other.1[..], at_other.2),
        ("sleep", &[u64::from(pid(5))][..], 1),
        "another limit is another finding"
    );
    let findings = of_type(&lines, "finding").len() as u64;
    let summary = of_type(&lines, "summary");
    assert_eq!(
        summary[0]["findings"].as_u64(),
        Some(findings),
        "the summary counts the folded findings: {summary:?}"
    );

    // Text: one line for the five, with their count; the verdict counts 3, not 8.
    let out = Command::new(fdaudit())
        .args(&args[..1])
        .args(&args[2..])
        .args(["--fail-on", "medium", "--only-findings"])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit scan");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("NOFILE")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines.iter().any(|l| l.contains("(5 processes: pids ")),
        "{text}"
    );
    assert!(
        err.contains("3 findings at or above it"),
        "the verdict counts folded findings: {err}"
    );
    drop(kids);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory for the symlink (the test removes it when it passes).
fn tempfile_dir() -> std::path::PathBuf {
    let d = fdaudit_tests::temp_path("scan-fold");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the test directory");
    d
}
