//! What changed between two runs, and whether it is a regression: per key a worse
//! strategy, more closes per spawn (beyond a tolerance), more leaked fds per spawn, a longer
//! window (only with a tolerance); and leaks that are new.

use serde::Serialize;

use super::input::{rank, Key, Kind, LeakId, Row, Side};

/// How strict the comparison is.
#[derive(Debug, Clone, Copy)]
pub struct Tolerances {
    /// Percent by which closes per spawn may grow.
    pub closes_pct: f64,
    /// Percent by which the window may grow; `None`: windows are shown, not judged.
    pub window_pct: Option<f64>,
}

/// How a key fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Same,
    Better,
    Worse,
    /// Only in the later run.
    New,
    /// Only in the earlier run.
    Gone,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Same => "same",
            Change::Better => "better",
            Change::Worse => "worse",
            Change::New => "new",
            Change::Gone => "gone",
        }
    }
}

/// One key's comparison: a `diff_group` record.
#[derive(Debug, Clone, Serialize)]
pub struct GroupDiff {
    #[serde(flatten)]
    pub key: Key,
    pub change: Change,
    /// The earlier run's numbers (null when the key is new).
    pub a: Option<Row>,
    /// The later run's (null when gone).
    pub b: Option<Row>,
    /// What got worse, one phrase each (`strategy close-range → close-loop`).
    pub regressions: Vec<String>,
    /// What got better.
    pub improvements: Vec<String>,
}

/// Whether a leak is new or fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakChange {
    New,
    Fixed,
}

/// A leak in one run only: a `diff_leak` record.
#[derive(Debug, Clone, Serialize)]
pub struct LeakDiff {
    pub change: LeakChange,
    #[serde(flatten)]
    pub id: LeakId,
    /// Spawns that leaked it in the earlier and the later run.
    pub spawns_a: u64,
    pub spawns_b: u64,
}

/// The whole comparison.
#[derive(Debug, Clone)]
pub struct Diff {
    pub groups: Vec<GroupDiff>,
    pub leaks: Vec<LeakDiff>,
}

impl Diff {
    /// Whether anything got worse: a worse key or a new leak.
    pub fn regressed(&self) -> bool {
        self.groups.iter().any(|g| g.change == Change::Worse)
            || self.leaks.iter().any(|l| l.change == LeakChange::New)
    }

    pub fn count(&self, c: Change) -> u64 {
        self.groups.iter().filter(|g| g.change == c).count() as u64
    }

    pub fn leak_count(&self, c: LeakChange) -> u64 {
        self.leaks.iter().filter(|l| l.change == c).count() as u64
    }
}

/// Compares run `a` (earlier) with run `b` (later).
pub fn compare(a: &Side, b: &Side, tol: Tolerances) -> Diff {
    let mut keys: Vec<&Key> = a.rows.keys().chain(b.rows.keys()).collect();
    keys.sort();
    keys.dedup();
    let groups = keys
        .into_iter()
        .map(|k| {
            let (ra, rb) = (a.rows.get(k), b.rows.get(k));
            let (regressions, improvements) = match (ra, rb) {
                (Some(x), Some(y)) => judge(x, y, tol),
                (Some(x), None) if b.kind == Kind::Bench && x.spawns > 0 => (
                    vec![format!("not measured ({} spawns → none)", x.spawns)],
                    Vec::new(),
                ),
                _ => (Vec::new(), Vec::new()),
            };
            let change = match (ra, rb) {
                (None, _) => Change::New,
                (_, None) if regressions.is_empty() => Change::Gone,
                _ if !regressions.is_empty() => Change::Worse,
                _ if !improvements.is_empty() => Change::Better,
                _ => Change::Same,
            };
            GroupDiff {
                key: k.clone(),
                change,
                a: ra.cloned(),
                b: rb.cloned(),
                regressions,
                improvements,
            }
        })
        .collect();
    let mut leaks = Vec::new();
    for (id, &n) in &b.leaks {
        if !a.leaks.contains_key(id) {
            leaks.push(leak(LeakChange::New, id, 0, n));
        }
    }
    for (id, &n) in &a.leaks {
        if !b.leaks.contains_key(id) {
            leaks.push(leak(LeakChange::Fixed, id, n, 0));
        }
    }
    Diff { groups, leaks }
}

