//! What kind of file an fd refers to, shared by `scan` (from procfs) and `trace` (from the
//! kernel's view at exec).

use serde::Serialize;

/// Kind of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
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

    /// Kind of an anon inode from its name as the kernel shows it: "[eventfd]",
    /// "anon_inode:[eventfd]", "[eventpoll]", "bpf-map", "[pidfd]", ...
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
