//! What runs inside a guest, and reading back what it printed.
//!
//! The guest's /init mounts the pseudo file systems and runs /checks.sh, a list of named
//! steps. Each step prints `@@ ---- NAME` before and `@@ RC NAME=<status>` after its output
//! on the serial console; the host splits the console log on those markers.

use std::fmt::Write as _;

use serde_json::Value;

/// Marks every line the runner reads back.
const MARK: &str = "@@ ";

/// One named command run in the guest, by /bin/sh, under a time limit.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub command: String,
    pub timeout_s: u32,
    /// A non-zero status fails the kernel's verdict.
    pub required: bool,
}

impl Step {
    pub fn new(name: impl Into<String>, command: impl Into<String>, timeout_s: u32) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            timeout_s,
            required: true,
        }
    }
    pub fn informational(mut self) -> Self {
        self.required = false;
        self
    }
}

/// One module of the integration-test binary, run in the guest as a step of its own.
#[derive(Debug, Clone)]
pub struct GuestTest {
    /// The module's name (the step is `test-NAME`).
    pub name: String,
    /// The test binary's path in the guest.
    pub path: String,
    /// The libtest arguments that select exactly this module's tests.
    pub filter: Vec<String>,
}

/// Everything a guest runs: environment first, then the steps in order. Extend it (a
/// backend flag for every fdaudit command, an extra check) with [`Plan::env`] and
/// [`Plan::steps`].
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub env: Vec<(String, String)>,
    pub steps: Vec<Step>,
}

/// Name of the step that runs the fd-7 leak check; its JSON output is searched for fd 7.
pub const LEAK_STEP: &str = "leak";
/// Name of the step whose output carries the per-program verifier figures.
pub const DOCTOR_JSON_STEP: &str = "doctor-json";
/// Name of the last step: the kernel's own warnings, which fail the kernel.
pub const KERNEL_LOG_STEP: &str = "kernel-log";
/// Prefix of the steps that run an integration-test binary.
pub const TEST_STEP_PREFIX: &str = "test-";

impl Plan {
    /// fdaudit doctor (table and JSON), the demo, a fd-7 leak check and then each test
    /// module in `tests`, run from `test_dir` with the ignored (root) tests included.
    /// `doctor_runs`: how many times `doctor --json` loads every program.
    pub fn standard(test_dir: &str, tests: &[GuestTest], doctor_runs: u32) -> Self {
        let mut steps = vec![
            Step::new("doctor", "fdaudit doctor", 120),
            // Several loads of every program: the table takes each one's fastest, since an
            // emulated guest on a shared machine is noisy.
            Step::new(
                DOCTOR_JSON_STEP,
                format!("for i in $(seq {doctor_runs}); do fdaudit doctor --json || exit 1; done"),
                300,
            ),
            Step::new("demo", "fdaudit trace --demo", 180),
            Step::new(
                LEAK_STEP,
                "fdaudit trace --json -- sh -c 'exec 7</etc/hostname; /bin/true'",
                180,
            ),
            // The origin programs load and name the call that made fd 7 (the origin tests
            // need gcc and stay on the host: without this no guest kernel's verifier sees
            // them, and 5.10's once took minutes over them: docs/kernels.md).
            Step::new(
                "origin",
                "fdaudit trace --origin --json -- sh -c 'exec 7</etc/hostname; /bin/true' \
                 2>&1 | grep '\"origin\":{\"syscall\":'",
                300,
            ),
            // Likewise `unclosed`'s own pair (the same code in its compile-time mode): it
            // loads, and the fd 7 the shell dup'd (dup2; dup3 on aarch64, which has no
            // dup2) is in the live set at the end.
            Step::new(
                "unclosed",
                "fdaudit unclosed --json -- sh -c 'exec 7</etc/hostname; /bin/true' \
                 2>&1 | grep '\"by_syscall\":{\"dup[23]\":1}'",
                300,
            ),
        ];
        for t in tests {
            let filter: Vec<String> = t.filter.iter().map(|a| shell_quote(a)).collect();
            // CARGO=/bin/true: the tests' helper that rebuilds fdaudit finds it built.
            steps.push(Step::new(
                format!("{TEST_STEP_PREFIX}{}", t.name),
                format!(
                    "cd {} && CARGO=/bin/true {} --include-ignored --test-threads=1 {}",
                    shell_quote(test_dir),
                    shell_quote(&t.path),
                    filter.join(" ")
                ),
                1200,
            ));
        }
        Self {
            // hostile_trace's spawn burst at a quarter of its host size (its burst_size).
            env: vec![("FDAUDIT_TEST_BURST".into(), "1000".into())],
            steps,
        }
    }

