//! The fd tables `unclosed` holds the live set against, read from /proc: each a hostile
//! process's, so bounded (at most [`MAX_FDS`] fds listed per process) and read without
//! following its links (the fd directory lists numbers; a sample's target is a readlink,
//! cut at [`TARGET_BYTES`] and escaped before it is printed).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::model::ProcTable;

/// Fds listed per process (a process past it is counted to here).
pub const MAX_FDS: usize = 1 << 20;
/// Bytes of a sample's target kept.
pub const TARGET_BYTES: usize = 256;

/// Threads of a process whose leader has exited that are tried for its table.
const THREADS_TRIED: usize = 64;

/// `pid`'s fd numbers now; None when it is gone or exiting. A process releases its fd
/// table when it begins to exit, before it is reaped: its fd directory then lists nothing,
/// which is not "it closed them" (a parent that does not reap it would hide what it held
/// at exit). So a listing counts only if the process had not begun to exit when the
/// listing ended; a leader that exited before its threads (pthread_exit) is read through
/// one of them that has not.
pub fn fds_of(pid: u32) -> Option<BTreeSet<i32>> {
    let fds = list_fds(&format!("/proc/{pid}/fd"))?;
    if !crate::procfs_util::exiting(pid) {
        return Some(fds);
    }
    let process = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?;
    process
        .tasks()
        .ok()?
        .flatten()
        .filter(|t| t.tid as u32 != pid)
        .take(THREADS_TRIED)
        .find_map(|t| {
            let fds = list_fds(&format!("/proc/{pid}/task/{}/fd", t.tid))?;
            let s = t.stat().ok()?;
            (!crate::procfs_util::stat_says_exiting(&s)).then_some(fds)
        })
}

/// The fd numbers an fd directory lists (at most [`MAX_FDS`]).
fn list_fds(dir: &str) -> Option<BTreeSet<i32>> {
    let dir = std::fs::read_dir(dir).ok()?;
    Some(
        dir.flatten()
            .take(MAX_FDS)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// `pid`'s table, comm and NOFILE soft limit, if it lives.
pub fn table_of(pid: u32, execs: u32) -> Option<ProcTable> {
    let fds = fds_of(pid)?;
    Some(ProcTable {
        comm: comm_of(pid),
        fds,
        nofile_soft: nofile_soft(pid),
        execs,
    })
}

/// The tables of `pids` (pid, exec count) that live, read on every core: listing a
/// process's fd directory is the kernel's work per fd (a dentry made for each), and the
/// processes are independent. Put the largest first: each worker takes the next one left.
pub fn tables_of(pids: &[(u32, u32)]) -> BTreeMap<u32, ProcTable> {
    let one = |&(pid, execs): &(u32, u32)| Some((pid, table_of(pid, execs)?));
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pids.len());
    if workers <= 1 {
        return pids.iter().filter_map(one).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut got = Vec::new();
        while let Some(p) = pids.get(next.fetch_add(1, Ordering::Relaxed)) {
            got.extend(one(p));
        }
        got
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// /proc/PID/comm (the kernel's 16 bytes, which the process chose: escaped when printed).
fn comm_of(pid: u32) -> String {
    let buf = crate::procfs_util::read_proc_text(pid, "comm", 64).unwrap_or_default();
    String::from_utf8_lossy(&buf)
        .trim_end_matches('\n')
        .to_owned()
}

/// prlimit(2) of another process's RLIMIT_NOFILE (needs CAP_SYS_RESOURCE or the same
/// credentials); None when unlimited or refused.
fn nofile_soft(pid: u32) -> Option<u64> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reading into a struct we own; no new limit is given.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    (rc == 0 && old.rlim_cur != libc::RLIM_INFINITY).then_some(old.rlim_cur)
}

/// The link of `pid`'s `fd` (bounded, lossy), if it is still open.
pub fn target(pid: u32, fd: i32) -> Option<String> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let s = link.to_string_lossy();
    let mut end = s.len().min(TARGET_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].to_owned())
}

/// The fds of `pids` and their descendants now: what is `before tracing`.
pub fn at_attach(pids: &[u32]) -> Vec<(u32, HashSet<i32>)> {
    let mut all: Vec<u32> = pids.to_vec();
    for &p in pids {
        all.extend(crate::procfs_util::descendants(p));
    }
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .filter(|&p| p != std::process::id())
        .filter_map(|p| Some((p, fds_of(p)?.into_iter().collect())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_has_no_table_and_a_live_child_has_its_own() {
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let z = zombie.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !crate::procfs_util::exiting(z) {
            assert!(std::time::Instant::now() < deadline, "true did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Its fd directory is there and empty: not a table.
        assert!(std::fs::read_dir(format!("/proc/{z}/fd")).is_ok());
        assert_eq!(fds_of(z), None);
        let fds = fds_of(live.id());
        live.kill().unwrap();
        live.wait().unwrap();
        zombie.wait().unwrap();
        assert!(fds.is_some_and(|f| f.contains(&0)));
    }

    #[test]
    fn tables_read_on_every_core_are_those_read_one_by_one() {
        // This process, its parent, and pids no process has.
        let me = std::process::id();
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let mut pids: Vec<(u32, u32)> = vec![(me, 3), (parent, 0)];
        pids.extend([(u32::MAX - 1, 0), (u32::MAX - 2, 0)]);
        let at_once = tables_of(&pids);
        let one_by_one: BTreeMap<u32, ProcTable> = pids
            .iter()
            .filter_map(|&(p, e)| Some((p, table_of(p, e)?)))
            .collect();
        assert!(at_once.contains_key(&me) && !at_once.contains_key(&(u32::MAX - 1)));
        assert_eq!(
            at_once.keys().collect::<Vec<_>>(),
            one_by_one.keys().collect::<Vec<_>>()
        );
        let mine = &at_once[&me];
        assert_eq!(mine.execs, 3);
        assert!(mine.fds.contains(&0) || mine.fds.contains(&1) || mine.fds.contains(&2));
    }
}
