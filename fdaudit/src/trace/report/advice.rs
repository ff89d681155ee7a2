//! What to change: per summary group that leaks or sweeps fds up to NOFILE, the remedy for
//! its runtime and version from the table in `advice.json` (sources in docs/advice.md), and
//! the projected cost of the sweep at the spawning process's NOFILE.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::Group;
use crate::engine::strategy::Strategy;
use crate::runtime::{parse_major_minor, Nofile, Runtime};

/// One row of the advice table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    /// `sweep` (a strategy that grows with NOFILE), `limit` (the sweep walks the soft
    /// limit), `leak`.
    kind: String,
    runtime: Option<String>,
    version_below: Option<String>,
    libc: Option<String>,
    libc_at_least: Option<String>,
    /// Only when the spawns made no close() call (posix_spawn, vfork + exec).
    #[serde(default)]
    no_closes: bool,
    fix: String,
    text: String,
    source: String,
}

fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_json::from_str(include_str!("advice.json")).expect("advice.json is valid")
    })
}

/// One remedy.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Remedy {
    /// The table row (`glibc-close-range`), for scripts.
    pub id: String,
    /// The change in a few words: `close_range`, `O_CLOEXEC`, `LimitNOFILE= / ulimit -Sn`.
    pub fix: String,
    pub text: String,
    /// Where the fact comes from (docs/advice.md cites each).
    pub source: String,
}

/// The cost of the sweep now and at the process's limits, per spawn.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Projection {
    /// fds the strategy walked per spawn (median).
    pub walked_fds: u64,
    /// Cost per walked fd, ns, and where it comes from: `close_cost` (the session's
    /// measured untraced close() of a closed fd) or `window` (the group's window divided
    /// by the fds walked).
    pub per_fd_ns: u64,
    pub per_fd_from: &'static str,
    /// The group's median corrected window, and the part that is not the sweep.
    pub window_ns: u64,
    pub rest_ns: u64,
    pub nofile_soft: Option<u64>,
    pub nofile_hard: Option<u64>,
    /// `parent`: the spawning process's /proc/PID/limits; `walk`: it was gone before it
    /// was read, and a close loop's bound or a poll's nfds (the limit the child read) is
    /// taken as the soft limit; null: neither.
    pub nofile_from: Option<&'static str>,
    /// Projected per-spawn window with the sweep to the soft and the hard limit.
    pub at_soft_ns: Option<u64>,
    pub at_hard_ns: Option<u64>,
    /// Projected per-spawn window after the fix (the window without the sweep).
    pub fixed_ns: u64,
}

/// An advice record: `{"type":"advice", ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    #[serde(flatten)]
    pub parent_comm: crate::output::text::Lossless<Vec<u8>, super::summary::GroupParentComm>,
    #[serde(flatten)]
    pub exec_path: crate::output::text::Lossless<Vec<u8>, super::summary::GroupExecPath>,
    pub strategy: String,
    pub spawns: u64,
    pub leaked_fd_count: u64,
    /// The group's runtime (absent where runtimes are not identified).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// `--origin`: the call that made the first leaked fd inheritable, and its frame.
    #[serde(rename = "origin_frame")]
    pub origin: Option<String>,
    /// `--origin`: the process that made that fd, when the spawner only passed it on (a
    /// pass-through: `su`, `sh`, `env`); the remedies are then for the maker's call, not
    /// for the spawner's runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_by: Option<crate::trace::chains::MadeBy>,
    pub remedies: Vec<Remedy>,
    pub projection: Option<Projection>,
}

/// Whether a strategy's work grows with NOFILE.
fn sweeps(strategy: &str) -> bool {
    matches!(
        Strategy::from_name(strategy),
        Some(Strategy::CloseLoop | Strategy::PollScan | Strategy::FcntlScan)
    )
}

fn below(v: Option<&str>, bound: &str) -> bool {
    match (v.and_then(parse_major_minor), parse_major_minor(bound)) {
        (Some(v), Some(b)) => v < b,
        _ => false,
    }
}

fn applies(e: &Entry, rt: Option<&Runtime>, g: &Group) -> bool {
    let name = rt.map_or("unknown", |r| r.name);
    let version = rt.and_then(|r| r.version.as_deref());
    let libc = rt.and_then(|r| r.libc.as_ref());
    e.runtime.as_deref().is_none_or(|r| r == name)
        && e.version_below.as_deref().is_none_or(|b| below(version, b))
        && e.libc
            .as_deref()
            .is_none_or(|l| libc.is_some_and(|c| c.name == l))
        && e.libc_at_least.as_deref().is_none_or(|b| {
            libc.is_some_and(|c| c.version.is_some() && !below(c.version.as_deref(), b))
        })
        && (!e.no_closes || g.close_median == 0)
}

