//! What one guest run produced: the verdict of each kernel, its programs' verifier figures,
//! and the result table printed after the matrix.

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;

use super::{guest, Arch, Kernel, Plan};

/// The result of one kernel.
#[derive(Debug)]
pub struct Outcome {
    pub kernel: Kernel,
    pub log_path: PathBuf,
    pub log: guest::GuestLog,
    pub plan: Plan,
    pub wall: Duration,
    pub timed_out: bool,
    pub qemu_status: Option<std::process::ExitStatus>,
}

/// Per-program verifier figures from `fdaudit doctor --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ProgramFigures {
    pub name: String,
    pub verified_insns: Option<u64>,
    /// Milliseconds, from the record's `load_ns` (schema 2; schema 1's `load_ms` is left out).
    #[serde(rename = "load_ns", default, deserialize_with = "ns_as_ms")]
    pub load_ms: Option<f64>,
}

fn ns_as_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let ns: Option<u64> = Deserialize::deserialize(d)?;
    Ok(ns.map(|ns| ns as f64 / 1e6))
}

impl Outcome {
    /// Why the kernel fails, or empty when it passes.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.log.booted.is_none() {
            why.push(match self.qemu_status {
                Some(s) => format!("no boot (qemu {s})"),
                None => "no boot".into(),
            });
            return why;
        }
        if self.timed_out {
            why.push(format!("timed out after {:.0}s", self.wall.as_secs_f64()));
        }
        for step in self.plan.steps.iter().filter(|s| s.required) {
            match self.log.step(&step.name).and_then(|r| r.rc) {
                Some(0) => {}
                Some(rc) => why.push(format!("{} exit {rc}", step.name)),
                None => why.push(format!("{} did not finish", step.name)),
            }
        }
        if self.plan.steps.iter().any(|s| s.name == guest::LEAK_STEP) && !self.log.leak7() {
            why.push("fd 7 not reported".into());
        }
        let (_, failed, all) = self.log.test_counts();
        if failed > 0 {
            why.push(format!("{failed} tests failed"));
        } else if !all {
            why.push("a test binary printed no result".into());
        }
        why
    }

    /// Each program's verifier figures: its fastest load over the doctor runs.
    pub fn programs(&self) -> Vec<ProgramFigures> {
        fastest(
            self.log
                .json(guest::DOCTOR_JSON_STEP)
                .into_iter()
                .filter(|v| v["type"] == "program")
                .filter_map(|v| serde_json::from_value(v).ok()),
        )
    }

    fn rc(&self, step: &str) -> String {
        match self.log.step(step).and_then(|s| s.rc) {
            Some(0) => "ok".into(),
            Some(rc) => format!("exit {rc}"),
            None => "-".into(),
        }
    }

    /// The one-line verdict.
    pub fn verdict_line(&self) -> String {
        let fails = self.failures();
        let (p, f, _) = self.log.test_counts();
        let exec = exec_figures(&self.programs());
        format!(
            "VERDICT {} {} {} doctor={} demo={} leak7={} tests={p} passed/{f} failed exec-prog={} boot={}s total={:.1}s{}",
            self.kernel.label,
            self.log.uname.as_deref().unwrap_or(&self.kernel.release),
            if fails.is_empty() { "PASS" } else { "FAIL" },
            self.rc("doctor"),
            self.rc("demo"),
            if self.log.leak7() { "yes" } else { "no" },
            exec.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            self.log.booted.map(|b| format!("{b:.1}")).unwrap_or_else(|| "?".into()),
            self.wall.as_secs_f64(),
            if fails.is_empty() {
                String::new()
            } else {
                format!(" ({}; log: {})", fails.join(", "), self.log_path.display())
            }
        )
    }
}

/// The lines of a guest log that say which tests failed and why: each `test … FAILED`
/// line, and each panic's location with the first lines of its message (at most 40 lines).
pub fn failure_excerpt(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = log.lines();
    while let Some(l) = lines.next() {
        if l.starts_with("test ") && l.ends_with("FAILED") {
            out.push(l.to_string());
        } else if l.starts_with("thread '") && l.contains("panicked at") {
            out.push(l.to_string());
            out.extend(
                lines
                    .by_ref()
                    .take(3)
                    .take_while(|m| !m.starts_with("note: run with"))
                    .map(|m| m.chars().take(300).collect::<String>()),
            );
        }
        if out.len() >= 40 {
            out.truncate(40);
            break;
        }
    }
    out
}

