//! One process's fds: fdinfo, links, kinds, sockets, and the findings they make.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::*;

/// The directories of one process under the procfs root.
struct ProcDirs {
    pid_dir: OwnedFd,
    fd_dir: OwnedFd,
    fdinfo_dir: OwnedFd,
    /// `fdinfo_dir` is on a procfs (its files need no fstat before they are read).
    fdinfo_procfs: bool,
}

/// One process while its fds are read: its directories, the keys its fds are shared by,
/// and the socket tables (read once, at its first socket).
struct ProcScan {
    dirs: ProcDirs,
    keys: Vec<ShareKey>,
    tables: Option<Arc<NetTables>>,
}

impl Scanner<'_> {
    pub(super) fn scan_process(&self, h: &Header, s: &mut Scratch) -> Result<ProcReport, Skip> {
        let pid = h.pid;
        let pname = NumName::new(u64::from(pid));
        let pid_dir =
            at::open_dir_path(raw(&self.root), pname.as_cstr()).map_err(|e| skip_for(&e))?;
        let fd_dir = at::openat(raw(&pid_dir), c"fd", libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| skip_for(&e))?;
        s.fds.clear();
        at::list_numeric(raw(&fd_dir), &mut s.dents, &mut s.fds).map_err(|e| skip_for(&e))?;
        s.fds.sort_unstable();
        let fdinfo_dir = at::open_dir_path(raw(&pid_dir), c"fdinfo").map_err(|e| skip_for(&e))?;
        let mut rep = self.new_report(h, &pid_dir, s)?;
        let mut p = ProcScan {
            dirs: ProcDirs {
                pid_dir,
                fd_dir,
                fdinfo_procfs: at::is_procfs(raw(&fdinfo_dir)),
                fdinfo_dir,
            },
            keys: Vec::with_capacity(s.fds.len()),
            tables: None,
        };
        let fds = std::mem::take(&mut s.fds);
        for &fd in &fds {
            if self.stopped() {
                break;
            }
            self.scan_fd(fd, &mut p, &mut rep, s)?;
        }
        s.fds = fds;
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
            Ok(n) => parse::parse_fdinfo(&s.info[..n]),
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
            match self.record_of(rep.pid, fd, &name, info, &p.dirs, s, &mut p.tables)? {
                Some(r) => Some(r),
                None => {
                    rep.vanished_fds += 1;
                    return Ok(());
                }
            }
        } else {
            None
        };
        rep.fd_count += 1;
        rep.max_fd = Some(fd);
        match cloexec {
            Some(false) => {
                rep.no_cloexec += 1;
                rep.inheritable += u32::from(fd >= 3);
            }
            None => rep.unknown_fds += 1,
            Some(true) => {}
        }
        if let Some(k) = info.as_ref().and_then(|i| ShareKey::of(i, fd)) {
            p.keys.push(k);
        }
        if let Some(r) = record {
            self.add_fd(rep, r, inheritable, info);
        }
        Ok(())
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
    #[allow(clippy::too_many_arguments)]
    fn record_of(
        &self,
        pid: u32,
        fd: u32,
        name: &NumName,
        info: Option<parse::FdinfoEntry>,
        dirs: &ProcDirs,
        s: &mut Scratch,
        tables: &mut Option<Arc<NetTables>>,
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
        let n = match synthesized {
            Some(n) => n,
            None => match at::readlinkat(raw(&dirs.fd_dir), name.as_cstr(), &mut s.link) {
                Ok(n) => {
                    self.learn_pseudo(&s.link[..n], info, &mut s.pseudo);
                    n
                }
                Err(e) if is_vanished(&e) => return Ok(None),
                Err(e) if is_denied(&e) => return Err(Skip::Denied),
                Err(_) => 0,
            },
        };
        let target = &s.link[..n];
        let kind = kind_of(target, info);
        let sock = if kind == FdKind::Socket {
            // On a live system the kernel names the protocol of this very socket; the
            // tables only add addresses, from that protocol's table.
            let t = tables.get_or_insert_with(|| self.net_tables(pid, raw(&dirs.pid_dir)));
            let ino = parse::bracket_inode(&s.link[..n]);
            let (kernel, table) = if !self.live {
                (None, ino.and_then(|i| t.lookup(i, None)))
            } else if self.scm_fds && info.is_some_and(|i| i.ino.is_some() && i.ino == ino) {
                // fdinfo (of this very socket: same inode as the link) told unix or not;
                // no table of another protocol is asked.
                if info.is_some_and(|i| i.scm_fds) {
                    let table = ino.and_then(|i| t.unix_lookup(i, None));
                    (Some(net::KernelProto::unix()), table)
                } else if let Some(listed) = ino.and_then(|i| t.listed(i)) {
                    (None, Some(listed))
                } else {
                    let kernel = self.sockprotoname(pid, fd, name, dirs);
                    let table = kernel.as_ref().and_then(|k| t.lookup(ino?, Some(k)));
                    (kernel, table)
                }
            } else {
                let kernel = self.sockprotoname(pid, fd, name, dirs);
                let table = ino.and_then(|i| t.lookup(i, kernel.as_ref()));
                (kernel, table)
            };
            Some(SockRef { kernel, table })
        } else {
            None
        };
        let target = &s.link[..n];
        Ok(Some(self.fd_record(fd, kind, target, info, sock)))
    }

    /// The kernel's name for the protocol of socket `fd` (the sockprotoname xattr).
    fn sockprotoname(
        &self,
        pid: u32,
        fd: u32,
        name: &NumName,
        dirs: &ProcDirs,
    ) -> Option<net::KernelProto> {
        net::sockprotoname(raw(&dirs.fd_dir), name.as_cstr(), || {
            let path = self.cfg.root.join(format!("{pid}/fd/{fd}"));
            CString::new(path.as_os_str().as_bytes()).ok()
        })
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
            };
            let (sev, rank, reason) = findings::inheritable(&facts);
            rep.findings.push(Finding::new(
                rep.pid,
                &rep.comm,
                Some(r.fd),
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
        };
        if let Some(sock) = sock {
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

/// A socket: what the kernel says it is (live only) and what its table says.
struct SockRef {
    kernel: Option<net::KernelProto>,
    table: Option<net::SockInfo>,
}

/// Kind from the link text alone: nothing is stat'ed through the fd link (that would ask
/// the file system behind the fd, which may never answer: FUSE, a dead NFS server). A path
/// is a directory when fdinfo's flags hold O_DIRECTORY, a device under /dev/, otherwise a
/// regular file (a directory opened without O_DIRECTORY, or a named FIFO, shows as one).
fn kind_of(target: &[u8], info: Option<parse::FdinfoEntry>) -> FdKind {
    let base = FdKind::from_link(target, None);
    // O_DIRECTORY in fdinfo means a directory, except that O_TMPFILE files carry it too
    // (O_TMPFILE = __O_TMPFILE | O_DIRECTORY).
    const O_TMPFILE_BIT: u32 = 0o20000000;
    if matches!(base, FdKind::Regular | FdKind::Device)
        && info.is_some_and(|i| {
            i.flags & libc::O_DIRECTORY as u32 != 0 && i.flags & O_TMPFILE_BIT == 0
        })
    {
        return FdKind::Directory;
    }
    base
}
