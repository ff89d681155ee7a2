//! `fdaudit bench -- CMD`: the user's own spawner, traced under each NOFILE limit; and
//! `--cmd-arg`, which took over the built-in child's arguments from `--`.

use std::process::{Command, Output, Stdio};

use fdaudit_tests::{default_stop_signals, fdaudit, of_type, records, require_root};
use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(fdaudit())
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run fdaudit bench")
}

/// `bench --json --limits 1024,4096 --runs 2 -- CMD…`: its exit code, user_cell records
/// by NOFILE (every record checked against the schema), and its stderr and notes.
fn user_cells(cmd: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    user_cells_runs(cmd, "2")
}

/// [`user_cells`] with `runs` runs of CMD per limit.
fn user_cells_runs(cmd: &[&str], runs: &str) -> (Option<i32>, Vec<Value>, String) {
    let mut args = vec!["--json", "--limits", "1024,4096", "--runs", runs, "--"];
    args.extend(cmd);
    let out = bench(&args);
    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    for n in of_type(&recs, "note") {
        stderr.push_str(n["message"].as_str().unwrap_or_default());
        stderr.push('\n');
    }
    assert!(
        of_type(&recs, "cell").is_empty(),
        "-- CMD without --strategies measures no built-in cell"
    );
    let cells: Vec<Value> = of_type(&recs, "user_cell").into_iter().cloned().collect();
    let nofiles: Vec<u64> = cells
        .iter()
        .map(|c| c["nofile"].as_u64().unwrap())
        .collect();
    assert_eq!(nofiles, [1024, 4096], "a user_cell per limit: {stderr}");
    assert_eq!(of_type(&recs, "user_fit").len(), 1, "two limits: a fit");
    (out.status.code(), cells, stderr)
}

/// The fields every spawner below is checked on, as (spawns, strategy, mixed, close()
/// per spawn, close_range() per spawn, leaked per spawn, leaked in all).
fn summary(c: &Value) -> (u64, &str, bool, u64, u64, u64, u64) {
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
    (
        n("spawns"),
        c["strategy"].as_str().expect("a strategy"),
        c["strategy_mixed"].as_bool().expect("strategy_mixed"),
        n("close_calls_per_spawn"),
        n("close_range_calls_per_spawn"),
        n("leaked_fds_per_spawn"),
        n("leaked_fd_count"),
    )
}

