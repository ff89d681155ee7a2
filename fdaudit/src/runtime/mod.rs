//! Which runtime spawned a child: named from what the kernel and the image say (the
//! spawning process's executable, its mapped objects and their version strings), never from
//! `comm` or argv. [`rules`] holds the table, [`image`] the bounded reads; the tracer's
//! `engine/runtimes.rs` names each spawn from it, keeping what was read in the session's
//! per-process table (`engine/process.rs`).

mod file;
pub mod image;
pub(crate) mod rules;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde::Serialize;

pub use file::{on_remote, resolve, script_interpreter, FileImages};
pub use rules::identify;

/// The most bytes of /proc/PID/maps or mountinfo read.
const MAX_PROC_TEXT: usize = 4 << 20;

/// The runtime of a spawning process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Runtime {
    /// `cpython`, `openjdk`, `go`, `rust`, `node`, `ruby`, `perl`, `sbcl`, `phobos`,
    /// `bash`, `dash`, `systemd`, `sudo`, `openssh`, `rpm`, `glibc`, `musl` or `unknown`.
    pub name: &'static str,
    pub version: Option<String>,
    /// What named it: `mapped /usr/lib/…/libpython3.11.so.1.0`, `exe /usr/bin/bash`, …
    pub evidence: String,
    /// The executable, as /proc/PID/exe (or the kernel's exec path) names it.
    pub exe: Option<String>,
    /// The C library mapped, when one is: `glibc 2.36`, `musl` (as bench's `libc`).
    #[serde(serialize_with = "libc_label")]
    pub libc: Option<Libc>,
}

fn libc_label<S: serde::Serializer>(l: &Option<Libc>, s: S) -> Result<S::Ok, S::Error> {
    match l {
        Some(Libc {
            name,
            version: Some(v),
            ..
        }) => s.serialize_str(&format!("{name} {v}")),
        Some(l) => s.serialize_str(l.name),
        None => s.serialize_none(),
    }
}

/// The C library of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Libc {
    /// `glibc` or `musl`.
    pub name: &'static str,
    pub version: Option<String>,
    pub path: String,
}

impl Libc {
    fn new(name: &'static str, version: Option<String>, path: &[u8]) -> Libc {
        Libc {
            name,
            version,
            path: String::from_utf8_lossy(path).into_owned(),
        }
    }
}

impl Runtime {
    fn new(
        name: &'static str,
        version: Option<String>,
        evidence: String,
        exe: Option<&[u8]>,
        libc: Option<Libc>,
    ) -> Runtime {
        Runtime {
            name,
            version,
            evidence,
            exe: exe.map(|e| String::from_utf8_lossy(e).into_owned()),
            libc,
        }
    }

    /// Not identified: why, and the executable when known.
    pub fn unknown(exe: Option<&[u8]>, why: &str) -> Runtime {
        Runtime::new("unknown", None, why.to_string(), exe, None)
    }

    /// `cpython 3.11`, `glibc 2.36`, `unknown`.
    pub fn label(&self) -> String {
        match &self.version {
            Some(v) => format!("{} {v}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// `(3, 11)` from `3.11.7`, `(17, 0)` from `17`.
pub fn parse_major_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// A path's file name (`fixture.c` of `/src/fixture.c`).
pub fn base_str(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A process's NOFILE limits (soft, hard; `u64::MAX` for unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Nofile {
    pub soft: u64,
    pub hard: u64,
}

/// One mapping of /proc/PID/maps with a file: its path, device, identity and range (the
/// first of the path's mappings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub path: Vec<u8>,
    pub dev: (u32, u32),
    pub id: crate::untrusted::FileId,
    pub range: (u64, u64),
}

/// The file-backed mappings of maps' text, each path once, in order (deleted files and
/// pseudo-paths such as `[heap]` left out).
pub fn mapped_paths(maps: &[u8]) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    // Each path once, without a quadratic search (a process can map thousands of files).
    let mut seen: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    for line in maps.split(|&b| b == b'\n') {
        // addr perms offset dev inode path (the path after spaces; it may hold spaces).
        let mut f = line.splitn(6, |&b| b == b' ');
        let (Some(range), Some(_), Some(_), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or_default().trim_ascii_start();
        if !path.starts_with(b"/") || path.ends_with(b" (deleted)") {
            continue;
        }
        let range = std::str::from_utf8(range).ok().and_then(|r| {
            let (a, b) = r.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        });
        let id = crate::untrusted::FileId::from_maps(dev, ino);
        if let (Some(range), Some(id)) = (range, id) {
            if seen.insert(path) {
                out.push(Mapping {
                    path: path.to_vec(),
                    dev: id.major_minor(),
                    id,
                    range,
                });
            }
        }
    }
    out
}

/// "Max open files" of /proc/PID/limits' text.
pub fn parse_nofile(limits: &str) -> Option<Nofile> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut f = line["Max open files".len()..].split_whitespace();
    let num = |s: &str| match s {
        "unlimited" => Some(u64::MAX),
        s => s.parse().ok(),
    };
    Some(Nofile {
        soft: num(f.next()?)?,
        hard: num(f.next()?)?,
    })
}

/// A procfs text file, at most [`MAX_PROC_TEXT`] bytes.
pub fn read_proc(pid: u32, name: &str) -> Option<Vec<u8>> {
    crate::procfs_util::read_proc_text(pid, name, MAX_PROC_TEXT as u64)
}

/// The runtime and NOFILE of a live process, `None` when it is gone or unreadable.
pub fn of_pid(pid: u32) -> Option<(Runtime, Option<Nofile>)> {
    // What only the live process can tell first; its files stay readable after it exits.
    let exe = crate::procfs_util::exe_of(pid)?;
    let own_root = std::fs::read_link(format!("/proc/{pid}/root"))
        .is_ok_and(|r| r == std::path::Path::new("/"));
    let maps = mapped_paths(&read_proc(pid, "maps")?);
    if maps.is_empty() || crate::procfs_util::exiting(pid) {
        // A live process maps its executable at least: it exited after its exe was read
        // (a zombie's maps are empty), or its maps were read while its exit tore them
        // down (its executable without its libc was read so). Named as one gone before
        // either read, from its exec path's file, not from an exe alone without its
        // libraries' versions.
        return None;
    }
    let nofile = read_proc(pid, "limits").and_then(|l| parse_nofile(&String::from_utf8_lossy(&l)));
    let remote = image::remote_devs(&String::from_utf8_lossy(
        &read_proc(pid, "mountinfo").unwrap_or_default(),
    ));
    let infos: HashMap<Vec<u8>, image::MapInfo> = maps
        .iter()
        .map(|m| {
            let info = image::MapInfo {
                dev: m.dev,
                id: m.id,
                range: m.range,
            };
            (m.path.clone(), info)
        })
        .collect();
    let paths: Vec<Vec<u8>> = maps.into_iter().map(|m| m.path).collect();
    let mut images = image::ProcImages::new(pid, Some(&exe), infos, remote, own_root);
    let rt = identify(Some(&exe), &paths, &mut images);
    Some((rt, nofile))
}
