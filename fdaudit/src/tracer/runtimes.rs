//! Each spawn's runtime, from its parent's image ([`crate::runtime`]): read once per
//! process (pid and start time), or named from the exec path the kernel gave for a parent
//! gone before it was read.

use std::collections::HashMap;

use super::{decode::Spawn, flags::SpawnFlags};
use crate::runtime::{identify, of_pid, read_proc, resolve, FileImages, Nofile, Runtime};

/// Process start time (clock ticks since boot): with the pid, which process it is.
fn start_time(pid: u32) -> Option<u64> {
    let stat = read_proc(pid, "stat")?;
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 2..];
    let field = after.split(|&b| b == b' ').nth(19)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Names each spawn's runtime, reading each parent once (by pid and start time); a parent
/// gone is named from the exec path the kernel gave for it, when it was traced.
#[derive(Debug, Default)]
pub struct Resolver {
    cache: HashMap<(u32, u64), (Runtime, Option<Nofile>)>,
    /// Each traced process's latest exec path (the kernel's), until its exit.
    exec_paths: HashMap<u32, Vec<u8>>,
}

impl Resolver {
    /// Sets `runtime` and `parent_nofile` on a spawn, then remembers its exec path.
    pub fn name(&mut self, s: &mut Spawn) {
        let again = s.flags.contains(SpawnFlags::REEXEC)
            || s.parent_pid == s.pid
            || (s.flags.contains(SpawnFlags::NO_FORK) && self.exec_paths.contains_key(&s.pid));
        let (rt, nofile) = if again {
            // An exec chain: the image that exec'd again spawned nothing, its process did;
            // that image is gone, named by its path.
            self.by_path(s.pid, "the image that exec'd again")
        } else {
            self.of_parent(s.parent_pid)
        };
        s.runtime = Some(rt);
        s.parent_nofile = nofile;
        // A path that names the image only in the process's own view (`/proc/self/exe`)
        // or relative to its cwd says nothing later: the previous one is kept.
        let p = s.exec_path.as_slice();
        if s.exec_ok && p.starts_with(b"/") && !p.starts_with(b"/proc/") {
            self.exec_paths.insert(s.pid, p.to_vec());
        }
    }

    /// A traced process exited: its exec path is no longer needed.
    pub fn exited(&mut self, pid: u32) {
        self.exec_paths.remove(&pid);
    }

    fn of_parent(&mut self, ppid: u32) -> (Runtime, Option<Nofile>) {
        if let Some(start) = start_time(ppid) {
            if let Some(hit) = self.cache.get(&(ppid, start)) {
                return hit.clone();
            }
            if let Some(found) = of_pid(ppid) {
                // Not another process by now (gone is fine: what was read was its own).
                if start_time(ppid).is_none_or(|t| t == start) {
                    if self.cache.len() > 4096 {
                        self.cache.clear();
                    }
                    self.cache.insert((ppid, start), found.clone());
                    return found;
                }
            }
        }
        self.by_path(ppid, "the parent exited before it was read")
    }

    fn by_path(&self, pid: u32, why: &str) -> (Runtime, Option<Nofile>) {
        let Some(path) = self.exec_paths.get(&pid) else {
            return (Runtime::unknown(None, why), None);
        };
        // The executable's file and what its ELF links, from this host's file systems.
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let path = &resolve(path, &mountinfo);
        let mut files = FileImages::new(path);
        let linked = files.linked();
        let rt = identify(Some(path), &linked, &mut files);
        let rt = if rt.name == "unknown" {
            Runtime::unknown(Some(path), why)
        } else {
            Runtime {
                evidence: format!("{} ({why}: its exec path's file)", rt.evidence),
                ..rt
            }
        };
        (rt, None)
    }
}
