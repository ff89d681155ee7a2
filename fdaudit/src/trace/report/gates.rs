//! `trace`'s CI gates: `--fail-on-leak`, `--fail-on-strategy` and `--max-closes`. Every exec
//! record is judged, whatever the output filters keep; the verdict lines name the spawns
//! that failed each gate, and [`Gates::failed`] the exit reason.

use std::collections::{BTreeMap, BTreeSet};

use super::{Ending, ExitReason, LeakPolicy};
use crate::engine::{spawn::Spawn, strategy::Strategy};
use crate::output::{count, stream};

/// How many offending spawns a verdict line names.
const SHOWN: usize = 5;

/// What `--fail-on-leak` fails on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LeakGate {
    /// Any leaked fd (what `--fail-on-leak` alone means).
    Any,
    /// Only fds that crossed a privilege, namespace or root boundary: the spawn's image runs
    /// with other credentials, capabilities, namespaces, root or cgroup than the last exec'd
    /// image of its ancestry (whatever forks came between).
    Boundary,
}

/// The gates set on the command line.
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// `--fail-on-leak[=any|boundary]`.
    pub leak_gate: Option<LeakGate>,
    /// `--fail-on-strategy`.
    pub strategies: Vec<Strategy>,
    /// `--max-closes`.
    pub max_closes: Option<u64>,
}

impl GateOptions {
    /// The gates set, as the command line names them (for the verdict line).
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        match self.leak_gate {
            Some(LeakGate::Boundary) => names.push("--fail-on-leak=boundary".to_string()),
            Some(LeakGate::Any) => names.push("--fail-on-leak".to_string()),
            None => {}
        }
        if !self.strategies.is_empty() {
            let s: Vec<&str> = self.strategies.iter().map(|s| s.as_str()).collect();
            names.push(format!("--fail-on-strategy {}", s.join(",")));
        }
        if let Some(max) = self.max_closes {
            names.push(format!("--max-closes {max}"));
        }
        names
    }
}

/// The fd-closing calls of a window that `--max-closes` counts: close() calls plus
/// close_range() calls. The kernel does not say how many fds one close_range() closed, so
/// it counts once, as the one call it is (its cost does not grow with NOFILE).
pub fn closes(s: &Spawn) -> u64 {
    s.calls.close_calls + s.calls.close_range_calls
}

/// The offenders of each gate.
#[derive(Debug, Default)]
pub struct Gates {
    pub opts: GateOptions,
    /// `--fail-on-leak`: each process whose latest exec leaked what the policy counts (a
    /// later exec of the process replaces it: leaks are judged at the last image).
    leaks: BTreeMap<u32, String>,
    /// `--fail-on-strategy`: every exec record that used one of the strategies.
    strategy: Vec<String>,
    /// `--max-closes`: every exec record that made more closing calls.
    closes: Vec<String>,
    /// Where each gate's offenders ran, for the CI reports' per-group verdicts: the exec
    /// path of each process in `leaks`, and (exec path, strategy) of the others.
    leak_execs: BTreeMap<u32, Vec<u8>>,
    strategy_hits: BTreeSet<(Vec<u8>, String)>,
    closes_hits: BTreeSet<(Vec<u8>, String)>,
}

/// One of the gates, for [`Gates::hit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Leak,
    Strategy,
    Closes,
}

impl Gates {
    pub fn new(opts: GateOptions) -> Gates {
        Gates {
            opts,
            ..Gates::default()
        }
    }

    /// Judges one exec record (before the output filters).
    pub fn judge(&mut self, s: &Spawn, policy: &LeakPolicy) {
        if self.opts.leak_gate.is_some() {
            self.judge_leaks(s, policy);
        }
        let who = || format!("pid {} {}", s.pid, s.exec_path.escaped());
        if self.opts.strategies.contains(&s.strategy) {
            let how = match s.close_loop_bound {
                Some(b) => format!("{} to {b}", s.strategy),
                None => s.strategy.to_string(),
            };
            self.strategy.push(format!("{}: {how}", who()));
            let hit = (s.exec_path.to_vec(), s.strategy.to_string());
            self.strategy_hits.insert(hit);
        }
        if let Some(max) = self.opts.max_closes {
            let n = closes(s);
            if n > max {
                self.closes.push(format!(
                    "{}: {n} (close {}, close_range {})",
                    who(),
                    s.calls.close_calls,
                    s.calls.close_range_calls
                ));
                let hit = (s.exec_path.to_vec(), s.strategy.to_string());
                self.closes_hits.insert(hit);
            }
        }
    }

