//! The target of a leaked fd: what the kernel saw (its path walk, or a pseudo-file named
//! from its inode), or the live `/proc` link when the walk was cut or missing; and whether
//! the result is whole.

use fdaudit_common::FdPath;

use crate::{fdkind::FdKind, procfs_util};

/// The bytes of a NUL-terminated kernel string.
pub fn cstr(b: &[u8]) -> Vec<u8> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    b[..end].to_vec()
}

/// What decoding asks of the live system: the session injects [`Procfs`], tests a stub, and
/// the decoder itself reads no file.
pub trait Live: Sync {
    /// The live link of a leaked fd, when it is still the file the kernel saw (inode `ino`):
    /// in the child, else in the parent, else in fdaudit itself (a traced command's stdio is
    /// often fdaudit's own, passed on: `trace -- sh -c '…; exec /bin/true' > out` outlives
    /// both). Without one, the target is what the kernel saw (pseudo-files are named from the
    /// inode).
    fn fd_target(&self, pid: u32, parent: u32, fd: u32, ino: u64) -> Option<Vec<u8>>;
    /// The image a live process runs (`/proc/PID/exe`).
    fn exe(&self, pid: u32) -> Option<Vec<u8>>;
    /// Whether a spawn's stdio is named (`trace` shows it; `watch` counts leaked fds only).
    fn names_stdio(&self) -> bool {
        true
    }
}

/// The live system, read through /proc (see [`procfs_util::fd_target`] for what a link is
/// checked against).
pub struct Procfs;

impl Live for Procfs {
    fn fd_target(&self, pid: u32, parent: u32, fd: u32, ino: u64) -> Option<Vec<u8>> {
        [pid, parent, std::process::id()]
            .into_iter()
            .find_map(|p| procfs_util::fd_target(p, fd, ino))
    }

    fn exe(&self, pid: u32) -> Option<Vec<u8>> {
        procfs_util::exe_of(pid)
    }
}

/// The live system as a node agent (`watch`) asks it: no fd's live link (its records are
/// read after the process may be gone, and its metrics name a file by device and inode),
/// no stdio, only the image of an exec through an fd or of a cut exec path (rare, and the
/// `child` label of that spawn). Nothing is read from /proc for a common spawn.
pub struct Agent;

impl Live for Agent {
    fn fd_target(&self, _: u32, _: u32, _: u32, _: u64) -> Option<Vec<u8>> {
        None
    }

    fn exe(&self, pid: u32) -> Option<Vec<u8>> {
        procfs_util::exe_of(pid)
    }

    fn names_stdio(&self) -> bool {
        false
    }
}

/// A test's stub: the function names fds; no process has an image.
#[cfg(test)]
pub struct Links(pub fn(pid: u32, parent: u32, fd: u32, ino: u64) -> Option<Vec<u8>>);

#[cfg(test)]
impl Live for Links {
    fn fd_target(&self, pid: u32, parent: u32, fd: u32, ino: u64) -> Option<Vec<u8>> {
        (self.0)(pid, parent, fd, ino)
    }

    fn exe(&self, _: u32) -> Option<Vec<u8>> {
        None
    }
}

/// The image an exec through an fd ran (`fexecve`, `execveat(fd, "", AT_EMPTY_PATH)`: the
/// kernel's file name is `/dev/fd/N`): the new image's `/proc/PID/exe` (`/memfd:payload
/// (deleted)` for a memfd). `Some(None)` when the name is such a path but the process is
/// gone (the name is then partial); `None` for any other name.
pub fn exec_image(pid: u32, filename: &[u8], live: &dyn Live) -> Option<Option<Vec<u8>>> {
    let rest = filename
        .strip_prefix(b"/dev/fd/")
        .or_else(|| filename.strip_prefix(b"/proc/self/fd/"))?;
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(live.exe(pid))
}

