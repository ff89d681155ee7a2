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

fn run(args: &[&str]) -> Output {
    Command::new(fdaudit())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit")
}

/// `trace --fail-on-leak --policy-exit-code 42 EXTRA -- bash -c SCRIPT`.
fn gated(extra: &[&str], script: &str) -> Output {
    let mut args = vec!["trace", "-q", "--fail-on-leak", "--policy-exit-code", "42"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "bash", "-c", script]);
    run(&args)
}

const LEAKS: &str = "exec 7</etc/hostname; /bin/true;";

#[test]
#[ignore = "needs root and BTF"]
fn policy_exit_code_tells_a_failed_gate_from_the_commands_own_status() {
    let _g = guard();
    // The command's own 3, no leak: 3, and no verdict.
    let o = gated(&[], "/bin/true; exit 3");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(!stderr(&o).contains("verdict:"), "{}", stderr(&o));

    // A leak, the command exits 0: the gate's 42, said on a verdict line.
    let o = gated(&[], &format!("{LEAKS} true"));
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("verdict: --fail-on-leak: 1 spawn leaked fds (exit status 42)"),
        "{}",
        stderr(&o)
    );

    // A leak and the command's own 3: its 3 wins, and the verdict is still said.
    let o = gated(&[], &format!("{LEAKS} exit 3"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the command itself failed: exit status 3 is its own"),
        "{}",
        stderr(&o)
    );

    // Records in a file: the verdict is said on stderr too, as text; the summary has 42.
    let f = temp_path("gated.jsonl");
    let o = gated(
        &["--json", "-o", f.to_str().unwrap()],
        &format!("{LEAKS} true"),
    );
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("verdict: --fail-on-leak: 1 spawn leaked fds (exit status 42)"),
        "{}",
        stderr(&o)
    );
    let recs = records(&std::fs::read_to_string(&f).unwrap());
    let s = of_type(&recs, "summary")[0];
    assert_eq!(
        (s["exit_code"].as_u64(), s["exit_reason"].as_str()),
        (Some(42), Some("leak"))
    );
    let _ = std::fs::remove_file(&f);
}

#[test]
fn policy_exit_code_refuses_fdaudits_own_and_the_shells_statuses() {
    for bad in [
        &["--policy-exit-code", "2"][..],
        &["--policy-exit-code", "0"],
        &["--policy-exit-code", "127"],
        &["--incomplete-exit-code", "130"],
        // The two verdicts must stay apart.
        &["--policy-exit-code", "4"],
        &["--policy-exit-code", "9", "--incomplete-exit-code", "9"],
    ] {
        let mut args = vec!["trace", "--fail-on-leak"];
        args.extend_from_slice(bad);
        args.extend_from_slice(&["--", "/bin/true"]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("exit"), "{bad:?}: {}", stderr(&o));
    }
}

#[test]
fn scan_and_diff_take_the_policy_exit_code() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    let o = run(&[
        "scan",
        fixture,
        "--fail-on",
        "high",
        "--policy-exit-code",
        "42",
    ]);
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("at or above it (2 critical, 2 high): exit status 42"),
        "{}",
        stderr(&o)
    );
    // `--json`: the records on stdout, the verdict on stderr.
    let o = run(&[
        "scan",
        fixture,
        "--json",
        "--fail-on",
        "high",
        "--policy-exit-code",
        "42",
    ]);
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("verdict: --fail-on high"),
        "{}",
        stderr(&o)
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/diff");
    let (a, b) = (
        Path::new(dir).join("before.jsonl"),
        Path::new(dir).join("after.jsonl"),
    );
    // after → before undoes a fix: a regression, at the status asked for.
    let o = diff(&b, &a, &["--policy-exit-code", "42"]);
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("verdict: regression (exit status 42)"),
        "{}",
        stderr(&o)
    );
}

/// The venv .ci/setup installs junitparser into.
const JUNITPARSER: &str = "/opt/fdaudit-ci/junit-venv/bin/python";

