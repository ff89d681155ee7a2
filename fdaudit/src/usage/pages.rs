//! What each subcommand's manual page has beyond `--help`: EXAMPLES (here, as data), EXIT
//! STATUS (read from the README's "Exit status" table, the one place the codes are
//! described for users, so the two cannot disagree) and SEE ALSO.

use clap_mangen::roff::{bold, roman, Roff};

/// Each page's examples: (command line, what it does).
const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "trace",
        &[
            ("sudo fdaudit trace -- python3 app.py", "Trace app.py and everything it spawns; records go to stderr, the command keeps stdout."),
            ("sudo fdaudit trace -p 1234 --duration 30", "Follow a running process and its descendants for 30 seconds."),
            ("sudo fdaudit trace --cgroup /system.slice/nginx.service --no-syscalls", "Leaked fds of a service's spawns, at near-zero cost."),
            ("sudo fdaudit trace --json -o spawns.jsonl --fail-on-leak -- make test", "CI: JSON records to a file, exit 3 when a spawn leaked an fd."),
            ("sudo fdaudit trace --demo", "The built-in workload: a leak, a close loop, a poll scan and close_range."),
            ("sudo fdaudit trace -q --fail-on-strategy close-loop,fcntl-scan --max-closes 1000 -- make test", "CI: exit 3 when a spawn close-looped or made more than 1000 closing calls before exec."),
        ],
    ),
    (
        "scan",
        &[
            ("sudo fdaudit scan", "Every process's fds, close-on-exec flags and NOFILE limits, with findings."),
            ("fdaudit scan -p $$ --json", "One process (your shell), as JSON records."),
            ("sudo fdaudit scan --fail-on high", "CI: exit 3 when any finding is high or critical."),
        ],
    ),
    (
        "bench",
        &[
            ("fdaudit bench", "Spawn children with each fd-closing strategy across NOFILE limits; tables and fits."),
            ("fdaudit bench --limits 1024,20000 --strategies close-loop,close-range --plot bench.svg", "Two strategies at two limits, plotted."),
        ],
    ),
    (
        "diff",
        &[
            ("fdaudit diff before.jsonl after.jsonl", "Compare two `trace --json` runs: per group the strategy, closes, window and leaks; new and fixed leaks."),
            ("fdaudit diff --json --window-tolerance 25 main.jsonl pr.jsonl", "CI: JSON records; exit 3 on a new leak, a worse strategy, more closes, or a window 25 % longer."),
        ],
    ),
    (
        "doctor",
        &[
            ("sudo fdaudit doctor", "Whether trace can work here, and what is missing."),
            ("sudo fdaudit doctor --json", "The same checks as JSON records."),
        ],
    ),
    (
        "watch",
        &[
            ("sudo fdaudit watch --listen 127.0.0.1:9911", "Serve spawn and leak metrics for Prometheus."),
        ],
    ),
    (
        "unclosed",
        &[
            ("sudo fdaudit unclosed -p 1234", "Follow a service; on Ctrl-C, the fds it opened and still holds, by the code that opened them."),
            ("sudo fdaudit unclosed --interval 60 --top 5 -p 1234", "The same every minute, the five worst call sites."),
            ("sudo fdaudit unclosed --fail-on-unclosed -- ./test-suite", "Exit 3 when a process of the suite exits holding fds it opened."),
        ],
    ),
    (
        "completions",
        &[("fdaudit completions bash > /etc/bash_completion.d/fdaudit", "Install bash completion.")],
    ),
];

/// The README, whose "Exit status" table [`exit_status`] reads.
const README: &str = include_str!("../../../README.md");

