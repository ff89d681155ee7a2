//! `fdaudit trace` against fixture spawners whose behaviour is known exactly. These load the
//! real eBPF programs and trace real children, so they need root (CI runs them as root).

use crate::common;

use std::collections::BTreeSet;

use common::*;
use serde_json::Value;

#[test]
#[ignore = "needs root and BTF"]
fn close_loop_counts_every_close_and_every_ebadf() {
    let _g = guard();
    let (spawns, summary) = true_spawns_and_summary("close-loop", 1024, 10, 3);
    let probe_cost_ns = summary["probe_cost_ns"].as_f64().expect("probe cost");
    assert!(probe_cost_ns > 0.0, "the probes cost something: {summary}");
    for s in spawns {
        assert_eq!(u(&s["close_calls"]), 1021, "{s}");
        // fds 3..=9 are open in the child: 7 closes succeed.
        assert_eq!(u(&s["close_ebadf"]), 1014, "{s}");
        assert_eq!(s["strategy"], "close-loop");
        assert_eq!(u(&s["close_loop_bound"]), 1024);
        assert_eq!(u(&s["leaked_fd_count"]), 0, "{s}");
        // The untraced estimate is the window less the probes' cost for each counted
        // syscall: 1021 closes and the exec.
        let charged = (probe_cost_ns * f64::from(1021 + 1)) as u64;
        assert!(u(&s["window_ns"]) > charged, "{s}");
        assert_eq!(
            u(&s["window_corrected_ns"]),
            u(&s["window_ns"]) - charged,
            "{s}"
        );
        assert_eq!(s["flags"].as_array().unwrap().len(), 0, "{s}");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn close_loop_to_the_hard_limit() {
    let _g = guard();
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    let limit = hard.rlim_max.min(1 << 20) as u32;
    for s in true_spawns("close-loop", limit, 3, 2) {
        assert_eq!(u(&s["close_calls"]), u64::from(limit - 3), "{s}");
        assert_eq!(u(&s["close_ebadf"]), u64::from(limit - 3), "{s}");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn close_range_is_one_call_with_its_range() {
    let _g = guard();
    for s in true_spawns("close-range", 1024, 10, 2) {
        assert_eq!(u(&s["close_range_calls"]), 1, "{s}");
        assert_eq!(s["close_ranges"][0], serde_json::json!([3, u32::MAX, 0]));
        assert_eq!(u(&s["close_calls"]), 0);
        assert_eq!(s["strategy"], "close-range");
        assert_eq!(u(&s["leaked_fd_count"]), 0);
    }
    // A kernel that refuses CLOSE_RANGE_CLOEXEC (5.10: close_range exists, the flag is EINVAL;
    // 5.11+ takes it) closes nothing for close-range-cloexec. The call is seen all the same,
    // with its flag, and the 7 held fds leak as they do with none.
    let refused = fdaudit_tests::close_range_cloexec_errno();
    if let Some(errno) = refused {
        assert_eq!(
            errno,
            libc::EINVAL,
            "close_range exists (above), the flag is refused"
        );
    }
    for s in true_spawns("close-range-cloexec", 1024, 10, 1) {
        assert_eq!(
            s["close_ranges"][0],
            serde_json::json!([3, u32::MAX, 4]),
            "{s}"
        );
        assert_eq!(u(&s["close_range_calls"]), 1, "{s}");
        assert_eq!(s["strategy"], "close-range", "{s}");
        if refused.is_none() {
            // CLOSE_RANGE_CLOEXEC marks them; the exec closes them: nothing leaks.
            assert_eq!(u(&s["leaked_fd_count"]), 0, "{s}");
        } else {
            assert_eq!(u(&s["leaked_fd_count"]), 7, "{s}");
            assert_eq!(leaked_fd_numbers(&s), (3..10).collect(), "{s}");
        }
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn fcntl_poll_and_procfd_scans() {
    let _g = guard();
    for s in true_spawns("fcntl-loop", 1024, 10, 1) {
        assert_eq!(u(&s["fcntl_setfd_calls"]), 1021, "{s}");
        assert_eq!(s["strategy"], "fcntl-scan");
    }
    for s in true_spawns("poll-scan", 1024, 10, 1) {
        assert_eq!(u(&s["poll_calls"]), 1, "{s}");
        assert_eq!(u(&s["poll_nfds_max"]), 1024);
        assert_eq!(u(&s["close_calls"]), 7, "only the open fds are closed");
        assert_eq!(u(&s["close_ebadf"]), 0);
        assert_eq!(s["strategy"], "poll-scan");
    }
    for s in true_spawns("procfd-walk", 1024, 10, 1) {
        assert_eq!(u(&s["procfd_opens"]), 1, "{s}");
        assert!(u(&s["getdents64_calls"]) >= 1);
        // The 7 open fds and the directory itself.
        assert_eq!(u(&s["close_calls"]), 8);
        assert_eq!(u(&s["close_ebadf"]), 0);
        assert_eq!(s["strategy"], "procfd-walk");
    }
    for s in true_spawns("none", 1024, 10, 1) {
        assert_eq!(u(&s["leaked_fd_count"]), 7, "{s}");
        assert_eq!(s["strategy"], "none");
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn posix_spawn_leaks_fd_7_with_its_path() {
    let _g = guard();
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (spawns, summary, out) = trace(&[], &as_strs(&cmd));
    assert!(out.status.success());
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    let s = &spawns[0];
    assert_eq!(s["parent_comm"], "trace-fixture");
    assert_eq!(leaked_fd_numbers(s), BTreeSet::from([7]), "{s}");
    let f = &s["leaked_fds"][0];
    assert_eq!(f["kind"], "regular");
    assert_eq!(f["target"], secret.as_str());
    assert_eq!(f["access"], "r");
    assert_eq!(u(&summary["totals"]["spawns_with_leaks"]), 1);
}

#[test]
#[ignore = "needs root and BTF"]
fn fail_on_leak_sets_the_exit_status() {
    let _g = guard();
    let secret = secret_file();
    let cmd = fixture(&["leak7", secret.as_str()]);
    let (_, _, out) = trace(&["--fail-on-leak"], &as_strs(&cmd));
    assert_eq!(out.status.code(), Some(3));
    let (_, _, out) = trace(&["--fail-on-leak"], &as_strs(&fixture(&["vfork"])));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn vfork_thread_exec_failed_exec_and_grandchild() {
    let _g = guard();
    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["vfork"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(spawns[0]["exec_path"], "/bin/true");
    assert_eq!(spawns[0]["parent_comm"], "trace-fixture");

    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["thread-exec"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    let tid = u(&spawns[0]["exec_tid"]);
    assert_ne!(tid, u(&spawns[0]["pid"]), "exec came from a second thread");

    let (spawns, _, _) = trace(&[], &as_strs(&fixture(&["failed-exec"])));
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(u(&spawns[0]["exec_attempts"]), 2);
    assert_eq!(spawns[0]["exec_path"], "/bin/true");

    let (recs, out) = trace_records(&[], &as_strs(&fixture(&["grandchild"])));
    assert!(out.status.success());
    let spawns: Vec<&Value> = recs.iter().filter(|r| r["type"] == "spawn").collect();
    let summary = recs.last().unwrap();
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    // The exec'ing process is a grandchild: its parent is the fixture's fork-only child,
    // not the fixture itself (the traced command, whose pid fdaudit announces in a note).
    let root: u64 = recs
        .iter()
        .filter(|r| r["type"] == "note")
        .find_map(|r| {
            r["message"]
                .as_str()?
                .split_once("tracing command (pid ")
                .and_then(|(_, r)| r.split(')').next())
                .and_then(|p| p.parse().ok())
        })
        .unwrap_or_else(|| panic!("no command pid in {recs:?}"));
    let parent = u(&spawns[0]["parent_pid"]);
    assert_ne!(
        parent, root,
        "the parent is the fork-only child: {}",
        spawns[0]
    );
    assert!(
        parent > root,
        "the child was forked after the fixture: {}",
        spawns[0]
    );
    assert_eq!(spawns[0]["parent_comm"], "trace-fixture");
    assert_eq!(u(&summary["fork_only_children"]), 1, "{summary}");
}

#[test]
#[ignore = "needs root and BTF"]
fn exec_chain_counts_the_helper_and_leaks_at_the_last_exec() {
    let _g = guard();
    let secret = secret_file();
    let cmd = fixture(&["chain", secret.as_str()]);
    let (spawns, summary, out) = trace(&["--fail-on-leak"], &as_strs(&cmd));
    assert_eq!(out.status.code(), Some(0), "the last image leaked nothing");
    assert_eq!(spawns.len(), 2, "{spawns:?}");
    let (helper, fin) = (&spawns[0], &spawns[1]);
    assert_eq!(helper["leaked_fds"][0]["fd"], 7, "{helper}");
    assert_eq!(fin["exec_path"], "/bin/true");
    assert_eq!(fin["pid"], helper["pid"]);
    assert!(
        fin["flags"]
            .as_array()
            .unwrap()
            .contains(&Value::from("reexec")),
        "{fin}"
    );
    assert_eq!(
        u(&fin["close_range_calls"]),
        1,
        "the helper's close_range: {fin}"
    );
    assert_eq!(fin["strategy"], "close-range");
    assert_eq!(u(&fin["leaked_fd_count"]), 0);
    assert!(u(&fin["window_ns"]) > 0);
    assert_eq!(u(&summary["totals"]["spawns_with_leaks"]), 0);
    assert_eq!(u(&summary["totals"]["transient_leaked_fd_count"]), 1);
}

#[test]
#[ignore = "needs root and BTF"]
fn a_child_whose_every_exec_fails_is_one_failed_exec() {
    let _g = guard();
    let (spawns, _, _) = trace(&[], &["sh", "-c", "/nonexistent/fdaudit-test; true"]);
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(spawns[0]["exec_ok"], false);
    assert_eq!(u(&spawns[0]["exec_attempts"]), 1);
    assert_eq!(spawns[0]["parent_comm"], "sh");
    assert_eq!(spawns[0]["exec_path"], "/nonexistent/fdaudit-test");
    assert_eq!(spawns[0]["exec_error"], "ENOENT");
    // The kernel keeps 255 bytes of a failed exec's path: exactly that many is whole, one
    // more is cut and flagged.
    let flags = |s: &Value| s["flags"].as_array().cloned().unwrap_or_default();
    let exact = format!("/nonexistent/{}", "a".repeat(242));
    let longer = format!("{exact}/b");
    assert_eq!(exact.len(), 255);
    for (path, cut) in [(&exact, false), (&longer, true)] {
        let (spawns, _, _) = trace(&[], &["sh", "-c", &format!("{path}; true")]);
        assert_eq!(spawns.len(), 1, "{spawns:?}");
        assert_eq!(spawns[0]["exec_path"].as_str(), Some(exact.as_str()));
        assert_eq!(spawns[0]["exec_error"], "ENOENT");
        assert_eq!(
            flags(&spawns[0]).contains(&Value::from("path_partial")),
            cut,
            "{path}: {}",
            spawns[0]
        );
    }
}

#[test]
#[ignore = "needs root and BTF"]
fn exit_status_is_the_commands() {
    let _g = guard();
    let (_, _, out) = trace(&[], &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let (_, _, out) = trace(&[], &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
}

#[test]
#[ignore = "needs root and BTF"]
fn read_storm_counts_match_the_fixture() {
    let _g = guard();
    let (_, summary, out) = trace(&["--reads"], &as_strs(&fixture(&["read-bytes", "1000"])));
    assert!(out.status.success());
    let storms = summary["read_storms"].as_array().expect("read_storms");
    let s = storms
        .iter()
        .find(|s| s["fd"] == 9)
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(
        u(&s["calls"]),
        1001,
        "1000 one-byte reads and the one that saw EOF"
    );
    assert_eq!(u(&s["bytes"]), 1000);
    assert!(s["target"].as_str().unwrap().starts_with("pipe:["));
    assert_eq!(s["comm"], "trace-fixture");
}

#[test]
#[ignore = "needs root and BTF"]
fn dup2_redirections_in_the_window_are_counted() {
    let _g = guard();
    // bash opens /dev/null in the child, then dup2()s it onto fd 5 before exec'ing.
    let (spawns, summary, _) = trace(&[], &["bash", "-c", "/bin/true 5</dev/null; true"]);
    let t: Vec<&Value> = spawns
        .iter()
        .filter(|s| s["exec_path"] == "/bin/true")
        .collect();
    assert_eq!(t.len(), 1, "{spawns:?}");
    assert!(u(&t[0]["dup_calls"]) >= 1, "{}", t[0]);
    assert!(u(&summary["totals"]["dup_calls"]) >= 1, "{summary}");
    // Without a redirection nothing is dup'ed.
    let (spawns, _, _) = trace(&[], &["bash", "-c", "/bin/true; true"]);
    let t: Vec<&Value> = spawns
        .iter()
        .filter(|s| s["exec_path"] == "/bin/true")
        .collect();
    assert_eq!(u(&t[0]["dup_calls"]), 0, "{}", t[0]);
}

/// `fdaudit trace --json -o FILE -- cmd` with extra environment (the records go to the file:
/// with `-- CMD` they never share CMD's stdout); the spawn records of `exec_path`, every
/// record checked against the schema.
fn spawns_with_env(env: &[(&str, &str)], cmd: &[&str], exec_path: &str) -> Vec<Value> {
    let (out, text) = fdaudit_tests::trace_to_file("trace-env.jsonl", |c| {
        c.arg("--").args(cmd).envs(env.iter().copied());
    });
    fdaudit_tests::assert_success(&out);
    fdaudit_tests::records(&text)
        .into_iter()
        .filter(|s| s["type"] == "spawn" && s["exec_path"] == exec_path)
        .collect()
}

fn leaked_fd_numbers(s: &Value) -> BTreeSet<u64> {
    leaked(s).into_iter().map(|(fd, _)| fd).collect()
}

fn leaked(s: &Value) -> Vec<(u64, String)> {
    s["leaked_fds"]
        .as_array()
        .unwrap_or_else(|| panic!("no leaked_fds: {s}"))
        .iter()
        .map(|f| (u(&f["fd"]), f["target"].as_str().unwrap_or("").to_string()))
        .collect()
}

fn has_flag(s: &Value, flag: &str) -> bool {
    s["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

/// The exec walk kernels without bpf_loop get (forced here): fd 7 with its path, and a
/// table larger than its bound reported as cut, with the bounded_walk flag.
#[test]
#[ignore = "needs root and BTF"]
fn bounded_walk_reports_fd_7_and_flags_a_table_past_its_bound() {
    let _g = guard();
    let forced = [("FDAUDIT_EXEC_WALK", "bounded")];
    let small = ["sh", "-c", "exec 7</etc/hostname; exec /bin/true"];
    let s = &spawns_with_env(&forced, &small, "/bin/true")[0];
    assert!(
        leaked(s).contains(&(7, "/etc/hostname".into())),
        "fd 7 missing: {s}"
    );
    assert!(!has_flag(s, "bounded_walk"), "a small table is whole: {s}");
    // fd 13000 grows the table to 16384 entries, past the bounded walk's 12288; fd 12000
    // is within it, in its last chunk.
    let big = [
        "bash",
        "-c",
        "ulimit -n 16384 && exec 7</etc/hostname 12000</etc/hostname 13000</etc/hostname \
         && exec /bin/true",
    ];
    let s = &spawns_with_env(&forced, &big, "/bin/true")[0];
    let fds = leaked(s);
    assert!(fds.contains(&(7, "/etc/hostname".into())), "{s}");
    assert!(fds.contains(&(12000, "/etc/hostname".into())), "{s}");
    assert!(!fds.iter().any(|(fd, _)| *fd == 13000), "{s}");
    assert!(
        has_flag(s, "bounded_walk") && has_flag(s, "fdtable_truncated"),
        "{s}"
    );
}

/// argv is copied in the kernel at exec, byte for byte: empty elements (first, middle and
/// last), a space and bytes that are not UTF-8 all come back. The command runs with an empty
/// environment, so the new image's argument area ends a few bytes below the top of its stack:
/// a read of the whole argv buffer from there faults (in the VM guests, whose environment is
/// small, such a read once gave only argv[0]). An argv longer than the buffer is cut and
/// flagged.
#[test]
#[ignore = "needs root and BTF"]
fn argv_is_exact_at_the_top_of_a_bare_stack() {
    use std::os::unix::ffi::OsStrExt as _;
    let _g = guard();
    let run = |args: &[&[u8]]| -> Value {
        let (out, text) = fdaudit_tests::trace_to_file("argv.jsonl", |c| {
            c.args(["--", "/bin/sh", "-c", "exec /bin/true \"$@\"", "sh"])
                .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
                .env_clear();
        });
        fdaudit_tests::assert_success(&out);
        fdaudit_tests::records(&text)
            .into_iter()
            .find(|s| s["type"] == "spawn" && s["exec_path"] == "/bin/true")
            .unwrap_or_else(|| panic!("no spawn of /bin/true in {text}"))
    };
    let argv_bytes = |s: &Value| -> Vec<Vec<u8>> {
        match s.get("argv_b64") {
            Some(b) => b
                .as_array()
                .unwrap()
                .iter()
                .map(|e| fdaudit_tests::b64(e.as_str().unwrap()))
                .collect(),
            None => s["argv"]
                .as_array()
                .unwrap_or_else(|| panic!("no argv: {s}"))
                .iter()
                .map(|e| e.as_str().unwrap().as_bytes().to_vec())
                .collect(),
        }
    };

    let args: [&[u8]; 6] = [b"", b"x", b"", b"a b", b"\xff\xfe", b""];
    let s = run(&args);
    let mut want = vec![b"/bin/true".to_vec()];
    want.extend(args.iter().map(|a| a.to_vec()));
    assert_eq!(argv_bytes(&s), want, "{s}");
    assert!(
        !has_flag(&s, "argv_truncated") && !has_flag(&s, "read_failed"),
        "{s}"
    );

    let long = vec![b'y'; 400];
    let s = run(&[b"", &long]);
    let got = argv_bytes(&s);
    assert!(has_flag(&s, "argv_truncated"), "{s}");
    assert_eq!(got[..2], [b"/bin/true".to_vec(), Vec::new()], "{s}");
    assert!(
        got[2].len() < long.len() && got[2].iter().all(|&b| b == b'y'),
        "{s}"
    );
}

/// `bash -c 'exec 7<f; /bin/true'`: bash opened fd 7 and exec'd /bin/true in the traced
/// command's own process, so the parent of that spawn is bash (the image that exec'd, pid
/// and comm), not fdaudit, in the record and in the summary's group.
#[test]
#[ignore = "needs root and BTF"]
fn the_parent_of_a_re_exec_is_the_image_that_exec_d() {
    let _g = guard();
    let (spawns, summary, _) = trace(&[], &["bash", "-c", "exec 7</etc/hostname; /bin/true"]);
    let t = spawns
        .iter()
        .find(|s| {
            s["exec_path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/true"))
        })
        .unwrap_or_else(|| panic!("no spawn of true: {spawns:?}"));
    assert_eq!(t["parent_comm"], "bash", "{t}");
    assert_eq!(t["parent_pid"], t["pid"], "{t}");
    assert!(
        t["leaked_fds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["fd"] == 7 && f["target"] == "/etc/hostname"),
        "{t}"
    );
    let groups = summary["groups"].as_array().unwrap();
    assert!(!groups.is_empty(), "{summary}");
    for g in groups {
        assert_eq!(g["parent_comm"], "bash", "{summary}");
    }
}

/// fexecve() of a memfd: the kernel's file name is `/dev/fd/N`, but the record names the
/// image that ran, `/memfd:payload (deleted)`.
#[test]
#[ignore = "needs root and BTF"]
fn an_exec_through_an_fd_names_the_image_it_ran() {
    let _g = guard();
    let fixture = fdaudit_tests::target_bin("trace-fixture");
    let (spawns, _, _) = trace(&[], &[fixture.to_str().unwrap(), "fexecve-memfd"]);
    let s = spawns
        .iter()
        .find(|s| s["argv"][1] == "linger")
        .unwrap_or_else(|| panic!("no spawn of the memfd: {spawns:?}"));
    assert_eq!(s["exec_path"], "/memfd:payload (deleted)", "{s}");
}
