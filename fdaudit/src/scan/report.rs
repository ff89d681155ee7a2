//! Rendering of scan results: JSON records, the per-process fd listing, the process and
//! findings tables, and the closing notes (stderr, or `note` records in JSON).

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use super::{
    alike, findings, fold, FdRecord, Finding, Outcome, ProcReport, ScanTotals, Severity, SortKey,
};
use crate::output::{
    color::Paint,
    count, escape, escape_bytes, json_line,
    stream::{self, Level},
    table::{Cell, Col, Table},
    text::{fields, Lossless},
};

crate::lossless_field!(RootField, "procfs_root");

/// uid → user name, cached.
#[derive(Default)]
pub struct Users(HashMap<u32, String>);

impl Users {
    pub fn name(&mut self, uid: Option<u32>) -> String {
        let Some(uid) = uid else { return "?".into() };
        self.0
            .entry(uid)
            .or_insert_with(|| {
                let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
                let mut buf = vec![0 as libc::c_char; 16 * 1024];
                let mut res = std::ptr::null_mut();
                // SAFETY: all pointers valid; buf outlives the call and pw is only read if res != NULL.
                let rc = unsafe {
                    libc::getpwuid_r(uid, pw.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut res)
                };
                if rc != 0 || res.is_null() {
                    return uid.to_string();
                }
                // SAFETY: res non-null: pw filled, pw_name points into buf.
                let name = unsafe { std::ffi::CStr::from_ptr(pw.assume_init().pw_name) };
                name.to_string_lossy().into_owned()
            })
            .clone()
    }
}

/// Every JSON object `scan --json` prints, one per line, tagged by `"type"`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ScanRecord<'a> {
    Process(ProcessJson<'a>),
    Finding(&'a Finding),
    Summary(SummaryJson<'a>),
}

/// A process and its fds.
#[derive(Serialize)]
pub struct ProcessJson<'a> {
    pid: u32,
    ppid: Option<u32>,
    #[serde(flatten)]
    comm: Lossless<Vec<u8>, fields::Comm>,
    uid: Option<u32>,
    user: &'a str,
    nofile_soft: Option<u64>,
    nofile_hard: Option<u64>,
    fd_count: u32,
    max_fd: Option<u32>,
    no_cloexec: u32,
    /// cgroup, container id/runtime, pod uid, ns_pid (each only when known).
    #[serde(flatten)]
    identity: &'a crate::cgroup::Identity,
    fds: &'a [FdRecord],
}

/// The last object: totals of the scan and its verdict.
#[derive(Serialize)]
pub struct SummaryJson<'a> {
    #[serde(flatten)]
    procfs_root: Lossless<Vec<u8>, RootField>,
    #[serde(flatten)]
    totals: &'a ScanTotals,
    findings: usize,
    #[serde(flatten)]
    verdict: Verdict,
}

/// How the scan was judged.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Verdict {
    /// The cost model's ns per close() that NOFILE findings were rated with.
    pub close_cost_ns: u64,
    /// The worst finding's severity, if any.
    pub worst: Option<Severity>,
    /// `--fail-on`, if given.
    pub fail_on: Option<Severity>,
    /// fdaudit's exit status.
    pub exit_code: u8,
}

/// One process as the writer thread receives it.
pub struct Rendered {
    pub sort: (u64, u32),
    /// JSON lines, or the human fd listing.
    pub bytes: Vec<u8>,
    pub row: Option<Vec<String>>,
    pub findings: Vec<Finding>,
    /// The process's findings that fold across processes ([`fold`]), below
    /// `--min-severity` too: written with the end of the output, once per program and limit.
    pub folding: Vec<Finding>,
}

pub fn sort_value(key: SortKey, r: &ProcReport) -> u64 {
    match key {
        SortKey::Pid => 0,
        SortKey::Fds => u64::from(r.fd_count),
        SortKey::Inheritable => u64::from(r.no_cloexec),
        // Unreadable limits sort lowest; a soft limit of "unlimited" highest.
        SortKey::Nofile => r.nofile.map_or(0, |l| l.soft.unwrap_or(u64::MAX)),
        SortKey::Severity => r.worst().map_or(0, |s| s as u64 + 1),
    }
}

/// For people: a process's inheritable-fd findings of one severity and category, when there
/// are more than `GROUP_OVER` of them, become one line (the JSON output keeps every one).
/// This also keeps the findings held for ranking proportional to processes, not fds.
const GROUP_OVER: usize = 5;

