//! One process's fds: fdinfo, links, kinds, sockets, and the findings they make.

use std::io;
use std::os::fd::OwnedFd;

use super::boundary::{self, Verdict};
use super::creds;
use super::socket::SockRef;
use super::table::{ProcDirs, ProcScan};
use super::*;
use crate::scan::uring;

impl Scanner<'_> {
    pub(super) fn scan_process(&self, h: &Header, s: &mut Scratch) -> Result<ProcReport, Skip> {
        let pid = h.pid;
        let pname = NumName::new(u64::from(pid));
        let pid_dir =
            at::open_dir_path(raw(&self.root), pname.as_cstr()).map_err(|e| skip_for(&e))?;
        let dirs = ProcDirs::open(pid_dir).map_err(|e| skip_for(&e))?;
        s.fds.clear();
        at::list_numeric(raw(&dirs.fd_dir), &mut s.dents, &mut s.fds).map_err(|e| skip_for(&e))?;
        s.fds.sort_unstable();
        let mut rep = self.new_report(h, &dirs.pid_dir, s)?;
        let mut p = ProcScan::new(pid, None, dirs, s.fds.len());
        self.scan_table(&mut p, &mut rep, s)?;
        if self.live {
            self.thread_tables(&p.dirs.pid_dir, &mut rep, s)?;
        }
        rep.findings.sort_by(Finding::order);
        let mut keys = p.keys;
        keys.sort_unstable();
        keys.shrink_to_fit();
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, keys);
        Ok(rep)
    }

    /// Reads every fd listed in `s.fds` of one fd table into `rep`.
    pub(super) fn scan_table(
        &self,
        p: &mut ProcScan,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let fds = std::mem::take(&mut s.fds);
        let mut res = Ok(());
        for &fd in &fds {
            if self.stopped() {
                break;
            }
            s.link_stat.next_fd();
            res = self.scan_fd(fd, p, rep, s);
            if res.is_err() {
                break;
            }
        }
        s.fds = fds;
        res
    }

    /// Reads fd `fd` of the process into `rep` (counts, record, findings) and `p` (its
    /// share key). A fd that vanished meanwhile is counted as such.
    fn scan_fd(
        &self,
        fd: u32,
        p: &mut ProcScan,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let name = NumName::new(u64::from(fd));
        let read = if p.dirs.fdinfo_procfs {
            at::read_head_at_procfs
        } else {
            at::read_head_at
        };
        let info = match read(raw(&p.dirs.fdinfo_dir), name.as_cstr(), &mut s.info) {
            Ok(n) => self.fdinfo(&s.info[..n]),
            Err(e) if is_vanished(&e) => {
                rep.vanished_fds += 1;
                return Ok(());
            }
            // Access is checked per process (ptrace read), so one refusal means all.
            Err(e) if is_denied(&e) => return Err(Skip::Denied),
            Err(_) => {
                s.totals.unreadable_files += 1;
                None
            }
        };
        let info = info.map(|i| self.with_ino(i, raw(&p.dirs.fd_dir), name.as_cstr()));
        let cloexec = info.map(|i| i.cloexec());
        let inheritable = cloexec == Some(false);
        let record = if self.cfg.full_fds || (inheritable && fd >= 3) {
            match self.record_of(fd, &name, info, p, s)? {
                Some(r) => Some(r),
                None => {
                    rep.vanished_fds += 1;
                    return Ok(());
                }
            }
        } else {
            None
        };
        let mut record = record;
        self.boundary(
            FdAt {
                fd,
                name: &name,
                info,
            },
            &mut record,
            p,
            rep,
            s,
        )?;
        self.in_flight_outside(fd, info, p, rep, s);
        rep.fd_count += 1;
        rep.max_fd = rep.max_fd.max(Some(fd));
        match cloexec {
            Some(false) => {
                rep.no_cloexec += 1;
                rep.inheritable += u32::from(fd >= 3);
            }
            None => rep.unknown_fds += 1,
            Some(true) => {}
        }
        // Shared descriptions are checked with kcmp by pid and fd: the process's table only.
        if let Some(k) = info.as_ref().and_then(|i| ShareKey::of(i, fd)) {
            if p.tid.is_none() {
                p.keys.push(k);
            }
        }
        if let Some(mut r) = record {
            if inheritable && fd >= 3 && self.live {
                if let Some(c) = rep.creds.as_ref() {
                    let at = (raw(&p.dirs.fd_dir), name.as_cstr());
                    r.beyond_creds = creds::beyond(c, at, &mut s.link_stat, r.kind, r.mode);
                }
            }
            self.add_fd(rep, r, inheritable, info);
        }
        Ok(())
    }

    /// The boundary rule (boundary.rs): a finding when fd `fd` (>= 3) is on a mount outside
    /// the task's root or mount namespace. Reads the fd's record when the verdict needs its
    /// path or a finding its text (`record` keeps it).
    fn boundary(
        &self,
        at: FdAt<'_>,
        record: &mut Option<FdRecord>,
        p: &mut ProcScan,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let Some(mnt) = at
            .info
            .and_then(|i| i.mnt_id)
            .filter(|_| at.fd >= 3 && self.live)
        else {
            return Ok(());
        };
        let view = self.take_view(p, s);
        let res = match view.as_ref() {
            Some(view) => self.judge(at, (mnt, view), record, p, rep, s),
            None => Ok(()),
        };
        p.mounts = Some(view);
        res
    }

    /// [`Self::boundary`]'s verdict on fd `at`, on mount `mnt` of the process's `view`.
    fn judge(
        &self,
        at: FdAt<'_>,
        (mnt, view): (u32, &boundary::MountView),
        record: &mut Option<FdRecord>,
        p: &mut ProcScan,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let FdAt { fd, name, info } = at;
        let target = record.as_ref().map(|r| &r.target[..]);
        if boundary::verdict(view, &self.own, mnt, target) == Verdict::Inside {
            return Ok(());
        }
        if record.is_none() {
            *record = self.record_of(fd, name, info, p, s)?;
        }
        let Some(r) = record.as_ref() else {
            return Ok(()); // vanished meanwhile: counted by the caller's next read
        };
        let v = boundary::verdict(view, &self.own, mnt, Some(&r.target));
        if v == Verdict::Inside {
            return Ok(());
        }
        let inheritable = info.is_some_and(|i| !i.cloexec());
        let (sev, reason) = boundary::finding(
            v,
            fd,
            &r.target.lossy(),
            &String::from_utf8_lossy(&view.root_path),
            inheritable,
        );
        outside_root(p, rep, fd, sev, reason);
        Ok(())
    }

    /// The boundary rule for fds in flight: a close-on-exec unix socket (an inheritable
    /// one is critical already) with fds waiting in its queue, in a task that sees other
    /// mounts than the scanner (a container, a chroot). The task can receive them at any
    /// time, and what they are is not known: they are rated as if one were outside its
    /// root, the way a host directory fd it held would be.
    fn in_flight_outside(
        &self,
        fd: u32,
        info: Option<parse::FdinfoEntry>,
        p: &mut ProcScan,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) {
        let Some(i) = info.filter(|i| i.scm_fds && i.in_flight > 0 && i.cloexec()) else {
            return;
        };
        if !self.live || fd < 3 {
            return;
        }
        let view = self.take_view(p, s);
        let root = view
            .as_ref()
            .map(|v| String::from_utf8_lossy(&v.root_path).into_owned());
        p.mounts = Some(view);
        let Some(root) = root else {
            return; // it sees what the scanner sees: nothing it receives is outside
        };
        let n = findings::fd_count(i.in_flight);
        let reason = format!(
            "fd {fd} (unix socket) has {n} in flight in its receive queue (sent with \
             SCM_RIGHTS, in no fd table), which the process (root {root}) can receive at any \
             time; scan does not know what they are, so they are rated as if one were outside \
             its root directory or mount namespace"
        );
        outside_root(p, rep, fd, Severity::High, reason);
    }

    /// The task's view of the mounts, read at its first fd that needs it (taken out of
    /// `p`: the caller puts it back).
    fn take_view(&self, p: &mut ProcScan, s: &mut Scratch) -> Option<boundary::MountView> {
        match p.mounts.take() {
            Some(v) => v,
            None => self.mount_view(raw(&p.dirs.pid_dir), s),
        }
    }

    /// The report before its fds: identity, limits and the NOFILE finding.
    fn new_report(
        &self,
        h: &Header,
        pid_dir: &OwnedFd,
        s: &mut Scratch,
    ) -> Result<ProcReport, Skip> {
        let nofile = match at::read_file_at(raw(pid_dir), c"limits", &mut s.file) {
            Ok(()) => parse::parse_limits(&s.file),
            Err(e) if is_vanished(&e) => return Err(Skip::Vanished),
            Err(_) => {
                s.totals.unreadable_files += 1;
                None
            }
        };
        let cgroup = match at::read_file_at(raw(pid_dir), c"cgroup", &mut s.file) {
            Ok(()) => Some(String::from_utf8_lossy(&s.file).into_owned()),
            Err(_) => None,
        };
        let mut identity = crate::cgroup::Identity::from_proc(h.pid, cgroup.as_deref(), None);
        identity.ns_pid = h.status.ns_pid.filter(|&n| n != h.pid);
        let comm = h.status.name.as_deref().unwrap_or(b"?").to_vec();
        let mut rep = ProcReport {
            pid: h.pid,
            ppid: h.status.ppid,
            comm,
            uid: h.status.euid,
            nofile,
            fd_count: 0,
            max_fd: None,
            no_cloexec: 0,
            inheritable: 0,
            identity,
            vanished_fds: 0,
            unknown_fds: 0,
            fds: Vec::with_capacity(if self.cfg.full_fds { s.fds.len() } else { 0 }),
            findings: Vec::new(),
            creds: h.status.creds.clone(),
        };
        if let Some(soft) = nofile.and_then(|l| l.soft) {
            if let Some((sev, reason)) = findings::nofile(soft, self.cfg.close_ns) {
                rep.findings.push(Finding::new(
                    h.pid,
                    &rep.comm,
                    None,
                    sev,
                    FindingKind::NofileLimit,
                    0,
                    reason,
                ));
            }
        }
        Ok(rep)
    }

    /// The record of one fd: its link (read, or synthesized for pseudo filesystems), kind
    /// and socket. `Ok(None)` when the fd vanished meanwhile.
    fn record_of(
        &self,
        fd: u32,
        name: &NumName,
        info: Option<parse::FdinfoEntry>,
        p: &mut ProcScan,
        s: &mut Scratch,
    ) -> Result<Option<FdRecord>, Skip> {
        let synthesized = match (self.live, info.and_then(|i| Some((i.mnt_id?, i.ino?)))) {
            (true, Some((mnt, ino))) => s.pseudo.iter().find(|p| p.0 == mnt).map(|p| {
                use std::io::Write as _;
                let mut cur = io::Cursor::new(&mut s.link[..]);
                let _ = write!(cur, "{}:[{ino}]", p.1);
                cur.position() as usize
            }),
            _ => None,
        };
        let mut partial = false;
        let n = match synthesized {
            Some(n) => n,
            None => match at::readlinkat(raw(&p.dirs.fd_dir), name.as_cstr(), &mut s.link) {
                Ok(n) => {
                    self.learn_pseudo(&s.link[..n], info, &mut s.pseudo);
                    n
                }
                Err(e) if is_vanished(&e) => return Ok(None),
                Err(e) if is_denied(&e) => return Err(Skip::Denied),
                // A path past PATH_MAX (ENAMETOOLONG), or one the kernel would not print.
                Err(_) => {
                    partial = true;
                    0
                }
            },
        };
        let target = &s.link[..n];
        let at = (raw(&p.dirs.fd_dir), name.as_cstr());
        if !partial {
            let mnt_ino = info.and_then(|i| Some((i.mnt_id?, i.ino?)));
            s.link_stat.identify(mnt_ino, target);
        }
        let kind = kind::kind_of(self.live, target, partial, info, at, &mut s.link_stat);
        let sock = (kind == FdKind::Socket).then(|| {
            let ino = parse::bracket_inode(target).or(info.and_then(|i| i.ino));
            self.socket(fd, name, ino, info, p)
        });
        let target = &s.link[..n];
        let mut r = self.fd_record(fd, kind, target, info, sock);
        r.target_partial = partial;
        r.tid = p.tid;
        if self.live && fd >= 3 && !partial && names_matter(kind, target, info) {
            let owner = s
                .link_stat
                .get(at.0, at.1, libc::STATX_UID)
                .map(|st| st.stx_uid);
            r.renamers = p.renamers.renamers(raw(&p.dirs.pid_dir), target, owner);
        }
        if kind == FdKind::AnonInode
            && r.target[..] == *uring::RING_LINK
            && info.is_some_and(|i| !i.cloexec())
        {
            r.registered = Some(self.ring_files(name, p, s));
        }
        Ok(Some(r))
    }

    /// Adds a recorded fd to the report: its inheritable-fd finding, and the record itself
    /// when every fd is listed.
    fn add_fd(
        &self,
        rep: &mut ProcReport,
        r: FdRecord,
        inheritable: bool,
        info: Option<parse::FdinfoEntry>,
    ) {
        if inheritable && r.fd >= 3 {
            let target_text = r.target.lossy();
            let listen_text = r.listening.then(|| {
                r.local
                    .as_ref()
                    .map_or_else(|| target_text.clone(), |l| l.lossy())
            });
            let facts = FdFacts {
                kind: r.kind,
                target: &target_text,
                raw_target: &r.target,
                writable: info.is_some_and(|i| i.writable()),
                listening: listen_text.as_deref(),
                proto: r.proto.as_deref(),
                unresolved: r.unresolved,
                partial: r.target_partial,
                renamed_by: r
                    .renamers
                    .iter()
                    .find(|x| !x.trusted_by(rep.uid))
                    .map(|x| x.describe()),
                in_flight: r.in_flight,
            };
            let mut rated = findings::inheritable(&facts);
            if let Some(reg) = r.registered.as_ref() {
                if let Some(x) = findings::registered(r.fd, &target_text, reg) {
                    if x.0 >= rated.0 {
                        rated = x;
                    }
                }
            }
            let (mut sev, rank, mut reason) = rated;
            if let Some(why) = r.beyond_creds.as_deref() {
                sev = Severity::Critical;
                reason.push_str(&format!(" ({why})"));
            }
            if r.in_flight.is_none() && r.family == Some("unix") && self.live && !self.scm_fds {
                reason.push_str(
                    " (this kernel does not say whether fds wait in its receive queue: \
                     scm_fds in fdinfo came in Linux 5.14)",
                );
            }
            if let Some(t) = r.tid {
                reason.push_str(&format!(" (in the fd table of thread {t})"));
            }
            let mut f = Finding::new(
                rep.pid,
                &rep.comm,
                Some(r.fd),
                sev,
                FindingKind::InheritableFd,
                rank,
                reason,
            );
            f.tid = r.tid;
            rep.findings.push(f);
        }
        if self.cfg.full_fds {
            rep.fds.push(r);
        }
    }

    /// On a live procfs, remembers the mount of sockfs / pipefs from a link text like
    /// `socket:[N]` whose N is fdinfo's inode: every other fd on that mount has the link
    /// text `socket:[ino]` (the kernel's d_dname for those filesystems, and those internal
    /// mounts are never unmounted, so their ids are not reused), so its readlink is skipped.
    fn learn_pseudo(
        &self,
        target: &[u8],
        info: Option<parse::FdinfoEntry>,
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

    fn fd_record(
        &self,
        fd: u32,
        kind: FdKind,
        target: &[u8],
        info: Option<parse::FdinfoEntry>,
        sock: Option<SockRef>,
    ) -> FdRecord {
        let mut r = FdRecord {
            fd,
            kind,
            family: None,
            proto: None,
            target: Lossless::new(target.to_vec()),
            mode: info.map(|i| i.access()),
            cloexec: info.map(|i| i.cloexec()),
            local: None,
            remote: None,
            listening: false,
            netns: None,
            unresolved: false,
            target_partial: false,
            tid: None,
            renamers: Vec::new(),
            in_flight: None,
            registered: None,
            beyond_creds: None,
        };
        if kind == FdKind::Socket {
            r.in_flight = info.filter(|i| i.scm_fds).map(|i| i.in_flight);
        }
        if let Some(sock) = sock {
            r.netns = sock.netns;
            r.unresolved = !sock.resolved;
            if let Some(si) = &sock.table {
                r.family = Some(si.family);
                r.proto = Some(si.proto.to_owned());
                r.local = si.local.as_ref().map(|a| Lossless::new(a.bytes()));
                r.remote = si.remote.as_ref().map(|a| Lossless::new(a.bytes()));
                r.listening = si.listening;
            }
            if let Some(k) = sock.kernel {
                // The kernel's word on family and protocol; the table's unix type
                // (dgram, seqpacket) is kept where the kernel only says "not stream".
                r.family = Some(k.family);
                if !(k.proto == "unix" && sock.table.is_some()) {
                    r.proto = Some(k.proto);
                }
            }
        }
        r
    }
}

