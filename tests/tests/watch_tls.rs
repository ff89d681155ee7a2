//! `fdaudit watch --web-config`: TLS and basic auth in node_exporter's format. A real
//! Prometheus (Debian's, .ci/setup) scrapes over TLS with basic auth; wrong credentials get
//! 401 and move `fdaudit_http_auth_failures_total`; plain HTTP to the TLS port gets nothing;
//! a bad file is a one-line error before anything is loaded. Certificates come from
//! openssl, the bcrypt hash from the `bcrypt` crate (cost 4: the test is about the
//! protocol, not the cost).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use fdaudit_tests::fdaudit;
use serde_json::Value;

use super::watch::{free_port, start_prometheus_with, Reaped, TempDir};

const USER: &str = "prometheus";
const PASSWORD: &str = "scrape-me";

/// A self-signed certificate for 127.0.0.1 (server.crt, server.key) in `dir`, and a web
/// config naming it and `USER` with `PASSWORD`'s bcrypt hash: the config's path.
fn web_config(dir: &Path) -> PathBuf {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=fdaudit-test", "-addext"])
        .args(["subjectAltName=IP:127.0.0.1"])
        .args(["-keyout", "server.key", "-out", "server.crt"])
        .current_dir(dir)
        .output()
        .expect("failed to run openssl (package openssl)");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt hash");
    let path = dir.join("web.yml");
    // Relative paths: from the config file's directory, as exporter-toolkit takes them.
    std::fs::write(
        &path,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  {USER}: {hash}\n"
        ),
    )
    .expect("write the web config");
    path
}

