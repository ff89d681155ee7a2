//! Spawns whose window ran a 32-bit (ia32) image, which the native-only backends (tp,
//! fentry) cannot count: the kernel's native syscall tracepoints skip compat syscalls
//! (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS) and fentry hooks the `__x64_sys_*` entry points only.
//! Such a spawn's counts are unknown, not 0: it is flagged
//! [`SpawnFlags::IA32_UNSEEN`] and its strategy is `unknown`.
//!
//! The window runs the image the child was forked with, its parent's image (or, for an exec
//! chain's step, the process's previous image). Each image is named at its exec record by
//! the ELF header of `/proc/PID/exe` (the kernel's link to the file it runs: following it is
//! the point), else of its exec path (relative: to its parent's cwd, the cwd it was forked
//! with) with the last component not followed; a parent whose exec was not seen is read
//! from its `/proc/PID/exe` when its child's record comes. Every file is opened `O_PATH`
//! first and read (20 bytes, never mapped) only when it is a regular file, so opening a
//! device or FIFO a hostile path names has no effect; at most [`MAX_IMAGES`] processes are
//! remembered. A process gone before its image was read, by a path that no longer names
//! it, is not flagged: its class is unknown.

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use super::{decode::Event, flags::SpawnFlags, strategy::Strategy};

/// Processes remembered at most (their entries go at exit; a burst past this forgets all,
/// and their images are read again from /proc).
const MAX_IMAGES: usize = 1 << 16;

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

/// The first 20 bytes of the regular file at `path` (`flags`: `O_NOFOLLOW` or 0), looked at
/// through an `O_PATH` fd before it is opened for reading.
fn head_of(path: &str, flags: i32) -> Option<[u8; 20]> {
    let at = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags | libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !at.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&at)
        ))
        .ok()?;
    let mut head = [0u8; 20];
    f.take(20).read_exact(&mut head).ok()?;
    Some(head)
}

/// Whether process `pid` runs an ia32 image now (`None`: gone, or not an ELF file).
fn live(pid: u32) -> Option<bool> {
    is_ia32_elf(&head_of(&format!("/proc/{pid}/exe"), 0)?)
}

/// Whether the file at an exec path is an ia32 image (its last component not followed; a
/// relative one from the cwd of `parent`, which the process was forked with).
fn by_path(path: &[u8], parent: u32) -> Option<bool> {
    let p = std::str::from_utf8(path).ok()?;
    if p.is_empty() || p.starts_with("/proc/") {
        return None;
    }
    let full = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/proc/{parent}/cwd/{p}")
    };
    is_ia32_elf(&head_of(&full, libc::O_NOFOLLOW)?)
}

/// Each traced process's latest image: ia32 or not.
#[derive(Debug, Default)]
pub struct Ia32Images {
    images: HashMap<u32, bool>,
}

impl Ia32Images {
    /// Flags the spawns among `events` whose window ran an ia32 image, in record order, and
    /// remembers each exec'd image.
    pub fn mark(&mut self, events: &mut [Event]) {
        for ev in events {
            let s = match ev {
                Event::Spawn(s) => s,
                Event::Exit(e) => {
                    self.images.remove(&e.pid);
                    if let Some(s) = e.failed_spawn.as_mut() {
                        self.flag(s);
                    }
                    continue;
                }
            };
            self.flag(s);
            if s.exec_ok {
                if self.images.len() >= MAX_IMAGES {
                    self.images.clear();
                }
                match live(s.pid).or_else(|| by_path(&s.exec_path, s.parent_pid)) {
                    Some(ia32) => self.images.insert(s.pid, ia32),
                    None => self.images.remove(&s.pid),
                };
            }
        }
    }

    fn flag(&mut self, s: &mut super::decode::Spawn) {
        // An exec chain's step ran the process's own previous image; a forked child, its
        // parent's.
        let chained = s.flags.contains(SpawnFlags::REEXEC)
            || (s.flags.contains(SpawnFlags::NO_FORK) && self.images.contains_key(&s.pid));
        let ran = if chained {
            self.images.get(&s.pid).copied()
        } else {
            self.images
                .get(&s.parent_pid)
                .copied()
                .or_else(|| live(s.parent_pid))
        };
        if ran == Some(true) {
            s.flags |= SpawnFlags::IA32_UNSEEN;
            s.strategy = Strategy::Unknown;
            s.close_loop_bound = None;
        }
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
        // This test binary is a native one.
        assert_eq!(live(std::process::id()), Some(false));
    }
}
