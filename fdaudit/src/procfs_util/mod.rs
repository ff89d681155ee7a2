//! Reading /proc: the process tree (`parent_of`, `descendants`, `alive`) and fd-link targets
//! for `trace`, and fast dirfd-relative reads for `scan` ([`at`]).
//!
//! (Named so as not to clash with the `procfs` crate.)

pub mod at;

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// /proc/PID/stat of `pid`, parsed by procfs-core (through the procfs crate).
fn stat_of(pid: u32) -> Option<procfs::process::Stat> {
    procfs::process::Process::new(i32::try_from(pid).ok()?)
        .ok()?
        .stat()
        .ok()
}

/// The first `max` bytes of /proc/PID/`name` (None when it cannot be read: the process
/// gone). The only reader of a process's procfs text files, so that each is opened alike.
pub fn read_proc_text(pid: u32, name: &str, max: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut buf = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/{name}"))
        .and_then(|f| f.take(max).read_to_end(&mut buf))
        .ok()?;
    Some(buf)
}

/// Parent pid of `pid` from /proc/PID/stat.
pub fn parent_of(pid: u32) -> Option<u32> {
    u32::try_from(stat_of(pid)?.ppid).ok()
}

/// The text range of the image `pid` runs now (mm->start_code..end_code, /proc/PID/stat):
/// another exec (a PIE loads at a random address, another executable has another text) or
/// another process under a reused pid has another. None when the process is gone or its
/// memory map is (exiting).
pub fn code_range(pid: u32) -> Option<(u64, u64)> {
    let s = stat_of(pid)?;
    (s.startcode < s.endcode).then_some((s.startcode, s.endcode))
}

/// Whether `pid` is running: a zombie (state Z or X in /proc/PID/stat) is gone for our
/// purposes.
pub fn alive(pid: u32) -> bool {
    stat_of(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

/// Whether `pid` has begun to exit (its leader's PF_EXITING, set before its memory map is
/// torn down), is a zombie, or is gone: a /proc/PID/maps read before this said false was
/// whole; one made while the map was torn down may lack any mapping (the kernel reads maps
/// under per-VMA locks, not the whole map's).
pub fn exiting(pid: u32) -> bool {
    stat_of(pid).is_none_or(|s| stat_says_exiting(&s))
}

/// Whether a task's stat says it has begun to exit (PF_EXITING), is a zombie or is dead.
pub fn stat_says_exiting(s: &procfs::process::Stat) -> bool {
    /// include/linux/sched.h
    const PF_EXITING: u32 = 0x4;
    s.state == 'Z' || s.state == 'X' || s.flags & PF_EXITING != 0
}

/// Every current descendant of `root`, from /proc (children before grandchildren).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            let Ok(st) = p.stat() else { continue };
            if let (Ok(pid), Ok(pp)) = (u32::try_from(st.pid), u32::try_from(st.ppid)) {
                children.entry(pp).or_default().push(pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Some(p) = queue.pop() {
        if Instant::now() > deadline {
            break;
        }
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            out.push(c);
            queue.push(c);
        }
    }
    out
}

/// The executable of a live process, /proc/PID/exe (bytes, as the kernel gives them).
pub fn exe_of(pid: u32) -> Option<Vec<u8>> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|t| t.into_os_string().into_encoded_bytes())
}

/// The target of /proc/PID/fd/FD, when that fd still refers to inode `ino` (escaped).
///
/// The inode comes from fdinfo's `ino:` line, never from a stat through the fd link: that
/// would ask the file system behind the fd, which may never answer (a FUSE server that
/// hangs, an NFS server gone). Before 5.14 fdinfo has no `ino:` line: a path is returned
/// unchecked (the caller compares it with what the kernel recorded, the name it saw). An
/// anonymous target (`pipe:[N]`) is always checked by the inode in its brackets too.
///
/// The link is read before and after fdinfo and must not change in between: the fd may be
/// replaced meanwhile (a shell that points its stdout at /dev/null for a builtin and back
/// gives /dev/null's inode with the pipe's link).
pub fn fd_target(pid: u32, fd: u32, ino: u64) -> Option<Vec<u8>> {
    let dir = at::open_dir_path(
        libc::AT_FDCWD,
        &std::ffi::CString::new(format!("/proc/{pid}")).ok()?,
    )
    .ok()?;
    let name = at::NumName::new(u64::from(fd));
    let fd_dir = at::open_dir_path(at::raw(&dir), c"fd").ok()?;
    let read_link = || {
        let mut link = vec![0u8; 4096];
        let len = at::readlinkat(at::raw(&fd_dir), name.as_cstr(), &mut link).ok()?;
        link.truncate(len);
        Some(link)
    };
    let link = read_link()?;
    let fdinfo = at::open_dir_path(at::raw(&dir), c"fdinfo").ok()?;
    let mut buf = [0u8; 1024];
    let n = at::read_head_at(at::raw(&fdinfo), name.as_cstr(), &mut buf).ok()?;
    let seen = buf[..n]
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"ino:"))
        .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok());
    if seen.is_some_and(|s| s != ino) || bracket_inode(&link).is_some_and(|n| n != ino) {
        return None;
    }
    (read_link()? == link).then_some(link)
}

/// The number in `socket:[N]` / `pipe:[N]` / `net:[N]` link texts.
pub fn bracket_inode(target: &[u8]) -> Option<u64> {
    let open = target.iter().position(|&b| b == b'[')?;
    let rest = &target[open + 1..];
    let close = rest.iter().position(|&b| b == b']')?;
    std::str::from_utf8(&rest[..close]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_descendants_alive_and_fd_targets_of_a_child() {
        use std::os::unix::fs::MetadataExt as _;
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(parent_of(child.id()), Some(me));
        assert!(descendants(me).contains(&child.id()));
        assert!(alive(child.id()));
        assert!(!exiting(child.id()) && !exiting(me));
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&null) as u32;
        let ino = null.metadata().unwrap().ino();
        assert_eq!(fd_target(me, fd, ino).as_deref(), Some(&b"/dev/null"[..]));
        assert_eq!(
            fd_target(me, fd, ino + 1),
            None,
            "another inode is not this fd"
        );
        child.kill().unwrap();
        // Killed but not yet reaped: a zombie, not alive.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive(child.id()));
        assert!(exiting(child.id()), "a zombie's maps are not whole");
        child.wait().unwrap();
        assert_eq!(parent_of(u32::MAX), None);
        assert!(!alive(u32::MAX));
        assert!(exiting(u32::MAX));
    }
}
