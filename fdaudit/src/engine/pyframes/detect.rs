//! Whether a process is CPython, and where its `_PyRuntime` and `Py_Version` are: the
//! exported symbols of its executable (a static build, Debian's) or of the libpython it
//! mapped (pyenv's shared builds). The files are the process's own: opened through
//! /proc/PID/exe and /proc/PID/map_files (the mapped file itself), checked regular,
//! read bounded ([`Bounded`]); /proc/PID/maps is hostile text, parsed bounded.

use std::{collections::HashMap, fs::File};

use crate::engine::proc_maps::{self, Mapping};
use crate::untrusted::{open_exe, open_mapped, Bounded, FileId};

/// Largest image opened, and bytes read of one.
const MAX_IMAGE: u64 = 1 << 30;
const IMAGE_BUDGET: u64 = 8 << 20;
/// Bytes and lines of /proc/PID/maps looked at.
const MAX_MAPS_BYTES: usize = 1 << 20;
const MAX_MAPS_LINES: usize = 1 << 14;

/// What a process is, as far as Python frames go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Neither its executable nor a mapped libpython exports `_PyRuntime`.
    NotPython,
    /// Its executable needs libpython, not mapped yet (the dynamic loader is at work).
    Wait,
    /// `_PyRuntime` and `Py_Version` at these addresses, and its type objects (None: it
    /// exports not all three).
    Python {
        runtime: u64,
        version: u64,
        types: Option<Types>,
    },
    /// A CPython whose frames are not read: it exports no `Py_Version` (before 3.11) or no
    /// `_PyRuntime` (before 3.7); the image named.
    Older(String),
}

/// Where a CPython keeps the type objects of code, bytes and str objects (`PyCode_Type`,
/// `PyBytes_Type`, `PyUnicode_Type`, exported by every CPython 3): a live object's
/// `ob_type` is its type's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Types {
    pub code: u64,
    pub bytes: u64,
    pub str: u64,
}

/// What one image exports of CPython's, by address in the file's own terms.
struct Exports {
    runtime: Option<u64>,
    version: Option<u64>,
    types: [Option<u64>; 3],
    /// It calls into a libpython (`Py_BytesMain`, `Py_Main`).
    imports_main: bool,
    /// The lowest segment address, page-aligned: the address of file offset 0.
    base_vaddr: u64,
}

fn exports(file: File, len: u64) -> Option<Exports> {
    use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
    let data = Bounded::new(file, len, IMAGE_BUDGET);
    let obj = object::File::parse(&data).ok()?;
    let mut e = Exports {
        runtime: None,
        version: None,
        types: [None; 3],
        imports_main: false,
        base_vaddr: obj.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff,
    };
    for s in obj.dynamic_symbols().take(1 << 17) {
        match s.name_bytes() {
            Ok(b"_PyRuntime") if s.is_definition() => e.runtime = Some(s.address()),
            Ok(b"Py_Version") if s.is_definition() => e.version = Some(s.address()),
            Ok(b"PyCode_Type") if s.is_definition() => e.types[0] = Some(s.address()),
            Ok(b"PyBytes_Type") if s.is_definition() => e.types[1] = Some(s.address()),
            Ok(b"PyUnicode_Type") if s.is_definition() => e.types[2] = Some(s.address()),
            Ok(b"Py_BytesMain" | b"Py_Main") if s.is_undefined() => e.imports_main = true,
            _ => {}
        }
    }
    Some(e)
}

/// `pid`'s file mappings, readable or not (libpython's first mapping is not executable).
fn maps(pid: u32) -> Vec<Mapping> {
    let Some(text) = proc_maps::read_maps_text(pid, MAX_MAPS_BYTES) else {
        return Vec::new();
    };
    let mut paths = HashMap::new();
    text.lines()
        .take(MAX_MAPS_LINES)
        .filter_map(|l| proc_maps::parse_file_line(l, &mut paths, false))
        .collect()
}

/// Where `e`'s symbols are in a process that maps its file (`name`) from `start` (file
/// offset 0).
fn located(e: &Exports, start: u64, name: &str) -> Option<Found> {
    let (Some(runtime), Some(version)) = (e.runtime, e.version) else {
        return Some(Found::Older(name.to_string()));
    };
    let base = start.checked_sub(e.base_vaddr)?;
    let at = |a: Option<u64>| a.and_then(|a| base.checked_add(a));
    let types = match e.types.map(at) {
        [Some(code), Some(bytes), Some(str)] => Some(Types { code, bytes, str }),
        _ => None,
    };
    Some(Found::Python {
        runtime: base.checked_add(runtime)?,
        version: base.checked_add(version)?,
        types,
    })
}

/// What process `pid` is now.
pub fn find(pid: u32) -> Found {
    let maps = maps(pid);
    let first_of = |id: FileId| maps.iter().find(|m| m.id == Some(id) && m.offset == 0);
    let exe = open_exe(pid, MAX_IMAGE).ok();
    let mut imports_main = false;
    if let Some(o) = exe {
        let id = o.id;
        if let Some(e) = exports(o.file, o.len) {
            if e.runtime.is_some() {
                return first_of(id)
                    .and_then(|m| located(&e, m.start, &m.path))
                    .unwrap_or(Found::NotPython);
            }
            imports_main = e.imports_main;
        }
    }
    let lib = maps.iter().find(|m| {
        let base = m.path.rsplit('/').next().unwrap_or("");
        m.offset == 0 && base.starts_with("libpython3.") && base.contains(".so")
    });
    if let Some(m) = lib {
        let mapped =
            m.id.map(|id| open_mapped(pid, (m.start, m.end), MAX_IMAGE, Some(id)));
        if let Some(Ok(o)) = mapped {
            let e = exports(o.file, o.len);
            if let Some(found) = e.and_then(|e| located(&e, m.start, &m.path)) {
                return found;
            }
        }
    }
    if imports_main {
        Found::Wait
    } else {
        Found::NotPython
    }
}
