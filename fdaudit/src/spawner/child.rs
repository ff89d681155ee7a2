//! The code that runs in the child between fork and exec. Async-signal-safe: raw syscalls
//! on memory prepared before the fork, no allocation, no panics.

use libc::{c_char, c_int, c_uint};

use super::CloseMethod;

/// Size of the getdents64 buffer `procfd-walk` uses (several calls when fds are many).
pub(super) const DIRENT_BUF: usize = 32 * 1024;

/// Raw pointers to what the child may use; all of it allocated before the fork.
pub(super) struct ChildContext {
    pub(super) strategy: CloseMethod,
    pub(super) nofile: c_int,
    pub(super) path: *const c_char,
    pub(super) argv: *const *const c_char,
    pub(super) envp: *const *const c_char,
    pub(super) pollfds: *mut libc::pollfd,
    pub(super) npollfds: usize,
    pub(super) dirent_buf: *mut u8,
    pub(super) dirent_len: usize,
    pub(super) fd_list: *mut c_int,
    pub(super) fd_cap: usize,
}

extern "C" {
    /// glibc 2.34+: closes every fd ≥ `lowfd` (close_range, else a /proc/self/fd walk).
    fn closefrom(lowfd: c_int);
}

/// Runs in the child between fork and exec: applies the strategy, then execve.
/// Async-signal-safe: raw syscalls only, no allocation, no panics.
///
/// # Safety
/// Must only be called in a freshly forked child, with `c` pointing into memory that
/// was allocated before the fork.
pub(super) unsafe fn child_exec(c: &ChildContext) -> ! {
    // SAFETY (whole body): raw syscalls on pre-allocated buffers of the stated sizes.
    unsafe {
        match c.strategy {
            CloseMethod::None | CloseMethod::PosixSpawn | CloseMethod::PosixSpawnClosefrom => {}
            CloseMethod::CloseLoop => {
                let mut fd = 3;
                while fd < c.nofile {
                    libc::close(fd);
                    fd += 1;
                }
            }
            CloseMethod::FcntlLoop => {
                let mut fd = 3;
                while fd < c.nofile {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                    fd += 1;
                }
            }
            CloseMethod::ProcfdWalk => procfd_walk(c),
            CloseMethod::PollScan => poll_scan(c),
            CloseMethod::CloseRange => {
                libc::syscall(libc::SYS_close_range, 3 as c_uint, c_uint::MAX, 0 as c_uint);
            }
            CloseMethod::CloseRangeCloexec => {
                libc::syscall(
                    libc::SYS_close_range,
                    3 as c_uint,
                    c_uint::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
            }
            CloseMethod::Closefrom => closefrom(3),
        }
        libc::execve(c.path, c.argv, c.envp);
        libc::_exit(127)
    }
}

/// `procfd-walk`: list /proc/self/fd with getdents64 into the pre-allocated array, then
/// close what was listed.
unsafe fn procfd_walk(c: &ChildContext) {
    // SAFETY (whole body): raw syscalls; every write stays inside the buffers' lengths.
    unsafe {
        let dir = libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut count = 0usize;
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, c.dirent_buf, c.dirent_len);
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off < n as usize {
                // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
                let rec = c.dirent_buf.add(off);
                let reclen = u16::from_ne_bytes([*rec.add(16), *rec.add(17)]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = rec.add(19);
                if let Some(fd) = parse_fd(name, reclen - 19) {
                    if fd >= 3 && fd != dir && count < c.fd_cap {
                        *c.fd_list.add(count) = fd;
                        count += 1;
                    }
                }
                off += reclen;
            }
        }
        libc::close(dir);
        for i in 0..count {
            libc::close(*c.fd_list.add(i));
        }
    }
}

/// Parses a NUL-terminated decimal name of at most `max` bytes; `None` for "." and "..".
///
/// # Safety
/// `name` must point to at least `max` readable bytes.
unsafe fn parse_fd(name: *const u8, max: usize) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut digits = 0;
    for i in 0..max {
        // SAFETY: i < max, guaranteed readable by the caller.
        let b = unsafe { *name.add(i) };
        if b == 0 {
            break;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(c_int::from(b - b'0'))?;
        digits += 1;
    }
    (digits > 0).then_some(v)
}

/// `poll-scan`: one poll() over fds 0..L with the pre-built array, then close each fd ≥ 3
/// that is not POLLNVAL. Like D's std.process, falls back to a close loop if poll fails.
unsafe fn poll_scan(c: &ChildContext) {
    // SAFETY (whole body): the array has `npollfds` entries, built before the fork.
    unsafe {
        let r = libc::poll(c.pollfds, c.npollfds as libc::nfds_t, 0);
        if r < 0 {
            let mut fd = 3;
            while fd < c.nofile {
                libc::close(fd);
                fd += 1;
            }
            return;
        }
        for i in 3..c.npollfds {
            let p = &*c.pollfds.add(i);
            if p.revents & libc::POLLNVAL == 0 {
                libc::close(p.fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dirent_names() {
        let p = |s: &[u8]| unsafe { parse_fd(s.as_ptr(), s.len()) };
        assert_eq!(p(b"17\0\0\0"), Some(17));
        assert_eq!(p(b"0\0"), Some(0));
        assert_eq!(p(b".\0"), None);
        assert_eq!(p(b"..\0"), None);
        assert_eq!(p(b"\0"), None);
        assert_eq!(p(b"12"), Some(12), "no NUL within max");
        assert_eq!(p(b"99999999999\0"), None, "overflow");
    }
}