/// Whether an inheritable fd's verdict could rest on its path's text: a file path that does
/// not already look secret (sockets, pipes and anonymous files have no path to rename).
fn names_matter(kind: FdKind, target: &[u8], info: Option<parse::FdinfoEntry>) -> bool {
    matches!(kind, FdKind::Regular | FdKind::Other)
        && target.starts_with(b"/")
        && !findings::looks_secret(target)
        && info.is_some_and(|i| !i.cloexec())
}

/// One fd of the table being walked: its number, its name in the fd directory and its
/// fdinfo (when read).
#[derive(Clone, Copy)]
struct FdAt<'a> {
    fd: u32,
    name: &'a NumName,
    info: Option<parse::FdinfoEntry>,
}

/// Adds an `outside_root` finding for fd `fd` of the task `p` scans, naming its thread when
/// the fd table is a thread's own.
fn outside_root(p: &ProcScan, rep: &mut ProcReport, fd: u32, sev: Severity, mut reason: String) {
    if let Some(t) = p.tid {
        reason.push_str(&format!(" (in the fd table of thread {t})"));
    }
    let mut f = Finding::new(
        rep.pid,
        &rep.comm,
        Some(fd),
        sev,
        FindingKind::OutsideRoot,
        0,
        reason,
    );
    f.tid = p.tid;
    rep.findings.push(f);
}
