//! Rendering of trace results: a line per spawn, the summary table, JSON objects.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::session::{Exit, Spawn};
use crate::{
    output::{self, fmt_ns},
    stats,
};

/// One line for a spawn, as it happens.
pub fn spawn_line(s: &Spawn) -> String {
    let mut line = if s.exec_ok {
        format!(
            "{}[{}] -> {} {}",
            s.parent_comm, s.parent_pid, s.pid, s.exec_path
        )
    } else {
        format!(
            "{}[{}] -> {} EXEC FAILED ({} attempts), exited",
            s.parent_comm, s.parent_pid, s.pid, s.exec_attempts
        )
    };
    if let Some(tid) = s.exec_tid {
        line.push_str(&format!(" (exec by thread {tid})"));
    }
    if s.argv.len() > 1 {
        line.push_str(" (");
        line.push_str(&s.argv[1..].join(" "));
        line.push(')');
    }
    if s.window_ns > 0 {
        line.push_str(&format!(
            "  window {} (untraced ~{})",
            fmt_ns(s.window_ns as f64),
            fmt_ns(s.window_corrected_ns as f64)
        ));
    }
    if !s.flags.contains(&"no_syscalls") {
        line.push_str(&format!("  {}", s.strategy));
        if let Some(b) = s.close_loop_bound {
            line.push_str(&format!(" to {b}"));
        }
        let mut counts = Vec::new();
        if s.close_calls > 0 {
            counts.push(format!("close {} ({} EBADF)", s.close_calls, s.close_ebadf));
        }
        if s.close_range_calls > 0 {
            let r: Vec<String> = s
                .close_ranges
                .iter()
                .map(|[a, b, f]| format!("close_range({a}, {}, {})", bound(*b), range_flags(*f)))
                .collect();
            counts.push(r.join(" "));
        }
        if s.fcntl_setfd_calls + s.fcntl_getfd_calls > 0 {
            counts.push(format!(
                "fcntl {}",
                s.fcntl_setfd_calls + s.fcntl_getfd_calls
            ));
        }
        if s.poll_calls > 0 {
            counts.push(format!("poll {} (nfds {})", s.poll_calls, s.poll_nfds_max));
        }
        if s.getdents64_calls > 0 {
            counts.push(format!("getdents64 {}", s.getdents64_calls));
        }
        if s.exec_attempts > 1 {
            counts.push(format!("exec attempts {}", s.exec_attempts));
        }
        if !counts.is_empty() {
            line.push_str(": ");
            line.push_str(&counts.join(", "));
        }
    }
    if s.leaked_count > 0 {
        let fds: Vec<String> = s
            .leaked_fds
            .iter()
            .map(|f| match (f.family, f.socket_type) {
                (Some(fam), Some(ty)) => format!("{} {} {fam} {ty} {}", f.fd, f.kind, f.target),
                _ => format!("{} {} {}", f.fd, f.kind, f.target),
            })
            .collect();
        line.push_str(&format!("  LEAKED {}: {}", s.leaked_count, fds.join(", ")));
    }
    if !s.flags.is_empty() {
        line.push_str(&format!("  [{}]", s.flags.join(",")));
    }
    line
}

fn bound(b: u32) -> String {
    if b == u32::MAX {
        "~0U".into()
    } else {
        b.to_string()
    }
}

/// close_range() flags by name.
pub fn range_flags(f: u32) -> String {
    let mut names = Vec::new();
    if f & 2 != 0 {
        names.push("UNSHARE");
    }
    if f & 4 != 0 {
        names.push("CLOEXEC");
    }
    if names.is_empty() {
        "0".into()
    } else {
        names.join("|")
    }
}

/// Totals over a trace.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Totals {
    pub close_calls: u64,
    pub close_ebadf: u64,
    pub close_range_calls: u64,
    pub fcntl_calls: u64,
    pub poll_calls: u64,
    pub getdents64_calls: u64,
    /// fds leaked at each process's last exec (what reached the image that runs).
    pub leaked_fds: u64,
    /// Processes whose last exec leaked an fd: what `--fail-on-leak` fails on.
    pub spawns_with_leaks: u64,
    /// fds that crossed an exec into an image that exec'd again (a spawn helper such as
    /// jspawnhelper, a shell's `exec`): reported per record, not counted as leaks above.
    pub transient_leaked_fds: u64,
    pub window_ns: u64,
    pub window_corrected_ns: u64,
}

