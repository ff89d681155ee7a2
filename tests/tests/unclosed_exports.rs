//! `fdaudit unclosed` (issue #40 items 1, 2 and 4): the opened/closed counts per stack,
//! each process's projected time to its NOFILE limit with the fit's quality, the pprof
//! profile read back by `go tool pprof -top` (golang-go), and `--cgroup`. Root only (eBPF);
//! gcc builds the C service of unclosed.rs.

use std::{os::unix::process::CommandExt as _, process::Command, time::Duration};

use fdaudit_tests::{guard, of_type, temp_path};

use super::{
    chains::Cgroup,
    unclosed::{attach_args, attach_with, c_service, process, stop, symbols, Service},
};

#[test]
#[ignore = "needs root"]
fn a_leak_s_rates_projection_and_pprof_profile_name_leak_one() {
    let _g = guard();
    let exe = c_service("unclosed-pprof");
    let mut svc = Service::start(Command::new(&exe).arg("3"));
    let out = temp_path("unclosed-pprof.jsonl");
    let pprof = temp_path("unclosed.pb.gz");
    let tracer = attach_with(
        svc.pid(),
        &out,
        &[
            "--interval".as_ref(),
            "0.3".as_ref(),
            "--pprof".as_ref(),
            pprof.as_os_str(),
        ],
    );
    let before = svc.open_fds();
    // Requests spread over interval reports: the fit has points on a rising line.
    for _ in 0..10 {
        assert_eq!(svc.request(), "done");
        std::thread::sleep(Duration::from_millis(150));
    }
    let grown = svc.open_fds() - before;
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(grown, 30, "the fixture leaks 3 fds per request");
    let p = process(&recs, svc.pid());
    assert_eq!(p["outstanding"], 30, "{p}");
    assert!(
        p["fit_points"].as_u64().unwrap() >= 3,
        "reports every 0.3 s: {p}"
    );
    let growth = p["growth_per_min"].as_f64().expect("a growth");
    assert!(growth > 0.0, "the leak grows: {p}");
    assert_eq!(
        p["limit_projection"], "limit",
        "its soft limit is known: {p}"
    );
    let secs = p["limit_in_secs"].as_f64().expect("seconds to the limit");
    let headroom = p["headroom"].as_f64().unwrap();
    assert!(
        (secs - headroom * 60.0 / growth).abs() < 0.01 * secs.max(1.0),
        "limit_in_secs = headroom / growth (each rounded to 3 decimals): {p}"
    );
    let r2 = p["fit_r2"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&r2), "{p}");
    // The leaked fds stay: each was seen opened, none closed; ok_one's never show.
    let last_report = recs
        .iter()
        .rposition(|r| r["type"] == "unclosed_report")
        .unwrap();
    let top = &of_type(&recs[last_report..], "unclosed_stack")[0];
    assert!(
        symbols(top).iter().any(|s| s.starts_with("leak_one")),
        "{top}"
    );
    assert_eq!(
        (top["opened"].as_u64(), top["closed"].as_u64()),
        (Some(30), Some(0)),
        "{top}"
    );
    assert!(top["opened_per_min"].as_f64().unwrap() > 0.0, "{top}");
    // pprof reads the profile back: leak_one holds the 30 fds.
    let run = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&pprof)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof (golang-go)");
    let text = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    let _ = std::fs::remove_file(&pprof);
    assert!(run.status.success(), "go tool pprof failed: {err}");
    assert!(text.contains("Type: outstanding_fds"), "{text}\n{err}");
    let line = text
        .lines()
        .find(|l| l.trim_end().ends_with(" leak_one"))
        .unwrap_or_else(|| panic!("no leak_one line: {text}"));
    // `flat flat% sum% cum cum% name`: leak_one's cumulative count is the 30 leaked.
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[3], "30", "leak_one's cum: {line}\n{text}");
}

#[test]
#[ignore = "needs root"]
fn an_idle_process_is_said_to_have_no_growth() {
    let _g = guard();
    let exe = c_service("unclosed-idle");
    let svc = Service::start(Command::new(&exe).arg("3"));
    let out = temp_path("unclosed-idle.jsonl");
    let tracer = attach_with(svc.pid(), &out, &["--interval".as_ref(), "0.3".as_ref()]);
    std::thread::sleep(Duration::from_millis(1200));
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    let p = process(&recs, svc.pid());
    assert_eq!(p["limit_projection"], "no growth", "{p}");
    assert_eq!(p["growth_per_min"].as_f64(), Some(0.0), "{p}");
    assert_eq!(p["limit_in_secs"], serde_json::Value::Null, "{p}");
    assert!(p["fit_points"].as_u64().unwrap() >= 3, "{p}");
}

#[test]
#[ignore = "needs root"]
fn a_cgroup_s_processes_there_before_and_started_after_are_followed() {
    let _g = guard();
    let exe = c_service("unclosed-cgroup");
    let cg = Cgroup::new();
    // One in the cgroup before fdaudit attaches.
    let mut before = Service::start(Command::new(&exe).arg("3"));
    std::fs::write(cg.leaf.join("cgroup.procs"), before.pid().to_string())
        .expect("move the service into the cgroup");
    let out = temp_path("unclosed-cgroup.jsonl");
    let name = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let tracer = attach_args(&out, &["--cgroup".as_ref(), name.as_ref()]);
    // One that execs there after: it moves itself in before its exec.
    let procs = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
        cg.leaf.join("cgroup.procs").as_os_str(),
    ))
    .unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg("2");
    // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec, on
    // a path made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n == 1 {
                Ok(())
            } else {
                Err(err)
            }
        })
    };
    let mut after = Service::start(&mut cmd);
    let grown_before = before.open_fds();
    for _ in 0..4 {
        assert_eq!(before.request(), "done");
        assert_eq!(after.request(), "done");
    }
    let grown_before = before.open_fds() - grown_before;
    let recs = stop(tracer, &out);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(grown_before, 12, "3 fds per request");
    let p = process(&recs, before.pid());
    assert_eq!(p["outstanding"], 12, "the member there at attach: {p}");
    let p = process(&recs, after.pid());
    // Its 5 own fds (made after its exec, followed) and 2 per request.
    assert_eq!(
        p["outstanding"],
        5 + 8,
        "the one that exec'd there later: {p}"
    );
    drop(before);
    drop(after);
    drop(cg);
}
