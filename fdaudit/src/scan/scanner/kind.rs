//! An fd's kind: from its link text and fdinfo, and from the inode's type where the text
//! is not to be trusted.

use std::ffi::CStr;
use std::os::fd::RawFd;

use crate::fdkind::FdKind;
use crate::scan::parse;

pub(super) use super::linkstat::LinkStat;

/// Kind from the link text and fdinfo: a path is a directory when fdinfo's flags hold
/// O_DIRECTORY, a device under /dev/, otherwise a regular file.
///
/// Three cases ask the inode's type instead (`statx` of the fd link with
/// `AT_STATX_DONT_SYNC`, which a FUSE or NFS file system answers from its cache rather
/// than from its server): a link the kernel would not print (`partial`: a path past
/// PATH_MAX, which the owner of any parent directory can make), and a path under `/dev/`
/// (in a mount namespace of its own, any user can mount a tmpfs there and name a regular
/// file `/dev/null`), and an inheritable "regular file" (a directory opened without
/// O_DIRECTORY, or a named FIFO, has no flag that says so). Only on a live procfs; on a
/// fixture tree the text is all there is.
pub fn kind_of(
    live: bool,
    target: &[u8],
    partial: bool,
    info: Option<parse::FdinfoEntry>,
    (fd_dir, name): (RawFd, &CStr),
    stat: &mut LinkStat,
) -> FdKind {
    let mut inode = || inode(live, fd_dir, name, stat);
    if partial {
        return match inode() {
            Some((mode, _)) => from_mode(mode),
            // Nothing known: the worst a path could be.
            None if has_o_directory(info) => FdKind::Directory,
            None => FdKind::Regular,
        };
    }
    let base = FdKind::from_link(target, None);
    if base == FdKind::Device {
        if let Some((mode, rdev)) = inode() {
            // /dev/null, rated info, must be the null device (char 1:3): in a mount
            // namespace of its own a user can bind another device over the path.
            if target == b"/dev/null" && from_mode(mode) == FdKind::Device && rdev != (1, 3) {
                return FdKind::Other;
            }
            return from_mode(mode);
        }
    }
    if matches!(base, FdKind::Regular | FdKind::Device) && has_o_directory(info) {
        return FdKind::Directory;
    }
    // A directory opened O_RDONLY or O_PATH without O_DIRECTORY reads as a file by its
    // flags, yet a child can openat() through it: an inheritable one asks the inode.
    if base == FdKind::Regular && info.is_some_and(|i| i.flags & libc::O_CLOEXEC as u32 == 0) {
        if let Some((mode, _)) = inode() {
            return from_mode(mode);
        }
    }
    base
}

/// O_DIRECTORY in fdinfo means a directory, except that O_TMPFILE files carry it too
/// (O_TMPFILE = __O_TMPFILE | O_DIRECTORY).
fn has_o_directory(info: Option<parse::FdinfoEntry>) -> bool {
    const O_TMPFILE_BIT: u32 = 0o20000000;
    info.is_some_and(|i| i.flags & libc::O_DIRECTORY as u32 != 0 && i.flags & O_TMPFILE_BIT == 0)
}

fn from_mode(mode: u32) -> FdKind {
    FdKind::from_link(b"/", Some(mode))
}

/// `st_mode` and the device number (major, minor; 0:0 for a file that is no device) of the
/// file behind fd link `name` in `fd_dir`, from the inode (cached attributes only:
/// `AT_STATX_DONT_SYNC`).
fn inode(live: bool, fd_dir: RawFd, name: &CStr, stat: &mut LinkStat) -> Option<(u32, (u32, u32))> {
    if !live {
        return None;
    }
    let st = stat.get(fd_dir, name, libc::STATX_TYPE)?;
    Some((
        u32::from(st.stx_mode),
        (st.stx_rdev_major, st.stx_rdev_minor),
    ))
}
