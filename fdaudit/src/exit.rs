//! Every exit status fdaudit returns, in one place: the constants, and [`TABLE`], which
//! README's "Exit status" table says row for row (a unit test holds them together).
//! `scan --fail-on`, `trace`'s gates and `diff` share [`POLICY`]; with `trace -- CMD` the
//! command's own status wins over the gates' verdict unless it is 0. A CI job tells the
//! two apart by moving fdaudit's own verdicts off the command's statuses:
//! `--policy-exit-code N` (every subcommand that returns [`POLICY`]) and
//! `--incomplete-exit-code N` (`trace`, [`INCOMPLETE`]); see docs/ci.md.

/// Success, or `--fail-on`/`--fail-on-leak` had nothing to fail on.
pub const OK: u8 = 0;
/// `doctor`: tracing cannot work here; `bench`: a spawn failed or a traced count did not
/// match; `__spawner`: a child did not exit 0.
pub const FAILED: u8 = 1;
/// An error fdaudit reports (bad input, missing privileges, kernel refusal, lost output).
pub const ERROR: u8 = 2;
/// A CI policy was violated: `scan --fail-on` found a finding at or above the severity;
/// a `trace` gate (`--fail-on-leak`, `--fail-on-strategy`, `--max-closes`) failed (and CMD
/// itself exited 0); `diff` found a regression.
pub const POLICY: u8 = 3;
/// `trace`: a gate (`--fail-on-leak`, `--fail-on-strategy`, `--max-closes`) was set and
/// none failed on what was seen, CMD exited 0, but the trace is known to be incomplete
/// (records lost, runs the kernel skipped, forks not traced): no gate passes on data known
/// to be incomplete. A gate that failed on what was seen is [`POLICY`].
pub const INCOMPLETE: u8 = 4;
/// The output's reader went away (`fdaudit scan | head`): nothing is said, and the status
/// is the one a shell reports for a program SIGPIPE killed (128 + 13), as `yes | head` gives.
pub const BROKEN_PIPE: u8 = 141;
/// `trace -- CMD`: the command was found but is not executable (as a shell says).
pub const NOT_EXECUTABLE: u8 = 126;
/// `trace -- CMD`: the command could not be exec'd (as a shell says).
pub const NOT_EXECUTED: u8 = 127;
/// `trace -- CMD`: fdaudit went away before the command could exec (SIGINT's 128+N).
pub const INTERRUPTED: u8 = 130;

/// After a signal stopped fdaudit: 128+N, as a shell reports a process signal N ended
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
pub fn from_signal(sig: i32) -> u8 {
    u8::try_from(128 + sig).unwrap_or(INTERRUPTED)
}

/// One row of README's exit table: the status as README writes it, its constant (none for
/// a range), the subcommands that return it, and the option that moves it.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the declaration README's exit table is tested against"
    )
)]
#[derive(Debug, Clone, Copy)]
pub struct Status {
    pub readme: &'static str,
    pub code: Option<u8>,
    pub commands: &'static [&'static str],
    pub option: Option<&'static str>,
}

/// The subcommands with a column in README's exit table, in its order. `unclosed`'s gates
/// return [`POLICY`] as `trace`'s do (it has no [`INCOMPLETE`] yet).
pub const COMMANDS: &[&str] = &["scan", "trace", "bench", "doctor", "diff", "unclosed"];

/// Every status, in README's order.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the declaration README's exit table is tested against"
    )
)]
pub const TABLE: &[Status] = &[
    Status {
        readme: "0",
        code: Some(OK),
        commands: COMMANDS,
        option: None,
    },
    Status {
        readme: "1",
        code: Some(FAILED),
        commands: &["trace", "bench", "doctor", "unclosed"],
        option: None,
    },
    Status {
        readme: "2",
        code: Some(ERROR),
        commands: COMMANDS,
        option: None,
    },
    Status {
        readme: "3",
        code: Some(POLICY),
        commands: &["scan", "trace", "diff", "unclosed"],
        option: Some("--policy-exit-code"),
    },
    Status {
        readme: "4",
        code: Some(INCOMPLETE),
        commands: &["trace", "unclosed"],
        option: Some("--incomplete-exit-code"),
    },
    Status {
        readme: "any other N",
        code: None,
        commands: &["trace", "unclosed"],
        option: None,
    },
    Status {
        readme: "126, 127",
        code: Some(NOT_EXECUTABLE),
        commands: &["trace", "unclosed"],
        option: None,
    },
    Status {
        readme: "141",
        code: Some(BROKEN_PIPE),
        commands: COMMANDS,
        option: None,
    },
    Status {
        readme: "128+N",
        code: None,
        commands: &["scan", "trace", "bench", "unclosed"],
        option: None,
    },
];

