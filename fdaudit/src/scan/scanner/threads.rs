//! Fd tables of threads that `/proc/PID/fd` does not show: a worker that called
//! `unshare(CLONE_FILES)` has a table of its own, and after the main thread calls
//! `pthread_exit` `/proc/PID/fd` is empty while the workers keep theirs. A child spawned
//! from such a thread inherits that thread's table.

use super::table::{ProcDirs, ProcScan};
use super::*;

impl Scanner<'_> {
    /// Scans, into `rep`, each fd table of the process's threads that differs from the
    /// leader's and from every table already scanned (`kcmp(KCMP_FILES)`); its fds and
    /// findings carry the thread's id. A thread that cannot be compared (gone, refused) is
    /// skipped. Live procfs only.
    pub(super) fn thread_tables(
        &self,
        pid_dir: &OwnedFd,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let Ok(task) = at::openat(raw(pid_dir), c"task", libc::O_RDONLY | libc::O_DIRECTORY) else {
            return Ok(());
        };
        let mut tids = Vec::new();
        if at::list_numeric(raw(&task), &mut s.dents, &mut tids).is_err() {
            return Ok(());
        }
        let pid = rep.pid;
        if tids.len() <= 1 && tids.first().is_none_or(|&t| t == pid) {
            return Ok(());
        }
        tids.sort_unstable();
        // One thread of each table seen; the leader's first.
        let mut tables = vec![pid];
        for tid in tids {
            if tid == pid || self.stopped() {
                continue;
            }
            let mut known = false;
            for &t in &tables {
                match netns::same_fd_table(t, tid) {
                    Ok(false) => {}
                    Ok(true) | Err(_) => {
                        known = true;
                        break;
                    }
                }
            }
            if known {
                continue;
            }
            tables.push(tid);
            self.scan_thread_table(&task, tid, rep, s)?;
        }
        Ok(())
    }

    fn scan_thread_table(
        &self,
        task: &OwnedFd,
        tid: u32,
        rep: &mut ProcReport,
        s: &mut Scratch,
    ) -> Result<(), Skip> {
        let name = NumName::new(u64::from(tid));
        let Ok(dirs) = at::open_dir_path(raw(task), name.as_cstr()).and_then(ProcDirs::open) else {
            return Ok(());
        };
        s.fds.clear();
        if at::list_numeric(raw(&dirs.fd_dir), &mut s.dents, &mut s.fds).is_err() {
            return Ok(());
        }
        s.fds.sort_unstable();
        let mut p = ProcScan::new(rep.pid, Some(tid), dirs, 0);
        self.scan_table(&mut p, rep, s)
    }
}
