//! A socket's own network namespace, and that namespace's tables.
//!
//! `/proc/PID/net` shows the namespace the process is in now, which need not be the one its
//! sockets live in: a process that opens a listener and then calls
//! `unshare(CLONE_NEWUSER | CLONE_NEWNET)` (any user can) keeps the listener in the first
//! namespace while `/proc/PID/net` shows a new, empty one. The kernel names a socket's
//! namespace from the socket itself: `pidfd_getfd(2)` (Linux 5.6) gives fdaudit a copy of
//! the fd, `ioctl(SIOCGSKNS)` (4.9) turns that into a namespace fd, and a helper thread that
//! `setns(2)`s into it reads `/proc/thread-self/net`. Where the kernel has
//! `SO_NETNS_COOKIE` (5.14), a namespace whose cookie the scan has already met is known from
//! the socket's cookie alone: no namespace fd is made, stat'ed and closed per socket.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use super::net::NetTables;
use crate::procfs_util::at;

/// `pidfd_open(2)` flag for a thread's pidfd (Linux 6.9): `PIDFD_THREAD`, which is `O_EXCL`.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
/// `ioctl` that gives a socket's network namespace as an fd (linux/sockios.h).
const SIOCGSKNS: libc::c_ulong = 0x894C;
/// `getsockopt` option that gives a socket's network namespace's cookie (asm-generic/socket.h,
/// the same on x86_64 and aarch64; Linux 5.14).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// A socket's network namespace, as [`socket_netns`] learned it.
pub enum SockNs {
    /// Its cookie is one the caller knew: the namespace with that inode number.
    Known(u64),
    /// Its inode number, an fd of it, and its cookie where the kernel gives one.
    Opened(u64, OwnedFd, Option<u64>),
}

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

/// The network namespace of socket `fd` of the process behind `pidfd`: the inode number
/// (as `/proc/PID/ns/net` prints it) that `known` gives for its cookie, else its inode number
/// and an fd of it. The cookie is the kernel's (unique for the boot), not the process's to
/// choose.
pub fn socket_netns(
    pidfd: RawFd,
    fd: u32,
    known: impl FnOnce(u64) -> Option<u64>,
) -> io::Result<SockNs> {
    // SAFETY: pidfd_getfd only reads its integer arguments.
    let sock = owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) })?;
    let cookie = netns_cookie(sock.as_raw_fd());
    if let Some(ino) = cookie.and_then(known) {
        return Ok(SockNs::Known(ino));
    }
    // SAFETY: SIOCGSKNS takes no argument and returns a new fd.
    let ns = owned(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) }.into())?;
    Ok(SockNs::Opened(ns_inode(ns.as_raw_fd())?, ns, cookie))
}

/// The cookie of socket `sock`'s network namespace; `None` before Linux 5.14.
pub fn netns_cookie(sock: RawFd) -> Option<u64> {
    let mut cookie = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: cookie and len are valid for writing, len holds cookie's size.
    let r = unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            std::ptr::addr_of_mut!(cookie).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == std::mem::size_of::<u64>()).then_some(cookie)
}

/// The scanner's own network namespace's cookie (a socket of its own, asked).
pub fn own_netns_cookie() -> Option<u64> {
    // SAFETY: plain socket(2).
    let sock = owned(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }.into(),
    )
    .ok()?;
    netns_cookie(sock.as_raw_fd())
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
        let cookie = match socket_netns(me.as_raw_fd(), sock.as_raw_fd() as u32, |_| None) {
            Ok(SockNs::Opened(ino, _, cookie)) => {
                assert_eq!(ino, own);
                cookie
            }
            Ok(SockNs::Known(_)) => unreachable!("no cookie was known"),
            Err(e) => {
                assert!(
                    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS)),
                    "{e}"
                );
                None
            }
        };
        // Asked again with that cookie known, the socket is known without a namespace fd.
        if let Some(c) = cookie {
            assert_eq!(Some(c), own_netns_cookie());
            match socket_netns(me.as_raw_fd(), sock.as_raw_fd() as u32, |k| {
                (k == c).then_some(own)
            }) {
                Ok(SockNs::Known(ino)) => assert_eq!(ino, own),
                _ => panic!("a known cookie was not used"),
            }
        }
        match same_fd_table(std::process::id(), std::process::id()) {
            Ok(same) => assert!(same),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "{e}"),
        }
    }
}
