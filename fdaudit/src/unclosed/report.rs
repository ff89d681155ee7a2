//! One `unclosed` report: text for people (comfy-table through [`crate::output::table`]) or
//! JSON records (`unclosed_report`, `unclosed_stack`, `unclosed_process`,
//! `unclosed_emfile`: docs/json.md).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::{
    model::{age, Group, ProcSummary},
    rates::{per_min, Projection},
};
use crate::{
    engine::origin::Frame,
    output::{
        count, stream,
        table::{Col, Table},
        text::escape,
    },
    trace::report::json::FrameJson,
};

/// Frames shown per stack in text.
const TEXT_FRAMES: usize = 8;

/// A group ready to print: its frames and sample targets.
pub struct Shown {
    pub group: Group,
    pub frames: Vec<Frame>,
    pub targets: Vec<String>,
    /// Its fds seen opened and closed since the start.
    pub opened_closed: (u64, u64),
}

/// An EMFILE/ENFILE moment ready to print.
pub struct Emfile {
    pub pid: u32,
    pub comm: String,
    pub syscall: &'static str,
    pub errno: &'static str,
    pub count: u64,
    pub age_ns: u64,
    pub frames: Vec<Frame>,
    /// The stack holding most of the process's fds then, and how many.
    pub top_stack_id: Option<i32>,
    pub top_count: u64,
}

/// What one report says.
pub struct Report<'a> {
    pub why: &'static str,
    pub now_ns: u64,
    pub shown: &'a [Shown],
    pub stacks: usize,
    pub outstanding: u64,
    pub procs: &'a [ProcSummary],
    /// One per process, as `procs`.
    pub projections: &'a [Projection],
    /// Since the start.
    pub secs: f64,
    pub emfile: &'a [Emfile],
    pub batched: bool,
}

#[derive(Serialize)]
struct ReportRecord {
    #[serde(rename = "type")]
    kind: &'static str,
    why: &'static str,
    outstanding: u64,
    stacks: usize,
    processes: usize,
    read_by: &'static str,
}

#[derive(Serialize)]
struct StackRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    rank: usize,
    stack_id: i32,
    count: u64,
    by_syscall: &'a BTreeMap<&'static str, u64>,
    samples: &'a [String],
    oldest_age_ns: u64,
    pids: Vec<u32>,
    stack: Vec<FrameJson<'a>>,
    opened: u64,
    closed: u64,
    #[serde(serialize_with = "crate::output::round3")]
    opened_per_min: f64,
    #[serde(serialize_with = "crate::output::round3")]
    closed_per_min: f64,
}

#[derive(Serialize)]
struct ProcessRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    pid: u32,
    comm: &'a str,
    exited: bool,
    open: u64,
    outstanding: u64,
    before_tracing: u64,
    not_seen: u64,
    nofile_soft: Option<u64>,
    headroom: Option<i64>,
    #[serde(serialize_with = "crate::output::round3_opt")]
    growth_per_min: Option<f64>,
    #[serde(serialize_with = "crate::output::round3_opt")]
    fit_r2: Option<f64>,
    fit_points: usize,
    limit_projection: &'static str,
    #[serde(serialize_with = "crate::output::round3_opt")]
    limit_in_secs: Option<f64>,
}

#[derive(Serialize)]
struct EmfileRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    pid: u32,
    comm: &'a str,
    syscall: &'static str,
    errno: &'static str,
    count: u64,
    age_ns: u64,
    stack: Vec<FrameJson<'a>>,
    top_stack_id: Option<i32>,
    top_count: u64,
}