pub fn group_findings(mut v: Vec<Finding>) -> Vec<Finding> {
    use findings::FindingKind;
    v.sort_by(Finding::order);
    let mut out = Vec::with_capacity(v.len().min(16));
    let mut it = v.into_iter().peekable();
    while let Some(first) = it.next() {
        let mut group = vec![first];
        while let Some(next) = it.peek() {
            let g = &group[0];
            if g.kind != FindingKind::InheritableFd
                || next.kind != g.kind
                || next.severity != g.severity
                || next.rank != g.rank
            {
                break;
            }
            group.extend(it.next());
        }
        if group.len() <= GROUP_OVER {
            out.append(&mut group);
            continue;
        }
        let n = group.len();
        let shown: Vec<String> = group
            .iter()
            .filter_map(|f| f.fd)
            .take(8)
            .map(|fd| fd.to_string())
            .collect();
        let mut f = group.swap_remove(0);
        f.reason = format!(
            "{n} fds like this (fds {}{}), e.g. fd {}: {}",
            shown.join(","),
            if n > 8 { ",..." } else { "" },
            f.fd.map_or("-".into(), |fd| fd.to_string()),
            f.reason
        );
        f.fd = None;
        out.push(f);
    }
    out
}

fn limit_text(v: Option<Option<u64>>) -> String {
    match v {
        Some(Some(n)) => n.to_string(),
        Some(None) => "unlimited".into(),
        None => "?".into(),
    }
}

/// What shapes a process's rendering.
#[derive(Debug, Clone, Copy)]
pub struct RenderOptions {
    pub json: bool,
    /// List each process's fds (`--fds`, `-p`).
    pub list_fds: bool,
    pub only_findings: bool,
    pub sort: SortKey,
    /// `--min-severity`: findings below it are not shown.
    pub min_severity: Severity,
}

/// Renders one process (on a worker thread): JSON lines, or the fd listing and a row.
pub fn render(mut r: ProcReport, o: RenderOptions, users: &std::sync::Mutex<Users>) -> Rendered {
    // Sorted by what the process had (`--sort severity` counts its NOFILE finding).
    let sort = (sort_value(o.sort, &r), r.pid);
    let (folding, keep) = fold::split(std::mem::take(&mut r.findings));
    r.findings = keep;
    r.findings.retain(|f| f.severity >= o.min_severity);
    let user = users.lock().unwrap_or_else(|p| p.into_inner()).name(r.uid);
    let mut bytes = Vec::with_capacity(if o.json {
        512 + 160 * r.fds.len() + 256 * r.findings.len()
    } else {
        0
    });
    let mut row = None;
    if o.json {
        if !o.only_findings {
            json_line(&mut bytes, &ScanRecord::Process(process_json(&r, &user)))
                .expect("writing to a Vec cannot fail");
        }
        for f in &r.findings {
            json_line(&mut bytes, &ScanRecord::Finding(f)).expect("writing to a Vec cannot fail");
        }
    } else if !o.only_findings {
        if o.list_fds {
            fd_listing(&mut bytes, &r, &user);
        }
        row = Some(process_row(&r, user));
    }
    Rendered {
        sort,
        bytes,
        row,
        findings: if o.json {
            Vec::new()
        } else {
            group_findings(r.findings)
        },
        folding,
    }
}

fn process_json<'a>(r: &'a ProcReport, user: &'a str) -> ProcessJson<'a> {
    ProcessJson {
        pid: r.pid,
        ppid: r.ppid,
        comm: Lossless::new(r.comm.clone()),
        uid: r.uid,
        user,
        nofile_soft: r.nofile.and_then(|l| l.soft),
        nofile_hard: r.nofile.and_then(|l| l.hard),
        fd_count: r.fd_count,
        max_fd: r.max_fd,
        no_cloexec: r.no_cloexec,
        identity: &r.identity,
        fds: &r.fds,
    }
}

