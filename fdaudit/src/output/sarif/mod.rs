//! `--sarif FILE`: a SARIF 2.1.0 log of a run's findings, for code scanning (GitHub's
//! upload-sarif, GitLab, IDEs). One rule per kind of finding ([`Rule`]), CWE-403 as a
//! relationship to the CWE taxonomy where it applies, a `partialFingerprints` entry that
//! names the finding the same way in every run (built by the front ends from diff's
//! normalised names), and `baselineState` from `diff`.
//!
//! GitHub rejects the whole file when a result has no physical location, so every result
//! here has one: the first frame of the finding's stack whose source file is under the
//! source root, else the executable's path when it is under it; a finding with neither is
//! a run-level notification instead (docs/ci.md "SARIF"). The front ends hand over plain
//! values ([`Finding`]); the wire types are private to this module.

use std::io::Write as _;
use std::path::{Component as PathPart, Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Serialize;

mod wire;

/// The key of fdaudit's own entry in `partialFingerprints`.
pub const FINGERPRINT_KEY: &str = "fdaudit/v1";

/// A kind of finding: one SARIF rule each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// trace: an fd without close-on-exec reached an exec'd image.
    LeakedFd,
    /// trace: ... an image that runs with other credentials, namespaces or root.
    LeakAcrossBoundary,
    /// trace: a spawn closed fds with a strategy `--fail-on-strategy` names.
    StrategyOverGate,
    /// trace: a spawn made more closing calls than `--max-closes`.
    ClosesOverGate,
    /// scan: an fd >= 3 without close-on-exec.
    InheritableFd,
    /// scan: a NOFILE soft limit that makes a close-to-limit loop expensive.
    NofileLimit,
    /// scan: an open file description shared with the parent or a child.
    SharedDescription,
    /// scan: an fd on a mount outside the process's root or mount namespace.
    OutsideRoot,
}

/// What SARIF says of a rule: (id, short description, help, CWE-403 applies, GitHub's
/// security-severity).
const RULES: &[(Rule, &str, &str, &str, bool, &str)] = &[
    (Rule::LeakedFd, "leaked-fd",
     "An fd without close-on-exec reached an exec'd program",
     "The spawned program inherited an fd it did not need: open it with O_CLOEXEC (or SOCK_CLOEXEC, pipe2(O_CLOEXEC), F_DUPFD_CLOEXEC), or close it between fork and exec. The location is the call that made it inheritable (trace --origin).",
     true, "5.0"),
    (Rule::LeakAcrossBoundary, "leak-across-boundary",
     "An fd without close-on-exec reached a program that runs with other credentials, namespaces or root",
     "The fd crossed a privilege or container boundary (as in CVE-2024-21626): open it with O_CLOEXEC. The location is the call that made it inheritable.",
     true, "8.0"),
    (Rule::StrategyOverGate, "strategy-over-gate",
     "A spawn closed fds with a strategy --fail-on-strategy forbids",
     "A close loop or fd scan between fork and exec costs time in NOFILE: use close_range(2) or O_CLOEXEC instead (docs/ci.md).",
     false, ""),
    (Rule::ClosesOverGate, "closes-over-gate",
     "A spawn made more fd-closing calls than --max-closes",
     "Each close() between fork and exec costs time: use close_range(2) or O_CLOEXEC instead.",
     false, ""),
    (Rule::InheritableFd, "inheritable-fd",
     "A process holds an fd without close-on-exec",
     "Any program this process starts inherits the fd: open it with O_CLOEXEC.",
     true, "5.0"),
    (Rule::NofileLimit, "nofile-limit",
     "A NOFILE soft limit that makes a close-to-limit loop expensive",
     "A spawner that closes every fd up to the limit pays for each: lower the soft limit or use close_range(2).",
     false, ""),
    (Rule::SharedDescription, "shared-description",
     "An fd is the same open file description as one in the parent or a child",
     "Offsets and flags are shared with another process: open it with O_CLOEXEC so that children do not inherit it.",
     true, "5.0"),
    (Rule::OutsideRoot, "outside-root",
     "An fd on a mount outside the process's root or mount namespace",
     "The process can reach files outside its root through the fd (CVE-2024-21626): open it with O_CLOEXEC in the runtime.",
     true, "8.0"),
];

fn rule_info(
    r: Rule,
) -> (
    usize,
    &'static (
        Rule,
        &'static str,
        &'static str,
        &'static str,
        bool,
        &'static str,
    ),
) {
    RULES
        .iter()
        .enumerate()
        .find(|(_, e)| e.0 == r)
        .expect("every rule is in RULES")
}

impl Rule {
    /// The rule's SARIF id.
    pub fn id(self) -> &'static str {
        rule_info(self).1 .1
    }
}

/// `error`, `warning` or `note`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warning,
    Note,
}

/// `diff`'s comparison of a finding with the earlier run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    New,
    Unchanged,
    Absent,
}

