//! The scanner: walks a procfs tree with a few worker threads and hands one report per
//! process, in pid order, to the caller as soon as it is complete (streaming: memory follows
//! one process's fds, plus 24 bytes per fd kept for the parent/child share check).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;

use super::findings::{self, FdFacts, Finding, FindingKind, Severity};
use super::net::{NetTables, SockInfo};
use super::parse::{self, NofileLimits, Status};
use super::sys::{self, raw, NumName};
use crate::fdkind::FdKind;
use crate::output::escape_bytes;

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
pub struct Config {
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
    /// Socket protocol ("tcp", "udp", "stream", "dgram", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// The link target, control characters escaped.
    pub target: String,
    /// Access mode: "r", "w", "rw", "path"; `null` when fdinfo was unreadable.
    pub mode: Option<&'static str>,
    /// From fdinfo `flags`; `null` when fdinfo was unreadable or malformed.
    pub cloexec: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub listening: bool,
}

/// One process's result.
#[derive(Debug, Clone)]
pub struct ProcReport {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub comm: String,
    pub uid: Option<u32>,
    pub nofile: Option<NofileLimits>,
    /// Open fds seen (vanished ones not counted).
    pub fd_count: u32,
    pub max_fd: Option<u32>,
    /// Fds without close-on-exec, 0-2 included.
    pub no_cloexec: u32,
    /// Fds listed but gone before they could be read.
    pub vanished_fds: u32,
    /// Fds whose fdinfo was malformed or unreadable (close-on-exec unknown).
    pub unknown_fds: u32,
    /// Empty unless `Config::full_fds`.
    pub fds: Vec<FdRecord>,
    /// This process's findings, worst first (shared-description findings come at the end
    /// of the scan, in `Outcome::shared`).
    pub findings: Vec<Finding>,
}

impl ProcReport {
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// Totals of a scan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub processes: u64,
    pub fds: u64,
    /// Processes whose fds could not be read (permissions).
    pub unreadable: u64,
    /// Processes that exited during the scan.
    pub vanished: u64,
    pub vanished_fds: u64,
    /// Parent/child pairs not compared because kcmp was refused.
    pub kcmp_refused: u64,
    pub kcmp_calls: u64,
}

/// The end of a scan: totals and the parent/child share findings.
#[derive(Debug, Default)]
pub struct Outcome {
    pub totals: Totals,
    pub shared: Vec<Finding>,
    /// `-p` pids that did not exist.
    pub missing: Vec<u32>,
    /// `-p` pids whose fds could not be read.
    pub unreadable_pids: Vec<u32>,
}

/// For the share check: an fd's file identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    mnt: u32,
    ino: u64,
    flags: u32,
    fd: u32,
}

impl Key {
    /// The identity of `fd` from its fdinfo, when it names the mount and inode.
    fn of(i: &parse::FdInfo, fd: u32) -> Option<Key> {
        Some(Key {
            mnt: i.mnt_id?,
            ino: i.ino?,
            flags: i.flags,
            fd,
        })
    }
}

struct Header {
    pid: u32,
    status: Status,
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
    cfg: &'a Config,
    root: OwnedFd,
    /// `root` is this process's own /proc: kcmp, stat and xattrs on live fds are meaningful.
    live: bool,
    net: Mutex<HashMap<NsKey, Arc<OnceLock<Arc<NetTables>>>>>,
    keys: Mutex<HashMap<u32, Vec<Key>>>,
}

/// Per-worker buffers, reused for every process and fd.
struct Scratch {
    dents: Vec<u8>,
    info: [u8; 1024],
    link: Vec<u8>,
    file: Vec<u8>,
    fds: Vec<u32>,
    modes: HashMap<(u32, u64), u32>,
    /// (mnt_id, "socket" | "pipe") learned by `learn_pseudo`.
    pseudo: Vec<(u32, &'static str)>,
    totals: Totals,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dents: vec![0; 64 * 1024],
            info: [0; 1024],
            link: vec![0; 4096],
            file: Vec::with_capacity(8192),
            fds: Vec::new(),
            modes: HashMap::new(),
            pseudo: Vec::new(),
            totals: Totals::default(),
        }
    }
}

/// Is `root` the procfs of this process's pid namespace?
fn is_live(root: RawFd) -> bool {
    let mut buf = [0u8; 32];
    match sys::readlinkat(root, c"self", &mut buf) {
        Ok(n) => sys::parse_u32(&buf[..n]) == Some(std::process::id()),
        Err(_) => false,
    }
}