    /// Ends the plan with [`KERNEL_LOG_STEP`]: what the run may have made the kernel say, a
    /// WARN from the BPF or tracing code (a tracing program on a hash map that is not
    /// preallocated, before 6.1), a BUG or an Oops, read back from the kernel's log (the
    /// console is `quiet`). Any of them fails the kernel.
    pub fn check_kernel_log(&mut self) {
        self.steps.push(Step::new(
            KERNEL_LOG_STEP,
            "! dmesg | grep -E 'WARNING: CPU: .* at (kernel/bpf|kernel/trace)|BUG: |Oops'",
            30,
        ));
    }

    /// The guest's /checks.sh.
    pub fn script(&self) -> String {
        let mut s = String::from("# generated by cargo xtask vm-test\n");
        for (k, v) in &self.env {
            let _ = writeln!(s, "export {k}={}", shell_quote(v));
        }
        let _ = writeln!(s, "echo \"{MARK}UNAME $(uname -r)\"");
        let _ = writeln!(s, "echo \"{MARK}NOFILE $(ulimit -n)\"");
        for step in &self.steps {
            let _ = writeln!(
                s,
                "echo; echo \"{MARK}---- {} t=$(cut -d' ' -f1 /proc/uptime)\"",
                step.name
            );
            let _ = writeln!(
                s,
                "timeout {} sh -c {} </dev/null 2>&1; echo \"{MARK}RC {}=$?\"",
                step.timeout_s,
                shell_quote(&step.command),
                step.name
            );
        }
        s
    }
}

/// The guest's /init: mounts, loopback, then the checks with their output on the console
/// through a pipe (a serial tty reports 0 columns and squeezes tables), then power off.
pub fn init_script(checks: &str) -> String {
    format!(
        r#"#!/bin/sh
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts 2>/dev/null
ip link set lo up; hostname guest
echo "{MARK}BOOTED uptime=$(cut -d' ' -f1 /proc/uptime)"
echo "{MARK}LOCKDOWN $(cat /sys/kernel/security/lockdown 2>&1)"
sh {checks} 2>&1 | cat
echo "{MARK}DONE uptime=$(cut -d' ' -f1 /proc/uptime)"
sync; poweroff -f
"#
    )
}

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// One step's output and status, read back from the console log.
#[derive(Debug, Default, Clone)]
pub struct StepResult {
    pub name: String,
    pub lines: Vec<String>,
    pub rc: Option<i32>,
}

/// What a guest printed, split by step.
#[derive(Debug, Default)]
pub struct GuestLog {
    pub booted: Option<f64>,
    pub done: Option<f64>,
    pub uname: Option<String>,
    pub lockdown: Option<String>,
    pub steps: Vec<StepResult>,
}

