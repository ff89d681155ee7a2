//! `--junit FILE`: a JUnit XML report of a trace's verdicts, for CI systems that show test
//! results (GitLab's Tests tab, Jenkins, GitHub test-report actions): one test case per
//! gate set, and one per group of the summary (parent → exec, its strategy), failing with
//! the verdict line of each gate its spawns failed. An incomplete trace makes each gate
//! that did not fail an error (it could not pass); a command that failed on its own is one
//! more failing case.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};

use super::ci::CiVerdict;

/// A test case's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Pass,
    /// A verdict: the lines.
    Failure(Vec<String>),
    /// It could not be judged: why.
    Error(String),
}

struct Case {
    name: String,
    outcome: Outcome,
    out: Option<String>,
}

struct Suite {
    name: &'static str,
    cases: Vec<Case>,
}

/// The JUnit file created at start (so that a bad path fails before tracing), written at
/// the end.
pub struct JunitFile {
    file: std::fs::File,
    name: String,
}

impl JunitFile {
    pub fn create(path: &Path) -> Result<JunitFile> {
        let name = crate::output::text::escape_path(path);
        // As `-o` opens: a FIFO nobody reads is an error now, not a hang at the end.
        let file = super::stream::create(path).map_err(|e| anyhow::anyhow!("{e:#} (--junit)"))?;
        Ok(JunitFile { file, name })
    }

    /// Writes the report.
    pub fn write(mut self, v: &CiVerdict) -> Result<()> {
        let xml = render(&format!("fdaudit {}", v.command), &suites(v));
        self.file
            .write_all(xml.as_bytes())
            .and_then(|()| self.file.flush())
            .with_context(|| format!("failed to write {} (--junit)", self.name))
    }
}

fn suites(v: &CiVerdict) -> Vec<Suite> {
    let mut gates: Vec<Case> = v
        .gates
        .iter()
        .map(|g| Case {
            name: g.name.clone(),
            outcome: match (&g.failure, &v.incomplete) {
                (Some(line), _) => Outcome::Failure(vec![line.clone()]),
                (None, Some(why)) => Outcome::Error(why.clone()),
                (None, None) => Outcome::Pass,
            },
            out: None,
        })
        .collect();
    if v.command_failed {
        gates.push(Case {
            name: "command".into(),
            outcome: Outcome::Failure(vec![format!(
                "the command itself failed: exit status {}",
                v.exit_code
            )]),
            out: None,
        });
    }
    let groups = v
        .groups
        .iter()
        .map(|g| Case {
            name: format!("{} → {} ({})", g.parent_comm, g.exec_path, g.strategy),
            outcome: if g.failures.is_empty() {
                Outcome::Pass
            } else {
                Outcome::Failure(g.failures.clone())
            },
            out: Some(format!(
                "strategy {}; {} spawns; {} leaked fds; close() calls {}",
                g.strategy, g.spawns, g.leaked_fds, g.close_max
            )),
        })
        .collect();
    let findings: Vec<Case> = v
        .findings
        .iter()
        .map(|c| Case {
            name: c.name.clone(),
            outcome: if c.failures.is_empty() {
                Outcome::Pass
            } else {
                Outcome::Failure(c.failures.clone())
            },
            out: Some(c.out.clone()),
        })
        .collect();
    let mut suites = vec![Suite {
        name: "gates",
        cases: gates,
    }];
    if findings.is_empty() {
        suites.push(Suite {
            name: "groups",
            cases: groups,
        });
    } else {
        suites.push(Suite {
            name: "findings",
            cases: findings,
        });
    }
    suites
}

fn counts(cases: &[Case]) -> (usize, usize) {
    let f = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Failure(_)))
        .count();
    let e = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Error(_)))
        .count();
    (f, e)
}