fn leak(change: LeakChange, id: &LeakId, spawns_a: u64, spawns_b: u64) -> LeakDiff {
    LeakDiff {
        change,
        id: id.clone(),
        spawns_a,
        spawns_b,
    }
}

/// Whether `b` grew beyond `a` by more than `pct` percent of `a` (any growth from 0).
fn grew(a: f64, b: f64, pct: f64) -> bool {
    b > a && b - a > a * pct / 100.0
}

/// What got worse and what better from `a` to `b`.
fn judge(a: &Row, b: &Row, tol: Tolerances) -> (Vec<String>, Vec<String>) {
    let (mut worse, mut better) = (Vec::new(), Vec::new());
    // Nothing measured where there was something: no other rule can see a regression
    // in a row with no spawns (its strategy is `-` and its closes unknown).
    if a.spawns > 0 && b.spawns == 0 {
        worse.push(format!("spawns {} → 0", a.spawns));
        return (worse, better);
    }
    if let (Some(ra), Some(rb)) = (rank(&a.strategy), rank(&b.strategy)) {
        let said = format!("strategy {} → {}", a.strategy, b.strategy);
        match rb.cmp(&ra) {
            std::cmp::Ordering::Greater => worse.push(said),
            std::cmp::Ordering::Less => better.push(said),
            std::cmp::Ordering::Equal => {}
        }
    }
    if let (Some(ca), Some(cb)) = (a.close_median, b.close_median) {
        let said = format!("closes per spawn {ca} → {cb}");
        if grew(ca as f64, cb as f64, tol.closes_pct) {
            worse.push(said);
        } else if grew(cb as f64, ca as f64, tol.closes_pct) {
            better.push(said);
        }
    }
    let (la, lb) = (a.leaked_fds_per_spawn, b.leaked_fds_per_spawn);
    let said = format!(
        "leaked fds per spawn {} → {}",
        crate::output::round(la, 3),
        crate::output::round(lb, 3)
    );
    if lb > la {
        worse.push(said);
    } else if lb < la {
        better.push(said);
    }
    if let Some(pct) = tol.window_pct {
        let (wa, wb) = (a.window_median_ns as f64, b.window_median_ns as f64);
        let said = format!(
            "window {} → {}",
            crate::output::fmt_ns(wa),
            crate::output::fmt_ns(wb)
        );
        if grew(wa, wb, pct) {
            worse.push(said);
        } else if grew(wb, wa, pct) {
            better.push(said);
        }
    }
    (worse, better)
}

#[cfg(test)]
mod tests {

    /// A stream read as `diff` reads it by default (paths normalised).
    fn parse(text: &str) -> anyhow::Result<super::super::input::Side> {
        super::super::input::parse(text, false)
    }
    use super::*;

    const BEFORE: &str = include_str!("../../../tests/fixtures/diff/before.jsonl");
    const AFTER: &str = include_str!("../../../tests/fixtures/diff/after.jsonl");
    const BENCH_A: &str = include_str!("../../../tests/fixtures/diff/bench-a.jsonl");
    const BENCH_B: &str = include_str!("../../../tests/fixtures/diff/bench-b.jsonl");

    const TOL: Tolerances = Tolerances {
        closes_pct: 10.0,
        window_pct: None,
    };

