//! fdaudit in a terminal: tables at 80 and 200 columns (tmux) and in a pty that reports 0
//! columns (`script`), colour, shell completion and the manual pages.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fdaudit_tests::{default_stop_signals, fdaudit, STRATEGIES};

/// Where the shell sends `args`'s stderr: away, except for `trace`, whose records go to
/// stderr with `--demo` or `-- CMD` (#10: they never share the traced command's stdout), so
/// a terminal shows them there, notes included.
fn stderr_redirect(args: &[String]) -> &'static str {
    if args.get(1).map(String::as_str) == Some("trace") {
        ""
    } else {
        " 2>/dev/null"
    }
}

/// Quotes `args` for `sh -c`.
fn shell_line(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a terminal `width` columns wide shows for `args`: (lines as displayed, lines with
/// the terminal's own wrapping undone). They differ when a line was wider than the pane
/// and the terminal broke it wherever it reached the edge.
fn tmux_pane(width: u16, args: &[String]) -> (Vec<String>, Vec<String>) {
    let sock = std::env::temp_dir().join(format!(
        "fdaudit-tmux-{}-{width}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let tmux = |a: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args(a)
            .env("TERM", "xterm-256color")
            .env_remove("COLUMNS")
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE")
            .output()
            .expect("failed to run tmux (apt-get install tmux; .ci/setup does)")
    };
    let done = "__fdaudit_test_done__";
    let script = format!(
        "{}{}; echo {done}; sleep 60",
        shell_line(args),
        stderr_redirect(args)
    );
    let w = width.to_string();
    let out = tmux(&["new-session", "-d", "-x", &w, "-y", "50", &script]);
    assert!(
        out.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tmux(&["set-option", "-g", "history-limit", "20000"]);
    let start = Instant::now();
    let capture = |join: bool| {
        let mut a = vec!["capture-pane", "-p", "-S", "-"];
        if join {
            a.push("-J");
        }
        String::from_utf8_lossy(&tmux(&a).stdout).into_owned()
    };
    let shown = loop {
        let c = capture(false);
        if c.contains(done) {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{args:?} did not finish in the pane:\n{c}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let joined = capture(true);
    tmux(&["kill-server"]);
    let _ = std::fs::remove_file(&sock);
    let lines = |s: &str| -> Vec<String> {
        s.lines()
            .take_while(|l| !l.contains(done))
            .map(|l| l.trim_end().to_string())
            .collect()
    };
    (lines(&shown), lines(&joined))
}

/// What `args` print through `script`'s pty, which reports 0 columns (as serial consoles do),
/// without colour (NO_COLOR) so lines compare as text.
fn script_zero_columns(args: &[String]) -> Vec<String> {
    script_zero_columns_env(args, &[("NO_COLOR", "1")])
}

/// As [`script_zero_columns`], with exactly `env` for NO_COLOR and CLICOLOR_FORCE.
fn script_zero_columns_env(args: &[String], env: &[(&str, &str)]) -> Vec<String> {
    let mut c = Command::new("script");
    c.env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .args([
            "-qec",
            &format!("{}{}", shell_line(args), stderr_redirect(args)),
            "/dev/null",
        ])
        .env_remove("COLUMNS")
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("failed to run script (util-linux)");
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "script: {}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches('\r').trim_end().to_string())
        .collect()
}

/// Checks what a terminal showed: no line broken by the terminal, every strategy named
/// whole, and one header line holding every word of `headers` (any of the alternatives).
fn check_unbroken(what: &str, shown: &[String], joined: &[String], headers: &[&[&str]]) {
    let text = shown.join("\n");
    assert_eq!(
        shown, joined,
        "{what}: a line was wider than the terminal and broken at its edge:\n{text}"
    );
    let header = shown
        .iter()
        .find(|l| l.split_whitespace().next() == Some(headers[0][0]))
        .unwrap_or_else(|| {
            panic!(
                "{what}: no header line starting {:?}:\n{text}",
                headers[0][0]
            )
        });
    for alts in headers {
        assert!(
            alts.iter().any(|h| header.contains(h)),
            "{what}: header lacks {alts:?}: {header:?}\n{text}"
        );
    }
    for l in shown {
        for word in l.split_whitespace() {
            let w = word
                .trim_start_matches('(')
                .trim_end_matches([',', ':', ';', ')']);
            // Words of their own that strategy names start with (`close 19997 (...)`).
            const WORDS: [&str; 2] = ["close", "poll"];
            if w.len() >= 4
                && !WORDS.contains(&w)
                && STRATEGIES.iter().any(|s| s.starts_with(w) && *s != w)
            {
                // A strategy's prefix alone: only fine when the full name is another one
                // (close-range is a prefix of close-range-cloexec).
                assert!(
                    STRATEGIES.contains(&w),
                    "{what}: strategy name split: {word:?} in {l:?}\n{text}"
                );
            }
        }
    }
}

fn bench_args() -> Vec<String> {
    let mut v = vec![fdaudit().display().to_string()];
    v.extend(
        [
            "bench",
            "--limits",
            "1024,4096",
            "--open-fds",
            "3,64",
            "-n",
            "2",
            "--batch",
            "2",
            "--trace-spawns",
            "0",
        ]
        .map(String::from),
    );
    v
}

const BENCH_HEADERS: &[&[&str]] = &[
    &["strategy"],
    &["open fds", "fds"],
    &["median"],
    &["speed-up"],
];

#[test]
fn bench_tables_fit_80_and_200_columns() {
    for width in [80, 200] {
        let (shown, joined) = tmux_pane(width, &bench_args());
        check_unbroken(&format!("bench at {width}"), &shown, &joined, BENCH_HEADERS);
        for s in STRATEGIES {
            assert!(
                shown.iter().any(|l| l.split_whitespace().next() == Some(s)),
                "bench at {width}: no row for {s}:\n{}",
                shown.join("\n")
            );
        }
        if width == 200 {
            assert!(
                shown.iter().any(|l| l.contains("close_range speed-up")),
                "200 columns have room for the full headers:\n{}",
                shown.join("\n")
            );
        }
    }
}

#[test]
fn bench_rows_are_whole_in_a_zero_column_pty() {
    let lines = script_zero_columns(&bench_args());
    let text = lines.join("\n");
    let header = lines
        .iter()
        .find(|l| l.trim_start().starts_with("strategy"))
        .unwrap_or_else(|| panic!("no header:\n{text}"));
    for h in [
        "strategy",
        "open fds",
        "median",
        "p95",
        "close_range speed-up",
    ] {
        assert!(
            header.contains(h),
            "full header {h:?} expected: {header:?}\n{text}"
        );
    }
    for s in STRATEGIES {
        let row = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(s))
            .unwrap_or_else(|| panic!("no row for {s}:\n{text}"));
        assert!(row.contains('×'), "the whole row on one line: {row:?}");
    }
}

/// Runs a bash script with `fdaudit` on PATH, returns stdout; panics with stderr on failure.
fn bash(script: &str) -> String {
    let bin = fdaudit();
    let dir = bin.parent().expect("the binary has a directory");
    let path = std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH joins");
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .env("PATH", path)
        .output()
        .expect("failed to run bash");
    assert!(
        out.status.success(),
        "bash failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// What bash offers for the words typed so far (the last one is being completed), by
/// calling the function `complete -p fdaudit` names the way readline would.
fn bash_complete(words: &[&str]) -> Vec<String> {
    let words_q: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"source <(fdaudit completions bash) || exit 1
spec=$(complete -p fdaudit) || {{ echo "no completion registered for fdaudit" >&2; exit 1; }}
func=$(sed -n 's/.* -F \([^ ]*\) .*/\1/p' <<<"$spec")
[ -n "$func" ] || {{ echo "no -F function in: $spec" >&2; exit 1; }}
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
"$func" fdaudit "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        words = words_q.join(" ")
    );
    bash(&script).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_subcommands_and_flags() {
    assert_eq!(bash_complete(&["fdaudit", "tr"]), ["trace"]);
    let scan = bash_complete(&["fdaudit", "s"]);
    assert_eq!(scan, ["scan"], "hidden commands are not offered");
    let flags = bash_complete(&["fdaudit", "trace", "--"]);
    assert!(
        flags.iter().any(|f| f == "--pid") && flags.iter().any(|f| f == "--demo"),
        "trace flags: {flags:?}"
    );
}

#[test]
fn zsh_and_fish_scripts_are_produced() {
    for (shell, needle) in [("zsh", "#compdef fdaudit"), ("fish", "complete -c fdaudit")] {
        let out = Command::new(fdaudit())
            .args(["completions", shell])
            .output()
            .expect("failed to run fdaudit");
        assert!(out.status.success(), "completions {shell}: {}", out.status);
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(s.contains(needle), "{shell} script lacks {needle:?}");
    }
    let out = Command::new(fdaudit())
        .args(["completions", "tcsh"])
        .output()
        .expect("failed to run fdaudit");
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values"));
}

/// `man -l` renders every shipped page without a groff warning, with the sections people
/// look for.
#[test]
fn man_renders_the_shipped_pages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/man");
    let mut pages: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    pages.sort();
    assert!(pages.len() >= 6, "pages: {pages:?}");
    for page in &pages {
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80")
            .output()
            .expect("failed to run man (apt-get install man-db)");
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "man -l {}: {err}", page.display());
        assert!(
            err.trim().is_empty(),
            "man -l {} warned: {err}",
            page.display()
        );
        for section in ["NAME", "SYNOPSIS", "OPTIONS", "SEE ALSO"] {
            assert!(
                text.contains(section),
                "{} lacks {section}:\n{text}",
                page.display()
            );
        }
        let name = page.file_name().unwrap().to_string_lossy();
        if ["trace", "scan", "bench", "doctor"]
            .iter()
            .any(|s| name == format!("fdaudit-{s}.1"))
        {
            for section in ["EXAMPLES", "EXIT STATUS", "141"] {
                assert!(text.contains(section), "{name} lacks {section}:\n{text}");
            }
        }
        // clap_mangen's `[-t ]...` for a short-only flag is tidied.
        assert!(
            !text.contains(" ]"),
            "{name}: a flag with a trailing space:\n{text}"
        );
    }
    let top = Command::new("man")
        .arg("-l")
        .arg(dir.join("fdaudit.1"))
        .env("MANPAGER", "cat")
        .output()
        .expect("failed to run man");
    let text = String::from_utf8_lossy(&top.stdout);
    for needle in ["fdaudit-trace(1)", "ENVIRONMENT", "NO_COLOR"] {
        assert!(text.contains(needle), "fdaudit.1 lacks {needle}:\n{text}");
    }
}

/// Ctrl-C in the terminal (SIGINT to the whole foreground group, spawners included) stops
/// the bench and still prints the cells measured so far, exit status 130.
#[test]
fn bench_ctrl_c_prints_the_finished_cells() {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(fdaudit());
    // A terminal's foreground job takes Ctrl-C: start from SIGINT's default, whatever this
    // test's caller ignored (bench keeps a signal its caller ignored, so it would run all
    // 100000 spawns).
    let child = default_stop_signals(&mut cmd)
        .args([
            "bench",
            "--limits",
            "1024,4096",
            "--open-fds",
            "3",
            "-n",
            "100000",
            "--batch",
            "5",
            "--trace-spawns",
            "0",
            "--strategies",
            "close-loop,close-range",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("failed to start fdaudit bench");
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling the process group the test created.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) }, 0);
    let out = child
        .wait_with_output()
        .expect("failed to wait for fdaudit bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stderr.contains("interrupted after"), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    for row in ["NOFILE 1024", "close-loop", "close-range"] {
        assert!(stdout.contains(row), "{row} missing:\n{stdout}");
    }
}

/// A running scan-fixture (tests/src/bin/scan-fixture.rs): listening socket, /tmp directory,
/// memfd, pipes, all without close-on-exec; it exits when dropped.
struct ScanFixture {
    child: std::process::Child,
    pid: u32,
}

impl ScanFixture {
    fn start() -> ScanFixture {
        use std::io::BufRead as _;
        let mut child = Command::new(env!("CARGO_BIN_EXE_scan-fixture"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("failed to start scan-fixture");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("failed to read the fixture's line");
        let pid = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("pid="))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {line:?}"));
        ScanFixture { child, pid }
    }
}

impl Drop for ScanFixture {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn scan_args(pids: &[u32], extra: &[&str]) -> Vec<String> {
    let mut v = vec![fdaudit().display().to_string(), "scan".into()];
    for p in pids {
        v.push("-p".into());
        v.push(p.to_string());
    }
    v.extend(["--close-cost-ns", "1000"].map(String::from));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

const SCAN_HEADERS: &[&[&str]] = &[&["SEVERITY"], &["PID"], &["COMM"], &["REASON"]];
const FD_HEADERS: &[&[&str]] = &[&["FD"], &["KIND"], &["TARGET"], &["CLOEXEC", "CLOEX"]];

#[test]
fn scan_tables_fit_80_and_200_columns() {
    let fx = ScanFixture::start();
    for width in [80, 200] {
        let (shown, joined) = tmux_pane(width, &scan_args(&[fx.pid], &[]));
        check_unbroken(&format!("scan at {width}"), &shown, &joined, SCAN_HEADERS);
        check_unbroken(&format!("scan fds at {width}"), &shown, &joined, FD_HEADERS);
        let text = shown.join("\n");
        for word in ["critical", "listening", "close-on-exec"] {
            assert!(
                text.contains(word),
                "scan at {width}: {word} missing:\n{text}"
            );
        }
    }
}

#[test]
fn scan_rows_are_whole_in_a_zero_column_pty() {
    let fx = ScanFixture::start();
    let lines = script_zero_columns(&scan_args(&[fx.pid], &[]));
    let text = lines.join("\n");
    let critical = lines
        .iter()
        .find(|l| l.trim_start().starts_with("critical"))
        .unwrap_or_else(|| panic!("no critical finding:\n{text}"));
    assert!(
        critical.contains("listening") && critical.contains("accept its connections"),
        "the whole finding on one line: {critical:?}\n{text}"
    );
}

/// Identical findings of processes running the same program print once, with the count
/// and the pids; JSON keeps every one.
#[test]
fn scan_groups_identical_findings() {
    let fx: Vec<ScanFixture> = (0..3).map(|_| ScanFixture::start()).collect();
    let pids: Vec<u32> = fx.iter().map(|f| f.pid).collect();
    let out = Command::new(fdaudit())
        .args(&scan_args(&pids, &["--only-findings"])[1..])
        .output()
        .expect("failed to run fdaudit scan");
    let text = String::from_utf8_lossy(&out.stdout);
    let dir_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("directory /tmp"))
        .collect();
    assert_eq!(dir_lines.len(), 1, "one line for the three alike:\n{text}");
    for p in &pids {
        assert!(
            dir_lines[0].contains(&p.to_string()),
            "pid {p} named: {}",
            dir_lines[0]
        );
    }
    assert!(dir_lines[0].contains("3 processes"), "{}", dir_lines[0]);
    let listening = text.lines().filter(|l| l.contains("listening")).count();
    assert_eq!(listening, 3, "different ports, different findings:\n{text}");
    let json = Command::new(fdaudit())
        .args(&scan_args(&pids, &["--json"])[1..])
        .output()
        .expect("failed to run fdaudit scan --json");
    let dirs = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter(|l| l.contains("\"finding\"") && l.contains("directory /tmp"))
        .count();
    assert_eq!(dirs, 3, "JSON keeps one finding per process");
}

fn count_escapes(args: &[String], env: &[(&str, &str)]) -> usize {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..])
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("failed to run fdaudit");
    String::from_utf8_lossy(&out.stdout).matches('\x1b').count()
}

#[test]
fn scan_colour_only_when_asked_or_on_a_terminal() {
    let fx = ScanFixture::start();
    let always = scan_args(&[fx.pid], &["--color", "always"]);
    let out = Command::new(&always[0])
        .args(&always[1..])
        .env("NO_COLOR", "1")
        .output()
        .expect("failed to run fdaudit");
    let text = String::from_utf8_lossy(&out.stdout);
    let critical = text
        .lines()
        .find(|l| l.contains("critical"))
        .unwrap_or_else(|| panic!("no critical finding:\n{text}"));
    assert!(
        critical.contains("\x1b["),
        "--color always colours a critical finding: {critical:?}"
    );
    assert_eq!(
        count_escapes(&scan_args(&[fx.pid], &[]), &[]),
        0,
        "a pipe gets no colour"
    );
    assert_eq!(
        count_escapes(
            &scan_args(&[fx.pid], &[]),
            &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]
        ),
        0,
        "NO_COLOR wins"
    );
    assert!(count_escapes(&scan_args(&[fx.pid], &[]), &[("CLICOLOR_FORCE", "1")]) > 0);
    assert_eq!(
        count_escapes(&scan_args(&[fx.pid], &["--json", "--color", "always"]), &[]),
        0,
        "never in JSON"
    );
    // On a terminal: colour by default, none with NO_COLOR.
    let lines = script_zero_columns_env(&scan_args(&[fx.pid], &[]), &[]);
    let critical = lines.iter().find(|l| l.contains("critical"));
    assert!(
        critical.is_some_and(|l| l.contains("\x1b[")),
        "a terminal gets colour: {critical:?}"
    );
    let lines = script_zero_columns(&scan_args(&[fx.pid], &[]));
    assert!(
        !lines.iter().any(|l| l.contains('\x1b')),
        "NO_COLOR=1 on a terminal: none"
    );
}

/// The trace tests load eBPF programs: one at a time, as root.
static TRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn trace_guard() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        fdaudit_tests::is_root(),
        "tracing needs root and BTF: run as root (`.ci/run` does)"
    );
    TRACE.lock().unwrap_or_else(|e| e.into_inner())
}

fn trace_args(extra: &[&str]) -> Vec<String> {
    let mut v = vec![fdaudit().display().to_string(), "trace".into()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `args` run with stdout and stderr into pipes.
fn run_piped(args: &[String], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..])
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("failed to run fdaudit");
    assert!(
        out.status.success() || out.status.code() == Some(130),
        "{args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What `trace` writes to its records stream, through `-o FILE`: with `--demo` or `-- CMD`
/// the records go to stderr, beside the notes and the command's own stderr (#10), and never
/// to stdout.
fn trace_records(extra: &[&str], env: &[(&str, &str)]) -> String {
    let path = fdaudit_tests::temp_path("terminal-trace");
    let file = path.display().to_string();
    let mut args = trace_args(&["-o", &file]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = run_piped(&args, env);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{args:?}: failed to read {file}: {e}"));
    let _ = std::fs::remove_file(&path);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("] -> "),
        "no spawn line on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    text
}

const TRACE_HEADERS: &[&[&str]] = &[
    &["parent"],
    &["exec"],
    &["spawns"],
    &["strategy"],
    &["leaked fds", "leaked"],
];

/// At 60 columns (a tmux split) the spawn count is what gives way.
const TRACE_HEADERS_60: &[&[&str]] = &[
    &["parent"],
    &["exec"],
    &["closes"],
    &["window"],
    &["strategy"],
    &["leaked"],
];

#[test]
#[ignore = "needs root and BTF"]
fn trace_demo_fits_60_80_and_200_columns_and_a_zero_column_pty() {
    let _g = trace_guard();
    for width in [60, 80, 200] {
        let (shown, joined) = tmux_pane(width, &trace_args(&["--demo"]));
        check_unbroken(
            &format!("trace --demo at {width}"),
            &shown,
            &joined,
            if width == 60 {
                TRACE_HEADERS_60
            } else {
                TRACE_HEADERS
            },
        );
        for l in &shown {
            assert!(l.chars().count() <= usize::from(width), "{l:?} at {width}");
        }
        let text = shown.join("\n");
        assert!(text.contains("LEAKED"), "trace --demo at {width}:\n{text}");
    }
    let lines = script_zero_columns(&trace_args(&["--demo"]));
    let text = lines.join("\n");
    let header = lines
        .iter()
        .find(|l| l.trim_start().starts_with("parent"))
        .unwrap_or_else(|| panic!("no summary table:\n{text}"));
    for h in [
        "exec",
        "spawns",
        "close/spawn med",
        "window med",
        "strategy",
        "leaked fds",
    ] {
        assert!(header.contains(h), "full header {h:?}: {header:?}\n{text}");
    }
    let leaked = lines
        .iter()
        .find(|l| l.contains("LEAKED"))
        .unwrap_or_else(|| panic!("no leaked spawn:\n{text}"));
    assert!(
        leaked.contains("credentials"),
        "the whole spawn line on one line: {leaked:?}"
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn trace_colours_a_leaked_spawn_only_when_asked_or_on_a_terminal() {
    let _g = trace_guard();
    let always = trace_records(&["--demo", "--color", "always"], &[]);
    let leaked = always
        .lines()
        .find(|l| l.contains("LEAKED"))
        .unwrap_or_else(|| panic!("no leaked spawn:\n{always}"));
    assert!(leaked.contains("\x1b["), "--color always: {leaked:?}");
    let stderr = run_piped(&trace_args(&["--demo"]), &[]).stderr;
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(stderr.contains("LEAKED"), "the records on stderr: {stderr}");
    assert!(!stderr.contains('\x1b'), "a pipe gets none: {stderr}");
    assert!(
        !trace_records(&["--demo"], &[]).contains('\x1b'),
        "a file gets none unless asked"
    );
    let json = run_piped(&trace_args(&["--demo", "--json", "--color", "always"]), &[]).stderr;
    let json = String::from_utf8_lossy(&json);
    assert!(
        json.contains("\"type\":\"spawn\""),
        "the records on stderr: {json}"
    );
    assert!(!json.contains('\x1b'), "never in JSON");
    let tty = script_zero_columns_env(&trace_args(&["--demo"]), &[]).join("\n");
    assert!(tty.contains("\x1b["), "a terminal gets colour:\n{tty}");
    let no_color = script_zero_columns_env(&trace_args(&["--demo"]), &[("NO_COLOR", "1")]);
    assert!(
        !no_color.join("\n").contains('\x1b'),
        "NO_COLOR=1 on a terminal: none"
    );
}

/// Lines that report a spawn (`parent[pid] -> pid ...`), with any time prefix.
fn spawn_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.contains("] -> ")).collect()
}

#[test]
#[ignore = "needs root and BTF"]
fn trace_filters_print_only_what_matches() {
    let _g = trace_guard();
    let out = trace_records(&["--exec", "*/true", "--demo"], &[]);
    let lines = spawn_lines(&out);
    assert_eq!(lines.len(), 5, "the demo's five /bin/true spawns:\n{out}");
    let cmd = [
        "--exec",
        "*/true",
        "--",
        "sh",
        "-c",
        "/bin/true; /bin/echo x >/dev/null; /bin/true",
    ];
    let out = trace_records(&cmd, &[]);
    let lines = spawn_lines(&out);
    assert_eq!(lines.len(), 2, "only the two /bin/true spawns:\n{out}");
    assert!(lines.iter().all(|l| l.contains("/bin/true")), "{out}");
    assert!(
        !out.contains("/bin/echo"),
        "echo is filtered out of the table too:\n{out}"
    );
    let out = trace_records(&["--only-leaks", "--demo"], &[]);
    let lines = spawn_lines(&out);
    assert_eq!(lines.len(), 2, "the demo's two leaking spawns:\n{out}");
    assert!(lines.iter().all(|l| l.contains("LEAKED")), "{out}");
    let out = trace_records(&["--min-closes", "100", "--demo"], &[]);
    assert_eq!(spawn_lines(&out).len(), 1, "only the close loop:\n{out}");
    let out = trace_records(&["--parent-comm", "nothing-like-it", "--demo"], &[]);
    assert_eq!(spawn_lines(&out).len(), 0, "{out}");
    assert!(out.contains("0 spawns shown"), "{out}");
}

#[test]
#[ignore = "needs root and BTF"]
fn trace_prefixes_times_like_strace() {
    let _g = trace_guard();
    let out = trace_records(&["-t", "--demo"], &[]);
    let lines = spawn_lines(&out);
    assert_eq!(lines.len(), 5, "{out}");
    for l in &lines {
        let b = l.as_bytes();
        assert!(
            b.len() > 9 && b[2] == b':' && b[5] == b':' && b[8] == b' ',
            "HH:MM:SS first: {l:?}"
        );
    }
    let out = trace_records(&["-r", "--demo"], &[]);
    assert_eq!(spawn_lines(&out).len(), 5, "{out}");
    for l in spawn_lines(&out) {
        let first = l.split_whitespace().next().unwrap_or("");
        assert!(
            first.contains('.') && first.parse::<f64>().is_ok(),
            "seconds since the previous line first: {l:?}"
        );
    }
}

/// `env /bin/true` is one spawn that exec's twice: one spawn in the headline and the table,
/// its fds at the last exec counted as leaks, those of the first as transient.
#[test]
#[ignore = "needs root and BTF"]
fn an_exec_chain_is_one_spawn_in_headline_and_table() {
    let _g = trace_guard();
    let out = trace_records(&["--", "sh", "-c", "env /bin/true; :"], &[]);
    assert!(out.contains("\n1 spawn traced"), "{out}");
    let header = out
        .lines()
        .position(|l| l.trim_start().starts_with("parent"))
        .unwrap_or_else(|| panic!("no table:\n{out}"));
    let rows: Vec<&str> = out
        .lines()
        .skip(header + 1)
        .take_while(|l| !l.starts_with("note: ") && !l.starts_with("warning: "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "one row:\n{out}");
    let cols: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(cols[0], "sh", "{out}");
    assert!(
        rows[0].contains("/usr/bin/env") && rows[0].contains("/bin/true"),
        "{out}"
    );
    assert!(cols.contains(&"1"), "one spawn: {out}");
}

/// The traced command's own re-exec has the image that exec'd as its parent (`env`), named
/// with its pid, never blank and never fdaudit.
#[test]
#[ignore = "needs root and BTF"]
fn the_parent_of_the_commands_re_exec_is_named() {
    let _g = trace_guard();
    let out = trace_records(&["--", "env", "/bin/true"], &[]);
    let lines = spawn_lines(&out);
    assert!(!lines.is_empty(), "{out}");
    for l in lines {
        assert!(l.starts_with("env["), "{l:?}");
    }
}

/// As root the bench table has the traced columns too: the widest table fdaudit prints.
#[test]
#[ignore = "needs root and BTF"]
fn traced_bench_tables_fit_80_and_200_columns() {
    let _g = trace_guard();
    let mut args = bench_args();
    let n = args.len();
    args[n - 1] = "1".into(); // --trace-spawns 1
    for width in [80, 200] {
        let (shown, joined) = tmux_pane(width, &args);
        check_unbroken(
            &format!("traced bench at {width}"),
            &shown,
            &joined,
            BENCH_HEADERS,
        );
        let text = shown.join("\n");
        assert!(
            text.contains("close()"),
            "traced columns at {width}:\n{text}"
        );
        if width == 200 {
            assert!(
                text.contains("getdents64()") && text.contains("trace check"),
                "{text}"
            );
        }
    }
}
