//! `--sarif FILE` on trace, scan and diff (issue #41 item 1): every file validates against
//! the SARIF 2.1.0 JSON Schema (vendored: tests/fixtures/sarif/README.md) and keeps
//! GitHub's own rule (every result has a physical location); a leak of a C program built
//! with `-g` in a git repository points at its `open` line, relative to the repository;
//! fingerprints are equal across runs; `diff` sets `baselineState`. And `scan --junit`,
//! read back with junitparser.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use fdaudit_tests::{fdaudit, guard, temp_path};

const SCHEMA_TEXT: &str = include_str!("../fixtures/sarif/sarif-2.1.0-rtm.5.json");

/// The one pattern of the schema that is no regular expression: `language`'s (run and
/// toolComponent) stray `]`
/// (`…{2}]?$`), which jsonschema's check of the schema itself refuses. It is read as the
/// pattern meant (a language, optionally `-` and a region); fdaudit writes no `language`.
const BAD_PATTERN: &str = r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$""#;
const MEANT_PATTERN: &str = r#""^[a-zA-Z]{2}(-[a-zA-Z]{2})?$""#;

fn schema() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        assert_eq!(
            SCHEMA_TEXT.matches(BAD_PATTERN).count(),
            2,
            "the schema changed"
        );
        let text = SCHEMA_TEXT.replace(BAD_PATTERN, MEANT_PATTERN);
        let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("the vendored SARIF schema is not a JSON Schema: {e}"))
    })
}

/// Reads a SARIF file, checks it against the 2.1.0 schema and GitHub's rule that every
/// result has a physical location (it rejects the whole file otherwise), and returns it.
pub fn check_sarif(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no SARIF file {}: {e}", path.display()));
    let log: Value = serde_json::from_str(&text).expect("the SARIF file is JSON");
    let errors: Vec<String> = schema()
        .iter_errors(&log)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not SARIF 2.1.0: {errors:#?}\n{text}");
    assert_eq!(log["version"], "2.1.0");
    for run in log["runs"].as_array().expect("runs") {
        for r in run["results"].as_array().expect("results") {
            let p = &r["locations"][0]["physicalLocation"];
            let uri = &p["artifactLocation"]["uri"];
            assert!(
                uri.as_str()
                    .is_some_and(|u| !u.is_empty() && !u.starts_with('/')),
                "a result without a relative physical location (GitHub rejects the file): {r}"
            );
            // GitHub shows a result at a line (sarif-sdk's GitHub rule GH1003).
            assert!(
                p["region"]["startLine"].as_u64().is_some_and(|l| l >= 1),
                "a result without region.startLine: {r}"
            );
        }
    }
    log
}

fn results(log: &Value) -> Vec<&Value> {
    log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const LEAK_C: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

/* Leaks a file named with its own pid into /bin/true (a second one with "more"); with
   "hold", holds it and waits to be killed. */
int main(int argc, char **argv) {
    char name[64];
    snprintf(name, sizeof name, "/tmp/fdaudit-sarif-%d-leak", (int)getpid());
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600); /* the leak */
    unlink(name);
    if (fd < 0)
        return 1;
    if (argc > 1 && strcmp(argv[1], "more") == 0)
        open("/etc/hostname", O_RDONLY); /* the second leak */
    if (argc > 1 && strcmp(argv[1], "hold") == 0) {
        write(1, "ready\n", 6);
        pause();
    }
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/true", "true", (char *)0);
        _exit(127);
    }
    waitpid(p, 0, 0);
    return 0;
}
"#;

/// The line of `LEAK_C` that holds `marker`.
fn line_of(marker: &str) -> u64 {
    LEAK_C
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker") as u64
        + 1
}

/// A git repository (`git init` in a fresh directory) with `src/leak.c` built with `-g`
/// into `build/leak`.
fn repo() -> PathBuf {
    let dir = temp_path("repo");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("build")).unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .arg(&dir)
        .status()
        .expect("git is installed");
    assert!(st.success(), "git init failed");
    let src = dir.join("src/leak.c");
    std::fs::write(&src, LEAK_C).unwrap();
    let st = Command::new("gcc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(dir.join("build/leak"))
        .arg(&src)
        .status()
        .expect("gcc is installed by .ci/setup");
    assert!(st.success(), "gcc failed");
    dir
}

