//! What the CI reports (`--junit`, GitHub Actions annotations and step summary) say of a
//! trace, built from the gates and the summary's groups: [`CiVerdict`].

use super::gates::{Gate, Gates};
use super::{Ending, ExitReason, Group};
pub use crate::output::ci::{CiVerdict, GateCase, GroupCase};

/// Builds the verdicts from the gates (`lines`: [`Gates::verdicts`]'s lines, the incomplete
/// one first when `incomplete`) and the summary's groups.
pub fn verdict(
    gates: &Gates,
    mut lines: Vec<String>,
    incomplete: bool,
    groups: &[Group],
    ending: &Ending,
) -> CiVerdict {
    let incomplete = (incomplete && !lines.is_empty()).then(|| lines.remove(0));
    let set = gates.set();
    let line_of = |name: &str| {
        let prefix = format!("{name}: ");
        lines.iter().find(|l| l.starts_with(&prefix)).cloned()
    };
    let gate_cases: Vec<(Gate, GateCase)> = set
        .iter()
        .map(|(g, name)| {
            let case = GateCase {
                name: name.clone(),
                failure: line_of(name),
            };
            (*g, case)
        })
        .collect();
    let groups = groups
        .iter()
        .map(|grp| {
            // A chain's group is `first → last`: the gates judged its last image.
            let last = last_image(&grp.exec_path);
            let failures = gate_cases
                .iter()
                .filter(|(g, c)| {
                    c.failure.is_some()
                        && gates.hit(*g, last, &grp.strategy)
                        && (*g != Gate::Leak || grp.leaked_fds > 0)
                })
                .filter_map(|(_, c)| c.failure.clone())
                .collect();
            GroupCase {
                parent_comm: grp.parent_comm.escaped(),
                exec_path: grp.exec_path.escaped(),
                strategy: grp.strategy.clone(),
                spawns: grp.spawns,
                leaked_fds: grp.leaked_fds,
                close_max: grp.close_max,
                failures,
            }
        })
        .collect();
    CiVerdict {
        command: "trace",
        gates: gate_cases.into_iter().map(|(_, c)| c).collect(),
        groups,
        findings: Vec::new(),
        incomplete,
        exit_code: ending.exit_code,
        command_failed: ending.exit_reason == ExitReason::Command && ending.exit_code != 0,
    }
}

/// The last image of a group's exec path (`first → … → last`).
fn last_image(path: &[u8]) -> &[u8] {
    const ARROW: &[u8] = " → ".as_bytes();
    path.windows(ARROW.len())
        .rposition(|w| w == ARROW)
        .map_or(path, |i| &path[i + ARROW.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chains_last_image_is_what_the_gates_judged() {
        assert_eq!(last_image(b"/bin/sh \xe2\x86\x92 /bin/true"), b"/bin/true");
        assert_eq!(last_image(b"/bin/true"), b"/bin/true");
    }
}
