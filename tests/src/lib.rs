//! Shared helpers for fdaudit's integration tests.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

/// A binary built into the same target directory as the running test (`fdaudit`, fixtures).
/// `cargo test --workspace` builds every bin of the workspace before running tests.
pub fn target_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} not found: run `cargo build --workspace` (or `cargo test --workspace`) first",
        bin.display()
    );
    bin
}

/// A child killed and reaped when dropped.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The program runs the kernel skipped in a trace, from its summary record's
/// `bpf_missed_runs` (an object of counts by program; "unknown", on a kernel without the
/// counter, shows no miss).
pub fn missed_runs(summary: &serde_json::Value) -> u64 {
    match &summary["bpf_missed_runs"] {
        serde_json::Value::Object(by_program) => by_program
            .values()
            .filter_map(serde_json::Value::as_u64)
            .sum(),
        _ => 0,
    }
}

/// Runs `run` (which returns what it traced and the program runs the kernel skipped in it)
/// until a run skipped none, at most `tries` times: on a preemptible kernel (sid's) a
/// program preempted while its hook fires again on that CPU loses that run, and the counts
/// of that run only are then low, which no comparison can expect. `what` names the runs in
/// the messages.
pub fn without_skipped_runs<T>(tries: usize, what: &str, mut run: impl FnMut() -> (T, u64)) -> T {
    for _ in 0..tries {
        let (t, missed) = run();
        if missed == 0 {
            return t;
        }
        eprintln!("the kernel skipped {missed} program runs in {what}: again");
    }
    panic!("{tries} tries of {what} all had program runs the kernel skipped");
}

/// An `fdaudit trace -- CMD` run stopped if it is dropped before it ended (a test that
/// failed half-way): SIGTERM, which fdaudit passes on to the command, then SIGKILL after
/// 10 s, so that neither fdaudit nor the command outlives the test and disturbs the next.
pub struct StopOnDrop(pub std::process::Child);

impl StopOnDrop {
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.0.wait()
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = std::time::Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) {
            if t0.elapsed() > std::time::Duration::from_secs(10) {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Starts `scan-fixture-hold n` (files, directories, pipes, unix socket pairs and TCP
/// sockets, half inheritable) with its NOFILE soft limit raised to the hard one (at most
/// 4096), and waits for its `ready` line; it holds them until dropped.
pub fn hold_fds(n: usize) -> KillOnDrop {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    let mut holder = std::process::Command::new(target_bin("scan-fixture-hold"));
    holder
        .arg(n.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    // SAFETY: getrlimit and setrlimit are async-signal-safe.
    unsafe {
        holder.pre_exec(|| {
            let mut l: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
            l.rlim_cur = l.rlim_max.min(4096);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            Ok(())
        });
    }
    let mut holder = KillOnDrop(holder.spawn().expect("start scan-fixture-hold"));
    let mut ready = String::new();
    std::io::BufReader::new(holder.0.stdout.take().expect("piped stdout"))
        .read_line(&mut ready)
        .expect("read the holder's line");
    assert!(ready.starts_with("ready"), "holder said {ready:?}");
    holder
}

/// The `fdaudit` binary under test, built (or brought up to date) once per test binary.
///
/// Cargo builds a package's binaries only for that package's own integration tests, so
/// `cargo test --workspace` on a fresh clone would not have it: ask cargo for it, in the
/// profile these tests were built with. Every workspace binary, as `cargo test --workspace`
/// selects every package: the dependencies' features are then unified as in that build and
/// only fdaudit's binary is linked (`-p fdaudit` alone unifies them differently, and
/// compiled fdaudit and several dependencies a second time, ~45 s on a fresh clone).
pub fn fdaudit() -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let release = exe
            .parent()
            .and_then(|d| d.parent())
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "--quiet", "--workspace", "--bins"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("failed to run cargo build for fdaudit");
        assert!(
            status.success(),
            "cargo build --workspace --bins failed: {status}"
        );
    });
    target_bin("fdaudit")
}

/// Whether the kernel takes close_range(CLOSE_RANGE_CLOEXEC) (5.11+; 5.10 has close_range
/// but refuses the flag with EINVAL, so a spawner relying on it leaks). Probed on an empty
/// range, which changes nothing.
pub fn close_range_cloexec_supported() -> bool {
    close_range_cloexec_errno().is_none()
}

/// Why the kernel refuses close_range(CLOSE_RANGE_CLOEXEC): its errno (EINVAL on 5.10, ENOSYS
/// before 5.9), `None` when it takes it. The same probe as [`close_range_cloexec_supported`].
pub fn close_range_cloexec_errno() -> Option<i32> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let top: libc::c_uint = 0x7fff_fff0;
    // SAFETY: close_range on fds nobody holds (far above any limit) only validates flags.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, top, top, CLOSE_RANGE_CLOEXEC) };
    (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Whether the kernel has the syscall tracepoints tp attaches to (CONFIG_FTRACE_SYSCALLS),
/// seen in tracefs: ask after fdaudit has run, which mounts tracefs when it is missing.
pub fn syscall_tracepoints() -> bool {
    std::path::Path::new("/sys/kernel/tracing/events/syscalls/sys_enter_close").exists()
}

/// Whether `/proc/PID/comm` text `comm` is fdaudit's: itself, or its hand-off child
/// (`fdaudit-detach`), which keeps the trace events registered a moment after it exits.
pub fn is_fdaudit_comm(comm: &str) -> bool {
    matches!(comm.trim_end(), "fdaudit" | "fdaudit-detach")
}

/// Whether the tests run as root (CI does: the eBPF tests must run there).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Fails a root-only test run without root. Such tests are `#[ignore = "needs root..."]`,
/// so only `--include-ignored` (`.ci/run`, as root) gets here: never a silent pass.
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: run it as root (`.ci/run` does), or leave out --include-ignored"
    );
}

