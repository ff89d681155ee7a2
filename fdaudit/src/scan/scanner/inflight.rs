//! Fds in flight: files a process can pass to a child that are in no fd table, so the fd
//! walk never meets them. A unix socket's receive queue holds the fds sent to it with
//! SCM_RIGHTS until someone receives them (fdinfo gives their count only: `scm_fds:`,
//! read by `parse::parse_fdinfo`); an io_uring instance holds its registered files,
//! which its fdinfo lists (`scan::uring`). Here the second are read and resolved.

use super::table::ProcScan;
use super::*;
use crate::scan::findings::{Registered, RegisteredFile};
use crate::scan::uring;

/// How many times a ring's fdinfo is read when it lists no files because the ring was
/// busy (the kernel only tries its lock).
const RING_READS: u32 = 3;

impl Scanner<'_> {
    /// The files registered in the io_uring instance behind fd `name`, each resolved as far
    /// as its text allows (a socket in the tables of the process's namespace).
    pub(super) fn ring_files(
        &self,
        name: &NumName,
        p: &mut ProcScan,
        s: &mut Scratch,
    ) -> Registered {
        let mut parsed = uring::RingFiles::default();
        for attempt in 0..RING_READS {
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // At most at::MAX_FILE bytes: a longer list is not read (EFBIG), and so not
            // complete.
            if at::read_file_at(raw(&p.dirs.fdinfo_dir), name.as_cstr(), &mut s.file).is_err() {
                s.totals.unreadable_files += 1;
                return Registered::default();
            }
            parsed = uring::parse_ring_files(&s.file);
            if parsed.slots.is_some() {
                break;
            }
        }
        if !parsed.complete {
            return Registered::default();
        }
        let files = parsed
            .files
            .into_iter()
            .map(|(slot, text)| self.registered_file(slot, text, p))
            .collect();
        Registered {
            files,
            complete: true,
        }
    }

    /// One registered file from its text: the kind its text names (none for an older
    /// kernel's bare last component), and for a socket what its tables say.
    fn registered_file(&self, slot: u32, text: Vec<u8>, p: &mut ProcScan) -> RegisteredFile {
        // Where the kernel prints only a file's last component, "socket:[N]" could be any
        // file's name: no text is taken as naming a kind.
        let trusted = !self.live || *self.ring_paths.get_or_init(kernel_prints_ring_paths);
        let named = trusted
            && (text.starts_with(b"/")
                || text.starts_with(b"anon_inode:")
                || parse::bracket_inode(&text).is_some());
        let kind = named.then(|| FdKind::from_link(&text, None));
        let mut r = RegisteredFile {
            slot,
            kind,
            target: String::from_utf8_lossy(&text).into_owned(),
            raw_target: text,
            proto: None,
            listening: None,
            unresolved: false,
        };
        if kind == Some(FdKind::Socket) {
            let tables = self.own_tables(p);
            match parse::bracket_inode(&r.raw_target).and_then(|i| tables.lookup(i, None)) {
                Some(si) => {
                    r.proto = Some(si.proto.to_owned());
                    if si.listening {
                        let addr = si.local.as_ref().map(|a| a.bytes()).unwrap_or_default();
                        r.listening = Some(String::from_utf8_lossy(&addr).into_owned());
                    }
                }
                // Not in the tables of the process's namespace: another one's, where it
                // may listen.
                None => r.unresolved = true,
            }
        }
        r
    }
}

/// Whether this kernel's ring fdinfo names a registered file by its path (6.x: `pipe:[N]`
/// for a pipe) rather than by its last component (5.x: empty for a pipe): a ring of our
/// own holding a pipe, read back. `false` when that cannot be checked.
fn kernel_prints_ring_paths() -> bool {
    let mut pipe = [0; 2];
    // SAFETY: pipe is valid for two ints.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // SAFETY: both fds were just created and are owned here only.
    let _pipe = unsafe { [OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])] };
    // struct io_uring_params: 120 bytes, zeroed for defaults.
    let mut params = [0u32; 30];
    // SAFETY: io_uring_setup(2) with a valid, zeroed io_uring_params.
    let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
    let Ok(ring) = i32::try_from(ring) else {
        return false;
    };
    if ring < 0 {
        return false;
    }
    // SAFETY: just created (with close-on-exec, always), owned here only.
    let ring = unsafe { OwnedFd::from_raw_fd(ring) };
    const IORING_REGISTER_FILES: libc::c_long = 2;
    // SAFETY: one valid fd in the array passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            raw(&ring),
            IORING_REGISTER_FILES,
            pipe.as_ptr(),
            1,
        )
    };
    if rc != 0 {
        return false;
    }
    let name = CString::new(format!("/proc/self/fdinfo/{}", raw(&ring))).expect("no NUL");
    let mut buf = Vec::new();
    match at::read_file_at(libc::AT_FDCWD, &name, &mut buf) {
        Ok(()) => uring::parse_ring_files(&buf)
            .files
            .first()
            .is_some_and(|(_, t)| t.starts_with(b"pipe:[")),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_kernel_prints_ring_paths() {
        // 6.18 prints paths (seen by experiment); 5.10 prints last components. Where
        // io_uring is off, or on kernels not checked, the answer may be false: texts are
        // then not trusted.
        let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .is_ok_and(|v| v.trim() != "0");
        // "Linux 6.18.44-... x86_64"
        let uname = crate::sys::uname().unwrap_or_default();
        let release = uname.split(' ').nth(1).unwrap_or_default();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let checked = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 18);
        let got = super::kernel_prints_ring_paths();
        if checked && !disabled {
            assert!(got, "{release} names registered files by path");
        }
        assert!(
            checked || !release.starts_with("6.18"),
            "{uname}: release parsed"
        );
    }
}