    fn group<'a>(d: &'a Diff, exec: &str) -> &'a GroupDiff {
        d.groups
            .iter()
            .find(|g| matches!(&g.key, Key::Trace { exec_path, .. } if exec_path == exec))
            .unwrap_or_else(|| panic!("no {exec} in {:?}", d.groups))
    }

    #[test]
    fn the_fix_is_better_and_the_new_leak_a_regression() {
        let (a, b) = (parse(BEFORE).unwrap(), parse(AFTER).unwrap());
        let d = compare(&a, &b, TOL);
        // /bin/true had a close loop and a leaking row; now close_range for both.
        let t = group(&d, "/bin/true");
        assert_eq!(t.change, Change::Better, "{t:?}");
        let (ra, rb) = (t.a.as_ref().unwrap(), t.b.as_ref().unwrap());
        assert_eq!(
            (ra.strategy.as_str(), rb.strategy.as_str()),
            ("close-loop", "close-range")
        );
        assert_eq!(ra.strategies, ["close-loop", "none"]);
        assert_eq!((ra.close_median, rb.close_median), (Some(19_997), Some(0)));
        assert_eq!(ra.spawns, 3);
        assert_eq!(
            t.improvements,
            [
                "strategy close-loop → close-range",
                "closes per spawn 19997 → 0",
                "leaked fds per spawn 0.667 → 0"
            ]
        );
        // /bin/sh began to leak its credentials file.
        let sh = group(&d, "/bin/sh");
        assert_eq!(sh.change, Change::Worse);
        assert_eq!(sh.regressions, ["leaked fds per spawn 0 → 1"]);
        let new: Vec<_> = d
            .leaks
            .iter()
            .filter(|l| l.change == LeakChange::New)
            .collect();
        assert_eq!(new.len(), 1, "{:?}", d.leaks);
        assert_eq!((new[0].id.fd, new[0].id.kind.as_str()), (7, "regular"));
        assert_eq!(new[0].id.target, "/etc/credentials");
        // The socket leak of /bin/true is fixed; its inode number does not matter.
        let fixed: Vec<_> = d
            .leaks
            .iter()
            .filter(|l| l.change == LeakChange::Fixed)
            .collect();
        assert_eq!(fixed.len(), 1, "{:?}", d.leaks);
        assert_eq!(fixed[0].id.target, "inet tcp");
        assert_eq!(fixed[0].spawns_a, 2);
        assert_eq!(
            (
                group(&d, "/usr/bin/gone").change,
                group(&d, "/usr/bin/new").change
            ),
            (Change::Gone, Change::New)
        );
        assert!(d.regressed());
    }

    #[test]
    fn reversed_the_fix_is_a_regression_and_the_same_run_is_not() {
        let (a, b) = (parse(BEFORE).unwrap(), parse(AFTER).unwrap());
        let d = compare(&b, &a, TOL);
        let t = group(&d, "/bin/true");
        assert_eq!(t.change, Change::Worse);
        assert_eq!(t.regressions[0], "strategy close-range → close-loop");
        let same = compare(&a, &a, TOL);
        assert!(!same.regressed() && same.leaks.is_empty());
        assert!(same.groups.iter().all(|g| g.change == Change::Same));
    }

    #[test]
    fn a_leaks_only_trace_has_no_closes_to_compare() {
        let a = parse(BEFORE).unwrap();
        // Schema 1's name and schema 2's.
        for field in ["leaks_only", "no_syscalls"] {
            let b = parse(&AFTER.replace(
                "\"type\": \"summary\"",
                &format!("\"type\": \"summary\", \"{field}\": true"),
            ))
            .unwrap();
            let rb = &b.rows.values().next().unwrap();
            assert_eq!(rb.close_median, None, "{field}");
            let d = compare(&a, &b, TOL);
            let t = group(&d, "/bin/true");
            assert!(
                t.improvements.iter().all(|i| !i.starts_with("closes")),
                "{t:?}"
            );
        }
    }

    #[test]
    fn closes_and_windows_are_judged_with_their_tolerance() {
        let row = |closes, window| Row {
            spawns: 1,
            strategy: "close-loop".into(),
            strategies: vec!["close-loop".into()],
            close_median: Some(closes),
            window_median_ns: window,
            leaked_fds_per_spawn: 0.0,
        };
        assert!(
            judge(&row(1000, 1), &row(1100, 1), TOL).0.is_empty(),
            "10 % is within"
        );
        assert_eq!(
            judge(&row(1000, 1), &row(1101, 1), TOL).0,
            ["closes per spawn 1000 → 1101"]
        );
        assert_eq!(
            judge(&row(0, 1), &row(2, 1), TOL).0.len(),
            1,
            "any growth from 0"
        );
        assert!(
            judge(&row(5, 1000), &row(5, 5000), TOL).0.is_empty(),
            "windows not judged"
        );
        let tol = Tolerances {
            window_pct: Some(50.0),
            ..TOL
        };
        assert_eq!(
            judge(&row(5, 1000), &row(5, 1600), tol).0,
            ["window 1.00 µs → 1.60 µs"]
        );
        assert_eq!(judge(&row(5, 1600), &row(5, 1000), tol).1.len(), 1);
    }

    #[test]
    fn bench_cells_are_compared_by_strategy_limit_and_open_fds() {
        let (a, b) = (parse(BENCH_A).unwrap(), parse(BENCH_B).unwrap());
        let d = compare(&a, &b, TOL);
        assert_eq!(d.groups.len(), 2);
        let lp = &d.groups[0];
        assert!(
            matches!(&lp.key, Key::Bench { strategy, nofile: 1024, open_fds: 3 } if strategy == "close-loop")
        );
        assert_eq!(lp.change, Change::Worse);
        assert_eq!(lp.regressions, ["closes per spawn 1021 → 2045"]);
        assert_eq!(d.groups[1].change, Change::Same);
        assert!(d.regressed());
    }

    #[test]
    fn a_bench_row_measured_before_and_not_after_is_a_regression() {
        let row = |spawns: u64, strategy: &str| Row {
            spawns,
            strategy: strategy.into(),
            strategies: vec![strategy.into()],
            close_median: (spawns > 0).then_some(0),
            window_median_ns: 1000,
            leaked_fds_per_spawn: 0.0,
        };
        let key = |nofile| Key::Spawner {
            spawner: "./storm 20".into(),
            nofile,
        };
        let side = |rows: Vec<(Key, Row)>| Side {
            kind: Kind::Bench,
            rows: rows.into_iter().collect(),
            leaks: Default::default(),
            origins: Default::default(),
        };
        let a = side(vec![
            (key(1024), row(60, "close-range")),
            (key(4096), row(60, "close-range")),
            (key(20000), row(60, "close-range")),
        ]);
        let b = side(vec![
            (key(1024), row(60, "close-range")),
            (key(4096), row(0, "-")),
        ]);
        let d = compare(&a, &b, TOL);
        let changes: Vec<(Change, &[String])> = d
            .groups
            .iter()
            .map(|g| (g.change, g.regressions.as_slice()))
            .collect();
        assert_eq!(
            changes,
            [
                (Change::Same, &[][..]),
                (Change::Worse, &["spawns 60 → 0".to_string()][..]),
                (
                    Change::Worse,
                    &["not measured (60 spawns → none)".to_string()][..]
                ),
            ]
        );
        assert!(d.regressed());
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let e = |t: &str| format!("{:#}", parse(t).unwrap_err());
        assert!(!e("x").contains('\n'));
        assert!(
            e("not json\n").contains("line 1 is not a JSON object"),
            "{}",
            e("not json")
        );
        assert!(e("{\"type\":\"note\"}\n").contains("first line is not a header"));
        let scan = "{\"type\":\"header\",\"command\":\"scan\"}\n";
        assert!(e(scan).contains("written by `fdaudit scan`"), "{}", e(scan));
        let future = "{\"type\":\"header\",\"schema_version\":3,\"command\":\"trace\"}\n";
        assert!(
            e(future).contains("schema version 3, and this fdaudit reads 1 to 2: use a newer"),
            "{}",
            e(future)
        );
        let unfinished = BEFORE.lines().next().unwrap();
        assert!(
            e(unfinished).contains("no summary record"),
            "{}",
            e(unfinished)
        );
    }
}
