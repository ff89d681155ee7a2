//! The scanner: walks a procfs tree with a few worker threads and hands one report per
//! process, in pid order, to the caller as soon as it is complete (streaming: memory follows
//! one process's fds, plus 24 bytes per fd kept for the parent/child share check).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;

use super::findings::{self, FdFacts, Finding, FindingKind, Severity};
use super::net::{self, NetTables};
use super::netns;
use super::parse::{self, NofileLimits, ProcStatus};
use crate::fdkind::FdKind;
use crate::output::{
    escape_bytes,
    text::{fields, Lossless},
};
use crate::procfs_util::at::{self, raw, NumName};

mod boundary;
mod creds;
mod inflight;
mod kind;
mod linkstat;
mod process;
mod renamers;
mod share;
mod socket;
mod table;
mod threads;

use share::ShareKey;

/// Errors that stop a scan before it starts (everything later is skipped and counted).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot open procfs root {path}")]
    Root {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot list processes in {path}")]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What to scan and how much to collect.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub root: PathBuf,
    /// Only these pids (`-p`); `None` for every process.
    pub pids: Option<Vec<u32>>,
    /// Only processes whose effective uid is this.
    pub uid: Option<u32>,
    /// Collect a record per fd (for `--fds`, `-p` and `--json`); without it only what the
    /// counts and findings need is read (no readlink or stat for close-on-exec fds).
    pub full_fds: bool,
    /// Per-close() cost in nanoseconds, for the NOFILE findings.
    pub close_ns: f64,
    /// Worker threads.
    pub threads: usize,
    /// The architecture whose `O_*` values the fdinfo flags under `root` hold.
    pub arch: crate::scan::oflags::Arch,
    /// Set to stop the workers early (e.g. the reader of the output went away).
    pub stop: Arc<AtomicBool>,
}

/// One fd, as listed with `--fds` and in `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct FdRecord {
    pub fd: u32,
    pub kind: FdKind,
    /// Socket address family ("inet", "inet6", "unix", "netlink", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<&'static str>,
    /// Socket protocol ("tcp", "udp", "stream", "dgram", ...); `protocol` in JSON, as in
    /// `trace`.
    #[serde(skip_serializing_if = "Option::is_none", rename = "protocol")]
    pub proto: Option<String>,
    /// The link target: exact bytes.
    #[serde(flatten)]
    pub target: Lossless<Vec<u8>, fields::Target>,
    /// Access mode: "r", "w", "rw", "path"; `null` when fdinfo was unreadable.
    #[serde(rename = "access")]
    pub mode: Option<&'static str>,
    /// From fdinfo `flags`; `null` when fdinfo was unreadable or malformed.
    pub cloexec: Option<bool>,
    #[serde(flatten)]
    pub local: Option<Lossless<Vec<u8>, fields::Local>>,
    #[serde(flatten)]
    pub remote: Option<Lossless<Vec<u8>, fields::Remote>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub listening: bool,
    /// A socket's network namespace (inode), when it is not the one the process is in now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns: Option<u64>,
    /// A socket whose table entry could not be read in its own namespace: whether it is
    /// listening is not known (its finding takes the worst it could be).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unresolved: bool,
    /// The kernel would not print the whole path (past PATH_MAX): `target` is not it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub target_partial: bool,
    /// The thread whose own fd table holds this fd, when `/proc/PID/fd` does not show it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Who besides root can rename an entry on the path (looked up for inheritable fds
    /// whose path does not look secret): the finding does not rest on a name they chose.
    #[serde(skip)]
    pub renamers: Vec<renamers::Renamer>,
    /// A unix socket's fds in flight (fdinfo's `scm_fds:`), where the kernel says.
    #[serde(skip)]
    pub in_flight: Option<u32>,
    /// An inheritable io_uring fd's registered files.
    #[serde(skip)]
    pub registered: Option<findings::Registered>,
    /// Why the process's own credentials could not have opened this inheritable fd's file
    /// (`creds.rs`): its finding is critical.
    #[serde(skip)]
    pub beyond_creds: Option<String>,
}