/// The statuses fdaudit's own verdicts can be moved to: 1 to 125, not [`ERROR`] (fdaudit's
/// own failure), nor 126 and up (a shell's "not executable", "not found" and 128+signal).
pub fn parse_verdict_code(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(ERROR) => Err(format!(
            "{s}: exit status {ERROR} is fdaudit's own error: choose another (1 to 125)"
        )),
        Ok(n @ 1..=125) => Ok(n),
        _ => Err(format!(
            "{s:?} is not an exit status for a verdict: give 1 to 125 (126 and up mean a command that could not run or a signal)"
        )),
    }
}

/// `--policy-exit-code`, shared by every subcommand that returns [`POLICY`].
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct PolicyCode {
    /// The exit status of a violated policy (a gate that failed, --fail-on met, a diff
    /// regression), instead of 3: pick one the traced command or test runner never
    /// returns, to tell fdaudit's verdict from the command's own status (1 to 125, not 2).
    #[arg(long = "policy-exit-code", value_name = "N", default_value_t = POLICY, value_parser = parse_verdict_code)]
    pub code: u8,
}

/// A shell-like exit status from a wait status: the code, or 128+signal (1 when neither).
pub fn from_wait_status(status: i32) -> u8 {
    u8::try_from(crate::sys::wait_status_code(status)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README's exit table: the header's subcommands and each row's status and cells.
    fn readme_table() -> (Vec<String>, Vec<Vec<String>>) {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Exit status")
            .nth(1)
            .expect("README has an Exit status section");
        let cells = |l: &str| -> Vec<String> {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        };
        let mut lines = section.lines().skip_while(|l| !l.starts_with('|'));
        let header = cells(lines.next().expect("a header row"));
        let rows = lines
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                // `\|` inside a cell is a pipe, not a column.
                cells(&l.replace("\\|", "/"))
            })
            .collect();
        (header, rows)
    }

    #[test]
    fn the_readme_exit_table_says_the_table() {
        let (header, rows) = readme_table();
        assert_eq!(header[0], "status");
        assert_eq!(&header[1..], COMMANDS, "README's columns");
        let statuses: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
        let ours: Vec<&str> = TABLE.iter().map(|s| s.readme).collect();
        assert_eq!(statuses, ours, "README's rows");
        for (st, row) in TABLE.iter().zip(&rows) {
            assert_eq!(row.len(), COMMANDS.len() + 1, "row {}: {row:?}", st.readme);
            for (cmd, cell) in COMMANDS.iter().zip(&row[1..]) {
                assert_eq!(
                    st.commands.contains(cmd),
                    !cell.is_empty(),
                    "status {} for {cmd}: README says {cell:?}",
                    st.readme
                );
            }
            if let Some(opt) = st.option {
                for (cmd, cell) in COMMANDS.iter().zip(&row[1..]) {
                    assert!(
                        cell.is_empty() || cell.contains(opt),
                        "status {} for {cmd}: README does not name {opt}",
                        st.readme
                    );
                }
            }
            if let Some(code) = st.code {
                assert!(st.readme.starts_with(&code.to_string()), "{st:?}");
            }
        }
    }

    #[test]
    fn verdict_codes_stay_clear_of_fdaudits_and_the_shells() {
        assert_eq!(parse_verdict_code("42"), Ok(42));
        assert_eq!(parse_verdict_code("3"), Ok(3));
        for bad in ["0", "2", "126", "127", "130", "256", "-1", "x", ""] {
            assert!(parse_verdict_code(bad).is_err(), "{bad} was taken");
        }
    }
}
