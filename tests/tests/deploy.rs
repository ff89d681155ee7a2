//! The deployment files are valid: the systemd unit for `systemd-analyze verify`, the
//! Kubernetes manifests for a schema validator with the Kubernetes OpenAPI schemas bundled
//! (`kubernetes-validate` from PyPI, offline), the ServiceMonitor for the Prometheus
//! Operator CRD's schema (npm `@kubernetes-models/prometheus-operator`, offline), the
//! alerting rules for `promtool test rules`; all installed by .ci/setup.

use std::{path::PathBuf, process::Command};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// Runs `systemd-analyze verify` on `unit_text` installed as fdaudit.service with
/// ExecStart pointing at the fdaudit under test: (success, stderr).
fn verify_unit(unit_text: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("fdaudit-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("failed to create a temp dir");
    let unit = dir.join("fdaudit.service");
    let exe = fdaudit_tests::fdaudit();
    let text = unit_text.replace("/usr/local/bin/fdaudit", &exe.to_string_lossy());
    std::fs::write(&unit, text).expect("failed to write the unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("failed to run systemd-analyze (package systemd)");
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn systemd_unit_verifies_cleanly() {
    let text = std::fs::read_to_string(repo().join("deploy/fdaudit.service"))
        .expect("deploy/fdaudit.service exists");
    let (ok, stderr) = verify_unit(&text);
    assert!(
        ok && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
    // The capabilities are the four tracing and /proc reading need, and nothing else.
    let caps = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds capabilities");
    let mut caps: Vec<&str> = caps.split_whitespace().collect();
    caps.sort();
    assert_eq!(
        caps,
        [
            "CAP_BPF",
            "CAP_DAC_READ_SEARCH",
            "CAP_PERFMON",
            "CAP_SYS_PTRACE"
        ]
    );
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
    ] {
        assert!(
            text.lines().any(|l| l == hardening),
            "unit lacks {hardening}"
        );
    }
    assert!(text.contains("ExecStart=/usr/local/bin/fdaudit watch "));
    assert!(
        text.contains("#ExecStart=/usr/local/bin/fdaudit watch --listen 0.0.0.0:9749")
            && text.contains("--web-config /etc/fdaudit/web.yml"),
        "the unit shows how to turn TLS and basic auth on"
    );
    // The check itself catches a broken unit.
    let (_, stderr) = verify_unit(&text.replace("ProtectSystem=strict", "ProtectSystem=strcit"));
    assert!(
        stderr.contains("strcit"),
        "a bad value went unnoticed: {stderr}"
    );
}

fn validate(path: &std::path::Path) -> (bool, String) {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .arg(path)
        .output()
        .expect("failed to run kubernetes-validate (pip install kubernetes-validate; .ci/setup)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn daemonset_validates_against_the_kubernetes_schema() {
    let path = repo().join("deploy/kubernetes/daemonset.yaml");
    let (ok, text) = validate(&path);
    assert!(ok, "kubernetes-validate: {text}");
    assert!(
        text.contains("daemonset/fdaudit"),
        "the DaemonSet was checked: {text}"
    );
    let yaml = std::fs::read_to_string(&path).expect("read the manifest");
    for needed in [
        "hostPID: true",
        "path: /sys/kernel/btf",
        "path: /sys/fs/cgroup",
        "prometheus.io/scrape: \"true\"",
        "- BPF",
        "- PERFMON",
        "privileged: false",
        "# - --web-config",
    ] {
        assert!(yaml.contains(needed), "the DaemonSet lacks {needed}");
    }
    // Both probes poll /healthz, which costs no scrape.
    for probe in ["readinessProbe:", "livenessProbe:"] {
        let block = yaml
            .split(probe)
            .nth(1)
            .unwrap_or_else(|| panic!("the DaemonSet has no {probe}"));
        let path = block.lines().find_map(|l| l.trim().strip_prefix("path: "));
        assert_eq!(path, Some("/healthz"), "{probe}");
    }
    // The validator rejects what the API server would (a misspelt field).
    let bad = std::env::temp_dir().join(format!("fdaudit-ds-{}.yaml", std::process::id()));
    std::fs::write(&bad, yaml.replace("hostPID:", "hostPid:")).expect("write a bad copy");
    let (ok, text) = validate(&bad);
    std::fs::remove_file(&bad).ok();
    assert!(
        !ok && text.contains("hostPid"),
        "a bad manifest passed: {text}"
    );
}

/// Runs tests/fixtures/kubernetes/validate-servicemonitor.mjs on `yaml`: (valid, output).
fn validate_servicemonitor(yaml: &str) -> (bool, String) {
    let path = std::env::temp_dir().join(format!("fdaudit-sm-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write the manifest");
    let out = Command::new("node")
        .arg(repo().join("tests/fixtures/kubernetes/validate-servicemonitor.mjs"))
        .arg(&path)
        .output()
        .expect("failed to run node (.ci/setup installs the validator's npm packages)");
    std::fs::remove_file(&path).ok();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn servicemonitor_validates_against_the_kubernetes_and_operator_schemas() {
    let path = repo().join("deploy/kubernetes/servicemonitor.yaml");
    let (ok, text) = validate(&path);
    assert!(
        ok && text.contains("passed for resource service/fdaudit"),
        "kubernetes-validate: {text}"
    );
    let yaml = std::fs::read_to_string(&path).expect("read the manifest");
    let (ok, text) = validate_servicemonitor(&yaml);
    assert!(
        ok && text.contains("valid servicemonitor/fdaudit"),
        "the ServiceMonitor: {text}"
    );
    // The commented HTTPS and basic auth endpoint, uncommented, is valid too.
    let at = yaml
        .find("      # scheme: https")
        .expect("the HTTPS example");
    let tls = format!(
        "{}{}",
        &yaml[..at],
        yaml[at..].replace("      # ", "      ")
    );
    let (ok, text) = validate_servicemonitor(&tls);
    assert!(
        ok && tls.contains("\n      scheme: https\n"),
        "HTTPS: {text}"
    );
    // The validator refuses what the operator's CRD refuses.
    for (from, to) in [
        ("scheme: https", "scheme: htps"),
        ("interval: 30s", "interval: soon"),
        ("  endpoints:", "  endpoint:"),
    ] {
        let (ok, text) = validate_servicemonitor(&tls.replace(from, to));
        assert!(!ok && text.contains("invalid"), "{to} passed: {text}");
    }
    // The Service selects the DaemonSet's pods by its port name.
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    assert!(ds.contains("- name: metrics") && yaml.contains("targetPort: metrics"));
}

fn promtool_check_rules(path: &std::path::Path) -> (bool, String) {
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(path)
        .output()
        .expect("failed to run promtool (package prometheus; .ci/setup)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn prometheus_rules_documented_queries_and_dashboard_parse() {
    let (ok, text) = promtool_check_rules(&repo().join("deploy/prometheus/fdaudit-rules.yml"));
    assert!(ok, "promtool check rules: {text}");

    // Every ```promql block of docs/fleet.md, as a recording rule, Grafana variables filled.
    let doc = std::fs::read_to_string(repo().join("docs/fleet.md")).expect("docs/fleet.md");
    let queries: Vec<String> = doc
        .split("```promql\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or("").trim().to_owned())
        .collect();
    assert!(
        queries.len() >= 8,
        "docs/fleet.md has {} queries",
        queries.len()
    );
    check_queries("docs", &queries);
    // The check catches a broken query.
    let broken: Vec<String> = queries
        .iter()
        .map(|q| q.replace("sum by (severity)", "sum by (severity"))
        .collect();
    assert!(
        !queries_parse("broken", &broken).0,
        "promtool accepted a broken query"
    );

    // The Grafana dashboard's queries too.
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/fdaudit-dashboard.json"))
            .expect("the dashboard exists"),
    )
    .expect("the dashboard is JSON");
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(
        exprs.len() >= 8,
        "the dashboard has {} queries",
        exprs.len()
    );
    check_queries("dashboard", &exprs);
    assert!(
        exprs.iter().any(|e| e.contains("boundary!=\"\"")),
        "no panel shows the leaks across a boundary"
    );
    assert!(
        exprs
            .iter()
            .any(|e| e.contains("fdaudit_leaked_files_total")),
        "no panel shows the leaks per file"
    );
}

/// Whether promtool parses every query (Grafana variables filled), as recording rules.
fn queries_parse(tag: &str, queries: &[String]) -> (bool, String) {
    let mut rules = String::from("groups:\n  - name: queries\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let q = q
            .replace("$__rate_interval", "5m")
            .replace("$instance", ".*");
        rules.push_str(&format!("      - record: query_{i}\n        expr: |\n"));
        for line in q.lines() {
            rules.push_str(&format!("          {line}\n"));
        }
    }
    let path = std::env::temp_dir().join(format!("fdaudit-{tag}-rules-{}.yml", std::process::id()));
    std::fs::write(&path, &rules).expect("write the rules");
    let (ok, text) = promtool_check_rules(&path);
    std::fs::remove_file(&path).ok();
    let all = text.contains(&format!("SUCCESS: {} rules found", queries.len()));
    (ok && all, format!("{text}\n{rules}"))
}

fn check_queries(tag: &str, queries: &[String]) {
    let (ok, text) = queries_parse(tag, queries);
    assert!(ok, "{tag}: {text}");
}

/// `promtool test rules` on `rules` and `tests` (file contents) side by side in a temporary
/// directory: (passed, output).
fn promtool_test_rules(rules: &str, tests: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("fdaudit-ruletest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    std::fs::write(dir.join("fdaudit-rules.yml"), rules).expect("write the rules");
    std::fs::write(dir.join("fdaudit-rules.test.yml"), tests).expect("write the tests");
    let out = Command::new("promtool")
        .args(["test", "rules", "fdaudit-rules.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("failed to run promtool (package prometheus; .ci/setup)");
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn every_alert_has_promtool_unit_tests_and_they_pass() {
    let dir = repo().join("deploy/prometheus");
    let rules = std::fs::read_to_string(dir.join("fdaudit-rules.yml")).expect("the rules");
    let tests = std::fs::read_to_string(dir.join("fdaudit-rules.test.yml")).expect("the tests");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 5, "alerts: {alerts:?}");
    for a in &alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n")),
            "{a} has no test in fdaudit-rules.test.yml"
        );
    }
    let (ok, text) = promtool_test_rules(&rules, &tests);
    assert!(
        ok && text.contains("SUCCESS"),
        "promtool test rules: {text}"
    );
    // The tests catch a pager that would fire on a cgroup move alone, one that misses a
    // leak's first (and only) increment, an exhaustion alert that pages on a burst or a step
    // (a short `for:`), and one that judges today's count instead of the projection.
    for (from, to) in [
        ("|root_inode)", "|root_inode|cgroup2_id)"),
        ("\n          or\n", "\n          and\n"),
        ("\n        for: 1h\n", "\n        for: 5m\n"),
        (
            "predict_linear(fdaudit_open_fds[1h], 4 * 3600)",
            "fdaudit_open_fds",
        ),
    ] {
        assert!(rules.contains(from), "{from:?}");
        let (ok, text) = promtool_test_rules(&rules.replace(from, to), &tests);
        assert!(!ok, "promtool test rules passed with {to:?}: {text}");
    }
}
