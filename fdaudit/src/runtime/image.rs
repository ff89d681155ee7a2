//! Bounded reads of a live process's images for the runtime rules: its executable
//! (`/proc/PID/exe`) and mapped objects (through `/proc/PID/root`), never on a file system
//! that may not answer (FUSE, NFS, CIFS, 9p, ... as the process's mountinfo names the
//! mapping's device), opened non-blocking, regular files only, at most [`MAX_IMAGE`] bytes
//! mapped and [`MAX_SECTION`] bytes of one section searched.

use std::{collections::HashMap, os::fd::AsRawFd as _};

use super::rules::{leading_version, Images, Which};

/// The largest file mapped (a Node or JVM image is well below).
pub const MAX_IMAGE: u64 = 512 << 20;
/// The most bytes of one section searched for a version string.
pub const MAX_SECTION: usize = 64 << 20;
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

/// The images of one live process.
pub struct ProcImages {
    pid: u32,
    /// What mapped paths are opened under: `/proc/PID/root`, or nothing when the process's
    /// root is ours (its files then stay readable after it exits).
    prefix: Vec<u8>,
    exe: Option<Vec<u8>>,
    /// Each mapped path's device (from maps, hex major:minor), the executable's as `None`.
    devs: HashMap<Vec<u8>, (u32, u32)>,
    exe_dev: Option<(u32, u32)>,
    remote: Vec<(u32, u32)>,
    open: HashMap<Option<Vec<u8>>, Option<memmap2::Mmap>>,
}

impl ProcImages {
    /// `own_root`: the process's `/proc/PID/root` is `/` (read first, while it lives).
    pub fn new(
        pid: u32,
        exe: Option<&[u8]>,
        devs: HashMap<Vec<u8>, (u32, u32)>,
        remote: Vec<(u32, u32)>,
        own_root: bool,
    ) -> Self {
        let exe_dev = exe.and_then(|e| devs.get(e).copied());
        let prefix = if own_root {
            Vec::new()
        } else {
            format!("/proc/{pid}/root").into_bytes()
        };
        ProcImages {
            pid,
            prefix,
            exe: exe.map(<[u8]>::to_vec),
            devs,
            exe_dev,
            remote,
            open: HashMap::new(),
        }
    }

    fn map(&mut self, file: Which<'_>) -> Option<&memmap2::Mmap> {
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

    fn open_image(&self, file: Which<'_>) -> Option<memmap2::Mmap> {
        let under_root = |p: &[u8]| [self.prefix.as_slice(), p].concat();
        let (dev, path) = match file {
            Which::Exe => (self.exe_dev, self.exe.as_deref().map(under_root)),
            Which::Mapped(p) => (self.devs.get(p).copied(), Some(under_root(p))),
        };
        // A device not in maps (the exe unmapped?) or on a remote file system: not opened.
        if dev.is_none_or(|d| self.remote.contains(&d)) {
            return None;
        }
        let f = match file {
            // The image itself while the process lives (its path may have been replaced).
            Which::Exe => open_regular(format!("/proc/{}/exe", self.pid).as_bytes())
                .or_else(|| open_regular(&path?))?,
            Which::Mapped(_) => open_regular(&path?)?,
        };
        if f.metadata().ok()?.len() > MAX_IMAGE {
            return None;
        }
        // SAFETY: read-only private mapping; a file truncated meanwhile can SIGBUS, as for
        // any reader of mapped ELF files (the origin symbolizer reads them alike).
        unsafe { memmap2::MmapOptions::new().map_copy_read_only(&f) }.ok()
    }
}

/// Opens a path non-blocking, refusing anything but a regular file.
fn open_regular(path: &[u8]) -> Option<std::fs::File> {
    use std::os::unix::{ffi::OsStrExt as _, fs::OpenOptionsExt as _};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(std::ffi::OsStr::from_bytes(path))
        .ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is written by the kernel on success; f is an open fd.
    if unsafe { libc::fstat(f.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: success above.
    (unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(f)
}

/// The bytes of a section of an ELF image (`None`: no such section, or not ELF).
pub fn section<'a>(data: &'a [u8], name: &str) -> Option<&'a [u8]> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(data).ok()?;
    let s = file.section_by_name(name)?;
    let d = s.data().ok()?;
    Some(&d[..d.len().min(MAX_SECTION)])
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
        let data = self.map(file)?;
        token_after(section(data, name)?, needle)
    }

    fn go_version(&mut self) -> Option<String> {
        let data = self.map(Which::Exe)?;
        go_buildinfo_version(section(data, ".go.buildinfo")?)
    }

    fn text_file(&mut self, path: &[u8]) -> Option<String> {
        use std::io::Read as _;
        let full = [self.prefix.as_slice(), path].concat();
        // The release file sits beside the mapped libjvm.so: on that mount, if any.
        let dev = self.devs.iter().find(|(p, _)| {
            let home = &path[..path.len().saturating_sub(b"/release".len())];
            p.starts_with(home)
        });
        if dev.is_none_or(|(_, d)| self.remote.contains(d)) {
            return None;
        }
        let mut buf = Vec::new();
        open_regular(&full)?
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
