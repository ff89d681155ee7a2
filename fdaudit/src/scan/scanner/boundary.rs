//! Fds that point outside their process's root or mount namespace (issue #22): a host
//! directory fd surviving into a container's process, the runc CVE-2024-21626 shape.
//!
//! The kernel's `/proc/PID/mountinfo` lists the mounts of PID's mount namespace that are
//! reachable from PID's root (`show_mountinfo` skips the others: `seq_path_root` gives
//! `SEQ_SKIP`), and fdinfo's `mnt_id` names the mount an fd is on. Mount ids are unique on
//! the machine while the mount lives, and the copies a new namespace gets from
//! `unshare(CLONE_NEWNS)` have ids of their own. So an fd is inside when its mount is in
//! PID's mountinfo. Otherwise:
//! - on the very mount PID's root is on (a chroot into a subdirectory of a mount, which
//!   mountinfo skips): inside when its path is the root's or beneath it (both paths as the
//!   scanner reads them, on the same mount);
//! - on a mount of the scanner's own namespace, or of pid 1's (the host's, when the
//!   scanner runs in a container of its own with the host's pids): outside (PID's root,
//!   when that is PID's namespace, or PID's namespace);
//! - on a mount no mountinfo read shows (sockfs, pipefs, memfd's shmem, dma-buf: the
//!   kernel's internal mounts; a detached mount; a third namespace): not judged.

use std::os::fd::{AsRawFd as _, RawFd};

use super::*;

/// Where an fd points, seen from its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Inside,
    /// The fd's mount is the root's: the answer rests on the fd's path.
    NeedPath,
    /// On a mount of the process's namespace that its root does not reach.
    OutsideRoot,
    /// On a mount of another mount namespace than the process's.
    OutsideNamespace,
}

/// What one process (or thread: root and namespace are per task) sees: the mounts of its
/// mountinfo, the mount its root is on and the root's path.
#[derive(Debug, Clone, Default)]
pub(super) struct MountView {
    /// Sorted mount ids of its mountinfo.
    pub mounts: Vec<u32>,
    pub root_mnt: Option<u32>,
    /// `readlink /proc/PID/root`, as the scanner sees it.
    pub root_path: Vec<u8>,
    /// Its mount namespace (inode of `ns/mnt`).
    pub ns: Option<u64>,
}

/// The mounts of one namespace as one process sees them.
#[derive(Debug, Clone, Default)]
pub(super) struct NsMounts {
    /// Sorted mount ids of its mountinfo.
    pub mounts: Vec<u32>,
    pub ns: Option<u64>,
}

/// The namespaces a host fd may come from: the scanner's own, then pid 1's unless that is
/// known to be the same.
#[derive(Debug, Clone, Default)]
pub(super) struct OwnMounts {
    pub refs: Vec<NsMounts>,
}

/// The mount ids of a mountinfo file: the first field of each line. The rest of a line is
/// not needed (and the kernel octal-escapes white space in its paths, so no path can
/// start a line of its own).
pub(super) fn mount_ids(mountinfo: &[u8]) -> Vec<u32> {
    let mut v: Vec<u32> = mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|l| at::parse_u32(l.split(|&b| b == b' ').next()?))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether `path` is `root` or beneath it (`/` holds every path).
pub(super) fn beneath(path: &[u8], root: &[u8]) -> bool {
    let root = root.strip_suffix(b"/").unwrap_or(root);
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with(b"/"),
        None => false,
    }
}

/// Where the fd on mount `mnt` points (module doc); `target` is its path when read.
pub(super) fn verdict(
    view: &MountView,
    own: &OwnMounts,
    mnt: u32,
    target: Option<&[u8]>,
) -> Verdict {
    if view.mounts.binary_search(&mnt).is_ok() {
        return Verdict::Inside;
    }
    if view.root_mnt == Some(mnt) {
        return match target {
            None => Verdict::NeedPath,
            // A path not read whole (empty) could be anywhere: rated as outside.
            Some(t) if !beneath(t, &view.root_path) => Verdict::OutsideRoot,
            Some(_) => Verdict::Inside,
        };
    }
    match own
        .refs
        .iter()
        .find(|r| r.mounts.binary_search(&mnt).is_ok())
    {
        Some(r) if r.ns.is_some() && r.ns == view.ns => Verdict::OutsideRoot,
        Some(_) => Verdict::OutsideNamespace,
        None => Verdict::Inside,
    }
}