/// `pid N (comm) user U: K fds` and the table of its fds.
fn fd_listing(out: &mut Vec<u8>, r: &ProcReport, user: &str) {
    let mut t = Table::new([
        Col::new("FD"),
        Col::new("KIND"),
        Col::new("TARGET").path(),
        Col::new("MODE"),
        Col::new("CLOEXEC"),
        Col::new("ADDRESS").text(),
    ]);
    for f in &r.fds {
        let kind = match (f.family, f.proto.as_deref()) {
            (Some(fam), Some(p)) => format!("{} {fam}/{p}", f.kind),
            _ => f.kind.to_string(),
        };
        let mut addr = f.local.as_ref().map(|l| l.escaped()).unwrap_or_default();
        if let Some(rem) = &f.remote {
            addr = format!("{addr} -> {}", rem.escaped());
        }
        if f.listening {
            addr.push_str(" (listening)");
        }
        if f.unresolved {
            addr.push_str(" (not resolved in its netns)");
        }
        // An fd without close-on-exec at 3 or above is what leaks.
        let leaks = f.cloexec == Some(false) && f.fd >= 3;
        // An fd of a thread's own table: `3 (thread 812)`.
        let fd = match f.tid {
            Some(t) => format!("{} (thread {t})", f.fd),
            None => f.fd.to_string(),
        };
        let target = if f.target_partial {
            "(path past PATH_MAX)".to_owned()
        } else {
            f.target.escaped()
        };
        t.add_row([
            Cell::from(fd),
            kind.into(),
            target.into(),
            f.mode.unwrap_or("?").into(),
            Cell::painted(
                f.cloexec.map_or("?", |c| if c { "yes" } else { "NO" }),
                leaks.then_some(Paint::Warn),
            ),
            addr.into(),
        ]);
    }
    let _ = writeln!(
        out,
        "pid {} ({}) user {}: {}",
        r.pid,
        escape_bytes(&r.comm),
        escape(user),
        count(r.fd_count, "fd", "fds")
    );
    let _ = writeln!(out, "{t}\n");
}

/// The process's row of the process table.
fn process_row(r: &ProcReport, user: String) -> Vec<String> {
    vec![
        r.pid.to_string(),
        escape_bytes(&r.comm),
        escape(&user),
        limit_text(r.nofile.map(|l| l.soft)),
        limit_text(r.nofile.map(|l| l.hard)),
        r.fd_count.to_string(),
        r.max_fd.map_or("-".into(), |m| m.to_string()),
        r.no_cloexec.to_string(),
        // Dropped by write_tail unless some process runs in a container.
        r.identity.container_label().unwrap_or_default(),
    ]
}

/// What the end of the output needs: the process rows and the findings for people.
pub struct Tail {
    pub rows: Vec<((u64, u32), Vec<String>)>,
    pub human_findings: Vec<Finding>,
    /// Every finding, --min-severity's hidden ones included.
    pub n_findings: usize,
    /// Of those, the ones below --min-severity (not shown).
    pub hidden: usize,
    /// Findings per severity (indexed by `Severity as usize`).
    pub by_severity: [usize; 5],
    /// The folded findings ([`fold`]), every severity: one per program and limit.
    pub folded: Vec<Finding>,
}

/// The end of the output: the shared-description findings, the notes and the summary record
/// (JSON), or the process table and the findings table (people).
pub fn write_tail(
    out: &mut impl Write,
    o: RenderOptions,
    tail: Tail,
    outcome: &Outcome,
    procfs_root: &std::path::Path,
    (verdict, verdict_line): (Verdict, Option<&str>),
    notes: &[String],
) -> io::Result<()> {
    let shown = |f: &&Finding| f.severity >= o.min_severity;
    if o.json {
        for f in tail.folded.iter().chain(&outcome.shared).filter(shown) {
            json_line(out, &ScanRecord::Finding(f))?;
        }
        // The notes go straight to the stream: what is buffered goes first.
        out.flush()?;
        for n in notes {
            stream::note(Level::Note, n);
        }
        if let Some(v) = verdict_line {
            stream::note(Level::Verdict, v);
        }
        let summary = SummaryJson {
            procfs_root: Lossless::new(procfs_root.as_os_str().as_encoded_bytes().to_vec()),
            totals: &outcome.totals,
            findings: tail.n_findings,
            verdict,
        };
        return json_line(out, &ScanRecord::Summary(summary));
    }
    let Tail {
        mut rows,
        mut human_findings,
        folded,
        ..
    } = tail;
    if !o.only_findings {
        if o.sort == SortKey::Pid {
            rows.sort_by_key(|r| r.0 .1);
        } else {
            rows.sort_by(|a, b| b.0 .0.cmp(&a.0 .0).then(a.0 .1.cmp(&b.0 .1)));
        }
        let containers = rows
            .iter()
            .any(|r| r.1.last().is_some_and(|c| !c.is_empty()));
        let mut cols = vec![
            Col::new("PID"),
            Col::new("COMM"),
            Col::new("USER"),
            Col::new("NOFILE"),
            Col::new("HARD").drop(2),
            Col::new("FDS"),
            Col::new("MAXFD").drop(1),
            Col::new("NO_CLOEXEC").short("NOCLOEX"),
        ];
        if containers {
            cols.push(Col::new("CONTAINER").short("CTR").drop(3));
        }
        let mut t = Table::new(cols);
        for (_, mut row) in rows {
            if !containers {
                row.pop();
            }
            t.add_row(row);
        }
        writeln!(out, "{t}\n")?;
    }
    human_findings.extend(folded.into_iter().filter(|f| shown(&f)));
    human_findings.extend(outcome.shared.iter().filter(shown).cloned());
    human_findings.sort_by(Finding::order);
    findings_table(out, human_findings)
}

