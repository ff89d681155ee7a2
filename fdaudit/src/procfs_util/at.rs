//! Thin syscall wrappers for reading procfs fast (the scanner): everything is relative to a directory fd so the
//! kernel never walks `/proc/PID/...` from the root again, and nothing allocates per fd.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A NUL-terminated decimal number in a stack buffer: the name of `/proc/PID` or `fd/N`.
pub struct NumName {
    buf: [u8; 24],
    start: usize,
}

impl NumName {
    pub fn new(mut n: u64) -> NumName {
        let mut buf = [0u8; 24];
        let mut i = 23; // buf[23] stays NUL
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        NumName { buf, start: i }
    }

    pub fn as_cstr(&self) -> &CStr {
        // The slice holds digits and exactly one NUL, at its end.
        CStr::from_bytes_with_nul(&self.buf[self.start..]).expect("digits and one NUL")
    }
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `openat(dir, name, flags | O_CLOEXEC)`.
pub fn openat(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: name is NUL-terminated; the returned fd is owned by nobody else.
    let fd = cvt(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: fd was just opened by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory for lookups only.
pub fn open_dir_path(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_PATH | libc::O_DIRECTORY)
}

/// The most `read_file_at` reads of one file: a procfs file the scanner reads (`status`,
/// `limits`, `fdinfo/N`, `task/N/children`) is a few KiB; anything larger is not what the
/// kernel writes there (a hostile fixture tree), and is refused rather than held in memory.
pub const MAX_FILE: usize = 1 << 20;

/// Opens `name` for reading without ever blocking: `O_NONBLOCK` (a FIFO in its place opens
/// and reads at once), `O_NOFOLLOW` and `O_NOCTTY`, then `fstat` of the opened file: only a
/// regular file (which every procfs entry the scanner reads is) is kept, so a FIFO, a
/// device or a socket put in place of a procfs file is refused (`EINVAL`) before any read.
pub fn open_file_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let f = openat(
        dir,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY,
    )?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is written by the kernel on success; f is an open fd.
    cvt(unsafe { libc::fstat(f.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: success above.
    if unsafe { st.assume_init() }.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(f)
}

/// One `read` into `buf`, retried on EINTR. `EAGAIN` (a file that would block) is an error.
fn read_some(f: RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for buf.len() bytes; the kernel writes at most that many.
        let n = unsafe { libc::read(f, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads a whole (small, procfs) file into `buf`, replacing its contents: opened by
/// [`open_file_at`], at most [`MAX_FILE`] bytes (a longer file is an `EFBIG` error).
pub fn read_file_at(dir: RawFd, name: &CStr, buf: &mut Vec<u8>) -> io::Result<()> {
    let f = open_file_at(dir, name)?;
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity());
        }
        // One byte more than the cap tells a file of exactly MAX_FILE bytes from a longer one.
        let room = (MAX_FILE + 1 - buf.len()).min(buf.capacity() - buf.len());
        let spare = &mut buf.spare_capacity_mut()[..room];
        let n = read_some(f.as_raw_fd(), spare)?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the kernel wrote n bytes into the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        if buf.len() > MAX_FILE {
            buf.clear();
            buf.shrink_to(64 * 1024);
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
    }
}

/// Reads the start of a file with one `read` into `buf`; returns how many bytes came.
/// Enough for fdinfo, whose first lines (pos, flags, mnt_id, ino) are all we use. Opened by
/// [`open_file_at`].
pub fn read_head_at(dir: RawFd, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let f = open_file_at(dir, name)?;
    read_head(f, buf)
}

/// [`read_head_at`] in a directory [`is_procfs`] said is procfs: the per-file fstat is left
/// out (the scanner's hot path, once per fd). The open is still `O_NONBLOCK | O_NOFOLLOW`
/// and the read one `read` into `buf`. Only someone who may mount in fdaudit's own mount
/// namespace (root) could put anything else there.
pub fn read_head_at_procfs(dir: RawFd, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let f = openat(
        dir,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY,
    )?;
    read_head(f, buf)
}

/// Whether `fd` is on a procfs (statfs magic).
pub fn is_procfs(fd: RawFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: st is written by the kernel on success.
    if unsafe { libc::fstatfs(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: success above.
    unsafe { st.assume_init() }.f_type == libc::PROC_SUPER_MAGIC
}

fn read_head(f: OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: u8 and MaybeUninit<u8> have the same layout; read_some only writes.
    let spare = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    read_some(f.as_raw_fd(), spare)
}

/// A file opened by [`open_file_at`], read in pieces (`net/*` tables, which are streamed:
/// a real one can be many MiB, so they are not held whole). Reading stops with an `EFBIG`
/// error after `limit` bytes.
pub struct Stream {
    f: OwnedFd,
    left: u64,
}

impl Stream {
    pub fn open(dir: RawFd, name: &CStr, limit: u64) -> io::Result<Stream> {
        Ok(Stream {
            f: open_file_at(dir, name)?,
            left: limit,
        })
    }
}

impl io::Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let len = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        // SAFETY: u8 and MaybeUninit<u8> have the same layout; read_some only writes.
        let spare =
            unsafe { &mut *(&mut buf[..len] as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
        let n = read_some(self.f.as_raw_fd(), spare)?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Calls `f` with each line of `r` (numbered from 0, without its `\n`), through the reused
/// buffer `line`. A line longer than `max_line` is skipped whole (and still numbered), so
/// memory stays bounded whatever the input.
pub fn for_each_line(
    r: &mut impl io::BufRead,
    line: &mut Vec<u8>,
    max_line: usize,
    mut f: impl FnMut((usize, &[u8])),
) -> io::Result<()> {
    let mut n = 0;
    let mut too_long = false;
    line.clear();
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if !line.is_empty() && !too_long {
                f((n, line));
            }
            return Ok(());
        }
        let (part, end) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            if line.len() + part.len() > max_line {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(part);
            }
        }
        let used = end.unwrap_or(chunk.len());
        r.consume(used);
        if end.is_some() {
            if !too_long {
                f((n, line));
            }
            n += 1;
            too_long = false;
            line.clear();
        }
    }
}

/// `readlinkat(dir, name)` into `buf`; returns the target's length (truncated to the buffer).
pub fn readlinkat(dir: RawFd, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: name is NUL-terminated, buf valid for its length.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `statx` of `name` in `dir` (an fd link: the file behind it) for the fields of `mask`,
/// from cached attributes only (`AT_STATX_DONT_SYNC`: a FUSE or NFS server is not asked);
/// `None` when it failed.
pub fn statx_cached(dir: RawFd, name: &CStr, mask: u32) -> Option<libc::statx> {
    // SAFETY: st is plain data, filled by statx.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: name is NUL-terminated; st is valid for writing.
    let r = unsafe { libc::statx(dir, name.as_ptr(), libc::AT_STATX_DONT_SYNC, mask, &mut st) };
    (r == 0).then_some(st)
}

/// Lists the numeric entries of a directory (pids in `/proc`, fds in `fd/`) with
/// `getdents64` into `buf`; appends them to `out`, unsorted.
pub fn list_numeric(dir: RawFd, buf: &mut [u8], out: &mut Vec<u32>) -> io::Result<()> {
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes into buf.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                buf.as_mut_ptr(),
                buf.len() as libc::c_ulong,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(());
        }
        let data = &buf[..n as usize];
        let mut off = 0;
        // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        while off + 19 <= data.len() {
            let reclen = u16::from_ne_bytes([data[off + 16], data[off + 17]]) as usize;
            if reclen == 0 || off + reclen > data.len() {
                break;
            }
            let name = &data[off + 19..off + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(v) = parse_u32(name) {
                out.push(v);
            }
            off += reclen;
        }
    }
}

/// A plain decimal number (no sign, no leading '+', at most u32).
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        v = v * 10 + u64::from(b - b'0');
    }
    u32::try_from(v).ok()
}

/// The fd an `OwnedFd` wraps, for the relative calls above.
pub fn raw(fd: &OwnedFd) -> RawFd {
    fd.as_raw_fd()
}

/// `kcmp(pid1, pid2, kind, a, b)`: Ok(true) when the two tasks' resources of `kind` are the
/// same.
pub fn kcmp(pid1: u32, pid2: u32, kind: libc::c_long, a: u64, b: u64) -> io::Result<bool> {
    // SAFETY: kcmp only reads its integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid1 as libc::pid_t,
            pid2 as libc::pid_t,
            kind,
            a as libc::c_ulong,
            b as libc::c_ulong,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r == 0)
    }
}

/// `kcmp(pid1, pid2, KCMP_FILE, fd1, fd2)`: Ok(true) when both fds are the same open file
/// description.
pub fn kcmp_file(pid1: u32, pid2: u32, fd1: u32, fd2: u32) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    kcmp(pid1, pid2, KCMP_FILE, fd1.into(), fd2.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_names() {
        assert_eq!(NumName::new(0).as_cstr().to_bytes(), b"0");
        assert_eq!(NumName::new(1234).as_cstr().to_bytes(), b"1234");
        assert_eq!(
            NumName::new(u64::MAX).as_cstr().to_bytes(),
            b"18446744073709551615"
        );
    }

    #[test]
    fn lines_through_a_small_buffer() {
        let text = b"head\nshort\nthis one is far too long\n\nlast";
        // A 4-byte buffer: every line spans several fills.
        let mut r = io::BufReader::with_capacity(4, &text[..]);
        let mut got = Vec::new();
        let mut line = Vec::new();
        for_each_line(&mut r, &mut line, 8, |(n, l)| got.push((n, l.to_vec()))).unwrap();
        assert_eq!(
            got,
            vec![
                (0, b"head".to_vec()),
                (1, b"short".to_vec()),
                (3, b"".to_vec()),
                (4, b"last".to_vec())
            ]
        );
        assert!(line.capacity() <= 64, "the long line was not kept");
    }

    #[test]
    fn reads_only_regular_files_up_to_the_cap() {
        let dir = std::env::temp_dir().join(format!("fdaudit-at.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("small"), b"abc").unwrap();
        std::fs::File::create(dir.join("big"))
            .unwrap()
            .set_len(MAX_FILE as u64 + 1)
            .unwrap();
        std::fs::File::create(dir.join("exact"))
            .unwrap()
            .set_len(MAX_FILE as u64)
            .unwrap();
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let d = open_dir_path(libc::AT_FDCWD, &c).unwrap();
        let fifo = std::ffi::CString::new(dir.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: fifo is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let mut buf = Vec::new();
        read_file_at(raw(&d), c"small", &mut buf).unwrap();
        assert_eq!(buf, b"abc");
        read_file_at(raw(&d), c"exact", &mut buf).unwrap();
        assert_eq!(buf.len(), MAX_FILE);
        let e = read_file_at(raw(&d), c"big", &mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
        let e = read_file_at(raw(&d), c"fifo", &mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = read_head_at(raw(&d), c"fifo", &mut [0; 16]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_numbers_strictly() {
        assert_eq!(parse_u32(b"42"), Some(42));
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"self"), None);
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b"99999999999"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
    }
}