/// The finding's severity and reason: critical when the fd has no close-on-exec (every
/// child gets it too), high when it has (the process itself holds it).
pub(super) fn finding(
    v: Verdict,
    fd: u32,
    target: &str,
    root: &str,
    inheritable: bool,
) -> (Severity, String) {
    let place = match v {
        Verdict::OutsideNamespace => {
            "outside the process's mount namespace (opened before it entered it)".to_owned()
        }
        _ => format!("outside the process's root directory {root}"),
    };
    let (sev, tail) = match inheritable {
        true => (
            Severity::Critical,
            "; it has no close-on-exec: every child spawned without closing it gets it too",
        ),
        false => (Severity::High, ""),
    };
    (sev, format!("fd {fd} \u{2192} {target}: {place}{tail}"))
}

/// Reads a symlink of procfs into a vector (`root`, `ns/mnt`).
fn link(dir: RawFd, name: &std::ffi::CStr) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = at::readlinkat(dir, name, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

impl Scanner<'_> {
    /// The scanner's own mounts and namespace, and pid 1's unless its namespace is known
    /// to be the scanner's (live procfs only; none otherwise, which turns the rule off: a fixture
    /// tree has no mounts to compare).
    pub(super) fn own_mounts(root: RawFd, live: bool) -> OwnMounts {
        let mut refs = Vec::new();
        if !live {
            return OwnMounts { refs };
        }
        let mut buf = Vec::new();
        for (info, ns) in [
            (c"self/mountinfo", c"self/ns/mnt"),
            (c"1/mountinfo", c"1/ns/mnt"),
        ] {
            // pid 1's `ns/mnt` may be closed to us (another user namespace, not dumpable)
            // while its mountinfo is not: then it is read whatever its namespace.
            let ns = link(root, ns).and_then(|l| parse::bracket_inode(&l));
            let known = ns.is_some() && refs.iter().any(|r: &NsMounts| r.ns == ns);
            if known || at::read_file_at(root, info, &mut buf).is_err() {
                continue;
            }
            refs.push(NsMounts {
                mounts: mount_ids(&buf),
                ns,
            });
        }
        OwnMounts { refs }
    }

    /// The view of the task whose directory is `task_dir`; `None` when it sees what the
    /// scanner sees (its namespace, its root at `/`: no fd of it can be outside), or when
    /// what the rule needs could not be read.
    pub(super) fn mount_view(&self, task_dir: RawFd, s: &mut Scratch) -> Option<MountView> {
        let own = self.own.refs.first().filter(|_| self.live)?;
        let ns = link(task_dir, c"ns/mnt").and_then(|l| parse::bracket_inode(&l));
        let root_path = link(task_dir, c"root")?;
        if ns.is_some() && ns == own.ns && root_path == b"/" {
            return None;
        }
        let root_mnt = self.root_mount(task_dir);
        // Without the root's mount, a chroot's own files could not be told from the rest.
        if root_mnt.is_none() && root_path != b"/" {
            return None;
        }
        if let Err(e) = at::read_file_at(task_dir, c"mountinfo", &mut s.file) {
            if !is_vanished(&e) {
                s.totals.unreadable_files += 1;
            }
            return None;
        }
        Some(MountView {
            mounts: mount_ids(&s.file),
            root_mnt,
            root_path,
            ns,
        })
    }

    /// The mount the task's root is on: its `root` link opened `O_PATH` (the walk jumps to
    /// the root; nothing asks its file system) and the `mnt_id` of our own fd's fdinfo.
    fn root_mount(&self, task_dir: RawFd) -> Option<u32> {
        let f = at::openat(task_dir, c"root", libc::O_PATH).ok()?;
        let name = std::ffi::CString::new(format!("self/fdinfo/{}", f.as_raw_fd())).ok()?;
        let mut buf = [0u8; 512];
        let n = at::read_head_at(raw(&self.root), &name, &mut buf).ok()?;
        parse::parse_fdinfo(&buf[..n])?.mnt_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &[u8] = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
        25 1 0:23 / /sys rw - sysfs sysfs rw\n\
        30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
        1 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
        x 1 8:1 / /odd rw - ext4 /dev/sda1 rw\n";

    #[test]
    fn mount_ids_are_the_first_field() {
        assert_eq!(mount_ids(INFO), [1, 22, 25, 30]);
        assert_eq!(mount_ids(b""), Vec::<u32>::new());
    }

    #[test]
    fn beneath_is_by_whole_components() {
        assert!(beneath(b"/srv/root", b"/srv/root"));
        assert!(beneath(b"/srv/root/etc/passwd", b"/srv/root"));
        assert!(beneath(b"/srv/root/x", b"/srv/root/"));
        assert!(beneath(b"/etc/passwd", b"/"));
        assert!(!beneath(b"/srv/rootx/secret", b"/srv/root"));
        assert!(!beneath(b"/etc/passwd", b"/srv/root"));
        assert!(!beneath(b"/srv", b"/srv/root"));
    }

    const HOST: Option<u64> = Some(4026531841);

    fn own() -> OwnMounts {
        OwnMounts {
            refs: vec![NsMounts {
                mounts: vec![1, 22, 25, 30],
                ns: HOST,
            }],
        }
    }

    #[test]
    fn the_hosts_mounts_through_pid_1_when_the_scanner_has_its_own_namespace() {
        // The scanner in a container (mounts 200..), pid 1 on the host.
        let own = OwnMounts {
            refs: vec![
                NsMounts {
                    mounts: vec![200, 201],
                    ns: Some(7),
                },
                own().refs.remove(0),
            ],
        };
        let v = MountView {
            mounts: vec![105],
            root_mnt: Some(101),
            root_path: b"/".to_vec(),
            ns: Some(9),
        };
        assert_eq!(verdict(&v, &own, 30, None), Verdict::OutsideNamespace);
        let host = MountView {
            mounts: vec![],
            root_mnt: Some(1),
            root_path: b"/srv/r".to_vec(),
            ns: HOST,
        };
        assert_eq!(verdict(&host, &own, 30, None), Verdict::OutsideRoot);
    }

    #[test]
    fn another_namespace_after_unshare_and_chroot() {
        // The new namespace's copies (100..) of the host's mounts; root on 101 (a copy of
        // /), a chroot into /tmp/r: mountinfo shows only /tmp/r/usr (105).
        let v = MountView {
            mounts: vec![105],
            root_mnt: Some(101),
            root_path: b"/tmp/r".to_vec(),
            ns: Some(9),
        };
        assert_eq!(verdict(&v, &own(), 30, None), Verdict::OutsideNamespace);
        assert_eq!(verdict(&v, &own(), 105, None), Verdict::Inside);
        assert_eq!(verdict(&v, &own(), 101, None), Verdict::NeedPath);
        assert_eq!(verdict(&v, &own(), 101, Some(b"/tmp/r/f")), Verdict::Inside);
        assert_eq!(
            verdict(&v, &own(), 101, Some(b"/etc")),
            Verdict::OutsideRoot
        );
        // sockfs, memfd's shmem, a detached mount: in no mountinfo, not judged.
        assert_eq!(verdict(&v, &own(), 9, Some(b"/memfd:x")), Verdict::Inside);
    }

    #[test]
    fn a_chroot_in_the_scanners_namespace() {
        let v = MountView {
            mounts: vec![],
            root_mnt: Some(1),
            root_path: b"/tmp/r".to_vec(),
            ns: HOST,
        };
        assert_eq!(
            verdict(&v, &own(), 1, Some(b"/etc/passwd")),
            Verdict::OutsideRoot
        );
        assert_eq!(
            verdict(&v, &own(), 1, Some(b"/tmp/r/file")),
            Verdict::Inside
        );
        assert_eq!(verdict(&v, &own(), 30, None), Verdict::OutsideRoot);
    }

    #[test]
    fn an_unshared_namespace_without_chroot() {
        let v = MountView {
            mounts: vec![101, 122, 125, 130],
            root_mnt: Some(101),
            root_path: b"/".to_vec(),
            ns: Some(9),
        };
        assert_eq!(verdict(&v, &own(), 130, None), Verdict::Inside);
        assert_eq!(verdict(&v, &own(), 30, None), Verdict::OutsideNamespace);
    }

    #[test]
    fn reasons() {
        let (sev, r) = finding(Verdict::OutsideNamespace, 7, "/sys/fs/cgroup", "/", true);
        assert_eq!(sev, Severity::Critical);
        assert!(
            r.starts_with("fd 7 \u{2192} /sys/fs/cgroup: outside the process's mount namespace"),
            "{r}"
        );
        let (sev, r) = finding(Verdict::OutsideRoot, 4, "/etc/passwd", "/srv/r", false);
        assert_eq!(sev, Severity::High);
        assert_eq!(
            r,
            "fd 4 \u{2192} /etc/passwd: outside the process's root directory /srv/r"
        );
    }
}
