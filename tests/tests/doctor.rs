//! `fdaudit doctor`: as root every program loads and attaches; as nobody it says which
//! capability is missing.

use std::process::Command;

use fdaudit_tests::{fdaudit, records, require_root};

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
    let checks: Vec<serde_json::Value> = records(&stdout)
        .into_iter()
        .filter(|r| r["type"] == "check")
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
    // A feature is found (ok) or absent; "ok" never says "missing".
    for c in checks
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("feature "))
    {
        let (status, detail) = (&c["status"], c["detail"].as_str().unwrap());
        assert!(
            (status == "ok" && detail == "found") || status == "absent" || status == "warn",
            "{c}"
        );
        assert!(!detail.contains("missing") || status != "ok", "{c}");
    }
    // Which backend trace will use, and why.
    let backend = checks
        .iter()
        .find(|c| c["name"] == "backend")
        .unwrap_or_else(|| panic!("no backend check: {stdout}"));
    let detail = backend["detail"].as_str().unwrap_or_default();
    let env = std::env::var("FDAUDIT_BACKEND");
    let want = match env.as_deref() {
        Ok("fentry") => "fentry: ",
        Ok("tp") => "tp: ",
        Ok("raw-tp") => "raw-tp: ",
        _ => "",
    };
    assert!(
        ["fentry: ", "tp: ", "raw-tp: "]
            .iter()
            .any(|b| detail.starts_with(b))
            && detail.starts_with(want),
        "{backend}"
    );
    // auto: tp where it works (doctor mounts tracefs when missing), else raw-tp; fentry
    // passed over with whether it would work here (it is opt-in).
    if env.is_err() {
        let tracepoints = fdaudit_tests::syscall_tracepoints();
        let (starts, why) = if tracepoints {
            ("tp: ", "; tp costs least here)")
        } else {
            ("raw-tp: ", "; tp would not work here: ")
        };
        assert!(
            detail.starts_with(starts)
                && detail.contains("(auto: fentry is opt-in, --backend fentry; it ")
                && detail.contains(why),
            "{backend}"
        );
    }
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

/// Root without CAP_DAC_READ_SEARCH (dropped from the bounding set): doctor warns of the
/// fourth capability the README lists, and names it among those held when it is there.
#[test]
#[ignore = "needs root and BTF"]
fn a_missing_cap_dac_read_search_is_a_warning() {
    require_root();
    let run = |prefix: &[&str]| -> Vec<serde_json::Value> {
        let mut cmd = Command::new(prefix.first().copied().unwrap_or("env"));
        cmd.args(prefix.iter().skip(1))
            .arg(fdaudit())
            .args(["doctor", "--json"]);
        let out = cmd.output().expect("run fdaudit doctor");
        records(&String::from_utf8_lossy(&out.stdout))
            .into_iter()
            .filter(|r| r["type"] == "check")
            .collect()
    };
    let dropped = run(&[
        "setpriv",
        "--bounding-set=-dac_read_search",
        "--inh-caps=-dac_read_search",
        "--",
    ]);
    let warn = dropped
        .iter()
        .find(|c| c["name"] == "dac_read_search")
        .unwrap_or_else(|| panic!("no CAP_DAC_READ_SEARCH check: {dropped:?}"));
    assert_eq!(warn["status"], "warn", "{warn}");
    let full = run(&[]);
    let caps = full
        .iter()
        .find(|c| c["name"] == "capabilities")
        .unwrap_or_else(|| panic!("no capabilities check: {full:?}"));
    assert!(
        caps["detail"]
            .as_str()
            .is_some_and(|d| d.contains("CAP_DAC_READ_SEARCH")),
        "{caps}"
    );
    assert!(
        full.iter().all(|c| c["name"] != "dac_read_search"),
        "{full:?}"
    );
}
