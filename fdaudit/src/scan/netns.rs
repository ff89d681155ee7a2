//! A socket's own network namespace, and that namespace's tables.
//!
//! `/proc/PID/net` shows the namespace the process is in now, which need not be the one its
//! sockets live in: a process that opens a listener and then calls
//! `unshare(CLONE_NEWUSER | CLONE_NEWNET)` (any user can) keeps the listener in the first
//! namespace while `/proc/PID/net` shows a new, empty one. The kernel names a socket's
//! namespace from the socket itself: `pidfd_getfd(2)` (Linux 5.6) gives fdaudit a copy of
//! the fd, `ioctl(SIOCGSKNS)` (4.9) turns that into a namespace fd, and a helper thread that
//! `setns(2)`s into it reads `/proc/thread-self/net`.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use super::net::NetTables;
use crate::procfs_util::at;

/// `pidfd_open(2)` flag for a thread's pidfd (Linux 6.9): `PIDFD_THREAD`, which is `O_EXCL`.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
/// `ioctl` that gives a socket's network namespace as an fd (linux/sockios.h).
const SIOCGSKNS: libc::c_ulong = 0x894C;

fn owned(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// A pidfd of process `pid`, or of thread `pid` when `thread` (Linux 6.9; before that only
/// a thread-group leader has one).
pub fn pidfd(pid: u32, thread: bool) -> io::Result<OwnedFd> {
    let flags = if thread { PIDFD_THREAD } else { 0 };
    // SAFETY: pidfd_open only reads its integer arguments.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, flags) })
}

/// The network namespace of socket `fd` of the process behind `pidfd`: its inode number
/// (as `/proc/PID/ns/net` prints it) and an fd of it.
pub fn socket_netns(pidfd: RawFd, fd: u32) -> io::Result<(u64, OwnedFd)> {
    // SAFETY: pidfd_getfd only reads its integer arguments.
    let sock = owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) })?;
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd.
    let ns = owned(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) }.into())?;
    Ok((ns_inode(ns.as_raw_fd())?, ns))
}

/// The inode number of a namespace fd.
fn ns_inode(fd: RawFd) -> io::Result<u64> {
    // SAFETY: st is plain data, filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is valid for writing.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

/// The tables of the network namespace `ns`, read by a helper thread that enters it
/// (`setns(CLONE_NEWNET)` changes only that thread) and reads `thread-self/net` under the
/// procfs root `root`.
pub fn load_in(ns: &OwnedFd, root: RawFd) -> io::Result<NetTables> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns only reads its integer arguments; it affects this thread only.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let dir = at::open_dir_path(root, c"thread-self/net")?;
            Ok(NetTables::load(dir.as_raw_fd()))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("net table thread panicked")))
    })
}

/// `kcmp(pid1, pid2, KCMP_FILES, 0, 0)`: whether two tasks share one fd table.
pub fn same_fd_table(pid1: u32, pid2: u32) -> io::Result<bool> {
    const KCMP_FILES: libc::c_long = 2;
    crate::procfs_util::at::kcmp(pid1, pid2, KCMP_FILES, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket of our own is in our own namespace; where pidfd_getfd or SIOCGSKNS is
    /// refused (an unprivileged sandbox), the call says so rather than guessing.
    #[test]
    fn own_socket_is_in_own_netns() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let me = pidfd(std::process::id(), false).expect("pidfd_open of self");
        let mut link = [0u8; 64];
        let n = at::readlinkat(libc::AT_FDCWD, c"/proc/self/ns/net", &mut link).expect("ns");
        let own = super::super::parse::bracket_inode(&link[..n]).expect("net:[N]");
        match socket_netns(me.as_raw_fd(), sock.as_raw_fd() as u32) {
            Ok((ino, _)) => assert_eq!(ino, own),
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS)),
                "{e}"
            ),
        }
        match same_fd_table(std::process::id(), std::process::id()) {
            Ok(same) => assert!(same),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "{e}"),
        }
    }
}
