//! `fdaudit watch`: bad input fails before anything is loaded; as root, a workload in a
//! cgroup named like a Docker container shows up in /metrics under its container id, in a
//! real Prometheus server's database, and SIGHUP/SIGTERM do what they say.
//!
//! The root tests load the eBPF programs: run them under `flock /tmp/fdaudit-bpf.lock`.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fdaudit_tests::fdaudit;
use serde_json::Value;

/// A free TCP port on loopback (bound, read, released).
/// The root tests load programs and check what is attached after they end: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// GET `path` from 127.0.0.1:`port`: (status line, body), or None when nothing listens yet.
pub(crate) fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Some((head.lines().next().unwrap_or("").to_owned(), body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Kills and reaps a child when the test ends, passed or not.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The cgroup2 mount point, from /proc/self/mountinfo (hybrid machines: /sys/fs/cgroup/unified).
pub(crate) fn cgroup2_mount() -> PathBuf {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    mi.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            if right.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            left.split_whitespace().nth(4).map(PathBuf::from)
        })
        .expect("a cgroup2 hierarchy is mounted")
}

/// `<mount>/<parent>/docker-<64 hex>.scope`, removed (after its processes) on drop.
pub(crate) struct DockerCgroup {
    pub(crate) parent: PathBuf,
    pub(crate) scope: PathBuf,
    pub(crate) id: String,
}

impl DockerCgroup {
    pub(crate) fn new(tag: &str) -> DockerCgroup {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970");
        let mut seed = u64::from(std::process::id()) ^ now.as_nanos() as u64;
        let id: String = (0..64)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from_digit(((seed >> 60) & 0xf) as u32, 16).expect("a hex digit")
            })
            .collect();
        let parent = cgroup2_mount().join(format!("fdaudit-{tag}-{}", std::process::id()));
        let scope = parent.join(format!("docker-{id}.scope"));
        std::fs::create_dir_all(&scope)
            .unwrap_or_else(|e| panic!("failed to create {}: {e}", scope.display()));
        DockerCgroup { parent, scope, id }
    }

    /// Runs `sh -c SCRIPT` moved into the scope before it runs anything; fd 7 (a file)
    /// leaks into every child it spawns.
    fn run(&self, script: &str) {
        let status = self.spawn(script).0.wait().expect("wait for the workload");
        assert!(status.success(), "the workload failed: {status}");
    }

    fn spawn(&self, script: &str) -> Reaped {
        let procs = self.scope.join("cgroup.procs");
        Reaped(
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "echo $$ > '{}' && exec 7</etc/hostname && {script}",
                    procs.display()
                ))
                .stdin(Stdio::null())
                .spawn()
                .expect("run the workload"),
        )
    }
}