/// One row of the summary: spawns grouped by parent, exec path and strategy.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub parent_comm: String,
    pub exec_path: String,
    pub spawns: u64,
    pub close_median: u64,
    pub close_max: u64,
    pub window_median_ns: u64,
    pub window_p95_ns: u64,
    pub strategy: String,
    pub leaked_fds: u64,
}

/// The summary JSON object (last line with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub spawns: u64,
    pub lost_records: u64,
    pub untracked_forks: u64,
    /// (process, fd) read counters not kept because the kernel's table was full (`--reads`).
    pub read_table_full: u64,
    pub fork_only_children: u64,
    pub probe_cost_ns: f64,
    pub close_cost_ns: f64,
    pub leaks_only: bool,
    pub totals: Totals,
    pub groups: Vec<Group>,
    pub partial: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_storms: Vec<super::reads::ReadStorm>,
}

/// What a group keeps per spawn: the numbers its percentiles need.
#[derive(Default)]
struct Acc {
    closes: Vec<u64>,
    windows: Vec<u64>,
    leaked: u64,
}

/// Accumulates spawns for the summary.
#[derive(Default)]
pub struct Collector {
    groups: BTreeMap<(String, String, String), Acc>,
    /// pid -> fds leaked at its latest exec.
    last_leaks: HashMap<u32, u32>,
    totals: Totals,
    pub spawns: u64,
    pub fork_only: u64,
    flag_counts: BTreeMap<&'static str, u64>,
}

impl Collector {
    pub fn add(&mut self, s: &Spawn) {
        self.spawns += 1;
        let t = &mut self.totals;
        t.close_calls += u64::from(s.close_calls);
        t.close_ebadf += u64::from(s.close_ebadf);
        t.close_range_calls += u64::from(s.close_range_calls);
        t.fcntl_calls += u64::from(s.fcntl_setfd_calls + s.fcntl_getfd_calls);
        t.poll_calls += u64::from(s.poll_calls);
        t.getdents64_calls += u64::from(s.getdents64_calls);
        t.window_ns += s.window_ns;
        t.window_corrected_ns += s.window_corrected_ns;
        // An exec of the same process supersedes the previous one: its fds went to an image
        // that exec'd again, and what matters is what the last image got.
        if let Some(prev) = self.last_leaks.insert(s.pid, s.leaked_count) {
            t.transient_leaked_fds += u64::from(prev);
        }
        for f in &s.flags {
            *self.flag_counts.entry(f).or_default() += 1;
        }
        let acc = self
            .groups
            .entry((
                s.parent_comm.clone(),
                s.exec_path.clone(),
                s.strategy.to_string(),
            ))
            .or_default();
        acc.closes.push(u64::from(s.close_calls));
        acc.windows.push(s.window_corrected_ns);
        acc.leaked += u64::from(s.leaked_count);
    }

    pub fn add_exit(&mut self, e: &Exit) {
        self.fork_only += u64::from(e.never_execd);
    }

    /// The totals, with leaks counted at each process's last exec.
    pub fn totals(&self) -> Totals {
        let mut t = self.totals.clone();
        t.leaked_fds = self.last_leaks.values().map(|&n| u64::from(n)).sum();
        t.spawns_with_leaks = self.last_leaks.values().filter(|&&n| n > 0).count() as u64;
        t
    }

    pub fn groups(&self) -> Vec<Group> {
        self.groups
            .iter()
            .map(|((parent, path, strategy), acc)| Group {
                parent_comm: parent.clone(),
                exec_path: path.clone(),
                spawns: acc.closes.len() as u64,
                close_median: stats::median(&acc.closes).unwrap_or(0),
                close_max: acc.closes.iter().copied().max().unwrap_or(0),
                window_median_ns: stats::median(&acc.windows).unwrap_or(0),
                window_p95_ns: stats::percentile(&acc.windows, 95.0).unwrap_or(0),
                strategy: strategy.clone(),
                leaked_fds: acc.leaked,
            })
            .collect()
    }

    /// Human notes on partial data.
    pub fn partial_notes(&self) -> Vec<String> {
        self.flag_counts
            .iter()
            .filter(|(f, _)| !matches!(**f, "no_syscalls" | "no_fork" | "reexec"))
            .map(|(f, n)| format!("{n} spawn(s) with {f}"))
            .collect()
    }
}