/// How a severity reads.
fn severity_paint(s: Severity) -> Option<Paint> {
    match s {
        Severity::Critical => Some(Paint::Alarm),
        Severity::High => Some(Paint::Bad),
        Severity::Medium => Some(Paint::Warn),
        Severity::Low => None,
        Severity::Info => Some(Paint::Dim),
    }
}

/// The findings, worst first; alike findings of processes running the same program once,
/// with their count and pids (see [`alike`]).
fn findings_table(out: &mut impl Write, findings: Vec<Finding>) -> io::Result<()> {
    if findings.is_empty() {
        return writeln!(out, "no findings");
    }
    let mut t = Table::new([
        Col::new("SEVERITY"),
        Col::new("PID"),
        Col::new("COMM"),
        Col::new("FD"),
        Col::new("REASON").text(),
    ]);
    for a in alike::group_alike(findings) {
        let f = &a.finding;
        t.add_row([
            Cell::painted(f.severity.as_str(), severity_paint(f.severity)),
            f.pid.to_string().into(),
            match a.comms.len() {
                1 => f.comm.escaped().into(),
                n => format!("{n} programs").into(),
            },
            a.fd.map_or("-".into(), |fd| fd.to_string()).into(),
            escape(&a.reason()).into(),
        ]);
    }
    writeln!(out, "{t}")
}

/// The closing notes: every unreadable process with `verbose`, the counts and kcmp
/// refusals (missing and unreadable `-p` processes are errors, reported by the caller).
/// Written on stderr for people, as `note` records in JSON.
pub fn notes(
    outcome: &Outcome,
    n_findings: usize,
    close_cost_ns: u64,
    verbose: bool,
) -> Vec<String> {
    let t = &outcome.totals;
    let mut notes = Vec::new();
    if verbose {
        for (pid, comm) in &outcome.unreadable_procs {
            notes.push(format!(
                "scan: pid {pid} ({comm}): fds not readable with these privileges"
            ));
        }
    }
    let unreadable = count(t.unreadable, "process", "processes");
    let hint = if t.unreadable > 0 && !verbose && outcome.unreadable_pids.is_empty() {
        " (-v names them)"
    } else {
        ""
    };
    notes.push(format!(
        "scan: {}, {}, {}; {unreadable} not readable (permissions){hint}, {} vanished, {} vanished; NOFILE rated at {} ns per close() (cost model; --close-cost-ns to change)",
        count(t.processes, "process", "processes"),
        count(t.fds, "fd", "fds"),
        count(n_findings as u64, "finding", "findings"),
        t.vanished,
        count(t.vanished_fds, "fd", "fds"),
        close_cost_ns,
    ));
    if t.unreadable_files > 0 {
        notes.push(format!(
            "scan: {} skipped (not a regular file, over {} KiB, or unreadable)",
            count(t.unreadable_files, "procfs file", "procfs files"),
            crate::procfs_util::at::MAX_FILE / 1024
        ));
    }
    if t.interrupted {
        notes.push("scan: interrupted: the counts cover only what was scanned".into());
    }
    if t.kcmp_refused > 0 {
        notes.push(format!(
            "scan: {} parent/child pairs not compared (kcmp not permitted)",
            t.kcmp_refused
        ));
    }
    notes
}
