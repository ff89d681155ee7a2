//! Reading /proc: the process tree (`parent_of`, `descendants`, `alive`) and fd-link targets
//! for `trace`, and fast dirfd-relative reads for `scan` ([`at`]).
//!
//! (Named so as not to clash with the `procfs` crate.)

pub mod at;

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::output::escape_bytes;

/// Parent pid of `pid` from /proc/PID/stat.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Whether `pid` is running: a zombie (state Z or X in /proc/PID/stat) is gone for our
/// purposes.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s.get(i + 2..i + 3))
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// Every current descendant of `root`, from /proc (children before grandchildren).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(pp) = parent_of(pid) {
                    children.entry(pp).or_default().push(pid);
                }
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

/// The executable of a live process, /proc/PID/exe (escaped).
pub fn exe_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|t| escape_bytes(t.as_os_str().as_encoded_bytes()))
}

/// The target of /proc/PID/fd/FD, when that fd still refers to inode `ino` (escaped).
pub fn fd_target(pid: u32, fd: u32, ino: u64) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let link = format!("/proc/{pid}/fd/{fd}");
    let md = std::fs::metadata(&link).ok()?;
    (md.ino() == ino)
        .then(|| std::fs::read_link(&link).ok())
        .flatten()
        .map(|t| escape_bytes(t.as_os_str().as_encoded_bytes()))
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
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&null) as u32;
        let ino = null.metadata().unwrap().ino();
        assert_eq!(fd_target(me, fd, ino).as_deref(), Some("/dev/null"));
        assert_eq!(
            fd_target(me, fd, ino + 1),
            None,
            "another inode is not this fd"
        );
        child.kill().unwrap();
        // Killed but not yet reaped: a zombie, not alive.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive(child.id()));
        child.wait().unwrap();
        assert_eq!(parent_of(u32::MAX), None);
        assert!(!alive(u32::MAX));
    }
}