fn fill(text: &str, rt: Option<&Runtime>, nofile: Option<Nofile>, origin: Option<&str>) -> String {
    let limit = |n: u64| match n {
        u64::MAX => "unlimited".to_string(),
        n => n.to_string(),
    };
    let glibc = rt
        .and_then(|r| r.libc.as_ref())
        .and_then(|l| l.version.clone())
        .unwrap_or_else(|| "?".into());
    let origin = match origin {
        Some(o) => format!(" ({o})"),
        None => " (trace --origin names that call)".to_string(),
    };
    text.replace(
        "{version}",
        rt.and_then(|r| r.version.as_deref()).unwrap_or("?"),
    )
    .replace("{glibc}", &glibc)
    .replace("{soft}", &nofile.map_or("?".into(), |n| limit(n.soft)))
    .replace("{hard}", &nofile.map_or("?".into(), |n| limit(n.hard)))
    .replace("{origin}", &origin)
}

/// The sweep's cost: per fd from the session's measured close() for a close loop, else
/// from the group's own window; projected to the process's limits.
fn projection(g: &Group, close_cost_ns: f64) -> Option<Projection> {
    let walked = g.spawner.walked;
    if walked == 0 {
        return None;
    }
    let window = g.window_median_ns;
    let (per_fd, per_fd_from) = if g.strategy == "close-loop" && close_cost_ns > 0.0 {
        (close_cost_ns, "close_cost")
    } else {
        (window as f64 / walked as f64, "window")
    };
    let rest = (window as f64 - per_fd * walked as f64).max(0.0) as u64;
    let at = |n: u64| (n != u64::MAX).then(|| rest + (per_fd * n as f64) as u64);
    let (nofile, from) = nofile_of(g);
    Some(Projection {
        walked_fds: walked,
        per_fd_ns: per_fd.round() as u64,
        per_fd_from,
        window_ns: window,
        rest_ns: rest,
        nofile_soft: nofile.map(|n| n.soft),
        nofile_hard: nofile.map(|n| n.hard).filter(|_| from != Some("walk")),
        nofile_from: from,
        at_soft_ns: nofile.and_then(|n| at(n.soft)),
        at_hard_ns: nofile
            .filter(|_| from != Some("walk"))
            .and_then(|n| at(n.hard)),
        fixed_ns: rest,
    })
}

/// The child's NOFILE at its exec (what it inherited from the spawning process), else the
/// spawning process's read from /proc, else (gone before it was read) the limit a close loop
/// or a poll walked to, which is what the child read as its limit.
fn nofile_of(g: &Group) -> (Option<Nofile>, Option<&'static str>) {
    if let Some(n) = g.spawner.nofile {
        return (
            Some(n),
            Some(if g.spawner.nofile_at_exec {
                "exec"
            } else {
                "parent"
            }),
        );
    }
    let walked = g.spawner.walked;
    if matches!(g.strategy.as_str(), "close-loop" | "poll-scan") && walked > 0 {
        let n = Nofile {
            soft: walked,
            hard: walked,
        };
        return (Some(n), Some("walk"));
    }
    (None, None)
}

/// Said after a remedy whose hard limit is the walked soft limit.
const HARD_UNREAD: &str = " (the hard limit shown is the soft limit the sweep walked: the \
                           process exited before its limits were read; keep its own if higher)";

/// The advice for each group that leaks or sweeps fds up to NOFILE, in the groups' order.
pub fn advise(groups: &[Group], close_cost_ns: f64) -> Vec<Advice> {
    let mut out = Vec::new();
    for g in groups {
        let sweep = sweeps(&g.strategy);
        if !sweep && g.leaked_fds == 0 {
            continue;
        }
        let made_by = g.spawner.made_by.as_ref();
        let (nofile, nofile_from) = nofile_of(g);
        let origin = g.spawner.origin.as_deref();
        // A pass-through's runtime did not make the fd: its rows would tell it to change
        // code it does not have. The maker's runtime's rows apply (the runtime-free rows
        // when it is not known).
        let rt = match made_by {
            Some(m) => m.runtime.as_ref(),
            None => g.spawner.runtime.as_ref(),
        };
        let origin_said = origin.map(|o| match made_by {
            Some(m) => format!(
                "{o}, by {}[{}]; {} passed it on and did not make it",
                m.comm,
                m.pid,
                String::from_utf8_lossy(&g.parent_comm.raw)
            ),
            None => o.to_string(),
        });
        // The soft limit is what the sweep walks when it reached it (a close loop's bound,
        // a poll's nfds: the limit less nothing, or less 3 for the fds it skips).
        let walks_soft = nofile
            .is_some_and(|n| g.spawner.walked + 3 >= n.soft && g.spawner.walked <= n.soft + 3);
        // A limit guessed from the walk says nothing of the hard limit: the walk (the soft
        // limit the child read) stands for it, a value that works as written, and is said.
        let nofile_text = nofile;
        let mut kinds = Vec::new();
        if sweep {
            kinds.push("sweep");
            if walks_soft {
                kinds.push("limit");
            }
        }
        if g.leaked_fds > 0 {
            kinds.push("leak");
        }
        let remedies = kinds
            .iter()
            .filter_map(|k| {
                // A sweep is the spawner's own code even when the leak is not.
                let rt = if *k == "leak" {
                    rt
                } else {
                    g.spawner.runtime.as_ref()
                };
                let e = table().iter().find(|e| e.kind == *k && applies(e, rt, g))?;
                let mut text = fill(&e.text, rt, nofile_text, origin_said.as_deref());
                if e.text.contains("{hard}") && nofile_from == Some("walk") {
                    text.push_str(HARD_UNREAD);
                }
                Some(Remedy {
                    id: e.id.clone(),
                    fix: e.fix.clone(),
                    text,
                    source: e.source.clone(),
                })
            })
            .collect();
        out.push(Advice {
            parent_comm: g.parent_comm.clone(),
            exec_path: g.exec_path.clone(),
            strategy: g.strategy.clone(),
            spawns: g.spawns,
            leaked_fd_count: g.leaked_fds,
            runtime: g.runtime.clone(),
            origin: origin.map(str::to_string),
            made_by: made_by.cloned(),
            remedies,
            projection: sweep.then(|| projection(g, close_cost_ns)).flatten(),
        });
    }
    out
}