/// A libc return value, or a panic naming what failed and errno (fixtures only).
pub fn check(ret: libc::c_int, what: &str) -> libc::c_int {
    if ret < 0 {
        panic!("failed to {what}: {}", std::io::Error::last_os_error());
    }
    ret
}

/// Waits for our child `pid` and panics unless it exited 0 (fixtures only).
pub fn wait_for_success(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on our own child into a local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child: {status:#x}"
    );
}

/// A TCP socket listening on 127.0.0.1 at an ephemeral port, without close-on-exec:
/// (fd, port).
pub fn listen_loopback(backlog: libc::c_int) -> (libc::c_int, u16) {
    // SAFETY: plain socket syscalls on a local sockaddr_in.
    unsafe {
        let sock = check(
            libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0),
            "create a socket",
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of_val(&addr) as libc::socklen_t;
        check(
            libc::bind(sock, (&addr as *const libc::sockaddr_in).cast(), len),
            "bind",
        );
        check(libc::listen(sock, backlog), "listen");
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut blen = len;
        check(
            libc::getsockname(
                sock,
                (&mut bound as *mut libc::sockaddr_in).cast(),
                &mut blen,
            ),
            "getsockname",
        );
        (sock, u16::from_be(bound.sin_port))
    }
}

/// docs/fdaudit.schema.json, compiled in, so the test binaries also work where the source
/// tree is absent (the VM guests of `cargo xtask vm-test`).
pub const SCHEMA_TEXT: &str = include_str!("../../docs/fdaudit.schema.json");

/// The JSON Schema every record fdaudit writes must satisfy (docs/fdaudit.schema.json).
pub fn schema() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let schema: Value = serde_json::from_str(SCHEMA_TEXT).expect("the schema is JSON");
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("docs/fdaudit.schema.json is not a valid JSON Schema: {e}"))
    })
}

/// Checks one record against the schema, and that its numbers carry no float noise
/// (at most 3 decimals: `104.534`, never `104.53425000000001`).
pub fn check_record(v: &Value) {
    let errors: Vec<String> = schema()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "record does not match docs/fdaudit.schema.json:\n{v}\n{}",
        errors.join("\n")
    );
    fn no_noise(v: &Value, line: &Value) {
        match v {
            Value::Number(n) if n.is_f64() => {
                let x = n.as_f64().expect("f64");
                assert!(
                    ((x * 1000.0).round() / 1000.0 - x).abs() == 0.0,
                    "float noise ({x}) in {line}"
                );
            }
            Value::Array(a) => a.iter().for_each(|x| no_noise(x, line)),
            Value::Object(o) => o.values().for_each(|x| no_noise(x, line)),
            _ => {}
        }
    }
    no_noise(v, v);
}

/// The leaked fd whose target is `target` in the first spawn of `exec_path` of the records
/// stream `text` (panics, with the stream or the spawn, when there is none).
pub fn leaked_fd(text: &str, exec_path: &str, target: &str) -> Value {
    let spawn = records(text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == exec_path)
        .unwrap_or_else(|| panic!("no spawn of {exec_path}: {text}"));
    spawn["leaked_fds"]
        .as_array()
        .expect("leaked_fds")
        .iter()
        .find(|l| l["target"] == target)
        .unwrap_or_else(|| panic!("{target} did not leak: {spawn}"))
        .clone()
}

/// The whole lines fdaudit has written to `path` so far (read while it writes: up to the
/// last newline); empty when it has written none or the file is not there yet.
pub fn whole_lines(path: &std::path::Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text
}

/// Every line of a JSON records stream, parsed and checked against the schema: each is an
/// object with a "type", the first is the header. Panics naming the line otherwise.
pub fn records(text: &str) -> Vec<Value> {
    let out: Vec<Value> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("a line of the stream is not JSON ({e}): {l:?}\n{text}")
            });
            check_record(&v);
            v
        })
        .collect();
    assert_eq!(
        out.first().map(|h| h["type"].clone()),
        Some(Value::from("header")),
        "the first record is the header:\n{text}"
    );
    out
}

/// The records of a given type.
pub fn of_type<'a>(records: &'a [Value], ty: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["type"] == ty).collect()
}