    fn judge_leaks(&mut self, s: &Spawn, policy: &LeakPolicy) {
        if policy.new_leaks(s) == 0 || s.flags.transient() {
            self.leaks.remove(&s.pid);
            self.leak_execs.remove(&s.pid);
            return;
        }
        self.leak_execs.insert(s.pid, s.exec_path.to_vec());
        let mut fds: Vec<String> = s
            .leaked_fds
            .iter()
            .filter(|f| policy.counts(f))
            .map(|f| format!("fd {} {} {}", f.fd, f.kind, f.target.escaped()))
            .collect();
        let unlisted = (s.leaked_count as usize).saturating_sub(s.leaked_fds.len());
        if unlisted > 0 {
            fds.push(format!("{unlisted} more not listed (fds_truncated)"));
        }
        self.leaks.insert(
            s.pid,
            format!(
                "pid {} {}: {}",
                s.pid,
                s.exec_path.escaped(),
                fds.join(", ")
            ),
        );
    }

    /// The gates set, each with the name the command line gives it.
    pub fn set(&self) -> Vec<(Gate, String)> {
        let names = self.opts.names();
        let gates = [
            (Gate::Leak, self.opts.leak_gate.is_some()),
            (Gate::Strategy, !self.opts.strategies.is_empty()),
            (Gate::Closes, self.opts.max_closes.is_some()),
        ];
        gates
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(g, _)| g)
            .zip(names)
            .collect()
    }

    /// Whether a spawn of `exec_path` (its last image) with `strategy` failed `gate`
    /// (`--fail-on-leak`: a process whose last image is `exec_path` leaked).
    pub fn hit(&self, gate: Gate, exec_path: &[u8], strategy: &str) -> bool {
        let key = (exec_path.to_vec(), strategy.to_string());
        match gate {
            Gate::Leak => self.leak_execs.values().any(|e| e == exec_path),
            Gate::Strategy => self.strategy_hits.contains(&key),
            Gate::Closes => self.closes_hits.contains(&key),
        }
    }

    /// The first gate that failed, in the order leak, strategy, closes (`leaked`: whether
    /// `--fail-on-leak` has a leak to fail on, as the reporter's totals say).
    pub fn failed(&self, leaked: bool) -> Option<ExitReason> {
        if self.opts.leak_gate.is_some() && leaked {
            Some(ExitReason::Leak)
        } else if !self.strategy.is_empty() {
            Some(ExitReason::Strategy)
        } else if !self.closes.is_empty() {
            Some(ExitReason::Closes)
        } else {
            None
        }
    }

    /// The verdict lines of the gates that failed: which spawns, why, and the exit status
    /// it led to; first, when the trace is known to be incomplete (`incomplete`: why, from
    /// [`super::Losses::incomplete`]), a line that says so.
    pub fn verdicts(&self, leaked: bool, incomplete: Option<&str>, ending: &Ending) -> Vec<String> {
        let outcome = match ending.exit_reason {
            ExitReason::Leak
            | ExitReason::Strategy
            | ExitReason::Closes
            | ExitReason::Incomplete => {
                format!("exit status {}", ending.exit_code)
            }
            _ => format!(
                "but the command itself failed: exit status {} is its own",
                ending.exit_code
            ),
        };
        let mut lines = Vec::new();
        if let Some(why) = incomplete {
            let gates = self.opts.names().join(", ");
            lines.push(if ending.exit_reason == ExitReason::Incomplete {
                format!(
                    "{gates}: the trace is INCOMPLETE, so no gate can pass on it: {why} ({outcome})"
                )
            } else {
                format!("{gates}: the trace is INCOMPLETE too: {why} ({outcome})")
            });
        }
        if self.opts.leak_gate.is_some() && leaked {
            let list: Vec<&String> = self.leaks.values().collect();
            let (gate, what) = match self.opts.leak_gate {
                Some(LeakGate::Boundary) => ("--fail-on-leak=boundary", "across a boundary"),
                _ => ("--fail-on-leak", ""),
            };
            lines.push(format!(
                "{gate}: {} leaked fds{}{what} ({outcome}): {}",
                count(list.len() as u64, "spawn", "spawns"),
                if what.is_empty() { "" } else { " " },
                shown(&list)
            ));
        }
        if !self.strategy.is_empty() {
            let names: Vec<&str> = self.opts.strategies.iter().map(|s| s.as_str()).collect();
            lines.push(format!(
                "--fail-on-strategy {}: {} used it ({outcome}): {}",
                names.join(","),
                count(self.strategy.len() as u64, "spawn", "spawns"),
                shown(&self.strategy.iter().collect::<Vec<_>>())
            ));
        }
        if let (Some(max), false) = (self.opts.max_closes, self.closes.is_empty()) {
            lines.push(format!(
                "--max-closes {max}: {} made more closing calls ({outcome}): {}",
                count(self.closes.len() as u64, "spawn", "spawns"),
                shown(&self.closes.iter().collect::<Vec<_>>())
            ));
        }
        lines
    }

    /// Says [`Gates::verdicts`] as verdict notes.
    pub fn say(&self, leaked: bool, incomplete: Option<&str>, ending: &Ending) {
        for v in self.verdicts(leaked, incomplete, ending) {
            stream::note(stream::Level::Verdict, &v);
        }
    }
}

