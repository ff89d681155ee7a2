//! Each spawn's runtime, from its parent's image ([`crate::runtime`]) as it was at the
//! fork: read once per image (pid, start time, until the process's next exec; kept in the
//! session's [`Processes`] table), or named from the exec path the kernel gave for a parent
//! gone, or exec'd again, before it was read.

use std::collections::{HashMap, HashSet};

use super::{
    flags::SpawnFlags,
    process::Processes,
    spawn::{Event, Spawn},
};
use crate::runtime::{
    identify, of_pid, read_proc, resolve, script_interpreter, FileImages, Nofile, Runtime,
};
use crate::untrusted::Handle;

/// Why a spawn is named by its parent's exec path, not by its image now.
const EXECD_SINCE: &str = "the parent exec'd again before it was read";

/// Process start time (clock ticks since boot): with the pid, which process it is.
fn start_time(pid: u32) -> Option<u64> {
    let stat = read_proc(pid, "stat")?;
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 2..];
    let field = after.split(|&b| b == b' ').nth(19)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// The spawn an event stands for: an exec, or a child whose every exec failed.
fn spawn_of(ev: &mut Event) -> Option<&mut Spawn> {
    match ev {
        Event::Spawn(s) => Some(s),
        Event::Exit(e) => e.failed_exec.as_deref_mut(),
    }
}

/// Names each spawn's runtime, reading each parent's image once (by pid and start time,
/// dropped at its next exec: a wrapper's `exec` makes another runtime of the same process);
/// a parent gone, or exec'd again since the fork, is named from the exec path the kernel
/// gave for it, when it was traced. What was read is kept in [`Processes`].
#[derive(Debug, Default)]
pub struct Resolver;

impl Resolver {
    /// Sets `runtime` and `parent_nofile` on a spawn, then remembers its exec path.
    /// `parent_execd_since`: a later record (already read) is the parent's own exec, so its
    /// image now is not the one that forked this child. True when the parent's image was
    /// read live.
    pub fn name(&mut self, procs: &mut Processes, s: &mut Spawn, parent_execd_since: bool) -> bool {
        let again = s.flags.contains(SpawnFlags::REEXEC)
            || s.parent_pid == s.pid
            || (s.flags.contains(SpawnFlags::NO_FORK) && procs.exec_path(s.pid).is_some());
        let ((rt, nofile), live) = if again {
            // An exec chain: the image that exec'd again spawned nothing, its process did;
            // that image is gone, named by its path.
            (
                Self::by_path(procs, s.pid, "the image that exec'd again"),
                false,
            )
        } else if parent_execd_since && procs.exec_path(s.parent_pid).is_some() {
            (Self::by_path(procs, s.parent_pid, EXECD_SINCE), false)
        } else {
            self.of_parent(procs, s.parent_pid)
        };
        s.runtime = Some(rt);
        s.parent_nofile = nofile;
        if s.exec_ok {
            // Another image from now on: what was read of the old one no longer names it.
            procs.forget_runtime(s.pid);
        }
        // A path that names the image only in the process's own view (`/proc/self/exe`)
        // or relative to its cwd says nothing later: the previous one is kept.
        let p = s.exec_path.as_slice();
        if s.exec_ok && p.starts_with(b"/") && !p.starts_with(b"/proc/") {
            procs.entry(s.pid).exec_path = Some(p.to_vec());
        }
        live
    }

    /// Names the failed execs that come with their exits and were not named as they were
    /// decoded ([`Resolver::name_all`]); the exited processes' exec paths go with their
    /// entries ([`Processes::exited`]).
    pub fn exits(&mut self, procs: &mut Processes, events: &mut [Event]) {
        for ev in events {
            if let Event::Exit(e) = ev {
                if let Some(s) = e.failed_exec.as_mut().filter(|s| s.runtime.is_none()) {
                    self.name(procs, s, false);
                }
            }
        }
    }

