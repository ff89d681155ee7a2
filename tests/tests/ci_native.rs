//! What a CI job builds on: two identical runs that `diff` finds equal (pids and temporary
//! names taken out), and the exit-code contract that tells fdaudit's verdict from CMD's own
//! status.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use fdaudit_tests::{fdaudit, guard, of_type, records, temp_path, trace_to_file};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn diff(a: &Path, b: &Path, extra: &[&str]) -> Output {
    Command::new(fdaudit())
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit diff")
}

/// `trace --json` with `args`, its records written to a fresh file whose path is returned.
fn trace_json(name: &str, args: &[&str]) -> PathBuf {
    let (o, text) = trace_to_file(name, |c| {
        c.args(args);
    });
    assert!(o.status.success(), "trace {args:?} failed: {}", stderr(&o));
    let path = temp_path(name);
    std::fs::write(&path, text).expect("write the trace");
    path
}

#[test]
#[ignore = "needs root and BTF"]
fn two_demo_traces_diff_clean_and_an_extra_leak_regresses() {
    let _g = guard();
    let a = trace_json("demo-a.jsonl", &["--demo"]);
    let b = trace_json("demo-b.jsonl", &["--demo"]);
    let text = std::fs::read_to_string(&a).unwrap();
    assert!(
        text.contains("/tmp/fdaudit-demo-") && text.contains("-credentials"),
        "the demo no longer leaks its pid-named file: the test proves nothing: {text}"
    );

    // The same program twice: equal, although the leaked file's name holds each run's pid.
    let o = diff(&a, &b, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let recs = records(&String::from_utf8_lossy(&o.stdout));
    assert!(of_type(&recs, "diff_leak").is_empty(), "{recs:?}");

    // The raw paths are what --keep-paths compares: the same leak is then new and fixed.
    let o = diff(&a, &b, &["--keep-paths"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("fixed leak: /bin/true fd 7 regular /tmp/fdaudit-demo-"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    // The demo and one more leak of the command's own making: a regression still.
    let me = fdaudit();
    let script = r#""$0" __demo; exec 9</etc/hostname; /bin/true; true"#;
    let c = trace_json(
        "demo-c.jsonl",
        &["--", "sh", "-c", script, me.to_str().unwrap()],
    );
    let o = diff(&a, &c, &["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let recs = records(&String::from_utf8_lossy(&o.stdout));
    let leaks = of_type(&recs, "diff_leak");
    assert!(
        leaks.len() == 1
            && leaks[0]["change"] == "new"
            && leaks[0]["fd"] == 9
            && leaks[0]["target"] == "/etc/hostname",
        "{leaks:?}"
    );
    for p in [a, b, c] {
        let _ = std::fs::remove_file(p);
    }
}