impl Report<'_> {
    pub fn write(&self) -> Result<()> {
        if stream::is_json() {
            self.json()
        } else {
            stream::text(&self.text())
        }
    }

    fn json(&self) -> Result<()> {
        stream::record(&ReportRecord {
            kind: "unclosed_report",
            why: self.why,
            outstanding: self.outstanding,
            stacks: self.stacks,
            processes: self.procs.len(),
            read_by: if self.batched { "batch" } else { "walk" },
        })?;
        for (i, s) in self.shown.iter().enumerate() {
            stream::record(&StackRecord {
                kind: "unclosed_stack",
                rank: i + 1,
                stack_id: s.group.stack_id,
                count: s.group.count,
                by_syscall: &s.group.calls,
                samples: &s.targets,
                oldest_age_ns: self.now_ns.saturating_sub(s.group.oldest_ns),
                pids: s.group.pids.iter().copied().collect(),
                stack: s.frames.iter().map(FrameJson::new).collect(),
                opened: s.opened_closed.0,
                closed: s.opened_closed.1,
                opened_per_min: per_min(s.opened_closed.0, self.secs),
                closed_per_min: per_min(s.opened_closed.1, self.secs),
            })?;
        }
        for (p, proj) in self.procs.iter().zip(self.projections) {
            let fit = proj.fit();
            stream::record(&ProcessRecord {
                kind: "unclosed_process",
                pid: p.pid,
                comm: &p.comm,
                exited: p.exited,
                open: p.open,
                outstanding: p.outstanding,
                before_tracing: p.before_tracing,
                not_seen: p.not_seen,
                nofile_soft: p.nofile_soft,
                headroom: p.headroom(),
                growth_per_min: fit.map(|f| f.slope * 60.0),
                fit_r2: fit.map(|f| f.r2),
                fit_points: fit.map_or(0, |f| f.points),
                limit_projection: proj.word(),
                limit_in_secs: match proj {
                    Projection::Limit(s, _) => Some(*s),
                    _ => None,
                },
            })?;
        }
        for e in self.emfile {
            stream::record(&EmfileRecord {
                kind: "unclosed_emfile",
                pid: e.pid,
                comm: &e.comm,
                syscall: e.syscall,
                errno: e.errno,
                count: e.count,
                age_ns: e.age_ns,
                stack: e.frames.iter().map(FrameJson::new).collect(),
                top_stack_id: e.top_stack_id,
                top_count: e.top_count,
            })?;
        }
        Ok(())
    }

    fn text(&self) -> String {
        let mut out = format!(
            "unclosed ({}): {} outstanding from {} in {}\n",
            self.why,
            count(self.outstanding, "fd", "fds"),
            count(self.stacks as u64, "stack", "stacks"),
            count(self.procs.len() as u64, "process", "processes"),
        );
        for (i, s) in self.shown.iter().enumerate() {
            let calls: Vec<String> = s
                .group
                .calls
                .iter()
                .map(|(c, n)| format!("{c} x{n}"))
                .collect();
            out += &format!(
                "\n#{} {} fds ({}), oldest {}; opened {:.1}/min, closed {:.1}/min\n",
                i + 1,
                s.group.count,
                calls.join(", "),
                age(self.now_ns.saturating_sub(s.group.oldest_ns)),
                per_min(s.opened_closed.0, self.secs),
                per_min(s.opened_closed.1, self.secs),
            );
            if !s.targets.is_empty() {
                out += &format!("    e.g. {}\n", escape(&s.targets.join(", ")));
            }
            for f in s.frames.iter().take(TEXT_FRAMES) {
                out += &format!("    {}\n", frame_line(f));
            }
            if s.frames.is_empty() {
                out += "    (no user stack)\n";
            }
        }
        for e in self.emfile {
            out += &format!(
                "\n{} ({}): {} failed with {} {} times, first {} ago; the stack holding most fds then: {}\n",
                e.pid,
                escape(&e.comm),
                e.syscall,
                e.errno,
                e.count,
                age(e.age_ns),
                e.top_stack_id
                    .map_or("none".into(), |id| format!("stack {id} ({} fds)", e.top_count)),
            );
            for f in e.frames.iter().take(TEXT_FRAMES) {
                out += &format!("    {}\n", frame_line(f));
            }
        }
        // Each report ends its last line: the next report (--interval) starts on its own.
        let mut out = out + "\n" + &self.procs_table();
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }

    fn procs_table(&self) -> String {
        let mut t = Table::new([
            Col::new("PID"),
            Col::new("COMM").text(),
            Col::new("OPEN"),
            Col::new("OUTSTANDING"),
            Col::new("BEFORE TRACING"),
            Col::new("NOT SEEN"),
            Col::new("NOFILE"),
            Col::new("HEADROOM"),
            Col::new("LIMIT IN").text(),
        ]);
        for (p, proj) in self.procs.iter().zip(self.projections) {
            let dash = || "-".to_string();
            t.add_row([
                p.pid.to_string(),
                if p.exited {
                    format!("{} (exited)", escape(&p.comm))
                        .trim_start()
                        .to_owned()
                } else {
                    escape(&p.comm)
                },
                p.open.to_string(),
                p.outstanding.to_string(),
                p.before_tracing.to_string(),
                p.not_seen.to_string(),
                p.nofile_soft.map_or_else(dash, |n| n.to_string()),
                p.headroom().map_or_else(dash, |n| n.to_string()),
                if p.exited { dash() } else { proj.text() },
            ]);
        }
        t.render_for(stream::term())
    }
}

fn frame_line(f: &Frame) -> String {
    let name = match (&f.symbol, &f.unnamed) {
        (Some(s), _) => s.clone(),
        (None, Some(why)) if f.addr == 0 => format!("[unknown] ({why})"),
        (None, Some(why)) => format!("{:#x} (unnamed: {why})", f.addr),
        (None, None) => format!("{:#x}", f.addr),
    };
    let at = match (&f.file, f.line) {
        (Some(file), Some(line)) => format!(" ({file}:{line})"),
        _ => String::new(),
    };
    let module = f
        .module
        .as_deref()
        .map(|m| format!(" in {}", m.rsplit('/').next().unwrap_or(m)))
        .unwrap_or_default();
    escape(&format!("{name}{at}{module}"))
}

/// Flame-graph folded stacks (Brendan Gregg's `stackcollapse` format): one line per
/// creating stack, outermost frame first, `;`-separated, then the outstanding fds.
pub fn folded(stacks: &[(Vec<Frame>, u64)]) -> String {
    let mut out = String::new();
    for (frames, n) in stacks {
        let names: Vec<String> = frames
            .iter()
            .rev()
            .map(|f| {
                let name = match &f.symbol {
                    Some(s) => s.clone(),
                    None if f.addr == 0 => "[unknown]".to_string(),
                    None => format!("{:#x}", f.addr),
                };
                // The format's separators, and control characters, never reach a line.
                name.replace([';', ' '], "_")
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect()
            })
            .collect();
        let line = if names.is_empty() {
            "[no user stack]".to_owned()
        } else {
            names.join(";")
        };
        out += &format!("{line} {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_fdaudit_does_not_know_is_said_so_in_the_text_and_the_folded_stacks() {
        let wrapper = Frame {
            addr: 0x7f00_0000_1000,
            symbol: Some("__open+0x51".into()),
            ..Frame::default()
        };
        let unknown = Frame {
            unnamed: Some("caller not known".into()),
            ..Frame::default()
        };
        assert_eq!(frame_line(&unknown), "[unknown] (caller not known)");
        assert_eq!(
            folded(&[(vec![wrapper, unknown], 3)]),
            "[unknown];__open+0x51 3\n"
        );
        let jit = Frame {
            addr: 0x1234,
            unnamed: Some("no perf map".into()),
            ..Frame::default()
        };
        assert_eq!(frame_line(&jit), "0x1234 (unnamed: no perf map)");
    }
}
