//! Who can rename the entries on an fd's path: a name only some other user can choose is no
//! evidence that the file is harmless (#26 item 3: the owner of a parent directory renames
//! `id_rsa` to `notes.txt`, and a verdict resting on the name drops from high to medium).
//!
//! The walk goes down the fd's link text from the process's own root, one component at a
//! time, with `openat2(RESOLVE_CACHED)`: only what the dentry cache already holds (the
//! directories above an open file are pinned there), so a FUSE or NFS server that does not
//! answer cannot stall the scan. Attributes come from `statx(AT_STATX_DONT_SYNC)`.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// Someone other than root who can rename an entry on the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renamer {
    /// The owner of a directory on the path, or of an entry in a sticky directory.
    User(u32),
    /// The members of the group of a group-writable directory without the sticky bit.
    Group(u32),
    /// Any user: a world-writable directory without the sticky bit.
    Anyone,
    /// The walk could not finish from the cache (`EAGAIN`), or a component is no longer a
    /// directory: nobody is known not to be able to.
    Unchecked,
}

impl Renamer {
    /// Whether a process running as `uid` chose this name itself (or root did).
    pub fn trusted_by(self, uid: Option<u32>) -> bool {
        matches!(self, Renamer::User(u) if Some(u) == uid)
    }

    /// For people: "uid 65534", "group 100", "any user", "a user it could not check".
    pub fn describe(self) -> String {
        match self {
            Renamer::User(u) => format!("uid {u}"),
            Renamer::Group(g) => format!("group {g}"),
            Renamer::Anyone => "any user".to_owned(),
            Renamer::Unchecked => "a user fdaudit could not check (not in the cache)".to_owned(),
        }
    }
}

/// What the walk down to a file's directory found: the same for every file of that
/// directory, so [`Cache`] keeps it per directory path.
#[derive(Clone)]
enum Walk {
    /// The renamers of the directories above the directory, and its own mode, owner and
    /// group (what the file's owner is judged against).
    Dir(Vec<Renamer>, (u32, u32, u32)),
    /// The walk stopped before the directory (the last renamer is `Unchecked`): the
    /// answer whatever the file's owner.
    Ended(Vec<Renamer>),
    /// No `RESOLVE_CACHED` on this kernel: nothing is checked.
    Unsupported,
}

/// Directories whose walk one fd table keeps: their paths (at most PATH_MAX each) are all
/// the memory it holds.
const MAX_CACHED_DIRS: usize = 256;

/// The renamers of one fd table's files, walking each directory once: the process's root
/// is opened at its first file, and a directory's walk is kept for the table's other files
/// in it (the fds of a table share a few directories, and the dentries walked do not change
/// under a scan that cares: a rename meanwhile is a race the scan loses either way).
#[derive(Default)]
pub struct Cache {
    /// `PID/root`, opened at the first file; `Some(None)` when it could not be.
    root: Option<Option<OwnedFd>>,
    dirs: HashMap<Vec<u8>, Walk>,
}

impl Cache {
    /// The renamers of `path` (the fd's link text, absolute) as seen from the process
    /// whose `/proc/PID` directory is `pid_dir`, besides root; `owner` is the uid owning
    /// the file itself (from its inode). Empty where the kernel has no `RESOLVE_CACHED`
    /// (before 5.12): the name is trusted there, as docs/scan.md says.
    pub fn renamers(&mut self, pid_dir: RawFd, path: &[u8], owner: Option<u32>) -> Vec<Renamer> {
        let Some(root) = self.root.get_or_insert_with(|| open_root(pid_dir)) else {
            return vec![Renamer::Unchecked];
        };
        let comps: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let Some((last, dirs)) = comps.split_last() else {
            return Vec::new();
        };
        // The path up to the file's name: every component comes from `path` itself.
        let key = &path[..last.as_ptr() as usize - path.as_ptr() as usize];
        let walk = match self.dirs.get(key) {
            Some(w) => w.clone(),
            None => {
                let w = walk(root, dirs);
                if self.dirs.len() < MAX_CACHED_DIRS {
                    self.dirs.insert(key.to_vec(), w.clone());
                }
                w
            }
        };
        let mut out = match walk {
            Walk::Unsupported => return Vec::new(),
            Walk::Ended(out) => out,
            Walk::Dir(mut out, (mode, uid, gid)) => {
                push_dir_renamers(&mut out, mode, uid, gid, owner);
                out
            }
        };
        out.dedup();
        out
    }
}

/// Walks down `dirs` from `root`, one component at a time from the dentry cache, noting
/// who can rename each step.
fn walk(root: &OwnedFd, dirs: &[&[u8]]) -> Walk {
    let mut out = Vec::new();
    let Some(mut here) = attrs(root.as_raw_fd()) else {
        out.push(Renamer::Unchecked);
        return Walk::Ended(out);
    };
    let mut held: Option<OwnedFd> = None;
    for comp in dirs {
        let child = match step(held.as_ref().unwrap_or(root), comp) {
            Step::Dir(fd) => fd,
            Step::Unsupported => return Walk::Unsupported,
            Step::Failed => {
                out.push(Renamer::Unchecked);
                return Walk::Ended(out);
            }
        };
        let below = attrs(child.as_raw_fd());
        push_dir_renamers(&mut out, here.0, here.1, here.2, below.map(|a| a.1));
        let Some(below) = below else {
            out.push(Renamer::Unchecked);
            return Walk::Ended(out);
        };
        here = below;
        held = Some(child);
    }
    Walk::Dir(out, here)
}

