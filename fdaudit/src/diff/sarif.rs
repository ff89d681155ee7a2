//! `diff --sarif FILE`: the leaks of the two runs as SARIF results
//! ([`crate::output::sarif`]), each with its `baselineState`: `new` (only in the later
//! run), `unchanged` (in both), `absent` (only in the earlier run: fixed). The identity is
//! the leak's normalised key, as `trace --sarif` builds it, so the fingerprints match the
//! traces'. The location is the origin recorded by `trace --origin` (`--sarif` turns it
//! on), from the run the leak is in (the later one when both).

use super::input::{LeakId, LeakOrigin, Side};
use crate::output::sarif::{leak_identity, Baseline, Finding, Level, Rule};

/// The findings of a comparison of two traces.
pub fn findings(a: &Side, b: &Side) -> Vec<Finding> {
    let later = b.leaks.keys().map(|id| {
        let state = if a.leaks.contains_key(id) {
            Baseline::Unchanged
        } else {
            Baseline::New
        };
        finding(id, b.origins.get(id), b.leaks[id], state)
    });
    let gone = (a.leaks.keys())
        .filter(|id| !b.leaks.contains_key(id))
        .map(|id| finding(id, a.origins.get(id), a.leaks[id], Baseline::Absent));
    later.chain(gone).collect()
}

fn finding(id: &LeakId, o: Option<&LeakOrigin>, spawns: u64, state: Baseline) -> Finding {
    let o = o.cloned().unwrap_or_default();
    let rule = if o.critical {
        Rule::LeakAcrossBoundary
    } else {
        Rule::LeakedFd
    };
    let how = o
        .syscall
        .as_deref()
        .map_or(String::new(), |s| format!("; made inheritable by {s}"));
    let state_words = match state {
        Baseline::New => "new: not in the earlier run",
        Baseline::Unchanged => "in both runs",
        Baseline::Absent => "fixed: only in the earlier run",
    };
    let exec = if o.exec_path.is_empty() {
        id.exec_path.clone()
    } else {
        o.exec_path.clone()
    };
    Finding {
        rule,
        level: match state {
            Baseline::New => Level::Error,
            Baseline::Unchanged => Level::Warning,
            Baseline::Absent => Level::Note,
        },
        message: crate::output::escape(&format!(
            "fd {} ({} {}) leaked into {} in {} ({state_words}){how}",
            id.fd,
            id.kind,
            id.target,
            id.exec_path,
            crate::output::count(spawns, "spawn", "spawns"),
        )),
        identity: leak_identity(&id.exec_path, id.fd, &id.kind, &id.target),
        frames: o.frames,
        modules: o.modules,
        executable: Some(exec),
        baseline: Some(state),
    }
}