/// A finding, as a front end hands it over.
#[derive(Debug, Clone)]
pub struct Finding {
    pub rule: Rule,
    pub level: Level,
    pub message: String,
    /// What names the finding in every run (normalised: no pid, time, temporary suffix or
    /// inode number); hashed into the fingerprint.
    pub identity: String,
    /// Source files and lines of the stack, innermost first (as the debug line info gives
    /// them; hostile: only compared as text).
    pub frames: Vec<(String, Option<u32>)>,
    /// The mapped files (executable, libraries) of the stack's frames, innermost first: a
    /// binary built without debug info in the checkout.
    pub modules: Vec<String>,
    /// The executable the finding is about, when known (the fallback location).
    pub executable: Option<String>,
    pub baseline: Option<Baseline>,
}

/// A run to write: its command, findings, exit status and notes.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// `trace`, `scan` or `diff`.
    pub command: &'static str,
    pub findings: Vec<Finding>,
    pub exit_code: u8,
    /// Run-level notes (an incomplete trace, findings left out).
    pub notes: Vec<String>,
}

/// Where results point: the source root and how a location is made relative to it.
#[derive(Debug, Clone)]
pub struct SourceRoot {
    root: PathBuf,
}

impl SourceRoot {
    /// `--source-root DIR`, else the nearest directory above the current one that holds
    /// `.git` (found by walking up, not by running git: `git rev-parse` refuses a
    /// repository another user owns, as under sudo), else the current directory.
    pub fn resolve(given: Option<&Path>) -> Result<SourceRoot> {
        let root = match given {
            Some(dir) => std::fs::canonicalize(dir).with_context(|| {
                format!(
                    "failed to find --source-root {}: give an existing directory",
                    super::text::escape_path(dir)
                )
            })?,
            None => {
                let cwd = std::env::current_dir()
                    .context("failed to find the current directory (give --source-root)")?;
                cwd.ancestors()
                    .find(|d| d.join(".git").symlink_metadata().is_ok())
                    .unwrap_or(&cwd)
                    .to_path_buf()
            }
        };
        Ok(SourceRoot { root })
    }

    #[cfg(test)]
    pub fn at(root: &str) -> SourceRoot {
        SourceRoot { root: root.into() }
    }

    /// `path` relative to the root, when it is under it: compared as text, with `.` left
    /// out and a `..` anywhere refused (the path comes from a traced binary's debug info).
    pub fn relative(&self, path: &str) -> Option<String> {
        let p = Path::new(path);
        if !p.is_absolute() {
            return None;
        }
        let mut clean = PathBuf::new();
        for c in p.components() {
            match c {
                PathPart::CurDir => {}
                PathPart::ParentDir => return None,
                other => clean.push(other),
            }
        }
        let rel = clean.strip_prefix(&self.root).ok()?;
        let s = rel.to_str()?;
        (!s.is_empty()).then(|| s.to_string())
    }

    /// The root as a `file://` URI ending in `/`.
    fn uri(&self) -> String {
        let mut s = format!("file://{}", percent(&self.root.to_string_lossy()));
        if !s.ends_with('/') {
            s.push('/');
        }
        s
    }
}