/// One process's result.
#[derive(Debug, Clone)]
pub struct ProcReport {
    pub pid: u32,
    pub ppid: Option<u32>,
    /// The exact bytes of the process name.
    pub comm: Vec<u8>,
    pub uid: Option<u32>,
    pub nofile: Option<NofileLimits>,
    /// Open fds seen (vanished ones not counted).
    pub fd_count: u32,
    pub max_fd: Option<u32>,
    /// Fds without close-on-exec, 0-2 included.
    pub no_cloexec: u32,
    /// Fds >= 3 without close-on-exec: what a child that does not close fds inherits.
    pub inheritable: u32,
    /// cgroup and container (from PID/cgroup) and pid in its own namespace (from NSpid).
    pub identity: crate::cgroup::Identity,
    /// Fds listed but gone before they could be read.
    pub vanished_fds: u32,
    /// Fds whose fdinfo was malformed or unreadable (close-on-exec unknown).
    pub unknown_fds: u32,
    /// Empty unless `ScanOptions::full_fds`.
    pub fds: Vec<FdRecord>,
    /// This process's findings, worst first (shared-description findings come at the end
    /// of the scan, in `Outcome::shared`).
    pub findings: Vec<Finding>,
    /// File-access credentials from `status` (fsuid, fsgid, groups, CapEff), for the
    /// check of `creds.rs`.
    pub creds: Option<parse::Creds>,
}

impl ProcReport {
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// ScanTotals of a scan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScanTotals {
    pub processes: u64,
    #[serde(rename = "fd_count")]
    pub fds: u64,
    /// Processes whose fds could not be read (permissions).
    pub unreadable: u64,
    /// Processes that exited during the scan.
    pub vanished: u64,
    #[serde(rename = "vanished_fd_count")]
    pub vanished_fds: u64,
    /// Parent/child pairs not compared because kcmp was refused.
    pub kcmp_refused: u64,
    pub kcmp_calls: u64,
    /// procfs files refused or unreadable: not a regular file (a FIFO, a device), larger
    /// than the read limit, or failing to read (`limits`, `fdinfo/N`, `net/*` tables; a
    /// process whose `status` fails counts under `unreadable`).
    pub unreadable_files: u64,
    /// The scan was cut short by SIGINT or SIGTERM: the counts cover what was done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// The end of a scan: totals and the parent/child share findings.
#[derive(Debug, Default)]
pub struct Outcome {
    pub totals: ScanTotals,
    pub shared: Vec<Finding>,
    /// `-p` pids that did not exist.
    pub missing: Vec<u32>,
    /// `-p` pids whose fds could not be read.
    pub unreadable_pids: Vec<u32>,
    /// Every process whose fds could not be read, as (pid, comm), in pid order (`?` when
    /// even its status was unreadable).
    pub unreadable_procs: Vec<(u32, String)>,
}

struct Header {
    pid: u32,
    status: ProcStatus,
}

enum Skip {
    Vanished,
    Denied,
}

fn is_vanished(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

fn skip_for(e: &io::Error) -> Skip {
    if is_vanished(e) {
        Skip::Vanished
    } else {
        Skip::Denied
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum NsKey {
    Ns(u64),
    Pid(u32),
}

struct Scanner<'a> {
    cfg: &'a ScanOptions,
    root: OwnedFd,
    /// `root` is this process's own /proc: kcmp, stat and xattrs on live fds are meaningful.
    live: bool,
    net: Mutex<HashMap<NsKey, Arc<OnceLock<Arc<NetTables>>>>>,
    keys: Mutex<HashMap<u32, Vec<ShareKey>>>,
    /// `net/*` tables that could not be read.
    unreadable_net: AtomicU64,
    /// The scanner's own mounts and mount namespace (the boundary rule).
    own: boundary::OwnMounts,
    /// This kernel prints `scm_fds:` in the fdinfo of unix sockets (5.14+), so fdinfo
    /// alone tells a unix socket from any other (live only).
    scm_fds: bool,
    /// This kernel's io_uring fdinfo names registered files by path (`inflight.rs`),
    /// checked at the first inheritable ring (live only).
    ring_paths: OnceLock<bool>,
    /// The scanner's own network namespace and its unix sockets (`unixdiag.rs`), listed at
    /// the first unix socket that would be asked for its namespace (live only); `None`
    /// when either could not be read.
    unix_here: OnceLock<Option<(u64, crate::scan::unixdiag::UnixInodes)>>,
    /// Network namespaces met, by cookie (`SO_NETNS_COOKIE`): inode number (live only).
    cookies: Mutex<HashMap<u64, u64>>,
}

/// Whether this kernel's fdinfo of a unix socket has its `scm_fds:` line (a socketpair of
/// our own, read back).
fn kernel_prints_scm_fds() -> bool {
    let mut sv = [0; 2];
    // SAFETY: sv is valid for two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } != 0
    {
        return false;
    }
    // SAFETY: both fds were just created and are owned here only.
    let _pair = unsafe { [OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])] };
    let mut buf = [0u8; 256];
    let name = CString::new(format!("/proc/self/fdinfo/{}", sv[0])).expect("no NUL");
    match at::read_head_at(libc::AT_FDCWD, &name, &mut buf) {
        Ok(n) => parse::parse_fdinfo(&buf[..n]).is_some_and(|i| i.scm_fds),
        Err(_) => false,
    }
}

impl Scanner<'_> {
    /// An fdinfo file's fields, its flags in this build's `O_*` values (a tree captured on
    /// another architecture holds that one's).
    fn fdinfo(&self, data: &[u8]) -> Option<parse::FdinfoEntry> {
        let host = crate::scan::oflags::Arch::host();
        parse::parse_fdinfo(data).map(|mut i| {
            i.flags = self.cfg.arch.convert(i.flags, host);
            i
        })
    }
}