/// The summary table for people.
pub fn summary_table(groups: &[Group]) -> String {
    let mut t = output::table(&[
        "parent",
        "exec",
        "spawns",
        "close/spawn med",
        "max",
        "window med",
        "p95",
        "strategy",
        "leaked fds",
    ]);
    for g in groups {
        t.add_row(vec![
            g.parent_comm.clone(),
            g.exec_path.clone(),
            g.spawns.to_string(),
            g.close_median.to_string(),
            g.close_max.to_string(),
            fmt_ns(g.window_median_ns as f64),
            fmt_ns(g.window_p95_ns as f64),
            g.strategy.clone(),
            g.leaked_fds.to_string(),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::strategy::Strategy;

    /// A spawn record for tests.
    pub(crate) fn spawn(parent: &str, path: &str, close: u32, window: u64, leaked: u32) -> Spawn {
        Spawn {
            record_type: "spawn",
            parent_pid: 1,
            parent_comm: parent.into(),
            pid: 2,
            exec_tid: None,
            exec_path: path.into(),
            argv: vec![path.into(), "-x".into()],
            exec_ok: true,
            exec_attempts: 1,
            window_ns: window,
            window_corrected_ns: window,
            close_calls: close,
            close_ebadf: close.saturating_sub(1),
            close_range_calls: 0,
            close_ranges: vec![],
            fcntl_setfd_calls: 0,
            fcntl_getfd_calls: 0,
            poll_calls: 0,
            poll_nfds_max: 0,
            getdents64_calls: 0,
            procfd_opens: 0,
            dup_calls: 0,
            strategy: if close >= 64 {
                Strategy::CloseLoop
            } else {
                Strategy::None
            },
            close_loop_bound: (close >= 64).then_some(close + 3),
            leaked_fds: vec![],
            leaked_count: leaked,
            stdio: vec![],
            flags: vec![],
            exec_ns: 0,
        }
    }

    #[test]
    fn spawn_line_names_strategy_counts_and_leaks() {
        let s = spawn("python3", "/bin/true", 19_997, 2_500_000, 0);
        assert_eq!(
            spawn_line(&s),
            "python3[1] -> 2 /bin/true (-x)  window 2.50 ms (untraced ~2.50 ms)  close-loop to 20000: close 19997 (19996 EBADF)"
        );
    }

    #[test]
    fn exec_chain_leaks_count_at_the_last_exec() {
        let mut c = Collector::default();
        let mut helper = spawn("java", "/usr/lib/jvm/lib/jspawnhelper", 0, 1_000, 14);
        helper.pid = 40;
        let mut fin = spawn("java", "/bin/true", 15, 2_000, 0);
        fin.pid = 40;
        fin.flags = vec!["reexec"];
        let mut other = spawn("bash", "/bin/cat", 0, 1_000, 1);
        other.pid = 41;
        c.add(&helper);
        c.add(&fin);
        c.add(&other);
        let t = c.totals();
        assert_eq!(
            (t.spawns_with_leaks, t.leaked_fds, t.transient_leaked_fds),
            (1, 1, 14)
        );
    }

    #[test]
    fn summary_groups_by_parent_and_path() {
        let mut c = Collector::default();
        c.add(&spawn("bash", "/bin/true", 3, 1_000_000, 1));
        c.add(&spawn("bash", "/bin/true", 19_997, 3_000_000, 1));
        c.add(&spawn("python3", "/bin/ls", 0, 500_000, 0));
        c.add(&spawn("bash", "/bin/true", 19_993, 2_000_000, 0));
        let g = c.groups();
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].strategy.as_str(), g[0].spawns), ("close-loop", 2));
        assert_eq!(g[0].close_max, 19_997);
        assert_eq!(g[0].close_median, 19_995, "mean of the two middle values");
        assert_eq!(g[0].leaked_fds, 1);
        assert_eq!(g[0].window_p95_ns, 3_000_000);
        assert_eq!((g[1].strategy.as_str(), g[1].spawns), ("none", 1));
        // Both bash spawns were pid 2 in this test: the second exec supersedes the first.
        assert_eq!(c.totals().spawns_with_leaks, 0);
        assert_eq!(c.totals().transient_leaked_fds, 2);
        let table = summary_table(&g);
        assert!(table.contains("python3"), "{table}");
        assert!(
            table.contains("close-loop") || table.contains("none"),
            "{table}"
        );
    }
}
