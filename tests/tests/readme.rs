//! The README's sample outputs are the current binary's: each block after a
//! `<!-- sample: NAME -->` line is made again here and compared with numbers, times and
//! column padding taken out (pids, inode numbers and latencies differ between runs; words,
//! lines and their order may not). `FDAUDIT_BLESS=1` (or `cargo xtask readme`) writes the
//! new outputs into README.md instead. Samples run with no fds above 2, so no note about
//! fds the environment passed in appears.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fdaudit_tests::{fdaudit, guard, require_root};

fn readme() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")
}

/// Runs `argv` with fds 0-2 only; returns stdout then stderr, as a terminal shows both.
fn run_clean(argv: &[&str]) -> String {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .env("COLUMNS", "200")
        .env_remove("FDAUDIT_BACKEND");
    // SAFETY: close_range is async-signal-safe; it only closes this child's fds.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {argv:?}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

/// The sample named `name`, as the block shows it.
fn make(name: &str) -> String {
    let me = fdaudit();
    let me = me.to_str().unwrap();
    match name {
        "trace-demo" => run_clean(&[me, "trace", "--demo"]),
        "scan" => {
            // A sleep holding an inheritable writable file at fd 7, nothing else above 2.
            let token = std::env::temp_dir().join("api-token");
            let mut sleep = Command::new("sh");
            sleep
                .args(["-c", &format!("exec sleep 60 7>>{}", token.display())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: as in run_clean.
            unsafe {
                sleep.pre_exec(|| {
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                    Ok(())
                });
            }
            let mut sleep = sleep.spawn().expect("start sleep");
            let pid = sleep.id().to_string();
            // Until sh has exec'd sleep with fd 7 open.
            let fd7 = format!("/proc/{pid}/fd/7");
            for _ in 0..500 {
                if Path::new(&fd7).exists()
                    && std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default()
                        == "sleep\n"
                {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let out = run_clean(&[me, "scan", "-p", &pid]);
            let _ = sleep.kill();
            let _ = sleep.wait();
            let _ = std::fs::remove_file(&token);
            format!("$ fdaudit scan -p {pid}\n{out}")
        }
        "doctor-nobody" => {
            let out = run_clean(&[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                me,
                "doctor",
            ]);
            format!("$ setpriv --reuid=65534 --regid=65534 --clear-groups fdaudit doctor\n{out}")
        }
        other => panic!("README.md names an unknown sample {other:?}"),
    }
}

/// What may differ between two runs taken out: every number (pids, inodes, counts,
/// latencies and their unit), the temporary directory, and runs of padding.
fn normalize(text: &str) -> Vec<String> {
    let tmp = std::env::temp_dir().display().to_string();
    text.lines()
        .map(|l| {
            let l = l.replace(&tmp, "/tmp");
            let mut out = String::new();
            let mut chars = l.chars().peekable();
            while let Some(c) = chars.next() {
                if c.is_ascii_digit() {
                    while chars
                        .peek()
                        .is_some_and(|c| c.is_ascii_digit() || *c == '.')
                    {
                        chars.next();
                    }
                    out.push('N');
                } else if c == ' ' {
                    while chars.peek() == Some(&' ') {
                        chars.next();
                    }
                    out.push(' ');
                } else {
                    out.push(c);
                }
            }
            // A latency's unit follows its size.
            for unit in [" ns", " µs", " ms", " s"] {
                out = out.replace(&format!("N{unit}"), "N T");
            }
            out.trim_end().to_string()
        })
        .collect()
}

/// Each sample block: (name, first line of its text, end line), 0-based, the fences excluded.
fn blocks(readme: &[&str]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, l) in readme.iter().enumerate() {
        let Some(name) = l
            .strip_prefix("<!-- sample: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        assert!(
            readme[i + 1].starts_with("```"),
            "a fence after line {}",
            i + 1
        );
        let end = (i + 2..readme.len())
            .find(|&j| readme[j].starts_with("```"))
            .expect("a closing fence");
        out.push((name.to_string(), i + 2, end));
    }
    out
}

#[test]
fn normalizing_keeps_words_and_drops_numbers_and_padding() {
    assert_eq!(
        normalize("a[12858] -> 12863  window 592 µs (~5.84 ms)  x"),
        ["a[N] -> N window N T (~N T) x"]
    );
}

#[test]
#[ignore = "needs root and BTF"]
fn readme_samples_are_what_the_binary_prints() {
    require_root();
    let _g = guard();
    let path = readme();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let found = blocks(&lines);
    assert!(found.len() >= 3, "sample markers in README.md: {found:?}");
    let bless = std::env::var_os("FDAUDIT_BLESS").is_some_and(|v| v == "1");
    let mut new: Vec<String> = Vec::new();
    let mut at = 0;
    let mut stale = Vec::new();
    for (name, start, end) in found {
        let now = make(&name);
        if normalize(&lines[start..end].join("\n")) != normalize(&now) {
            stale.push(format!(
                "{name}:\n--- README.md\n{}\n--- fdaudit now\n{now}",
                lines[start..end].join("\n")
            ));
        }
        new.extend(lines[at..start].iter().map(|s| s.to_string()));
        new.extend(now.lines().map(|s| s.trim_end().to_string()));
        at = end;
    }
    new.extend(lines[at..].iter().map(|s| s.to_string()));
    if bless {
        std::fs::write(&path, new.join("\n") + "\n").unwrap();
        return;
    }
    assert!(
        stale.is_empty(),
        "README.md samples differ from what the binary prints (FDAUDIT_BLESS=1 or `cargo xtask \
         readme` rewrites them):\n{}",
        stale.join("\n")
    );
}