/// `fdaudit ARGS` in `cwd`.
fn run_in(cwd: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(fdaudit())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit")
}

/// `trace -q --json -o NAME.jsonl --sarif NAME.sarif -- build/leak EXTRA`, from `src/` (the
/// source root is found by walking up to the repository's `.git`).
fn trace(repo: &Path, name: &str, extra: &[&str]) -> (PathBuf, Value) {
    let jsonl = repo.join(format!("{name}.jsonl"));
    let sarif = repo.join(format!("{name}.sarif"));
    let exe = repo.join("build/leak");
    let mut args: Vec<&std::ffi::OsStr> = ["trace", "-q", "--json", "-o"]
        .iter()
        .map(|s| s.as_ref())
        .collect();
    args.extend([jsonl.as_os_str(), "--sarif".as_ref(), sarif.as_os_str()]);
    args.extend(["--".as_ref(), exe.as_os_str()]);
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let o = run_in(&repo.join("src"), &args);
    assert!(o.status.success(), "trace failed: {}", stderr(&o));
    (jsonl, check_sarif(&sarif))
}

/// The result of `rule` whose message names fd `fd` (trace's `fd N (kind target)`, scan's
/// `fd N: reason`).
fn result_for<'a>(log: &'a Value, rule: &str, fd: u32) -> &'a Value {
    let needle = format!("fd {fd} (");
    let scan_needle = format!("fd {fd}: ");
    results(log)
        .into_iter()
        .find(|r| {
            let text = r["message"]["text"].as_str().unwrap();
            r["ruleId"] == rule && (text.contains(&needle) || text.contains(&scan_needle))
        })
        .unwrap_or_else(|| panic!("no {rule} result for fd {fd}: {log:#}"))
}

fn fingerprint(r: &Value) -> String {
    r["partialFingerprints"]["fdaudit/v1"]
        .as_str()
        .unwrap_or_else(|| panic!("no fingerprint: {r}"))
        .to_string()
}

fn location(r: &Value) -> (String, u64) {
    let p = &r["locations"][0]["physicalLocation"];
    assert_eq!(p["artifactLocation"]["uriBaseId"], "%SRCROOT%", "{r}");
    let uri = p["artifactLocation"]["uri"].as_str().unwrap().to_string();
    (uri, p["region"]["startLine"].as_u64().unwrap())
}