impl GuestLog {
    pub fn parse(log: &str) -> Self {
        let mut g = GuestLog::default();
        let mut cur: Option<StepResult> = None;
        for raw in log.lines() {
            let line = raw.trim_end_matches('\r');
            // A marker may follow kernel output on the same line: find it anywhere.
            let marker = line.find(MARK).map(|i| &line[i + MARK.len()..]);
            if let Some(m) = marker {
                if let Some(v) = m.strip_prefix("BOOTED uptime=") {
                    g.booted = v.trim().parse().ok();
                    continue;
                }
                if let Some(v) = m.strip_prefix("DONE uptime=") {
                    g.done = v.trim().parse().ok();
                    continue;
                }
                if let Some(v) = m.strip_prefix("UNAME ") {
                    g.uname = Some(v.trim().to_string());
                    continue;
                }
                if let Some(v) = m.strip_prefix("LOCKDOWN ") {
                    g.lockdown = Some(v.trim().to_string());
                    continue;
                }
                if let Some(v) = m.strip_prefix("---- ") {
                    if let Some(s) = cur.take() {
                        g.steps.push(s);
                    }
                    let name = v.split_whitespace().next().unwrap_or("").to_string();
                    cur = Some(StepResult {
                        name,
                        ..Default::default()
                    });
                    continue;
                }
                if let Some(v) = m.strip_prefix("RC ") {
                    if let Some((name, rc)) = v.trim().rsplit_once('=') {
                        if let Some(s) = cur.as_mut().filter(|s| s.name == name) {
                            s.rc = rc.parse().ok();
                        }
                    }
                    continue;
                }
            }
            if let Some(s) = cur.as_mut() {
                s.lines.push(line.to_string());
            }
        }
        if let Some(s) = cur.take() {
            g.steps.push(s);
        }
        g
    }

    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// JSON objects printed by a step (lines that parse as one).
    pub fn json(&self, name: &str) -> Vec<Value> {
        self.step(name)
            .map(|s| {
                s.lines
                    .iter()
                    .filter(|l| l.trim_start().starts_with('{'))
                    .filter_map(|l| serde_json::from_str(l.trim()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the leak check's JSON reports fd 7 open on /etc/hostname in the child.
    pub fn leak7(&self) -> bool {
        self.json(LEAK_STEP).iter().any(has_fd7)
    }

    /// (passed, failed) summed over the `test result:` lines of the test steps, and
    /// whether every test step printed one.
    pub fn test_counts(&self) -> (u32, u32, bool) {
        let (mut p, mut f, mut all) = (0, 0, true);
        for s in self
            .steps
            .iter()
            .filter(|s| s.name.starts_with(TEST_STEP_PREFIX))
        {
            let mut seen = false;
            for l in &s.lines {
                if let Some(r) = l.trim().strip_prefix("test result: ") {
                    seen = true;
                    p += count_before(r, " passed");
                    f += count_before(r, " failed");
                }
            }
            all &= seen;
        }
        (p, f, all)
    }
}

fn count_before(s: &str, what: &str) -> u32 {
    s.find(what)
        .and_then(|i| s[..i].rsplit([' ', '.']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn has_fd7(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            let fd7 = m.get("fd").and_then(Value::as_u64) == Some(7);
            let host = m
                .values()
                .any(|x| x.as_str().is_some_and(|s| s == "/etc/hostname"));
            (fd7 && host) || m.values().any(has_fd7)
        }
        Value::Array(a) => a.iter().any(has_fd7),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_is_split_by_step_markers() {
        let log = "[    1.0] kernel noise\n@@ BOOTED uptime=1.52\n@@ UNAME 6.1.0-40-amd64\n\
                   \n@@ ---- doctor t=1.6\nkernel ok\n@@ RC doctor=0\n\
                   @@ ---- leak t=2.0\n{\"type\":\"spawn\",\"fds\":[{\"fd\":7,\"target\":\"/etc/hostname\"}]}\n@@ RC leak=0\n\
                   @@ ---- test-trace t=3\ntest result: ok. 20 passed; 0 failed; 0 ignored\n\
                   test result: FAILED. 1 passed; 2 failed; 0 ignored\n@@ RC test-trace=101\n\
                   @@ DONE uptime=9.5\n";
        let g = GuestLog::parse(log);
        assert_eq!(g.booted, Some(1.52));
        assert_eq!(g.done, Some(9.5));
        assert_eq!(g.uname.as_deref(), Some("6.1.0-40-amd64"));
        assert_eq!(g.step("doctor").unwrap().rc, Some(0));
        assert_eq!(g.step("doctor").unwrap().lines, vec!["kernel ok"]);
        assert!(g.leak7());
        assert_eq!(g.test_counts(), (21, 2, true));
        assert_eq!(g.step("test-trace").unwrap().rc, Some(101));
    }

    #[test]
    fn leak_check_needs_fd7_on_hostname() {
        let g = GuestLog::parse(
            "@@ ---- leak\n{\"fds\":[{\"fd\":8,\"target\":\"/etc/hostname\"},{\"fd\":7,\"target\":\"/x\"}]}\n@@ RC leak=0\n",
        );
        assert!(!g.leak7());
    }

    #[test]
    fn script_quotes_commands_and_env() {
        let mut p = Plan::standard(
            "/t/release",
            &[GuestTest {
                name: "trace".into(),
                path: "/t/release/deps/integration-1".into(),
                filter: ["trace::", "--skip", "hostile_trace::"]
                    .map(String::from)
                    .into(),
            }],
            5,
        );
        p.env.push(("FDAUDIT_BACKEND".into(), "it's".into()));
        let s = p.script();
        assert!(s.contains("export FDAUDIT_BACKEND='it'\\''s'"));
        assert!(s.contains("timeout 180 sh -c 'fdaudit trace --json -- sh -c '\\''exec 7</etc/hostname; /bin/true'\\'''"));
        assert!(s.contains("@@ RC test-trace=$?"));
        assert!(s.contains(
            "/t/release/deps/integration-1'\\'' --include-ignored --test-threads=1 '\\''trace::'\\'' '\\''--skip'\\'' '\\''hostile_trace::'\\''"
        ), "{s}");
    }
}