#[test]
#[ignore = "needs root and BTF"]
fn user_spawners_report_spawns_strategy_and_leaks_per_limit() {
    require_root();
    // CPython 3.11's subprocess closes with close_range, around the error pipe it keeps
    // (two calls), and closes one pipe end; 5 spawns a run, 2 runs.
    let python = [
        "/usr/bin/python3",
        "-c",
        "import subprocess; [subprocess.run(['/bin/true'], close_fds=True) for _ in range(5)]",
    ];
    let (code, cells, stderr) = user_cells(&python);
    assert_eq!(code, Some(0), "{stderr}");
    for c in &cells {
        assert_eq!(summary(c), (10, "close-range", false, 1, 2, 0, 0), "{c}");
        assert_eq!((&c["runs"], &c["failed_runs"]), (&2.into(), &0.into()));
        let (median, p95) = (&c["window_median_ns"], &c["window_p95_ns"]);
        assert!(
            median.as_u64().unwrap() > 0 && p95.as_u64() >= median.as_u64(),
            "{c}"
        );
    }
    // bash forks and execs without closing anything: fd 7 (its own) leaks into each child;
    // what the test harness gave bash itself (the baseline) does not count.
    let bash = [
        "/bin/bash",
        "-c",
        "exec 7</etc/hostname; for i in 1 2 3; do /bin/true; done",
    ];
    let (code, cells, stderr) = user_cells(&bash);
    assert_eq!(code, Some(0), "{stderr}");
    for c in &cells {
        assert_eq!(summary(c), (6, "none", false, 0, 0, 1, 6), "{c}");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn the_limit_reaches_the_spawner_and_the_fit_sees_it_grow() {
    require_root();
    // fdaudit's own close-loop spawner closes 3..NOFILE: NOFILE−3 calls at each limit,
    // which only holds if CMD really ran with that soft limit.
    let me = fdaudit();
    let me = me.to_str().expect("UTF-8 path");
    let spawner = [me, "__spawner", "--strategy", "close-loop", "-n", "2"];
    // 16 spawns per limit: the medians compared below must not be those of a preempted
    // few (with 4, a busy CI host once made 1021 closes' median 3.3 ms, 4093's 2.2 ms).
    let (code, cells, stderr) = user_cells_runs(&spawner, "8");
    assert_eq!(code, Some(0), "{stderr}");
    for c in &cells {
        let nofile = c["nofile"].as_u64().unwrap();
        assert_eq!(
            summary(c),
            (16, "close-loop", false, nofile - 3, 0, 0, 0),
            "{c}"
        );
    }
    let w = |i: usize| cells[i]["window_median_ns"].as_u64().unwrap();
    assert!(w(1) > w(0), "4093 closes cost more than 1021: {cells:?}");
}

#[test]
#[ignore = "needs root and BTF"]
fn a_failing_spawner_is_a_warning_and_exit_1() {
    require_root();
    let (code, cells, stderr) = user_cells(&["/bin/sh", "-c", "/bin/true; exit 3"]);
    assert_eq!(code, Some(1), "{stderr}");
    for c in &cells {
        assert_eq!(
            (&c["runs"], &c["failed_runs"]),
            (&2.into(), &2.into()),
            "{c}"
        );
        assert_eq!(
            c["spawns"], 2,
            "the spawns before the failure still count: {c}"
        );
    }
    assert!(stderr.contains("exited non-zero"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
#[ignore = "needs root and BTF"]
fn ctrl_c_stops_and_prints_what_was_measured() {
    require_root();
    let mark = fdaudit_tests::temp_path("bench-user-started");
    let _ = std::fs::remove_file(&mark);
    // `exec sleep`: no fork, so /bin/true is the one spawn.
    let script = format!("/bin/true; : > '{}'; exec sleep 30", mark.display());
    let child = default_stop_signals(&mut Command::new(fdaudit()))
        .args([
            "bench",
            "--json",
            "--limits",
            "1024,4096",
            "--runs",
            "3",
            "--",
        ])
        .args(["/bin/sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fdaudit bench");
    // The first run is under way (its /bin/true spawned) once the mark exists.
    let t0 = std::time::Instant::now();
    while !mark.exists() {
        assert!(t0.elapsed().as_secs() < 60, "the spawner never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait for bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    let cells = of_type(&recs, "user_cell");
    assert_eq!(cells.len(), 1, "only NOFILE 1024 was reached: {recs:?}");
    assert_eq!(
        cells[0]["spawns"], 1,
        "the run under way counts: {}",
        cells[0]
    );
    let notes: Vec<&str> = of_type(&recs, "note")
        .iter()
        .filter_map(|n| n["message"].as_str())
        .collect();
    assert!(
        notes.iter().any(|m| m.contains("interrupted")),
        "{notes:?} {stderr}"
    );
    let _ = std::fs::remove_file(&mark);
}

#[test]
fn a_spawner_that_cannot_run_is_refused_first() {
    let out = bench(&["--limits", "1024", "--", "/nonexistent/spawner"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CMD /nonexistent/spawner"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `--cmd-arg` reaches the built-in child: `sh -c 'exit 3'` fails every spawn, `exit 0`
/// none (untraced, no root needed).
#[test]
fn cmd_args_reach_the_built_in_child() {
    let run = |script: &str| {
        let out = bench(&[
            "--json",
            "--limits",
            "1024",
            "--open-fds",
            "3",
            "--strategies",
            "none",
            "-n",
            "2",
            "--batch",
            "2",
            "--trace-spawns",
            "0",
            "--cmd",
            "/bin/sh",
            "--cmd-arg",
            "-c",
            "--cmd-arg",
            script,
        ]);
        let recs = records(&String::from_utf8_lossy(&out.stdout));
        let failures = of_type(&recs, "cell")[0]["failures"].as_u64().unwrap();
        (out.status.code(), failures)
    };
    assert_eq!(run("exit 3"), (Some(1), 2));
    assert_eq!(run("exit 0"), (Some(0), 0));
}

/// `diff` compares two `bench -- CMD` runs row by row (command line and NOFILE): the same
/// command line going from close_range to a close loop is a regression (exit 3).
#[test]
#[ignore = "needs root and BTF"]
fn diff_compares_two_runs_of_the_same_spawner() {
    require_root();
    let me = fdaudit();
    let run = |strategy: &str| {
        let file = fdaudit_tests::temp_path(&format!("bench-user-{strategy}.jsonl"));
        let file_arg = file.to_str().expect("UTF-8 temp path").to_owned();
        let out = Command::new(fdaudit())
            .args(["bench", "--json", "--limits", "1024,4096", "--runs", "1"])
            .args(["-o", &file_arg, "--", "/bin/sh", "-c"])
            .arg(r#"exec "$0" __spawner --strategy "$STRATEGY" -n 2"#)
            .arg(&me)
            .env("STRATEGY", strategy)
            .stdin(Stdio::null())
            .output()
            .expect("run fdaudit bench");
        assert!(out.status.success(), "{strategy}: {out:?}");
        file
    };
    let (a, b) = (run("close-range"), run("close-loop"));
    let out = Command::new(fdaudit())
        .arg("diff")
        .args([&a, &b])
        .arg("--json")
        .output()
        .expect("run fdaudit diff");
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(3), "{recs:?}");
    let groups = of_type(&recs, "diff_group");
    assert_eq!(groups.len(), 2, "one row per NOFILE: {groups:?}");
    for g in groups {
        assert_eq!(g["change"], "worse", "{g}");
        assert_eq!(
            g["regressions"][0], "strategy close-range → close-loop",
            "{g}"
        );
        assert!(
            g["spawner"]
                .as_str()
                .unwrap()
                .starts_with("/bin/sh -c exec"),
            "{g}"
        );
    }
}

/// An fd CMD itself inherited from fdaudit's caller (fd 9 here) is the baseline: it reaches
/// every spawn, but as `trace` does, it is not counted as CMD's leak.
#[test]
#[ignore = "needs root and BTF"]
fn what_cmd_inherited_is_not_its_leak() {
    require_root();
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"exec 9</etc/hostname; exec "$0" bench --json --limits 1024 --runs 1 -- /bin/sh -c '/bin/true; /bin/true; exit 0'"#)
        .arg(fdaudit())
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit bench");
    assert!(out.status.success(), "{out:?}");
    let recs = records(&String::from_utf8_lossy(&out.stdout));
    let c = of_type(&recs, "user_cell")[0];
    assert_eq!(summary(c), (2, "none", false, 0, 0, 0, 0), "{c}");
}

#[test]
#[ignore = "needs root and BTF"]
fn spawns_are_filed_under_their_own_limit_on_a_busy_cpu() {
    require_root();
    // Exactly 20 spawns, one after another.
    let spawner = fdaudit_tests::build_c_fixture(
        "bench-spawnloop",
        r#"#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
        if (p < 0 || waitpid(p, 0, 0) != p) return 1;
    }
    return 0;
}
"#,
    );
    // A busy loop on the CPU bench and the spawner run on: the drain thread waits for it,
    // so records reach userspace late (a run's last spawns were filed under the next limit
    // when a flush missed the ring growing under it).
    let _hog = fdaudit_tests::KillOnDrop(
        Command::new("taskset")
            .args(["-c", "0", "/bin/sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("start a CPU hog with taskset"),
    );
    for round in 0..10 {
        let out = Command::new("taskset")
            .args(["-c", "0"])
            .arg(fdaudit())
            .args([
                "bench",
                "--json",
                "--limits",
                "1024,2048,4096",
                "--runs",
                "1",
                "--",
            ])
            .arg(&spawner)
            .arg("20")
            .stdin(Stdio::null())
            .output()
            .expect("run fdaudit bench under taskset");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "round {round}: {stderr}");
        let recs = records(&String::from_utf8_lossy(&out.stdout));
        let got: Vec<(u64, u64, u64)> = of_type(&recs, "user_cell")
            .iter()
            .map(|c| {
                let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
                (n("nofile"), n("spawns"), n("leaked_fd_count"))
            })
            .collect();
        assert_eq!(
            got,
            [(1024, 20, 0), (2048, 20, 0), (4096, 20, 0)],
            "round {round}: every limit's run files its own 20 spawns, none leaking: {stderr}"
        );
    }
    let _ = std::fs::remove_file(&spawner);
}

#[test]
#[ignore = "needs root and BTF"]
fn cmd_runs_pinned_like_the_built_in_cells() {
    require_root();
    let report = fdaudit_tests::temp_path("bench-user-cpus");
    let _ = std::fs::remove_file(&report);
    let script = format!(
        "grep Cpus_allowed_list /proc/self/status >> '{}'",
        report.display()
    );
    for (pin, want) in [(&["--cpu", "0"][..], "0"), (&["--no-pin"][..], "")] {
        let _ = std::fs::remove_file(&report);
        let mut args = vec!["--json", "--limits", "1024", "--runs", "1"];
        args.extend(pin);
        args.extend(["--", "/bin/sh", "-c", &script]);
        let out = bench(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&report).expect("CMD wrote its CPUs");
        let cpus = text.split_whitespace().last().expect("a CPU list");
        if want.is_empty() {
            assert_ne!(cpus, "0", "--no-pin leaves CMD unpinned: {text}");
        } else {
            assert_eq!(cpus, want, "--cpu 0 pins CMD: {text}");
        }
    }
    let _ = std::fs::remove_file(&report);
}

/// Runs `bench ARGS` with `FDAUDIT_TEST_PAUSE=step`, sends SIGINT once it says it paused
/// there (the signal waits while it is stopped, then SIGCONT lets it run): its exit code,
/// records and stderr.
fn bench_interrupted_at(step: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    use std::io::BufRead as _;
    let mut child = default_stop_signals(&mut Command::new(fdaudit()))
        .arg("bench")
        .args(args)
        .env("FDAUDIT_TEST_PAUSE", step)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fdaudit bench");
    let stdout = child.stdout.take().expect("stdout");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stdout }, &mut s);
        s
    });
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    let want = format!("paused {step}");
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).expect("read bench's stderr");
        assert!(n > 0, "bench never reached {step}: {said}");
        said.push_str(&line);
        if line.trim() == want {
            break;
        }
    }
    let pid = child.id() as i32;
    // The line comes just before its SIGSTOP: a SIGCONT sent before the stop would be lost.
    let stat = format!("/proc/{pid}/stat");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&stat).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    }) {
        assert!(t0.elapsed().as_secs() < 30, "bench never stopped at {step}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: signalling our own (stopped) child.
    unsafe {
        libc::kill(pid, libc::SIGINT);
        libc::kill(pid, libc::SIGCONT);
    }
    std::io::Read::read_to_string(&mut err, &mut said).expect("read the rest of stderr");
    let status = child.wait().expect("wait for bench");
    let text = out.join().expect("stdout reader");
    (status.code(), records(&text), said)
}

#[test]
#[ignore = "needs root and BTF"]
fn ctrl_c_in_every_phase_gives_130_and_what_was_measured() {
    require_root();
    let args = [
        "--json",
        "--limits",
        "1024,2048",
        "--open-fds",
        "3",
        "--strategies",
        "close-loop,close-range",
        "-n",
        "40",
        "--batch",
        "10",
    ];
    for step in ["bench-timed", "bench-traced", "bench-fit"] {
        let (code, recs, stderr) = bench_interrupted_at(step, &args);
        assert_eq!(code, Some(130), "{step}: {stderr}");
        assert!(!stderr.contains("error"), "{step}: {stderr}");
        let cells = of_type(&recs, "cell");
        assert!(
            !cells.is_empty(),
            "{step}: the cells measured are out: {stderr}"
        );
        let spawns: Vec<u64> = cells
            .iter()
            .map(|c| c["spawns"].as_u64().unwrap())
            .collect();
        let traced: Vec<u64> = cells
            .iter()
            .map(|c| c["traced_spawns"].as_u64().unwrap_or(0))
            .collect();
        match step {
            // One batch of one cell was timed before the pause: no cell is complete, and
            // nothing is traced.
            "bench-timed" => {
                assert!(spawns.iter().all(|&n| n < 40), "{step}: {spawns:?}");
                assert!(traced.iter().all(|&n| n == 0), "{step}: {traced:?}");
            }
            // Every cell timed, none traced (the pause comes before the first).
            "bench-traced" => {
                assert_eq!(spawns, [40; 4], "{step}");
                assert_eq!(traced, [0; 4], "{step}");
                let notes: Vec<&str> = of_type(&recs, "note")
                    .iter()
                    .filter_map(|n| n["message"].as_str())
                    .collect();
                assert!(
                    notes
                        .iter()
                        .any(|m| m.contains("interrupted in the traced pass")),
                    "{step}: {notes:?}"
                );
            }
            // Everything measured: cells, traced columns and fits.
            _ => {
                assert_eq!(spawns, [40; 4], "{step}");
                assert_eq!(traced, [3; 4], "{step}");
                assert_eq!(of_type(&recs, "fit").len(), 2, "{step}: {recs:?}");
            }
        }
    }
}
