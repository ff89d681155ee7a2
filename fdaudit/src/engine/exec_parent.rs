//! The parent of an exec whose fork the kernel programs did not see: the traced command's
//! own re-exec (`bash -c 'exec 7<f; /bin/true'`: bash execs /bin/true), or a process that
//! was running at attach. The image that exec'd is its parent: the previous image of the
//! same process, named as the kernel names a new image (the file name, 15 bytes), else the
//! process's real parent.

use super::{
    process::Processes,
    spawn::{Event, Spawn},
};
use crate::output::text::Lossless;

/// Names the parents the kernel gave none, from each process's latest image name kept in
/// the session's [`Processes`] table.
#[derive(Debug, Default)]
pub struct ExecParents;

impl ExecParents {
    /// Names the parent of every spawn in `events` the kernel gave none, and forgets the
    /// processes that exited.
    pub fn complete(&mut self, procs: &mut Processes, events: &mut [Event]) {
        for ev in events {
            match ev {
                Event::Spawn(s) => Self::name(procs, s),
                Event::Exit(e) => {
                    if let Some(s) = e.failed_exec.as_mut() {
                        Self::name(procs, s);
                    }
                }
            }
        }
    }

    fn name(procs: &mut Processes, s: &mut Spawn) {
        if !s.parent_comm.is_empty() {
            return;
        }
        if let Some(previous) = procs.image(s.pid) {
            s.parent_pid = s.pid;
            s.parent_comm = Lossless::new(previous.to_vec());
        } else {
            s.parent_comm = Lossless::new(parent_name(s.parent_pid));
        }
        if s.exec_ok {
            procs.entry(s.pid).image = Some(image_name(&s.exec_path));
        }
    }
}

/// The name the kernel gives a new image: its file name, cut to TASK_COMM_LEN - 1 bytes.
fn image_name(path: &[u8]) -> Vec<u8> {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    base[..base.len().min(15)].to_vec()
}

/// The name of a spawn's parent when the kernel record has none (its fork was not seen):
/// `fdaudit` for fdaudit itself (the traced command's own first exec), else what procfs says.
fn parent_name(ppid: u32) -> Vec<u8> {
    if ppid == std::process::id() {
        return b"fdaudit".to_vec();
    }
    std::fs::read(format!("/proc/{ppid}/comm"))
        .ok()
        .map(|mut c| {
            if c.last() == Some(&b'\n') {
                c.pop();
            }
            c
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| b"?".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_name_is_the_file_name_cut_to_15_bytes() {
        assert_eq!(image_name(b"/usr/bin/bash"), b"bash");
        assert_eq!(
            image_name(b"/opt/a-very-long-program-name"),
            b"a-very-long-pro"
        );
        assert_eq!(image_name(b"true"), b"true");
    }
}