/// `close-loop to 20000: the walk costs ~4.00 ms per spawn here (200 ns per fd, measured
/// close(); of a ~5.00 ms window); at the hard limit 1048576: ~210 ms; close_range saves
/// ~4.00 ms per spawn` (what the projection says, for people): each figure is the walk's
/// share, so the cost and the saving are the same number.
pub fn projection_line(a: &Advice) -> Option<String> {
    use crate::output::fmt_ns;
    let p = a.projection.as_ref()?;
    let limit = match p.nofile_soft {
        Some(u64::MAX) => "unlimited".to_string(),
        Some(soft) => soft.to_string(),
        None => p.walked_fds.to_string(),
    };
    // The walk's share only: the rest of the window (`fixed_ns`: fork, exec, the probes'
    // and the machine's noise) stays after the fix, so a whole window beside a saving
    // would be two numbers that disagree.
    let walk = p
        .at_soft_ns
        .unwrap_or(p.window_ns)
        .saturating_sub(p.fixed_ns);
    let mut line = format!(
        "{} to {limit}: the walk costs ~{} per spawn here ({} per fd, {}; of a ~{} window)",
        a.strategy,
        fmt_ns(walk as f64),
        fmt_ns(p.per_fd_ns as f64),
        if p.per_fd_from == "close_cost" {
            "measured close()"
        } else {
            "from this group's window"
        },
        fmt_ns(p.window_ns as f64),
    );
    if let (Some(hard), Some(ns)) = (p.nofile_hard, p.at_hard_ns) {
        if Some(hard) != p.nofile_soft {
            line.push_str(&format!(
                "; at the hard limit {hard}: ~{}",
                fmt_ns(ns.saturating_sub(p.fixed_ns) as f64)
            ));
        }
    }
    let fix = a.remedies.first().map_or("fixed", |r| r.fix.as_str());
    line.push_str(&format!("; {fix} saves ~{} per spawn", fmt_ns(walk as f64)));
    Some(line)
}

/// The "what to change" section for people: a line per advised group, its projection and
/// a line per remedy.
pub fn advice_text(advice: &[Advice], term: crate::output::table::Term) -> String {
    let mut out = String::new();
    if advice.is_empty() {
        return out;
    }
    out.push_str("\nwhat to change:\n");
    // A remedy given for an earlier group (same row of the table) is named, not repeated.
    let mut said: Vec<&String> = Vec::new();
    for a in advice {
        let rt = a
            .runtime
            .as_ref()
            .map_or("runtime unknown".into(), Runtime::label);
        let what = if a.leaked_fd_count > 0 {
            format!(
                "{} leaked",
                crate::output::count(a.leaked_fd_count, "fd", "fds")
            )
        } else {
            a.strategy.clone()
        };
        let what = projection_line(a).unwrap_or(what);
        let mut head = format!(
            "{} ({rt}) -> {}, {what}",
            a.parent_comm.escaped(),
            a.exec_path.escaped()
        );
        if let Some(m) = &a.made_by {
            let maker = crate::output::text::escape(&format!("{}[{}]", m.comm, m.pid));
            head.push_str(&format!(
                " (made by {maker}, passed on by {}: the change is {maker}'s)",
                a.parent_comm.escaped()
            ));
        }
        out.push_str(&term.fill(&head, 2));
        out.push('\n');
        let mut again = Vec::new();
        for r in &a.remedies {
            if said.contains(&&r.id) {
                again.push(r.fix.as_str());
                continue;
            }
            said.push(&r.id);
            let text = crate::output::text::escape(&r.text);
            let line = format!("  {}: {text} [{}]", r.fix, r.source);
            out.push_str(&term.fill(&line, 4));
            out.push('\n');
        }
        if !again.is_empty() {
            out.push_str(&term.fill(&format!("  as above: {}", again.join("; ")), 4));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
#[path = "advice_tests.rs"]
mod tests;
