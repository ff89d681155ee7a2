//! Spawns whose window ran a 32-bit (ia32) image, which the native-only backends (tp,
//! fentry) cannot count: the kernel's native syscall tracepoints skip compat syscalls
//! (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS) and fentry hooks the `__x64_sys_*` entry points only.
//! Such a spawn's counts are unknown, not 0: it is flagged
//! [`SpawnFlags::IA32_UNSEEN`] and its strategy is `unknown`.
//!
//! The window runs the image the child was forked with, its parent's image (or, for an exec
//! chain's step, the process's previous image). Each image is named at its exec record by
//! its ELF header, read from the file `/proc/PID/exe` links to (the kernel's link: following
//! it is the point), else, the process gone, from its absolute exec path opened with
//! `openat2(RESOLVE_CACHED | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: only what the
//! dentry cache holds, so no file system is asked to look anything up. Either is an `O_PATH`
//! fd first: its cached attributes (`statx`, `AT_STATX_DONT_SYNC`) must say a regular file
//! on a device that is no FUSE, NFS, … mount ([`crate::runtime::image::remote_devs`] of the
//! process's, or our, mountinfo), and only then are 20 bytes read, never mapped. Answers are
//! kept per file (device, inode) and per process, each map bounded. A process whose image
//! cannot be read so is not flagged: its class is unknown.

use std::collections::HashMap;
use std::io::Read as _;

use super::{flags::SpawnFlags, process::Processes, spawn::Event, strategy::Strategy};
use crate::runtime::read_proc;
use crate::untrusted::{FileId, Handle};

/// Files remembered at most (a burst past this forgets all, and they are read again).
const MAX_FILES: usize = 1 << 16;

/// `EM_386`: the ia32 ABI (x32 is ELFCLASS32 with EM_X86_64, whose syscalls are native).
const EM_386: u16 = 3;

/// Whether an ELF header is a 32-bit x86 (ia32) image; `None` when it is not an ELF file.
pub fn is_ia32_elf(head: &[u8]) -> Option<bool> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    // e_ident[EI_CLASS] 1: ELFCLASS32; e_machine at 18, in the file's byte order (EI_DATA
    // 1: little-endian, as x86 is).
    let machine = u16::from_le_bytes([head[18], head[19]]);
    Some(head[4] == 1 && head[5] == 1 && machine == EM_386)
}

/// The file `/proc/PID/exe` links to, held `O_PATH` (None: gone).
fn exe_handle(pid: u32) -> Option<Handle> {
    Handle::at(format!("/proc/{pid}/exe").as_bytes(), false).ok()
}

/// The first 20 bytes of the file a handle holds.
fn head_of(h: &Handle) -> Option<[u8; 20]> {
    let mut head = [0u8; 20];
    h.reopen().ok()?.take(20).read_exact(&mut head).ok()?;
    Some(head)
}

/// The devices of the FUSE, NFS, … mounts a mountinfo names (never read).
fn remote_devs_of(mountinfo: &str) -> Vec<(u32, u32)> {
    crate::runtime::image::remote_devs(mountinfo)
}

/// Each file read: ia32 or not (each traced process's latest image's answer is kept in the
/// session's [`Processes`] table, forgotten at its exit record).
#[derive(Debug, Default)]
pub struct Ia32Images {
    files: HashMap<FileId, bool>,
}

impl Ia32Images {
    /// Flags the spawns among `events` whose window ran an ia32 image, in record order, and
    /// remembers each exec'd image.
    pub fn mark(&mut self, procs: &mut Processes, events: &mut [Event]) {
        for ev in events {
            let s = match ev {
                Event::Spawn(s) => s,
                Event::Exit(e) => {
                    procs.set_ia32(e.pid, None);
                    if let Some(s) = e.failed_exec.as_mut() {
                        self.flag(procs, s);
                    }
                    continue;
                }
            };
            self.flag(procs, s);
            if s.exec_ok {
                let ia32 = self.live(s.pid).or_else(|| self.by_path(&s.exec_path));
                procs.set_ia32(s.pid, ia32);
            }
        }
    }

    fn flag(&mut self, procs: &mut Processes, s: &mut super::spawn::Spawn) {
        // An exec chain's step ran the process's own previous image; a forked child, its
        // parent's.
        let chained = s.flags.contains(SpawnFlags::REEXEC)
            || (s.flags.contains(SpawnFlags::NO_FORK) && procs.ia32(s.pid).is_some());
        let ran = if chained {
            procs.ia32(s.pid)
        } else {
            match procs.ia32(s.parent_pid) {
                Some(known) => Some(known),
                None => {
                    // Kept until the parent's next exec record or its exit record: a
                    // spawner's children do not each read its image again.
                    let live = self.live(s.parent_pid);
                    if live.is_some() {
                        procs.set_ia32(s.parent_pid, live);
                    }
                    live
                }
            }
        };
        if ran == Some(true) {
            s.flags |= SpawnFlags::IA32_UNSEEN;
            s.strategy = Strategy::Unknown;
            s.close_loop_bound = None;
        }
    }

    /// Whether process `pid` runs an ia32 image now (None: gone or unreadable).
    fn live(&mut self, pid: u32) -> Option<bool> {
        let h = exe_handle(pid)?;
        self.class(&h, || {
            let text = read_proc(pid, "mountinfo")?;
            Some(remote_devs_of(&String::from_utf8_lossy(&text)))
        })
    }

    /// Whether the file at an absolute exec path is an ia32 image (our mount namespace).
    fn by_path(&mut self, path: &[u8]) -> Option<bool> {
        let h = Handle::cached(path).ok()?;
        self.class(&h, || {
            let text = read_proc(std::process::id(), "mountinfo")?;
            Some(remote_devs_of(&String::from_utf8_lossy(&text)))
        })
    }

    /// The class of the regular file `h` holds, once per file; never read on a remote
    /// device (`remote`: the mountinfo's, asked only for a file not seen before).
    fn class(
        &mut self,
        h: &Handle,
        remote: impl FnOnce() -> Option<Vec<(u32, u32)>>,
    ) -> Option<bool> {
        if !h.is_regular() {
            return None;
        }
        if let Some(&known) = self.files.get(&h.id) {
            return Some(known);
        }
        if remote()?.contains(&h.id.major_minor()) {
            return None;
        }
        let ia32 = is_ia32_elf(&head_of(h)?)?;
        if self.files.len() >= MAX_FILES {
            self.files.clear();
        }
        self.files.insert(h.id, ia32);
        Some(ia32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elf_header_names_ia32_and_nothing_else() {
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 1; // ELFCLASS32
        h[5] = 1; // little-endian
        h[18] = 3; // EM_386
        assert_eq!(is_ia32_elf(&h), Some(true));
        h[18] = 62; // EM_X86_64 with ELFCLASS32: x32, native syscalls
        assert_eq!(is_ia32_elf(&h), Some(false));
        h[4] = 2;
        assert_eq!(is_ia32_elf(&h), Some(false));
        assert_eq!(is_ia32_elf(b"#!/bin/sh\n echo hi there"), None);
        assert_eq!(is_ia32_elf(b"\x7fELF"), None, "too short");
        // This test binary is a native one, read once.
        let mut images = Ia32Images::default();
        assert_eq!(images.live(std::process::id()), Some(false));
        assert_eq!(images.files.len(), 1);
        assert_eq!(images.live(std::process::id()), Some(false));
        // A path through a symlink is not followed; /proc paths are not taken.
        assert_eq!(images.by_path(b"/proc/self/exe"), None);
    }
}
