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

/// Reads a whole (small, procfs) file into `buf`, replacing its contents.
pub fn read_file_at(dir: RawFd, name: &CStr, buf: &mut Vec<u8>) -> io::Result<()> {
    let f = openat(dir, name, libc::O_RDONLY)?;
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity());
        }
        let spare = buf.spare_capacity_mut();
        // SAFETY: reading into the vector's spare capacity, then extending its length by
        // what the kernel wrote.
        let n = unsafe { libc::read(f.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        // SAFETY: see above.
        unsafe { buf.set_len(buf.len() + n as usize) };
    }
}

/// Reads the start of a file with one `read` into `buf`; returns how many bytes came.
/// Enough for fdinfo, whose first lines (pos, flags, mnt_id, ino) are all we use.
pub fn read_head_at(dir: RawFd, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let f = openat(dir, name, libc::O_RDONLY)?;
    loop {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe { libc::read(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
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

/// `fstatat(dir, name)` following the link: the mode of the file an fd link refers to.
pub fn stat_mode_at(dir: RawFd, name: &CStr) -> io::Result<u32> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is written by the kernel on success.
    cvt(unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), 0) })?;
    // SAFETY: success above.
    Ok(unsafe { st.assume_init() }.st_mode)
}

/// `fstatat(dir, name)` following the link: the inode number of the file an fd link refers
/// to (fdinfo has `ino:` only from 5.14 on).
pub fn stat_ino_at(dir: RawFd, name: &CStr) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is written by the kernel on success.
    cvt(unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), 0) })?;
    // SAFETY: success above.
    Ok(unsafe { st.assume_init() }.st_ino)
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

/// `kcmp(pid1, pid2, KCMP_FILE, fd1, fd2)`: Ok(true) when both fds are the same open file
/// description.
pub fn kcmp_file(pid1: u32, pid2: u32, fd1: u32, fd2: u32) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: kcmp only reads its integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid1 as libc::pid_t,
            pid2 as libc::pid_t,
            KCMP_FILE,
            fd1 as libc::c_ulong,
            fd2 as libc::c_ulong,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r == 0)
    }
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
    fn parses_numbers_strictly() {
        assert_eq!(parse_u32(b"42"), Some(42));
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"self"), None);
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b"99999999999"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
    }
}
