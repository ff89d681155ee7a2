//! fdaudit in a terminal: shell completion and the manual pages.

use std::path::Path;
use std::process::Command;

use fdaudit_tests::fdaudit;

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
