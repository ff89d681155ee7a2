//! What `trace` and `unclosed` follow: the `-p` targets, checked in /proc before anything is
//! loaded.

use anyhow::{bail, Result};

use crate::output::stream;

/// What /proc says about a `-p` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidKind {
    Process,
    /// A thread id that is not its process's leader: the process is `tgid`.
    Thread {
        tgid: u32,
    },
    Zombie,
    KernelThread,
}

/// The command that follows the targets: its errors say what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follower {
    /// `trace`: spawns.
    Trace,
    /// `unclosed`: the fds a process makes.
    Unclosed,
}

impl Follower {
    /// Nothing was given to follow.
    fn nothing(self) -> &'static str {
        match self {
            Follower::Trace => {
                "nothing to trace: give -p PID, --cgroup PATH, -- CMD ARGS... or --demo"
            }
            Follower::Unclosed => "nothing to follow: give -p PID, --cgroup PATH or -- CMD ARGS...",
        }
    }

    /// Why a kernel thread is not followed.
    fn kernel_thread(self) -> &'static str {
        match self {
            Follower::Trace => "it never spawns programs, so there is nothing to trace",
            Follower::Unclosed => "it has no fd table of its own, so there is nothing to follow",
        }
    }
}

/// Classifies a `-p` target from /proc/PID/stat (state, flags) and /proc/PID/status (Tgid).
pub fn pid_kind(pid: u32) -> Option<PidKind> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    // After "pid (comm) ": state is field 3 of stat(5), flags field 9.
    let state = *fields.first()?;
    let flags: u64 = fields.get(6)?.parse().ok()?;
    if flags & PF_KTHREAD != 0 {
        return Some(PidKind::KernelThread);
    }
    if state == "Z" || state == "X" {
        return Some(PidKind::Zombie);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tgid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()?;
    Some(if tgid != pid {
        PidKind::Thread { tgid }
    } else {
        PidKind::Process
    })
}

/// Something to trace, and the `-p` targets checked before anything starts: an error for a
/// missing process or a kernel thread; a warning for a zombie; a thread id becomes its
/// process.
pub fn check_targets(
    pids: &[u32],
    command: bool,
    cgroup: bool,
    follower: Follower,
) -> Result<Vec<u32>> {
    if pids.is_empty() && !command && !cgroup {
        bail!("{}", follower.nothing());
    }
    let mut out = Vec::new();
    for &pid in pids {
        // SAFETY: signal 0 only checks that the process exists.
        if pid == 0
            || unsafe { libc::kill(pid as i32, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            bail!("no process with PID {pid}: check it with `ps -p {pid}`");
        }
        match pid_kind(pid) {
            Some(PidKind::KernelThread) => {
                bail!("PID {pid} is a kernel thread: {}", follower.kernel_thread())
            }
            Some(PidKind::Zombie) => stream::note(
                stream::Level::Warning,
                &format!(
                    "PID {pid} is a zombie (it has exited and waits to be reaped): only its living descendants can be traced"
                ),
            ),
            Some(PidKind::Thread { tgid }) => {
                stream::note(
                    stream::Level::Warning,
                    &format!("PID {pid} is a thread of process {tgid}: tracing process {tgid}"),
                );
                if !out.contains(&tgid) {
                    out.push(tgid);
                }
                continue;
            }
            Some(PidKind::Process) | None => {}
        }
        if !out.contains(&pid) {
            out.push(pid);
        }
    }
    if out.contains(&std::process::id()) {
        // It would follow its own work, and wait for its own exit, for ever.
        bail!(
            "PID {} is this fdaudit itself: give the PID of another process",
            std::process::id()
        );
    }
    Ok(out)
}

/// fds read per process at attach, at most: a table larger than this is read in part, and
/// its other fds count as leaks if they cross an exec (the safe side).
const MAX_HELD_FDS: usize = 1 << 16;

/// Bytes of an fdinfo file read: its `flags:` line is the second.
const FDINFO_BYTES: usize = 512;

/// An inheritable fd (no `O_CLOEXEC`) a `-p` process held when fdaudit attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldFd {
    pub pid: u32,
    pub fd: u32,
    /// The file's device in the kernel's encoding (major << 20 | minor), as a leaked fd's.
    pub dev: u32,
    pub ino: u64,
}

/// The inheritable fds that `pids` and their descendants hold now: `-p`'s baseline, the
/// files a leak is judged against (a -p process's later exec passes them on as it got
/// them; what it opens after attach and carries through an exec is its own leak). Read
/// from /proc/PID/fd by `statx(AT_STATX_DONT_SYNC)` of each fd's link (the kernel's own
/// file, answered from cached attributes, so a FUSE or NFS server is not asked) and the
/// `flags:` of its fdinfo. An fd that cannot be read is left out: it counts if it leaks.
pub fn held_at_attach(pids: &[u32]) -> Vec<HeldFd> {
    let mut all: Vec<u32> = pids.to_vec();
    for &p in pids {
        all.extend(crate::procfs_util::descendants(p));
    }
    all.sort_unstable();
    all.dedup();
    all.retain(|&p| p != std::process::id());
    all.into_iter().flat_map(held_by).collect()
}