/// Joins the components of a kernel-built path (leaf first) into "/a/b/c"; a cut walk is
/// shown with a leading "…".
pub fn join_path(p: &FdPath) -> Vec<u8> {
    let depth = (p.depth as usize).min(p.comps.len());
    let mut s = Vec::new();
    if p.complete == 0 {
        s.extend_from_slice("…".as_bytes());
    }
    for c in p.comps[..depth].iter().rev() {
        s.push(b'/');
        s.extend_from_slice(&cstr(c));
    }
    if s.is_empty() {
        s.push(b'/');
    }
    s
}

/// Whether a live link can be the file the kernel saw: its last component starts with the
/// kernel's leaf name, where there is one (the check that stands in for fdinfo's `ino:`
/// line before 5.14; a cut leaf is a prefix).
fn link_ends_in_leaf(link: &[u8], kernel_path: Option<&FdPath>) -> bool {
    let Some(leaf) = kernel_path
        .filter(|p| p.depth > 0)
        .map(|p| cstr(&p.comps[0]))
    else {
        return true;
    };
    let path = link.strip_suffix(DELETED_SUFFIX).unwrap_or(link);
    path.rsplit(|&b| b == b'/')
        .next()
        .is_some_and(|last| last.starts_with(&leaf))
}

/// What the kernel appends to the link of a file deleted while open.
const DELETED_SUFFIX: &[u8] = b" (deleted)";

/// A target read from a live /proc link, without the " (deleted)" the kernel appends: (path,
/// deleted).
fn strip_deleted(link: Vec<u8>) -> (Vec<u8>, bool) {
    match link.strip_suffix(DELETED_SUFFIX) {
        Some(p) => (p.to_vec(), true),
        None => (link, false),
    }
}

/// Where a leaked fd was seen: the process, its parent, the fd and the file's inode.
#[derive(Debug, Clone, Copy)]
pub struct Site {
    pub pid: u32,
    pub parent: u32,
    pub fd: u32,
    pub ino: u64,
}

/// Whether `/dev/NAME` is the device node with inode `ino`: a stdio device (`/dev/null`,
/// a tty) named whole when the process is gone and only its leaf name is known.
fn dev_node(name: &[u8], ino: u64) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::MetadataExt as _;
    if name.is_empty() || name.contains(&b'/') {
        return false;
    }
    let path = std::path::Path::new("/dev").join(std::ffi::OsStr::from_bytes(name));
    std::fs::metadata(path).is_ok_and(|m| {
        m.ino() == ino && {
            use std::os::unix::fs::FileTypeExt as _;
            m.file_type().is_char_device() || m.file_type().is_block_device()
        }
    })
}

/// A leaked fd's target as named: the bytes, whether the live link says the file was
/// deleted, and whether the target is not the whole path (`path_partial`).
pub struct Named {
    pub target: Vec<u8>,
    pub deleted: bool,
    pub partial: bool,
}

