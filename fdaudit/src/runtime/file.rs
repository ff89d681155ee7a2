//! A process gone before it was read: its image named from the executable's file (the exec
//! path the kernel recorded) and the libraries its ELF asks for (`DT_NEEDED`, `PT_INTERP`),
//! read from this host's file systems, never from a remote one (mount points matched by
//! path from fdaudit's own mountinfo, so nothing is asked of the path before it is known
//! to be local). Files are opened without following a symlink at the path's end (after
//! [`resolve`]), regular files only, and read by bounded positional reads, never mapped
//! ([`crate::untrusted`]).

use super::image::{
    find_in_section, go_buildinfo_version, is_remote, section_head, IMAGE_BUDGET, MAX_IMAGE,
};
use super::rules::{base, Images, Which};
use crate::untrusted::{self, Bounded};

/// Whether a path lies under a mount whose file system is never read, by the longest mount
/// point (fdaudit's own mountinfo) that is a prefix of it.
pub fn on_remote(path: &[u8], mountinfo: &str) -> bool {
    let mut best: (usize, bool) = (0, false);
    for line in mountinfo.lines() {
        let point = line.split(' ').nth(4).unwrap_or("");
        let fstype = line.split(" - ").nth(1).and_then(|r| r.split(' ').next());
        let p = point.as_bytes();
        let under =
            path.starts_with(p) && (p == b"/" || path.get(p.len()).is_none_or(|&b| b == b'/'));
        if under && p.len() >= best.0 {
            best = (p.len(), fstype.is_some_and(is_remote));
        }
    }
    best.1
}

/// Opens a local regular file of at most [`MAX_IMAGE`] bytes for bounded reads.
fn open(path: &[u8], mountinfo: &str) -> Option<Bounded> {
    if !path.starts_with(b"/") || path.starts_with(b"/proc/") || on_remote(path, mountinfo) {
        return None;
    }
    let f = untrusted::open_path(path, MAX_IMAGE, None).ok()?;
    Some(Bounded::of(f, IMAGE_BUDGET))
}

/// The file a path names, its last component's symlinks followed (at most 8; `/usr/bin/python3`
/// → `/usr/bin/python3.11`), each link read only on a local file system.
pub fn resolve(path: &[u8], mountinfo: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut p = path.to_vec();
    for _ in 0..8 {
        if on_remote(&p, mountinfo) {
            break;
        }
        let Ok(target) = std::fs::read_link(std::ffi::OsStr::from_bytes(&p)) else {
            break;
        };
        let t = target.as_os_str().as_bytes();
        p = if t.starts_with(b"/") {
            t.to_vec()
        } else {
            let dir = &p[..p.iter().rposition(|&b| b == b'/').unwrap_or(0)];
            [dir, b"/", t].concat()
        };
    }
    p
}

/// The interpreter a script names on its `#!` line (`/root/.pyenv/libexec/pyenv-which` →
/// `/usr/bin/bash`), as the kernel runs it: the first word after `#!`, an absolute path;
/// `None` for anything else (an ELF file, no such line, an unreadable or remote file).
pub fn script_interpreter(path: &[u8], mountinfo: &str) -> Option<Vec<u8>> {
    // The kernel reads this much of the line (BINPRM_BUF_SIZE).
    const LINE: usize = 256;
    let head = open(path, mountinfo)?.read_at(0, LINE).ok()?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let word = line
        .split(|&b| b == b' ' || b == b'\t')
        .find(|w| !w.is_empty())?;
    word.starts_with(b"/").then(|| word.to_vec())
}

/// The executable at a path and what it links: its file, and the libraries it names.
pub struct FileImages {
    exe: Option<Bounded>,
    mountinfo: String,
    /// This process's own mapped C library, for a `libc.so.6` the executable needs.
    own_libc: Option<Vec<u8>>,
}

impl FileImages {
    /// The executable's file (`exe` as [`resolve`] gives it).
    pub fn new(exe: &[u8]) -> FileImages {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read("/proc/self/maps").unwrap_or_default();
        let own_libc = super::mapped_paths(&own)
            .into_iter()
            .map(|m| m.path)
            .find(|p| base(p) == b"libc.so.6");
        FileImages {
            exe: open(exe, &mountinfo),
            mountinfo,
            own_libc,
        }
    }

