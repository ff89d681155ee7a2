//! What `trace` follows: the `-p` targets, checked in /proc before anything is loaded.

use anyhow::{bail, Result};

use crate::output::stream;

/// What /proc says about a `-p` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidKind {
    Process,
    /// A thread id that is not its process's leader: the process is `tgid`.
    Thread {
        tgid: u32,
    },
    Zombie,
    KernelThread,
}

/// Classifies a `-p` target from /proc/PID/stat (state, flags) and /proc/PID/status (Tgid).
pub fn pid_kind(pid: u32) -> Option<PidKind> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    // After "pid (comm) ": state is field 3 of stat(5), flags field 9.
    let state = *fields.first()?;
    let flags: u64 = fields.get(6)?.parse().ok()?;
    if flags & PF_KTHREAD != 0 {
        return Some(PidKind::KernelThread);
    }
    if state == "Z" || state == "X" {
        return Some(PidKind::Zombie);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tgid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()?;
    Some(if tgid != pid {
        PidKind::Thread { tgid }
    } else {
        PidKind::Process
    })
}

/// Something to trace, and the `-p` targets checked before anything starts: an error for a
/// missing process or a kernel thread; a warning for a zombie; a thread id becomes its
/// process.
pub fn check_targets(pids: &[u32], command: bool, cgroup: bool) -> Result<Vec<u32>> {
    if pids.is_empty() && !command && !cgroup {
        bail!("nothing to trace: give -p PID, --cgroup PATH, -- CMD ARGS... or --demo");
    }
    let mut out = Vec::new();
    for &pid in pids {
        // SAFETY: signal 0 only checks that the process exists.
        if pid == 0
            || unsafe { libc::kill(pid as i32, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            bail!("no process with PID {pid}: check it with `ps -p {pid}`");
        }
        match pid_kind(pid) {
            Some(PidKind::KernelThread) => bail!(
                "PID {pid} is a kernel thread: it never spawns programs, so there is nothing to trace"
            ),
            Some(PidKind::Zombie) => stream::note(
                stream::Level::Warning,
                &format!(
                    "PID {pid} is a zombie (it has exited and waits to be reaped): only its living descendants can be traced"
                ),
            ),
            Some(PidKind::Thread { tgid }) => {
                stream::note(
                    stream::Level::Warning,
                    &format!("PID {pid} is a thread of process {tgid}: tracing process {tgid}"),
                );
                if !out.contains(&tgid) {
                    out.push(tgid);
                }
                continue;
            }
            Some(PidKind::Process) | None => {}
        }
        if !out.contains(&pid) {
            out.push(pid);
        }
    }
    if out.contains(&std::process::id()) {
        // It would follow its own work, and wait for its own exit, for ever.
        bail!(
            "PID {} is this fdaudit itself: give the PID of the process to trace",
            std::process::id()
        );
    }
    Ok(out)
}
