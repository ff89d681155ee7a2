//! What kind of file an fd refers to, shared by `scan` (from procfs) and `trace` (from the
//! kernel's view at exec).

use serde::Serialize;

/// Kind of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FdKind {
    Regular,
    Directory,
    Socket,
    Pipe,
    Fifo,
    Eventfd,
    Epoll,
    Timerfd,
    Signalfd,
    Pidfd,
    Inotify,
    Fanotify,
    Memfd,
    /// A BPF map, program or link fd.
    Bpf,
    /// A perf event fd.
    Perf,
    /// io_uring and other anon inodes not named above.
    AnonInode,
    /// Character or block device.
    Device,
    Symlink,
    Other,
}

impl FdKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FdKind::Regular => "regular",
            FdKind::Directory => "directory",
            FdKind::Socket => "socket",
            FdKind::Pipe => "pipe",
            FdKind::Fifo => "fifo",
            FdKind::Eventfd => "eventfd",
            FdKind::Epoll => "epoll",
            FdKind::Timerfd => "timerfd",
            FdKind::Signalfd => "signalfd",
            FdKind::Pidfd => "pidfd",
            FdKind::Inotify => "inotify",
            FdKind::Fanotify => "fanotify",
            FdKind::Memfd => "memfd",
            FdKind::Bpf => "bpf",
            FdKind::Perf => "perf",
            FdKind::AnonInode => "anon_inode",
            FdKind::Device => "device",
            FdKind::Symlink => "symlink",
            FdKind::Other => "other",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [FdKind; 19] = [
        FdKind::Regular,
        FdKind::Directory,
        FdKind::Socket,
        FdKind::Pipe,
        FdKind::Fifo,
        FdKind::Eventfd,
        FdKind::Epoll,
        FdKind::Timerfd,
        FdKind::Signalfd,
        FdKind::Pidfd,
        FdKind::Inotify,
        FdKind::Fanotify,
        FdKind::Memfd,
        FdKind::Bpf,
        FdKind::Perf,
        FdKind::AnonInode,
        FdKind::Device,
        FdKind::Symlink,
        FdKind::Other,
    ];

    /// The kind named `name` (as [`FdKind::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<FdKind> {
        FdKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Kind of an anon inode from its name as the kernel shows it: `[eventfd]`,
    /// `anon_inode:[eventfd]`, `[eventpoll]`, `bpf-map`, `[pidfd]`, ...
    pub fn from_anon_name(name: &str) -> FdKind {
        let n = name.strip_prefix("anon_inode:").unwrap_or(name);
        let n = n.trim_start_matches('[').trim_end_matches(']');
        match n {
            "eventfd" => FdKind::Eventfd,
            "eventpoll" => FdKind::Epoll,
            "timerfd" => FdKind::Timerfd,
            "signalfd" => FdKind::Signalfd,
            "pidfd" => FdKind::Pidfd,
            "inotify" => FdKind::Inotify,
            "fanotify" => FdKind::Fanotify,
            "perf_event" => FdKind::Perf,
            _ if n.starts_with("bpf") => FdKind::Bpf,
            _ => FdKind::AnonInode,
        }
    }
}

impl FdKind {
    /// Kind of an fd from its `/proc/PID/fd/N` link target and, when it is known, the
    /// `st_mode` of the file it refers to. Without a mode, a path is taken for a regular
    /// file (or a device under `/dev/`): callers stat paths only where they must.
    pub fn from_link(target: &[u8], mode: Option<u32>) -> FdKind {
        if target.starts_with(b"socket:[") {
            return FdKind::Socket;
        }
        if target.starts_with(b"pipe:[") {
            return FdKind::Pipe;
        }
        if target.starts_with(b"anon_inode:") {
            return FdKind::from_anon_name(&String::from_utf8_lossy(target));
        }
        if target.starts_with(b"pidfd:") {
            return FdKind::Pidfd;
        }
        if target.starts_with(b"/memfd:") {
            return FdKind::Memfd;
        }
        if !target.starts_with(b"/") {
            // "net:[4026531833]" and other namespace or pseudo-file names.
            return FdKind::Other;
        }
        match mode.map(|m| m & libc::S_IFMT) {
            Some(libc::S_IFREG) => FdKind::Regular,
            Some(libc::S_IFDIR) => FdKind::Directory,
            Some(libc::S_IFCHR) | Some(libc::S_IFBLK) => FdKind::Device,
            Some(libc::S_IFIFO) => FdKind::Fifo,
            Some(libc::S_IFSOCK) => FdKind::Socket,
            Some(libc::S_IFLNK) => FdKind::Symlink,
            Some(_) => FdKind::Other,
            None if target.starts_with(b"/dev/")
                && !target.starts_with(b"/dev/shm/")
                && !target.starts_with(b"/dev/mqueue/") =>
            {
                FdKind::Device
            }
            None => FdKind::Regular,
        }
    }
}

impl std::fmt::Display for FdKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Name of a socket address family (AF_*), as `scan` and `trace` print it.
pub fn family_name(family: u16) -> &'static str {
    match i32::from(family) {
        libc::AF_UNIX => "unix",
        libc::AF_INET => "inet",
        libc::AF_INET6 => "inet6",
        libc::AF_NETLINK => "netlink",
        libc::AF_PACKET => "packet",
        libc::AF_VSOCK => "vsock",
        libc::AF_ALG => "alg",
        _ => "other",
    }
}

/// Superblock magics, shared with the kernel programs.
pub use fdaudit_common::fs_magic as magic;

const S_IFMT: u32 = 0o170000;

