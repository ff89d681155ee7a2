//! A JIT runtime's perf map (`/tmp/perf-PID.map`, one `START SIZE name` line per piece of
//! generated code, in hex, with or without `0x`: Node's `--perf-basic-prof`, the JVM's
//! `-XX:+DumpPerfMapAtExit` or `jcmd PID Compiler.perfmap`), as perf reads it.
//!
//! The file is written by the traced user in a directory they control: it is hostile. It is
//! opened beneath the process's own root directory (held `O_PATH` while the process lived),
//! no symlink followed anywhere on the way (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`), `O_NONBLOCK` (a FIFO never blocks), and read only if it is a
//! regular file owned by the process's user or root; at most [`MAX_BYTES`] are read,
//! [`MAX_ENTRIES`] entries and [`MAX_NAME_BYTES`] of names kept. Lines that do not parse
//! are skipped.

use std::{fs::File, io::Read as _, os::fd::OwnedFd};

/// Bytes of a perf map read (the rest ignored: its frames say so).
pub const MAX_BYTES: u64 = 32 << 20;
/// Entries kept of one map.
pub const MAX_ENTRIES: usize = 1 << 18;
/// Bytes of names kept of one map (each name cut at [`MAX_NAME`]).
pub const MAX_NAME_BYTES: usize = 16 << 20;
/// The longest name kept (longer ones are cut).
pub const MAX_NAME: usize = 512;
/// The largest piece of code an entry may span (a larger size is garbage).
const MAX_SIZE: u64 = 1 << 30;

/// One entry: generated code at [start, start + size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub start: u64,
    pub size: u64,
    pub name: Box<str>,
    /// Its line number in the file: a later entry for the same address wins (code moved
    /// or freed and the space reused, as perf takes it).
    seq: u32,
}

/// A parsed perf map: its entries by start address.
#[derive(Debug, Default)]
pub struct PerfMap {
    entries: Vec<Entry>,
    /// The largest size of an entry (how far back a lookup looks).
    max_size: u64,
    /// Whether bytes or entries were left unread for the bounds.
    pub truncated: bool,
}

impl PerfMap {
    /// Parses the text of a map: every line that is `START SIZE name` (hex, optional `0x`),
    /// within the bounds.
    pub fn parse(text: &[u8]) -> PerfMap {
        let mut map = PerfMap::default();
        let mut names = 0usize;
        for (seq, line) in text.split(|&b| b == b'\n').enumerate() {
            let Some(mut e) = parse_line(line) else {
                continue;
            };
            if map.entries.len() >= MAX_ENTRIES || names + e.name.len() > MAX_NAME_BYTES {
                map.truncated = true;
                break;
            }
            names += e.name.len();
            e.seq = u32::try_from(seq).unwrap_or(u32::MAX);
            map.max_size = map.max_size.max(e.size);
            map.entries.push(e);
        }
        map.entries.sort_by_key(|e| (e.start, e.seq));
        map
    }

    /// The entry holding `addr` (the latest written, when several do).
    pub fn lookup(&self, addr: u64) -> Option<&Entry> {
        let end = self.entries.partition_point(|e| e.start <= addr);
        self.entries[..end]
            .iter()
            .rev()
            .take_while(|e| addr - e.start < self.max_size)
            .filter(|e| addr - e.start < e.size)
            .max_by_key(|e| e.seq)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes it keeps.
    pub fn cost(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| 48 + e.name.len() as u64)
            .sum::<u64>()
            + 64
    }
}

/// One line, if it is an entry: two hex numbers and a name (control characters dropped).
fn parse_line(line: &[u8]) -> Option<Entry> {
    let hex = |s: &[u8]| {
        let s = std::str::from_utf8(s).ok()?;
        let s = s.strip_prefix("0x").unwrap_or(s);
        (!s.is_empty() && s.len() <= 16)
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    let mut it = line.splitn(3, |&b| b == b' ');
    let start = hex(it.next()?)?;
    let size = hex(it.next()?)?;
    let name = it.next()?;
    if size == 0 || size > MAX_SIZE || start.checked_add(size).is_none() {
        return None;
    }
    let name = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)]);
    let name: String = name.trim().chars().filter(|c| !c.is_control()).collect();
    if name.is_empty() {
        return None;
    }
    Some(Entry {
        start,
        size,
        name: name.into(),
        seq: 0,
    })
}

/// What was found of a map: its identity and change time (read again when they change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
}

/// Why a map was not read (said on the frames it would have named).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Refused {
    #[error("no perf map {0}")]
    Missing(String),
    #[error("perf map {0} not opened: {1}")]
    Open(String, String),
    #[error("perf map {0} is not a regular file: not read")]
    NotRegular(String),
    #[error("perf map {0} is owned by uid {1}, not the process's user or root: not read")]
    Owner(String, u32),
    #[error("perf map {0} not read: {1}")]
    Read(String, String),
}

/// `tmp/perf-NSPID.map` opened beneath `root` (the process's root directory), no symlink
/// followed, non-blocking; its stamp, checked: a regular file owned by `uid` or root.
pub fn open(root: &OwnedFd, nspid: u32, uid: u32) -> Result<(File, Stamp), Refused> {
    use std::os::unix::fs::MetadataExt as _;
    let shown = format!("/tmp/perf-{nspid}.map");
    let rel = std::ffi::CString::new(format!("tmp/perf-{nspid}.map")).expect("no NUL");
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let opened = rustix::fs::openat2(
        root,
        rel.as_c_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    );
    let file = match opened {
        Ok(fd) => File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Err(Refused::Missing(shown)),
        Err(e) => return Err(Refused::Open(shown, std::io::Error::from(e).to_string())),
    };
    let meta = file
        .metadata()
        .map_err(|e| Refused::Read(shown.clone(), e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular(shown));
    }
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(Refused::Owner(shown, meta.uid()));
    }
    let stamp = Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    };
    Ok((file, stamp))
}

