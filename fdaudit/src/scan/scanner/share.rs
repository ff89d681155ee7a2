//! The parent/child share check: fds ≥ 3 a process shares with its parent as one open file
//! description (found by file identity from fdinfo, confirmed with kcmp).

use std::collections::HashMap;

use super::*;

/// For the share check: an fd's file identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ShareKey {
    mnt: u32,
    ino: u64,
    flags: u32,
    fd: u32,
}

impl ShareKey {
    /// The identity of `fd` from its fdinfo, when it names the mount and inode.
    pub(super) fn of(i: &parse::FdinfoEntry, fd: u32) -> Option<ShareKey> {
        Some(ShareKey {
            mnt: i.mnt_id?,
            ino: i.ino?,
            flags: i.flags,
            fd,
        })
    }
}

impl Scanner<'_> {
    /// `info` with an identity in `ino` on kernels before 5.14, whose fdinfo has no `ino:`
    /// line: the inode in the link's brackets (`socket:[N]`), else a hash of the link's
    /// path (top bit set, so it never equals a real pseudo-file inode). readlink asks
    /// procfs only; a stat through the link would ask the file system behind the fd, which
    /// may never answer. Candidates found this way are still confirmed with kcmp.
    pub(super) fn with_ino(
        &self,
        mut info: parse::FdinfoEntry,
        fd_dir: std::os::fd::RawFd,
        name: &std::ffi::CStr,
    ) -> parse::FdinfoEntry {
        if info.ino.is_none() && self.live {
            let mut buf = [0u8; 4096];
            if let Ok(n) = at::readlinkat(fd_dir, name, &mut buf) {
                let target = &buf[..n];
                info.ino = Some(parse::bracket_inode(target).unwrap_or_else(|| {
                    use std::hash::{Hash as _, Hasher as _};
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    target.hash(&mut h);
                    h.finish() | 1 << 63
                }));
            }
        }
        info
    }

    /// Keys of a process outside the scanned set (a `-p` process's parent or child).
    fn load_keys(&self, pid: u32, s: &mut Scratch) -> Option<Vec<ShareKey>> {
        let pname = NumName::new(u64::from(pid));
        let pid_dir = at::open_dir_path(raw(&self.root), pname.as_cstr()).ok()?;
        let fd_dir = at::openat(raw(&pid_dir), c"fd", libc::O_RDONLY | libc::O_DIRECTORY).ok()?;
        s.fds.clear();
        at::list_numeric(raw(&fd_dir), &mut s.dents, &mut s.fds).ok()?;
        let fdinfo_dir = at::open_dir_path(raw(&pid_dir), c"fdinfo").ok()?;
        let mut keys = Vec::new();
        for &fd in &s.fds {
            let name = NumName::new(u64::from(fd));
            let Ok(n) = at::read_head_at(raw(&fdinfo_dir), name.as_cstr(), &mut s.info) else {
                continue;
            };
            if let Some(k) = self
                .fdinfo(&s.info[..n])
                .map(|i| self.with_ino(i, raw(&fd_dir), name.as_cstr()))
                .and_then(|i| ShareKey::of(&i, fd))
            {
                keys.push(k);
            }
        }
        keys.sort_unstable();
        Some(keys)
    }

    fn comm_of(&self, pid: u32, headers: &HashMap<u32, &Header>) -> Vec<u8> {
        if let Some(h) = headers.get(&pid) {
            return h.status.name.as_deref().unwrap_or(b"?").to_vec();
        }
        let mut buf = Vec::new();
        let path = CString::new(format!("{pid}/status")).expect("no NUL in a number");
        match at::read_file_at(raw(&self.root), &path, &mut buf) {
            Ok(()) => parse::parse_status(&buf)
                .name
                .as_deref()
                .unwrap_or(b"?")
                .to_vec(),
            Err(_) => b"?".to_vec(),
        }
    }

    /// Finds fds >= 3 that a process shares with its parent as one open file description:
    /// candidates by (mount, inode), confirmed by kcmp(KCMP_FILE) on a live procfs; on a
    /// fixture tree, same (mount, inode, flags) is reported as unverified.
    pub(super) fn share_check(&self, headers: &[Header], outcome: &mut Outcome) {
        let mut keys = std::mem::take(&mut *self.keys.lock().unwrap_or_else(|p| p.into_inner()));
        let by_pid: HashMap<u32, &Header> = headers.iter().map(|h| (h.pid, h)).collect();
        let pairs = self.share_pairs(headers, &by_pid, &keys);
        let mut s = Scratch::new();
        for &(child, parent) in &pairs {
            if self.stopped() {
                break;
            }
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
                        match at::kcmp_file(child, parent, c.fd, p.fd) {
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
                    let (cfd, pfd) = (c.fd, p.fd);
                    outcome.shared.push(shared_finding(
                        (child, &cc, cfd),
                        (parent, &pc, pfd),
                        verified,
                    ));
                    continue 'fds;
                }
            }
        }
        outcome.shared.sort_by(Finding::order);
    }

    /// (child, parent) pairs to compare: each scanned process and its parent, and with
    /// `-p`, its children outside the selection (from task/PID/children).
    fn share_pairs(
        &self,
        headers: &[Header],
        by_pid: &HashMap<u32, &Header>,
        keys: &HashMap<u32, Vec<ShareKey>>,
    ) -> Vec<(u32, u32)> {
        let mut pairs: Vec<(u32, u32)> = Vec::new();
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
                if at::read_file_at(raw(&self.root), &path, &mut buf).is_ok() {
                    for c in buf.split(u8::is_ascii_whitespace).filter_map(at::parse_u32) {
                        if !by_pid.contains_key(&c) {
                            pairs.push((c, h.pid));
                        }
                    }
                }
            }
        }
        pairs
    }
}

/// The finding for a child fd that is (or, unverified, looks like) its parent's fd.
fn shared_finding(
    (child, child_comm, cfd): (u32, &[u8], u32),
    (parent, parent_comm, pfd): (u32, &[u8], u32),
    verified: bool,
) -> Finding {
    let how = if verified {
        "is the same open file description as"
    } else {
        "has the same file and flags (not verified with kcmp: not a live procfs) as"
    };
    Finding::new(
        child,
        child_comm,
        Some(cfd),
        if verified {
            Severity::Low
        } else {
            Severity::Info
        },
        FindingKind::SharedDescription,
        6,
        format!(
            "fd {cfd} {how} fd {pfd} of parent {parent} ({}): inherited",
            String::from_utf8_lossy(parent_comm)
        ),
    )
}
