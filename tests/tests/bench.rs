//! `fdaudit __spawner`: every strategy spawns, the leaking ones leak exactly the fds the
//! spawner holds, and the closing ones leak none of them.

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};

use fdaudit_tests::{fdaudit, STRATEGIES};

fn spawner(args: &[&str]) -> std::process::Output {
    let out = Command::new(fdaudit())
        .arg("__spawner")
        .args(args)
        .output()
        .expect("failed to run fdaudit __spawner");
    assert!(
        out.status.success(),
        "__spawner {args:?} failed: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn every_strategy_spawns_true() {
    for s in STRATEGIES {
        let out = spawner(&[
            "--strategy",
            s,
            "-n",
            "3",
            "--nofile",
            "64",
            "--open-fds",
            "10",
            "--json",
        ]);
        let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
        // The JSON block starts after an empty line (see spawner.rs).
        let objs: Vec<serde_json::Value> = stdout
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{s}: bad line {l:?}: {e}")))
            .collect();
        let times: Vec<_> = objs.iter().filter(|o| o["type"] == "spawn_time").collect();
        assert_eq!(times.len(), 3, "{s}: three spawn_time lines in {stdout}");
        for t in &times {
            assert_eq!(t["strategy"], s, "{s}: strategy field");
            assert_eq!(t["exit_code"], 0, "{s}: child exit code");
            assert!(t["ns"].as_u64().is_some_and(|ns| ns > 0), "{s}: ns in {t}");
        }
        let summary = objs.last().expect("a summary line");
        assert_eq!(summary["type"], "summary", "{s}: last line is the summary");
        assert_eq!(summary["nofile"], 64, "{s}: nofile");
        assert_eq!(summary["open_fds"], 10, "{s}: open_fds");
        assert_eq!(summary["failures"], 0, "{s}: failures");
    }
}

/// Fds ≥ 3 the child (the bench-fdlist fixture) had open, as (fd, target).
fn child_fds(strategy: &str) -> BTreeSet<(u32, String)> {
    let out = spawner(&[
        "--strategy",
        strategy,
        "-n",
        "1",
        "--nofile",
        "64",
        "--open-fds",
        "10",
        "--",
        env!("CARGO_BIN_EXE_bench-fdlist"),
    ]);
    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .lines()
        .filter_map(|l| {
            let (fd, target) = l.split_once('\t')?;
            Some((fd.parse().ok()?, target.to_string()))
        })
        .collect()
}

#[test]
fn none_leaks_the_held_fds_and_closers_leak_none() {
    // The spawner closes what it inherited and holds fds 3..10: a socketpair, pipes and
    // /dev/null. Compare against close-range in the same environment all the same.
    let baseline = child_fds("close-range");
    // A kernel that refuses CLOSE_RANGE_CLOEXEC (5.10: close_range exists, the flag is
    // EINVAL) closes nothing for close-range-cloexec: it then leaks exactly as none does,
    // which is what a runtime relying on the flag gets there.
    let leakers: Vec<&str> = ["none", "posix-spawn"]
        .into_iter()
        .chain((!fdaudit_tests::close_range_cloexec_supported()).then_some("close-range-cloexec"))
        .collect();
    for &s in &leakers {
        let leaked: BTreeSet<_> = child_fds(s).difference(&baseline).cloned().collect();
        assert_eq!(
            leaked.len(),
            7,
            "{s} must leak the 7 held fds, leaked {leaked:?}"
        );
        assert!(
            leaked.iter().all(|(fd, _)| (3..10).contains(fd)),
            "{s}: leaked fds outside 3..10: {leaked:?}"
        );
        let kinds: BTreeSet<_> = leaked
            .iter()
            .map(|(_, t)| t.split(':').next().unwrap_or_default().to_string())
            .collect();
        assert!(
            kinds.contains("socket") && kinds.contains("pipe") && kinds.contains("/dev/null"),
            "{s}: expected sockets, pipes and /dev/null among {leaked:?}"
        );
    }
    for s in STRATEGIES.iter().filter(|s| !leakers.contains(s)) {
        let fds = child_fds(s);
        let held: Vec<_> = fds
            .iter()
            .filter(|(_, t)| t.starts_with("socket:") || t.starts_with("pipe:") || t == "/dev/null")
            .collect();
        assert!(held.is_empty(), "{s} leaked held fds: {held:?}");
        assert_eq!(fds, baseline, "{s}: child fds differ from close-range's");
    }
}

#[test]
fn wait_stdin_waits_for_a_line() {
    let mut child = Command::new(fdaudit())
        .args([
            "__spawner",
            "--strategy",
            "close-range",
            "-n",
            "2",
            "--wait-stdin",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("failed to start __spawner");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read ready line");
    assert_eq!(line.trim(), format!("ready {}", child.id()), "ready line");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "must wait for stdin"
    );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write go");
    let rest: Vec<String> = stdout
        .lines()
        .map(|l| l.expect("line"))
        .filter(|l| !l.is_empty())
        .collect();
    assert!(child.wait().expect("wait").success(), "spawner failed");
    assert_eq!(
        rest.len(),
        3,
        "two spawn_time lines and a summary: {rest:?}"
    );
}
