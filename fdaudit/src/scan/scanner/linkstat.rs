//! The `statx` of an fd link, made at most once per fd and, for a file met before in the
//! same worker's scan, not at all.
//!
//! The same few files are open in many fds (a service's workers, a log, a config), and the
//! credentials and renamers rules ask each inheritable file's mode and owner. A file is
//! known again by its mount id and inode number (fdinfo, Linux 5.14+) and its link text. A
//! statx is kept only when it names that same mount and inode (the fd may have been
//! replaced between the reads: a process can race its own fds) and the file system is on a
//! block device: there an inode number is one file's while it is open, where btrfs
//! subvolumes, overlayfs (whose fdinfo names the layer's inode), FUSE and network file
//! systems (all on anonymous devices) need not keep that. What is kept is bounded
//! (entries, link length, links per inode), so hostile names only make it ask the kernel.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::RawFd;

/// Files kept per worker; past this the cache starts again.
const MAX_ENTRIES: usize = 4096;
/// Links longer than this are not kept.
const MAX_LINK: usize = 512;
/// Paths kept per (mount, inode): hard links, or the same number on another file system.
const MAX_PATHS: usize = 4;

/// A file's link text and its statx.
type Kept = (Box<[u8]>, libc::statx);

/// The `statx` of one fd link (type, mode, owner and group, from cached attributes only:
/// `AT_STATX_DONT_SYNC`, so a FUSE or NFS server is not asked), made at most once for the
/// fd's kind, its owner (the renamers) and the credentials check.
#[derive(Default)]
pub(super) struct LinkStat {
    cur: Option<Option<libc::statx>>,
    /// The current fd's (mount id, inode number) and link, when fdinfo gave them.
    key: Option<(u32, u64)>,
    link: Vec<u8>,
    seen: HashMap<(u32, u64), Vec<Kept>>,
    entries: usize,
}

impl LinkStat {
    /// Starts the next fd: nothing known of it yet.
    pub fn next_fd(&mut self) {
        self.cur = None;
        self.key = None;
    }

    /// The current fd's file: its mount id and inode number from fdinfo, and its link text.
    pub fn identify(&mut self, mnt_ino: Option<(u32, u64)>, link: &[u8]) {
        self.key = mnt_ino.filter(|_| link.len() <= MAX_LINK);
        self.link.clear();
        if self.key.is_some() {
            self.link.extend_from_slice(link);
        }
    }

    /// The fd link's attributes, made at the first call (or found, for a file met before);
    /// `None` unless every field of `mask` came back.
    pub fn get(&mut self, fd_dir: RawFd, name: &CStr, mask: u32) -> Option<&libc::statx> {
        const ALL: u32 = libc::STATX_TYPE
            | libc::STATX_MODE
            | libc::STATX_UID
            | libc::STATX_GID
            | libc::STATX_INO
            | libc::STATX_MNT_ID;
        if self.cur.is_none() {
            let st = match self.kept() {
                Some(st) => Some(st),
                None => {
                    let st = crate::procfs_util::at::statx_cached(fd_dir, name, ALL);
                    if let Some(st) = st {
                        self.keep(st);
                    }
                    st
                }
            };
            self.cur = Some(st);
        }
        let st = self.cur.as_ref()?.as_ref()?;
        (st.stx_mask & mask == mask).then_some(st)
    }

    fn kept(&self) -> Option<libc::statx> {
        let links = self.seen.get(&self.key?)?;
        links
            .iter()
            .find(|(l, _)| **l == *self.link)
            .map(|&(_, st)| st)
    }

