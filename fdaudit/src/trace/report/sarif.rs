//! `trace --sarif FILE`: the trace's findings as SARIF values ([`crate::output::sarif`]):
//! each leaked fd the leak policy counts (one result per leak, however many spawns made
//! it), and each group a `--fail-on-strategy` or `--max-closes` gate failed on. A finding's
//! identity is diff's: the exec path and target normalised by diff's [`Normaliser`] with
//! every pid of the run, so that the same leak has the same fingerprint in every run and
//! in `diff --sarif`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::gates::{closes, GateOptions};
use super::summary::LeakPolicy;
use crate::diff::normalise::Normaliser;
use crate::engine::{
    flags::SpawnFlags,
    origin::Origin,
    spawn::{LeakedFd, Spawn},
};
use crate::output::sarif::{leak_identity, Finding, Level, Rule, SarifFile};

/// Leaked fds kept until the end (each with its stack's source lines); past this they are
/// counted and said.
const MAX_KEPT: usize = 20_000;
/// Source frames kept per stack.
const MAX_FRAMES: usize = 32;

/// A finding as seen, before the run's pids are all known.
#[derive(Debug, Clone)]
struct Seen {
    rule: Rule,
    exec_path: String,
    /// fd, kind, target, family, protocol (a leak); or the gate's words.
    what: What,
    frames: Vec<(String, Option<u32>)>,
    modules: Vec<String>,
    message: String,
}

#[derive(Debug, Clone)]
enum What {
    Leak {
        fd: u32,
        kind: &'static str,
        target: String,
        family: Option<&'static str>,
        protocol: Option<&'static str>,
    },
    Gate(String),
}

/// Collects a trace's findings as its spawns come (every spawn: the output filters do not
/// apply, as they do not to the gates).
#[derive(Debug, Default)]
pub struct Collector {
    /// Per process, the leaks of its last image (a `reexec` record replaces them).
    leaks: HashMap<u32, Vec<Seen>>,
    /// Findings no later record changes: gates, and the leaks of a pid used again.
    done: Vec<Seen>,
    /// Every pid and parent pid of the run (bounded by the pid space).
    pids: BTreeSet<u64>,
    kept: usize,
    left_out: u64,
    gate_leaks: bool,
}

impl Collector {
    pub fn new(gates: &GateOptions) -> Collector {
        Collector {
            gate_leaks: gates.leak_gate.is_some(),
            ..Default::default()
        }
    }

    pub fn add(&mut self, s: &Spawn, policy: &LeakPolicy, gates: &GateOptions) {
        self.pids
            .extend([u64::from(s.pid), u64::from(s.parent_pid)]);
        let exec_path = s.exec_path.lossy().into_owned();
        // An image that exec'd again passed its fds on: the last one leaked them.
        let leaks: Vec<Seen> = if s.flags.contains(SpawnFlags::EXECD_AGAIN) {
            Vec::new()
        } else {
            (s.leaked_fds.iter())
                .filter(|f| policy.counts(f))
                .map(|f| leak(s, f, &exec_path))
                .collect()
        };
        let gated = self.room_for(gate_findings(s, &exec_path, gates));
        self.done.extend(gated);
        let previous = self.leaks.remove(&s.pid).unwrap_or_default();
        if s.flags.contains(SpawnFlags::REEXEC) {
            self.kept -= previous.len();
        } else {
            self.done.extend(previous);
        }
        let leaks = self.room_for(leaks);
        if !leaks.is_empty() {
            self.leaks.insert(s.pid, leaks);
        }
    }

    /// What of `found` fits in [`MAX_KEPT`]; the rest is counted.
    fn room_for(&mut self, mut found: Vec<Seen>) -> Vec<Seen> {
        let room = MAX_KEPT.saturating_sub(self.kept);
        if found.len() > room {
            self.left_out += (found.len() - room) as u64;
            found.truncate(room);
        }
        self.kept += found.len();
        found
    }