/// `sub`'s rows of the README's exit status table: (status, meaning), markdown removed;
/// "the same" is the meaning of the first column before it that has one.
pub fn exit_status(sub: &str) -> Vec<(String, String)> {
    let Some(table) = README.split("\n## Exit status\n").nth(1) else {
        return Vec::new();
    };
    let rows: Vec<Vec<String>> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(cells)
        .collect();
    let Some(col) = rows.first().and_then(|h| h.iter().position(|c| c == sub)) else {
        return Vec::new();
    };
    rows.iter()
        .skip(2) // the header and the |---| line
        .filter_map(|r| {
            let meaning = r[1..=col.min(r.len() - 1)]
                .iter()
                .rev()
                .find(|c| !c.is_empty() && *c != "the same")?;
            let own = r.get(col).is_some_and(|c| !c.is_empty());
            own.then(|| (r[0].clone(), meaning.clone()))
        })
        .collect()
}

/// A markdown table row's cells, without backticks and with `\|` as `|`.
fn cells(line: &str) -> Vec<String> {
    let line = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => cur.push(chars.next().unwrap_or('|')),
            '|' => out.push(std::mem::take(&mut cur)),
            '`' => {}
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// EXAMPLES, EXIT STATUS and SEE ALSO of `sub`'s page.
pub fn sub_sections(roff: &mut Roff, sub: &str, subs: &[String]) {
    if let Some((_, examples)) = EXAMPLES.iter().find(|(s, _)| *s == sub) {
        roff.control("SH", ["EXAMPLES"]);
        for (cmd, what) in *examples {
            roff.control("TP", []);
            roff.text([bold(*cmd)]);
            roff.text([roman(*what)]);
        }
    }
    let codes = exit_status(sub);
    if !codes.is_empty() {
        roff.control("SH", ["EXIT STATUS"]);
        for (code, meaning) in codes {
            roff.control("TP", []);
            roff.text([bold(code)]);
            roff.text([roman(meaning)]);
        }
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = std::iter::once("fdaudit(1)".to_string())
        .chain(
            subs.iter()
                .filter(|s| *s != sub)
                .map(|s| format!("fdaudit-{s}(1)")),
        )
        .collect();
    see.extend(["strace(1)", "close_range(2)", "proc(5)"].map(String::from));
    roff.text([roman(see.join(", "))]);
}

/// clap_mangen 0.3 writes a short-only flag as `-t ` in the synopsis (`[-t ]...`): the
/// space goes.
pub fn tidy_synopsis(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let mut out = String::with_capacity(text.len());
    let mut rest: &str = &text;
    // `\fB\-X \fR` (a bold short flag with a trailing space) becomes `\fB\-X\fR`.
    while let Some(i) = rest.find("\\fB\\-") {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        let flag = &tail[5..];
        let mut ch = flag.chars();
        match (ch.next(), ch.as_str().strip_prefix(" \\fR")) {
            (Some(c), Some(after)) if c.is_ascii_alphanumeric() => {
                out.push_str("\\fB\\-");
                out.push(c);
                out.push_str("\\fR");
                rest = after;
            }
            _ => {
                out.push_str("\\fB\\-");
                rest = flag;
            }
        }
    }
    out.push_str(rest);
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_comes_from_the_readme_table() {
        let trace = exit_status("trace");
        let codes: Vec<&str> = trace.iter().map(|(c, _)| c.as_str()).collect();
        for c in ["0", "2", "3", "126, 127", "141", "128+N"] {
            assert!(codes.contains(&c), "trace lacks {c}: {trace:?}");
        }
        let (_, pipe) = exit_status("doctor")
            .into_iter()
            .find(|(c, _)| c == "141")
            .expect("doctor has 141");
        assert!(
            pipe.contains("reader went away") && pipe.contains("fdaudit scan | head"),
            "{pipe}"
        );
        assert!(exit_status("doctor").iter().all(|(c, _)| c != "3"));
        assert!(!exit_status("scan").is_empty() && !exit_status("bench").is_empty());
    }

    #[test]
    fn a_short_flag_loses_its_trailing_space() {
        let page = br"[\fB\-t \fR]... [\fB\-r \fR] [\fB\-p\fR|\fB\-\-pid\fR]";
        assert_eq!(
            String::from_utf8(tidy_synopsis(page)).unwrap(),
            r"[\fB\-t\fR]... [\fB\-r\fR] [\fB\-p\fR|\fB\-\-pid\fR]"
        );
    }
}
