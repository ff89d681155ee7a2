//! One fd table while its fds are read: the process's (or a thread's) directories, pidfd
//! and socket tables.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::boundary::MountView;
use super::share::ShareKey;
use super::NetTables;
use crate::procfs_util::at::{self, raw};

/// The directories of one process (or thread) under the procfs root.
pub(super) struct ProcDirs {
    pub pid_dir: OwnedFd,
    pub fd_dir: OwnedFd,
    pub fdinfo_dir: OwnedFd,
    /// `fdinfo_dir` is on a procfs (its files need no fstat before they are read).
    pub fdinfo_procfs: bool,
}

impl ProcDirs {
    /// `fd/` and `fdinfo/` of the process or task directory `pid_dir`.
    pub fn open(pid_dir: OwnedFd) -> io::Result<ProcDirs> {
        let fd_dir = at::openat(raw(&pid_dir), c"fd", libc::O_RDONLY | libc::O_DIRECTORY)?;
        let fdinfo_dir = at::open_dir_path(raw(&pid_dir), c"fdinfo")?;
        Ok(ProcDirs {
            pid_dir,
            fd_dir,
            fdinfo_procfs: at::is_procfs(raw(&fdinfo_dir)),
            fdinfo_dir,
        })
    }
}

/// One fd table while its fds are read: its directories, the keys its fds are shared by,
/// and the socket tables (read once, at its first socket).
pub(super) struct ProcScan {
    pub pid: u32,
    /// The thread whose own fd table this is (`None`: the one `/proc/PID/fd` shows).
    pub tid: Option<u32>,
    pub dirs: ProcDirs,
    pub keys: Vec<ShareKey>,
    pub tables: Option<Arc<NetTables>>,
    /// The network namespace the process (or thread) is in now, with `tables`.
    pub netns: Option<u64>,
    /// A pidfd of the process (or thread), opened at its first socket; `Some(None)` when
    /// refused.
    pub pidfd: Option<Option<OwnedFd>>,
    /// What the task sees of the mounts, read at its first fd that needs it; `Some(None)`
    /// when it sees what the scanner sees, or could not be read.
    pub mounts: Option<Option<MountView>>,
    /// Who can rename the directories of the table's files, walked once per directory.
    pub renamers: super::renamers::Cache,
}

impl ProcScan {
    pub fn new(pid: u32, tid: Option<u32>, dirs: ProcDirs, fds: usize) -> ProcScan {
        ProcScan {
            pid,
            tid,
            dirs,
            keys: Vec::with_capacity(if tid.is_none() { fds } else { 0 }),
            tables: None,
            netns: None,
            pidfd: None,
            mounts: None,
            renamers: Default::default(),
        }
    }
}
