//! `trace --origin`: what fdaudit saw of a traced tree's fds, and why an fd it has no
//! origin for has none. An fd is "before tracing" only when it was in the process's (or an
//! ancestor's) table when fdaudit attached: for `trace -- CMD` the held command's table
//! before its exec (the caller's fds), for `-p` each traced process's at attach. Any other
//! fd without an origin is "not seen", with the reason fdaudit knows of: an ia32 call of the
//! origin table (the programs follow native calls only), io_uring (its opens go through no
//! syscall), records lost to a full ring buffer, more fds in one message than a record holds,
//! close-on-exec set again after the last call fdaudit saw; else none of these.

use std::collections::HashMap;

use fdaudit_common::{
    origin_flags, OriginCall, OriginCreatedRecord, OriginModulesRecord, OriginRecord, RecordHeader,
    RecordKind, F_SETFD,
};

/// Why an fd has no origin: it was open when fdaudit attached.
pub const BEFORE_TRACING: &str = "before tracing";
/// Why an fd has no origin: it was made after fdaudit attached, by nothing it recorded.
pub const NOT_SEEN: &str = "not seen";
/// Markers kept per process (the first ones: one names the cause).
const PER_PID: usize = 4;
/// Bytes of /proc/PID/fdinfo/N read: its `ino:` line comes fourth.
const FDINFO_BYTES: usize = 512;
/// Fds read per process at attach.
const MAX_ATTACH_FDS: usize = 1 << 16;

/// The attach-time tables and the markers of what fdaudit could not follow.
#[derive(Default)]
pub struct Seen {
    /// Per process: fd -> inode number (fdinfo's `ino:`; 0 where the kernel shows none)
    /// when fdaudit attached.
    attached: HashMap<u32, HashMap<i32, u64>>,
    /// Per process: (kernel time, what) of calls whose fds fdaudit cannot see.
    blind: HashMap<u32, Vec<(u64, String)>>,
    /// Per process: origin records lost to a full ring buffer.
    lost: HashMap<u32, u32>,
    /// The session's records lost to a full ring buffer (the kernel's STATS, read before
    /// a batch that names leaked fds): a process counts its lost origin records only in
    /// its next one, so this says it when no per-process count does.
    lost_total: u64,
}

impl Seen {
    /// Keeps `pid`'s fd table as fdaudit attached (read now from /proc).
    pub fn note_attached(&mut self, pid: u32) {
        let fds = fds_now(pid);
        self.attached.insert(pid, fds);
    }

    /// Forgets what is kept of `pid` (the session's process table forgot it).
    pub fn forget(&mut self, pid: u32) {
        self.attached.remove(&pid);
        self.blind.remove(&pid);
        self.lost.remove(&pid);
    }

    /// Learns the session's count of records lost to a full ring buffer so far.
    pub fn set_lost_total(&mut self, n: u64) {
        self.lost_total = self.lost_total.max(n);
    }

    #[cfg(test)]
    pub fn set_attached(&mut self, pid: u32, fds: HashMap<i32, u64>) {
        self.attached.insert(pid, fds);
    }

    /// Whether fd `fd` (inode `ino`) was in `pid`'s table when fdaudit attached.
    pub fn open_at_attach(&self, pid: u32, fd: u32, ino: u64) -> bool {
        let Some(fds) = self.attached.get(&pid) else {
            return false;
        };
        i32::try_from(fd)
            .ok()
            .and_then(|fd| fds.get(&fd))
            .is_some_and(|&at| at == 0 || at == ino)
    }

    /// Learns what `rec` says fdaudit could not see. True when the record is only such a
    /// marker (an ia32 call, io_uring_setup) and names no origin.
    pub fn note(&mut self, rec: &OriginRecord, call: OriginCall) -> bool {
        if rec.lost > 0 {
            let n = self.lost.entry(rec.pid).or_default();
            *n = (*n).max(rec.lost);
        }
        let flags = rec.header.flags;
        let what = if flags & origin_flags::UNSEEN_IA32 != 0 {
            format!("an ia32 call ({}) by pid {}", call.name(), rec.pid)
        } else if flags & origin_flags::UNSEEN_URING != 0 {
            format!("io_uring (io_uring_setup by pid {})", rec.pid)
        } else if flags & origin_flags::FDS_CUT != 0 {
            format!(
                "more fds in one {} than a record holds (pid {})",
                call.name(),
                rec.pid
            )
        } else {
            return false;
        };
        let list = self.blind.entry(rec.pid).or_default();
        if list.len() < PER_PID {
            list.push((rec.time_ns, what));
        }
        flags & (origin_flags::UNSEEN_IA32 | origin_flags::UNSEEN_URING) != 0
    }

