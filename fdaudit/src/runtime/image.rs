//! Bounded reads of a live process's images for the runtime rules: its executable
//! (`/proc/PID/exe`) and mapped objects (`/proc/PID/map_files/START-END` while it lives, else
//! the path through `/proc/PID/root`, which must still be the file maps named), never on a
//! file system that may not answer (FUSE, NFS, CIFS, 9p, ... as the process's mountinfo
//! names the mapping's device). Files are read by bounded positional reads, never mapped
//! (the process may truncate them meanwhile: [`crate::untrusted`]), regular files of at most
//! [`MAX_IMAGE`] bytes, [`IMAGE_BUDGET`] bytes of headers kept per file and [`MAX_SECTION`]
//! bytes of one section searched, [`CHUNK`] at a time.

use std::collections::HashMap;

use super::rules::{leading_version, Images, Which};
use crate::untrusted::{self, Bounded, FileId};

/// The largest file read (a Node or JVM image is well below).
pub const MAX_IMAGE: u64 = 512 << 20;
/// The most bytes of one section searched for a version string.
pub const MAX_SECTION: usize = 64 << 20;
/// The most bytes of an image's headers (ELF, section headers, names, dynamic) kept.
pub const IMAGE_BUDGET: u64 = 16 << 20;
/// A section is searched this many bytes at a time.
const CHUNK: usize = 1 << 20;
/// The most bytes of a text file read (a JDK's `release`).
const MAX_TEXT: usize = 64 << 10;

/// File systems whose files are never opened: their server may hang the open or the read.
const REMOTE: &[&str] = &[
    "fuse", "nfs", "cifs", "smb", "9p", "ceph", "virtiofs", "afs", "gluster", "lustre", "gfs",
    "ocfs", "sshfs", "davfs", "orangefs", "beegfs",
];

/// Whether a file system type (mountinfo's, `fuse.sshfs` too) is one never read.
pub fn is_remote(fstype: &str) -> bool {
    REMOTE.iter().any(|r| fstype.starts_with(r))
}

/// The devices (major, minor) of mounts on file systems never read, from mountinfo's text.
pub fn remote_devs(mountinfo: &str) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let mut f = line.split(' ');
        let dev = f.nth(2);
        let fstype = line.split(" - ").nth(1).and_then(|r| r.split(' ').next());
        if let (Some(dev), Some(t)) = (dev, fstype) {
            if let Some((a, b)) = dev.split_once(':') {
                if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                    if is_remote(t) {
                        out.push((a, b));
                    }
                }
            }
        }
    }
    out
}

/// What maps says of one mapped file: its device (major, minor), identity and one range.
#[derive(Debug, Clone, Copy)]
pub struct MapInfo {
    pub dev: (u32, u32),
    pub id: FileId,
    pub range: (u64, u64),
}

/// The images of one live process.
pub struct ProcImages {
    pid: u32,
    /// What mapped paths are opened under: `/proc/PID/root`, or nothing when the process's
    /// root is ours (its files then stay readable after it exits).
    prefix: Vec<u8>,
    exe: Option<Vec<u8>>,
    /// Each mapped path's device, identity and a range of it (from maps).
    maps: HashMap<Vec<u8>, MapInfo>,
    exe_map: Option<MapInfo>,
    remote: Vec<(u32, u32)>,
    open: HashMap<Option<Vec<u8>>, Option<Bounded>>,
}

impl ProcImages {
    /// `own_root`: the process's `/proc/PID/root` is `/` (read first, while it lives).
    pub fn new(
        pid: u32,
        exe: Option<&[u8]>,
        maps: HashMap<Vec<u8>, MapInfo>,
        remote: Vec<(u32, u32)>,
        own_root: bool,
    ) -> Self {
        let exe_map = exe.and_then(|e| maps.get(e).copied());
        let prefix = if own_root {
            Vec::new()
        } else {
            format!("/proc/{pid}/root").into_bytes()
        };
        ProcImages {
            pid,
            prefix,
            exe: exe.map(<[u8]>::to_vec),
            maps,
            exe_map,
            remote,
            open: HashMap::new(),
        }
    }

    fn image(&mut self, file: Which<'_>) -> Option<&Bounded> {
        let key = match file {
            Which::Exe => None,
            Which::Mapped(p) => Some(p.to_vec()),
        };
        if !self.open.contains_key(&key) {
            let m = self.open_image(file);
            self.open.insert(key.clone(), m);
        }
        self.open.get(&key)?.as_ref()
    }

