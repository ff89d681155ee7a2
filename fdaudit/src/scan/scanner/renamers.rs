//! Who can rename the entries on an fd's path: a name only some other user can choose is no
//! evidence that the file is harmless (#26 item 3: the owner of a parent directory renames
//! `id_rsa` to `notes.txt`, and a verdict resting on the name drops from high to medium).
//!
//! The walk goes down the fd's link text from the process's own root, one component at a
//! time, with `openat2(RESOLVE_CACHED)`: only what the dentry cache already holds (the
//! directories above an open file are pinned there), so a FUSE or NFS server that does not
//! answer cannot stall the scan. Attributes come from `statx(AT_STATX_DONT_SYNC)`.

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

/// The renamers of `path` (the fd's link text, absolute) as seen from the process whose
/// `/proc/PID` directory is `pid_dir`, besides root; `owner` is the uid owning the file
/// itself (from its inode). Empty where the kernel has no `RESOLVE_CACHED` (before 5.12):
/// the name is trusted there, as docs/scan.md says.
pub fn renamers(pid_dir: RawFd, path: &[u8], owner: Option<u32>) -> Vec<Renamer> {
    let Some(root) = open_root(pid_dir) else {
        return vec![Renamer::Unchecked];
    };
    let comps: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    let mut out = Vec::new();
    let mut dir = root;
    for (i, comp) in comps.iter().enumerate() {
        let Some((mode, uid, gid)) = attrs(dir.as_raw_fd()) else {
            out.push(Renamer::Unchecked);
            break;
        };
        let last = i + 1 == comps.len();
        let (child, child_uid) = if last {
            (None, owner)
        } else {
            match step(dir.as_raw_fd(), comp) {
                Step::Dir(fd) => {
                    let u = attrs(fd.as_raw_fd()).map(|a| a.1);
                    (Some(fd), u)
                }
                Step::Unsupported => return Vec::new(),
                Step::Failed => {
                    out.push(Renamer::Unchecked);
                    break;
                }
            }
        };
        push_dir_renamers(&mut out, mode, uid, gid, child_uid);
        match child {
            Some(fd) => dir = fd,
            None => break,
        }
    }
    out.dedup();
    out
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

/// The uid owning the file behind fd link `name` in `fd_dir`, from cached attributes.
pub fn file_owner(fd_dir: RawFd, name: &std::ffi::CStr) -> Option<u32> {
    super::kind::link_statx(fd_dir, name, libc::STATX_UID).map(|st| st.stx_uid)
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
fn step(dir: RawFd, comp: &[u8]) -> Step {
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    const RESOLVE_CACHED: u64 = 0x20;
    let Ok(name) = CString::new(comp) else {
        return Step::Failed;
    };
    // struct open_how (linux/openat2.h); libc's is non-exhaustive.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_CACHED | RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: name is NUL-terminated, how is a valid open_how of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            name.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r >= 0 {
        // SAFETY: r is a new fd, ours.
        return Step::Dir(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::E2BIG) => Step::Unsupported,
        _ => Step::Failed,
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
        let r = renamers(pid_dir, b"/etc/hostname", Some(0));
        // SAFETY: ours.
        unsafe { libc::close(pid_dir) };
        assert!(r.is_empty(), "{r:?}");
    }
}