/// Kind of a file from what the kernel program saw: inode mode, superblock magic, dentry name.
pub fn from_kernel(mode: u32, sb_magic: u64, name: &str) -> FdKind {
    match sb_magic {
        magic::ANON_INODE_FS => return FdKind::from_anon_name(name),
        magic::PIDFS => return FdKind::Pidfd,
        magic::PIPEFS => return FdKind::Pipe,
        magic::SOCKFS => return FdKind::Socket,
        _ => {}
    }
    match mode & S_IFMT {
        0o100000 if name.starts_with("memfd:") => FdKind::Memfd,
        0o100000 => FdKind::Regular,
        0o040000 => FdKind::Directory,
        0o140000 => FdKind::Socket,
        0o010000 => FdKind::Fifo,
        0o020000 | 0o060000 => FdKind::Device,
        0o120000 => FdKind::Symlink,
        0 => FdKind::from_anon_name(name),
        _ => FdKind::Other,
    }
}

/// The protocol name `scan` uses for the same socket: inet sockets by transport, others by
/// type.
pub fn protocol_name(family: u16, t: u16) -> &'static str {
    let inet = matches!(i32::from(family), libc::AF_INET | libc::AF_INET6);
    match (inet, i32::from(t)) {
        (true, libc::SOCK_STREAM) => "tcp",
        (true, libc::SOCK_DGRAM) => "udp",
        (_, libc::SOCK_RAW) => "raw",
        (_, libc::SOCK_STREAM) => "stream",
        (_, libc::SOCK_DGRAM) => "dgram",
        (_, libc::SOCK_SEQPACKET) => "seqpacket",
        _ => "other",
    }
}

/// O_RDONLY / O_WRONLY / O_RDWR as `r`, `w`, `rw`.
pub fn access_mode(f_flags: u32) -> &'static str {
    match f_flags as i32 & libc::O_ACCMODE {
        libc::O_RDONLY => "r",
        libc::O_WRONLY => "w",
        _ => "rw",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON writes the same names people see and the schema lists (`anon_inode` once came out
    /// as `anoninode` in scan records).
    #[test]
    fn json_names_are_the_display_names() {
        use FdKind::*;
        for kind in [
            Regular, Directory, Socket, Pipe, Fifo, Eventfd, Epoll, Timerfd, Signalfd, Pidfd,
            Inotify, Fanotify, Memfd, Bpf, Perf, AnonInode, Device, Symlink, Other,
        ] {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                kind.as_str(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn kernel_view_classification() {
        let anon = magic::ANON_INODE_FS;
        let cases: &[(u32, u64, &str, FdKind)] = &[
            (0o100644, 0xef53, "secret.key", FdKind::Regular),
            (0o040755, 0xef53, "etc", FdKind::Directory),
            (0o010600, magic::PIPEFS, "", FdKind::Pipe),
            (0o010644, 0xef53, "fifo", FdKind::Fifo),
            (0o140777, magic::SOCKFS, "", FdKind::Socket),
            (0o600, anon, "[eventfd]", FdKind::Eventfd),
            (0o600, anon, "[eventpoll]", FdKind::Epoll),
            (0o600, anon, "[timerfd]", FdKind::Timerfd),
            (0o600, anon, "[signalfd]", FdKind::Signalfd),
            (0o600, anon, "bpf-map", FdKind::Bpf),
            (0o600, anon, "[io_uring]", FdKind::AnonInode),
            (0o100400, magic::PIDFS, "anon_inode:[pidfd]", FdKind::Pidfd),
            (0o100777, magic::TMPFS, "memfd:cache", FdKind::Memfd),
            (0o020666, 0x1cd1, "null", FdKind::Device),
        ];
        for &(mode, sb, name, want) in cases {
            assert_eq!(from_kernel(mode, sb, name), want, "{mode:o} {sb:#x} {name}");
        }
    }

    #[test]
    fn anon_names_with_and_without_prefix() {
        assert_eq!(
            FdKind::from_anon_name("anon_inode:[eventfd]"),
            FdKind::Eventfd
        );
        assert_eq!(
            FdKind::from_anon_name("anon_inode:inotify"),
            FdKind::Inotify
        );
        assert_eq!(FdKind::from_anon_name("anon_inode:bpf-prog"), FdKind::Bpf);
        assert_eq!(FdKind::from_anon_name("[perf_event]"), FdKind::Perf);
    }

    #[test]
    fn classifies_link_targets() {
        assert_eq!(FdKind::from_link(b"socket:[123]", None), FdKind::Socket);
        assert_eq!(FdKind::from_link(b"pipe:[9]", None), FdKind::Pipe);
        assert_eq!(
            FdKind::from_link(b"anon_inode:[pidfd]", None),
            FdKind::Pidfd
        );
        assert_eq!(
            FdKind::from_link(b"anon_inode:[eventfd]", None),
            FdKind::Eventfd
        );
        assert_eq!(FdKind::from_link(b"anon_inode:bpf-map", None), FdKind::Bpf);
        assert_eq!(
            FdKind::from_link(b"/memfd:x (deleted)", None),
            FdKind::Memfd
        );
        assert_eq!(FdKind::from_link(b"/dev/null", None), FdKind::Device);
        assert_eq!(FdKind::from_link(b"/dev/shm/x", None), FdKind::Regular);
        assert_eq!(
            FdKind::from_link(b"/tmp", Some(libc::S_IFDIR | 0o755)),
            FdKind::Directory
        );
        assert_eq!(FdKind::from_link(b"net:[4026531833]", None), FdKind::Other);
    }
}