/// Scans `cfg.root`. `render` runs on the worker threads for each process report; `emit`
/// gets the rendered results one at a time, in pid order, as soon as they are ready.
pub fn scan<R: Send>(
    cfg: &Config,
    render: impl Fn(ProcReport) -> R + Sync,
    mut emit: impl FnMut(R) + Send,
) -> Result<Outcome, ScanError> {
    let c_root = CString::new(cfg.root.as_os_str().as_bytes()).map_err(|e| ScanError::Root {
        path: cfg.root.clone(),
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
    })?;
    let root = sys::open_dir_path(libc::AT_FDCWD, &c_root).map_err(|source| ScanError::Root {
        path: cfg.root.clone(),
        source,
    })?;
    let live = is_live(raw(&root));
    let sc = Scanner {
        cfg,
        live,
        root,
        net: Mutex::new(HashMap::new()),
        keys: Mutex::new(HashMap::new()),
    };
    let mut outcome = Outcome::default();
    let headers = sc.headers(&mut outcome)?;

    let next = AtomicUsize::new(0);
    let denied = Mutex::new(Vec::new());
    let order = Mutex::new((0usize, BTreeMap::<usize, Option<R>>::new(), &mut emit));
    let threads = cfg.threads.clamp(1, headers.len().max(1));
    let worker_totals: Vec<Totals> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut scratch = Scratch::new();
                    loop {
                        if cfg.stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(h) = headers.get(i) else { break };
                        let out = match sc.scan_process(h, &mut scratch) {
                            Ok(r) => {
                                scratch.totals.processes += 1;
                                scratch.totals.fds += u64::from(r.fd_count);
                                scratch.totals.vanished_fds += u64::from(r.vanished_fds);
                                Some(render(r))
                            }
                            Err(Skip::Vanished) => {
                                scratch.totals.vanished += 1;
                                None
                            }
                            Err(Skip::Denied) => {
                                scratch.totals.unreadable += 1;
                                if cfg.pids.is_some() {
                                    denied.lock().unwrap_or_else(|p| p.into_inner()).push(h.pid);
                                }
                                None
                            }
                        };
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
        let o = &mut outcome.totals;
        o.processes += t.processes;
        o.fds += t.fds;
        o.unreadable += t.unreadable;
        o.vanished += t.vanished;
        o.vanished_fds += t.vanished_fds;
    }
    outcome.unreadable_pids = denied.into_inner().unwrap_or_else(|p| p.into_inner());
    outcome.unreadable_pids.sort_unstable();
    sc.share_check(&headers, &mut outcome);
    Ok(outcome)
}

