//! The unix sockets of the scanner's own network namespace, from the kernel's sock_diag
//! netlink interface (`NETLINK_SOCK_DIAG` with `unix_diag`, Linux 3.3, `CONFIG_UNIX_DIAG`):
//! a binary list that no process can forge, unlike `/proc/net/unix`, whose lines end with
//! the sockets' paths (their owners' text). A unix socket listed there lives in this
//! namespace, so scan need not ask the socket itself for it (`pidfd_getfd`,
//! `ioctl(SIOCGSKNS)`, `fstat` and two `close`s per socket: the most of scan's own system
//! calls per fd on a machine of socket pairs).
//!
//! Only replies the kernel sent (sender port 0) are read: any process may send to a
//! netlink socket's port.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

/// Sockets kept at most (4 bytes each); a namespace with more is not listed, and its
/// sockets are asked one by one as before.
const MAX_SOCKETS: usize = 1 << 22;

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `nlmsghdr` (16 bytes), then `unix_diag_msg`: family, type, state, pad, then `udiag_ino`.
const HDR: usize = 16;
const INO_AT: usize = HDR + 4;

/// The inodes of the unix sockets of one network namespace, sorted.
#[derive(Debug, Default)]
pub struct UnixInodes(Vec<u32>);

impl UnixInodes {
    /// Every unix socket of the calling thread's network namespace.
    pub fn dump() -> io::Result<UnixInodes> {
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is ours.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        request(&sock)?;
        let mut inodes = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = recv_from_kernel(&sock, &mut buf)?;
            if parse(&buf[..n], &mut inodes)? {
                break;
            }
            if inodes.len() > MAX_SOCKETS {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            }
        }
        inodes.sort_unstable();
        inodes.dedup();
        Ok(UnixInodes(inodes))
    }

    pub fn contains(&self, ino: u64) -> bool {
        u32::try_from(ino).is_ok_and(|i| self.0.binary_search(&i).is_ok())
    }
}

/// Sends the dump request: every unix socket in every state, no attributes.
fn request(sock: &OwnedFd) -> io::Result<()> {
    let mut req = [0u8; HDR + 24];
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence number
    req[HDR] = libc::AF_UNIX as u8; // sdiag_family; protocol and pad stay 0
    req[HDR + 4..HDR + 8].copy_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
                                                                    // SAFETY: an all-zero sockaddr_nl is valid; nl_pid 0 is the kernel.
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: req and to are valid for the lengths given.
    let r = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One datagram the kernel sent (others are dropped); a truncated one is an error.
fn recv_from_kernel(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: an all-zero sockaddr_nl is valid storage for the sender's address.
        let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: buf and from are valid for the lengths given.
        let n = unsafe {
            libc::recvfrom(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                (&mut from as *mut libc::sockaddr_nl).cast(),
                &mut from_len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n as usize > buf.len() {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        if from.nl_pid == 0 {
            return Ok(n as usize);
        }
    }
}

/// Adds the inodes of one datagram's messages; `Ok(true)` at the end of the dump.
fn parse(mut data: &[u8], inodes: &mut Vec<u32>) -> io::Result<bool> {
    let u32_at = |d: &[u8], at: usize| u32::from_ne_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    while data.len() >= HDR {
        let len = u32_at(data, 0) as usize;
        if len < HDR || len > data.len() {
            return Err(io::Error::from_raw_os_error(libc::EBADMSG));
        }
        match u16::from_ne_bytes([data[4], data[5]]) {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = if len >= HDR + 4 {
                    u32_at(data, HDR) as i32
                } else {
                    0
                };
                return Err(io::Error::from_raw_os_error(
                    code.checked_neg()
                        .filter(|&c| c > 0)
                        .unwrap_or(libc::EBADMSG),
                ));
            }
            SOCK_DIAG_BY_FAMILY if len >= INO_AT + 4 => inodes.push(u32_at(data, INO_AT)),
            _ => return Err(io::Error::from_raw_os_error(libc::EBADMSG)),
        }
        data = &data[((len + 3) & !3).min(data.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket pair of our own is listed, both ends; where the kernel has no unix_diag
    /// (a kernel built without it) the dump says so rather than listing nothing.
    #[test]
    fn own_socket_pair_is_listed() {
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let ino = |s: &std::os::unix::net::UnixStream| {
            use std::os::unix::fs::MetadataExt as _;
            let f = std::fs::File::from(std::os::fd::OwnedFd::from(s.try_clone().expect("dup")));
            f.metadata().expect("fstat").ino()
        };
        match UnixInodes::dump() {
            Ok(list) => {
                assert!(
                    list.contains(ino(&a)),
                    "one end missing from {} sockets",
                    list.0.len()
                );
                assert!(list.contains(ino(&b)), "the other end missing");
                assert!(!list.contains(u64::from(u32::MAX) + 1));
            }
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::EPROTONOSUPPORT) | Some(libc::EINVAL)
                ),
                "{e}"
            ),
        }
    }

    #[test]
    fn forged_or_broken_replies_are_refused() {
        let msg = |ty: u16, len: u32, ino: u32| {
            let mut m = vec![0u8; 32];
            m[0..4].copy_from_slice(&len.to_ne_bytes());
            m[4..6].copy_from_slice(&ty.to_ne_bytes());
            m[INO_AT..INO_AT + 4].copy_from_slice(&ino.to_ne_bytes());
            m
        };
        let mut v = Vec::new();
        let mut two = msg(SOCK_DIAG_BY_FAMILY, 32, 7);
        two.extend(msg(NLMSG_DONE, 20, 0));
        assert!(parse(&two, &mut v).unwrap());
        assert_eq!(v, vec![7]);
        assert!(
            parse(&msg(SOCK_DIAG_BY_FAMILY, 64, 8), &mut v).is_err(),
            "length past the end"
        );
        assert!(
            parse(&msg(SOCK_DIAG_BY_FAMILY, 8, 8), &mut v).is_err(),
            "length below a header"
        );
        assert!(
            parse(&msg(99, 32, 8), &mut v).is_err(),
            "another message type"
        );
        let mut err = msg(NLMSG_ERROR, 32, 0);
        err[HDR..HDR + 4].copy_from_slice(&(-libc::EACCES).to_ne_bytes());
        let e = parse(&err, &mut v).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        assert_eq!(v, vec![7]);
    }
}
