//! `fdaudit diff`'s output: a table for people, or `diff_group`, `diff_leak` and `summary`
//! records for machines; the verdict either way.

use anyhow::Result;
use serde::Serialize;

use super::compare::{Change, Diff, GroupDiff, LeakChange, LeakDiff};
use super::input::{Key, Kind, Row};
use crate::output::{
    color::Paint,
    count, escape, fmt_ns, stream,
    table::{Cell, Col, Table, Term},
};

/// Every JSON object `diff --json` prints after the header, tagged by `"type"`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DiffRecord<'a> {
    DiffGroup(&'a GroupDiff),
    DiffLeak(&'a LeakDiff),
    Summary(DiffSummary),
}

/// The `summary` record of `diff`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffSummary {
    /// Keys compared (in either run).
    #[serde(rename = "group_count")]
    pub groups: u64,
    pub worse: u64,
    pub better: u64,
    pub new_groups: u64,
    pub gone_groups: u64,
    pub new_leaks: u64,
    pub fixed_leaks: u64,
    pub exit_code: u8,
    /// `regression` (exit 3) or `ok`.
    pub exit_reason: &'static str,
}

impl DiffSummary {
    pub fn of(d: &Diff, exit_code: u8) -> DiffSummary {
        DiffSummary {
            groups: d.groups.len() as u64,
            worse: d.count(Change::Worse),
            better: d.count(Change::Better),
            new_groups: d.count(Change::New),
            gone_groups: d.count(Change::Gone),
            new_leaks: d.leak_count(LeakChange::New),
            fixed_leaks: d.leak_count(LeakChange::Fixed),
            exit_code,
            exit_reason: if d.regressed() { "regression" } else { "ok" },
        }
    }
}

/// Writes the records, or the table, the leaks and the totals line.
pub fn write(d: &Diff, kind: Kind, json: bool, exit_code: u8) -> Result<()> {
    let summary = DiffSummary::of(d, exit_code);
    if json {
        for g in &d.groups {
            stream::record(&DiffRecord::DiffGroup(g))?;
        }
        for l in &d.leaks {
            stream::record(&DiffRecord::DiffLeak(l))?;
        }
    } else {
        let term = stream::term();
        let mut t = table(d, kind, term);
        if !t.ends_with('\n') {
            t.push('\n');
        }
        stream::text(&t)?;
        for l in &d.leaks {
            stream::text(&format!("{}\n", leak_line(l)))?;
        }
        stream::text(&format!("{}\n", totals(&summary)))?;
    }
    if let Some(v) = verdict(d, exit_code) {
        stream::note(stream::Level::Verdict, &v);
    }
    if json {
        stream::record(&DiffRecord::Summary(summary))?;
    }
    Ok(())
}

/// `A → B`, or `A` when both are the same; `-` for a side that has no such key.
fn pair(a: Option<String>, b: Option<String>) -> String {
    let dash = || "-".to_string();
    match (a, b) {
        (Some(a), Some(b)) if a == b => a,
        (a, b) => format!("{} → {}", a.unwrap_or_else(dash), b.unwrap_or_else(dash)),
    }
}

fn side<T>(g: &GroupDiff, f: impl Fn(&Row) -> T) -> (Option<T>, Option<T>) {
    (g.a.as_ref().map(&f), g.b.as_ref().map(&f))
}

fn closes(r: &Row) -> String {
    r.close_median.map_or("?".into(), |c| c.to_string())
}

