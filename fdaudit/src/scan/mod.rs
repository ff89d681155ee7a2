//! `fdaudit scan`: inventory every process's fds from procfs and report what would leak
//! into children (fds without close-on-exec) and what makes spawning slow (NOFILE limits).
//!
//! No eBPF, no privileges needed: what cannot be read is counted and skipped, as are
//! processes and fds that vanish during the scan.

pub mod alike;
pub mod findings;
pub mod net;
pub mod parse;
pub mod report;
pub mod scanner;

use std::ffi::CString;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context as _;

use crate::{exit, sys};
pub use findings::{Finding, Severity};
use report::{RenderOptions, Rendered, Tail};
pub use scanner::{scan, FdRecord, Outcome, ProcReport, ScanOptions, ScanTotals};

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
    /// Name every process that could not be read (pid and comm), not just count them.
    #[arg(short, long)]
    pub verbose: bool,
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

extern "C" fn on_signal(_sig: libc::c_int) {
    if scanner::SIGNALLED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        // A second signal: the user wants out now.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(i32::from(exit::INTERRUPTED)) };
    }
}

/// SIGINT and SIGTERM end the scan at its next step, with the partial summary; a second
/// one exits at once.
fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches an atomic and calls _exit, both
        // async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

pub fn run(args: ScanArgs) -> anyhow::Result<u8> {
    install_signal_handlers();
    let uid = args.user.as_deref().map(uid_of).transpose()?;
    let close_ns = args
        .close_cost_ns
        .unwrap_or_else(|| sys::close_cost_ns(10_000));
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
    let opts = RenderOptions {
        json: args.json,
        list_fds: cfg.full_fds,
        only_findings: args.only_findings,
        sort: args.sort,
    };
    let mut out = io::BufWriter::with_capacity(256 * 1024, io::stdout());
    let (outcome, tail, worst, write_err) = scan_and_render(&cfg, opts, &mut out)?;
    let n_findings = tail.n_findings;
    let res = match write_err {
        Some(e) => Err(e),
        None => report::write_tail(
            &mut out,
            opts,
            tail,
            &outcome,
            scanner::display_root(&cfg.root),
            close_ns,
        )
        .and_then(|()| out.flush()),
    };
    match res {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e).context("failed to write the scan output"),
    }
    report::notes(
        &outcome,
        n_findings,
        close_ns,
        args.close_cost_ns.is_some(),
        args.verbose,
    );
    Ok(match (args.fail_on, worst) {
        (Some(min), Some(w)) if w >= min => exit::FINDINGS,
        _ if outcome.totals.interrupted => exit::INTERRUPTED,
        _ => exit::OK,
    })
}

/// Scans with `cfg`, rendering each process on the workers and writing it to `out` as it
/// comes (`--sort pid`) or after sorting. Returns the outcome, what the end of the output
/// needs, the worst severity and the first write error.
fn scan_and_render(
    cfg: &ScanOptions,
    opts: RenderOptions,
    out: &mut (impl Write + Send),
) -> anyhow::Result<(Outcome, Tail, Option<Severity>, Option<io::Error>)> {
    let users = std::sync::Mutex::new(report::Users::default());
    let mut write_err: Option<io::Error> = None;
    let mut buffered: Vec<Rendered> = Vec::new();
    let mut tail = Tail {
        rows: Vec::new(),
        human_findings: Vec::new(),
        n_findings: 0,
    };
    let streaming = opts.sort == SortKey::Pid;
    // Findings are counted on the workers, before grouping for people.
    let counted = std::sync::Mutex::new((None::<Severity>, 0usize));
    let outcome = {
        let stop = cfg.stop.clone();
        let emit = |mut r: Rendered| {
            if let Some(row) = r.row.take() {
                tail.rows.push((r.sort, row));
            }
            tail.human_findings.append(&mut r.findings);
            if !streaming {
                buffered.push(r);
            } else if write_err.is_none() {
                if let Err(e) = out.write_all(&r.bytes) {
                    write_err = Some(e);
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        };
        let render_counting = |r: ProcReport| {
            {
                let mut g = counted.lock().unwrap_or_else(|p| p.into_inner());
                g.0 = g.0.max(r.worst());
                g.1 += r.findings.len();
            }
            report::render(r, opts, &users)
        };
        scan(cfg, render_counting, emit)
            .with_context(|| format!("failed to scan {}", scanner::display_root(&cfg.root)))?
    };
    if !streaming {
        buffered.sort_by(|a, b| b.sort.0.cmp(&a.sort.0).then(a.sort.1.cmp(&b.sort.1)));
        for r in &buffered {
            if write_err.is_none() {
                write_err = out.write_all(&r.bytes).err();
            }
        }
    }
    let (mut worst, n) = *counted.lock().unwrap_or_else(|p| p.into_inner());
    for f in &outcome.shared {
        worst = worst.max(Some(f.severity));
    }
    tail.n_findings = n + outcome.shared.len();
    Ok((outcome, tail, worst, write_err))
}

#[cfg(test)]
mod tests;
