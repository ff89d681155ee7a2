//! What a CI job reads: `-q` prints only warnings and the verdict, the verdict names what
//! failed, allow-lists by path glob and kind, notes kept in `-o FILE`, `scan --fail-on`
//! saying why, and `scan --min-severity`.

use std::process::{Command, Output, Stdio};

use fdaudit_tests::{fdaudit, guard, temp_path};

fn run(args: &[&str]) -> Output {
    Command::new(fdaudit())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const LEAK: &[&str] = &["bash", "-c", "exec 7</etc/hostname; /bin/true; true"];

fn trace(extra: &[&str]) -> Output {
    let mut args = vec!["trace"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(LEAK);
    run(&args)
}

#[test]
#[ignore = "needs root and BTF"]
fn quiet_prints_only_the_verdict_which_names_pid_exec_fd_and_target() {
    let _g = guard();
    let o = trace(&["-q", "--fail-on-leak"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    let lines: Vec<&str> = e.lines().collect();
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("verdict: ") || l.starts_with("warning: ")),
        "-q printed more than warnings and the verdict:\n{e}"
    );
    let verdict = lines.last().copied().unwrap_or_default();
    assert!(
        verdict.starts_with("verdict: --fail-on-leak: 1 spawn leaked fds (exit status 3): pid ")
            && verdict.contains(" /bin/true: fd 7 regular /etc/hostname"),
        "{e}"
    );
    // Without -q the verdict is the last line too, after the summary.
    let o = trace(&["--fail-on-leak"]);
    let e = stderr(&o);
    assert!(e.contains("1 spawn traced") && e.contains("note: "), "{e}");
    assert!(
        e.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("verdict: "),
        "{e}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn allow_leak_by_glob_or_kind_and_fail_on_leak_kind() {
    let _g = guard();
    for (extra, want) in [
        (&["--allow-leak", "/etc/*"][..], 0),
        (&["--allow-leak", "regular"][..], 0),
        (&["--allow-leak", "/srv/*"][..], 3),
        (&["--allow-leak", "socket"][..], 3),
        (&["--fail-on-leak-kind", "socket"][..], 0),
        (&["--fail-on-leak-kind", "regular"][..], 3),
    ] {
        let args: Vec<&str> = ["-q", "--fail-on-leak"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let o = trace(&args);
        assert_eq!(o.status.code(), Some(want), "{extra:?}: {}", stderr(&o));
        if want == 0 {
            assert!(
                !stderr(&o).contains("verdict:"),
                "{extra:?}: {}",
                stderr(&o)
            );
        }
    }
    // A value that is neither a kind nor a path glob, and a kind that is none.
    let o = trace(&["--fail-on-leak", "--allow-leak", "sockets"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("neither a kind"), "{}", stderr(&o));
    let o = trace(&["--fail-on-leak", "--fail-on-leak-kind", "tcp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not a kind of file"),
        "{}",
        stderr(&o)
    );
    // Both need --fail-on-leak.
    let o = trace(&["--allow-leak", "socket"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
#[ignore = "needs root and BTF"]
fn dash_o_keeps_the_notes_and_the_verdict() {
    let _g = guard();
    let f = temp_path("ci.txt");
    let o = trace(&["--fail-on-leak", "-o", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = std::fs::read_to_string(&f).unwrap();
    let _ = std::fs::remove_file(&f);
    assert!(text.contains("note: tracing command (pid "), "{text}");
    assert!(text.contains("1 spawn traced"), "{text}");
    assert!(
        text.contains("verdict: --fail-on-leak: 1 spawn leaked fds"),
        "{text}"
    );
}

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");

#[test]
fn scan_fail_on_says_why_and_min_severity_hides_the_rest() {
    let o = run(&["scan", FIXTURE, "--fail-on", "high"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(
        e.contains("verdict: --fail-on high: 4 findings at or above it (2 critical, 2 high): exit status 3"),
        "{e}"
    );
    let o = run(&[
        "scan",
        FIXTURE,
        "--fail-on",
        "critical",
        "--min-severity",
        "critical",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    let e = stderr(&o);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| {
            ["critical", "high", "medium", "low", "info"]
                .iter()
                .any(|s| l.trim_start().starts_with(s))
        })
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows.iter().all(|r| r.trim_start().starts_with("critical")),
        "{out}"
    );
    assert!(
        e.contains("7 findings below --min-severity critical not shown"),
        "{e}"
    );
    assert!(
        e.contains("9 findings"),
        "the summary counts every finding: {e}"
    );
    // JSON: the hidden ones are not written either.
    let o = run(&["scan", FIXTURE, "--json", "--min-severity", "high"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("\"type\":\"finding\"").count(), 4, "{out}");
    // No --fail-on verdict when nothing failed.
    let o = run(&[
        "scan",
        FIXTURE,
        "--fail-on",
        "critical",
        "--min-severity",
        "info",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let o = run(&["scan", FIXTURE, "-p", "300"]);
    assert!(!stderr(&o).contains("verdict:"), "{}", stderr(&o));
}

/// fdinfo `flags:` as arm64's kernel prints what x86_64's printed as `x86` (the four
/// `O_*` values the two architectures permute: O_DIRECT, O_LARGEFILE, O_DIRECTORY,
/// O_NOFOLLOW; the kernels' uapi `asm/fcntl.h`).
fn as_arm64(x86: u32) -> u32 {
    const PAIRS: [(u32, u32); 4] = [
        (0o40000, 0o200000),
        (0o100000, 0o400000),
        (0o200000, 0o40000),
        (0o400000, 0o100000),
    ];
    let mut out = PAIRS.iter().fold(x86, |f, (x, _)| f & !x);
    for (x, a) in PAIRS {
        if x86 & x != 0 {
            out |= a;
        }
    }
    out
}

/// The basic fixture as arm64 would have printed it: a copy whose fdinfo flags hold arm64's
/// values and whose `fdaudit-arch` says so.
fn arm64_copy_of_the_fixture() -> std::path::PathBuf {
    let dir = temp_path("procfs-arm64");
    let _ = std::fs::remove_dir_all(&dir);
    let cp = Command::new("cp").arg("-a").arg(FIXTURE).arg(&dir).status();
    assert!(cp.is_ok_and(|s| s.success()), "cp -a {FIXTURE} failed");
    for pid in std::fs::read_dir(&dir).expect("copy").flatten() {
        let Ok(infos) = std::fs::read_dir(pid.path().join("fdinfo")) else {
            continue;
        };
        for info in infos.flatten() {
            let text = std::fs::read_to_string(info.path()).expect("fdinfo");
            let text: Vec<String> = text
                .lines()
                .map(|l| {
                    match l
                        .strip_prefix("flags:\t")
                        .map(|v| u32::from_str_radix(v, 8))
                    {
                        Some(Ok(v)) => format!("flags:\t0{:o}", as_arm64(v)),
                        _ => l.to_owned(),
                    }
                })
                .collect();
            std::fs::write(info.path(), text.join("\n") + "\n").expect("fdinfo");
        }
    }
    std::fs::write(dir.join("fdaudit-arch"), "aarch64\n").expect("marker");
    dir
}

#[test]
fn a_procfs_tree_is_decoded_with_the_o_flags_of_its_own_architecture() {
    // issue #43: the aarch64 guest read this x86_64 fixture with arm64's values (3 findings
    // instead of 4: O_DIRECTORY is arm64's O_DIRECT). Here the other way round.
    let arm = arm64_copy_of_the_fixture();
    let arm_s = arm.to_str().expect("utf-8 temp path");
    let want =
        "verdict: --fail-on high: 4 findings at or above it (2 critical, 2 high): exit status 3";
    for (root, extra) in [(FIXTURE, None), (arm_s, None), (arm_s, Some("aarch64"))] {
        let mut args = vec!["scan", root, "--fail-on", "high"];
        args.extend(extra.map(|a| ["--arch", a]).iter().flatten());
        let o = run(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("directory /srv/data"), "{args:?}: {out}");
    }
    // A marker and --arch that disagree are a one-line error.
    let o = run(&["scan", arm_s, "--arch", "x86_64"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("says the tree comes from aarch64, --arch says x86_64"),
        "{e}"
    );
    // Without the marker, --arch says it.
    std::fs::remove_file(arm.join("fdaudit-arch")).expect("marker");
    let o = run(&["scan", arm_s, "--arch", "aarch64", "--fail-on", "high"]);
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&arm);
}

#[test]
fn scan_quiet_prints_the_findings_at_or_above_min_severity_and_the_summary() {
    let o = run(&["scan", FIXTURE, "-q", "--min-severity", "high"]);
    let (out, e) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{e}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines[0].trim_start().starts_with("SEVERITY"), "{out}");
    let rows = &lines[1..];
    assert_eq!(rows.len(), 4, "2 critical and 2 high, nothing else: {out}");
    assert!(
        rows.iter().all(|r| ["critical", "high"]
            .iter()
            .any(|s| r.trim_start().starts_with(s))),
        "{out}"
    );
    // The summary, and no other note (not even what --min-severity hid).
    let notes: Vec<&str> = e.lines().collect();
    assert_eq!(notes.len(), 1, "{e}");
    assert!(
        notes[0].starts_with("scan: 3 processes, 18 fds, 9 findings;"),
        "{e}"
    );
    // JSON: the header, the findings and the summary; no process records or notes but it.
    let o = run(&["scan", FIXTURE, "-q", "--json", "--min-severity", "high"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let types: Vec<String> = fdaudit_tests::records(&text)
        .iter()
        .map(|r| r["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        types,
        ["header", "finding", "finding", "finding", "finding", "note", "summary"],
        "{text}"
    );
    // --fail-on still judges every finding, and says so.
    let o = run(&[
        "scan",
        FIXTURE,
        "-q",
        "--fail-on",
        "medium",
        "--min-severity",
        "critical",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("verdict: --fail-on medium:"), "{e}");
}
