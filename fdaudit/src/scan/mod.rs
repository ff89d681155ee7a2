//! `fdaudit scan`: inventory every process's fds from procfs and report what would leak
//! into children (fds without close-on-exec) and what makes spawning slow (NOFILE limits).
//!
//! No eBPF, no privileges needed: what cannot be read is counted and skipped, as are
//! processes and fds that vanish during the scan.

pub mod alike;
mod ci;
pub mod findings;
pub mod fold;
pub mod net;
pub mod netns;
pub mod oflags;
pub mod parse;
pub mod report;
pub mod scanner;
pub mod unixdiag;
pub mod uring;

use std::ffi::CString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::exit;
use crate::output::stream::{self, Dest, StdStream};
use crate::signals::{Action, CallerIgnored};
pub use findings::{Finding, Severity, DEFAULT_CLOSE_COST_NS};
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
    /// Print only the findings at or above --min-severity and the summary line (no process
    /// table, fd listing or other notes); with --json, only finding and summary records.
    #[arg(short, long, conflicts_with = "fds")]
    pub quiet: bool,
    /// One JSON object per line: "process", "finding" and a final "summary" object.
    #[arg(long)]
    pub json: bool,
    /// Write the output (text or JSON) to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Exit with status 3 when a finding at or above this severity exists (for CI).
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub fail_on: Option<Severity>,
    #[command(flatten)]
    pub policy_exit_code: crate::exit::PolicyCode,
    /// Also write a JUnit XML report to FILE: a case for --fail-on and one per kind of
    /// finding, failing with the verdict line when it has findings at or above --fail-on
    /// (docs/ci.md).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    #[command(flatten)]
    pub sarif: crate::output::sarif::SarifArgs,
    /// Show only findings at or above this severity (text and JSON); the summary still
    /// counts the others, and --fail-on still judges every finding.
    #[arg(long, value_enum, value_name = "SEVERITY", default_value_t = Severity::Info)]
    pub min_severity: Severity,
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
    /// Name every process that could not be read (pid and comm), not just count them.
    #[arg(short, long)]
    pub verbose: bool,
    /// The architecture a procfs tree was captured on, whose O_* values its fdinfo flags
    /// hold [default: the tree's fdaudit-arch file, else this machine's].
    #[arg(long, value_enum, value_name = "ARCH")]
    pub arch: Option<oflags::Arch>,
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
        bail!(
            "{shown} is not a procfs (no process directories in it): give /proc or a copy of one"
        );
    }
    for &pid in &args.pids {
        let dir = root.join(pid.to_string());
        if !dir.join("status").exists() {
            bail!("no process with PID {pid} in {shown}: check it with `ps -p {pid}`");
        }
        if let Err(e) = open_fd_dir(&dir.join("fd")) {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                bail!("{}", unreadable(pid));
            }
            if e.kind() == std::io::ErrorKind::NotFound {
                bail!("no process with PID {pid} in {shown} (it has exited)");
            }
            return Err(e).with_context(|| format!("failed to read the fds of PID {pid}"));
        }
    }
    Ok(())
}

/// Opens (and closes) a process's fd directory, which checks that we may read it. Only
/// open(2): `read_dir` would add glibc's `fstat` of the directory in `fdopendir`, and the
/// scan keeps off calls on a process's fd directory other than lookups and readlink.
fn open_fd_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid C string; the fd is closed at once.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
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

