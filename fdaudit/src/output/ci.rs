//! What the CI reports (`--junit`, GitHub Actions annotations and step summary) say of a
//! run: each gate set, passed or failed with its verdict line, and each group of the
//! summary with the verdict lines of the gates its spawns failed (`diff`: one gate, no
//! regression; each group and new leak with what got worse). Plain values, built by
//! `trace/report/ci.rs` and `diff/ci.rs`; the formats are [`super::junit`] and
//! [`super::github`].

/// A gate's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCase {
    /// As the command line names it (`--fail-on-strategy close-loop,poll-scan`).
    pub name: String,
    /// Its verdict line, when it failed.
    pub failure: Option<String>,
}

/// A group's outcome: the summary's parent → exec, its strategy and leaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCase {
    pub parent_comm: String,
    pub exec_path: String,
    pub strategy: String,
    pub spawns: u64,
    pub leaked_fds: u64,
    pub close_max: u64,
    /// The verdict lines of the gates a spawn of the group failed.
    pub failures: Vec<String>,
}

/// A case of its own: `scan`'s one per kind of finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainCase {
    pub name: String,
    /// The verdict lines, when it failed.
    pub failures: Vec<String>,
    /// What it found (JUnit's `system-out`).
    pub out: String,
}

/// One run's verdicts, as the CI reports show them.
#[derive(Debug, Clone, Default)]
pub struct CiVerdict {
    /// The subcommand: `trace`, `diff` or `scan`.
    pub command: &'static str,
    pub gates: Vec<GateCase>,
    pub groups: Vec<GroupCase>,
    /// `scan`: a case per kind of finding (suite `findings`, in place of `groups`).
    pub findings: Vec<PlainCase>,
    /// The trace is known to be incomplete and a gate was set: why (the verdict line).
    pub incomplete: Option<String>,
    pub exit_code: u8,
    /// The command's own status decided the exit status (a gate's verdict did not).
    pub command_failed: bool,
}