    fn open_image(&self, file: Which<'_>) -> Option<Bounded> {
        let under_root = |p: &[u8]| [self.prefix.as_slice(), p].concat();
        let (info, path) = match file {
            Which::Exe => (self.exe_map, self.exe.as_deref().map(under_root)),
            Which::Mapped(p) => (self.maps.get(p).copied(), Some(under_root(p))),
        };
        // A device not in maps (the exe unmapped?) or on a remote file system: not opened.
        let info = info.filter(|i| !self.remote.contains(&i.dev))?;
        let (start, end) = info.range;
        // The file itself while the process lives (its path may have been replaced), else
        // the path, if it is still the file maps named.
        let live = match file {
            Which::Exe => untrusted::open_exe(self.pid, MAX_IMAGE),
            Which::Mapped(_) => {
                untrusted::open_mapped(self.pid, (start, end), MAX_IMAGE, Some(info.id))
            }
        };
        let f = match live {
            Ok(f) => f,
            Err(_) => untrusted::open_path(&path?, MAX_IMAGE, Some(info.id)).ok()?,
        };
        Some(Bounded::of(f, IMAGE_BUDGET))
    }
}

/// The first `max` bytes of ELF section `name` of an image (`None`: no such section, or
/// not ELF, or unreadable).
pub fn section_head(img: &Bounded, name: &str, max: usize) -> Option<Vec<u8>> {
    let (off, size) = untrusted::section_range(img, name)?;
    img.read_at(off, max.min(usize::try_from(size).ok()?)).ok()
}

/// The version-like token after `needle` in ELF section `name` of an image (its first
/// [`MAX_SECTION`] bytes, read [`CHUNK`] at a time), as [`token_after`] gives it.
pub fn find_in_section(img: &Bounded, name: &str, needle: &[u8]) -> Option<String> {
    let (off, size) = untrusted::section_range(img, name)?;
    if needle.is_empty() {
        return Some(String::new());
    }
    let size = usize::try_from(size).ok()?.min(MAX_SECTION);
    // Each chunk also holds what follows its last byte, so that a needle found in it has
    // its token whole (leading_version reads at most 40 bytes).
    let tail = needle.len() + 64;
    let mut at = 0;
    while at < size {
        let want = (CHUNK + tail).min(size - at);
        let buf = img.read_at(off + at as u64, want).ok()?;
        if let Some(i) = memchr::memmem::find(&buf, needle) {
            // A needle only in the overlap is the next chunk's (with its token whole).
            if i < CHUNK || at + buf.len() >= size {
                return token_after(&buf[i..], needle);
            }
        }
        if buf.len() < want {
            return None; // truncated meanwhile
        }
        at += CHUNK;
    }
    None
}

/// The version-like token after `needle` in `data` (`""` when nothing version-like follows).
pub fn token_after(data: &[u8], needle: &[u8]) -> Option<String> {
    if needle.is_empty() {
        return Some(String::new());
    }
    let i = memchr::memmem::find(data, needle)?;
    Some(leading_version(&data[i + needle.len()..]).unwrap_or_default())
}

/// The Go version in a `.go.buildinfo` section: a 32-byte header (`\xff Go buildinf:`,
/// pointer size, flags) and, since Go 1.18 (flags bit 2), the version as a varint-length
/// string right after it. Older layouts hold pointers instead: `None`.
pub fn go_buildinfo_version(sec: &[u8]) -> Option<String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if !sec.starts_with(MAGIC) || sec.len() < 33 || sec[15] & 2 == 0 {
        return None;
    }
    let (len, n) = uvarint(&sec[32..])?;
    let start = 32 + n;
    let s = sec.get(start..start.checked_add(usize::try_from(len).ok()?)?)?;
    let v = String::from_utf8_lossy(s);
    Some(v.strip_prefix("go").unwrap_or(&v).to_string())
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut x = 0u64;
    for (i, &byte) in b.iter().take(10).enumerate() {
        x |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some((x, i + 1));
        }
    }
    None
}

impl Images for ProcImages {
    fn find(&mut self, file: Which<'_>, name: &str, needle: &[u8]) -> Option<String> {
        find_in_section(self.image(file)?, name, needle)
    }

    fn go_version(&mut self) -> Option<String> {
        go_buildinfo_version(&section_head(
            self.image(Which::Exe)?,
            ".go.buildinfo",
            4096,
        )?)
    }

    fn text_file(&mut self, path: &[u8]) -> Option<String> {
        use std::io::Read as _;
        let full = [self.prefix.as_slice(), path].concat();
        // The release file sits beside the mapped libjvm.so: on that mount, if any.
        let dev = self.maps.iter().find(|(p, _)| {
            let home = &path[..path.len().saturating_sub(b"/release".len())];
            p.starts_with(home)
        });
        if dev.is_none_or(|(_, i)| self.remote.contains(&i.dev)) {
            return None;
        }
        let mut buf = Vec::new();
        untrusted::open_path(&full, u64::MAX, None)
            .ok()?
            .file
            .take(MAX_TEXT as u64)
            .read_to_end(&mut buf)
            .ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    }
}

/// No images to read: path rules only.
#[cfg(test)]
pub struct NoImages;

#[cfg(test)]
impl Images for NoImages {
    fn find(&mut self, _: Which<'_>, _: &str, _: &[u8]) -> Option<String> {
        None
    }
    fn go_version(&mut self) -> Option<String> {
        None
    }
    fn text_file(&mut self, _: &[u8]) -> Option<String> {
        None
    }
}