    /// Why no origin was seen for an fd of the processes `chain` (the process, then its
    /// ancestors) made before `exec_ns`.
    pub fn reason(&self, chain: &[u32], exec_ns: u64) -> String {
        for p in chain {
            if let Some((_, what)) = self
                .blind
                .get(p)
                .and_then(|l| l.iter().find(|(t, _)| *t <= exec_ns))
            {
                return what.clone();
            }
        }
        for p in chain {
            if let Some(n) = self.lost.get(p) {
                return format!("{n} origin records of pid {p} lost to a full ring buffer");
            }
        }
        // The process's last records may be the lost ones: no later record said so.
        if self.lost_total > 0 {
            return format!(
                "{} records of this trace lost to a full ring buffer (the call that made it \
                 may be among them)",
                self.lost_total
            );
        }
        "no call fdaudit follows made it (a syscall outside the origin table, or a process \
         it did not trace)"
            .into()
    }
}

/// A `trace --origin` record off the ring buffer.
pub enum OriginMessage {
    Origin(Box<OriginRecord>),
    /// The creator of the fd of the origin record that follows it.
    Created(Box<OriginCreatedRecord>),
    /// The modules of a process's stack, after its first origin record.
    Modules(Box<OriginModulesRecord>),
    /// The Python frames of the origin record before it, or of a close-on-exec call.
    Python(Box<fdaudit_common::PyFramesRecord>),
    /// The top of the user stack at a call site's first origin.
    StackCopy(Box<fdaudit_common::StackCopyRecord>),
}

/// The origin or creator record `bytes` is, if either.
pub fn origin_message(bytes: &[u8]) -> Option<OriginMessage> {
    use std::mem::size_of;
    if bytes.len() < size_of::<RecordHeader>() {
        return None;
    }
    // SAFETY: length checked; the records are plain integers; read_unaligned copies.
    let header: RecordHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    match RecordKind::from_u32(header.kind)? {
        RecordKind::Origin if bytes.len() >= size_of::<OriginRecord>() => {
            // SAFETY: as above.
            Some(OriginMessage::Origin(Box::new(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast())
            })))
        }
        RecordKind::OriginCreated if bytes.len() >= size_of::<OriginCreatedRecord>() => {
            // SAFETY: as above.
            Some(OriginMessage::Created(Box::new(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast())
            })))
        }
        RecordKind::OriginModules if bytes.len() >= size_of::<OriginModulesRecord>() => {
            // SAFETY: as above.
            Some(OriginMessage::Modules(Box::new(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast())
            })))
        }
        RecordKind::PyFrames if bytes.len() >= size_of::<fdaudit_common::PyFramesRecord>() => {
            // SAFETY: as above.
            Some(OriginMessage::Python(Box::new(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast())
            })))
        }
        RecordKind::StackCopy if bytes.len() >= size_of::<fdaudit_common::StackCopyRecord>() => {
            // SAFETY: as above.
            Some(OriginMessage::StackCopy(Box::new(unsafe {
                std::ptr::read_unaligned(bytes.as_ptr().cast())
            })))
        }
        _ => None,
    }
}

/// fd -> inode number of `pid`'s open fds, from /proc/PID/fdinfo (procfs: no file of the
/// process is opened; each entry read bounded). Empty once the process is gone.
fn fds_now(pid: u32) -> HashMap<i32, u64> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for entry in dir.flatten().take(MAX_ATTACH_FDS) {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let mut buf = [0u8; FDINFO_BYTES];
        let n = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(entry.path())
            .and_then(|f| f.take(FDINFO_BYTES as u64).read(&mut buf))
            .unwrap_or(0);
        out.insert(fd, fdinfo_ino(&buf[..n]).unwrap_or(0));
    }
    out
}

