//! Files a traced or scanned process controls (its executable, the objects it maps, a path
//! it exec'd): opened without following its links, without blocking and without opening
//! anything but a regular file, then read by bounded positional reads with a byte budget,
//! never mapped: a file its owner truncates while fdaudit reads it gives a short read (an
//! error), where a mapping would kill fdaudit with SIGBUS.
//!
//! A path is first opened `O_PATH | O_NOFOLLOW` (no open of the file itself: a FIFO's
//! reader, a device's driver and a symlink's target are never reached), checked by its
//! cached attributes ([`Handle`]), and only then reopened for reading through `/proc/self/fd`. A process's own
//! links (`/proc/PID/map_files/START-END`, `/proc/PID/exe`) name the real file even when its
//! path was deleted or replaced, and are opened the same way (without `O_NOFOLLOW`: they are
//! the kernel's links, not the process's).

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    ffi::CString,
    fs::File,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::FileExt as _,
    },
};

/// A file's identity: the device and inode its attributes give (and /proc/PID/maps shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// From a maps line's `MAJOR:MINOR` (hex) and inode fields.
    pub fn from_maps(dev: &[u8], ino: &[u8]) -> Option<FileId> {
        let dev = std::str::from_utf8(dev).ok()?;
        let (a, b) = dev.split_once(':')?;
        let (major, minor) = (
            u32::from_str_radix(a, 16).ok()?,
            u32::from_str_radix(b, 16).ok()?,
        );
        Some(FileId {
            dev: libc::makedev(major, minor),
            ino: std::str::from_utf8(ino).ok()?.parse().ok()?,
        })
    }

    /// The device as (major, minor).
    pub fn major_minor(&self) -> (u32, u32) {
        (libc::major(self.dev), libc::minor(self.dev))
    }
}

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("failed to open {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not a regular file: not read")]
    NotRegular(String),
    #[error("{path} is {len} bytes, over the {max}-byte limit: not read")]
    TooLarge { path: String, len: u64, max: u64 },
    #[error("{0} is no longer the file the process mapped (device or inode differ): not read")]
    Replaced(String),
}

/// A regular file open for reading, with its identity and size when it was opened.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    pub id: FileId,
    pub len: u64,
}