fn render(name: &str, suites: &[Suite]) -> String {
    let all: Vec<&Case> = suites.iter().flat_map(|s| &s.cases).collect();
    let failures = all
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Failure(_)))
        .count();
    let errors = all
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Error(_)))
        .count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">",
        attr(name),
        all.len()
    );
    for s in suites {
        let (f, e) = counts(&s.cases);
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{f}\" errors=\"{e}\">",
            s.name,
            s.cases.len()
        );
        for c in &s.cases {
            case(&mut x, name, s.name, c);
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

fn case(x: &mut String, name: &str, suite: &str, c: &Case) {
    let classname = format!("{}.{suite}", name.replace(' ', "."));
    let _ = write!(
        x,
        "    <testcase classname=\"{}\" name=\"{}\"",
        attr(&classname),
        attr(&c.name)
    );
    if c.outcome == Outcome::Pass && c.out.is_none() {
        x.push_str("/>\n");
        return;
    }
    x.push_str(">\n");
    match &c.outcome {
        Outcome::Pass => {}
        Outcome::Failure(lines) => {
            let _ = writeln!(
                x,
                "      <failure type=\"policy\" message=\"{}\">{}</failure>",
                attr(&lines[0]),
                attr(&lines.join("\n"))
            );
        }
        Outcome::Error(why) => {
            let _ = writeln!(
                x,
                "      <error type=\"incomplete\" message=\"{}\">{}</error>",
                attr(why),
                attr(why)
            );
        }
    }
    if let Some(out) = &c.out {
        let _ = writeln!(x, "      <system-out>{}</system-out>", attr(out));
    }
    x.push_str("    </testcase>\n");
}

/// Text for an XML attribute or element: the five special characters as entities, and a
/// character XML 1.0 cannot hold at all (a control character other than tab, newline and
/// carriage return, a noncharacter) as U+FFFD. (Paths in verdict lines are escaped
/// already; this is the last line of defence.)
fn attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::ci::{GateCase, GroupCase};

    /// A FIFO nobody reads is refused at once, in one line, as `-o` refuses it (a plain
    /// create blocked in open(2) until a reader came).
    #[test]
    fn a_fifo_nobody_reads_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("fdaudit-junit-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let fifo = dir.join("report.xml");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let err = JunitFile::create(&fifo).err().expect("refused");
        let _ = std::fs::remove_dir_all(&dir);
        let text = format!("{err:#}");
        assert!(
            text.contains("FIFO") && text.ends_with("(--junit)"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    fn verdict() -> CiVerdict {
        CiVerdict {
            command: "trace",
            gates: vec![
                GateCase {
                    name: "--fail-on-leak".into(),
                    failure: Some("--fail-on-leak: 1 spawn leaked fds (exit status 3): pid 7 /bin/true: fd 7 regular /tmp/<a&b>".into()),
                },
                GateCase {
                    name: "--max-closes 10".into(),
                    failure: None,
                },
            ],
            groups: vec![GroupCase {
                parent_comm: "sh".into(),
                exec_path: "/bin/true".into(),
                strategy: "none".into(),
                spawns: 1,
                leaked_fds: 1,
                close_max: 0,
                failures: vec!["--fail-on-leak: …".into()],
            }],
            findings: Vec::new(),
            incomplete: None,
            exit_code: 3,
            command_failed: false,
        }
    }

    #[test]
    fn gates_and_groups_are_cases_and_failures_carry_the_verdict() {
        let x = render("fdaudit trace", &suites(&verdict()));
        assert!(
            x.contains(
                "<testsuites name=\"fdaudit trace\" tests=\"3\" failures=\"2\" errors=\"0\">"
            ),
            "{x}"
        );
        assert!(x.contains("name=\"--max-closes 10\"/>"), "{x}");
        assert!(x.contains("name=\"sh → /bin/true (none)\""), "{x}");
        assert!(x.contains("/tmp/&lt;a&amp;b&gt;"), "{x}");
    }

    #[test]
    fn an_incomplete_trace_errs_the_gates_that_did_not_fail() {
        let mut v = verdict();
        v.incomplete = Some("records lost".into());
        let x = render("fdaudit trace", &suites(&v));
        assert!(
            x.contains("<error type=\"incomplete\" message=\"records lost\">"),
            "{x}"
        );
        assert!(x.contains("errors=\"1\""), "{x}");
    }

    #[test]
    fn characters_xml_cannot_hold_are_replaced() {
        assert_eq!(attr("a\u{1}b\u{1b}c\td"), "a\u{fffd}b\u{fffd}c\td");
        assert_eq!(attr("\"'"), "&quot;&apos;");
    }
}