/// Per-worker buffers, reused for every process and fd.
struct Scratch {
    dents: Vec<u8>,
    info: [u8; 1024],
    link: Vec<u8>,
    file: Vec<u8>,
    fds: Vec<u32>,
    /// (mnt_id, "socket" | "pipe") learned by `learn_pseudo`.
    pseudo: Vec<(u32, &'static str)>,
    /// The current fd link's `statx`, made once for whoever needs it first.
    link_stat: kind::LinkStat,
    totals: ScanTotals,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dents: vec![0; 64 * 1024],
            info: [0; 1024],
            link: vec![0; 4096],
            file: Vec::with_capacity(8192),
            fds: Vec::new(),
            pseudo: Vec::new(),
            link_stat: kind::LinkStat::default(),
            totals: ScanTotals::default(),
        }
    }
}

/// Is `root` the procfs of this process's pid namespace?
fn is_live(root: RawFd) -> bool {
    let mut buf = [0u8; 32];
    match at::readlinkat(root, c"self", &mut buf) {
        Ok(n) => at::parse_u32(&buf[..n]) == Some(std::process::id()),
        Err(_) => false,
    }
}

/// Scans `cfg.root`. `render` runs on the worker threads for each process report; `emit`
/// gets the rendered results one at a time, in pid order, as soon as they are ready.
pub fn scan<R: Send>(
    cfg: &ScanOptions,
    render: impl Fn(ProcReport) -> R + Sync,
    mut emit: impl FnMut(R) + Send,
) -> Result<Outcome, ScanError> {
    let c_root = CString::new(cfg.root.as_os_str().as_bytes()).map_err(|e| ScanError::Root {
        path: cfg.root.clone(),
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
    })?;
    let root = at::open_dir_path(libc::AT_FDCWD, &c_root).map_err(|source| ScanError::Root {
        path: cfg.root.clone(),
        source,
    })?;
    let live = is_live(raw(&root));
    let own = Scanner::own_mounts(raw(&root), live);
    let sc = Scanner {
        cfg,
        live,
        cookies: Mutex::new(socket::own_cookie(raw(&root), live).into_iter().collect()),
        root,
        net: Mutex::new(HashMap::new()),
        keys: Mutex::new(HashMap::new()),
        unreadable_net: AtomicU64::new(0),
        scm_fds: live && kernel_prints_scm_fds(),
        ring_paths: OnceLock::new(),
        unix_here: OnceLock::new(),
        own,
    };
    let mut outcome = Outcome::default();
    let headers = sc.headers(&mut outcome)?;

    let next = AtomicUsize::new(0);
    let denied = Mutex::new(Vec::new());
    let order = Mutex::new((0usize, BTreeMap::<usize, Option<R>>::new(), &mut emit));
    let threads = cfg.threads.clamp(1, headers.len().max(1));
    let worker_totals: Vec<ScanTotals> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut scratch = Scratch::new();
                    loop {
                        if sc.stopped() {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(h) = headers.get(i) else { break };
                        let out = sc.scan_one(h, &mut scratch, &denied).map(&render);
                        let mut g = order.lock().unwrap_or_else(|p| p.into_inner());
                        let (next_out, pending, emit) = &mut *g;
                        pending.insert(i, out);
                        while let Some(r) = pending.remove(next_out) {
                            if let Some(r) = r {
                                emit(r);
                            }
                            *next_out += 1;
                        }
                    }
                    scratch.totals
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("scan worker panicked"))
            .collect()
    });
    for t in worker_totals {
        outcome.totals.add_worker(&t);
    }
    outcome.totals.unreadable_files += sc.unreadable_net.load(Ordering::Relaxed);
    let mut denied = denied.into_inner().unwrap_or_else(|p| p.into_inner());
    outcome.unreadable_procs.append(&mut denied);
    outcome.unreadable_procs.sort_unstable();
    if cfg.pids.is_some() {
        outcome.unreadable_pids = outcome.unreadable_procs.iter().map(|p| p.0).collect();
    }
    sc.share_check(&headers, &mut outcome);
    outcome.totals.interrupted = crate::signals::interrupted();
    Ok(outcome)
}