impl Scanner<'_> {
    /// The processes to scan, in pid order, with their status (comm, ppid, uid).
    fn headers(&self, outcome: &mut Outcome) -> Result<Vec<Header>, ScanError> {
        let mut pids = match &self.cfg.pids {
            Some(p) => p.clone(),
            None => {
                let dir = sys::openat(raw(&self.root), c".", libc::O_RDONLY | libc::O_DIRECTORY)
                    .and_then(|d| {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut v = Vec::new();
                        sys::list_numeric(raw(&d), &mut buf, &mut v).map(|()| v)
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
            let path = CString::new(format!("{pid}/status")).expect("no NUL in a number");
            match sys::read_file_at(raw(&self.root), &path, &mut buf) {
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

    fn net_tables(&self, pid: u32, pid_dir: RawFd) -> Arc<NetTables> {
        let mut link = [0u8; 64];
        let key = match sys::readlinkat(pid_dir, c"ns/net", &mut link) {
            Ok(n) => parse::bracket_inode(&link[..n]).map_or(NsKey::Pid(pid), NsKey::Ns),
            Err(_) => NsKey::Pid(pid),
        };
        let cell = {
            let mut m = self.net.lock().unwrap_or_else(|p| p.into_inner());
            m.entry(key).or_default().clone()
        };
        if let Some(t) = cell.get() {
            return t.clone();
        }
        // On a live procfs, root/net is the scanner's own namespace: never a stand-in for
        // another process's (it may have exited between the ns/net read and this open). A
        // failure is not cached: the next process of that namespace tries again.
        let dir = sys::open_dir_path(pid_dir, c"net").or_else(|e| {
            if self.live {
                Err(e)
            } else {
                sys::open_dir_path(raw(&self.root), c"net")
            }
        });
        match dir {
            Ok(d) => cell
                .get_or_init(|| Arc::new(NetTables::load(raw(&d))))
                .clone(),
            Err(_) => Arc::new(NetTables::default()),
        }
    }

    fn scan_process(&self, h: &Header, s: &mut Scratch) -> Result<ProcReport, Skip> {
        let pid = h.pid;
        let pname = NumName::new(u64::from(pid));
        let pid_dir =
            sys::open_dir_path(raw(&self.root), pname.as_cstr()).map_err(|e| skip_for(&e))?;
        let fd_dir = sys::openat(raw(&pid_dir), c"fd", libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| skip_for(&e))?;
        s.fds.clear();
        sys::list_numeric(raw(&fd_dir), &mut s.dents, &mut s.fds).map_err(|e| skip_for(&e))?;
        s.fds.sort_unstable();
        let fdinfo_dir = sys::open_dir_path(raw(&pid_dir), c"fdinfo").map_err(|e| skip_for(&e))?;
        let nofile = match sys::read_file_at(raw(&pid_dir), c"limits", &mut s.file) {
            Ok(()) => parse::parse_limits(&s.file),
            Err(e) if is_vanished(&e) => return Err(Skip::Vanished),
            Err(_) => None,
        };
        let comm = escape_bytes(h.status.name.as_deref().unwrap_or(b"?"));
        let mut rep = ProcReport {
            pid,
            ppid: h.status.ppid,
            comm,
            uid: h.status.euid,
            nofile,
            fd_count: 0,
            max_fd: None,
            no_cloexec: 0,
            vanished_fds: 0,
            unknown_fds: 0,
            fds: Vec::with_capacity(if self.cfg.full_fds { s.fds.len() } else { 0 }),
            findings: Vec::new(),
        };
        if let Some(soft) = nofile.and_then(|l| l.soft) {
            if let Some((sev, reason)) = findings::nofile(soft, self.cfg.close_ns) {
                rep.findings.push(Finding::new(
                    pid,
                    &rep.comm,
                    None,
                    sev,
                    FindingKind::NofileLimit,
                    0,
                    reason,
                ));
            }
        }
        let mut keys = Vec::with_capacity(s.fds.len());
        let mut tables: Option<Arc<NetTables>> = None;
        let fds = std::mem::take(&mut s.fds);
        for &fd in &fds {
            let name = NumName::new(u64::from(fd));
            let info = match sys::read_head_at(raw(&fdinfo_dir), name.as_cstr(), &mut s.info) {
                Ok(n) => parse::parse_fdinfo(&s.info[..n]),
                Err(e) if is_vanished(&e) => {
                    rep.vanished_fds += 1;
                    continue;
                }
                // Access is checked per process (ptrace read), so one refusal means all.
                Err(e) if is_denied(&e) => return Err(Skip::Denied),
                Err(_) => None,
            };
            let info = info.map(|i| self.with_ino(i, raw(&fd_dir), name.as_cstr()));
            let cloexec = info.map(|i| i.cloexec());
            let inheritable = cloexec == Some(false);
            let needs_link = self.cfg.full_fds || (inheritable && fd >= 3);
            let mut record = None;
            if needs_link {
                let synthesized = match (self.live, info.and_then(|i| Some((i.mnt_id?, i.ino?)))) {
                    (true, Some((mnt, ino))) => s.pseudo.iter().find(|p| p.0 == mnt).map(|p| {
                        use std::io::Write as _;
                        let mut cur = io::Cursor::new(&mut s.link[..]);
                        let _ = write!(cur, "{}:[{ino}]", p.1);
                        cur.position() as usize
                    }),
                    _ => None,
                };
                let n = match synthesized {
                    Some(n) => n,
                    None => match sys::readlinkat(raw(&fd_dir), name.as_cstr(), &mut s.link) {
                        Ok(n) => {
                            self.learn_pseudo(&s.link[..n], info, &mut s.pseudo);
                            n
                        }
                        Err(e) if is_vanished(&e) => {
                            rep.vanished_fds += 1;
                            continue;
                        }
                        Err(e) if is_denied(&e) => return Err(Skip::Denied),
                        Err(_) => 0,
                    },
                };
                let target = &s.link[..n];
                let kind = self.kind_of(&fd_dir, &name, target, info, &mut s.modes);
                let sock = if kind == FdKind::Socket {
                    let t = tables.get_or_insert_with(|| self.net_tables(pid, raw(&pid_dir)));
                    let target = &s.link[..n];
                    match parse::bracket_inode(target).and_then(|ino| t.by_inode.get(&ino)) {
                        Some(si) => Some(SockRef::Table(si)),
                        None if self.live => {
                            let path = self.cfg.root.join(format!("{pid}/fd/{fd}"));
                            CString::new(path.as_os_str().as_bytes())
                                .ok()
                                .and_then(|p| super::net::sockprotoname(&p))
                                .map(SockRef::Proto)
                        }
                        None => None,
                    }
                } else {
                    None
                };
                let target = &s.link[..n];
                record = Some(self.fd_record(fd, kind, target, info, sock));
            }
            rep.fd_count += 1;
            rep.max_fd = Some(fd);
            match cloexec {
                Some(false) => rep.no_cloexec += 1,
                None => rep.unknown_fds += 1,
                Some(true) => {}
            }
            if let Some(k) = info.as_ref().and_then(|i| Key::of(i, fd)) {
                keys.push(k);
            }
            if let Some(r) = record {
                if inheritable && fd >= 3 {
                    let facts = FdFacts {
                        fd,
                        kind: r.kind,
                        target: &r.target,
                        raw_target: r.target.as_bytes(),
                        writable: info.is_some_and(|i| i.writable()),
                        listening: r.listening.then(|| r.local.as_deref().unwrap_or(&r.target)),
                        proto: r.proto.as_deref(),
                    };
                    let (sev, rank, reason) = findings::inheritable(&facts);
                    rep.findings.push(Finding::new(
                        pid,
                        &rep.comm,
                        Some(fd),
                        sev,
                        FindingKind::InheritableFd,
                        rank,
                        reason,
                    ));
                }
                if self.cfg.full_fds {
                    rep.fds.push(r);
                }
            }
        }
        s.fds = fds;
        rep.findings.sort_by(Finding::order);
        keys.sort_unstable();
        keys.shrink_to_fit();
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, keys);
        Ok(rep)
    }

    /// On a live procfs, remembers the mount of sockfs / pipefs from a link text like
    /// `socket:[N]` whose N is fdinfo's inode: every other fd on that mount has the link
    /// text `socket:[ino]` (the kernel's d_dname for those filesystems, and those internal
    /// mounts are never unmounted, so their ids are not reused), so its readlink is skipped.
    fn learn_pseudo(
        &self,
        target: &[u8],
        info: Option<parse::FdInfo>,
        pseudo: &mut Vec<(u32, &'static str)>,
    ) {
        if !self.live {
            return;
        }
        let Some((mnt, ino)) = info.and_then(|i| Some((i.mnt_id?, i.ino?))) else {
            return;
        };
        let prefix = if target.starts_with(b"socket:[") {
            "socket"
        } else if target.starts_with(b"pipe:[") {
            "pipe"
        } else {
            return;
        };
        if parse::bracket_inode(target) == Some(ino) && !pseudo.iter().any(|p| p.0 == mnt) {
            pseudo.push((mnt, prefix));
        }
    }

    /// Kind from the link text; a path is stat'ed (live only, cached by file identity)
    /// unless fdinfo's O_DIRECTORY already says it is a directory.
    fn kind_of(
        &self,
        fd_dir: &OwnedFd,
        name: &NumName,
        target: &[u8],
        info: Option<parse::FdInfo>,
        modes: &mut HashMap<(u32, u64), u32>,
    ) -> FdKind {
        let base = FdKind::from_link(target, None);
        if !matches!(base, FdKind::Regular | FdKind::Device) {
            return base;
        }
        // O_DIRECTORY in fdinfo means a directory, except that O_TMPFILE files carry it too
        // (O_TMPFILE = __O_TMPFILE | O_DIRECTORY): those fall through to the stat.
        const O_TMPFILE_BIT: u32 = 0o20000000;
        if info.is_some_and(|i| {
            i.flags & libc::O_DIRECTORY as u32 != 0 && i.flags & O_TMPFILE_BIT == 0
        }) {
            return FdKind::Directory;
        }
        if !self.live {
            return base;
        }
        let key = info.and_then(|i| Some((i.mnt_id?, i.ino?)));
        if let Some(m) = key.and_then(|k| modes.get(&k)) {
            return FdKind::from_link(target, Some(*m));
        }
        match sys::stat_mode_at(raw(fd_dir), name.as_cstr()) {
            Ok(mode) => {
                if let Some(k) = key {
                    if modes.len() > 100_000 {
                        modes.clear();
                    }
                    modes.insert(k, mode);
                }
                FdKind::from_link(target, Some(mode))
            }
            Err(_) => base,
        }
    }

    fn fd_record(
        &self,
        fd: u32,
        kind: FdKind,
        target: &[u8],
        info: Option<parse::FdInfo>,
        sock: Option<SockRef<'_>>,
    ) -> FdRecord {
        let mut r = FdRecord {
            fd,
            kind,
            family: None,
            proto: None,
            target: escape_target(target),
            mode: info.map(|i| i.access()),
            cloexec: info.map(|i| i.cloexec()),
            local: None,
            remote: None,
            listening: false,
        };
        match sock {
            Some(SockRef::Table(si)) => {
                r.family = Some(si.family);
                r.proto = Some(si.proto.to_owned());
                r.local = si.local.as_ref().map(|a| a.render());
                r.remote = si.remote.as_ref().map(|a| a.render());
                r.listening = si.listening;
            }
            Some(SockRef::Proto(p)) => {
                r.family = Some(match p.as_str() {
                    "tcp" | "udp" | "raw" | "ping" | "sctp" | "udplite" => "inet",
                    "tcpv6" | "udpv6" | "rawv6" | "pingv6" | "sctpv6" | "udplitev6" => "inet6",
                    "unix" => "unix",
                    "netlink" => "netlink",
                    "packet" => "packet",
                    "vsock" => "vsock",
                    _ => "other",
                });
                // The family says v4 or v6; the protocol is named as in the net tables.
                r.proto = Some(match p.strip_suffix("v6") {
                    Some(base) if r.family == Some("inet6") => base.to_owned(),
                    _ => p,
                });
            }
            None => {}
        }
        r
    }

    /// Keys of a process outside the scanned set (a `-p` process's parent or child).
    fn load_keys(&self, pid: u32, s: &mut Scratch) -> Option<Vec<Key>> {
        let pname = NumName::new(u64::from(pid));
        let pid_dir = sys::open_dir_path(raw(&self.root), pname.as_cstr()).ok()?;
        let fd_dir = sys::openat(raw(&pid_dir), c"fd", libc::O_RDONLY | libc::O_DIRECTORY).ok()?;
        s.fds.clear();
        sys::list_numeric(raw(&fd_dir), &mut s.dents, &mut s.fds).ok()?;
        let fdinfo_dir = sys::open_dir_path(raw(&pid_dir), c"fdinfo").ok()?;
        let mut keys = Vec::new();
        for &fd in &s.fds {
            let name = NumName::new(u64::from(fd));
            let Ok(n) = sys::read_head_at(raw(&fdinfo_dir), name.as_cstr(), &mut s.info) else {
                continue;
            };
            if let Some(k) = parse::parse_fdinfo(&s.info[..n])
                .map(|i| self.with_ino(i, raw(&fd_dir), name.as_cstr()))
                .and_then(|i| Key::of(&i, fd))
            {
                keys.push(k);
            }
        }
        keys.sort_unstable();
        Some(keys)
    }

    /// `info` with its inode number: kernels before 5.14 leave `ino:` out of fdinfo, so on
    /// a live procfs it is read with a stat of the fd link (`name` in `fd_dir`).
    fn with_ino(&self, mut info: parse::FdInfo, fd_dir: RawFd, name: &CStr) -> parse::FdInfo {
        if info.ino.is_none() && self.live {
            info.ino = sys::stat_ino_at(fd_dir, name).ok();
        }
        info
    }

    fn comm_of(&self, pid: u32, headers: &HashMap<u32, &Header>) -> String {
        if let Some(h) = headers.get(&pid) {
            return escape_bytes(h.status.name.as_deref().unwrap_or(b"?"));
        }
        let mut buf = Vec::new();
        let path = CString::new(format!("{pid}/status")).expect("no NUL in a number");
        match sys::read_file_at(raw(&self.root), &path, &mut buf) {
            Ok(()) => escape_bytes(parse::parse_status(&buf).name.as_deref().unwrap_or(b"?")),
            Err(_) => "?".into(),
        }
    }

    /// Finds fds >= 3 that a process shares with its parent as one open file description:
    /// candidates by (mount, inode), confirmed by kcmp(KCMP_FILE) on a live procfs; on a
    /// fixture tree, same (mount, inode, flags) is reported as unverified.
    fn share_check(&self, headers: &[Header], outcome: &mut Outcome) {
        let mut keys = std::mem::take(&mut *self.keys.lock().unwrap_or_else(|p| p.into_inner()));
        let by_pid: HashMap<u32, &Header> = headers.iter().map(|h| (h.pid, h)).collect();
        let mut pairs: Vec<(u32, u32)> = Vec::new(); // (child, parent)
        for h in headers {
            if !keys.contains_key(&h.pid) {
                continue;
            }
            if let Some(pp) = h.status.ppid.filter(|&p| p > 0) {
                pairs.push((h.pid, pp));
            }
            if self.cfg.pids.is_some() {
                // Children outside the selection, from task/PID/children where the kernel has it.
                let mut buf = Vec::new();
                let path = CString::new(format!("{0}/task/{0}/children", h.pid)).expect("no NUL");
                if sys::read_file_at(raw(&self.root), &path, &mut buf).is_ok() {
                    for c in buf
                        .split(u8::is_ascii_whitespace)
                        .filter_map(sys::parse_u32)
                    {
                        if !by_pid.contains_key(&c) {
                            pairs.push((c, h.pid));
                        }
                    }
                }
            }
        }
        let mut s = Scratch::new();
        for &(child, parent) in &pairs {
            for p in [child, parent] {
                if !keys.contains_key(&p) && self.cfg.pids.is_some() {
                    if let Some(k) = self.load_keys(p, &mut s) {
                        keys.insert(p, k);
                    }
                }
            }
            let (Some(ck), Some(pk)) = (keys.get(&child), keys.get(&parent)) else {
                continue;
            };
            let mut parent_comm = None;
            let mut child_comm = None;
            'fds: for c in ck.iter().filter(|k| k.fd >= 3) {
                let start = pk.partition_point(|k| (k.mnt, k.ino) < (c.mnt, c.ino));
                for p in pk[start..]
                    .iter()
                    .take_while(|k| (k.mnt, k.ino) == (c.mnt, c.ino))
                    .take(16)
                {
                    let verified = if self.live {
                        outcome.totals.kcmp_calls += 1;
                        match sys::kcmp_file(child, parent, c.fd, p.fd) {
                            Ok(true) => true,
                            Ok(false) => continue,
                            Err(e)
                                if matches!(
                                    e.raw_os_error(),
                                    Some(libc::EPERM) | Some(libc::EACCES)
                                ) =>
                            {
                                outcome.totals.kcmp_refused += 1;
                                break 'fds;
                            }
                            Err(_) => break 'fds, // one of them exited
                        }
                    } else if c.flags == p.flags {
                        false
                    } else {
                        continue;
                    };
                    let pc = parent_comm
                        .get_or_insert_with(|| self.comm_of(parent, &by_pid))
                        .clone();
                    let cc = child_comm
                        .get_or_insert_with(|| self.comm_of(child, &by_pid))
                        .clone();
                    let how = if verified {
                        "is the same open file description as"
                    } else {
                        "has the same file and flags (not verified with kcmp: not a live procfs) as"
                    };
                    outcome.shared.push(Finding::new(
                        child,
                        &cc,
                        Some(c.fd),
                        if verified {
                            Severity::Low
                        } else {
                            Severity::Info
                        },
                        FindingKind::SharedDescription,
                        6,
                        format!(
                            "fd {} {how} fd {} of parent {parent} ({pc}): inherited",
                            c.fd, p.fd
                        ),
                    ));
                    continue 'fds;
                }
            }
        }
        outcome.shared.sort_by(Finding::order);
    }
}

enum SockRef<'a> {
    Table(&'a SockInfo),
    Proto(String),
}

/// `escape_bytes`, with a fast path for the common all-printable-ASCII target.
fn escape_target(t: &[u8]) -> String {
    if t.iter().all(|&b| (0x20..0x7f).contains(&b)) {
        // All printable ASCII: valid UTF-8, nothing to escape.
        return String::from_utf8(t.to_vec()).expect("ASCII is UTF-8");
    }
    escape_bytes(t)
}

/// The procfs root as given, for messages.
pub fn display_root(p: &Path) -> String {
    escape_bytes(p.as_os_str().as_bytes())
}
