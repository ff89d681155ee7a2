//! `fdaudit doctor`: as root every program loads and attaches; as nobody it says which
//! capability is missing.

use std::process::Command;

use fdaudit_tests::{fdaudit, require_root};

#[test]
#[ignore = "needs root and BTF"]
fn root_loads_and_attaches_every_program() {
    require_root();
    let out = Command::new(fdaudit())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checks: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for prog in [
        "sched_process_fork",
        "sched_process_exec",
        "sched_process_exit",
        "sys_enter",
        "sys_exit",
    ] {
        let c = checks
            .iter()
            .find(|c| c["name"] == format!("program {prog}"))
            .unwrap_or_else(|| panic!("no check for {prog}: {stdout}"));
        assert_eq!(c["status"], "ok", "{c}");
    }
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{stdout}");
    // Which backend trace will use, and why.
    let backend = checks
        .iter()
        .find(|c| c["name"] == "backend")
        .unwrap_or_else(|| panic!("no backend check: {stdout}"));
    let detail = backend["detail"].as_str().unwrap_or_default();
    let want = match std::env::var("FDAUDIT_BACKEND").as_deref() {
        Ok("fentry") => "fentry: ",
        Ok("raw-tp") => "raw-tp: ",
        _ => "",
    };
    assert!(
        (detail.starts_with("fentry: ") || detail.starts_with("raw-tp: "))
            && detail.starts_with(want),
        "{backend}"
    );
}

#[test]
#[ignore = "needs root"]
fn unprivileged_user_is_told_the_missing_capability() {
    require_root();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(fdaudit())
        .arg("doctor")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");
}