#[test]
#[ignore = "needs root and BTF"]
fn trace_sarif_points_a_leak_at_its_open_line_in_the_repository() {
    let _g = guard();
    let repo = repo();
    let (_, log) = trace(&repo, "a", &[]);
    let r = result_for(&log, "leaked-fd", 3);
    assert_eq!(
        location(r),
        ("src/leak.c".to_string(), line_of("/* the leak */")),
        "{r}"
    );
    let run = &log["runs"][0];
    let root = format!("file://{}/", repo.display());
    assert_eq!(run["originalUriBaseIds"]["%SRCROOT%"]["uri"], root.as_str());
    // CWE-403 as a relationship of the rule to the CWE taxonomy's taxon.
    let rule = &run["tool"]["driver"]["rules"][r["ruleIndex"].as_u64().unwrap() as usize];
    assert_eq!(rule["id"], "leaked-fd");
    assert_eq!(rule["relationships"][0]["target"]["id"], "403", "{rule}");
    assert_eq!(run["taxonomies"][0]["name"], "CWE");
    assert_eq!(run["taxonomies"][0]["taxa"][0]["id"], "403");

    // Built without debug info: no source line, so the first module of the stack in the
    // repository, the program itself (not /bin/true, the image that got the fd).
    let st = Command::new("gcc")
        .args(["-g0", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(repo.join("build/leak"))
        .arg(repo.join("src/leak.c"))
        .status()
        .expect("gcc");
    assert!(st.success());
    let (_, log) = trace(&repo, "nodebug", &[]);
    let r = result_for(&log, "leaked-fd", 3);
    assert_eq!(location(r), ("build/leak".to_string(), 1), "{r}");
    let _ = std::fs::remove_dir_all(&repo);
}

#[test]
#[ignore = "needs root and BTF"]
fn a_gate_finding_is_located_at_the_spawned_program_else_a_notification() {
    let _g = guard();
    let sarif = temp_path("demo.sarif");
    let empty = temp_path("empty-root");
    std::fs::create_dir(&empty).unwrap();
    let demo = |root: Option<&Path>| {
        let words = [
            "trace",
            "-q",
            "--demo",
            "--fail-on-strategy",
            "close-loop",
            "--sarif",
        ];
        let mut args: Vec<&std::ffi::OsStr> = words.iter().map(std::ffi::OsStr::new).collect();
        args.push(sarif.as_os_str());
        if let Some(r) = root {
            args.push(std::ffi::OsStr::new("--source-root"));
            args.push(r.as_os_str());
        }
        // From /: no .git above it, so the source root is / itself.
        let o = run_in(Path::new("/"), &args);
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        check_sarif(&sarif)
    };
    let log = demo(None);
    let r = results(&log)
        .into_iter()
        .find(|r| r["ruleId"] == "strategy-over-gate")
        .unwrap_or_else(|| panic!("no strategy-over-gate result: {log:#}"));
    assert_eq!(r["level"], "error", "{r}");
    assert_eq!(location(r).0, "bin/true", "the spawned program: {r}");
    // Nothing of the run under the root: no result, a notification with the rule.
    let log = demo(Some(&empty));
    assert!(results(&log).is_empty(), "{log:#}");
    let notes = &log["runs"][0]["invocations"][0]["toolExecutionNotifications"];
    assert!(
        notes
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["associatedRule"]["id"] == "strategy-over-gate"),
        "{log:#}"
    );
    let _ = std::fs::remove_file(&sarif);
    let _ = std::fs::remove_dir(&empty);
}

#[test]
#[ignore = "needs root and BTF"]
fn sarif_fingerprints_survive_reruns_and_diff_sets_the_baseline_state() {
    let _g = guard();
    let repo = repo();
    let (a, log_a) = trace(&repo, "a", &[]);
    let (_, log_b) = trace(&repo, "b", &[]);
    let (c, log_c) = trace(&repo, "c", &["more"]);
    // The leaked file's name holds each run's pid: the fingerprint does not.
    let fp = fingerprint(result_for(&log_a, "leaked-fd", 3));
    assert_eq!(fp, fingerprint(result_for(&log_b, "leaked-fd", 3)));
    assert_eq!(fp, fingerprint(result_for(&log_c, "leaked-fd", 3)));

    let diff = |x: &Path, y: &Path, name: &str| {
        let out = repo.join(name);
        let args: Vec<&std::ffi::OsStr> = vec![
            "diff".as_ref(),
            x.as_os_str(),
            y.as_os_str(),
            "--sarif".as_ref(),
            out.as_os_str(),
        ];
        let o = run_in(&repo.join("src"), &args);
        (o, check_sarif(&out))
    };
    let (o, log) = diff(&a, &c, "ac.sarif");
    assert_eq!(o.status.code(), Some(3), "a new leak: {}", stderr(&o));
    let same = result_for(&log, "leaked-fd", 3);
    assert_eq!(same["baselineState"], "unchanged", "{same}");
    assert_eq!(fingerprint(same), fp, "diff names a leak as trace does");
    assert_eq!(location(same).0, "src/leak.c");
    let new = result_for(&log, "leaked-fd", 4);
    assert_eq!(new["baselineState"], "new", "{new}");
    assert_eq!(
        location(new),
        ("src/leak.c".to_string(), line_of("/* the second leak */"))
    );
    let (o, log) = diff(&c, &a, "ca.sarif");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(result_for(&log, "leaked-fd", 4)["baselineState"], "absent");
    assert_eq!(
        result_for(&log, "leaked-fd", 3)["baselineState"],
        "unchanged"
    );
    let _ = std::fs::remove_dir_all(&repo);
}

#[test]
fn scan_sarif_locates_a_finding_at_its_executable_in_the_repository() {
    let repo = repo();
    let mut child = Command::new(repo.join("build/leak"))
        .arg("hold")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut ready).unwrap();
    let sarif = repo.join("scan.sarif");
    let pid = child.id().to_string();
    let args: Vec<&std::ffi::OsStr> = vec![
        "scan".as_ref(),
        "-q".as_ref(),
        "-p".as_ref(),
        pid.as_ref(),
        "--sarif".as_ref(),
        sarif.as_os_str(),
        "--source-root".as_ref(),
        repo.as_os_str(),
    ];
    let o = run_in(Path::new("/"), &args);
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "scan failed: {}", stderr(&o));
    let log = check_sarif(&sarif);
    let r = result_for(&log, "inheritable-fd", 3);
    assert_eq!(location(r).0, "build/leak", "{r}");
    assert_eq!(
        r["level"], "warning",
        "a writable regular file: medium: {r}"
    );
    let _ = std::fs::remove_dir_all(&repo);
}

