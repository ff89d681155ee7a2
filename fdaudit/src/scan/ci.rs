//! `scan --sarif FILE` and `scan --junit FILE`: the findings kept as they come ([`Kept`]),
//! then as SARIF results (one rule per kind of finding, located at the process's
//! executable when it is under the source root) and as JUnit cases (the `--fail-on` gate,
//! and a case per kind of finding failing with the verdict line when it has findings at
//! or above the gate).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use super::findings::{Finding, FindingKind, Severity};
use crate::diff::normalise::Normaliser;
use anyhow::Result;

use crate::output::ci::{CiVerdict, GateCase, PlainCase};
use crate::output::junit::JunitFile;
use crate::output::sarif::{self, Level, Rule, SarifFile};

/// Findings kept for the reports; past this they are counted and said.
const MAX_KEPT: usize = 20_000;

/// Every kind, in the order the reports list them.
const KINDS: [FindingKind; 4] = [
    FindingKind::InheritableFd,
    FindingKind::SharedDescription,
    FindingKind::OutsideRoot,
    FindingKind::NofileLimit,
];

fn rule(k: FindingKind) -> Rule {
    match k {
        FindingKind::InheritableFd => Rule::InheritableFd,
        FindingKind::NofileLimit => Rule::NofileLimit,
        FindingKind::SharedDescription => Rule::SharedDescription,
        FindingKind::OutsideRoot => Rule::OutsideRoot,
    }
}

/// The findings of a scan (every one, --min-severity's hidden ones too: the reports are
/// for CI, as --fail-on is) and each process's executable, read when its findings come.
#[derive(Default)]
pub struct Kept {
    inner: Mutex<KeptInner>,
}

#[derive(Default)]
struct KeptInner {
    findings: Vec<Finding>,
    exe: HashMap<u32, Option<String>>,
    left_out: u64,
}

impl Kept {
    /// Keeps `findings` (on a scan worker) and the executable of their processes.
    pub fn add(&self, root: &Path, findings: &[Finding]) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for f in findings {
            if g.findings.len() >= MAX_KEPT {
                g.left_out += 1;
                continue;
            }
            g.exe
                .entry(f.pid)
                .or_insert_with(|| executable(root, f.pid));
            g.findings.push(f.clone());
        }
    }

    pub fn into_parts(self) -> (Vec<Finding>, HashMap<u32, Option<String>>, u64) {
        let mut g = self.inner.into_inner().unwrap_or_else(|p| p.into_inner());
        g.findings.sort_by(Finding::order);
        (g.findings, g.exe, g.left_out)
    }
}

/// `/proc/PID/exe`'s link text (made by the kernel; read with readlink, never followed).
fn executable(root: &Path, pid: u32) -> Option<String> {
    let link = std::fs::read_link(root.join(pid.to_string()).join("exe")).ok()?;
    let s = link.to_str()?;
    // A deleted executable's name is no file of the checkout.
    (!s.ends_with(" (deleted)")).then(|| s.to_string())
}

/// `--junit` and `--sarif`: the files, created before the scan (as -o is: a bad path
/// fails at once), and the findings kept for them.
pub struct Reports {
    junit: Option<JunitFile>,
    sarif: Option<SarifFile>,
    kept: Option<Kept>,
}

impl Reports {
    pub fn open(args: &super::ScanArgs) -> Result<Reports> {
        let junit = args.junit.as_deref().map(JunitFile::create).transpose()?;
        let sarif = args.sarif.open()?;
        let kept = (junit.is_some() || sarif.is_some()).then(Kept::default);
        Ok(Reports { junit, sarif, kept })
    }

    /// Where the scan's workers keep findings (None: no report asked for).
    pub fn kept(&self) -> Option<&Kept> {
        self.kept.as_ref()
    }

    /// Writes the reports: the scan's findings and `shared` (the shared-description ones,
    /// found at the end), judged by `--fail-on` and its verdict line.
    pub fn write(
        self,
        root: &Path,
        shared: &[Finding],
        (fail_on, line): (Option<Severity>, Option<&str>),
        exit_code: u8,
    ) -> Result<()> {
        let Some(kept) = self.kept else {
            return Ok(());
        };
        kept.add(root, shared);
        let (findings, exe, left_out) = kept.into_parts();
        if let Some(j) = self.junit {
            j.write(&verdict(&findings, fail_on, line, exit_code))?;
        }
        if let Some(s) = self.sarif {
            s.write(&sarif_run(&findings, &exe, left_out, exit_code))?;
        }
        Ok(())
    }
}

