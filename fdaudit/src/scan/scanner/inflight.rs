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
        let named = text.starts_with(b"/")
            || text.starts_with(b"anon_inode:")
            || parse::bracket_inode(&text).is_some();
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
