//! Completion: what the kernel's records leave to user space, filled in once, in one place,
//! before any front end sees a spawn. At decode ([`Completion::identify`]): the cgroup
//! identity and, for a spawn whose fork was not seen, the parent from /proc. Per batch
//! ([`Completion::finish`], after the session's probe-cost calibration): the parent's
//! runtime (`trace`), the ia32 flag, a failed exec's errno and path, the probe-corrected
//! window and the parent's name where the kernel saw no fork.

use std::collections::HashMap;

use aya::maps::{HashMap as AyaHashMap, MapData};
use fdaudit_common::FailedExec;

use super::{
    exec_parent::ExecParents, fdtarget::cstr, flags::SpawnFlags, ia32::Ia32Images,
    process::Processes, runtimes, spawn::Event,
};
use crate::{
    cgroup::{Hierarchy, Identity},
    output::text::Lossless,
    procfs_util, sys,
};

/// The session's completion state: the maps and tables it asks.
pub struct Completion {
    /// Failed execs' errno and path, when the failed-exec programs could be attached.
    failed_execs: Option<AyaHashMap<MapData, u32, FailedExec>>,
    /// The cgroup2 hierarchy, to name the cgroup ids of spawn records (None without cgroup2).
    cgroups: Option<Hierarchy>,
    /// When the backend does not count ia32 syscalls: which images are ia32, to flag the
    /// spawns whose counts are unseen.
    ia32_images: Option<Ia32Images>,
    /// Names the parent of execs whose fork was not seen.
    exec_parents: ExecParents,
    /// The one per-process table (parents, images, exec paths, runtimes, ia32), with its one
    /// clean-up at exit (process.rs); the decoder's `--origin` tables use it too.
    pub(super) processes: Processes,
    /// Names each spawn's runtime (`trace`), when asked for: the session runs it first on
    /// each batch ([`runtimes::Resolver::name_all`]), as it may decode the records written
    /// since.
    pub(super) runtimes: Option<runtimes::Resolver>,
    /// A node agent's ([`super::loader::SessionOptions::agent`]): each cgroup's identity,
    /// kept by cgroup id, without the namespace pid (no /proc read per spawn).
    agent_identities: Option<HashMap<u64, Identity>>,
}

/// Cgroup identities an agent keeps at most (a node's churn past it forgets all).
const MAX_IDENTITIES: usize = 1 << 14;

impl Completion {
    pub fn new(
        failed_execs: Option<AyaHashMap<MapData, u32, FailedExec>>,
        ia32_unseen: bool,
        agent: bool,
    ) -> Self {
        Completion {
            agent_identities: agent.then(HashMap::new),
            failed_execs,
            cgroups: Hierarchy::open(),
            ia32_images: ia32_unseen.then(Default::default),
            exec_parents: ExecParents,
            processes: Processes::default(),
            runtimes: None,
        }
    }

    /// Whether failed execs are named (the failed-exec programs are attached).
    pub fn names_failed_execs(&self) -> bool {
        self.failed_execs.is_some()
    }

    /// Names each spawn's runtime from its parent's image from now on (`trace`).
    pub fn identify_runtimes(&mut self) {
        self.runtimes.get_or_insert_with(Default::default);
    }

    /// As an event is decoded: its spawn's cgroup identity (a spawn reported at its exit, a
    /// failed exec or an exec unseen, by the cgroup it exited in), and the parent of one
    /// picked up at its exec by `--cgroup` (its fork was not seen) from /proc while the
    /// process runs (named by [`Completion::finish`]).
    pub fn identify(&mut self, ev: &mut Event) {
        let s = match ev {
            Event::Spawn(s) => s,
            Event::Exit(e) => match e.failed_exec.as_mut() {
                Some(s) => s,
                None => return,
            },
        };
        if let (Some(id), Some(h)) = (s.identity.cgroup_id, &mut self.cgroups) {
            s.identity = match &mut self.agent_identities {
                Some(known) => {
                    if known.len() >= MAX_IDENTITIES && !known.contains_key(&id) {
                        known.clear();
                    }
                    known
                        .entry(id)
                        .or_insert_with(|| h.cgroup_identity(id))
                        .clone()
                }
                None => h.identity(id, s.pid),
            };
        }
        if s.parent_pid == 0 {
            if let Some(pp) = procfs_util::parent_of(s.pid) {
                s.parent_pid = pp;
                s.parent_comm = Lossless::new(Vec::new());
            }
        }
    }

    /// The ia32 flag and the failed execs' errno and path.
    pub fn name(&mut self, out: &mut [Event]) {
        if let Some(images) = &mut self.ia32_images {
            images.mark(&mut self.processes, out);
        }
        for ev in out.iter_mut() {
            self.add_failed_exec(ev);
        }
    }

    /// The window without the probes' own cost (`probe_ns` per probed syscall), and the
    /// parent's name where the kernel saw no fork; then the process table's clean-up at
    /// exit ([`Processes::exited`]): the pids it forgot.
    pub fn finish(&mut self, events: &mut [Event], probe_ns: f64) -> Vec<u32> {
        for ev in events.iter_mut() {
            let spawn = match ev {
                Event::Spawn(s) => Some(s),
                Event::Exit(e) => e.failed_exec.as_mut(),
            };
            if let Some(s) = spawn {
                s.correct_for_probes(probe_ns);
            }
        }
        self.exec_parents.complete(&mut self.processes, events);
        if let Some(r) = &mut self.runtimes {
            r.exits(&mut self.processes, events);
        }
        self.processes
            .exited(events.iter().filter_map(|ev| match ev {
                Event::Exit(e) => Some(e.pid),
                Event::Spawn(_) => None,
            }))
    }

    /// Gives a failed exec its errno and path (from the failed-exec programs' map) and drops a
    /// failure that a later exec of the same process superseded.
    fn add_failed_exec(&mut self, ev: &mut Event) {
        let Some(map) = self.failed_execs.as_mut() else {
            return;
        };
        match ev {
            Event::Exit(e) => {
                if let Some(s) = e.failed_exec.as_mut() {
                    if let Ok(f) = map.get(&s.pid, 0) {
                        s.exec_errno = Some(f.errno);
                        s.exec_error = sys::errno_name(f.errno);
                        s.exec_path = Lossless::new(cstr(&f.path));
                        if f.path_cut != 0 {
                            s.flags |= SpawnFlags::PATH_PARTIAL;
                        }
                        let _ = map.remove(&s.pid);
                    }
                }
            }
            Event::Spawn(s) if s.exec_attempts > 1 => {
                let _ = map.remove(&s.pid);
            }
            Event::Spawn(_) => {}
        }
    }
}
