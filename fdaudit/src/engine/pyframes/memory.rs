//! Bounded reads of a traced CPython process's memory (/proc/PID/mem, pread: a page that
//! is not mapped fails the read, nothing faults or blocks): the code objects the kernel's
//! walk found, named by qualname, file name and line table (read and checked in
//! [`super::code`]). Every byte is the process's: sizes are bounded, nothing is trusted to
//! end.

use std::{fs::File, io, os::unix::fs::FileExt as _};

/// Longest location table read (bytes).
pub const MAX_LINETABLE: u64 = 64 << 10;

/// A process's memory, opened once.
pub struct Mem {
    file: File,
}

/// Why a frame could not be named.
pub fn gone_or(e: &io::Error, what: &str) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => {
            "the process was gone before its Python frames were read".into()
        }
        _ => format!("{what}: {e}"),
    }
}

impl Mem {
    pub fn open(pid: u32) -> io::Result<Mem> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(format!("/proc/{pid}/mem"))?;
        Ok(Mem { file })
    }

    /// `len` bytes at `addr`, all of them or an error.
    pub fn read(&self, addr: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let at = addr
                .checked_add(done as u64)
                .filter(|a| *a < 1 << 63)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
            match self.file.read_at(&mut buf[done..], at) {
                Ok(0) => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(buf)
    }

    pub fn u32_at(&self, addr: u64) -> io::Result<u32> {
        let b = self.read(addr, 4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}