    /// What the executable links: `DT_NEEDED` names (`libc.so.6` as this host's path) and
    /// its interpreter (`/lib/ld-musl-x86_64.so.1`).
    pub fn linked(&self) -> Vec<Vec<u8>> {
        let Some(data) = self.exe.as_ref() else {
            return Vec::new();
        };
        let mut out = needed(data);
        for n in &mut out {
            if n.as_slice() == b"libc.so.6" {
                if let Some(own) = &self.own_libc {
                    n.clone_from(own);
                }
            }
        }
        if let Some(interp) = section_head(data, ".interp", 4096) {
            out.push(
                interp
                    .split(|&b| b == 0)
                    .next()
                    .unwrap_or_default()
                    .to_vec(),
            );
        }
        out
    }
}

/// The `DT_NEEDED` names of an ELF file's dynamic section.
fn needed(data: &Bounded) -> Vec<Vec<u8>> {
    use object::read::elf::{Dyn as _, FileHeader as _, SectionHeader as _};
    let Ok(elf) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let Ok(endian) = elf.endian() else {
        return Vec::new();
    };
    let Ok(sections) = elf.sections(endian, data) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for s in sections.iter() {
        let Ok(Some((dynamic, link))) = s.dynamic(endian, data) else {
            continue;
        };
        let Ok(strings) = sections.strings(endian, data, link) else {
            continue;
        };
        for d in dynamic.iter().take(4096) {
            if d.tag32(endian).map(i64::from) == Some(object::elf::DT_NEEDED) {
                if let Ok(name) = d.string(endian, strings) {
                    out.push(name.to_vec());
                }
            }
        }
    }
    out
}

impl Images for FileImages {
    fn find(&mut self, file: Which<'_>, name: &str, needle: &[u8]) -> Option<String> {
        match file {
            Which::Exe => find_in_section(self.exe.as_ref()?, name, needle),
            Which::Mapped(p) => find_in_section(&open(p, &self.mountinfo)?, name, needle),
        }
    }

    fn go_version(&mut self) -> Option<String> {
        go_buildinfo_version(&section_head(self.exe.as_ref()?, ".go.buildinfo", 4096)?)
    }

    fn text_file(&mut self, path: &[u8]) -> Option<String> {
        let text = open(path, &self.mountinfo)?.read_at(0, 64 << 10).ok()?;
        Some(String::from_utf8_lossy(&text).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_mounts_by_the_longest_prefix() {
        let mi = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
2 1 0:40 / /mnt/fuse rw - fuse.sshfs h:/ rw\n\
3 2 8:2 / /mnt/fuse/local rw - ext4 /dev/sda2 rw\n";
        assert!(!on_remote(b"/usr/bin/python3.11", mi));
        assert!(on_remote(b"/mnt/fuse/bin/x", mi));
        assert!(!on_remote(b"/mnt/fuse/local/x", mi));
        assert!(
            !on_remote(b"/mnt/fusex/y", mi),
            "a prefix of a name is not a mount point"
        );
    }

    #[test]
    fn symlinks_are_followed_to_the_file() {
        let mi = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n";
        let dir = std::env::temp_dir().join(format!("fdaudit-resolve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("python3.11"), b"x").unwrap();
        let link = dir.join("python3");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("python3.11", &link).unwrap();
        let got = resolve(link.as_os_str().as_encoded_bytes(), mi);
        assert_eq!(got, dir.join("python3.11").as_os_str().as_encoded_bytes());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn this_test_binary_links_glibc() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = FileImages::new(exe.as_os_str().as_encoded_bytes());
        let linked = f.linked();
        assert!(
            linked
                .iter()
                .any(|p| base(p) == b"libc.so.6" && p.starts_with(b"/")),
            "{linked:?}"
        );
        assert!(
            linked.iter().any(|p| base(p).starts_with(b"ld-linux")),
            "{linked:?}"
        );
    }
}
