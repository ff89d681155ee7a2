//! `fdaudit scan`: inventory every process's fds from procfs and report what would leak
//! into children (fds without close-on-exec) and what makes spawning slow (NOFILE limits).
//!
//! No eBPF, no privileges needed: what cannot be read is counted and skipped, as are
//! processes and fds that vanish during the scan.

pub mod findings;
pub mod net;
pub mod parse;
pub mod scanner;

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;

use crate::output::{escape_bytes, json_line, table};
pub use findings::{Finding, Severity};
pub use scanner::{scan, ScanOptions, FdRecord, Outcome, ProcReport, ScanTotals};

/// Exit status when `--fail-on` finds a finding at or above its severity.
pub const EXIT_FINDINGS: u8 = 1;

/// Arguments of `fdaudit scan`.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// procfs to scan: /proc, or a container's or a fixture's procfs tree.
    #[arg(value_name = "PROCFS_ROOT", default_value = "/proc")]
    pub procfs_root: PathBuf,
    /// Only this process (repeatable); its fds are listed.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only processes running as this user (name or uid).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// List every fd of every process (kind, target, access mode, close-on-exec).
    #[arg(long)]
    pub fds: bool,
    /// Print only the findings.
    #[arg(long)]
    pub only_findings: bool,
    /// One JSON object per line: "process", "finding" and a final "summary" object.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when a finding at or above this severity exists (for CI).
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub fail_on: Option<Severity>,
    /// Order of the processes (anything but pid buffers the whole output).
    #[arg(long, value_enum, default_value_t = SortKey::Pid)]
    pub sort: SortKey,
    /// Use this per-close() cost in nanoseconds instead of measuring it at start.
    #[arg(long, value_name = "NS")]
    pub close_cost_ns: Option<f64>,
    /// Worker threads [default: available CPUs, at most 8].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

/// How `--sort` orders processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Ascending pid.
    Pid,
    /// Most open fds first.
    Fds,
    /// Most fds without close-on-exec first.
    Inheritable,
    /// Highest NOFILE soft limit first.
    Nofile,
    /// Worst finding first.
    Severity,
}

/// Measures what one close() of an unopened fd below the soft limit costs, in ns: the
/// price of each iteration of a close-to-limit loop on this machine.
pub fn measure_close_ns() -> f64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid out-pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let top = (lim.rlim_cur.min(1 << 20) as i32).max(64);
    // An fd number below the limit that is not open (F_GETFD says EBADF).
    // SAFETY: fcntl(F_GETFD) only queries.
    let fd = (3..top)
        .rev()
        .find(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1)
        .unwrap_or(top - 1);
    // 2 x 10,000 calls, best round: a few ms, and robust to one preempted round.
    const N: u32 = 10_000;
    let mut best = f64::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        for _ in 0..N {
            // SAFETY: fd is not open; close() fails with EBADF and changes nothing.
            unsafe { libc::close(fd) };
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(N));
    }
    best
}

fn uid_of(user: &str) -> anyhow::Result<u32> {
    if let Ok(uid) = user.parse() {
        return Ok(uid);
    }
    let name = CString::new(user).context("user name holds a NUL byte")?;
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut res = std::ptr::null_mut();
    // SAFETY: all pointers valid; buf outlives the call and pw is only read if res != NULL.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut res,
        )
    };
    if rc != 0 || res.is_null() {
        anyhow::bail!("failed to find user {user:?} in the user database");
    }
    // SAFETY: res is non-null, so pw was filled.
    Ok(unsafe { pw.assume_init() }.pw_uid)
}

/// uid → user name, cached.
#[derive(Default)]
struct Users(HashMap<u32, String>);

impl Users {
    fn name(&mut self, uid: Option<u32>) -> String {
        let Some(uid) = uid else { return "?".into() };
        self.0
            .entry(uid)
            .or_insert_with(|| {
                let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
                let mut buf = vec![0 as libc::c_char; 16 * 1024];
                let mut res = std::ptr::null_mut();
                // SAFETY: as in uid_of.
                let rc = unsafe {
                    libc::getpwuid_r(uid, pw.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut res)
                };
                if rc != 0 || res.is_null() {
                    return uid.to_string();
                }
                // SAFETY: res non-null: pw filled, pw_name points into buf.
                let name = unsafe { std::ffi::CStr::from_ptr(pw.assume_init().pw_name) };
                escape_bytes(name.to_bytes())
            })
            .clone()
    }
}