/// The first [`SHOWN`] offenders, `; `-joined, and how many more.
fn shown(list: &[&String]) -> String {
    let mut out: Vec<String> = list.iter().take(SHOWN).map(|s| s.to_string()).collect();
    if list.len() > SHOWN {
        out.push(format!("… and {} more", list.len() - SHOWN));
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::super::tests::{leaked_fd, spawn};
    use super::*;

    fn ending(exit_code: u8, exit_reason: ExitReason) -> Ending {
        Ending {
            command_status: Some(0),
            exit_code,
            exit_reason,
        }
    }

    #[test]
    fn strategy_and_closes_gates_name_the_spawns() {
        let mut g = Gates::new(GateOptions {
            leak_gate: None,
            strategies: vec![Strategy::CloseLoop, Strategy::ProcfdWalk],
            max_closes: Some(100),
        });
        let policy = LeakPolicy::default();
        let mut range = spawn("sh", "/bin/true", 2, 1_000, 0);
        range.strategy = Strategy::CloseRange;
        range.calls.close_range_calls = 1;
        g.judge(&range, &policy);
        assert_eq!(g.failed(false), None, "3 closing calls, close-range");
        let mut lp = spawn("sh", "/bin/true", 19_997, 1_000, 0);
        lp.pid = 77;
        g.judge(&lp, &policy);
        assert_eq!(g.failed(false), Some(ExitReason::Strategy));
        assert_eq!(
            g.failed(true),
            Some(ExitReason::Strategy),
            "no --fail-on-leak"
        );
        let v = g.verdicts(false, None, &ending(3, ExitReason::Strategy));
        assert_eq!(
            v,
            [
                "--fail-on-strategy close-loop,procfd-walk: 1 spawn used it (exit status 3): pid 77 /bin/true: close-loop to 20000",
                "--max-closes 100: 1 spawn made more closing calls (exit status 3): pid 77 /bin/true: 19997 (close 19997, close_range 0)",
            ]
        );
        let v = g.verdicts(false, None, &ending(1, ExitReason::Command));
        assert!(
            v[0].contains("but the command itself failed: exit status 1"),
            "{v:?}"
        );
    }

    #[test]
    fn an_incomplete_trace_is_said_first_with_its_status() {
        let mut g = Gates::new(GateOptions {
            leak_gate: Some(LeakGate::Any),
            ..GateOptions::default()
        });
        let why = "51000 records lost (the ring buffer was full)";
        let v = g.verdicts(false, Some(why), &ending(4, ExitReason::Incomplete));
        assert_eq!(
            v,
            ["--fail-on-leak: the trace is INCOMPLETE, so no gate can pass on it: 51000 records lost (the ring buffer was full) (exit status 4)"]
        );
        let mut s = spawn("sh", "/bin/cat", 0, 1_000, 1);
        s.leaked_fds = vec![leaked_fd(9, 8, 42)];
        g.judge(&s, &LeakPolicy::default());
        let v = g.verdicts(true, Some(why), &ending(3, ExitReason::Leak));
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].starts_with("--fail-on-leak: the trace is INCOMPLETE too: 51000"),
            "{v:?}"
        );
        assert!(v[0].ends_with("(exit status 3)"), "{v:?}");
        assert!(
            v[1].starts_with("--fail-on-leak: 1 spawn leaked fds"),
            "{v:?}"
        );
        assert!(g
            .verdicts(false, None, &ending(0, ExitReason::Ok))
            .is_empty());
    }

    #[test]
    fn max_closes_counts_close_range_calls_and_is_strict() {
        let mut g = Gates::new(GateOptions {
            max_closes: Some(3),
            ..GateOptions::default()
        });
        let mut s = spawn("sh", "/bin/true", 3, 1_000, 0);
        g.judge(&s, &LeakPolicy::default());
        assert_eq!(g.failed(false), None, "3 is not more than 3");
        s.calls.close_range_calls = 1;
        g.judge(&s, &LeakPolicy::default());
        assert_eq!(g.failed(false), Some(ExitReason::Closes));
    }
}