/// The SARIF run of a scan: a finding per finding, named across runs by its process's
/// executable (else its name), fd and reason with the scan's pids taken out.
pub fn sarif_run(
    findings: &[Finding],
    exe: &HashMap<u32, Option<String>>,
    left_out: u64,
    exit_code: u8,
) -> sarif::Run {
    let norm = Normaliser::new(findings.iter().map(|f| u64::from(f.pid)), false);
    let out = findings
        .iter()
        .map(|f| {
            let exe = exe.get(&f.pid).cloned().flatten();
            let who = exe.clone().unwrap_or_else(|| f.comm.lossy().into_owned());
            let fd = f.fd.map_or("-".to_string(), |fd| fd.to_string());
            sarif::Finding {
                rule: rule(f.kind),
                level: match f.severity {
                    Severity::Critical | Severity::High => Level::Error,
                    Severity::Medium => Level::Warning,
                    Severity::Low | Severity::Info => Level::Note,
                },
                message: format!(
                    "{} (pid {}){}: {} ({})",
                    f.comm.escaped(),
                    f.pid,
                    f.fd.map_or(String::new(), |fd| format!(" fd {fd}")),
                    crate::output::escape(&f.reason),
                    f.severity.as_str()
                ),
                identity: format!("{}\0fd {fd}\0{}", norm.path(&who), norm.path(&f.reason)),
                frames: Vec::new(),
                modules: Vec::new(),
                executable: exe,
                baseline: None,
            }
        })
        .collect();
    let notes = (left_out > 0)
        .then(|| format!("{left_out} findings left out (at most {MAX_KEPT} kept)"))
        .into_iter()
        .collect();
    sarif::Run {
        command: "scan",
        findings: out,
        exit_code,
        notes,
    }
}

/// The JUnit verdicts of a scan: the `--fail-on` gate and a case per kind of finding.
pub fn verdict(
    findings: &[Finding],
    fail_on: Option<Severity>,
    verdict_line: Option<&str>,
    exit_code: u8,
) -> CiVerdict {
    let gates = fail_on
        .map(|min| GateCase {
            name: format!("--fail-on {}", min.as_str()),
            failure: verdict_line.map(str::to_string),
        })
        .into_iter()
        .collect();
    let cases = KINDS
        .iter()
        .map(|&k| {
            let of_kind: Vec<&Finding> = findings.iter().filter(|f| f.kind == k).collect();
            let over: Vec<&&Finding> = of_kind
                .iter()
                .filter(|f| fail_on.is_some_and(|min| f.severity >= min))
                .collect();
            let mut failures = Vec::new();
            if let (Some(line), false) = (verdict_line, over.is_empty()) {
                failures.push(line.to_string());
                failures.extend(over.iter().take(10).map(|f| {
                    format!(
                        "{} pid {}: {} ({})",
                        f.comm.escaped(),
                        f.pid,
                        crate::output::escape(&f.reason),
                        f.severity.as_str()
                    )
                }));
                if over.len() > 10 {
                    failures.push(format!("and {} more", over.len() - 10));
                }
            }
            PlainCase {
                name: rule(k).id().to_string(),
                failures,
                out: severities(&of_kind),
            }
        })
        .collect();
    CiVerdict {
        command: "scan",
        gates,
        groups: Vec::new(),
        findings: cases,
        incomplete: None,
        exit_code,
        command_failed: false,
    }
}

/// `3 findings: 1 high, 2 low`, or `no findings`.
fn severities(fs: &[&Finding]) -> String {
    if fs.is_empty() {
        return "no findings".into();
    }
    let mut by = [0usize; 5];
    for f in fs {
        by[f.severity as usize] += 1;
    }
    let parts: Vec<String> = (0..5)
        .rev()
        .filter(|&i| by[i] > 0)
        .map(|i| format!("{} {}", by[i], Severity::ALL[i].as_str()))
        .collect();
    format!(
        "{}: {}",
        crate::output::count(fs.len() as u64, "finding", "findings"),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(pid: u32, kind: FindingKind, severity: Severity) -> Finding {
        Finding::new(
            pid,
            b"srv",
            Some(5),
            severity,
            kind,
            0,
            format!("/tmp/x-{pid}"),
        )
    }

    #[test]
    fn a_kind_fails_with_the_verdict_line_when_it_has_findings_at_or_above_the_gate() {
        let fs = vec![
            finding(10, FindingKind::InheritableFd, Severity::High),
            finding(11, FindingKind::NofileLimit, Severity::Low),
        ];
        let v = verdict(&fs, Some(Severity::Medium), Some("--fail-on medium: …"), 3);
        assert_eq!(v.gates[0].name, "--fail-on medium");
        let inh = &v.findings[0];
        assert_eq!(inh.name, "inheritable-fd");
        assert_eq!(inh.failures[0], "--fail-on medium: …");
        assert_eq!(inh.out, "1 finding: 1 high");
        let nofile = v
            .findings
            .iter()
            .find(|c| c.name == "nofile-limit")
            .unwrap();
        assert!(nofile.failures.is_empty(), "{nofile:?}");
    }

    #[test]
    fn a_findings_identity_leaves_the_pid_out() {
        let a = sarif_run(
            &[finding(10, FindingKind::InheritableFd, Severity::High)],
            &HashMap::new(),
            0,
            0,
        );
        let b = sarif_run(
            &[finding(20, FindingKind::InheritableFd, Severity::High)],
            &HashMap::new(),
            0,
            0,
        );
        assert_eq!(a.findings[0].identity, b.findings[0].identity);
    }
}
