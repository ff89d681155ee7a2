//! fdaudit in a terminal: tables at 80 and 200 columns (tmux) and in a pty that reports 0
//! columns (`script`), colour, shell completion and the manual pages.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fdaudit_tests::fdaudit;

const STRATEGIES: [&str; 10] = [
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
    let script = format!("{} 2>/dev/null; echo {done}; sleep 60", shell_line(args));
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

/// What `args` print through `script`'s pty, which reports 0 columns (as serial consoles do).
fn script_zero_columns(args: &[String]) -> Vec<String> {
    let out = Command::new("script")
        .args([
            "-qec",
            &format!("{} 2>/dev/null", shell_line(args)),
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
            let w = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '-');
            if w.len() >= 4 && STRATEGIES.iter().any(|s| s.starts_with(w) && *s != w) {
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
        for section in ["NAME", "SYNOPSIS", "OPTIONS"] {
            assert!(
                text.contains(section),
                "{} lacks {section}:\n{text}",
                page.display()
            );
        }
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
    let child = Command::new(fdaudit())
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