pub fn run(args: ScanArgs) -> anyhow::Result<u8> {
    stream::open(
        Dest::new(args.output.as_deref(), StdStream::Stdout),
        args.json,
        "scan",
    )?;
    check_input(&args)?;
    let reports = ci::Reports::open(&args)?;
    // SIGINT and SIGTERM end the scan at its next step, with the partial summary; a second
    // one exits at once.
    crate::signals::install(
        &[
            (libc::SIGINT, Action::Interrupt),
            (libc::SIGTERM, Action::Interrupt),
        ],
        CallerIgnored::Catch,
    );
    let cfg = scan_options(&args)?;
    let opts = render_options(&args, &cfg);
    let mut out = io::BufWriter::with_capacity(256 * 1024, stream::Out);
    let (outcome, tail, worst, write_err) = scan_and_render(&cfg, opts, &mut out, reports.kept())?;
    let n_findings = tail.n_findings;
    let verdict_line = args
        .fail_on
        .filter(|min| worst.is_some_and(|w| w >= *min))
        .map(|min| fail_on_verdict(min, &tail.by_severity, args.policy_exit_code.code));
    // Decided before the summary is written, so the summary can say it. A `-p` process that
    // exited or turned unreadable during the scan is an error, as it is before it.
    let exit_code = match (args.fail_on, worst) {
        (Some(min), Some(w)) if w >= min => args.policy_exit_code.code,
        _ if outcome.totals.interrupted => crate::signals::exit_status(),
        _ => exit::OK,
    };
    let lost_pid = lost_pid(&outcome);
    let notes = closing_notes(&args, &outcome, n_findings, tail.hidden);
    let verdict = report::Verdict {
        close_cost_ns: args.close_cost_ns,
        worst,
        fail_on: args.fail_on,
        exit_code: if lost_pid.is_some() {
            exit::ERROR
        } else {
            exit_code
        },
    };
    let res = match write_err {
        Some(e) => Err(e),
        None => report::write_tail(
            &mut out,
            opts,
            tail,
            &outcome,
            &cfg.root,
            (verdict, verdict_line.as_deref()),
            &notes,
        )
        .and_then(|()| out.flush()),
    };
    res.map_err(|e| {
        let to = args
            .output
            .as_deref()
            .map_or_else(|| "stdout".to_owned(), crate::output::text::escape_path);
        anyhow::Error::new(e).context(format!("failed to write the scan output to {to}"))
    })?;
    if !args.json {
        print_notes(&notes, verdict_line.as_deref());
    }
    let gate = (args.fail_on, verdict_line.as_deref());
    reports.write(&cfg.root, &outcome.shared, gate, exit_code)?;
    if let Some(msg) = lost_pid {
        bail!(msg);
    }
    Ok(exit_code)
}

/// What rendering takes from the arguments.
fn render_options(args: &ScanArgs, cfg: &ScanOptions) -> RenderOptions {
    RenderOptions {
        json: args.json,
        list_fds: cfg.full_fds,
        only_findings: args.only_findings || args.quiet,
        sort: args.sort,
        min_severity: args.min_severity,
    }
}

/// The closing notes ([`report::notes`]) and how many findings `--min-severity` hid.
fn closing_notes(
    args: &ScanArgs,
    outcome: &Outcome,
    n_findings: usize,
    hidden: usize,
) -> Vec<String> {
    if args.quiet {
        // The summary line (the first note without -v), and whether it covers the whole scan.
        let notes = report::notes(outcome, n_findings, args.close_cost_ns, false);
        let interrupted = notes.iter().skip(1).filter(|n| n.contains("interrupted"));
        return notes.iter().take(1).chain(interrupted).cloned().collect();
    }
    let mut notes = report::notes(outcome, n_findings, args.close_cost_ns, args.verbose);
    if hidden > 0 {
        notes.push(format!(
            "scan: {} below --min-severity {} not shown",
            crate::output::count(hidden as u64, "finding", "findings"),
            args.min_severity.as_str()
        ));
    }
    notes
}

/// For people: the notes on stderr, then the `--fail-on` verdict.
fn print_notes(notes: &[String], verdict_line: Option<&str>) {
    for n in notes {
        crate::diag!("{}", crate::output::escape(n));
    }
    if let Some(v) = verdict_line {
        stream::note(stream::Level::Verdict, v);
    }
}

/// What to scan and how, from the arguments (`--user` resolved to a uid).
fn scan_options(args: &ScanArgs) -> anyhow::Result<ScanOptions> {
    let uid = args.user.as_deref().map(uid_of).transpose()?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(8)
    });
    Ok(ScanOptions {
        root: args.procfs_root.clone(),
        pids: (!args.pids.is_empty()).then(|| args.pids.clone()),
        uid,
        full_fds: !args.only_findings
            && !args.quiet
            && (args.json || args.fds || !args.pids.is_empty()),
        close_ns: args.close_cost_ns as f64,
        threads,
        arch: oflags::resolve(
            &args.procfs_root,
            is_own_procfs(&args.procfs_root),
            args.arch,
        )?,
        stop: Default::default(),
    })
}

/// Whether `root` is this process's own procfs (its `self` names this process).
fn is_own_procfs(root: &Path) -> bool {
    std::fs::read_link(root.join("self"))
        .is_ok_and(|l| l.as_os_str() == std::process::id().to_string().as_str())
}