/// A JUnit file as junitparser reads it: a line per case, `suite|name|passed|first failure
/// message`.
pub fn junitparser_cases(xml: &Path) -> String {
    let script = r#"
import sys
from junitparser import JUnitXml
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        msg = case.result[0].message if case.result else ""
        print(f"{suite.name}|{case.name}|{case.is_passed}|{msg}")
"#;
    let out = Command::new(JUNITPARSER)
        .args(["-c", script])
        .arg(xml)
        .output()
        .unwrap_or_else(|e| panic!("{JUNITPARSER}: {e}: run .ci/setup"));
    assert!(out.status.success(), "junitparser: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root and BTF"]
fn junit_has_a_case_per_gate_and_group_that_junitparser_reads() {
    let _g = guard();
    let xml = temp_path("trace.xml");
    let o = run(&[
        "trace",
        "--demo",
        "-q",
        "--fail-on-leak",
        "--fail-on-strategy",
        "close-loop",
        "--max-closes",
        "100000",
        "--junit",
        xml.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = junitparser_cases(&xml);
    let cases: Vec<Vec<&str>> = text.lines().map(|l| l.splitn(4, '|').collect()).collect();
    let failing = |suite: &str| {
        cases
            .iter()
            .filter(|c| c[0] == suite && c[2] == "False")
            .map(|c| c[1])
            .collect::<Vec<_>>()
    };
    assert_eq!(
        failing("gates"),
        ["--fail-on-leak", "--fail-on-strategy close-loop"],
        "{text}"
    );
    assert!(
        cases
            .iter()
            .any(|c| c[..3] == ["gates", "--max-closes 100000", "True"]),
        "{text}"
    );
    // The demo's four groups; the leaking one and the close loop fail, with the verdict.
    assert_eq!(
        cases.iter().filter(|c| c[0] == "groups").count(),
        4,
        "{text}"
    );
    assert_eq!(
        failing("groups"),
        [
            "fdaudit → /bin/true (close-loop)",
            "fdaudit → /bin/true (none)"
        ],
        "{text}"
    );
    assert!(
        cases.iter().any(|c| c[1] == "fdaudit → /bin/true (none)"
            && c[3].starts_with("--fail-on-leak: 2 spawns leaked fds (exit status 3)")),
        "{text}"
    );
    let _ = std::fs::remove_file(&xml);
}

#[test]
#[ignore = "needs root and BTF"]
fn github_actions_annotations_are_capped_and_the_step_summary_written() {
    let _g = guard();
    // Twelve programs, each a group of its own, each leaking fd 7.
    let dir = temp_path("gha");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..12 {
        std::fs::copy("/bin/true", dir.join(format!("t{i:02}"))).unwrap();
    }
    let script = format!(
        "exec 7</etc/hostname; for f in {}/t*; do \"$f\"; done",
        dir.display()
    );
    let summary = dir.join("summary.md");
    let o = Command::new(fdaudit())
        .args(["trace", "-q", "--fail-on-leak", "--", "bash", "-c", &script])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    let errors: Vec<&str> = e.lines().filter(|l| l.starts_with("::error ")).collect();
    assert_eq!(errors.len(), 10, "{e}");
    assert!(errors[9].contains("and 3 more errors"), "{e}");
    assert!(
        errors[0].contains("::--fail-on-leak: 12 spawns leaked fds"),
        "{e}"
    );
    assert!(
        e.lines()
            .any(|l| l.starts_with("fdaudit: 12 errors, 0 warnings (exit status 3)")),
        "{e}"
    );
    let md = std::fs::read_to_string(&summary).expect("the step summary is written");
    assert!(md.starts_with("### fdaudit trace: exit status 3"), "{md}");
    assert_eq!(md.matches("| ❌ | bash → ").count(), 12, "{md}");

    // JSON records on stderr: every line there stays JSON, the summary is still written.
    std::fs::remove_file(&summary).unwrap();
    let o = Command::new(fdaudit())
        .args([
            "trace",
            "--json",
            "--fail-on-leak",
            "--",
            "bash",
            "-c",
            &script,
        ])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let recs = records(&stderr(&o));
    assert!(!of_type(&recs, "summary").is_empty(), "{}", stderr(&o));
    assert!(summary.exists(), "no step summary with --json");

    // Outside GitHub Actions: no workflow commands.
    let o = Command::new(fdaudit())
        .args(["trace", "-q", "--fail-on-leak", "--", "bash", "-c", &script])
        .env_remove("GITHUB_ACTIONS")
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(!stderr(&o).contains("::error"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The commands of docs/ci.md's job whose YAML starts with `# {name}`: the `run:` values
/// (GitHub Actions) or the `script:` items (GitLab CI).
fn job_commands(name: &str) -> Vec<String> {
    let doc = include_str!("../../docs/ci.md");
    let start = doc
        .find(&format!("```yaml\n# {name}\n"))
        .unwrap_or_else(|| panic!("docs/ci.md has no {name} job"));
    let block = &doc[start..];
    let block = &block[..block[3..].find("```").expect("a closed block") + 3];
    let mut cmds = Vec::new();
    let mut in_script = false;
    for l in block.lines() {
        let t = l.trim_start();
        if let Some(cmd) = t.strip_prefix("run: ") {
            cmds.push(cmd.to_string());
        } else if t == "script:" {
            in_script = true;
        } else if let (true, Some(cmd)) = (in_script, t.strip_prefix("- ")) {
            cmds.push(cmd.to_string());
        } else {
            in_script = false;
        }
    }
    assert!(!cmds.is_empty(), "no commands in the {name} job");
    cmds
}

/// Runs `cmds` as a CI runner would (`bash -e -c`, one at a time, stopping at the first
/// that fails) in `dir`, with fdaudit and a `sudo` for root (it runs what follows its
/// options) on PATH; returns the last status.
fn run_job(cmds: &[String], dir: &Path, env: &[(&str, &Path)]) -> Output {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sudo = bin.join("sudo");
    std::fs::write(
        &sudo,
        "#!/bin/sh\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
    )
    .unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&sudo, mode).unwrap();
    let fdaudit_dir = fdaudit().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        fdaudit_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut last = None;
    for c in cmds {
        let mut cmd = Command::new("bash");
        cmd.args(["-e", "-c", c])
            .current_dir(dir)
            .env("PATH", &path)
            .env_remove("GITHUB_ACTIONS")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().expect("run a job's command");
        let ok = o.status.success();
        last = Some(o);
        if !ok {
            break;
        }
    }
    last.unwrap()
}

#[test]
#[ignore = "needs root and BTF"]
fn ci_jobs_in_docs_run_as_written() {
    let _g = guard();
    let github = job_commands(".github/workflows/fdaudit.yml");
    let gitlab = job_commands(".gitlab-ci.yml");
    for (recipe, want) in [
        ("/bin/true", 0),
        ("bash -c 'exec 7</etc/hostname; /bin/true; true'", 42),
        // make's own status for a failing recipe: the tests failed, not fdaudit's verdict.
        ("/bin/false", 2),
    ] {
        for (job, cmds) in [("github", &github), ("gitlab", &gitlab)] {
            let dir = temp_path(&format!("job-{job}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("Makefile"), format!("test:\n\t{recipe}\n")).unwrap();
            let summary = dir.join("summary.md");
            let env: Vec<(&str, &Path)> = if job == "github" {
                vec![
                    ("GITHUB_ACTIONS", Path::new("true")),
                    ("GITHUB_STEP_SUMMARY", &summary),
                ]
            } else {
                Vec::new()
            };
            let o = run_job(cmds, &dir, &env);
            assert_eq!(
                o.status.code(),
                Some(want),
                "{job} job, recipe {recipe}: {}",
                stderr(&o)
            );
            let xml = std::fs::read_to_string(dir.join("fdaudit.xml"))
                .unwrap_or_else(|e| panic!("{job}: no fdaudit.xml: {e}"));
            assert_eq!(
                xml.contains("<failure"),
                want != 0,
                "{job}, recipe {recipe}: {xml}"
            );
            if job == "github" {
                // The upload step's file: valid, every result located; the leak into
                // /bin/true (no frame in the checkout) is a notification, not a result.
                let log = crate::sarif::check_sarif(&dir.join("fdaudit.sarif"));
                let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
                    .as_array()
                    .expect("notifications")
                    .iter()
                    .filter(|n| n["associatedRule"]["id"] == "leaked-fd")
                    .count();
                assert_eq!(notes, usize::from(want == 42), "recipe {recipe}: {log:#}");
                let md = std::fs::read_to_string(&summary).expect("a step summary");
                assert!(md.contains("exit status"), "{md}");
                assert_eq!(
                    stderr(&o).contains("::error "),
                    want == 42,
                    "{}",
                    stderr(&o)
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// `(suite, case, passed)` of a JUnit file, as junitparser reads it.
fn junit_cases(xml: &Path) -> Vec<(String, String, bool)> {
    let script = r#"
import sys
from junitparser import JUnitXml
for suite in JUnitXml.fromfile(sys.argv[1]):
    for case in suite:
        print(f"{suite.name}|{case.name}|{case.is_passed}")
"#;
    let out = Command::new(JUNITPARSER)
        .args(["-c", script])
        .arg(xml)
        .output()
        .unwrap_or_else(|e| panic!("{JUNITPARSER}: {e}: run .ci/setup"));
    assert!(out.status.success(), "junitparser: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(3, '|').collect();
            (f[0].to_string(), f[1].to_string(), f[2] == "True")
        })
        .collect()
}

#[test]
fn diff_junit_and_github_annotations() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/diff");
    let (a, b) = (
        Path::new(dir).join("before.jsonl"),
        Path::new(dir).join("after.jsonl"),
    );
    let xml = temp_path("diff.xml");
    let summary = temp_path("diff-summary.md");
    // after → before undoes the fix: the group is worse and a leak is new.
    let o = Command::new(fdaudit())
        .arg("diff")
        .args([&b, &a])
        .arg("--junit")
        .arg(&xml)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit diff");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let cases = junit_cases(&xml);
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| !c.2)
        .map(|c| c.1.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "no regression",
            "fdaudit → /bin/true (close-range → close-loop)",
            "new leak → /bin/true fd 4 socket inet tcp (-)"
        ],
        "{cases:?}"
    );
    let e = stderr(&o);
    assert_eq!(
        e.lines().filter(|l| l.starts_with("::error ")).count(),
        2,
        "{e}"
    );
    let md = std::fs::read_to_string(&summary).expect("a step summary");
    assert!(md.starts_with("### fdaudit diff: exit status 3"), "{md}");
    // A run against itself: nothing fails.
    let o = diff(&a, &a, &["--junit", xml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        junit_cases(&xml).iter().all(|c| c.2),
        "{:?}",
        junit_cases(&xml)
    );
    let _ = std::fs::remove_file(&xml);
    let _ = std::fs::remove_file(&summary);
}
