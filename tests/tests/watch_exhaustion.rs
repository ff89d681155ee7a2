//! `fdaudit watch`'s `fdaudit_open_fds` beside `fdaudit_nofile_soft`, as a real Prometheus
//! (Debian's) stores them from a real `watch`, read through the Grafana panel's queries
//! (from deploy/grafana/fdaudit-dashboard.json) and the exhaustion alert's expression (from
//! deploy/prometheus/fdaudit-rules.yml), neither restated here (issue #40 item 6).
//!
//! Root: loads the eBPF programs; run under `flock /tmp/fdaudit-root.lock`.

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::watch::{
    free_port, http_get, prom_query, prom_value, sample, serial, start_prometheus, start_watch,
    DockerCgroup, Reaped, TempDir,
};

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// Opens N fds of /dev/null (close-on-exec, so they stay its own), sets its soft
/// RLIMIT_NOFILE to LIMIT (0: one more than the fds it then holds), prints `ready BASE
/// LIMIT` (BASE: the fds it held before) and then opens PER_TICK more every 100 ms until
/// the limit is near, holding every one until it is killed.
const HOLDER: &str = r#"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = -1; /* the directory's own fd */
    if (!d) exit(2);
    while (readdir(d)) n++;
    closedir(d);
    return n - 2; /* . and .. */
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int n = atoi(argv[1]), per_tick = atoi(argv[2]);
    rlim_t limit = strtoul(argv[3], 0, 10);
    int base = count_fds();
    for (int i = 0; i < n; i++)
        if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0) return 3;
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r)) return 4;
    r.rlim_cur = limit ? limit : (rlim_t)count_fds() + 1;
    if (setrlimit(RLIMIT_NOFILE, &r)) return 5;
    printf("ready %d %lu\n", base, (unsigned long)r.rlim_cur);
    fflush(stdout);
    for (;;) {
        usleep(100000);
        for (int i = 0; i < per_tick && count_fds() + 16 < (int)r.rlim_cur; i++)
            if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0) return 6;
    }
}
"#;

/// One fixture process in the container: (the process, its program's name, BASE, LIMIT).
fn hold(cg: &DockerCgroup, exe: &std::path::Path, args: &str) -> (Reaped, String, u64, u64) {
    let procs = cg.scope.join("cgroup.procs");
    let mut child = Reaped(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}' && exec '{}' {args}",
                procs.display(),
                exe.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the fixture"),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read the fixture's ready line");
    let w: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    assert!(
        line.starts_with("ready ") && w.len() == 2,
        "the fixture failed: {line:?} ({:?})",
        child.0.try_wait()
    );
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    (child, name, w[0], w[1])
}

/// Entries of /proc/PID/fd now.
fn proc_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the fixture's fds")
        .count() as u64
}

/// The expression of alert `name` in the rules file: the `expr:` line after `- alert: name`.
fn alert_expr(rules: &str, name: &str) -> String {
    let after = rules
        .split(&format!("- alert: {name}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no alert {name} in the rules"));
    let expr = after
        .lines()
        .find_map(|l| l.trim().strip_prefix("expr: "))
        .expect("the alert's expr");
    assert!(!expr.starts_with('|'), "a one-line expr: {expr}");
    expr.to_owned()
}

/// The queries of the dashboard's panel on `fdaudit_open_fds`, by refId, Grafana's
/// variables filled as the deploy tests fill them.
fn panel_queries() -> Vec<(String, String)> {
    let path = repo().join("deploy/grafana/fdaudit-dashboard.json");
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).unwrap();
    let panels = dash["panels"].as_array().expect("panels");
    let panel = panels
        .iter()
        .find(|p| p.to_string().contains("fdaudit_open_fds"))
        .expect("a panel on fdaudit_open_fds");
    panel["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| {
            let expr = t["expr"].as_str().expect("expr");
            (
                t["refId"].as_str().expect("refId").to_owned(),
                expr.replace("$instance", ".*")
                    .replace("$__rate_interval", "5m"),
            )
        })
        .collect()
}

/// The value of the sample of `results` for program `child` in container `id`.
fn of(results: &[Value], id: &str, child: &str) -> Option<f64> {
    results
        .iter()
        .find(|r| r["metric"]["container_id"] == id && r["metric"]["child"] == child)
        .map(prom_value)
}

