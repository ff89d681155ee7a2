//! GitHub Actions, when `GITHUB_ACTIONS=true`: `::error` and `::warning` workflow commands
//! for a trace's verdicts, within GitHub's caps (10 errors and 10 warnings a step are
//! shown: the worst first, and the last of each says how many more), and a markdown table
//! appended to `$GITHUB_STEP_SUMMARY` when it is set. The commands go to stderr, the
//! diagnostics stream (the runner reads both; stdout stays the command's, or the data),
//! except when JSON records go there.
//! <https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions>

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{Context as _, Result};

use super::ci::{CiVerdict, GroupCase};

/// How many annotations of one level GitHub shows for a step.
pub const CAP: usize = 10;
/// How many groups the step summary's table lists.
const SUMMARY_ROWS: usize = 50;

/// Whether fdaudit runs in a GitHub Actions job.
pub fn active() -> bool {
    std::env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true")
}

/// An annotation: its title and message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    title: String,
    message: String,
}

/// The errors (a gate's verdict on a group, or on the run when no group shows it) and
/// warnings (an incomplete trace, fds leaked that no gate judged), worst first.
fn annotations(v: &CiVerdict) -> (Vec<Note>, Vec<Note>) {
    let mut errors = Vec::new();
    let mut failing: Vec<&GroupCase> = v.groups.iter().filter(|g| !g.failures.is_empty()).collect();
    // Worst first: the most leaked fds, then the most closes, then the most spawns.
    failing.sort_by_key(|g| std::cmp::Reverse((g.leaked_fds, g.close_max, g.spawns)));
    for g in &failing {
        for line in &g.failures {
            errors.push(Note {
                title: format!("fdaudit {}: {} → {}", v.command, g.parent_comm, g.exec_path),
                message: format!(
                    "{line} ({}; {} spawns, {} leaked fds)",
                    g.strategy, g.spawns, g.leaked_fds
                ),
            });
        }
    }
    // A failed gate that no group shows (the output filters left its spawns out).
    for gate in v.gates.iter() {
        let Some(line) = gate.failure.as_deref() else {
            continue;
        };
        if v.command == "trace" && failing.iter().any(|g| g.failures.iter().any(|f| f == line)) {
            continue;
        }
        if v.command != "trace" && !failing.is_empty() {
            continue;
        }
        errors.push(Note {
            title: format!("fdaudit {} {}", v.command, gate.name),
            message: line.to_string(),
        });
    }
    let mut warnings = Vec::new();
    if let Some(why) = &v.incomplete {
        warnings.push(Note {
            title: "fdaudit: the trace is incomplete".into(),
            message: why.clone(),
        });
    }
    let mut leaky: Vec<&GroupCase> = v
        .groups
        .iter()
        .filter(|g| g.failures.is_empty() && g.leaked_fds > 0)
        .collect();
    leaky.sort_by_key(|g| std::cmp::Reverse((g.leaked_fds, g.spawns)));
    for g in leaky {
        warnings.push(Note {
            title: format!("fdaudit: {} → {} leaked fds", g.parent_comm, g.exec_path),
            message: format!(
                "{} spawns leaked {} fds into {} ({}); --fail-on-leak fails on it",
                g.spawns, g.leaked_fds, g.exec_path, g.strategy
            ),
        });
    }
    (errors, warnings)
}

/// At most [`CAP`]: the first `CAP - 1` and one that says how many more, when there are more.
fn capped(mut notes: Vec<Note>, what: &str) -> Vec<Note> {
    if notes.len() > CAP {
        let more = notes.len() - (CAP - 1);
        notes.truncate(CAP - 1);
        notes.push(Note {
            title: format!("fdaudit: and {more} more {what}"),
            message: format!(
                "and {more} more {what}: the step summary and the trace's output list them all"
            ),
        });
    }
    notes
}

/// The workflow command lines for `v`, and a last plain line that counts them.
pub fn commands(v: &CiVerdict) -> Vec<String> {
    let (errors, warnings) = annotations(v);
    let (ne, nw) = (errors.len(), warnings.len());
    let mut lines = Vec::new();
    for (level, notes, what) in [
        ("error", errors, "errors"),
        ("warning", warnings, "warnings"),
    ] {
        for n in capped(notes, what) {
            lines.push(format!(
                "::{level} title={}::{}",
                property(&n.title),
                data(&n.message)
            ));
        }
    }
    if ne + nw > 0 {
        lines.push(format!(
            "fdaudit: {ne} errors, {nw} warnings (exit status {}); GitHub shows {CAP} of each a step",
            v.exit_code
        ));
    }
    lines
}