    /// The findings, one per identity (normalised with every pid of the run), and a note
    /// when some were left out.
    pub fn finish(self) -> (Vec<Finding>, Option<String>) {
        let norm = Normaliser::new(self.pids, false);
        let mut by_id: BTreeMap<(Rule, String), (Finding, u64)> = BTreeMap::new();
        let last = self.leaks.into_values().flatten();
        for seen in self.done.into_iter().chain(last) {
            let identity = identity(&norm, &seen);
            let level = match seen.rule {
                Rule::LeakedFd if !self.gate_leaks => Level::Warning,
                _ => Level::Error,
            };
            let entry = by_id
                .entry((seen.rule, identity.clone()))
                .or_insert_with(|| {
                    let f = Finding {
                        rule: seen.rule,
                        level,
                        message: seen.message.clone(),
                        identity,
                        frames: Vec::new(),
                        modules: Vec::new(),
                        executable: Some(seen.exec_path.clone()),
                        baseline: None,
                    };
                    (f, 0)
                });
            entry.1 += 1;
            // The first spawn whose origin has source lines gives the location.
            if entry.0.frames.is_empty() && !seen.frames.is_empty() {
                entry.0.frames = seen.frames;
                entry.0.message = seen.message;
            }
            if entry.0.modules.is_empty() {
                entry.0.modules = seen.modules;
            }
        }
        let findings = by_id
            .into_values()
            .map(|(mut f, n)| {
                if n > 1 {
                    f.message.push_str(&format!(" ({n} spawns)"));
                }
                f
            })
            .collect();
        let note = (self.left_out > 0).then(|| {
            format!(
                "{} findings left out of the SARIF file (at most {MAX_KEPT} kept)",
                self.left_out
            )
        });
        (findings, note)
    }
}

/// A spawn over `--fail-on-strategy` or `--max-closes`.
fn gate_findings(s: &Spawn, exec_path: &str, gates: &GateOptions) -> Vec<Seen> {
    let mut found = Vec::new();
    if gates.strategies.contains(&s.strategy) {
        found.push(Seen {
            rule: Rule::StrategyOverGate,
            exec_path: exec_path.to_string(),
            what: What::Gate(s.strategy.to_string()),
            frames: Vec::new(),
            modules: Vec::new(),
            message: format!(
                "{} → {} closed its fds with {} between fork and exec (--fail-on-strategy)",
                s.parent_comm.escaped(),
                s.exec_path.escaped(),
                s.strategy
            ),
        });
    }
    if let Some(max) = gates.max_closes.filter(|&m| closes(s) > m) {
        found.push(Seen {
                rule: Rule::ClosesOverGate,
                exec_path: exec_path.to_string(),
                what: What::Gate(format!("closes over {max}")),
                frames: Vec::new(),
                modules: Vec::new(),
                message: format!(
                    "{} → {} made {} fd-closing calls between fork and exec, more than --max-closes {max}",
                    s.parent_comm.escaped(),
                    s.exec_path.escaped(),
                    closes(s)
                ),
            });
    }
    found
}

fn leak(s: &Spawn, f: &LeakedFd, exec_path: &str) -> Seen {
    let rule = if f.critical {
        Rule::LeakAcrossBoundary
    } else {
        Rule::LeakedFd
    };
    let (frames, modules, how) = match &f.origin {
        Some(Origin::Known(call)) => {
            let stacks = || {
                std::iter::once(&call.stack)
                    .chain(call.created_by.as_ref().map(|c| &c.stack))
                    .flatten()
            };
            let frames = stacks()
                .filter_map(|fr| fr.file.clone().map(|file| (file, fr.line)))
                .take(MAX_FRAMES)
                .collect();
            let mut modules: Vec<String> = Vec::new();
            for m in stacks().filter_map(|fr| fr.module.as_ref()) {
                if modules.len() < MAX_FRAMES && !modules.contains(m) {
                    modules.push(m.clone());
                }
            }
            let how = format!("; made inheritable by {}", call.syscall);
            (frames, modules, how)
        }
        Some(Origin::Unknown { unknown, .. }) => {
            (Vec::new(), Vec::new(), format!("; origin {unknown}"))
        }
        None => (Vec::new(), Vec::new(), String::new()),
    };
    let across = if f.critical {
        " across a credential or namespace boundary"
    } else {
        ""
    };
    Seen {
        rule,
        exec_path: exec_path.to_string(),
        what: What::Leak {
            fd: f.fd,
            kind: f.kind.as_str(),
            target: f.target.lossy().into_owned(),
            family: f.family,
            protocol: f.protocol,
        },
        frames,
        modules,
        message: format!(
            "fd {} ({} {}) leaked{across} into {} (spawned by {}){how}",
            f.fd,
            f.kind.as_str(),
            f.target.escaped(),
            s.exec_path.escaped(),
            s.parent_comm.escaped()
        ),
    }
}