/// `s` with every byte but the URI's unreserved ones and `/` percent-encoded.
fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A stable hash of a finding's identity (FNV-1a, 64 bits, twice over with two offsets):
/// the same in every run and every build.
pub fn fingerprint(rule: Rule, identity: &str) -> String {
    let fnv = |basis: u64| {
        let mut h = basis;
        for b in rule.id().bytes().chain([0]).chain(identity.bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}

/// `--sarif FILE` and `--source-root DIR`, as `trace`, `scan` and `diff` take them.
#[derive(Debug, Clone, clap::Args)]
pub struct SarifArgs {
    /// Also write a SARIF 2.1.0 log to FILE, for code scanning (GitHub's upload-sarif): a
    /// result per finding, located at the first frame of its stack in a source file under
    /// --source-root (trace: the call that made a leaked fd inheritable; --sarif turns on
    /// --origin), else at its executable when that is under it; other findings are
    /// run-level notifications (docs/ci.md). diff: each leak's baselineState.
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,

    /// The checkout SARIF locations are relative to [default: the nearest directory above
    /// the current one that holds .git, else the current directory].
    #[arg(long, value_name = "DIR", requires = "sarif")]
    pub source_root: Option<PathBuf>,
}

impl SarifArgs {
    /// Creates the file (before the run: a bad path fails at once) and finds the root.
    pub fn open(&self) -> Result<Option<SarifFile>> {
        let Some(path) = &self.sarif else {
            return Ok(None);
        };
        let root = SourceRoot::resolve(self.source_root.as_deref())?;
        SarifFile::create(path, root).map(Some)
    }
}

/// A leak's identity from its normalised parts (diff's `LeakId`: exec path, fd, kind,
/// target): `trace --sarif` and `diff --sarif` name a leak alike.
pub fn leak_identity(exec_path: &str, fd: u32, kind: &str, target: &str) -> String {
    format!("{exec_path}\0fd {fd}\0{kind}\0{target}")
}

/// The SARIF file created at start (so that a bad path fails before the run), written at
/// the end.
pub struct SarifFile {
    file: std::fs::File,
    name: String,
    root: SourceRoot,
}

impl SarifFile {
    pub fn create(path: &Path, root: SourceRoot) -> Result<SarifFile> {
        let name = super::text::escape_path(path);
        let file = super::stream::create(path).map_err(|e| anyhow::anyhow!("{e:#} (--sarif)"))?;
        Ok(SarifFile { file, name, root })
    }

    pub fn write(mut self, run: &Run) -> Result<()> {
        let log = wire::log(run, &self.root);
        serde_json::to_writer_pretty(&mut self.file, &log)
            .map_err(std::io::Error::from)
            .and_then(|()| self.file.write_all(b"\n"))
            .and_then(|()| self.file.flush())
            .with_context(|| format!("failed to write {} (--sarif)", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::wire::{location, log, rules};
    use super::*;

    fn finding(frames: &[(&str, Option<u32>)], exe: Option<&str>) -> Finding {
        Finding {
            rule: Rule::LeakedFd,
            level: Level::Warning,
            message: "fd 3 leaked".into(),
            identity: "/bin/true\0fd 3".into(),
            frames: frames.iter().map(|(f, l)| (f.to_string(), *l)).collect(),
            modules: Vec::new(),
            executable: exe.map(str::to_string),
            baseline: None,
        }
    }

    #[test]
    fn a_location_is_the_first_frame_under_the_root_else_the_executable() {
        let root = SourceRoot::at("/src/proj");
        let f = finding(
            &[
                ("/usr/src/glibc/open64.c", Some(41)),
                ("/src/proj/./lib/x.c", Some(12)),
                ("/src/proj/main.c", Some(3)),
            ],
            Some("/src/proj/build/t"),
        );
        let v = serde_json::to_value(location(&f, &root).unwrap()).unwrap();
        let p = &v["physicalLocation"];
        assert_eq!(p["artifactLocation"]["uri"], "lib/x.c", "{v}");
        assert_eq!(p["region"]["startLine"], 12, "{v}");
        let exe = finding(
            &[("/usr/src/glibc/open64.c", Some(41))],
            Some("/src/proj/build/t"),
        );
        let v = serde_json::to_value(location(&exe, &root).unwrap()).unwrap();
        assert_eq!(
            v["physicalLocation"]["artifactLocation"]["uri"], "build/t",
            "{v}"
        );
        assert_eq!(v["physicalLocation"]["region"]["startLine"], 1, "{v}");
        let mut module = finding(&[("/usr/src/glibc/open64.c", Some(41))], Some("/bin/sh"));
        module.modules = vec!["/usr/lib/libc.so.6".into(), "/src/proj/target/t".into()];
        let v = serde_json::to_value(location(&module, &root).unwrap()).unwrap();
        assert_eq!(
            v["physicalLocation"]["artifactLocation"]["uri"], "target/t",
            "{v}"
        );
        let none = finding(&[("/src/proj/../etc/x.c", Some(1))], Some("/bin/true"));
        assert!(location(&none, &root).is_none());
        assert!(root.relative("/src/projector/x.c").is_none());
        assert!(root.relative("lib/x.c").is_none());
    }

    #[test]
    fn a_finding_without_a_location_is_a_notification_not_a_result() {
        let root = SourceRoot::at("/src/proj");
        let run = Run {
            command: "trace",
            findings: vec![
                finding(&[("/src/proj/a b.c", Some(7))], None),
                finding(&[], Some("/bin/true")),
            ],
            exit_code: 3,
            notes: Vec::new(),
        };
        let v = serde_json::to_value(log(&run, &root)).unwrap();
        let r = &v["runs"][0];
        assert_eq!(r["results"].as_array().unwrap().len(), 1, "{v}");
        let uri = &r["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"];
        assert_eq!(uri, "a%20b.c");
        let notes = r["invocations"][0]["toolExecutionNotifications"]
            .as_array()
            .unwrap();
        assert_eq!(notes.len(), 1, "{v}");
        assert_eq!(notes[0]["associatedRule"]["id"], "leaked-fd");
        assert_eq!(
            r["originalUriBaseIds"]["%SRCROOT%"]["uri"],
            "file:///src/proj/"
        );
    }

    #[test]
    fn fingerprints_depend_on_the_rule_and_identity_only() {
        let a = fingerprint(Rule::LeakedFd, "x");
        assert_eq!(a, fingerprint(Rule::LeakedFd, "x"));
        assert_ne!(a, fingerprint(Rule::LeakAcrossBoundary, "x"));
        assert_ne!(a, fingerprint(Rule::LeakedFd, "y"));
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn cwe_403_rules_point_at_the_taxonomy() {
        let v = serde_json::to_value(rules()).unwrap();
        let leaked = &v[0];
        assert_eq!(leaked["id"], "leaked-fd");
        assert_eq!(leaked["relationships"][0]["target"]["id"], "403");
        assert_eq!(
            leaked["relationships"][0]["target"]["toolComponent"]["name"],
            "CWE"
        );
        let strategy = &v[2];
        assert!(strategy.get("relationships").is_none(), "{strategy}");
    }
}
