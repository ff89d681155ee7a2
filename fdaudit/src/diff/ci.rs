//! What the CI reports (`--junit`, GitHub Actions) say of a diff: one gate, no regression,
//! failing with the verdict line; a case per group, failing with what got worse; a case
//! per leak only in one run, new ones failing.

use super::compare::{Change, Diff, GroupDiff, LeakChange};
use super::input::Row;
use super::render::{leak_line, verdict};
use crate::output::ci::{CiVerdict, GateCase, GroupCase};

/// The diff's verdicts for the CI reports.
pub fn verdict_of(d: &Diff, exit_code: u8) -> CiVerdict {
    let mut groups: Vec<GroupCase> = d.groups.iter().map(group).collect();
    for l in &d.leaks {
        let line = leak_line(l);
        groups.push(GroupCase {
            parent_comm: match l.change {
                LeakChange::New => "new leak".into(),
                LeakChange::Fixed => "fixed leak".into(),
            },
            exec_path: crate::output::escape(&format!(
                "{} fd {} {} {}",
                l.id.exec_path, l.id.fd, l.id.kind, l.id.target
            ))
            .trim_end()
            .to_string(),
            strategy: "-".into(),
            spawns: l.spawns_b.max(l.spawns_a),
            leaked_fds: l.spawns_b,
            close_max: 0,
            failures: if l.change == LeakChange::New {
                vec![line]
            } else {
                Vec::new()
            },
        });
    }
    CiVerdict {
        command: "diff",
        gates: vec![GateCase {
            name: "no regression".into(),
            failure: verdict(d, exit_code),
        }],
        groups,
        findings: Vec::new(),
        incomplete: None,
        exit_code,
        command_failed: false,
    }
}

fn group(g: &GroupDiff) -> GroupCase {
    let (parent, exec) = g.key.columns();
    let strategy = |r: &Option<Row>| r.as_ref().map_or("-".to_string(), |r| r.strategy.clone());
    let (sa, sb) = (strategy(&g.a), strategy(&g.b));
    let now = g.b.as_ref().or(g.a.as_ref());
    GroupCase {
        parent_comm: crate::output::escape(&parent),
        exec_path: crate::output::escape(&exec),
        strategy: if sa == sb {
            sb
        } else {
            format!("{sa} → {sb}")
        },
        spawns: now.map_or(0, |r| r.spawns),
        leaked_fds: now.map_or(0, |r| {
            (r.leaked_fds_per_spawn * r.spawns as f64).round() as u64
        }),
        close_max: now.and_then(|r| r.close_median).unwrap_or(0),
        failures: if g.change == Change::Worse {
            vec![g.regressions.join("; ")]
        } else {
            Vec::new()
        },
    }
}
