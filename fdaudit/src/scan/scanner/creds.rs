//! scan's boundary finding: an inheritable fd whose file the process's own credentials could
//! not have opened (root's 0600 key, root's socket, held by a process running as nobody).
//! The process was handed it, or kept it across a privilege drop, and every child it spawns
//! gets it too: the same shape as `trace`'s CRITICAL.
//!
//! Only fds that are findings already (inheritable, >= 3) of a process without root's power
//! over them are asked, with one `statx` of the fd link from cached attributes
//! (`AT_STATX_DONT_SYNC`: a FUSE or NFS server is not asked), shared with the fd's kind.
//! The check is the kernel's `generic_permission` without ACLs: owner, group (fsgid and
//! supplementary groups) or other bits against the access mode the fd was opened with,
//! then `CAP_DAC_OVERRIDE` (read and write) and `CAP_DAC_READ_SEARCH` (read).

use std::ffi::CStr;
use std::os::fd::RawFd;

use super::kind::LinkStat;
use crate::fdkind::FdKind;
use crate::scan::parse::Creds;

const CAP_DAC_OVERRIDE: u64 = 1 << 1;
const CAP_DAC_READ_SEARCH: u64 = 1 << 2;

/// The file's owner, group and permission bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// Why fd link `name` in `fd_dir` (of kind `kind`, opened with `access`) is beyond what
/// `creds` could open, or `None` (it is within them, or nothing is known). The fd link's
/// attributes come from `stat`, and only when the answer depends on them.
pub(super) fn beyond(
    creds: &Creds,
    (fd_dir, name): (RawFd, &CStr),
    stat: &mut LinkStat,
    kind: FdKind,
    access: Option<&str>,
) -> Option<String> {
    let path_kind = matches!(
        kind,
        FdKind::Regular | FdKind::Directory | FdKind::Device | FdKind::Fifo
    );
    if !path_kind && kind != FdKind::Socket {
        return None; // pipes, memfds, anon inodes: made, not opened by name
    }
    // Whatever the file's owner and mode: root holds any socket it made, and
    // CAP_DAC_OVERRIDE opens any file (`judge`).
    if (kind == FdKind::Socket && creds.fsuid == 0)
        || (path_kind && creds.cap_eff & CAP_DAC_OVERRIDE != 0)
    {
        return None;
    }
    let st = stat.get(
        fd_dir,
        name,
        libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_UID | libc::STATX_GID,
    )?;
    let owner = Owner {
        uid: st.stx_uid,
        gid: st.stx_gid,
        mode: u32::from(st.stx_mode) & 0o7777,
    };
    if kind == FdKind::Socket {
        return roots_socket(creds, owner);
    }
    judge(creds, owner, access?)
}

/// A socket's inode belongs to whoever created it (sockfs: the creating task's fsuid), and
/// its mode lets everyone in: a socket root made, held by a process that is not root.
fn roots_socket(creds: &Creds, owner: Owner) -> Option<String> {
    (owner.uid == 0 && creds.fsuid != 0).then(|| {
        format!(
            "root made this socket (its inode's owner is uid 0) and the process runs as uid {}: \
             root handed it over or the process kept it across a privilege drop",
            creds.fsuid
        )
    })
}

/// Whether `creds` may open a file of `owner` with `access` ("r", "w", "rw"; "path" needs
/// no permission on the file), as the kernel decides without ACLs and LSMs.
pub(super) fn judge(creds: &Creds, owner: Owner, access: &str) -> Option<String> {
    let (read, write) = match access {
        "r" => (true, false),
        "w" => (false, true),
        "rw" => (true, true),
        _ => return None,
    };
    let bits = if creds.fsuid == owner.uid {
        owner.mode >> 6
    } else if creds.fsgid == owner.gid || creds.groups.contains(&owner.gid) {
        owner.mode >> 3
    } else {
        owner.mode
    } & 0o7;
    let by_mode = (!read || bits & 0o4 != 0) && (!write || bits & 0o2 != 0);
    let override_ = creds.cap_eff & CAP_DAC_OVERRIDE != 0;
    let read_search = !write && creds.cap_eff & CAP_DAC_READ_SEARCH != 0;
    if by_mode || override_ || read_search {
        return None;
    }
    Some(format!(
        "the process could not have opened it ({access}): it is uid {}'s, group {}, mode {:04o}, \
         and the process runs as uid {} group {} without CAP_DAC_OVERRIDE{}; it was handed the \
         fd or kept it across a privilege drop",
        owner.uid,
        owner.gid,
        owner.mode,
        creds.fsuid,
        creds.fsgid,
        if write { "" } else { " or CAP_DAC_READ_SEARCH" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody(caps: u64) -> Creds {
        Creds {
            fsuid: 65534,
            fsgid: 65534,
            groups: vec![],
            cap_eff: caps,
        }
    }

    const ROOT_KEY: Owner = Owner {
        uid: 0,
        gid: 0,
        mode: 0o600,
    };

    #[test]
    fn root_s_0600_key_is_beyond_nobody() {
        let why = judge(&nobody(0), ROOT_KEY, "r").expect("nobody cannot read root's 0600 key");
        assert!(why.contains("uid 0's, group 0, mode 0600"), "{why}");
        assert!(
            judge(&nobody(0), ROOT_KEY, "path").is_none(),
            "O_PATH needs no permission"
        );
        // Its own file, and files its group or everyone may read.
        let own = Owner {
            uid: 65534,
            gid: 65534,
            mode: 0o600,
        };
        assert!(judge(&nobody(0), own, "rw").is_none());
        let group = Owner {
            uid: 0,
            gid: 4,
            mode: 0o640,
        };
        assert!(judge(&nobody(0), group, "r").is_some(), "not in group 4");
        let mut adm = nobody(0);
        adm.groups = vec![4];
        assert!(judge(&adm, group, "r").is_none(), "a supplementary group");
        assert!(judge(&adm, group, "w").is_some(), "the group may not write");
        let world = Owner {
            uid: 0,
            gid: 0,
            mode: 0o644,
        };
        assert!(judge(&nobody(0), world, "r").is_none());
        assert!(judge(&nobody(0), world, "rw").is_some());
        // The owner's bits are the owner's only, even when they give less than others'.
        let odd = Owner {
            uid: 65534,
            gid: 0,
            mode: 0o066,
        };
        assert!(judge(&nobody(0), odd, "r").is_some());
    }

    #[test]
    fn capabilities_open_what_the_mode_does_not() {
        assert!(judge(&nobody(CAP_DAC_OVERRIDE), ROOT_KEY, "rw").is_none());
        assert!(judge(&nobody(CAP_DAC_READ_SEARCH), ROOT_KEY, "r").is_none());
        assert!(
            judge(&nobody(CAP_DAC_READ_SEARCH), ROOT_KEY, "w").is_some(),
            "CAP_DAC_READ_SEARCH does not give write"
        );
    }

    #[test]
    fn root_s_socket_held_by_another_user() {
        let sock = Owner {
            uid: 0,
            gid: 0,
            mode: 0o777,
        };
        assert!(roots_socket(&nobody(0), sock).is_some());
        let root = Creds {
            fsuid: 0,
            ..nobody(0)
        };
        assert!(roots_socket(&root, sock).is_none());
        assert!(roots_socket(&nobody(0), Owner { uid: 1000, ..sock }).is_none());
    }
}
