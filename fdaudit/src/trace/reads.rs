//! `trace --reads`: byte-at-a-time read storms (the FreeBSD rc.subr `while read` disease).

use std::collections::HashMap;

use serde::Serialize;

use crate::engine::fdtarget::join_path;
use crate::engine::spawn::{ReadCount, Target};
use crate::{
    fdkind::{self, FdKind},
    lossless_field,
    output::text::Lossless,
};

lossless_field!(CommField, "comm");

/// Counted, not averaged, so large reads earlier on the same file do not hide a
/// byte-at-a-time loop after them.
pub use fdaudit_common::STORM_MIN_SMALL_READS;
/// The block size a buffered reader would use.
pub const BLOCK: u64 = 4096;

/// A flagged (process, open file).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReadStorm {
    pub pid: u32,
    #[serde(flatten)]
    pub comm: Lossless<Vec<u8>, CommField>,
    /// The fd the file was first read through.
    pub fd: u32,
    #[serde(flatten)]
    pub target: Target,
    /// Inode number of the file read.
    pub ino: u64,
    pub calls: u64,
    /// Calls that returned 1 or 2 bytes: what flags the storm.
    pub small_reads: u64,
    pub bytes: u64,
    /// `bytes / calls`, to 3 decimals.
    pub bytes_per_call: f64,
    /// read() calls a reader with a 4 KiB buffer would have made for the same bytes.
    pub block_calls: u64,
}

/// Whether a file read with this many small (1-2 byte) reads is a storm.
pub fn is_storm(small_reads: u64) -> bool {
    small_reads >= STORM_MIN_SMALL_READS
}

/// Names the file read: a pipe or socket by inode, else the path the kernel walked while
/// the file was open, else what `resolve` finds (the live /proc link), else the kernel's cut
/// path ("…/b/c"), else the inode number.
pub fn target_of(c: &ReadCount, resolve: impl Fn(u32, u32, u64) -> Option<Vec<u8>>) -> Vec<u8> {
    let (k, s) = (&c.key, &c.stat);
    match fdkind::from_kernel(s.mode, s.magic, "") {
        FdKind::Pipe => format!("pipe:[{}]", s.ino).into_bytes(),
        FdKind::Socket => format!("socket:[{}]", s.ino).into_bytes(),
        _ => match c.kernel_path.as_deref() {
            Some(p) if p.complete != 0 => join_path(p),
            p => resolve(k.pid, s.fd, s.ino)
                .or_else(|| p.map(join_path))
                .unwrap_or_else(|| format!("inode {}", s.ino).into_bytes()),
        },
    }
}

/// Targets of storms resolved while their process still ran. By the end of a trace most
/// processes that read a byte at a time (a shell's `while read`) are gone and procfs can no
/// longer say what they read, so `trace` looks each one up as soon as it is flagged.
#[derive(Debug, Default)]
pub struct LiveTargets {
    /// (pid, fd, inode) → path, as the kernel gave it.
    known: HashMap<(u32, u32, u64), Vec<u8>>,
}