/// The table for people: one row per key, what changed and why.
pub fn table(d: &Diff, kind: Kind, term: Term) -> String {
    // `bench -- CMD`'s rows are keyed by the command line, built-in cells by strategy.
    let spawners = d
        .groups
        .iter()
        .any(|g| matches!(g.key, Key::Spawner { .. }));
    let cells = d.groups.iter().any(|g| matches!(g.key, Key::Bench { .. }));
    let (k1, k2) = match kind {
        Kind::Trace => ("parent", "exec"),
        Kind::Bench if spawners && cells => ("strategy or spawner", "cell"),
        Kind::Bench if spawners => ("spawner", "cell"),
        Kind::Bench => ("strategy", "cell"),
    };
    let mut t = Table::new([
        Col::new(k1),
        Col::new(k2).path(),
        Col::new("change"),
        Col::new("strategy").drop(2),
        Col::new("closes/spawn").short("closes"),
        Col::new("window").drop(3),
        Col::new("leaked/spawn").short("leaked"),
        Col::new("why").text().drop(1),
    ]);
    for g in &d.groups {
        let (c1, c2) = g.key.columns();
        let (c1, c2) = (escape(&c1), escape(&c2));
        let paint = match g.change {
            Change::Worse => Some(Paint::Alarm),
            Change::Better => Some(Paint::Good),
            _ => None,
        };
        let strategy = side(g, |r| r.strategy.clone());
        let cl = side(g, closes);
        let window = side(g, |r| fmt_ns(r.window_median_ns as f64));
        let leaked = side(g, |r| {
            crate::output::round(r.leaked_fds_per_spawn, 3).to_string()
        });
        let why: Vec<&str> = g
            .regressions
            .iter()
            .chain(&g.improvements)
            .map(String::as_str)
            .collect();
        t.add_row([
            Cell::from(c1),
            c2.into(),
            Cell::painted(g.change.as_str(), paint),
            pair(strategy.0, strategy.1).into(),
            pair(cl.0, cl.1).into(),
            pair(window.0, window.1).into(),
            pair(leaked.0, leaked.1).into(),
            escape(&why.join("; ")).into(),
        ]);
    }
    t.render_for(term)
}

/// `new leak: /bin/sh fd 7 regular /etc/credentials (1 spawn)`.
pub fn leak_line(l: &LeakDiff) -> String {
    let (what, n) = match l.change {
        LeakChange::New => ("new leak", l.spawns_b),
        LeakChange::Fixed => ("fixed leak", l.spawns_a),
    };
    let target = match l.id.target.as_str() {
        "" => String::new(),
        t => format!(" {}", escape(t)),
    };
    format!(
        "{what}: {} fd {} {}{target} ({})",
        escape(&l.id.exec_path),
        l.id.fd,
        l.id.kind,
        count(n, "spawn", "spawns")
    )
}

fn totals(s: &DiffSummary) -> String {
    format!(
        "{}: {} worse, {} better, {} new, {} gone; {}, {} fixed",
        count(s.groups, "group", "groups"),
        s.worse,
        s.better,
        s.new_groups,
        s.gone_groups,
        count(s.new_leaks, "new leak", "new leaks"),
        s.fixed_leaks
    )
}