/// Says the annotations (on stderr) and appends the step summary, when in GitHub Actions.
pub fn report(v: &CiVerdict) -> Result<()> {
    if !active() {
        return Ok(());
    }
    // JSON records on stderr (`trace --json -- CMD` without -o) keep every line there
    // JSON: no commands then (docs/ci.md: use -o FILE).
    let json_on_stderr = super::stream::is_json() && super::stream::is_stderr();
    let mut err = std::io::stderr().lock();
    for l in commands(v).into_iter().filter(|_| !json_on_stderr) {
        // Not wrapped to a terminal as diagnostics are: one command, one line.
        let _ = writeln!(err, "{l}");
    }
    drop(err);
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .context("failed to open $GITHUB_STEP_SUMMARY")?;
        f.write_all(summary(v).as_bytes())
            .context("failed to write $GITHUB_STEP_SUMMARY")?;
    }
    Ok(())
}

/// The step summary: the exit status, a table of the gates and one of the groups.
pub fn summary(v: &CiVerdict) -> String {
    let mark = |failed: bool| if failed { "❌" } else { "✅" };
    let mut s = format!("### fdaudit {}: exit status {}\n\n", v.command, v.exit_code);
    if let Some(why) = &v.incomplete {
        let _ = writeln!(s, "⚠️ {}\n", md(why));
    }
    if !v.gates.is_empty() {
        s.push_str("| | gate | verdict |\n|---|---|---|\n");
        for g in &v.gates {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                mark(g.failure.is_some()),
                md(&g.name),
                md(g.failure.as_deref().unwrap_or(""))
            );
        }
        s.push('\n');
    }
    s.push_str("| | parent → exec | strategy | spawns | leaked fds | close() calls | verdict |\n|---|---|---|---|---|---|---|\n");
    for g in v.groups.iter().take(SUMMARY_ROWS) {
        let _ = writeln!(
            s,
            "| {} | {} → {} | {} | {} | {} | {} | {} |",
            mark(!g.failures.is_empty()),
            md(&g.parent_comm),
            md(&g.exec_path),
            md(&g.strategy),
            g.spawns,
            g.leaked_fds,
            g.close_max,
            md(&g.failures.join("; "))
        );
    }
    if v.groups.len() > SUMMARY_ROWS {
        let _ = writeln!(s, "\nand {} more groups", v.groups.len() - SUMMARY_ROWS);
    }
    s.push('\n');
    s
}

/// A workflow command's message: `%`, CR and LF encoded, as the runner decodes them.
fn data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: also `:` and `,`.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Text for a markdown table cell: `|` and HTML's specials escaped, no line breaks.
fn md(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::ci::GateCase;

    fn group(i: u64, failures: Vec<String>) -> GroupCase {
        GroupCase {
            parent_comm: "sh".into(),
            exec_path: format!("/bin/t{i}"),
            strategy: "none".into(),
            spawns: 1,
            leaked_fds: i,
            close_max: 0,
            failures,
        }
    }

    #[test]
    fn errors_are_capped_worst_first_with_how_many_more() {
        let line = "--fail-on-leak: 15 spawns leaked fds (exit status 3): …".to_string();
        let v = CiVerdict {
            command: "trace",
            gates: vec![GateCase {
                name: "--fail-on-leak".into(),
                failure: Some(line.clone()),
            }],
            groups: (1..=15).map(|i| group(i, vec![line.clone()])).collect(),
            findings: Vec::new(),
            incomplete: None,
            exit_code: 3,
            command_failed: false,
        };
        let c = commands(&v);
        let errors: Vec<&String> = c.iter().filter(|l| l.starts_with("::error ")).collect();
        assert_eq!(errors.len(), CAP, "{c:#?}");
        assert!(errors[0].contains("/bin/t15"), "worst first: {}", errors[0]);
        assert!(errors[9].contains("and 6 more errors"), "{}", errors[9]);
        assert!(
            c.last()
                .unwrap()
                .starts_with("fdaudit: 15 errors, 0 warnings"),
            "{c:#?}"
        );
    }

    #[test]
    fn messages_and_properties_are_encoded() {
        assert_eq!(data("a%b\nc"), "a%25b%0Ac");
        assert_eq!(property("a: b, c"), "a%3A b%2C c");
        assert_eq!(md("a|b<c>"), "a\\|b&lt;c&gt;");
    }
}