impl Drop for DockerCgroup {
    /// Kills what is left in the scope (a failed test's workload), then removes it.
    fn drop(&mut self) {
        let t0 = Instant::now();
        while std::fs::remove_dir(&self.scope).is_err() && t0.elapsed() < Duration::from_secs(5) {
            let procs =
                std::fs::read_to_string(self.scope.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                // SAFETY: killing the test's own workload processes.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}

/// A temporary directory removed when the test ends, passed or not.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("fdaudit-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create a temporary directory");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn start_watch(port: u16, extra: &[&str]) -> Reaped {
    let child = Command::new(fdaudit())
        .args(["watch", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fdaudit watch");
    let mut w = Reaped(child);
    let t0 = Instant::now();
    while http_get(port, "/metrics").is_none() {
        if let Ok(Some(st)) = w.0.try_wait() {
            let mut err = String::new();
            let _ = w.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("fdaudit watch exited early ({st}): {err}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watch never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    w
}

/// The value of the first sample of `metric` whose labels include `needle`.
pub(crate) fn sample(text: &str, metric: &str, needle: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as i32, sig) },
        0,
        "kill({sig})"
    );
}

#[test]
fn bad_input_fails_before_anything_is_loaded() {
    let run = |args: &[&str]| {
        let out = Command::new(fdaudit())
            .arg("watch")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--textfile", "/nonexistent-dir"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("error: --textfile /nonexistent-dir: not a directory"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let (code, err) = run(&["--listen", &addr]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: failed to listen on {addr}")),
        "{err}"
    );

    let port = free_port().to_string();
    let (code, err) = run(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--cgroup",
        "/no/such/cgroup",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.starts_with("error: no cgroup /no/such/cgroup"), "{err}");

    let (code, err) = run(&["--scan-interval", "-1"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
#[ignore = "needs root"]
fn container_leaks_reach_metrics_textfile_and_sigterm_detaches() {
    let _serial = serial();
    let cg = DockerCgroup::new("watch");
    let port = free_port();
    let textdir = TempDir::new("textfile");
    let textdir = &textdir.0;
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let mut w = start_watch(
        port,
        &[
            "--cgroup",
            &parent,
            "--scan-interval",
            "1",
            "--textfile",
            textdir.to_str().unwrap(),
        ],
    );
    // The shell sleeps on with fd 7 while the scans (every second) look at it.
    let mut load = cg.spawn("cat /dev/null; ls /dev/null >/dev/null; sleep 5");
    let want = format!("container_id=\"{}\"", cg.id);
    let t0 = Instant::now();
    let body = loop {
        let (_, body) = http_get(port, "/metrics").expect("watch is listening");
        let scanned = sample(&body, "fdaudit_inheritable_fds", &want).is_some();
        if sample(&body, "fdaudit_leaked_fds_total", &want).is_some() && scanned {
            break body;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no container samples: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let leaked = sample(&body, "fdaudit_leaked_fds_total", &format!("{want},cgroup=\"{parent}/docker-{}.scope\",parent=\"sh\",child=\"cat\",kind=\"regular\"", cg.id));
    // fd 7 at least (whatever the test's caller passes down leaks too).
    assert!(
        leaked.is_some_and(|v| v >= 1.0),
        "fd 7 leaked into cat: {body}"
    );
    assert_eq!(
        sample(
            &body,
            "fdaudit_spawns_total",
            &format!(
                "{want},cgroup=\"{parent}/docker-{}.scope\",parent=\"sh\",child=\"ls\"",
                cg.id
            )
        ),
        Some(1.0),
        "{body}"
    );
    // The scan saw the sleeping shell's inheritable fd 7 in the container.
    assert!(
        sample(&body, "fdaudit_inheritable_fds", &want).is_some_and(|v| v >= 1.0),
        "{body}"
    );
    assert!(!body.contains("pid="), "no per-process labels");
    assert!(load.0.wait().unwrap().success());

    // The Prometheus text parser accepts what we serve.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (package prometheus, .ci/setup)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // node_exporter's conventions: who is serving, no empty label, the same series order
    // at every scrape, buckets before _sum and _count, a landing page and /healthz.
    for want in [
        "fdaudit_build_info{version=",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_open_fds ",
        "\nprocess_cpu_seconds_total ",
    ] {
        assert!(body.contains(want), "{want} in {body}");
    }
    assert!(!body.contains("=\"\""), "an empty label: {body}");
    let series = |b: &str| -> Vec<String> {
        b.lines()
            .filter(|l| l.starts_with("fdaudit_") && !l.starts_with("fdaudit_scans"))
            .map(|l| l.rsplit_once(' ').map_or(l, |(k, _)| k).to_owned())
            .collect()
    };
    let (_, again) = http_get(port, "/metrics").expect("watch is listening");
    let (a, b) = (series(&body), series(&again));
    let common: Vec<&String> = a.iter().filter(|k| b.contains(k)).collect();
    let common_b: Vec<&String> = b.iter().filter(|k| a.contains(k)).collect();
    assert_eq!(common, common_b, "series order changed between scrapes");
    let window: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("fdaudit_spawn_window_seconds"))
        .collect();
    let first_sum = window.iter().position(|l| l.contains("_sum"));
    let first_bucket = window.iter().position(|l| l.contains("_bucket"));
    assert!(first_bucket < first_sum, "buckets first: {window:?}");
    let (status, page) = http_get(port, "/").expect("landing page");
    assert!(
        status.contains("200") && page.contains("/metrics"),
        "{status}: {page}"
    );
    let (status, ok) = http_get(port, "/healthz").expect("/healthz");
    assert!(status.contains("200") && ok == "ok\n", "{status}: {ok}");

    // SIGHUP rewrites the textfile at once, atomically, in the text format.
    let prom = textdir.join("fdaudit.prom");
    let _ = std::fs::remove_file(&prom);
    signal(&w.0, libc::SIGHUP);
    let t0 = Instant::now();
    while !prom.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "SIGHUP wrote no textfile"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("# TYPE fdaudit_leaked_fds_total counter") && text.contains(&want),
        "{text}"
    );

    // SIGTERM: exit 0, nothing left attached (no other tracer runs: the test holds the lock).
    signal(&w.0, libc::SIGTERM);
    let st = w.0.wait().unwrap();
    let mut err = String::new();
    let _ = w.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(err.contains("every program detached"), "{err}");
    let progs = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .expect("bpftool");
    let progs = String::from_utf8_lossy(&progs.stdout);
    assert!(
        !progs.contains("sched_process_ex"),
        "programs left attached: {progs}"
    );
}

/// The scan gauges name a process by its executable, as the spawn metrics name a spawn's
/// `child` by its exec path (issue #25 item 9): a shell that renamed itself (its comm) is
/// still labelled by the file name of its `/proc/PID/exe`, under `child`, never `exe`.
/// Under `--cgroup` they cover only that cgroup's tree.
#[test]
#[ignore = "needs root"]
fn scan_gauges_label_the_executable_as_spawns_do_and_stay_in_the_cgroup() {
    let _serial = serial();
    let cg = DockerCgroup::new("watch-exe");
    let port = free_port();
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let _w = start_watch(port, &["--cgroup", &parent, "--scan-interval", "1"]);
    // The shell holds fd 7 without close-on-exec under another comm; `:` keeps it from
    // exec'ing sleep in its place.
    let mut load = cg.spawn("echo fdaudit-renamed > /proc/$$/comm && sleep 4; :");
    let sh = std::fs::canonicalize("/bin/sh").expect("resolve /bin/sh");
    let exe = sh.file_name().unwrap().to_string_lossy().into_owned();
    let want = format!(
        "container_id=\"{}\",cgroup=\"{parent}/docker-{}.scope\",child=\"{exe}\"",
        cg.id, cg.id
    );
    let t0 = Instant::now();
    let body = loop {
        let (_, body) = http_get(port, "/metrics").expect("watch is listening");
        if sample(&body, "fdaudit_inheritable_fds", &want).is_some() {
            break body;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no scan sample with {want}: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        sample(&body, "fdaudit_inheritable_fds", &want).is_some_and(|v| v >= 1.0),
        "{body}"
    );
    assert!(
        sample(&body, "fdaudit_nofile_soft", &want).is_some(),
        "{body}"
    );
    // The spawn metrics name the renamed shell as the parent (its comm); the gauges do not.
    let gauges: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("fdaudit_inheritable_fds{") || l.starts_with("fdaudit_nofile_soft{")
        })
        .collect();
    assert!(
        gauges
            .iter()
            .all(|l| !l.contains("fdaudit-renamed") && !l.contains("exe=\"")),
        "the comm is no gauge label, nor is `exe`: {gauges:#?}"
    );
    // --cgroup scopes the scans as it does the spawns: no process outside the watched tree
    // has a gauge (this test's own process, outside it, holds fds and a NOFILE limit).
    let inside = format!("cgroup=\"{parent}/");
    let outside: Vec<&str> = body
        .lines()
        .filter(|l| {
            [
                "fdaudit_inheritable_fds{",
                "fdaudit_nofile_soft{",
                "fdaudit_open_fds{",
            ]
            .iter()
            .any(|g| l.starts_with(g))
        })
        .filter(|l| !l.contains(&inside))
        .collect();
    assert!(
        outside.is_empty(),
        "gauges of processes outside {parent}: {outside:#?}"
    );
    assert!(load.0.wait().unwrap().success());
}

#[test]
#[ignore = "needs root"]
fn a_file_passed_through_a_shell_is_one_leaked_files_series_named_after_its_maker() {
    let _serial = serial();
    let cg = DockerCgroup::new("watch-files");
    let port = free_port();
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let _w = start_watch(port, &["--cgroup", &parent, "--scan-interval", "0"]);
    // `leaky` leaks fd 7 into sh, which passes it on to cat and sleep: three spawns with a
    // leak, three parent/child pairs, one file.
    // (The harness's own inherited fds leak along: each is a file, and one series, too.)
    cg.run("printf leaky > /proc/$$/comm && sh -c 'cat /dev/null; sleep 0; :'; :");
    let container = format!("container_id=\"{}\"", cg.id);
    let t0 = Instant::now();
    let files = loop {
        let (_, body) = http_get(port, "/metrics").expect("watch is listening");
        let files: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("fdaudit_leaked_files_total{") && l.contains(&container))
            .map(str::to_owned)
            .collect();
        if files
            .iter()
            .any(|l| l.contains("kind=\"regular\"") && l.ends_with(" 3"))
        {
            let pairs = body
                .lines()
                .filter(|l| l.starts_with("fdaudit_leaked_fds_total{") && l.contains(&container))
                .count();
            assert!(pairs >= 3, "three parent/child pairs leaked: {body}");
            break files;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no leaked file reached 3 spawns: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let file_label = |l: &str| {
        l.split("file=\"")
            .nth(1)
            .map(|f| f.split('"').next().map(str::to_owned))
    };
    let mut ids: Vec<_> = files.iter().map(|l| file_label(l)).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), files.len(), "one series per file: {files:#?}");
    let regular: Vec<&String> = files
        .iter()
        .filter(|l| l.contains("kind=\"regular\""))
        .collect();
    assert_eq!(regular.len(), 1, "fd 7 is one series: {files:#?}");
    assert!(regular[0].contains("maker=\"leaky\""), "{files:#?}");
    // /etc/hostname's device and inode, as stat(2) gives them.
    let meta = std::fs::metadata("/etc/hostname").unwrap();
    let dev = std::os::unix::fs::MetadataExt::dev(&meta);
    let ino = std::os::unix::fs::MetadataExt::ino(&meta);
    let id = format!("file=\"{}:{}:{ino}\"", libc::major(dev), libc::minor(dev));
    assert!(regular[0].contains(&id), "{id}: {files:#?}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server (Debian's) scraping `fdaudit watch` at 127.0.0.1:`watch_port` every
/// second, its database in `dir`: the server and its port.
pub(crate) fn start_prometheus(dir: &std::path::Path, watch_port: u16) -> (Reaped, u16) {
    start_prometheus_with(
        dir,
        &format!(
            "  - job_name: fdaudit\n    static_configs:\n      \
             - targets: ['127.0.0.1:{watch_port}']\n"
        ),
    )
}

/// A Prometheus server with these `scrape_configs` (YAML list items), scraping and
/// evaluating every second, its database in `dir`: the server and its port.
pub(crate) fn start_prometheus_with(dir: &std::path::Path, scrape_configs: &str) -> (Reaped, u16) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let prom_port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n{scrape_configs}"
        ),
    )
    .unwrap();
    let prom = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus, .ci/setup)"),
    );
    (prom, prom_port)
}

/// The result of the instant query `query` (an array of `{metric, value}`), or None while
/// Prometheus does not answer 200.
pub(crate) fn prom_query(prom_port: u16, query: &str) -> Option<Vec<Value>> {
    let url = format!("/api/v1/query?query={}", urlencode(query));
    let (status, body) = http_get(prom_port, &url)?;
    if !status.contains(" 200") {
        return None;
    }
    let v: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("bad JSON from Prometheus ({e}): {body}"));
    Some(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// A result's value.
pub(crate) fn prom_value(r: &Value) -> f64 {
    r["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {r}"))
}

#[test]
#[ignore = "needs root"]
fn a_real_prometheus_scrapes_container_leaks() {
    let _serial = serial();
    let tmp = TempDir::new("prometheus");
    let watch_port = free_port();
    let cg = DockerCgroup::new("prom");
    // The whole host, as deployed; leaks only; no scans (this test is about the pipeline).
    let _w = start_watch(watch_port, &["--scan-interval", "0"]);
    let (_prom, prom_port) = start_prometheus(&tmp.0, watch_port);
    let query = format!("fdaudit_leaked_fds_total{{container_id=\"{}\"}}", cg.id);
    let t0 = Instant::now();
    let value = loop {
        // A leaking spawn inside the container each round, until Prometheus has it.
        cg.run("cat /dev/null");
        let total: f64 = prom_query(prom_port, &query)
            .unwrap_or_default()
            .iter()
            .map(prom_value)
            .sum();
        if total > 0.0 {
            break total;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "Prometheus never saw {query}: {:?}",
            http_get(prom_port, "/api/v1/targets").map(|r| r.1)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(value >= 1.0);
}

#[test]
#[ignore = "needs root"]
fn trace_cgroup_follows_a_container_and_nothing_else() {
    let _serial = serial();
    use std::io::BufRead as _;
    let cg = DockerCgroup::new("trace");
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let mut t = Reaped(
        Command::new(fdaudit())
            .args([
                "trace",
                "--json",
                "--no-syscalls",
                "--duration",
                "4",
                "--cgroup",
                &parent,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fdaudit trace"),
    );
    // With --json and no command, every record (the "tracing ..." note included) is on
    // stdout, the header first.
    let mut reader = std::io::BufReader::new(t.0.stdout.take().unwrap());
    let mut out = String::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "tracer ended early: {out}"
        );
        out.push_str(&line);
        if line.contains("Ctrl-C to stop") {
            assert!(line.contains(&format!("tracing cgroup {parent}")), "{line}");
            break;
        }
    }
    // Outside the cgroup: not traced. Inside: the shell moves in, then spawns.
    let outside = Command::new("sh")
        .args(["-c", "cat /dev/null"])
        .status()
        .unwrap();
    assert!(outside.success());
    // And a child in a pid namespace of its own: `sleep` is pid 1 there.
    cg.run("cat /dev/null; sh -c 'ls /dev/null >/dev/null'; unshare --pid --fork sleep 1");
    reader.read_to_string(&mut out).unwrap();
    assert!(t.0.wait().unwrap().success());
    let spawns: Vec<Value> = fdaudit_tests::records(&out)
        .into_iter()
        .filter(|v| v["type"] == "spawn")
        .collect();
    let paths: Vec<&str> = spawns
        .iter()
        .filter_map(|s| s["exec_path"].as_str())
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("/cat")), "{out}");
    assert!(
        paths.iter().any(|p| p.ends_with("/ls")),
        "grandchildren are followed: {out}"
    );
    let scope = format!("{parent}/docker-{}.scope", cg.id);
    for s in &spawns {
        assert_eq!(
            s["container_id"],
            cg.id.as_str(),
            "only the container's spawns: {s}"
        );
        assert_eq!(s["container_runtime"], "docker");
        assert_eq!(s["cgroup"], scope.as_str());
        assert!(s["cgroup_id"].as_u64().is_some_and(|id| id > 1));
    }
    let sleep = spawns
        .iter()
        .find(|s| s["exec_path"].as_str().unwrap().ends_with("/sleep"))
        .unwrap_or_else(|| panic!("no sleep spawn: {out}"));
    assert_eq!(sleep["ns_pid"], 1, "{sleep}");
    assert_ne!(sleep["pid"], 1);
    assert!(cat_has_no_ns_pid(&spawns), "{out}");
    let cat = spawns
        .iter()
        .find(|s| s["exec_path"].as_str().unwrap().ends_with("/cat"))
        .unwrap();
    assert!(
        cat["leaked_fds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["fd"] == 7 && f["target"] == "/etc/hostname"),
        "{cat}"
    );
}

/// Processes in the host's pid namespace carry no `ns_pid`.
fn cat_has_no_ns_pid(spawns: &[Value]) -> bool {
    spawns
        .iter()
        .filter(|s| s["exec_path"].as_str().is_some_and(|p| p.ends_with("/cat")))
        .all(|s| s.get("ns_pid").is_none())
}

#[test]
#[ignore = "needs root"]
fn full_mode_counts_close_loops_per_container() {
    let _serial = serial();
    let cg = DockerCgroup::new("full");
    let port = free_port();
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let _w = start_watch(
        port,
        &["--syscalls", "--cgroup", &parent, "--scan-interval", "0"],
    );
    let spawner = fdaudit();
    cg.run(&format!(
        "'{}' __spawner --strategy close-loop --nofile 4096 -n 3",
        spawner.display()
    ));
    let want = format!("container_id=\"{}\"", cg.id);
    let t0 = Instant::now();
    loop {
        let (_, body) = http_get(port, "/metrics").expect("watch is listening");
        let closes = sample(
            &body,
            "fdaudit_preexec_close_calls_total",
            &format!("{want},"),
        )
        .filter(|_| body.contains("strategy=\"close-loop\""));
        // 3 spawns closing fds 3..4096 each: at least 3 × 4000 close() calls.
        if closes.is_some_and(|c| c >= 12_000.0) {
            let spawns = sample(&body, "fdaudit_spawns_total", "strategy=\"close-loop\"");
            assert_eq!(spawns, Some(3.0), "{body}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no close-loop counts: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root"]
fn origin_labels_each_leak_with_the_syscall_that_made_it() {
    let _serial = serial();
    let cg = DockerCgroup::new("origin");
    let port = free_port();
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let _w = start_watch(
        port,
        &["--origin", "--cgroup", &parent, "--scan-interval", "0"],
    );
    // bash opens the file and dup2s it to 7 in the child before exec.
    cg.run("bash -c '/bin/true 7</etc/hostname'");
    let want = format!("container_id=\"{}\"", cg.id);
    let t0 = Instant::now();
    loop {
        let (_, body) = http_get(port, "/metrics").expect("watch is listening");
        let labelled = body.lines().any(|l| {
            l.starts_with("fdaudit_leaked_fds_total{")
                && l.contains(&format!("{want},"))
                && l.contains("child=\"true\"")
                && l.contains("origin=\"dup2\"")
        });
        if labelled {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no leak labelled origin=\"dup2\": {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
