//! Who made a leaked fd, seen from the spawn that carried it across: the spawner itself, or
//! another process (or an earlier image of the spawner's process) whose fd the spawner only
//! passed on, a pass-through such as `su`, `sh` or `env`. The one definition every front end
//! uses: `trace`'s advice names the maker, not the spawner that passed the fd on.
//!
//! The spawner's own code runs in two processes: the spawning process's current image, and
//! the child between fork and exec (posix_spawn's file actions, a shell's redirections).
//! Both have the spawner's image; an fd made by any other process, or by the spawning
//! process before it exec'd its current image, was passed on. The origin's call knows its
//! process and time ([`Call::pid`], [`Call::time_ns`]), the spawn its parent and child;
//! when the parent's image began is known only if its exec was traced.

use super::origin::Call;
use super::spawn::Spawn;

/// Who made a leaked fd with a known origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maker<'a> {
    /// The spawner's own code (its image, or its child between fork and exec).
    Spawner,
    /// Another process, or an earlier image of the spawner's: the spawner passed it on.
    PassedOn(&'a Call),
}

/// The processes where a spawn's own code ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpawnerCode {
    /// The spawning process, and when its current image began (its exec, CLOCK_MONOTONIC
    /// ns) if that exec was traced.
    pub parent_pid: u32,
    pub image_ns: Option<u64>,
    /// The child, between fork and exec.
    pub child_pid: u32,
}

impl SpawnerCode {
    pub fn of(s: &Spawn, image_ns: Option<u64>) -> SpawnerCode {
        SpawnerCode {
            parent_pid: s.parent_pid,
            image_ns,
            child_pid: s.pid,
        }
    }
}

/// Who made the fd of `call`, for a spawn whose own code ran in `by`.
pub fn judge(by: SpawnerCode, call: &Call) -> Maker<'_> {
    let in_spawner = call.pid == by.child_pid || call.pid == by.parent_pid;
    let this_image = by.image_ns.is_none_or(|since| call.time_ns >= since);
    if in_spawner && this_image {
        Maker::Spawner
    } else {
        Maker::PassedOn(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(pid: u32, time_ns: u64) -> Call {
        Call {
            syscall: "openat".into(),
            pid,
            tid: pid,
            comm: "svc".into(),
            time_ns,
            stack: Vec::new(),
            stack_partial: None,
            created_by: None,
        }
    }

    fn code(parent_pid: u32, child_pid: u32, image_ns: Option<u64>) -> SpawnerCode {
        SpawnerCode {
            parent_pid,
            image_ns,
            child_pid,
        }
    }

    #[test]
    fn the_spawner_and_its_child_before_exec_make_their_own_fds() {
        let by = code(10, 11, Some(100));
        assert_eq!(judge(by, &call(10, 500)), Maker::Spawner);
        assert_eq!(judge(by, &call(11, 900)), Maker::Spawner);
        assert_eq!(judge(code(10, 11, None), &call(10, 50)), Maker::Spawner);
    }

    #[test]
    fn another_process_or_an_earlier_image_means_passed_on() {
        // A service (pid 7) made it; `su` (pid 10) forked the child that got it.
        let service = call(7, 500);
        assert_eq!(
            judge(code(10, 11, Some(100)), &service),
            Maker::PassedOn(&service)
        );
        // pid 10 made it before it exec'd `su` (at 600): the earlier image made it.
        let before = call(10, 500);
        assert_eq!(
            judge(code(10, 11, Some(600)), &before),
            Maker::PassedOn(&before)
        );
    }
}