/// The error for a `-p` process that exited or turned unreadable during the scan.
/// Why the fds of `pid` could not be read, and what to do: as root, the kernel's ptrace
/// access check refused (root is not told to become root).
fn unreadable(pid: u32) -> String {
    // SAFETY: geteuid cannot fail.
    unreadable_as(pid, unsafe { libc::geteuid() })
}

fn unreadable_as(pid: u32, euid: u32) -> String {
    if euid == 0 {
        format!(
            "cannot read the fds of PID {pid} even as root: the kernel's ptrace access check \
             refused (an LSM such as Yama or SELinux, or a process of a user namespace this one \
             does not own): scan it from its own namespace or allow it in the LSM"
        )
    } else {
        format!(
            "cannot read the fds of PID {pid} with these privileges: run fdaudit as its user or as root"
        )
    }
}

/// `--fail-on MIN` met: what failed, by severity, in one line.
fn fail_on_verdict(min: Severity, by_severity: &[usize; 5], code: u8) -> String {
    let at_or_above: Vec<String> = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
        Severity::Info,
    ]
    .into_iter()
    .filter(|s| *s >= min && by_severity[*s as usize] > 0)
    .map(|s| format!("{} {}", by_severity[s as usize], s.as_str()))
    .collect();
    let n: usize = by_severity[min as usize..].iter().sum();
    format!(
        "--fail-on {}: {} at or above it ({}): exit status {}",
        min.as_str(),
        crate::output::count(n as u64, "finding", "findings"),
        at_or_above.join(", "),
        code
    )
}

fn lost_pid(outcome: &Outcome) -> Option<String> {
    outcome
        .missing
        .first()
        .map(|p| format!("no process with PID {p}: it exited during the scan"))
        .or_else(|| outcome.unreadable_pids.first().map(|&p| unreadable(p)))
}

/// Scans with `cfg`, rendering each process on the workers and writing it to `out` as it
/// comes (`--sort pid`) or after sorting. Returns the outcome, what the end of the output
/// needs, the worst severity and the first write error.
fn scan_and_render(
    cfg: &ScanOptions,
    opts: RenderOptions,
    out: &mut (impl Write + Send),
    kept: Option<&ci::Kept>,
) -> anyhow::Result<(Outcome, Tail, Option<Severity>, Option<io::Error>)> {
    let users = std::sync::Mutex::new(report::Users::default());
    let mut write_err: Option<io::Error> = None;
    let mut buffered: Vec<Rendered> = Vec::new();
    let mut tail = Tail {
        rows: Vec::new(),
        human_findings: Vec::new(),
        n_findings: 0,
        hidden: 0,
        by_severity: [0; 5],
        folded: Vec::new(),
    };
    let mut folding = fold::NofileFold::default();
    let streaming = opts.sort == SortKey::Pid;
    // Findings are counted on the workers, before grouping for people and before
    // --min-severity: (worst, count, count per severity); those that fold, once folded.
    let counted = std::sync::Mutex::new((None::<Severity>, 0usize, [0usize; 5]));
    let outcome = {
        let stop = cfg.stop.clone();
        let emit = |mut r: Rendered| {
            if let Some(row) = r.row.take() {
                tail.rows.push((r.sort, row));
            }
            tail.human_findings.append(&mut r.findings);
            for f in r.folding.drain(..) {
                folding.add(f);
            }
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
            if let Some(k) = kept {
                k.add(&cfg.root, &r.findings);
            }
            {
                let mut g = counted.lock().unwrap_or_else(|p| p.into_inner());
                for f in r.findings.iter().filter(|f| !fold::folds(f)) {
                    g.0 = g.0.max(Some(f.severity));
                    g.1 += 1;
                    g.2[f.severity as usize] += 1;
                }
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
    let (mut worst, n, mut by_severity) = *counted.lock().unwrap_or_else(|p| p.into_inner());
    tail.folded = folding.into_findings();
    for f in tail.folded.iter().chain(&outcome.shared) {
        worst = worst.max(Some(f.severity));
        by_severity[f.severity as usize] += 1;
    }
    tail.n_findings = n + tail.folded.len() + outcome.shared.len();
    tail.by_severity = by_severity;
    tail.hidden = by_severity[..opts.min_severity as usize].iter().sum();
    Ok((outcome, tail, worst, write_err))
}

#[cfg(test)]
mod tests;