/// Who besides root can rename an entry owned by `child_uid` in a directory of this mode,
/// owner and group.
fn push_dir_renamers(
    out: &mut Vec<Renamer>,
    mode: u32,
    uid: u32,
    gid: u32,
    child_uid: Option<u32>,
) {
    let sticky = mode & libc::S_ISVTX != 0;
    if uid != 0 {
        out.push(Renamer::User(uid));
    }
    if sticky {
        // Others may write here, but rename only what they own.
        if mode & 0o022 != 0 {
            match child_uid {
                Some(0) => {}
                Some(u) => out.push(Renamer::User(u)),
                None => out.push(Renamer::Unchecked),
            }
        }
    } else if mode & 0o002 != 0 {
        out.push(Renamer::Anyone);
    } else if mode & 0o020 != 0 && gid != 0 {
        out.push(Renamer::Group(gid));
    }
}

/// The process's root directory, `PID/root` opened through the magic link.
fn open_root(pid_dir: RawFd) -> Option<OwnedFd> {
    // SAFETY: a NUL-terminated literal; the result is checked.
    let fd = unsafe {
        libc::openat(
            pid_dir,
            c"root".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: fd was just opened and is ours.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

enum Step {
    Dir(OwnedFd),
    /// No openat2 or no RESOLVE_CACHED on this kernel.
    Unsupported,
    /// Not in the cache, gone, or not a directory.
    Failed,
}

/// `comp` below `dir`, from the dentry cache only, never following a symlink (the kernel's
/// link text has none).
fn step(dir: &OwnedFd, comp: &[u8]) -> Step {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;
    let Ok(name) = CString::new(comp) else {
        return Step::Failed;
    };
    match rustix::fs::openat2(
        dir,
        name.as_c_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::CACHED
            | ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Step::Dir(fd),
        Err(Errno::NOSYS | Errno::INVAL | Errno::TOOBIG) => Step::Unsupported,
        Err(_) => Step::Failed,
    }
}

/// Mode, owner and group of the directory `fd`, from cached attributes.
fn attrs(fd: RawFd) -> Option<(u32, u32, u32)> {
    // SAFETY: st is plain data, filled by statx.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let want = libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_UID | libc::STATX_GID;
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH; st is valid for writing.
    let r = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            want,
            &mut st,
        )
    };
    let mode = u32::from(st.stx_mode);
    (r == 0 && st.stx_mask & want == want && mode & libc::S_IFMT == libc::S_IFDIR)
        .then_some((mode, st.stx_uid, st.stx_gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(mode: u32, uid: u32, gid: u32, child: Option<u32>) -> Vec<Renamer> {
        let mut v = Vec::new();
        push_dir_renamers(&mut v, mode, uid, gid, child);
        v
    }

    #[test]
    fn who_renames_in_a_directory() {
        assert_eq!(of(0o755, 0, 0, Some(0)), vec![]);
        assert_eq!(of(0o755, 65534, 0, Some(0)), vec![Renamer::User(65534)]);
        assert_eq!(of(0o1777, 0, 0, Some(0)), vec![]);
        assert_eq!(of(0o1777, 0, 0, Some(1000)), vec![Renamer::User(1000)]);
        assert_eq!(of(0o1777, 0, 0, None), vec![Renamer::Unchecked]);
        assert_eq!(of(0o777, 0, 0, Some(0)), vec![Renamer::Anyone]);
        assert_eq!(of(0o775, 0, 100, Some(0)), vec![Renamer::Group(100)]);
        assert_eq!(of(0o775, 0, 0, Some(0)), vec![]);
    }

    #[test]
    fn a_process_trusts_only_its_own_names() {
        assert!(Renamer::User(1000).trusted_by(Some(1000)));
        assert!(!Renamer::User(65534).trusted_by(Some(0)));
        assert!(!Renamer::Anyone.trusted_by(Some(0)));
        assert!(!Renamer::Unchecked.trusted_by(None));
    }

    #[test]
    fn root_owned_paths_have_no_renamers() {
        // SAFETY: a NUL-terminated literal.
        let pid_dir = unsafe {
            libc::open(
                c"/proc/self".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        assert!(pid_dir >= 0);
        // /etc is root's 755 on every machine this runs on.
        let r = Cache::default().renamers(pid_dir, b"/etc/hostname", Some(0));
        // SAFETY: ours.
        unsafe { libc::close(pid_dir) };
        assert!(r.is_empty(), "{r:?}");
    }
}