#[test]
fn scan_junit_has_a_case_per_kind_failing_with_the_verdict_and_sarif_notifications() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/procfs/basic");
    let xml = temp_path("scan.xml");
    let sarif = temp_path("scan.sarif");
    let args: Vec<&std::ffi::OsStr> = vec![
        "scan".as_ref(),
        fixture.as_ref(),
        "-q".as_ref(),
        "--fail-on".as_ref(),
        "high".as_ref(),
        "--junit".as_ref(),
        xml.as_os_str(),
        "--sarif".as_ref(),
        sarif.as_os_str(),
    ];
    let o = run_in(Path::new("/"), &args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = crate::ci_native::junitparser_cases(&xml);
    let cases: Vec<Vec<&str>> = text.lines().map(|l| l.splitn(4, '|').collect()).collect();
    let verdict = "--fail-on high: 4 findings at or above it (2 critical, 2 high): exit status 3";
    let want = [
        ["gates", "--fail-on high", "False", verdict],
        ["findings", "inheritable-fd", "False", verdict],
        ["findings", "shared-description", "True", ""],
        ["findings", "outside-root", "True", ""],
        ["findings", "nofile-limit", "False", verdict],
    ];
    assert_eq!(cases, want.map(|c| c.to_vec()), "{text}");
    // A fixture's processes run nothing under the source root: notifications, no results.
    let log = check_sarif(&sarif);
    assert!(results(&log).is_empty(), "{log:#}");
    let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .unwrap();
    assert_eq!(notes.len(), 9, "a notification per finding: {log:#}");
    for p in [xml, sarif] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn the_checks_refuse_an_unlocated_result_and_a_file_off_the_schema() {
    let ok = serde_json::json!({
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{
            "message": {"text": "m"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a.c"},
                                                "region": {"startLine": 3}}}]
        }]}]
    });
    let unlocated = {
        let mut v = ok.clone();
        v["runs"][0]["results"][0]
            .as_object_mut()
            .unwrap()
            .remove("locations");
        v
    };
    let no_line = {
        let mut v = ok.clone();
        v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
            .as_object_mut()
            .unwrap()
            .remove("region");
        v
    };
    let off_schema = {
        let mut v = ok.clone();
        v["runs"][0]["results"][0]["level"] = "loud".into();
        v
    };
    let path = temp_path("check.sarif");
    std::fs::write(&path, ok.to_string()).unwrap();
    check_sarif(&path);
    for bad in [unlocated, no_line, off_schema] {
        std::fs::write(&path, bad.to_string()).unwrap();
        let r = std::panic::catch_unwind(|| check_sarif(&path));
        assert!(r.is_err(), "accepted {bad}");
    }
    let _ = std::fs::remove_file(&path);
}