/// A `"type":"process"` JSON object.
#[derive(Serialize)]
struct ProcessJson<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    pid: u32,
    ppid: Option<u32>,
    comm: &'a str,
    uid: Option<u32>,
    user: &'a str,
    nofile_soft: Option<u64>,
    nofile_hard: Option<u64>,
    fd_count: u32,
    max_fd: Option<u32>,
    no_cloexec: u32,
    fds: &'a [FdRecord],
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    procfs_root: String,
    #[serde(flatten)]
    totals: &'a ScanTotals,
    close_ns: f64,
    findings: usize,
}

/// One process as the writer thread receives it.
struct Rendered {
    sort: (u64, u32),
    /// JSON lines, or the human fd listing.
    bytes: Vec<u8>,
    row: Option<Vec<String>>,
    findings: Vec<Finding>,
}

fn sort_value(key: SortKey, r: &ProcReport) -> u64 {
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

fn group_findings(mut v: Vec<Finding>) -> Vec<Finding> {
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

pub fn run(args: ScanArgs) -> anyhow::Result<u8> {
    let uid = args.user.as_deref().map(uid_of).transpose()?;
    let close_ns = args.close_cost_ns.unwrap_or_else(measure_close_ns);
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(8)
    });
    let cfg = ScanOptions {
        root: args.procfs_root.clone(),
        pids: (!args.pids.is_empty()).then(|| args.pids.clone()),
        uid,
        full_fds: !args.only_findings && (args.json || args.fds || !args.pids.is_empty()),
        close_ns,
        threads,
        stop: Default::default(),
    };
    let json = args.json;
    let list_fds = cfg.full_fds;
    let only_findings = args.only_findings;
    let sort = args.sort;
    let users = std::sync::Mutex::new(Users::default());

    let render = |r: ProcReport| -> Rendered {
        let user = users.lock().unwrap_or_else(|p| p.into_inner()).name(r.uid);
        let mut bytes = Vec::with_capacity(if json {
            512 + 160 * r.fds.len() + 256 * r.findings.len()
        } else {
            0
        });
        let mut row = None;
        if json {
            if !only_findings {
                let pj = ProcessJson {
                    ty: "process",
                    pid: r.pid,
                    ppid: r.ppid,
                    comm: &r.comm,
                    uid: r.uid,
                    user: &user,
                    nofile_soft: r.nofile.and_then(|l| l.soft),
                    nofile_hard: r.nofile.and_then(|l| l.hard),
                    fd_count: r.fd_count,
                    max_fd: r.max_fd,
                    no_cloexec: r.no_cloexec,
                    fds: &r.fds,
                };
                json_line(&mut bytes, &pj).expect("writing to a Vec cannot fail");
            }
            for f in &r.findings {
                json_line(&mut bytes, f).expect("writing to a Vec cannot fail");
            }
        } else if !only_findings {
            if list_fds {
                let mut t = table(&["FD", "KIND", "TARGET", "MODE", "CLOEXEC", "ADDRESS"]);
                for f in &r.fds {
                    let kind = match (f.family, f.proto.as_deref()) {
                        (Some(fam), Some(p)) => format!("{} {fam}/{p}", f.kind),
                        _ => f.kind.to_string(),
                    };
                    let mut addr = f.local.clone().unwrap_or_default();
                    if let Some(rem) = &f.remote {
                        addr = format!("{addr} -> {rem}");
                    }
                    if f.listening {
                        addr.push_str(" (listening)");
                    }
                    t.add_row(vec![
                        f.fd.to_string(),
                        kind,
                        f.target.clone(),
                        f.mode.unwrap_or("?").to_owned(),
                        f.cloexec
                            .map_or("?", |c| if c { "yes" } else { "NO" })
                            .to_owned(),
                        addr,
                    ]);
                }
                let _ = writeln!(
                    bytes,
                    "pid {} ({}) user {}: {} fds",
                    r.pid, r.comm, user, r.fd_count
                );
                let _ = writeln!(bytes, "{t}\n");
            }
            row = Some(vec![
                r.pid.to_string(),
                r.comm.clone(),
                user,
                limit_text(r.nofile.map(|l| l.soft)),
                limit_text(r.nofile.map(|l| l.hard)),
                r.fd_count.to_string(),
                r.max_fd.map_or("-".into(), |m| m.to_string()),
                r.no_cloexec.to_string(),
            ]);
        }
        Rendered {
            sort: (sort_value(sort, &r), r.pid),
            bytes,
            row,
            findings: if json {
                Vec::new()
            } else {
                group_findings(r.findings)
            },
        }
    };

    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(256 * 1024, stdout);
    let mut write_err: Option<io::Error> = None;
    let mut buffered: Vec<Rendered> = Vec::new();
    let mut rows: Vec<((u64, u32), Vec<String>)> = Vec::new();
    let mut human_findings: Vec<Finding> = Vec::new();
    let mut worst: Option<Severity> = None;
    let mut n_findings = 0usize;
    let streaming = sort == SortKey::Pid;

    let outcome = {
        let out = &mut out;
        let write_err = &mut write_err;
        let stop = cfg.stop.clone();
        let emit = |mut r: Rendered| {
            if let Some(row) = r.row.take() {
                rows.push((r.sort, row));
            }
            // Counted before rendering (render_counting): people see alike findings grouped.
            human_findings.append(&mut r.findings);
            if streaming {
                if write_err.is_none() {
                    if let Err(e) = out.write_all(&r.bytes) {
                        *write_err = Some(e);
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            } else {
                buffered.push(r);
            }
        };
        // JSON findings are rendered to bytes on the workers; count them there.
        let json_worst = std::sync::Mutex::new((None::<Severity>, 0usize));
        let render_counting = |r: ProcReport| {
            {
                let mut g = json_worst.lock().unwrap_or_else(|p| p.into_inner());
                g.0 = g.0.max(r.worst());
                g.1 += r.findings.len();
            }
            render(r)
        };
        let o = scan(&cfg, render_counting, emit)
            .with_context(|| format!("failed to scan {}", scanner::display_root(&cfg.root)))?;
        let (jw, jn) = *json_worst.lock().unwrap_or_else(|p| p.into_inner());
        worst = worst.max(jw);
        n_findings += jn;
        o
    };

    if !streaming {
        buffered.sort_by(|a, b| b.sort.0.cmp(&a.sort.0).then(a.sort.1.cmp(&b.sort.1)));
        for r in &buffered {
            if write_err.is_none() {
                write_err = out.write_all(&r.bytes).err();
            }
        }
    }
    for f in &outcome.shared {
        worst = worst.max(Some(f.severity));
    }
    n_findings += outcome.shared.len();

    let res: io::Result<()> = (|| {
        if let Some(e) = write_err.take() {
            return Err(e);
        }
        if json {
            for f in &outcome.shared {
                json_line(&mut out, f)?;
            }
            json_line(
                &mut out,
                &SummaryJson {
                    ty: "summary",
                    procfs_root: scanner::display_root(&cfg.root),
                    totals: &outcome.totals,
                    close_ns,
                    findings: n_findings,
                },
            )?;
        } else {
            if !only_findings {
                if sort == SortKey::Pid {
                    rows.sort_by_key(|r| r.0 .1);
                } else {
                    rows.sort_by(|a, b| b.0 .0.cmp(&a.0 .0).then(a.0 .1.cmp(&b.0 .1)));
                }
                let mut t = table(&[
                    "PID",
                    "COMM",
                    "USER",
                    "NOFILE",
                    "HARD",
                    "FDS",
                    "MAXFD",
                    "NO_CLOEXEC",
                ]);
                for (_, row) in rows.drain(..) {
                    t.add_row(row);
                }
                writeln!(out, "{t}\n")?;
            }
            human_findings.extend(outcome.shared.iter().cloned());
            human_findings.sort_by(Finding::order);
            if human_findings.is_empty() {
                writeln!(out, "no findings")?;
            } else {
                let mut t = table(&["SEVERITY", "PID", "COMM", "FD", "REASON"]);
                for f in &human_findings {
                    t.add_row(vec![
                        f.severity.as_str().to_owned(),
                        f.pid.to_string(),
                        f.comm.clone(),
                        f.fd.map_or("-".into(), |fd| fd.to_string()),
                        f.reason.clone(),
                    ]);
                }
                writeln!(out, "{t}")?;
            }
        }
        out.flush()
    })();
    match res {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e).context("failed to write the scan output"),
    }

    let t = &outcome.totals;
    for pid in &outcome.missing {
        crate::diag!("scan: pid {pid}: no such process");
    }
    for pid in &outcome.unreadable_pids {
        crate::diag!("scan: pid {pid}: fds not readable with these privileges");
    }
    crate::diag!(
        "scan: {} processes, {} fds, {} findings; {} processes not readable (permissions), {} vanished, {} fds vanished; close() cost {:.0} ns ({})",
        t.processes,
        t.fds,
        n_findings,
        t.unreadable,
        t.vanished,
        t.vanished_fds,
        close_ns,
        if args.close_cost_ns.is_some() { "given" } else { "measured at start" }
    );
    if t.kcmp_refused > 0 {
        crate::diag!(
            "scan: {} parent/child pairs not compared (kcmp not permitted)",
            t.kcmp_refused
        );
    }
    Ok(match (args.fail_on, worst) {
        (Some(min), Some(w)) if w >= min => EXIT_FINDINGS,
        _ => 0,
    })
}

#[cfg(test)]
mod tests;