/// Reads an opened map within [`MAX_BYTES`].
pub fn read(file: File, shown: &str) -> Result<PerfMap, Refused> {
    let mut text = Vec::new();
    file.take(MAX_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| Refused::Read(shown.into(), e.to_string()))?;
    let full = text.len() as u64 >= MAX_BYTES;
    // A line cut by the bound is not an entry.
    if full {
        let keep = memchr::memrchr(b'\n', &text).map_or(0, |i| i + 1);
        text.truncate(keep);
    }
    let mut map = PerfMap::parse(&text);
    map.truncated |= full;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_jvm_lines_parse_and_garbage_is_skipped() {
        let text = b"7f555c029c80 4a8 JS:*leakOne /tmp/l.js:2:17\n\
            0x00007f870c940b80 0x0000000000017de0 Interpreter\n\
            garbage\n\
            zz 10 bad-hex\n\
            10 0 zero-size\n\
            ffffffffffffff00 1000 wraps\n\
            10 20\n\
            20 40000000000 too-large\n\
            12345678901234567 10 too-long-hex\n\
            30 10 \x01\x02\n\
            40 10 ctl\x1b[31mname\n";
        let m = PerfMap::parse(text);
        assert_eq!(m.len(), 3, "{m:?}");
        let e = m.lookup(0x7f55_5c02_9c80 + 0x10).expect("leakOne");
        assert_eq!(&*e.name, "JS:*leakOne /tmp/l.js:2:17");
        let e = m
            .lookup(0x7f87_0c94_0b80 + 0x17de0 - 1)
            .expect("the interpreter");
        assert_eq!(&*e.name, "Interpreter");
        assert!(
            m.lookup(0x7f87_0c94_0b80 + 0x17de0).is_none(),
            "past its end"
        );
        assert!(m.lookup(0x7f87_0c94_0b80 - 1).is_none(), "before its start");
        assert_eq!(
            &*m.lookup(0x45).expect("control bytes dropped").name,
            "ctl[31mname"
        );
        assert!(m.lookup(0x30).is_none() && m.lookup(0x15).is_none());
    }

    #[test]
    fn the_latest_entry_wins_where_entries_overlap() {
        let m = PerfMap::parse(b"1000 100 old\n1080 10 inner\n1000 40 new\n");
        assert_eq!(&*m.lookup(0x1010).unwrap().name, "new");
        assert_eq!(&*m.lookup(0x1088).unwrap().name, "inner");
        assert_eq!(&*m.lookup(0x1090).unwrap().name, "old");
        assert!(m.lookup(0x1100).is_none());
    }

    #[test]
    fn entries_and_names_are_bounded() {
        let mut text = Vec::new();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            text.extend_from_slice(format!("{:x} 10 f{i}\n", i * 0x10).as_bytes());
        }
        let m = PerfMap::parse(&text);
        assert_eq!(m.len(), MAX_ENTRIES);
        assert!(m.truncated);
        let long = format!("1000 10 {}\n", "n".repeat(10_000));
        let m = PerfMap::parse(long.as_bytes());
        assert_eq!(m.lookup(0x1000).unwrap().name.len(), MAX_NAME);
        // Many long names: kept within the name budget.
        let mut text = Vec::new();
        for i in 0..(2 * MAX_NAME_BYTES / MAX_NAME) as u64 {
            text.extend_from_slice(format!("{:x} 10 {}\n", i * 0x10, "n".repeat(600)).as_bytes());
        }
        let m = PerfMap::parse(&text);
        assert!(
            m.truncated && m.len() <= MAX_NAME_BYTES / MAX_NAME,
            "{}",
            m.len()
        );
    }

    #[test]
    fn a_map_is_read_only_if_regular_owned_and_beneath_the_root() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = std::env::temp_dir().join(format!("fdaudit-perfmap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        let root = OwnedFd::from(File::open(&d).unwrap());
        let me = unsafe { libc::geteuid() };
        assert!(matches!(open(&root, 1, me), Err(Refused::Missing(_))));
        std::fs::write(d.join("tmp/perf-2.map"), b"1000 10 f\n").unwrap();
        let (f, stamp) = open(&root, 2, me).expect("a regular file of ours");
        assert_eq!(stamp.len, 10);
        assert_eq!(read(f, "x").unwrap().len(), 1);
        assert!(matches!(open(&root, 2, me + 1), Err(Refused::Owner(..))) || me == 0);
        // A symlink at the end, or on the way: refused, not followed.
        std::os::unix::fs::symlink(d.join("tmp/perf-2.map"), d.join("tmp/perf-3.map")).unwrap();
        assert!(matches!(open(&root, 3, me), Err(Refused::Open(..))));
        let d2 = d.join("other");
        std::fs::create_dir_all(&d2).unwrap();
        std::os::unix::fs::symlink(d.join("tmp"), d2.join("tmp")).unwrap();
        let root2 = OwnedFd::from(File::open(&d2).unwrap());
        assert!(matches!(open(&root2, 2, me), Err(Refused::Open(..))));
        // A FIFO: refused at once, never blocks.
        let c = std::ffi::CString::new(d.join("tmp/perf-4.map").to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(open(&root, 4, me), Err(Refused::NotRegular(_))));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