/// A holder of N fds and a leaker in a container named like Docker's, `watch` scanning
/// every second, Prometheus scraping it every second. Then, at one moment: `fdaudit_open_fds`
/// is the holder's `/proc/PID/fd` count (N + what it held before), `fdaudit_nofile_soft` its
/// limit; the panel's "now" query is their ratio and its projection of the flat holder the
/// same, the leaker's above 1; the alert's expression holds the leaker and not the holder,
/// which sits one fd under its limit.
#[test]
#[ignore = "needs root"]
fn a_real_prometheus_runs_the_exhaustion_panel_and_alert_on_watchs_open_fds() {
    let _g = fdaudit_tests::guard();
    let _serial = serial();
    const N: u64 = 200;
    let holder_exe = fdaudit_tests::build_c_fixture("fd-holder", HOLDER);
    let leaker_exe = fdaudit_tests::build_c_fixture("fd-leaker", HOLDER);
    let tmp = TempDir::new("prom-open-fds");
    let cg = DockerCgroup::new("open-fds");
    let watch_port = free_port();
    let _w = start_watch(watch_port, &["--scan-interval", "1"]);
    let (holder, holder_name, base, holder_limit) = hold(&cg, &holder_exe, &format!("{N} 0 0"));
    // 20 fds a second against a limit of 4096: far from it for this test's minute or two,
    // on course to pass it within the alert's 4 hours.
    let (leaker, leaker_name, _, _) = hold(&cg, &leaker_exe, "10 2 4096");
    let want = proc_fds(holder.0.id());
    assert_eq!(
        want,
        N + base,
        "the holder holds N more than it started with"
    );
    assert_eq!(holder_limit, want + 1);
    let id = cg.id.clone();
    // Prometheus starts once a scan has seen the holder as it stays (a scan during its
    // start would give its flat count a slope).
    let sel = format!(
        "container_id=\"{id}\",cgroup=\"{}\",child=\"{holder_name}\"",
        {
            let parent = cg.parent.file_name().unwrap().to_string_lossy();
            format!("/{parent}/docker-{id}.scope")
        }
    );
    let t0 = Instant::now();
    loop {
        let (_, body) = http_get(watch_port, "/metrics").expect("watch is listening");
        if sample(&body, "fdaudit_nofile_soft", &sel) == Some(holder_limit as f64) {
            assert_eq!(
                sample(&body, "fdaudit_open_fds", &sel),
                Some(want as f64),
                "{body}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no scan saw the holder ({sel}): {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_prom, prom_port) = start_prometheus(&tmp.0, watch_port);

    // Enough samples of both in Prometheus for a slope (the scans and scrapes are 1 s apart).
    let enough = format!(
        "count_over_time(fdaudit_open_fds{{container_id=\"{id}\",child=\"{leaker_name}\"}}[1m])"
    );
    let t0 = Instant::now();
    while prom_query(prom_port, &enough)
        .and_then(|r| r.first().map(prom_value))
        .is_none_or(|n| n < 8.0)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "Prometheus has too few samples of {enough}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let q = |query: &str| prom_query(prom_port, query).expect("Prometheus answers");
    let open = q(&format!("fdaudit_open_fds{{{sel}}}"));
    assert_eq!(
        open.first().map(prom_value),
        Some(want as f64),
        "fdaudit_open_fds is /proc/PID/fd's count ({want}): {open:?}"
    );
    assert_eq!(
        proc_fds(holder.0.id()),
        want,
        "the holder's fds did not move"
    );
    let soft = q(&format!("fdaudit_nofile_soft{{{sel}}}"));
    assert_eq!(soft.first().map(prom_value), Some(holder_limit as f64));

    let panel = panel_queries();
    assert_eq!(panel.len(), 2, "now and projected: {panel:?}");
    let (now, projected) = (q(&panel[0].1), q(&panel[1].1));
    let share = want as f64 / holder_limit as f64;
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
    assert!(
        close(of(&now, &id, &holder_name), share),
        "panel {}: the holder at {want}/{holder_limit}: {now:?}",
        panel[0].1
    );
    assert!(
        close(of(&projected, &id, &holder_name), share),
        "panel {}: a flat count projects to itself: {projected:?}",
        panel[1].1
    );
    assert!(
        of(&now, &id, &leaker_name).is_some_and(|v| v < 1.0)
            && of(&projected, &id, &leaker_name).is_some_and(|v| v > 1.0),
        "the leaker under its limit now, past it in 4 h: {now:?} {projected:?}"
    );

    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/fdaudit-rules.yml"))
        .expect("the rules");
    let expr = alert_expr(&rules, "FdauditFdExhaustionPredicted");
    let firing = q(&expr);
    let ours: Vec<&Value> = firing
        .iter()
        .filter(|r| r["metric"]["container_id"] == id.as_str())
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "{expr}: the leaker, not the holder one fd under its limit: {firing:?}"
    );
    assert_eq!(ours[0]["metric"]["child"], leaker_name.as_str(), "{ours:?}");
    drop((holder, leaker));
}