/// The verdict on a regression: what got worse (the first five), and the exit status.
pub fn verdict(d: &Diff, exit_code: u8) -> Option<String> {
    if !d.regressed() {
        return None;
    }
    let mut why: Vec<String> = Vec::new();
    for g in d.groups.iter().filter(|g| g.change == Change::Worse) {
        let name = match &g.key {
            Key::Trace {
                parent_comm,
                exec_path,
            } => format!("{parent_comm} {exec_path}"),
            Key::Bench {
                strategy,
                nofile,
                open_fds,
            } => format!("{strategy} at nofile {nofile}, {open_fds} open fds"),
            Key::Spawner { spawner, nofile } => format!("{spawner} at nofile {nofile}"),
        };
        why.push(format!("{name}: {}", g.regressions.join(", ")));
    }
    for l in d.leaks.iter().filter(|l| l.change == LeakChange::New) {
        why.push(leak_line(l));
    }
    let n = why.len();
    why.truncate(5);
    if n > 5 {
        why.push(format!("… and {} more", n - 5));
    }
    Some(format!(
        "regression (exit status {exit_code}): {}",
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::super::compare::{compare, Tolerances};

    /// A stream read as `diff` reads it by default (paths normalised).
    fn parse(text: &str) -> anyhow::Result<super::super::input::Side> {
        super::super::input::parse(text, false)
    }
    use super::*;

    fn fixture_diff() -> Diff {
        let a = parse(include_str!("../../../tests/fixtures/diff/before.jsonl")).unwrap();
        let b = parse(include_str!("../../../tests/fixtures/diff/after.jsonl")).unwrap();
        compare(
            &a,
            &b,
            Tolerances {
                closes_pct: 10.0,
                window_pct: None,
            },
        )
    }

    /// A `bench -- CMD` stream: the header and one user_cell at NOFILE 1024.
    fn user_bench(strategy: &str, closes: u64) -> String {
        let header = r#"{"type":"header","schema_version":2,"command":"bench"}"#;
        let cell = serde_json::json!({
            "type": "user_cell", "spawner": "python3 s.py", "nofile": 1024, "runs": 3,
            "failed_runs": 0, "spawns": 15, "window_median_ns": 900000,
            "window_p95_ns": 1000000, "strategy": strategy, "strategy_mixed": false,
            "strategy_counts": {strategy: 15}, "close_calls_per_spawn": closes,
            "close_range_calls_per_spawn": 0, "leaked_fds_per_spawn": 0, "leaked_fd_count": 0
        });
        format!("{header}\n{cell}\n")
    }

    #[test]
    fn user_cells_are_rows_by_command_line_and_nofile() {
        let a = parse(&user_bench("close-range", 0)).unwrap();
        let b = parse(&user_bench("close-loop", 1021)).unwrap();
        let tol = Tolerances {
            closes_pct: 10.0,
            window_pct: None,
        };
        let d = compare(&a, &b, tol);
        assert!(d.regressed());
        let t = table(&d, Kind::Bench, Term::plain());
        let head = t.lines().next().unwrap_or_default();
        assert!(head.trim_start().starts_with("spawner "), "{t}");
        let row = t
            .lines()
            .find(|l| l.contains("python3 s.py"))
            .expect("a row");
        assert!(row.contains("nofile 1024") && row.contains("worse"), "{t}");
        let v = verdict(&d, 3).expect("a verdict");
        assert!(v.contains("python3 s.py at nofile 1024"), "{v}");
    }

    #[test]
    fn the_table_shows_each_change_and_why() {
        let d = fixture_diff();
        let t = table(&d, Kind::Trace, Term::plain());
        let row = t.lines().find(|l| l.contains("/bin/true")).unwrap();
        assert!(
            row.contains("better")
                && row.contains("close-loop → close-range")
                && row.contains("19997 → 0")
                && row.contains("3.08 ms → 167 µs"),
            "{t}"
        );
        let gone = t.lines().find(|l| l.contains("/usr/bin/gone")).unwrap();
        assert!(gone.contains("gone") && gone.contains("none → -"), "{t}");
        assert_eq!(
            leak_line(&d.leaks[0]),
            "new leak: /bin/sh fd 7 regular /etc/credentials (1 spawn)"
        );
        assert_eq!(
            totals(&DiffSummary::of(&d, 3)),
            "4 groups: 1 worse, 1 better, 1 new, 1 gone; 1 new leak, 1 fixed"
        );
        assert_eq!(
            verdict(&d, 3).unwrap(),
            "regression (exit status 3): bash /bin/sh: leaked fds per spawn 0 → 1; new leak: /bin/sh fd 7 regular /etc/credentials (1 spawn)"
        );
    }

    #[test]
    fn records_are_tagged_and_the_summary_counts() {
        let d = fixture_diff();
        let g = serde_json::to_value(DiffRecord::DiffGroup(&d.groups[0])).unwrap();
        assert_eq!(g["type"], "diff_group");
        assert!(
            g["parent_comm"].is_string() && g["exec_path"].is_string(),
            "{g}"
        );
        let l = serde_json::to_value(DiffRecord::DiffLeak(&d.leaks[0])).unwrap();
        assert_eq!(
            (l["type"].as_str(), l["change"].as_str()),
            (Some("diff_leak"), Some("new"))
        );
        assert_eq!(
            (l["fd"].as_u64(), l["spawns_b"].as_u64()),
            (Some(7), Some(1))
        );
        let s = serde_json::to_value(DiffRecord::Summary(DiffSummary::of(&d, 3))).unwrap();
        assert_eq!(
            (s["exit_reason"].as_str(), s["new_leaks"].as_u64()),
            (Some("regression"), Some(1))
        );
    }
}