/// What names a finding in every run: diff's leak key (exec path, fd, kind, target), or
/// the exec path and the gate.
fn identity(norm: &Normaliser, s: &Seen) -> String {
    let exec = norm.path(&s.exec_path);
    match &s.what {
        What::Leak {
            fd,
            kind,
            target,
            family,
            protocol,
        } => leak_identity(&exec, *fd, kind, &norm.target(target, *family, *protocol)),
        What::Gate(g) => format!("{exec}\0{g}"),
    }
}

/// `--sarif`: the findings; an incomplete trace's verdict and what was left out are notes.
pub fn write(
    file: Option<SarifFile>,
    found: Option<(Vec<Finding>, Option<String>)>,
    ci: &crate::output::ci::CiVerdict,
) -> anyhow::Result<()> {
    let (Some(file), Some((findings, left_out))) = (file, found) else {
        return Ok(());
    };
    file.write(&crate::output::sarif::Run {
        command: "trace",
        findings,
        exit_code: ci.exit_code,
        notes: ci.incomplete.iter().cloned().chain(left_out).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::strategy::Strategy;
    use crate::trace::report::tests::{leaked_fd, spawn};

    fn leaking(pid: u32, target: &str) -> Spawn {
        let mut s = spawn("srv", "/bin/true", 0, 0, 1);
        s.pid = pid;
        s.parent_pid = pid - 1;
        let mut f = leaked_fd(7, 1, 42);
        f.target = target.as_bytes().into();
        s.leaked_fds = vec![f];
        s
    }

    #[test]
    fn one_finding_per_leak_named_without_the_runs_pids() {
        let gates = GateOptions::default();
        let mut c = Collector::new(&gates);
        let policy = LeakPolicy::default();
        c.add(&leaking(101, "/tmp/x-100"), &policy, &gates);
        c.add(&leaking(201, "/tmp/x-200"), &policy, &gates);
        let (found, note) = c.finish();
        assert!(note.is_none());
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            found[0].identity,
            leak_identity("/bin/true", 7, "regular", "/tmp/x-<pid>")
        );
        assert!(
            found[0].message.ends_with("(2 spawns)"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn a_reexec_replaces_the_leaks_but_not_a_gate_finding() {
        let gates = GateOptions {
            strategies: vec![Strategy::CloseLoop],
            ..Default::default()
        };
        let mut c = Collector::new(&gates);
        let policy = LeakPolicy::default();
        let mut first = leaking(101, "/etc/a");
        first.strategy = Strategy::CloseLoop;
        c.add(&first, &policy, &gates);
        let mut again = leaking(101, "/etc/b");
        again.flags |= SpawnFlags::REEXEC;
        c.add(&again, &policy, &gates);
        let (found, _) = c.finish();
        let rules: Vec<(Rule, bool)> = found
            .iter()
            .map(|f| (f.rule, f.identity.ends_with("/etc/b")))
            .collect();
        assert_eq!(
            rules,
            [(Rule::LeakedFd, true), (Rule::StrategyOverGate, false)],
            "{found:#?}"
        );
    }
}