fn open_raw(path: &[u8], flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string; open returns a new fd or -1.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A file held `O_PATH` (nothing of the file itself opened: no FIFO reader, no driver), with
/// what its cached attributes say: `statx` with `AT_STATX_DONT_SYNC`, so no file system is
/// asked (a FUSE or NFS server the process controls cannot stall it).
#[derive(Debug)]
pub struct Handle {
    fd: OwnedFd,
    pub id: FileId,
    pub len: u64,
    regular: bool,
}

impl Handle {
    /// `path` held `O_PATH` (`nofollow`: never through a symlink at its end).
    pub fn at(path: &[u8], nofollow: bool) -> std::io::Result<Handle> {
        let extra = if nofollow { libc::O_NOFOLLOW } else { 0 };
        Handle::of(open_raw(path, libc::O_PATH | extra)?)
    }

    /// An absolute path held `O_PATH | O_NOFOLLOW` from the dentry cache only, no symlink
    /// followed (`openat2` with `RESOLVE_CACHED`: no file system is asked to look anything
    /// up; EAGAIN when not cached, ENOSYS before Linux 5.12).
    pub fn cached(path: &[u8]) -> std::io::Result<Handle> {
        use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
        if !path.starts_with(b"/") || path.starts_with(b"/proc/") {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let name =
            CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let fd = rustix::fs::openat2(
            CWD,
            name.as_c_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::CACHED | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        Handle::of(fd)
    }

    /// An fd opened `O_PATH` elsewhere.
    pub fn of(fd: OwnedFd) -> std::io::Result<Handle> {
        // SAFETY: st is plain data, filled by statx.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        let want = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_SIZE;
        // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH; st is valid for writing.
        let r = unsafe {
            libc::statx(
                fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
                want,
                &mut st,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if st.stx_mask & want != want {
            return Err(std::io::Error::from_raw_os_error(libc::ENODATA));
        }
        Ok(Handle {
            fd,
            id: FileId {
                dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
                ino: st.stx_ino,
            },
            len: st.stx_size,
            regular: u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG,
        })
    }

    pub fn is_regular(&self) -> bool {
        self.regular
    }

    /// The held file itself, opened for reading (non-blocking, never a controlling tty).
    pub fn reopen(&self) -> std::io::Result<File> {
        let again = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let fd = open_raw(
            again.as_bytes(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        )?;
        Ok(File::from(fd))
    }
}

/// Opens `path` (`nofollow`: its last component must not be a symlink) as a regular file of
/// at most `max_len` bytes, the same file as `want` when given.
fn open_checked(
    path: &[u8],
    nofollow: bool,
    max_len: u64,
    want: Option<FileId>,
) -> Result<Opened, OpenError> {
    let name = || String::from_utf8_lossy(path).into_owned();
    let err = |source| OpenError::Open {
        path: name(),
        source,
    };
    let handle = Handle::at(path, nofollow).map_err(err)?;
    if !handle.is_regular() {
        return Err(OpenError::NotRegular(name()));
    }
    if want.is_some_and(|w| w != handle.id) {
        return Err(OpenError::Replaced(name()));
    }
    if handle.len > max_len {
        return Err(OpenError::TooLarge {
            path: name(),
            len: handle.len,
            max: max_len,
        });
    }
    // The same inode, now opened for reading (the checks above were on this very file).
    let file = handle.reopen().map_err(err)?;
    Ok(Opened {
        file,
        id: handle.id,
        len: handle.len,
    })
}

/// Opens a path a process named (an exec path, a mapped path), never through a symlink at
/// its end; `want`: the identity /proc/PID/maps gave, which the file must still have.
pub fn open_path(path: &[u8], max_len: u64, want: Option<FileId>) -> Result<Opened, OpenError> {
    open_checked(path, true, max_len, want)
}

/// Opens a file root's configuration names (`watch --web-config` and the PEM files it
/// names): held as any other (a regular file only, nothing else opened, bounded), but a
/// symlink at its end is followed, as Kubernetes mounts a Secret's keys as links.
pub fn open_configured(path: &[u8], max_len: u64) -> Result<Opened, OpenError> {
    open_checked(path, false, max_len, None)
}

/// Opens the file a mapping of a live process maps (`/proc/PID/map_files/START-END`: the
/// mapped file itself, even deleted or renamed; root only). `want`: the identity
/// /proc/PID/maps gave, which the file there must have: since the maps were read, the
/// process may have exec'd or mapped another file at the same range.
pub fn open_mapped(
    pid: u32,
    (start, end): (u64, u64),
    max_len: u64,
    want: Option<FileId>,
) -> Result<Opened, OpenError> {
    let link = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
    open_checked(link.as_bytes(), false, max_len, want)
}

/// Opens a live process's executable (`/proc/PID/exe`).
pub fn open_exe(pid: u32, max_len: u64) -> Result<Opened, OpenError> {
    let link = format!("/proc/{pid}/exe");
    open_checked(link.as_bytes(), false, max_len, None)
}

/// What [`Bounded`] has read and kept.
#[derive(Debug, Default)]
struct Cache {
    /// Bytes still allowed.
    left: u64,
    bufs: HashMap<(u64, u64), Box<[u8]>>,
    /// Windows of string tables by (offset, length): strings are served from them. Never
    /// replaced (what was handed out points into them).
    windows: BTreeMap<(u64, usize), Box<[u8]>>,
}

/// Bytes read at once for strings (a symbol or section name is within one).
const WINDOW: u64 = 64 << 10;

/// A file read by `pread` for `object`'s parsers ([`object::ReadRef`]): each range read is
/// kept while the reader lives, and all of them together stay within a byte budget (a read
/// past it fails, as does one past the file's end or of a file truncated meanwhile).
#[derive(Debug)]
pub struct Bounded {
    file: File,
    len: u64,
    cache: RefCell<Cache>,
}

impl Bounded {
    /// Reads `file` (`len` bytes when it was opened), keeping at most `budget` bytes.
    pub fn new(file: File, len: u64, budget: u64) -> Bounded {
        Bounded {
            file,
            len,
            cache: RefCell::new(Cache {
                left: budget,
                ..Cache::default()
            }),
        }
    }

    /// From an [`Opened`] file.
    pub fn of(o: Opened, budget: u64) -> Bounded {
        Bounded::new(o.file, o.len, budget)
    }

    /// Up to `max` bytes at `offset`, not kept (a scan in chunks): fewer at the file's end
    /// or when it was truncated.
    pub fn read_at(&self, offset: u64, max: usize) -> std::io::Result<Vec<u8>> {
        let max = usize::try_from(self.len.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(max);
        let mut buf = vec![0; max];
        let mut got = 0;
        while got < max {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    /// Bytes kept so far.
    pub fn kept(&self) -> u64 {
        let c = self.cache.borrow();
        let bufs = c.bufs.values().chain(c.windows.values());
        bufs.map(|b| b.len() as u64).sum()
    }

    /// Takes `n` bytes from the budget, or fails.
    fn spend(c: &mut Cache, n: u64) -> Result<(), ()> {
        c.left = c.left.checked_sub(n).ok_or(())?;
        Ok(())
    }
}

/// Extends a kept buffer's borrow to the reader's: buffers are boxed, never removed or
/// changed while the reader lives (moving the box in the map does not move its bytes), as
/// in `object::ReadCache`.
fn extend<'a>(b: &[u8]) -> &'a [u8] {
    // SAFETY: see above; the caller ties 'a to `&'a Bounded`.
    unsafe { std::mem::transmute::<&[u8], &'a [u8]>(b) }
}

impl<'a> object::ReadRef<'a> for &'a Bounded {
    fn len(self) -> Result<u64, ()> {
        Ok(self.len)
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if size == 0 {
            return Ok(&[]);
        }
        let end = offset.checked_add(size).ok_or(())?;
        if end > self.len {
            return Err(());
        }
        let c = &mut *self.cache.borrow_mut();
        if let Some(b) = c.bufs.get(&(offset, size)) {
            return Ok(extend(b));
        }
        // The budget first: a size a hostile header names is never allocated past it.
        Bounded::spend(c, size)?;
        let mut bytes = vec![0; usize::try_from(size).map_err(|_| ())?].into_boxed_slice();
        self.file
            .read_exact_at(&mut bytes, offset)
            .map_err(|_| ())?;
        Ok(extend(c.bufs.entry((offset, size)).or_insert(bytes)))
    }

    fn read_bytes_at_until(
        self,
        range: std::ops::Range<u64>,
        delimiter: u8,
    ) -> Result<&'a [u8], ()> {
        if range.start > range.end || range.end > self.len {
            return Err(());
        }
        let c = &mut *self.cache.borrow_mut();
        // A window read before that holds the string whole (names of a table are read in
        // order: one read serves thousands of them).
        let hit = c
            .windows
            .range(..=(range.start, usize::MAX))
            .next_back()
            .and_then(|(&(at, _), w)| {
                let from = usize::try_from(range.start - at).ok()?;
                let rest = w.get(from..)?;
                let len = memchr::memchr(delimiter, rest)?;
                (range.start + len as u64 <= range.end).then(|| extend(&rest[..len]))
            });
        if let Some(s) = hit {
            return Ok(s);
        }
        let size = (range.end - range.start).min(WINDOW);
        Bounded::spend(c, size)?;
        let mut bytes = vec![0; size as usize];
        let n = self.file.read_at(&mut bytes, range.start).map_err(|_| ())?;
        bytes.truncate(n);
        let len = memchr::memchr(delimiter, &bytes).ok_or(())?;
        // An equal key holds as many bytes: `len` is within it.
        let w = c
            .windows
            .entry((range.start, n))
            .or_insert(bytes.into_boxed_slice());
        Ok(extend(&w[..len]))
    }
}

/// The file range (offset, size) of ELF section `name` (32- or 64-bit), reading only the
/// header, the section headers and their names.
pub fn section_range(data: &Bounded, name: &str) -> Option<(u64, u64)> {
    use object::{
        elf::{FileHeader32, FileHeader64},
        read::elf::{FileHeader, SectionHeader as _},
        Endianness, FileKind,
    };
    fn find<H: FileHeader<Endian = Endianness>>(data: &Bounded, name: &[u8]) -> Option<(u64, u64)> {
        let elf = H::parse(data).ok()?;
        let endian = elf.endian().ok()?;
        let sections = elf.sections(endian, data).ok()?;
        let (_, sh) = sections.section_by_name(endian, name)?;
        sh.file_range(endian)
    }
    match FileKind::parse(data).ok()? {
        FileKind::Elf32 => find::<FileHeader32<Endianness>>(data, name.as_bytes()),
        FileKind::Elf64 => find::<FileHeader64<Endianness>>(data, name.as_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ReadRef as _;

    fn path_bytes(p: &std::path::Path) -> &[u8] {
        use std::os::unix::ffi::OsStrExt as _;
        p.as_os_str().as_bytes()
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("fdaudit-untrusted-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_read_past_the_budget_fails_before_allocating() {
        let d = scratch("budget");
        let p = d.join("f");
        std::fs::write(&p, vec![7u8; 10_000]).unwrap();
        let o = open_path(path_bytes(&p), 1 << 20, None).unwrap();
        let b = Bounded::of(o, 4096);
        assert_eq!((&b).read_bytes_at(0, 4000).unwrap().len(), 4000);
        assert!(
            (&b).read_bytes_at(4000, 200).is_err(),
            "past the 4096-byte budget"
        );
        assert_eq!(
            (&b).read_bytes_at(0, 4000).unwrap().len(),
            4000,
            "kept: no cost"
        );
        assert!((&b).read_bytes_at(9_000, 2_000).is_err(), "past the end");
        assert_eq!(b.kept(), 4000);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn strings_are_served_from_one_window_within_their_table() {
        let d = scratch("strings");
        let p = d.join("f");
        std::fs::write(&p, b"abc\0def\0ghi").unwrap();
        let b = Bounded::of(open_path(path_bytes(&p), 1 << 20, None).unwrap(), 1 << 20);
        assert_eq!((&b).read_bytes_at_until(0..11, 0).unwrap(), b"abc");
        assert_eq!((&b).read_bytes_at_until(4..11, 0).unwrap(), b"def");
        assert_eq!(b.kept(), 11, "one window");
        assert!((&b).read_bytes_at_until(8..11, 0).is_err(), "no delimiter");
        assert!(
            (&b).read_bytes_at_until(4..6, 0).is_err(),
            "past the table's end"
        );
        assert_eq!((&b).read_bytes_at_until(4..11, 0).unwrap(), b"def");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_truncated_while_read_gives_an_error_not_a_signal() {
        let d = scratch("trunc");
        let p = d.join("f");
        std::fs::write(&p, vec![1u8; 1 << 16]).unwrap();
        let b = Bounded::of(open_path(path_bytes(&p), 1 << 20, None).unwrap(), 1 << 20);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(100)
            .unwrap();
        assert!((&b).read_bytes_at(1000, 1000).is_err());
        assert_eq!(b.read_at(0, 1 << 16).unwrap().len(), 100);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn symlinks_fifos_and_large_files_are_refused() {
        let d = scratch("refuse");
        let target = d.join("target");
        std::fs::write(&target, b"secret").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            open_path(path_bytes(&link), 1 << 20, None),
            Err(OpenError::NotRegular(_) | OpenError::Open { .. })
        ));
        let fifo = d.join("fifo");
        let c = CString::new(path_bytes(&fifo)).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No reader is ever opened on it: this returns at once.
        assert!(matches!(
            open_path(path_bytes(&fifo), 1 << 20, None),
            Err(OpenError::NotRegular(_))
        ));
        assert!(matches!(
            open_path(path_bytes(&target), 3, None),
            Err(OpenError::TooLarge { len: 6, .. })
        ));
        let other = FileId { dev: 1, ino: 1 };
        assert!(matches!(
            open_path(path_bytes(&target), 100, Some(other)),
            Err(OpenError::Replaced(_))
        ));
        let o = open_path(path_bytes(&target), 100, None).unwrap();
        assert!(open_path(path_bytes(&target), 100, Some(o.id)).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn sections_are_found_by_their_headers() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let o = open_exe(std::process::id(), u64::MAX).unwrap();
        let b = Bounded::of(o, 16 << 20);
        let (off, size) = section_range(&b, ".text").expect("a .text section");
        assert!(off > 0 && size > 0, "{}", exe.display());
        assert!(b.kept() < 1 << 20, "headers only: {}", b.kept());
        assert!(section_range(&b, ".no-such-section").is_none());
    }

    #[test]
    fn maps_identities_are_makedev_and_the_inode() {
        let id = FileId::from_maps(b"08:01", b"1234").unwrap();
        assert_eq!(id.major_minor(), (8, 1));
        assert_eq!(id.ino, 1234);
        assert!(FileId::from_maps(b"zz", b"1").is_none());
    }
}
