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
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::exit;
use crate::output::{
    escape, escape_bytes, json_line,
    stream::{self, Dest, StdStream},
    table,
    text::{fields, Lossless},
};
pub use findings::{Finding, Severity, DEFAULT_CLOSE_COST_NS};
pub use scanner::{scan, ScanOptions, FdRecord, Outcome, ProcReport, ScanTotals};

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
    /// One JSON object per line: "header", "process", "finding" and a final "summary".
    #[arg(long)]
    pub json: bool,
    /// Write the output (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Exit with status 3 when a finding at or above this severity exists (for CI).
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub fail_on: Option<Severity>,
    /// Order of the processes (anything but pid buffers the whole output).
    #[arg(long, value_enum, default_value_t = SortKey::Pid)]
    pub sort: SortKey,
    /// The cost model's price of one close() in a close-to-limit loop, in ns: NOFILE
    /// findings are rated from it, never from a timing taken during the run.
    #[arg(long, value_name = "NS", default_value_t = DEFAULT_CLOSE_COST_NS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub close_cost_ns: u64,
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

/// Whether `root` looks like a procfs: a mounted proc filesystem, or (a fixture or a copy)
/// a directory with at least one numeric entry that has a `status` file.
pub fn looks_like_procfs(root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    if let Ok(c) = CString::new(root.as_os_str().as_bytes()) {
        let mut sfs = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: c is a valid path and sfs valid storage; read only on success.
        if unsafe { libc::statfs(c.as_ptr(), sfs.as_mut_ptr()) } == 0
            && unsafe { sfs.assume_init() }.f_type == PROC_SUPER_MAGIC
        {
            return true;
        }
    }
    std::fs::read_dir(root).is_ok_and(|d| {
        d.filter_map(Result::ok).any(|e| {
            e.file_name().as_bytes().iter().all(u8::is_ascii_digit)
                && e.path().join("status").is_file()
        })
    })
}

/// Checks the input before scanning: the root is a procfs, and every `-p` process exists
/// and has readable fds. Each failure is one error (exit 2), not a silent "no findings".
fn check_input(args: &ScanArgs) -> anyhow::Result<()> {
    let root = &args.procfs_root;
    let shown = scanner::display_root(root);
    if !root.is_dir() {
        bail!("{shown} is not a directory: give a procfs root such as /proc");
    }
    if !looks_like_procfs(root) {
        bail!("{shown} is not a procfs (no process directories in it): give /proc or a copy of one");
    }
    for &pid in &args.pids {
        let dir = root.join(pid.to_string());
        if !dir.join("status").exists() {
            bail!("no process with PID {pid} in {shown}: check it with `ps -p {pid}`");
        }
        if let Err(e) = std::fs::read_dir(dir.join("fd")) {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                bail!(
                    "cannot read the fds of PID {pid} with these privileges: run fdaudit as its user or as root"
                );
            }
            if e.kind() == std::io::ErrorKind::NotFound {
                bail!("no process with PID {pid} in {shown} (it has exited)");
            }
            return Err(e).with_context(|| format!("failed to read the fds of PID {pid}"));
        }
    }
    Ok(())
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
                name.to_string_lossy().into_owned()
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
    #[serde(flatten)]
    comm: Lossless<Vec<u8>, fields::Comm>,
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
    #[serde(flatten)]
    procfs_root: Lossless<Vec<u8>, RootField>,
    #[serde(flatten)]
    totals: &'a ScanTotals,
    /// The cost model's ns per close() that NOFILE findings were rated with.
    close_cost_ns: u64,
    findings: usize,
    /// The worst finding's severity, if any.
    worst: Option<Severity>,
    /// `--fail-on`, if given.
    fail_on: Option<Severity>,
    /// fdaudit's exit status: 3 when `--fail-on` was met, else 0.
    exit_code: u8,
}

crate::lossless_field!(RootField, "procfs_root");

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
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "scan",
    )?;
    check_input(&args)?;
    let uid = args.user.as_deref().map(uid_of).transpose()?;
    let close_ns = args.close_cost_ns as f64;
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
                    comm: Lossless::new(r.comm.clone()),
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
                    let mut addr = f.local.as_ref().map(|l| l.escaped()).unwrap_or_default();
                    if let Some(rem) = &f.remote {
                        addr = format!("{addr} -> {}", rem.escaped());
                    }
                    if f.listening {
                        addr.push_str(" (listening)");
                    }
                    t.add_row(vec![
                        f.fd.to_string(),
                        kind,
                        f.target.escaped(),
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
                    r.pid,
                    escape_bytes(&r.comm),
                    escape(&user),
                    r.fd_count
                );
                let _ = writeln!(bytes, "{t}\n");
            }
            row = Some(vec![
                r.pid.to_string(),
                escape_bytes(&r.comm),
                escape(&user),
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

    let mut out = io::BufWriter::with_capacity(256 * 1024, stream::Out);
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

    // Decided before the summary is written, so the summary can say it. A `-p` process that
    // exited or turned unreadable during the scan is an error, as it is before it.
    let exit_code = match (args.fail_on, worst) {
        (Some(min), Some(w)) if w >= min => exit::POLICY,
        _ => exit::OK,
    };
    let lost_pid = outcome
        .missing
        .first()
        .map(|p| format!("no process with PID {p}: it exited during the scan"))
        .or_else(|| {
            outcome.unreadable_pids.first().map(|p| {
                format!(
                    "cannot read the fds of PID {p} with these privileges: run fdaudit as its user or as root"
                )
            })
        });
    let t = &outcome.totals;
    let mut notes = vec![format!(
        "scan: {} processes, {} fds, {} findings; {} processes not readable (permissions), {} vanished, {} fds vanished; NOFILE rated at {} ns per close() (cost model; --close-cost-ns to change)",
        t.processes,
        t.fds,
        n_findings,
        t.unreadable,
        t.vanished,
        t.vanished_fds,
        args.close_cost_ns,
    )];
    if t.kcmp_refused > 0 {
        notes.push(format!(
            "scan: {} parent/child pairs not compared (kcmp not permitted)",
            t.kcmp_refused
        ));
    }

    let res: io::Result<()> = (|| {
        if let Some(e) = write_err.take() {
            return Err(e);
        }
        if json {
            for f in &outcome.shared {
                json_line(&mut out, f)?;
            }
            out.flush()?;
            for n in &notes {
                stream::note(stream::Level::Note, n);
            }
            json_line(
                &mut out,
                &SummaryJson {
                    ty: "summary",
                    procfs_root: Lossless::new(
                        cfg.root.as_os_str().as_encoded_bytes().to_vec(),
                    ),
                    totals: &outcome.totals,
                    close_cost_ns: args.close_cost_ns,
                    findings: n_findings,
                    worst,
                    fail_on: args.fail_on,
                    exit_code: if lost_pid.is_some() {
                        exit::ERROR
                    } else {
                        exit_code
                    },
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
                        f.comm.escaped(),
                        f.fd.map_or("-".into(), |fd| fd.to_string()),
                        escape(&f.reason),
                    ]);
                }
                writeln!(out, "{t}")?;
            }
        }
        out.flush()
    })();
    res.map_err(|e| {
        let to = args
            .output
            .as_deref()
            .map_or_else(|| "stdout".to_owned(), crate::output::text::escape_path);
        anyhow::Error::new(e).context(format!("failed to write the scan output to {to}"))
    })?;
    if !json {
        for n in &notes {
            crate::diag!("{}", escape(n));
        }
    }
    if let Some(msg) = lost_pid {
        bail!(msg);
    }
    Ok(exit_code)
}

#[cfg(test)]
mod tests;