/// The inheritable fds `pid` holds ([`held_at_attach`]): its fd directory and each fdinfo
/// are opened under one fd of /proc/PID, so all of them are the same process's.
fn held_by(pid: u32) -> Vec<HeldFd> {
    use std::os::fd::AsRawFd as _;
    let Some(proc_dir) = open_at(libc::AT_FDCWD, &format!("/proc/{pid}"), libc::O_DIRECTORY) else {
        return Vec::new();
    };
    let Some(fd_dir) = open_at(proc_dir.as_raw_fd(), "fd", libc::O_DIRECTORY) else {
        return Vec::new();
    };
    // Listed through our own fd of the directory.
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", fd_dir.as_raw_fd())) else {
        return Vec::new();
    };
    let mut held = Vec::new();
    for e in entries.flatten().take(MAX_HELD_FDS) {
        let name = e.file_name();
        let Some(fd) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if !inheritable(proc_dir.as_raw_fd(), fd) {
            continue;
        }
        if let Some((dev, ino)) = link_dev_ino(fd_dir.as_raw_fd(), fd) {
            held.push(HeldFd { pid, fd, dev, ino });
        }
    }
    held
}

/// `openat(dir, path, O_RDONLY | flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`.
fn open_at(dir: i32, path: &str, flags: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let path = std::ffi::CString::new(path).ok()?;
    let all = libc::O_RDONLY | flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the fd returned is ours to own.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), all) };
    // SAFETY: a fresh fd nothing else owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether fd `fd` of the process whose /proc directory is `proc_dir` lacks `O_CLOEXEC`
/// (its fdinfo's `flags:`, octal).
fn inheritable(proc_dir: i32, fd: u32) -> bool {
    use std::io::Read as _;
    let Some(f) = open_at(proc_dir, &format!("fdinfo/{fd}"), 0) else {
        return false;
    };
    let mut text = Vec::with_capacity(FDINFO_BYTES);
    if std::fs::File::from(f)
        .take(FDINFO_BYTES as u64)
        .read_to_end(&mut text)
        .is_err()
    {
        return false;
    }
    flags_of(&String::from_utf8_lossy(&text))
        .is_some_and(|flags| flags & libc::O_CLOEXEC as u32 == 0)
}

/// The `flags:` field of an fdinfo text (octal).
fn flags_of(fdinfo: &str) -> Option<u32> {
    let v = fdinfo.lines().find_map(|l| l.strip_prefix("flags:"))?;
    u32::from_str_radix(v.trim(), 8).ok()
}

/// The device (kernel encoding) and inode of the file behind fd link `fd` in the
/// /proc/PID/fd directory `dir`, from cached attributes only.
fn link_dev_ino(dir: i32, fd: u32) -> Option<(u32, u64)> {
    let name = std::ffi::CString::new(fd.to_string()).ok()?;
    let st = crate::procfs_util::at::statx_cached(dir, &name, libc::STATX_INO)?;
    (st.stx_mask & libc::STATX_INO != 0)
        .then(|| (kernel_dev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// A device number as the kernel keeps it in `s_dev` (`MKDEV`: major << 20 | minor), the
/// encoding of a leaked fd's `dev`.
pub fn kernel_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_flags_are_octal_and_cloexec_is_seen() {
        let text = "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t7\n";
        let flags = flags_of(text).unwrap();
        assert_ne!(flags & libc::O_CLOEXEC as u32, 0);
        assert_eq!(flags_of("pos:\t0\nflags:\t0100000\n"), Some(0o100000));
        assert_eq!(flags_of("pos:\t0\n"), None);
        assert_eq!(kernel_dev(8, 1), 8 << 20 | 1);
        assert_eq!(kernel_dev(0, 0x1_2345), 0x1_2345);
    }

    #[test]
    fn this_processs_inheritable_fds_are_read_with_the_kernels_device() {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let plain = std::fs::File::open("/proc/self/status").unwrap(); // O_CLOEXEC (std)
                                                                       // SAFETY: dup (no cloexec) of an fd we own; closed below.
        let fd = unsafe { libc::dup(plain.as_raw_fd()) };
        assert!(fd > 2);
        let meta = plain.metadata().unwrap();
        let me = held_by(std::process::id());
        let found = me.iter().find(|h| h.fd == fd as u32).expect("the dup'd fd");
        let dev = meta.dev();
        assert_eq!(
            (found.dev, found.ino),
            (kernel_dev(libc::major(dev), libc::minor(dev)), meta.ino())
        );
        assert!(
            !me.iter().any(|h| h.fd == plain.as_raw_fd() as u32),
            "cloexec"
        );
        // SAFETY: closing the fd dup'd above.
        unsafe { libc::close(fd) };
    }
}
