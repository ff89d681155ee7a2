//! The summary for people: the totals line, the group table and the read storms on the
//! records stream, and the warnings about data the kernel could not keep.

use super::super::reads;
use super::{strategy_paint, Group, Summary};
use crate::output::{
    color::Paint,
    count, fmt_ns, stream,
    table::{Cell, Col, Table, Term},
};

/// The summary table for people: in a narrow terminal the percentiles go first, paths
/// are shortened in the middle; a container column when any group ran in a container, the
/// transient column only when an exec chain had any.
pub fn summary_table(groups: &[Group], term: Term) -> String {
    let transient = groups.iter().any(|g| g.transient_fds > 0);
    let inherited = groups.iter().any(|g| g.leaked_inherited_fds > 0);
    let containers = groups.iter().any(|g| g.container.is_some());
    let runtimes = groups.iter().any(|g| g.runtime.is_some());
    let mut cols = Vec::new();
    if containers {
        cols.push(Col::new("container"));
    }
    cols.push(Col::new("parent"));
    if runtimes {
        cols.push(Col::new("runtime").drop(5));
    }
    cols.extend([
        Col::new("exec").path(),
        Col::new("spawns").drop(1),
        Col::new("close/spawn med").short("closes"),
        Col::new("max").drop(4),
        Col::new("window med").short("window"),
        Col::new("p95").drop(3),
        Col::new("strategy"),
        Col::new("leaked fds").short("leaked"),
    ]);
    if inherited {
        cols.push(Col::new("inherited fds").short("inherited").drop(2));
    }
    if transient {
        cols.push(Col::new("transient fds").short("transient").drop(2));
    }
    let mut t = Table::new(cols);
    for g in groups {
        let mut row = Vec::new();
        if containers {
            row.push(Cell::from(g.container.clone().unwrap_or_default()));
        }
        row.push(Cell::from(g.parent_comm.escaped()));
        if runtimes {
            let label = g.runtime.as_ref().map(|r| r.label()).unwrap_or_default();
            row.push(crate::output::text::escape(&label).into());
        }
        row.extend([
            g.exec_path.escaped().into(),
            g.spawns.to_string().into(),
            g.close_median.to_string().into(),
            g.close_max.to_string().into(),
            fmt_ns(g.window_median_ns as f64).into(),
            fmt_ns(g.window_p95_ns as f64).into(),
            Cell::painted(g.strategy.as_str(), strategy_paint(&g.strategy)),
            Cell::painted(
                g.leaked_fds.to_string(),
                (g.leaked_fds > 0).then_some(Paint::Alarm),
            ),
        ]);
        if inherited {
            row.push(g.leaked_inherited_fds.to_string().into());
        }
        if transient {
            row.push(Cell::painted(
                g.transient_fds.to_string(),
                (g.transient_fds > 0).then_some(Paint::Warn),
            ));
        }
        t.add_row(row);
    }
    t.render_for(term)
}

/// The totals line, the group table and the read storms, for people. `filtered`: the
/// filters in command-line form and the exec records they left out.
pub(super) fn summary_text(
    out: &mut impl std::io::Write,
    summary: &Summary,
    filtered: Option<(String, u64)>,
    term: Term,
) -> std::io::Result<()> {
    writeln!(out)?;
    let t = &summary.totals;
    let with_leaks = format!("{} with leaked fds", t.spawns_with_leaks);
    let with_leaks = if t.spawns_with_leaks > 0 {
        term.paint(&with_leaks, Paint::Alarm)
    } else {
        with_leaks
    };
    let headline = format!(
        "{} {}, {with_leaks} ({}); {} close(), {} close_range()",
        count(summary.spawns, "spawn", "spawns"),
        if filtered.is_some() {
            "shown"
        } else {
            "traced"
        },
        if t.critical_leaked_fds > 0 {
            format!(
                "{}, {}",
                count(t.leaked_fds, "fd", "fds"),
                term.paint(&format!("{} CRITICAL", t.critical_leaked_fds), Paint::Alarm)
            )
        } else {
            count(t.leaked_fds, "fd", "fds")
        },
        t.calls.close_calls,
        t.calls.close_range_calls
    );
    writeln!(out, "{}", term.fill(&headline, 0))?;
    if let Some((filters, hidden)) = filtered {
        let note = format!(
            "(filters {filters}: {} traced but not shown; the kernel followed the whole tree)",
            count(hidden, "exec record", "exec records")
        );
        writeln!(out, "{}", term.fill(&note, 0))?;
    }
    if t.leaked_inherited_fds > 0 {
        let note = format!(
            "({} the traced command itself inherited from fdaudit's caller reached spawns too; \
             not counted as leaks, --no-baseline counts them)",
            count(t.leaked_inherited_fds, "more fd", "more fds")
        );
        writeln!(out, "{}", term.fill(&note, 0))?;
    }
    if t.transient_leaked_fds > 0 {
        let note = format!(
            "({} crossed into images that exec'd again, e.g. a spawn helper; not counted as leaks)",
            count(t.transient_leaked_fds, "more fd", "more fds")
        );
        writeln!(out, "{}", term.fill(&note, 0))?;
    }
    if !summary.groups.is_empty() {
        writeln!(out, "{}", summary_table(&summary.groups, term))?;
    }
    if !summary.read_storms.is_empty() {
        writeln!(out, "\nbyte-at-a-time reads:")?;
        writeln!(out, "{}", reads::storm_table(&summary.read_storms, term))?;
    }
    for note in summary.warnings() {
        let warning = term.paint(&format!("WARNING: {note}"), Paint::Alarm);
        writeln!(out, "{}", term.fill(&warning, 0))?;
    }
    Ok(())
}

/// Warnings about data the kernel side could not keep, on stderr.
pub(super) fn summary_warnings(summary: &Summary) {
    let warn = |m: String| stream::note(stream::Level::Warning, &m);
    let loud = summary.warnings();
    for note in loud {
        // Said everywhere someone looks: a warning record in the JSON stream (a line on
        // stderr for people), and on stderr as well when the records go elsewhere.
        warn(note.clone());
        if stream::is_json() && !stream::is_stderr() {
            crate::diag!("warning: {}", crate::output::text::escape(note));
        }
    }
    if summary.read_table_full > 0 {
        warn(format!(
            "{} reads were not counted: the per-(process, fd) table ({} entries) was full",
            summary.read_table_full,
            fdaudit_common::MAX_READS
        ));
    }
    if summary.untracked_forks > 0 {
        warn(format!(
            "{} forks were not traced (traced-process table full)",
            summary.untracked_forks
        ));
    }
    for p in summary.partial.iter().skip(loud.len()) {
        warn(format!("partial data: {p}"));
    }
}
