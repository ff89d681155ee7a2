//! What a report can vouch for: a pid's fd table read only while it is the followed
//! process's that wrote the entries, and why a run is known to be incomplete (what the
//! kernel counted that the live set cannot hold: a gate then passes no verdict).

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;

use super::{model::ProcTable, procs};
use crate::engine::session::Session;

/// The tables of `pids` ((live-set entries, pid), the largest first), each only while the
/// followed process that wrote the entries holds its pid: the kernel forgets a process in
/// TRACKED at its exit, so a pid with entries that TRACKED does not know (or knows by
/// another fork time after the listing) is an exited process's, whatever process, of
/// whichever user, has the pid now; its table would hold the entries against another
/// process's fds (a process gone before its entries were read would seem to have closed
/// them). A pid without entries (a root, a process at attach) is read as it is.
pub(super) fn followed_tables(
    session: &Session,
    pids: &[(usize, u32)],
) -> BTreeMap<u32, ProcTable> {
    let forked = |p: u32| session.task_state(p).map(|s| (s.fork_ns, s.execs));
    let before: HashMap<u32, (u64, u32)> = pids
        .iter()
        .filter_map(|&(_, p)| Some((p, forked(p)?)))
        .collect();
    let read: Vec<(u32, u32)> = pids
        .iter()
        .filter(|&&(n, p)| n == 0 || before.contains_key(&p))
        .map(|&(_, p)| (p, before.get(&p).map_or(0, |s| s.1)))
        .collect();
    let mut tables = procs::tables_of(&read);
    tables.retain(|&p, _| {
        before
            .get(&p)
            .is_none_or(|was| forked(p).is_some_and(|now| now.0 == was.0))
    });
    tables
}

/// What one count says, from its value.
type Reason = fn(u64) -> String;

/// Why the run is known to be incomplete, if it is: fds the full live set could not keep,
/// forks the full traced set could not follow, fds made where the live set cannot see them
/// (i386 calls, io_uring requests) or in another fd table (a thread's own).
pub(super) fn incomplete(session: &Session) -> Result<Option<String>> {
    use crate::output::count;
    let stats = session.stats()?;
    // One line per count the kernel keeps: the count, and what it says when not 0.
    let reasons: [(u64, Reason); 5] = [
        (stats.unclosed_full, |n| {
            format!("{} made while the live set was full", count(n, "fd", "fds"))
        }),
        (stats.tracked_full, |n| {
            format!(
                "{} not followed (the traced set was full)",
                count(n, "fork", "forks")
            )
        }),
        (stats.unclosed_unseen_calls, |n| {
            format!(
                "i386 syscalls that make fds or set close-on-exec (int $0x80, or a 32-bit \
                 process): {n}; fdaudit does not follow them, so what they did is not counted"
            )
        }),
        (stats.unclosed_io_uring, |n| {
            format!(
                "io_uring requests that can make fds (openat, accept, socket, pipe, recvmsg, \
                 fixed-fd install; on kernels before 6.0, rings set up): {n}; no syscall hook \
                 sees the fds they make, so they are not counted"
            )
        }),
        (stats.unclosed_split_tables, |n| {
            format!(
                "{} took an fd table of {} own (unshare(CLONE_FILES), or a thread cloned \
                 without CLONE_FILES): fdaudit keeps one table per process, so fds in another \
                 are not counted",
                count(n, "thread", "threads"),
                if n == 1 { "its" } else { "their" },
            )
        }),
    ];
    let why: Vec<String> = reasons
        .iter()
        .filter(|&&(n, _)| n > 0)
        .map(|&(n, say)| say(n))
        .collect();
    Ok((!why.is_empty()).then(|| why.join(", ")))
}