/// curl `url` with `args`: (HTTP status, or 0 when no HTTP came back; headers and body).
fn curl(url: &str, args: &[&str], ca: &Path) -> (u32, String) {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("failed to run curl (package curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn sample(text: &str, metric: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(metric) && l[metric.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn run_watch(args: &[&str]) -> Output {
    Command::new(fdaudit())
        .arg("watch")
        .args(args)
        .output()
        .expect("run fdaudit watch")
}

#[test]
fn a_bad_web_config_is_a_one_line_error_at_start() {
    let tmp = TempDir::new("webconfig-bad");
    let file = tmp.0.join("web.yml");
    for (text, says) in [
        (
            "basic_auth_user:\n  a: b\n",
            "unknown field `basic_auth_user`",
        ),
        ("basic_auth_users:\n  a: secret\n", "not a bcrypt hash"),
        (
            "tls_server_config:\n  cert_file: none.crt\n  key_file: none.key\n",
            "none.crt",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = run_watch(&["--duration", "1", "--web-config", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} was accepted: {err}");
        assert!(err.contains(says) && err.contains("--web-config"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let out = run_watch(&["--web-config", "/nonexistent/web.yml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/web.yml"));
}

/// Starts watch on `port` with `config`, returns once /healthz answers over TLS.
fn start_watch(port: u16, config: &Path, ca: &Path) -> Reaped {
    let child = Command::new(fdaudit())
        .args(["watch", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--scan-interval", "0", "--web-config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fdaudit watch");
    let mut w = Reaped(child);
    let t0 = Instant::now();
    let url = format!("https://127.0.0.1:{port}/healthz");
    while curl(&url, &[], ca).0 != 200 {
        if let Ok(Some(st)) = w.0.try_wait() {
            panic!("fdaudit watch exited early ({st})");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watch never listened"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    w
}

#[test]
#[ignore = "needs root"]
fn prometheus_scrapes_over_tls_with_basic_auth_and_wrong_credentials_are_refused() {
    let _g = fdaudit_tests::guard();
    let tmp = TempDir::new("webconfig");
    let dir = &tmp.0;
    let config = web_config(dir);
    let ca = dir.join("server.crt");
    let port = free_port();
    let _w = start_watch(port, &config, &ca);
    let metrics = format!("https://127.0.0.1:{port}/metrics");
    let good = format!("{USER}:{PASSWORD}");

    // Right credentials: the metrics, and no failure counted yet.
    let (code, body) = curl(&metrics, &["-u", &good], &ca);
    assert_eq!(code, 200, "{body}");
    assert_eq!(sample(&body, "fdaudit_http_auth_failures_total"), Some(0.0));
    // No credentials, a wrong password, an unknown user: 401 with a challenge, each counted.
    for args in [
        &[][..],
        &["-u", "prometheus:wrong"],
        &["-u", "nobody:scrape-me"],
    ] {
        let (code, body) = curl(&metrics, args, &ca);
        assert_eq!(code, 401, "{args:?}: {body}");
        assert!(
            body.to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{body}"
        );
        assert!(!body.contains("fdaudit_spawns"), "{body}");
    }
    let (_, body) = curl(&metrics, &["-u", &good], &ca);
    assert_eq!(sample(&body, "fdaudit_http_auth_failures_total"), Some(3.0));
    // /healthz needs no credentials (probes); plain HTTP on the TLS port gets no HTTP back.
    let url = format!("https://127.0.0.1:{port}/healthz");
    assert_eq!(curl(&url, &[], &ca).0, 200);
    let plain = format!("http://127.0.0.1:{port}/metrics");
    assert_eq!(
        curl(&plain, &["-u", &good], &ca).0,
        0,
        "plain HTTP answered"
    );

    // A real Prometheus: one job with the password (up), one with a wrong one (down, 401).
    let job = |name: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {}\n    \
             basic_auth:\n      username: {USER}\n      password: {password}\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            ca.display()
        )
    };
    let (_prom, prom_port) = start_prometheus_with(
        dir,
        &format!("{}{}", job("fdaudit", PASSWORD), job("intruder", "guess")),
    );
    let targets = format!("http://127.0.0.1:{prom_port}/api/v1/targets");
    let t0 = Instant::now();
    let (up, down) = loop {
        let (code, body) = curl(&targets, &[], &ca);
        let json = body.split_once("\r\n\r\n").map_or("", |b| b.1);
        let health = |job: &str| -> Option<(String, String)> {
            let v: Value = serde_json::from_str(json).ok()?;
            let t = v["data"]["activeTargets"]
                .as_array()?
                .iter()
                .find(|t| t["labels"]["job"] == job)?
                .clone();
            Some((
                t["health"].as_str()?.into(),
                t["lastError"].as_str()?.into(),
            ))
        };
        if code == 200 {
            if let (Some(a), Some(b)) = (health("fdaudit"), health("intruder")) {
                if a.0 != "unknown" && b.0 != "unknown" {
                    break (a, b);
                }
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped: {body}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        up.0, "up",
        "the scrape over TLS with basic auth failed: {up:?}"
    );
    assert_eq!(down.0, "down", "a wrong password was let in: {down:?}");
    assert!(down.1.contains("401"), "{down:?}");
    let (_, body) = curl(&metrics, &["-u", &good], &ca);
    let failures = sample(&body, "fdaudit_http_auth_failures_total").unwrap_or(0.0);
    assert!(
        failures > 3.0,
        "Prometheus's 401s were not counted: {failures}"
    );
}

/// `openssl ARGS` in `dir`, panicking with its stderr unless it succeeds.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("failed to run openssl (package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root"]
fn client_certificates_are_required_and_verified_with_client_ca_file() {
    let _g = fdaudit_tests::guard();
    let tmp = TempDir::new("webconfig-mtls");
    let dir = &tmp.0;
    let config = web_config(dir);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    // A client CA, a client certificate it signed, and one signed by nobody it knows.
    for (name, subj) in [("ca", "/CN=scrapers"), ("stranger", "/CN=stranger")] {
        let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
        let mut args = vec!["req", "-x509", "-days", "1", "-subj", subj];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &crt]);
        openssl(dir, &args);
    }
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    let mut args = vec!["req", "-subj", "/CN=prometheus"];
    args.extend(ec);
    args.extend(["-keyout", "client.key", "-out", "client.csr"]);
    openssl(dir, &args);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            "client.crt",
        ],
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "  key_file: server.key\n",
        "  key_file: server.key\n  client_ca_file: ca.crt\n  \
         client_auth_type: RequireAndVerifyClientCert\n",
    );
    std::fs::write(&config, text).unwrap();
    let ca = dir.join("server.crt");
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}/metrics");
    let good = format!("{USER}:{PASSWORD}");
    let child = Command::new(fdaudit())
        .args(["watch", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--scan-interval", "0", "--web-config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fdaudit watch");
    let mut w = Reaped(child);
    let cert = dir.join("client.crt");
    let key = dir.join("client.key");
    let with_cert = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let t0 = Instant::now();
    let (code, body) = loop {
        let mut args = with_cert.to_vec();
        args.extend(["-u", &good]);
        let r = curl(&url, &args, &ca);
        if r.0 != 0 {
            break r;
        }
        if let Ok(Some(st)) = w.0.try_wait() {
            panic!("fdaudit watch exited early ({st})");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watch never listened"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, 200, "the CA's client was refused: {body}");
    // No certificate, or one the CA did not sign: no HTTP answer at all.
    assert_eq!(
        curl(&url, &["-u", &good], &ca).0,
        0,
        "no client certificate"
    );
    let (cert, key) = (dir.join("stranger.crt"), dir.join("stranger.key"));
    let stranger = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let mut args = stranger.to_vec();
    args.extend(["-u", &good]);
    assert_eq!(curl(&url, &args, &ca).0, 0, "a certificate of another CA");
}
