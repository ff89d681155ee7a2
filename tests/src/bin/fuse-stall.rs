//! A FUSE file system that stops answering GETATTR: for the test that `fdaudit scan` never
//! stats through an fd link (tests/tests/scan_hostile.rs). Needs root (mount(2)).
//!
//! `fuse-stall DIR` mounts at DIR a file system holding one file, `f`. A child process (the
//! holder) opens it without close-on-exec and waits for EOF on stdin; the server then
//! stops answering GETATTR and STATX (every other request is still answered, so closing the
//! file and unmounting work) and prints `pid=HOLDER fd=F conn=N` (N: the connection's
//! number under /sys/fs/fuse/connections). Attributes are never cached (attr_valid 0), so
//! any stat of the file after that blocks until the server dies.
//!
//! Server and holder are two processes on purpose: a process that is both would, when
//! killed, flush the FUSE file in its exit before its /dev/fuse fd is released, and wait
//! for itself forever (FLUSH is a request that cannot be interrupted). Killing the server
//! aborts the connection (every waiting request fails); the holder dies with it
//! (PR_SET_PDEATHSIG).
//!
//! The kernel's protocol is in include/uapi/linux/fuse.h; the layouts below are from 7.31.

use std::io::{BufRead as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use fdaudit_tests::check;

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const OPENDIR: u32 = 27;
const RELEASEDIR: u32 = 29;
const INTERRUPT: u32 = 36;
const DESTROY: u32 = 38;
const BATCH_FORGET: u32 = 42;
const STATX: u32 = 52;

const ROOT: u64 = 1;
const FILE: u64 = 2;

static STALL: AtomicBool = AtomicBool::new(false);

/// struct fuse_attr (88 bytes).
fn attr(nodeid: u64) -> Vec<u8> {
    let (mode, size, nlink) = if nodeid == ROOT {
        (libc::S_IFDIR | 0o755, 0u64, 2u32)
    } else {
        (libc::S_IFREG | 0o644, 5, 1)
    };
    let mut a = Vec::with_capacity(88);
    a.extend(nodeid.to_ne_bytes()); // ino
    a.extend(size.to_ne_bytes()); // size
    a.extend(0u64.to_ne_bytes()); // blocks
    for _ in 0..3 {
        a.extend(0u64.to_ne_bytes()); // atime, mtime, ctime
    }
    for _ in 0..3 {
        a.extend(0u32.to_ne_bytes()); // *timensec
    }
    a.extend(mode.to_ne_bytes());
    a.extend(nlink.to_ne_bytes());
    a.extend(0u32.to_ne_bytes()); // uid
    a.extend(0u32.to_ne_bytes()); // gid
    a.extend(0u32.to_ne_bytes()); // rdev
    a.extend(4096u32.to_ne_bytes()); // blksize
    a.extend(0u32.to_ne_bytes()); // flags
    assert_eq!(a.len(), 88);
    a
}

fn reply(dev: &OwnedFd, unique: u64, error: i32, payload: &[u8]) {
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend((16 + payload.len() as u32).to_ne_bytes());
    out.extend(error.to_ne_bytes());
    out.extend(unique.to_ne_bytes());
    out.extend_from_slice(payload);
    // SAFETY: out is valid for its length. A failed reply (request interrupted) is ignored.
    unsafe { libc::write(dev.as_raw_fd(), out.as_ptr().cast(), out.len()) };
}

fn serve(dev: OwnedFd) {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::read(dev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) | Some(libc::ENOENT) | Some(libc::EAGAIN) => continue,
                _ => return, // ENODEV: unmounted or aborted
            }
        }
        let req = &buf[..n as usize];
        if req.len() < 40 {
            continue;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(req[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(req[o..o + 8].try_into().expect("8 bytes"));
        let (opcode, unique, nodeid) = (u32_at(4), u64_at(8), u64_at(16));
        let body = &req[40..];
        match opcode {
            INIT => {
                // struct fuse_init_out (64 bytes): major, minor, max_readahead, flags,
                // max_background, congestion_threshold, max_write, time_gran, max_pages,
                // map_alignment, flags2, max_stack_depth, unused[6].
                let mut o = Vec::with_capacity(64);
                o.extend(7u32.to_ne_bytes());
                o.extend(31u32.to_ne_bytes());
                o.extend(0u32.to_ne_bytes());
                o.extend(0u32.to_ne_bytes());
                o.extend(16u16.to_ne_bytes());
                o.extend(12u16.to_ne_bytes());
                o.extend(65536u32.to_ne_bytes());
                o.extend(1u32.to_ne_bytes());
                o.extend(16u16.to_ne_bytes());
                o.extend(0u16.to_ne_bytes());
                o.resize(64, 0);
                reply(&dev, unique, 0, &o);
            }
            LOOKUP => {
                let name = body.split(|&b| b == 0).next().unwrap_or_default();
                if nodeid == ROOT && name == b"f" {
                    // struct fuse_entry_out: nodeid, generation, entry_valid, attr_valid,
                    // entry_valid_nsec, attr_valid_nsec, attr. Nothing is cached.
                    let mut o = Vec::with_capacity(128);
                    o.extend(FILE.to_ne_bytes());
                    o.extend([0u8; 8 * 3 + 4 * 2]);
                    o.extend(attr(FILE));
                    reply(&dev, unique, 0, &o);
                } else {
                    reply(&dev, unique, -libc::ENOENT, &[]);
                }
            }
            GETATTR | STATX if STALL.load(Ordering::SeqCst) => {} // never answered
            GETATTR => {
                // struct fuse_attr_out: attr_valid, attr_valid_nsec, dummy, attr.
                let mut o = vec![0u8; 16];
                o.extend(attr(nodeid));
                reply(&dev, unique, 0, &o);
            }
            OPEN | OPENDIR => reply(&dev, unique, 0, &[0u8; 16]), // struct fuse_open_out
            RELEASE | RELEASEDIR | FLUSH => reply(&dev, unique, 0, &[]),
            FORGET | BATCH_FORGET | INTERRUPT => {} // no reply expected
            DESTROY => {
                reply(&dev, unique, 0, &[]);
                return;
            }
            _ => reply(&dev, unique, -libc::ENOSYS, &[]),
        }
    }
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuse-stall DIR");
    let cdir = std::ffi::CString::new(dir.clone()).expect("no NUL in DIR");
    // SAFETY: plain open of a device node.
    let dev = check(
        unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) },
        "open /dev/fuse",
    );
    let opts = std::ffi::CString::new(format!(
        "fd={dev},rootmode=40000,user_id=0,group_id=0,allow_other"
    ))
    .expect("no NUL");
    // SAFETY: all strings NUL-terminated.
    check(
        unsafe {
            libc::mount(
                c"fdaudit-stall".as_ptr(),
                cdir.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            )
        },
        "mount the FUSE file system",
    );
    // The connection's number is the mount's minor device number (from mountinfo: a stat
    // of DIR would wait for the server, which is not serving yet).
    let conn = std::fs::read_to_string("/proc/self/mountinfo")
        .expect("read mountinfo")
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f.len() > 4 && f[4] == dir)
        .filter_map(|f| f[2].split_once(':').map(|(_, m)| m.to_owned()))
        .next_back()
        .expect("the new mount in mountinfo");
    let mut p = [0; 2];
    // SAFETY: p is valid for two ints.
    check(unsafe { libc::pipe(p.as_mut_ptr()) }, "pipe");
    let path = std::ffi::CString::new(format!("{dir}/f")).expect("no NUL");
    // SAFETY: single-threaded so far; the child makes only plain calls before it waits.
    let holder = check(unsafe { libc::fork() }, "fork");
    if holder == 0 {
        // SAFETY: plain calls on our own fds and path.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            libc::close(dev);
            libc::close(p[0]);
            // No O_CLOEXEC: an inheritable fd, as in the issue.
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            let msg = fd.to_ne_bytes();
            libc::write(p[1], msg.as_ptr().cast(), msg.len());
            libc::close(p[1]);
        }
        let mut line = String::new();
        while std::io::stdin()
            .lock()
            .read_line(&mut line)
            .is_ok_and(|n| n > 0)
        {
            line.clear();
        }
        // SAFETY: ending the child without running the parent's atexit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closing the write end the child has.
    unsafe { libc::close(p[1]) };
    let rd = p[0];
    std::thread::spawn(move || {
        let mut msg = [0u8; 4];
        // SAFETY: msg is valid for 4 bytes.
        let n = unsafe { libc::read(rd, msg.as_mut_ptr().cast(), msg.len()) };
        let fd = i32::from_ne_bytes(msg);
        if n != 4 || fd < 0 {
            eprintln!("fuse-stall: the holder could not open {}/f", dir);
            std::process::exit(1);
        }
        STALL.store(true, Ordering::SeqCst);
        println!("pid={holder} fd={fd} conn={conn}");
        std::io::stdout().flush().expect("flush stdout");
    });
    // SAFETY: dev was opened by us and is owned by nobody else in this process.
    serve(unsafe { OwnedFd::from_raw_fd(dev) });
}
