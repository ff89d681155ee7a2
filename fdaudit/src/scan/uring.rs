//! The files an io_uring instance holds registered (`IORING_REGISTER_FILES`, "fixed
//! files"): in no fd table, yet usable by whoever holds the ring's fd, a child that
//! inherited it included. The kernel lists them in the ring's fdinfo
//! (`io_uring_show_fdinfo`, io_uring/fdinfo.c):
//!
//! ```text
//! UserFiles:\t3
//!     0: socket:[18575]
//!     1: /
//!     2: /tmp/we\040ird\012name
//! UserBufs:\t0
//! ```
//!
//! Each entry is `%5u: ` then the file's path as `seq_file_path` prints it (space, tab,
//! newline and backslash octal-escaped); empty slots are left out. The list is printed only
//! when the ring's lock could be taken without waiting (`mutex_trylock`): a busy ring's
//! fdinfo has no `UserFiles:` line (6.x) or a count with no entries (5.x). 5.x kernels
//! print only the file's last path component (`d_iname`), and `<none>` for an empty
//! slot. What this module cannot read whole is said to be incomplete, and the
//! finding takes the worst it could be.

/// The registered files of one ring, as its fdinfo lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RingFiles {
    /// `UserFiles:`: how many slots the table has (`None`: no such line).
    pub slots: Option<u32>,
    /// (slot, file as printed, escapes undone), in order.
    pub files: Vec<(u32, Vec<u8>)>,
    /// The list was read to its end (the line after it came), and a table with slots
    /// listed at least one file (5.x prints the count but no entries when the ring was
    /// busy).
    pub complete: bool,
}

/// The link text of an io_uring instance's fd (`anon_inode:[io_uring]`, the kernel's name).
pub const RING_LINK: &[u8] = b"anon_inode:[io_uring]";

/// Parses a ring's fdinfo (module doc).
pub fn parse_ring_files(data: &[u8]) -> RingFiles {
    let mut out = RingFiles::default();
    let mut lines = data.split(|&b| b == b'\n');
    for line in lines.by_ref() {
        if let Some(v) = line.strip_prefix(b"UserFiles:") {
            out.slots = std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.trim().parse().ok());
            break;
        }
    }
    let Some(slots) = out.slots else {
        return out;
    };
    let mut ended = false;
    for line in lines {
        let Some((slot, file)) = entry(line) else {
            // The next section's header (`UserBufs:`) ends the list; an empty last piece
            // is what follows a final newline, not an end.
            ended = !line.is_empty();
            break;
        };
        if file != b"<none>" {
            out.files.push((slot, unescape_octal(file)));
        }
    }
    out.complete = ended && (slots == 0 || !out.files.is_empty());
    out
}

/// `%5u: TEXT` (the index right-aligned in five columns).
fn entry(line: &[u8]) -> Option<(u32, &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let slot = std::str::from_utf8(&line[..colon]).ok()?.trim_start();
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let file = line[colon + 1..]
        .strip_prefix(b" ")
        .unwrap_or(&line[colon + 1..]);
    Some((slot.parse().ok()?, file))
}

/// Undoes `seq_file_path`'s escapes: `\ooo`, three octal digits, for the bytes it escapes.
fn unescape_octal(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let oct = s.get(i + 1..i + 4).filter(|d| {
            s[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)) && d[0] <= b'3'
        });
        match oct {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What 6.18 printed for a ring holding a listening socket, `/` and a file whose name
    /// has a space and a newline (tests/tests/scan_inflight.rs makes the same).
    const LINUX_6_18: &[u8] = b"pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t18574\n\
SqMask:\t0x3\nSqHead:\t0\nSqTail:\t0\nCachedSqHead:\t0\nCqMask:\t0x7\nCqHead:\t0\n\
CqTail:\t0\nCachedCqTail:\t0\nSQEs:\t0\nCQEs:\t0\nSqThread:\t-1\nSqThreadCpu:\t-1\n\
SqTotalTime:\t0\nSqWorkTime:\t0\nUserFiles:\t3\n    0: socket:[18575]\n    1: /\n\
    2: /tmp/tfs/we\\040ird\\012name\nUserBufs:\t0\nPollList:\nCqOverflowList:\n\
NAPI:\tdisabled\n";

    #[test]
    fn linux_6_18() {
        let r = parse_ring_files(LINUX_6_18);
        assert_eq!(r.slots, Some(3));
        assert!(r.complete);
        assert_eq!(
            r.files,
            [
                (0, b"socket:[18575]".to_vec()),
                (1, b"/".to_vec()),
                (2, b"/tmp/tfs/we ird\nname".to_vec())
            ]
        );
    }

    #[test]
    fn what_cannot_be_read_whole_is_incomplete() {
        // A busy ring (6.x): no list at all.
        let busy = parse_ring_files(b"flags:\t02\nSqMask:\t0x3\nPollList:\n");
        assert_eq!(busy, RingFiles::default());
        // A busy ring (5.x): the count, no entries.
        let r = parse_ring_files(b"UserFiles:\t2\nUserBufs:\t0\n");
        assert!(!r.complete);
        // Cut off inside the list.
        let r = parse_ring_files(b"UserFiles:\t2\n    0: /a\n    1: /b");
        assert!(!r.complete);
        let r = parse_ring_files(b"UserFiles:\t2\n    0: /a\n");
        assert!(!r.complete);
        // No files: complete.
        let r = parse_ring_files(b"UserFiles:\t0\nUserBufs:\t0\n");
        assert!(r.complete && r.files.is_empty());
        // 5.x's empty slots.
        let r = parse_ring_files(b"UserFiles:\t2\n    0: <none>\n    1: libc.so.6\nUserBufs:\t0\n");
        assert!(r.complete);
        assert_eq!(r.files, [(1, b"libc.so.6".to_vec())]);
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape_octal(b"a\\134b\\040"), b"a\\b ");
        assert_eq!(unescape_octal(b"\\9\\04"), b"\\9\\04");
    }
}