/// Names the file of kind `kind` whose dentry name is `name` (`name_cut`: cut by its buffer)
/// and whose path the kernel walked as `kernel_path`, seen at `at`.
pub fn name(
    kind: FdKind,
    name: &[u8],
    name_cut: bool,
    kernel_path: Option<&FdPath>,
    at: Site,
    live: &dyn Live,
) -> Named {
    let mut deleted = false;
    let mut partial = false;
    let target: Vec<u8> = match kind {
        FdKind::Socket => format!("socket:[{}]", at.ino).into_bytes(),
        FdKind::Pipe => format!("pipe:[{}]", at.ino).into_bytes(),
        FdKind::Eventfd
        | FdKind::Epoll
        | FdKind::Timerfd
        | FdKind::Signalfd
        | FdKind::Inotify
        | FdKind::Fanotify
        | FdKind::Bpf
        | FdKind::Perf
        | FdKind::AnonInode => [b"anon_inode:".as_slice(), name].concat(),
        FdKind::Pidfd => b"anon_inode:[pidfd]".to_vec(),
        // A memfd has no path (its dentry is a root of the kernel's internal shm mount): its
        // name is "memfd:NAME"; a cut one is read again from the live link ("/memfd:NAME
        // (deleted)").
        FdKind::Memfd => match live
            .fd_target(at.pid, at.parent, at.fd, at.ino)
            .filter(|l| name_cut && l.strip_prefix(b"/").is_some_and(|l| l.starts_with(name)))
        {
            Some(link) => {
                let (p, _) = strip_deleted(link);
                p.strip_prefix(b"/").map(<[u8]>::to_vec).unwrap_or(p)
            }
            None if name_cut => {
                partial = true;
                [name, "…".as_bytes()].concat()
            }
            None => name.to_vec(),
        },
        _ => match kernel_path {
            Some(p) if p.complete != 0 => join_path(p),
            // A cut or missing path: the live link is better, if the process is still there.
            kp => {
                match live
                    .fd_target(at.pid, at.parent, at.fd, at.ino)
                    .filter(|l| link_ends_in_leaf(l, kp))
                {
                    Some(link) => {
                        let (p, d) = strip_deleted(link);
                        deleted = d;
                        p
                    }
                    None if kp.is_none() && kind == FdKind::Device && dev_node(name, at.ino) => {
                        [b"/dev/".as_slice(), name].concat()
                    }
                    None => {
                        partial = true;
                        kp.map(join_path).unwrap_or_else(|| {
                            // No path from the kernel (stdio, or past MAX_PATHS) and no live
                            // link: the leaf name alone.
                            let mut t = "…/".as_bytes().to_vec();
                            t.extend_from_slice(name);
                            t.extend_from_slice(format!(" (inode {})", at.ino).as_bytes());
                            t
                        })
                    }
                }
            }
        },
    };
    Named {
        target,
        deleted,
        partial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node agent's decoding reads no fd's live link and names no stdio (#44): its metrics
    /// use neither, and its records may come after the process is gone. The same record
    /// decoded for `trace` reads the live link of this test's own open file.
    #[test]
    fn an_agent_reads_no_fd_link_and_names_no_stdio() {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let exe = std::env::current_exe().unwrap();
        let file = std::fs::File::open(&exe).unwrap();
        let ino = file.metadata().unwrap().ino();
        // SAFETY: SpawnRecord is plain integers and arrays; all-zero is valid.
        let mut rec: Box<fdaudit_common::SpawnRecord> = Box::new(unsafe { std::mem::zeroed() });
        rec.header.kind = 1;
        rec.pid = std::process::id();
        rec.nfds = 1;
        let leaked = &mut rec.fds[0];
        leaked.fd = file.as_raw_fd() as u32;
        leaked.mode = 0o100755;
        leaked.magic = 0xef53;
        leaked.ino = ino;
        let leaf = exe.file_name().unwrap().as_encoded_bytes();
        let n = leaf.len().min(leaked.name.len() - 1);
        leaked.name[..n].copy_from_slice(&leaf[..n]);
        rec.stdio_mask = 0b001;
        rec.stdio[0] = rec.fds[0];
        let counting = crate::engine::counting::Counting::Nothing;
        // No kernel path sent: `trace` asks the live link, which names the file whole.
        let traced = super::super::decode::spawn_from_record(&rec, &[], counting, &Procfs);
        assert_eq!(
            traced.leaked_fds[0].target.raw,
            exe.as_os_str().as_encoded_bytes()
        );
        assert!(!traced.leaked_fds[0].partial);
        assert_eq!(traced.stdio.len(), 1);
        let agent = super::super::decode::spawn_from_record(&rec, &[], counting, &Agent);
        assert!(agent.leaked_fds[0].partial, "no live link was read");
        assert_eq!(
            agent.leaked_fds[0].ino, ino,
            "the file is still named by its inode"
        );
        assert!(agent.stdio.is_empty(), "no stdio is named");
    }

    #[test]
    fn only_an_fd_path_is_an_exec_through_an_fd() {
        use std::os::unix::ffi::OsStrExt as _;
        assert_eq!(exec_image(1, b"/bin/true", &Procfs), None);
        assert_eq!(exec_image(1, b"/dev/fd/", &Procfs), None);
        assert_eq!(exec_image(1, b"/dev/fd/4x", &Procfs), None);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(
            exec_image(std::process::id(), b"/dev/fd/4", &Procfs),
            Some(Some(exe.as_os_str().as_bytes().to_vec()))
        );
    }
}