    /// Names each spawn's runtime in record order. A parent whose own exec comes later is
    /// past the image that forked the child (a wrapper's `exec`): it is named by the exec
    /// path it had. A parent read live may have exec'd just before it was read, its record
    /// not yet taken: `more` gives the records written since, appended to `events`.
    pub fn name_all(
        &mut self,
        procs: &mut Processes,
        events: &mut Vec<Event>,
        more: impl FnOnce(&mut Processes) -> Vec<Event>,
    ) {
        let live = self.name_each(procs, events);
        if live.is_empty() {
            return;
        }
        let mut later = more(procs);
        let execd: HashSet<u32> = later
            .iter()
            .filter_map(|e| match e {
                Event::Spawn(s) if s.exec_ok => Some(s.pid),
                _ => None,
            })
            .collect();
        for i in live {
            if let Some(s) = spawn_of(&mut events[i]) {
                if execd.contains(&s.parent_pid) && procs.exec_path(s.parent_pid).is_some() {
                    let (rt, _) = Self::by_path(procs, s.parent_pid, EXECD_SINCE);
                    s.runtime = Some(rt);
                    procs.forget_runtime(s.parent_pid);
                }
            }
        }
        self.name_each(procs, &mut later);
        events.append(&mut later);
    }

    /// Names each spawn in record order, a failed one where its exit is (before a later
    /// exec of its parent, in the same batch or not, renames the parent: `sh -c '/missing;
    /// exec /bin/true'`'s failed child is dash's, not true's); the indexes of those whose
    /// parent was read live.
    fn name_each(&mut self, procs: &mut Processes, events: &mut [Event]) -> Vec<usize> {
        let last_exec: HashMap<u32, usize> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Event::Spawn(s) if s.exec_ok => Some((s.pid, i)),
                _ => None,
            })
            .collect();
        let mut live = Vec::new();
        for (i, ev) in events.iter_mut().enumerate() {
            if let Some(s) = spawn_of(ev) {
                let since = last_exec.get(&s.parent_pid).is_some_and(|&j| j > i);
                if self.name(procs, s, since) {
                    live.push(i);
                }
            }
        }
        live
    }

    /// The parent's runtime, and whether it was read live (not from the cache or its path).
    fn of_parent(&mut self, procs: &mut Processes, ppid: u32) -> ((Runtime, Option<Nofile>), bool) {
        if let Some(start) = start_time(ppid) {
            if let Some(hit) = procs.runtime(ppid, start) {
                return (hit.clone(), false);
            }
            if let Some(found) = of_pid(ppid) {
                // Not another process by now (gone is fine: what was read was its own), and
                // still the image its last exec record named: one exec'd since, its record
                // not yet written (the exe changes before the exec's tracepoint), is named
                // below by that path.
                if start_time(ppid).is_none_or(|t| t == start)
                    && !Self::execd_since_read(procs, ppid)
                {
                    procs.set_runtime(ppid, start, found.clone());
                    return (found, true);
                }
            }
        }
        (
            Self::by_path(procs, ppid, "the parent exited before it was read"),
            false,
        )
    }

    /// Whether `pid`'s executable now is another file than the one its last exec record's
    /// path names. The path is looked up in the dentry cache only, following no link
    /// ([`Handle::cached`]: no file system is asked); unknown (not cached, gone, not a
    /// regular file): false.
    fn execd_since_read(procs: &Processes, pid: u32) -> bool {
        let Some(path) = procs.exec_path(pid) else {
            return false;
        };
        let now = Handle::at(format!("/proc/{pid}/exe").as_bytes(), false);
        let named = Handle::cached(path);
        // Only a regular file at that path says anything: a link there now (the file
        // replaced) is not followed, and leaves the live read standing.
        matches!((now, named), (Ok(a), Ok(b)) if b.is_regular() && a.id != b.id)
    }

    fn by_path(procs: &Processes, pid: u32, why: &str) -> (Runtime, Option<Nofile>) {
        let Some(path) = procs.exec_path(pid) else {
            return (Runtime::unknown(None, why), None);
        };
        // The executable's file and what its ELF links, from this host's file systems; for
        // a script, the interpreter its `#!` line names (the kernel's limit: 4 deep).
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut path = resolve(path, &mountinfo);
        for _ in 0..4 {
            match script_interpreter(&path, &mountinfo) {
                Some(interp) => path = resolve(&interp, &mountinfo),
                None => break,
            }
        }
        let path = &path;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::spawn::Exit;
    use crate::trace::report::tests::spawn;

    /// A pid no process has (above the kernel's `pid_max` limit): its image is never read
    /// live, so the runtime comes from the exec paths alone.
    const GONE: u32 = 4_194_304 + 7;

    fn exec(pid: u32, parent: u32, path: &str) -> Event {
        let mut s = spawn("sh", path, 0, 0, 0);
        (s.pid, s.parent_pid) = (pid, parent);
        if pid == parent {
            s.flags |= SpawnFlags::REEXEC;
        }
        Event::Spawn(Box::new(s))
    }

    fn failed_exit(pid: u32, parent: u32) -> Event {
        let mut s = spawn("sh", "/nonexistent", 0, 0, 0);
        (s.pid, s.parent_pid, s.exec_ok) = (pid, parent, false);
        Event::Exit(Exit {
            pid,
            parent_pid: parent,
            never_execd: true,
            failed_exec: Some(Box::new(s)),
        })
    }

    fn failed_runtime(events: &[Event]) -> String {
        events
            .iter()
            .find_map(|e| match e {
                Event::Exit(e) => e.failed_exec.as_ref()?.runtime.as_ref(),
                Event::Spawn(_) => None,
            })
            .map(|r| format!("{} ({})", r.name, r.evidence))
            .expect("the failed spawn is named")
    }

    #[test]
    fn a_failed_execs_runtime_is_its_parents_image_before_the_parents_next_exec() {
        let (dash, tr) = ("/usr/bin/dash", "/usr/bin/true");
        // Both Essential on Debian (dash, coreutils), the platform CI and the guests run.
        for p in [dash, tr] {
            assert!(std::path::Path::new(p).exists(), "this test reads {p}");
        }
        // `sh -c '/nonexistent; exec /bin/true'`: sh's child fails its exec and exits, then
        // sh execs true; all in one batch, and the exec in the next one.
        let mut one = Resolver;
        let mut procs = Processes::default();
        let mut batch = vec![
            exec(GONE, 1, dash),
            failed_exit(GONE + 1, GONE),
            exec(GONE, GONE, tr),
        ];
        one.name_all(&mut procs, &mut batch, |_| Vec::new());
        one.exits(&mut procs, &mut batch);
        let rt = failed_runtime(&batch);
        assert!(rt.starts_with("dash "), "{rt}");
        let mut two = Resolver;
        let mut procs = Processes::default();
        let mut first = vec![exec(GONE, 1, dash), failed_exit(GONE + 1, GONE)];
        two.name_all(&mut procs, &mut first, |_| Vec::new());
        let mut next = vec![exec(GONE, GONE, tr)];
        two.name_all(&mut procs, &mut next, |_| Vec::new());
        two.exits(&mut procs, &mut first);
        let rt = failed_runtime(&first);
        assert!(rt.starts_with("dash "), "{rt}");
    }

    #[test]
    fn a_script_gone_before_it_was_read_is_named_by_its_interpreter() {
        let dir = std::env::temp_dir().join(format!("fdaudit-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (inner, outer) = (dir.join("inner"), dir.join("outer"));
        std::fs::write(&inner, "#! /usr/bin/dash -e\nexit 0\n").unwrap();
        // A script whose interpreter is a script, as the kernel allows.
        std::fs::write(&outer, format!("#!{}\n", inner.display())).unwrap();
        for script in [&inner, &outer] {
            let mut procs = Processes::default();
            let path = script.to_str().unwrap();
            let mut batch = vec![exec(GONE, 1, path), failed_exit(GONE + 1, GONE)];
            Resolver.name_all(&mut procs, &mut batch, |_| Vec::new());
            Resolver.exits(&mut procs, &mut batch);
            let rt = failed_runtime(&batch);
            assert!(
                rt.starts_with("dash ") && rt.contains("exec path's file"),
                "{path}: {rt}"
            );
        }
        std::fs::write(&inner, "exit 0\n").unwrap();
        let mut procs = Processes::default();
        let mut batch = vec![
            exec(GONE, 1, inner.to_str().unwrap()),
            failed_exit(GONE + 1, GONE),
        ];
        Resolver.name_all(&mut procs, &mut batch, |_| Vec::new());
        Resolver.exits(&mut procs, &mut batch);
        assert!(failed_runtime(&batch).starts_with("unknown "), "no #! line");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
