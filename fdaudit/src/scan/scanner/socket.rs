//! One socket: what the kernel says it is, in which network namespace it lives, and what
//! that namespace's table says about it.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::table::ProcScan;
use super::*;

/// A socket: what the kernel says it is (live only) and what its table says.
pub(super) struct SockRef {
    pub kernel: Option<net::KernelProto>,
    pub table: Option<net::SockInfo>,
    /// The socket's network namespace, when it is not the one the process is in now.
    pub netns: Option<u64>,
    /// Whether what the table says (or that no table lists it: not bound, not listening)
    /// is known for sure: the socket was listed, or the tables of its own namespace were
    /// read whole. When not, a finding takes the worst it could be.
    pub resolved: bool,
}

/// Network namespaces whose cookie a scan keeps (a user can make as many as it likes; past
/// this, a socket in a namespace not kept is asked for a namespace fd, as before 5.14).
const MAX_COOKIES: usize = 4096;

impl Scanner<'_> {
    /// Resolves the socket behind fd `fd` (`ino` from its link) in its own namespace.
    pub(super) fn socket(
        &self,
        fd: u32,
        name: &NumName,
        ino: Option<u64>,
        info: Option<parse::FdinfoEntry>,
        p: &mut ProcScan,
    ) -> SockRef {
        let own = self.own_tables(p);
        if !self.live {
            let table = ino.and_then(|i| own.lookup(i, None));
            return SockRef {
                kernel: None,
                table,
                netns: None,
                resolved: true,
            };
        }
        // Listed in one of the process's own tables that hold no user text (tcp, udp, ...),
        // the socket is in this namespace; a unix socket (as the kernel says) that its
        // table shows listening is at its worst already. Neither needs asking.
        let this_sock = info.is_some_and(|i| i.ino.is_some() && i.ino == ino);
        let known_here = ino.is_some_and(|i| {
            own.listed(i).is_some()
                || (self.scm_fds
                    && this_sock
                    && info.is_some_and(|f| f.scm_fds)
                    && own.unix_lookup(i, None).is_some_and(|u| u.listening))
        });
        let ns = if known_here || (this_sock && self.unix_in_own_netns(ino, info, p)) {
            p.netns.map(|n| (n, None))
        } else {
            self.sock_netns(fd, p)
        };
        let (t, netns, whole) = match ns {
            Some((ns, _)) if Some(ns) == p.netns => (own.clone(), None, own.unreadable == 0),
            Some((ns, Some(nsfd))) => match self.tables_in(ns, &nsfd) {
                Some(t) => {
                    let whole = t.unreadable == 0;
                    (t, Some(ns), whole)
                }
                None => (Arc::new(NetTables::default()), Some(ns), false),
            },
            // Not known: the process's tables, believed only where they list the socket.
            Some((_, None)) | None => (own.clone(), None, known_here),
        };
        let (kernel, table) =
            if self.scm_fds && info.is_some_and(|i| i.ino.is_some() && i.ino == ino) {
                // fdinfo (of this very socket: same inode as the link) told unix or not;
                // no table of another protocol is asked.
                if info.is_some_and(|i| i.scm_fds) {
                    let table = ino.and_then(|i| t.unix_lookup(i, None));
                    (Some(net::KernelProto::unix()), table)
                } else if let Some(listed) = ino.and_then(|i| t.listed(i)) {
                    (None, Some(listed))
                } else {
                    let kernel = self.sockprotoname(p.pid, fd, name, p);
                    let table = kernel.as_ref().and_then(|k| t.lookup(ino?, Some(k)));
                    (kernel, table)
                }
            } else {
                let kernel = self.sockprotoname(p.pid, fd, name, p);
                let table = ino.and_then(|i| t.lookup(i, kernel.as_ref()));
                (kernel, table)
            };
        // /proc/net/unix lists every unix socket of its namespace: one missing from a whole
        // table was not found (5.10's xattr path met this in a guest), not resolved.
        let unix = kernel.as_ref().is_some_and(|k| k.family == "unix");
        SockRef {
            resolved: table.is_some() || (whole && !unix),
            kernel,
            table,
            netns,
        }
    }

    /// Whether the kernel says (fdinfo's `scm_fds:`) socket `ino` is a unix socket, the
    /// process (or thread) is in the scanner's own network namespace, and the kernel's
    /// list of that namespace's unix sockets (sock_diag) holds it: then it lives there, as
    /// asking the socket itself would say.
    fn unix_in_own_netns(
        &self,
        ino: Option<u64>,
        info: Option<parse::FdinfoEntry>,
        p: &ProcScan,
    ) -> bool {
        let (Some(ino), Some(netns)) = (ino, p.netns) else {
            return false;
        };
        if !(self.scm_fds && info.is_some_and(|i| i.scm_fds)) {
            return false;
        }
        let here = self.unix_here.get_or_init(|| {
            let own = own_netns(raw(&self.root))?;
            Some((own, crate::scan::unixdiag::UnixInodes::dump().ok()?))
        });
        here.as_ref()
            .is_some_and(|(own, list)| *own == netns && list.contains(ino))
    }

    /// The tables of the namespace the process (or thread) is in now, read at its first
    /// socket.
    pub(super) fn own_tables(&self, p: &mut ProcScan) -> Arc<NetTables> {
        if p.tables.is_none() {
            let (ns, t) = self.net_tables(p.pid, raw(&p.dirs.pid_dir));
            p.netns = ns;
            p.tables = Some(t);
        }
        p.tables.clone().expect("set above")
    }

    /// The network namespace of socket `fd`, from the socket itself (see `netns`), with an
    /// fd of it unless it is the process's own (known by its cookie); `None` when the kernel
    /// would not say (no pidfd_getfd before 5.6, no thread pidfd before 6.9, not permitted,
    /// or the fd is gone).
    fn sock_netns(&self, fd: u32, p: &mut ProcScan) -> Option<(u64, Option<OwnedFd>)> {
        let here = p.netns;
        let pidfd = p
            .pidfd
            .get_or_insert_with(|| {
                let (id, thread) = match p.tid {
                    Some(t) => (t, true),
                    None => (p.pid, false),
                };
                netns::pidfd(id, thread).ok()
            })
            .as_ref()?;
        let cookies = || self.cookies.lock().unwrap_or_else(|p| p.into_inner());
        let known = |c| cookies().get(&c).copied().filter(|&ino| Some(ino) == here);
        match netns::socket_netns(raw(pidfd), fd, known).ok()? {
            netns::SockNs::Known(ns) => Some((ns, None)),
            netns::SockNs::Opened(ns, nsfd, cookie) => {
                let mut m = cookies();
                if let Some(c) = cookie.filter(|_| m.len() < MAX_COOKIES) {
                    m.insert(c, ns);
                }
                Some((ns, Some(nsfd)))
            }
        }
    }

    /// The tables of network namespace `ns` (inode), read once per namespace from inside
    /// it; `None` when it cannot be entered (not root).
    fn tables_in(&self, ns: u64, nsfd: &OwnedFd) -> Option<Arc<NetTables>> {
        let cell = {
            let mut m = self.net.lock().unwrap_or_else(|p| p.into_inner());
            m.entry(NsKey::Ns(ns)).or_default().clone()
        };
        if let Some(t) = cell.get() {
            return Some(t.clone());
        }
        let t = netns::load_in(nsfd, raw(&self.root)).ok()?;
        Some(
            cell.get_or_init(|| {
                self.unreadable_net
                    .fetch_add(u64::from(t.unreadable), Ordering::Relaxed);
                Arc::new(t)
            })
            .clone(),
        )
    }

    /// The kernel's name for the protocol of socket `fd` (the sockprotoname xattr).
    fn sockprotoname(
        &self,
        pid: u32,
        fd: u32,
        name: &NumName,
        p: &ProcScan,
    ) -> Option<net::KernelProto> {
        net::sockprotoname(raw(&p.dirs.fd_dir), name.as_cstr(), || {
            let rel = match p.tid {
                Some(t) => format!("{pid}/task/{t}/fd/{fd}"),
                None => format!("{pid}/fd/{fd}"),
            };
            CString::new(self.cfg.root.join(rel).as_os_str().as_bytes()).ok()
        })
    }
}

/// The scanner's own network namespace: (its cookie, its inode number) under the procfs
/// root `root`, when live and the kernel gives cookies.
pub(super) fn own_cookie(root: RawFd, live: bool) -> Option<(u64, u64)> {
    if !live {
        return None;
    }
    Some((netns::own_netns_cookie()?, own_netns(root)?))
}

/// The inode number of the scanner's own network namespace, under the procfs root `root`.
fn own_netns(root: RawFd) -> Option<u64> {
    let mut link = [0u8; 64];
    let n = at::readlinkat(root, c"thread-self/ns/net", &mut link).ok()?;
    parse::bracket_inode(&link[..n])
}