/// `fdaudit scan -p PID --json` under `strace -f -qq` with `strace_args` (`-e …`, `-y`):
/// the scan's stdout and strace's log. Panics if the scan fails.
pub fn strace_scan(pid: u32, strace_args: &[&str]) -> (String, String) {
    let trace = temp_path("scan.strace");
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq"])
        .args(strace_args)
        .arg("-o")
        .arg(&trace)
        .arg(fdaudit())
        .args([
            "scan",
            "-p",
            &pid.to_string(),
            "--json",
            "--close-cost-ns",
            "1",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run strace (apt-get install strace)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).expect("read strace output");
    let _ = std::fs::remove_file(&trace);
    (String::from_utf8_lossy(&out.stdout).into_owned(), text)
}

/// A fresh path in the temporary directory for this test process (`-o` files).
pub fn temp_path(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("fdaudit-test-{}-{n}-{name}", std::process::id()))
}

/// Runs `fdaudit trace --json -o FILE` followed by what `args` adds (options, `-- CMD`,
/// environment), stdin closed, and returns the run's output with FILE's text; FILE is
/// removed. With `-o` the records never share the traced command's stdout (#10).
pub fn trace_to_file(
    name: &str,
    args: impl FnOnce(&mut std::process::Command),
) -> (std::process::Output, String) {
    let file = temp_path(name);
    let mut cmd = std::process::Command::new(fdaudit());
    cmd.args(["trace", "--json", "-o"])
        .arg(&file)
        .stdin(std::process::Stdio::null());
    args(&mut cmd);
    let out = cmd.output().expect("run fdaudit trace");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    (out, text)
}

/// Panics with fdaudit's exit status and stderr unless the run succeeded.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "fdaudit failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Decodes a base64 `_b64` field.
pub fn b64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_else(|e| panic!("bad base64 {s:?}: {e}"))
}

/// Every close method `fdaudit bench` and the spawner know, in the order they report them.
pub const STRATEGIES: [&str; 10] = [
    "none",
    "close-loop",
    "fcntl-loop",
    "procfd-walk",
    "poll-scan",
    "close-range",
    "close-range-cloexec",
    "closefrom",
    "posix-spawn",
    "posix-spawn-closefrom",
];

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// For tests that load programs and time syscalls: asserts root, then runs them one at a
/// time within the test binary.
pub fn guard() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        is_root(),
        "tracing needs root and BTF: run as root (`.ci/run` does)"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Compiles C `source` with gcc (`-g -O0 -fno-omit-frame-pointer`: symbols, DWARF lines and
/// frame pointers for `--origin`'s stacks) into a fresh temporary executable named `name`.
pub fn build_c_fixture(name: &str, source: &str) -> PathBuf {
    build_c_fixture_with(name, source, &["-g", "-O0", "-fno-omit-frame-pointer"])
}

/// As [`build_c_fixture`], with gcc's code generation `flags` instead (`-O2
/// -fomit-frame-pointer`: code as distributions build it, without frame pointers).
pub fn build_c_fixture_with(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = temp_path(&format!("{name}.c"));
    let exe = temp_path(name);
    std::fs::write(&src, source).expect("write the C fixture");
    let st = std::process::Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is installed by .ci/setup");
    assert!(st.success(), "gcc failed on the fixture: {st}");
    let _ = std::fs::remove_file(&src);
    exe
}

/// `cmd` starts from the default dispositions of the signals tests stop fdaudit with
/// (SIGINT, SIGTERM, SIGHUP), whatever this test's caller ignored: a runner started with
/// `nohup` or `cmd &` from a script ignores SIGINT, and fdaudit keeps a signal its caller
/// ignored ignored (`caller.rs`), so a Ctrl-C test would wait for the command instead.
pub fn default_stop_signals(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// `program` run under GNU `time`, which writes the peak RSS (KiB) of the program alone to
/// the returned file ([`peak_rss_kib`]). A process forked from this test binary starts its
/// `ru_maxrss` at the binary's own RSS (exec keeps the old mm's high-water mark, fs/exec.c
/// `exec_mmap`), and the one integration binary holds every test's memory: `time` is small,
/// so the program it forks is measured alone. The exit status is the program's (128 + N
/// after signal N). The command leads a process group of its own: kill `-pid` to stop both.
pub fn measured(program: &std::path::Path) -> (std::process::Command, PathBuf) {
    use std::os::unix::process::CommandExt as _;
    let rss = temp_path("peak-rss");
    let mut c = std::process::Command::new("/usr/bin/time");
    c.args(["-q", "-f", "%M", "-o"])
        .arg(&rss)
        .arg(program)
        .process_group(0);
    (c, rss)
}

/// The peak RSS that [`measured`] wrote (KiB); removes the file.
pub fn peak_rss_kib(file: &std::path::Path) -> i64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let _ = std::fs::remove_file(file);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("GNU time (.ci/setup) wrote no peak RSS: {text:?}"))
}
