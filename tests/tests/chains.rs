//! One verdict for an exec chain (a spawn that execs again without forking, as Java's
//! jspawnhelper does): `trace`'s per-spawn lines and records, its summary and `watch`'s
//! counters agree that the fds the helper got and closed before its final exec are
//! transient, not leaks. Root only; Java 17 (`javac`, `java`) is on the machine.

use crate::common;

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{fdaudit, temp_path};

const JAVA: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";

/// JSpawn of docs/spawners.md compiled into a temporary directory (removed on drop).
struct Classes(PathBuf);

impl Classes {
    fn build() -> Classes {
        std::fs::write("/tmp/spawners-secret.txt", "secret\n").expect("write the secret");
        let out = temp_path("chains-java");
        std::fs::create_dir_all(&out).expect("create the classes directory");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../bench/spawners/progs/java/JSpawn.java");
        let st = Command::new("javac")
            .arg("-d")
            .arg(&out)
            .arg(&src)
            .status()
            .expect("javac is installed (Java 17)");
        assert!(st.success(), "javac: {st}");
        Classes(out)
    }

    fn cmd(&self) -> Vec<String> {
        [
            JAVA,
            "-cp",
            self.0.to_str().unwrap(),
            "JSpawn",
            "ProcessBuilder",
            "/bin/true",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for Classes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
#[ignore = "needs root and Java 17"]
fn trace_calls_jspawnhelpers_fds_transient_in_its_lines_records_and_summary() {
    let _g = common::guard();
    let classes = Classes::build();
    let cmd = classes.cmd();
    let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let (spawns, summary, out) = common::trace(&[], &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let helper = spawns
        .iter()
        .find(|s| {
            s["exec_path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/jspawnhelper"))
        })
        .unwrap_or_else(|| panic!("no jspawnhelper record: {spawns:?}"));
    assert!(
        helper["leaked_fd_count"].as_u64() > Some(0),
        "it got the JVM's fds: {helper}"
    );
    let flags = helper["flags"].as_array().expect("flags");
    assert!(flags.iter().any(|f| f == "execd_again"), "{helper}");
    assert_eq!(summary["totals"]["spawns_with_leaks"], 0, "{summary}");
    assert!(
        summary["totals"]["transient_leaked_fd_count"].as_u64() > Some(0),
        "{summary}"
    );

    // For people: the helper's line says transient, never LEAKED.
    let out = Command::new(fdaudit())
        .args(["trace", "--"])
        .args(&args)
        .output()
        .expect("run fdaudit trace");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("/jspawnhelper"))
        .unwrap_or_else(|| panic!("no jspawnhelper line: {text}"));
    assert!(!line.contains("LEAKED"), "{line}");
    assert!(line.contains("transient"), "{line}");
}

/// Kills and reaps a child when the test ends, passed or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cgroup of its own (`<cgroup2>/fdaudit-chains-PID/w`), removed on drop (its
/// processes killed); unclosed_exports.rs uses it too.
pub(crate) struct Cgroup {
    pub(crate) parent: PathBuf,
    pub(crate) leaf: PathBuf,
}

impl Cgroup {
    pub(crate) fn new() -> Cgroup {
        let mi = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
        let mount = mi
            .lines()
            .find_map(|l| {
                let (left, right) = l.split_once(" - ")?;
                (right.split_whitespace().next()? == "cgroup2")
                    .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
            })
            .expect("a cgroup2 hierarchy is mounted");
        let parent = mount.join(format!("fdaudit-chains-{}", std::process::id()));
        let leaf = parent.join("w");
        std::fs::create_dir_all(&leaf).expect("create the cgroup");
        Cgroup { parent, leaf }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let t0 = Instant::now();
        while std::fs::remove_dir(&self.leaf).is_err() && t0.elapsed() < Duration::from_secs(5) {
            let procs = std::fs::read_to_string(self.leaf.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                // SAFETY: killing the test's own workload.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}

fn metrics(port: u16) -> Option<String> {
    use std::io::Write as _;
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_string())
}

fn sample(body: &str, metric: &str, needle: &str) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

#[test]
#[ignore = "needs root and Java 17"]
fn watch_counts_no_leak_for_jspawnhelper_and_its_fds_as_transient() {
    let _g = common::guard();
    let classes = Classes::build();
    let cg = Cgroup::new();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let parent = format!("/{}", cg.parent.file_name().unwrap().to_string_lossy());
    let w = Reaped(
        Command::new(fdaudit())
            .args(["watch", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--cgroup", &parent, "--scan-interval", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fdaudit watch"),
    );
    let t0 = Instant::now();
    while metrics(port).is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "watch never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let procs = cg.leaf.join("cgroup.procs");
    let cmd = classes.cmd().join(" ");
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > '{}' && exec {cmd} >/dev/null",
            procs.display()
        ))
        .status()
        .expect("run java");
    assert!(st.success(), "java: {st}");
    let t0 = Instant::now();
    let body = loop {
        let body = metrics(port).expect("watch is listening");
        if sample(&body, "fdaudit_spawns_total", "child=\"true\"").is_some() {
            break body;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no spawn of true: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(w);
    let helper = "child=\"jspawnhelper\"";
    assert_eq!(
        sample(&body, "fdaudit_spawns_total", helper),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "fdaudit_spawns_with_leaks_total", helper),
        None,
        "the helper's fds were closed before its final exec: {body}"
    );
    assert!(
        sample(&body, "fdaudit_transient_fds_total", helper).is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "fdaudit_spawns_with_leaks_total", "child=\"true\""),
        None,
        "{body}"
    );
}