impl ScanTotals {
    /// Adds what one worker counted (the share check's counts are added apart).
    fn add_worker(&mut self, t: &ScanTotals) {
        self.processes += t.processes;
        self.fds += t.fds;
        self.unreadable += t.unreadable;
        self.vanished += t.vanished;
        self.vanished_fds += t.vanished_fds;
        self.unreadable_files += t.unreadable_files;
    }
}

impl Scanner<'_> {
    /// Whether to stop early: the output's reader went away, or a signal came.
    fn stopped(&self) -> bool {
        self.cfg.stop.load(Ordering::Relaxed) || crate::signals::interrupted()
    }

    /// Scans one process on a worker, counting it in the worker's totals; `None` when it
    /// vanished or could not be read (a `-p` pid that could not be read is remembered).
    fn scan_one(
        &self,
        h: &Header,
        scratch: &mut Scratch,
        denied: &Mutex<Vec<(u32, String)>>,
    ) -> Option<ProcReport> {
        match self.scan_process(h, scratch) {
            Ok(r) => {
                scratch.totals.processes += 1;
                scratch.totals.fds += u64::from(r.fd_count);
                scratch.totals.vanished_fds += u64::from(r.vanished_fds);
                Some(r)
            }
            Err(Skip::Vanished) => {
                scratch.totals.vanished += 1;
                None
            }
            Err(Skip::Denied) => {
                scratch.totals.unreadable += 1;
                let comm = escape_bytes(h.status.name.as_deref().unwrap_or(b"?"));
                denied
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((h.pid, comm));
                None
            }
        }
    }

    /// The processes to scan, in pid order, with their status (comm, ppid, uid).
    fn headers(&self, outcome: &mut Outcome) -> Result<Vec<Header>, ScanError> {
        let mut pids = match &self.cfg.pids {
            Some(p) => p.clone(),
            None => {
                let dir = at::openat(raw(&self.root), c".", libc::O_RDONLY | libc::O_DIRECTORY)
                    .and_then(|d| {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut v = Vec::new();
                        at::list_numeric(raw(&d), &mut buf, &mut v).map(|()| v)
                    });
                dir.map_err(|source| ScanError::List {
                    path: self.cfg.root.clone(),
                    source,
                })?
            }
        };
        pids.sort_unstable();
        pids.dedup();
        if self.live && self.cfg.pids.is_none() {
            // fdaudit itself: its own transient procfs fds are not worth reporting.
            pids.retain(|&p| p != std::process::id());
        }
        let mut out = Vec::with_capacity(pids.len());
        let mut buf = Vec::with_capacity(4096);
        for pid in pids {
            if self.stopped() {
                break;
            }
            let path = CString::new(format!("{pid}/status")).expect("no NUL in a number");
            match at::read_file_at(raw(&self.root), &path, &mut buf) {
                Ok(()) => {}
                Err(e) if is_vanished(&e) => {
                    if self.cfg.pids.is_some() {
                        outcome.missing.push(pid);
                    } else {
                        outcome.totals.vanished += 1;
                    }
                    continue;
                }
                Err(_) => {
                    outcome.totals.unreadable += 1;
                    outcome.unreadable_procs.push((pid, "?".into()));
                    continue;
                }
            }
            let status = parse::parse_status(&buf);
            if status.kthread && self.cfg.pids.is_none() {
                continue;
            }
            if let Some(uid) = self.cfg.uid {
                if status.euid != Some(uid) {
                    continue;
                }
            }
            out.push(Header { pid, status });
        }
        Ok(out)
    }

    /// The tables of the namespace process `pid` is in now (its `ns/net`), and that
    /// namespace's inode when known.
    fn net_tables(&self, pid: u32, pid_dir: RawFd) -> (Option<u64>, Arc<NetTables>) {
        let mut link = [0u8; 64];
        let ns = match at::readlinkat(pid_dir, c"ns/net", &mut link) {
            Ok(n) => parse::bracket_inode(&link[..n]),
            Err(_) => None,
        };
        let key = ns.map_or(NsKey::Pid(pid), NsKey::Ns);
        let cell = {
            let mut m = self.net.lock().unwrap_or_else(|p| p.into_inner());
            m.entry(key).or_default().clone()
        };
        if let Some(t) = cell.get() {
            return (ns, t.clone());
        }
        // On a live procfs, root/net is the scanner's own namespace: never a stand-in for
        // another process's (it may have exited between the ns/net read and this open). A
        // failure is not cached: the next process of that namespace tries again.
        let dir = at::open_dir_path(pid_dir, c"net").or_else(|e| {
            if self.live {
                Err(e)
            } else {
                at::open_dir_path(raw(&self.root), c"net")
            }
        });
        let t = match dir {
            Ok(d) => cell
                .get_or_init(|| {
                    let t = NetTables::load(raw(&d));
                    self.unreadable_net
                        .fetch_add(u64::from(t.unreadable), Ordering::Relaxed);
                    Arc::new(t)
                })
                .clone(),
            Err(_) => {
                let mut t = NetTables::default();
                t.unreadable = 1;
                Arc::new(t)
            }
        };
        (ns, t)
    }
}
/// The procfs root as given, for messages.
pub fn display_root(p: &Path) -> String {
    escape_bytes(p.as_os_str().as_bytes())
}
