//! A process's executable file mappings, from /proc/PID/maps (hostile text: every field
//! parsed, bounded in bytes and entries).

use std::{collections::HashMap, sync::Arc};

use crate::untrusted::FileId;

/// An executable mapping of a process: [start, end) from file offset `offset` of a file.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: Arc<str>,
    /// The file's identity as maps gave it (None: an executable named by its exec path).
    pub id: Option<FileId>,
}

impl Mapping {
    pub fn cost(&self) -> u64 {
        64 + self.path.len() as u64
    }
}

/// The executable file mappings of `pid` (empty once it is gone): the first `max_bytes` of
/// its maps, at most `max` of them; and its anonymous executable ranges (a JIT's code), as
/// many.
pub fn read_exec_maps(pid: u32, max_bytes: usize, max: usize) -> (Vec<Mapping>, Vec<(u64, u64)>) {
    let Some(text) = read_maps_text(pid, max_bytes) else {
        return (Vec::new(), Vec::new());
    };
    let mut paths: HashMap<FileId, Arc<str>> = HashMap::new();
    let files = text
        .lines()
        .filter_map(|l| parse_maps_line(l, &mut paths))
        .take(max)
        .collect();
    let anon = text.lines().filter_map(parse_anon_exec).take(max).collect();
    (files, anon)
}

/// The first `max_bytes` of `pid`'s /proc/PID/maps (None once it is gone).
pub fn read_maps_text(pid: u32, max_bytes: usize) -> Option<String> {
    let text = crate::procfs_util::read_proc_text(pid, "maps", max_bytes as u64)?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// One /proc/PID/maps line, if it is anonymous executable memory (no file, no `[vdso]`):
/// where a JIT puts the code it generates.
pub fn parse_anon_exec(line: &str) -> Option<(u64, u64)> {
    let mut it = line.splitn(6, ' ');
    let (range, perms) = (it.next()?, it.next()?);
    let path = it.nth(3).map_or("", str::trim);
    if !perms.contains('x') || !(path.is_empty() || path.starts_with("[anon")) {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

/// One /proc/PID/maps line, if it is an executable mapping of a file (paths shared by
/// identity through `paths`).
pub fn parse_maps_line(line: &str, paths: &mut HashMap<FileId, Arc<str>>) -> Option<Mapping> {
    parse_file_line(line, paths, true)
}

/// One /proc/PID/maps line, if it is a mapping of a file (an absolute path), executable
/// when `exec_only`.
pub fn parse_file_line(
    line: &str,
    paths: &mut HashMap<FileId, Arc<str>>,
    exec_only: bool,
) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let (range, perms, offset) = (it.next()?, it.next()?, it.next()?);
    let (dev, inode) = (it.next()?, it.next()?);
    let path = it.next()?.trim_start();
    if (exec_only && !perms.contains('x')) || !path.starts_with('/') {
        return None;
    }
    let id = FileId::from_maps(dev.as_bytes(), inode.as_bytes())?;
    let (a, b) = range.split_once('-')?;
    let path = paths
        .entry(id)
        .or_insert_with(|| path.trim_end_matches(" (deleted)").into());
    Some(Mapping {
        start: u64::from_str_radix(a, 16).ok()?,
        end: u64::from_str_radix(b, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: Arc::clone(path),
        id: Some(id),
    })
}