    fn keep(&mut self, st: libc::statx) {
        let Some(key) = self.key else {
            return;
        };
        let named = libc::STATX_INO | libc::STATX_MNT_ID;
        if st.stx_mask & named != named
            || (st.stx_mnt_id, st.stx_ino) != (u64::from(key.0), key.1)
            || st.stx_dev_major == 0
        {
            return;
        }
        if self.entries >= MAX_ENTRIES {
            self.seen.clear();
            self.entries = 0;
        }
        let links = self.seen.entry(key).or_default();
        if links.len() < MAX_PATHS {
            links.push((self.link.as_slice().into(), st));
            self.entries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd as _;

    fn fd_dir() -> std::fs::File {
        std::fs::File::open("/proc/self/fd").expect("open /proc/self/fd")
    }

    fn name(f: &std::fs::File) -> std::ffi::CString {
        std::ffi::CString::new(f.as_raw_fd().to_string()).expect("no NUL")
    }

    /// (mount id, inode number) of an fd of ours, from its fdinfo.
    fn identity(f: &std::fs::File) -> (u32, u64) {
        let info = std::fs::read(format!("/proc/self/fdinfo/{}", f.as_raw_fd())).expect("fdinfo");
        let i = crate::scan::parse::parse_fdinfo(&info).expect("parsed");
        (i.mnt_id.expect("mnt_id"), i.ino.expect("ino (5.14+)"))
    }

    /// A file met again (same mount, inode and link) is not asked again, where its file
    /// system is on a block device; an fd whose statx names another inode than its fdinfo
    /// did (replaced between the reads) is asked, and not kept.
    #[test]
    fn a_file_met_again_is_known_by_mount_inode_and_link() {
        let dir = fd_dir();
        let exe = std::fs::File::open("/proc/self/exe").expect("open exe");
        let root = std::fs::File::open("/").expect("open /");
        let mut s = LinkStat::default();
        s.next_fd();
        s.identify(Some(identity(&exe)), b"/exe");
        let first = *s
            .get(dir.as_raw_fd(), &name(&exe), libc::STATX_MODE)
            .expect("statx");
        assert_eq!(first.stx_mode as u32 & libc::S_IFMT, libc::S_IFREG);
        let block = first.stx_dev_major != 0;
        assert_eq!(s.entries, usize::from(block));
        // The same identity and link, another fd (the directory): the kept attributes.
        s.next_fd();
        s.identify(Some(identity(&exe)), b"/exe");
        let again = s
            .get(dir.as_raw_fd(), &name(&root), libc::STATX_MODE)
            .expect("statx");
        let want = if block { libc::S_IFREG } else { libc::S_IFDIR };
        assert_eq!(again.stx_mode as u32 & libc::S_IFMT, want);
        // The exe's identity, another link, the directory's fd (a replaced fd): asked, not kept.
        s.next_fd();
        s.identify(Some(identity(&exe)), b"/swapped");
        let other = s
            .get(dir.as_raw_fd(), &name(&root), libc::STATX_MODE)
            .expect("statx");
        assert_eq!(other.stx_mode as u32 & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(s.entries, usize::from(block));
        // No identity (before 5.14): asked.
        s.next_fd();
        s.identify(None, b"/exe");
        let none = s
            .get(dir.as_raw_fd(), &name(&root), libc::STATX_MODE)
            .expect("statx");
        assert_eq!(none.stx_mode as u32 & libc::S_IFMT, libc::S_IFDIR);
    }

    /// A statx naming (`mnt`, `ino`) on a block device (8:1), or an anonymous one.
    fn stat(mnt: u32, ino: u64, major: u32) -> libc::statx {
        // SAFETY: plain data.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        st.stx_mask = libc::STATX_INO | libc::STATX_MNT_ID | libc::STATX_MODE;
        (st.stx_mnt_id, st.stx_ino, st.stx_dev_major) = (u64::from(mnt), ino, major);
        st
    }

    /// What is kept is bounded: links past MAX_LINK and paths past MAX_PATHS per inode are
    /// not kept, past MAX_ENTRIES it starts again, and nothing on an anonymous device.
    #[test]
    fn what_is_kept_is_bounded() {
        let mut s = LinkStat::default();
        let put = |s: &mut LinkStat, mnt, ino, link: &[u8], major| {
            s.next_fd();
            s.identify(Some((mnt, ino)), link);
            s.keep(stat(mnt, ino, major));
        };
        put(&mut s, 1, 1, &[b'x'; MAX_LINK + 1], 8);
        put(&mut s, 1, 2, b"/btrfs", 0);
        assert_eq!(s.entries, 0);
        for i in 0..MAX_PATHS + 2 {
            put(&mut s, 1, 1, format!("/l{i}").as_bytes(), 8);
        }
        assert_eq!(s.entries, MAX_PATHS);
        s.next_fd();
        s.identify(Some((1, 1)), b"/l0");
        assert!(s.kept().is_some());
        for i in 0..MAX_ENTRIES {
            put(&mut s, 2, i as u64, b"/d", 8);
        }
        // Started again once: the first inode's links are gone.
        assert!(!s.seen.contains_key(&(1, 1)));
        assert!(s.entries < MAX_ENTRIES);
    }
}