/// The `ino:` field of an fdinfo text.
fn fdinfo_ino(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("ino:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether an origin record's call made an existing fd inheritable (FIONCLEX, F_SETFD
/// without FD_CLOEXEC) rather than creating it.
pub fn clears_cloexec(call: OriginCall, cmd: u64) -> bool {
    matches!(
        (call, cmd),
        (OriginCall::Ioctl, _) | (OriginCall::Fcntl, F_SETFD)
    )
}

/// The name of a call that made an fd with close-on-exec (the origin's `created_by`):
/// `openat(O_CLOEXEC)`, `fcntl(F_DUPFD_CLOEXEC)`, `pidfd_open` (always close-on-exec).
pub fn cloexec_name(call: OriginCall) -> String {
    use OriginCall::*;
    let flag = match call {
        Fcntl => return "fcntl(F_DUPFD_CLOEXEC)".into(),
        PidfdOpen | PidfdGetfd => return call.name().into(),
        Socket | Socketpair | Accept4 => "SOCK_CLOEXEC",
        Recvmsg | Recvmmsg => "MSG_CMSG_CLOEXEC",
        MemfdCreate => "MFD_CLOEXEC",
        FanotifyInit => "FAN_CLOEXEC",
        PerfEventOpen => "PERF_FLAG_FD_CLOEXEC",
        Eventfd2 => "EFD_CLOEXEC",
        EpollCreate1 => "EPOLL_CLOEXEC",
        InotifyInit1 => "IN_CLOEXEC",
        Signalfd4 => "SFD_CLOEXEC",
        TimerfdCreate => "TFD_CLOEXEC",
        _ => "O_CLOEXEC",
    };
    format!("{}({flag})", call.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_the_inode_and_the_attach_table_matches_it() {
        assert_eq!(
            fdinfo_ino(b"pos:\t0\nflags:\t0100000\nmnt_id:\t24\nino:\t3\n"),
            Some(3)
        );
        assert_eq!(fdinfo_ino(b"pos:\t0\nflags:\t0100000\n"), None);
        let mut s = Seen::default();
        s.set_attached(9, HashMap::from([(7, 55), (8, 0)]));
        assert!(s.open_at_attach(9, 7, 55));
        assert!(!s.open_at_attach(9, 7, 56), "another file at fd 7");
        assert!(s.open_at_attach(9, 8, 1), "no inode shown: the fd alone");
        assert!(!s.open_at_attach(10, 7, 55));
        // This process's own table, as now.
        let me = std::process::id();
        s.note_attached(me);
        assert!(s.attached[&me].contains_key(&0) || s.attached[&me].contains_key(&1));
    }

    #[test]
    fn markers_name_why_an_fd_was_not_seen() {
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut r: OriginRecord = unsafe { std::mem::zeroed() };
        r.pid = 5;
        r.time_ns = 10;
        r.header.flags = origin_flags::UNSEEN_IA32;
        let mut s = Seen::default();
        assert!(s.note(&r, OriginCall::Dup2));
        assert_eq!(s.reason(&[6, 5], 20), "an ia32 call (dup2) by pid 5");
        assert!(
            s.reason(&[6, 5], 5).starts_with("no call fdaudit follows"),
            "a call after the exec does not count"
        );
        r.header.flags = 0;
        r.lost = 2;
        r.pid = 6;
        assert!(!s.note(&r, OriginCall::Openat));
        assert_eq!(
            s.reason(&[6], 20),
            "2 origin records of pid 6 lost to a full ring buffer"
        );
    }

    #[test]
    fn records_lost_without_a_later_one_are_said() {
        let mut s = Seen::default();
        assert!(s.reason(&[6, 5], 20).starts_with("no call fdaudit follows"));
        // The process's last origin record was lost: no record of it counts it.
        s.set_lost_total(3);
        assert_eq!(
            s.reason(&[6, 5], 20),
            "3 records of this trace lost to a full ring buffer (the call that made it may \
             be among them)"
        );
        // A per-process count explains it first; the session's count never goes down.
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut r: OriginRecord = unsafe { std::mem::zeroed() };
        (r.pid, r.lost) = (5, 2);
        assert!(!s.note(&r, OriginCall::Openat));
        assert_eq!(
            s.reason(&[6, 5], 20),
            "2 origin records of pid 5 lost to a full ring buffer"
        );
        s.set_lost_total(1);
        assert!(s.reason(&[7], 20).starts_with("3 records of this trace"));
    }

    #[test]
    fn a_creator_is_named_with_its_close_on_exec_flag() {
        assert_eq!(cloexec_name(OriginCall::Openat), "openat(O_CLOEXEC)");
        assert_eq!(cloexec_name(OriginCall::Fcntl), "fcntl(F_DUPFD_CLOEXEC)");
        assert_eq!(cloexec_name(OriginCall::PidfdOpen), "pidfd_open");
        assert_eq!(cloexec_name(OriginCall::Socket), "socket(SOCK_CLOEXEC)");
        assert!(clears_cloexec(OriginCall::Ioctl, 0x5450));
        assert!(clears_cloexec(OriginCall::Fcntl, F_SETFD));
        assert!(!clears_cloexec(OriginCall::Fcntl, 0));
    }
}