impl LiveTargets {
    /// Resolves, with `resolve` (the live /proc link), the storms among `counts` not
    /// resolved yet. Pipes and sockets are named by inode and need no look-up.
    pub fn update(
        &mut self,
        counts: &[ReadCount],
        resolve: impl Fn(u32, u32, u64) -> Option<Vec<u8>>,
    ) {
        for c in counts {
            let (k, st) = (&c.key, &c.stat);
            if !is_storm(st.tiny_calls)
                || c.kernel_path.as_ref().is_some_and(|p| p.complete != 0)
                || matches!(
                    fdkind::from_kernel(st.mode, st.magic, ""),
                    FdKind::Pipe | FdKind::Socket
                )
            {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(e) =
                self.known.entry((k.pid, st.fd, st.ino))
            {
                if let Some(t) = resolve(k.pid, st.fd, st.ino) {
                    e.insert(t);
                }
            }
        }
    }

    /// The target seen while the process ran, else what `live` finds now.
    pub fn resolve(
        &self,
        pid: u32,
        fd: u32,
        ino: u64,
        live: impl Fn(u32, u32, u64) -> Option<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        self.known
            .get(&(pid, fd, ino))
            .cloned()
            .or_else(|| live(pid, fd, ino))
    }
}

/// Storms among the counts, worst (most calls) first.
pub fn storms(
    counts: &[ReadCount],
    resolve: impl Fn(u32, u32, u64) -> Option<Vec<u8>>,
) -> Vec<ReadStorm> {
    let mut out: Vec<ReadStorm> = counts
        .iter()
        .filter(|c| is_storm(c.stat.tiny_calls))
        .map(|c| ReadStorm {
            pid: c.key.pid,
            comm: Lossless::new(c.comm.clone()),
            fd: c.stat.fd,
            target: Lossless::new(target_of(c, &resolve)),
            ino: c.stat.ino,
            calls: c.stat.calls,
            small_reads: c.stat.tiny_calls,
            bytes: c.stat.bytes,
            bytes_per_call: crate::output::round(c.stat.bytes as f64 / c.stat.calls as f64, 3),
            block_calls: c.stat.bytes.div_ceil(BLOCK).max(1),
        })
        .collect();
    out.sort_by(|a, b| {
        (b.small_reads, b.calls)
            .cmp(&(a.small_reads, a.calls))
            .then(a.pid.cmp(&b.pid))
    });
    out
}

/// The storms as a table for people.
pub fn storm_table(storms: &[ReadStorm], term: crate::output::table::Term) -> String {
    use crate::output::table::{Col, Table};
    let mut t = Table::new([
        Col::new("pid"),
        Col::new("comm"),
        Col::new("fd"),
        Col::new("target").path(),
        Col::new("read calls").short("reads"),
        Col::new("1-2 byte reads").short("small"),
        Col::new("bytes/call").short("B/call"),
        Col::new("block reads needed").short("blocks").drop(1),
    ]);
    for s in storms {
        t.add_row(vec![
            s.pid.to_string(),
            s.comm.escaped(),
            s.fd.to_string(),
            s.target.escaped(),
            s.calls.to_string(),
            s.small_reads.to_string(),
            format!("{:.2}", s.bytes_per_call),
            s.block_calls.to_string(),
        ]);
    }
    t.render_for(term)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(pid: u32, calls: u64, bytes: u64, magic: u64, mode: u32) -> ReadCount {
        ReadCount {
            key: fdaudit_common::ReadKey {
                pid,
                _pad: 0,
                file: 0xffff_8880_0000_0000 + u64::from(pid) * 256,
                ino: 77,
            },
            stat: fdaudit_common::ReadStat {
                calls,
                bytes,
                tiny_calls: if bytes <= 2 * calls { calls } else { 0 },
                ino: 77,
                magic,
                mode,
                ..Default::default()
            },
            comm: b"sh".to_vec(),
            kernel_path: None,
        }
    }

    #[test]
    fn byte_at_a_time_is_a_storm_block_reads_are_not() {
        assert!(is_storm(3400));
        assert!(is_storm(64));
        assert!(!is_storm(63));
        assert!(!is_storm(0));
    }

    #[test]
    fn small_reads_after_large_ones_on_the_same_file_are_a_storm() {
        // 30 reads of ~2 KB, then 500 one-byte reads: 115 bytes per call on average.
        let mut c = count(9, 530, 30 * 2_000 + 500, 0xef53, 0o100644);
        c.stat.tiny_calls = 500;
        let s = storms(&[c], |_, _, _| Some(b"/srv/data".to_vec()));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].small_reads, 500);
        assert!(s[0].bytes_per_call > 100.0);
    }

    #[test]
    fn storms_are_named_and_sorted() {
        let counts = vec![
            count(1, 100, 100, fdkind::magic::PIPEFS, 0o010600),
            count(2, 3400, 3400, 0xef53, 0o100644),
            count(3, 10, 40_960, 0xef53, 0o100644),
        ];
        let s = storms(&counts, |_, _, _| Some(b"/etc/environment".to_vec()));
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].pid, 2);
        assert_eq!(s[0].target.lossy(), "/etc/environment");
        assert_eq!(s[0].block_calls, 1);
        assert_eq!(s[1].target.lossy(), "pipe:[77]");
        let table = storm_table(&s, crate::output::table::Term::plain());
        assert!(
            table.contains("pipe:[77]") && table.contains("3400"),
            "{table}"
        );
        let json =
            serde_json::to_value(super::super::TraceRecord::ReadStorm(s[1].clone())).unwrap();
        assert_eq!(json["type"], "read_storm");
        assert_eq!(json["calls"], 100);
    }

    #[test]
    fn targets_seen_while_running_are_kept() {
        let mut live = LiveTargets::default();
        let counts = vec![
            count(2, 3400, 3400, 0xef53, 0o100644),
            count(1, 100, 100, fdkind::magic::PIPEFS, 0o010600),
            count(3, 10, 40_960, 0xef53, 0o100644),
        ];
        let asked = std::cell::RefCell::new(Vec::new());
        live.update(&counts, |pid, _, _| {
            asked.borrow_mut().push(pid);
            Some(format!("/run/file-{pid}").into_bytes())
        });
        assert_eq!(
            *asked.borrow(),
            [2],
            "only regular-file storms are looked up"
        );
        live.update(&counts, |_, _, _| panic!("looked up once"));
        // The process is gone: the live look-up finds nothing, the kept path is used.
        let s = storms(&counts, |p, f, i| live.resolve(p, f, i, |_, _, _| None));
        assert_eq!(s[0].target.lossy(), "/run/file-2");
        let gone = storms(&counts, |_, _, _| None);
        assert_eq!(gone[0].target.lossy(), "inode 77");
    }

    fn kernel_path(comps: &[&str], complete: u32) -> Box<fdaudit_common::FdPath> {
        let mut p = fdaudit_common::FdPath {
            index: 3,
            depth: comps.len() as u32,
            complete,
            _pad: 0,
            comps: [[0; fdaudit_common::COMP_LEN]; fdaudit_common::MAX_DEPTH],
        };
        for (slot, c) in p.comps.iter_mut().zip(comps) {
            slot[..c.len()].copy_from_slice(c.as_bytes());
        }
        Box::new(p)
    }

    #[test]
    fn the_path_the_kernel_walked_names_a_storm_whose_process_is_gone() {
        let mut c = count(2, 500, 500, 0xef53, 0o100644);
        c.kernel_path = Some(kernel_path(&["hostname", "etc"], 1));
        let s = storms(std::slice::from_ref(&c), |_, _, _| None);
        assert_eq!(s[0].target.lossy(), "/etc/hostname");
        // A whole kernel path needs no look-up while the process runs.
        let mut live = LiveTargets::default();
        live.update(std::slice::from_ref(&c), |_, _, _| panic!("looked up"));
        // A cut walk: the live link is better; without one, the cut path.
        c.kernel_path = Some(kernel_path(&["leaf", "deep"], 0));
        let s = storms(std::slice::from_ref(&c), |_, _, _| {
            Some(b"/a/deep/leaf".to_vec())
        });
        assert_eq!(s[0].target.lossy(), "/a/deep/leaf");
        let s = storms(&[c], |_, _, _| None);
        assert_eq!(s[0].target.lossy(), "…/deep/leaf");
    }
}