/// One entry per program name, in first-seen order, with the least load time seen.
fn fastest(all: impl Iterator<Item = ProgramFigures>) -> Vec<ProgramFigures> {
    let mut out: Vec<ProgramFigures> = Vec::new();
    for p in all {
        match out.iter_mut().find(|q| q.name == p.name) {
            Some(q) => {
                if let (Some(a), Some(b)) = (p.load_ms, q.load_ms) {
                    if a < b {
                        *q = p;
                    }
                }
            }
            None => out.push(p),
        }
    }
    out
}

/// The exec program's figures: `sched_process_exec`, or the bounded walk's entry and
/// tail-call stages summed (kernels without bpf_loop).
fn exec_figures(progs: &[ProgramFigures]) -> Option<ProgramFigures> {
    let parts: Vec<&ProgramFigures> = progs
        .iter()
        .filter(|p| p.name.starts_with("sched_process_exec") || p.name.starts_with("exec_walk_"))
        .collect();
    sum_figures("exec", &parts)
}

/// Figures of several programs as one: instruction counts only when every one has its own.
fn sum_figures(name: &str, parts: &[&ProgramFigures]) -> Option<ProgramFigures> {
    if parts.is_empty() {
        return None;
    }
    Some(ProgramFigures {
        name: name.into(),
        verified_insns: parts.iter().map(|p| p.verified_insns).sum(),
        load_ms: parts.iter().map(|p| p.load_ms).sum(),
    })
}

fn figures(p: &ProgramFigures) -> String {
    format!(
        "{} insns/{}",
        p.verified_insns
            .map(|n| n.to_string())
            // bpf_prog_info.verified_insns is 5.16+.
            .unwrap_or_else(|| "n/a".into()),
        p.load_ms
            .map(|ms| format!("{ms:.0} ms"))
            .unwrap_or_else(|| "?".into())
    )
}

/// The result table (markdown-like, for README and CI logs).
pub fn table(arch: Arch, outcomes: &[Outcome]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "kernel",
        "release",
        "verdict",
        "doctor",
        "demo",
        "fd-7 leak",
        "root tests",
        "exec prog: insns / load",
        "all progs: insns / load",
        "guest wall",
    ]);
    for o in outcomes {
        let (p, f, _) = o.log.test_counts();
        let progs = o.programs();
        let exec = exec_figures(&progs);
        let all = sum_figures("all", &progs.iter().collect::<Vec<_>>());
        t.add_row(vec![
            format!("{} {}", arch.name(), o.kernel.label),
            o.log
                .uname
                .clone()
                .unwrap_or_else(|| o.kernel.release.clone()),
            if o.failures().is_empty() {
                "PASS".into()
            } else {
                "FAIL".into()
            },
            o.rc("doctor"),
            o.rc("demo"),
            if o.log.leak7() { "yes" } else { "no" }.into(),
            if o.plan
                .steps
                .iter()
                .any(|s| s.name.starts_with(guest::TEST_STEP_PREFIX))
            {
                format!("{p} passed, {f} failed")
            } else {
                "not run".into()
            },
            exec.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            all.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            format!("{:.0} s", o.wall.as_secs_f64()),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excerpt_names_failed_tests_and_their_panics() {
        let log = "test a ... ok\ntest b ... FAILED\n\nfailures:\n\n---- b stdout ----\n\
                   thread 'b' (7) panicked at tests/tests/x.rs:3:5:\ntook 2s\n\
                   note: run with `RUST_BACKTRACE=1`\ntest c ... ok\n";
        assert_eq!(
            failure_excerpt(log),
            [
                "test b ... FAILED",
                "thread 'b' (7) panicked at tests/tests/x.rs:3:5:",
                "took 2s"
            ]
        );
        assert!(failure_excerpt("test a ... ok\n").is_empty());
    }

    #[test]
    fn fastest_load_per_program() {
        let p = |name: &str, ms: f64| ProgramFigures {
            name: name.into(),
            verified_insns: Some(10),
            load_ms: Some(ms),
        };
        let got = fastest([p("a", 5.0), p("b", 2.0), p("a", 3.0), p("a", 4.0)].into_iter());
        assert_eq!(got, vec![p("a", 3.0), p("b", 2.0)]);
    }
}
