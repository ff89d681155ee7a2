//! A code object of a traced CPython process, read after the call that recorded its
//! address, and what tells that it is still a code object (issue #38): the reader may be a
//! few records behind, and an interpreter that finalizes frees its code objects; their
//! memory then holds a free-list link, or another object. Such an object is said to be
//! freed, never named.
//!
//! What is checked, and why it is sound:
//! - Its header, before and after everything else is read: a live object's reference
//!   count is at least 1 and fits in 32 bits (3.12+'s immortal objects included), and its
//!   `ob_type` is `PyCode_Type`. Freeing a block writes the allocator's free-list link
//!   over the first words (pymalloc: the next free block or NULL over `ob_refcnt`; glibc:
//!   its links or tcache key over both), and reusing it writes another object's header.
//!   The type alone is not enough: pymalloc leaves it in place until the block is reused.
//! - The qualname, file name and location table: the str and bytes objects the code object
//!   holds a reference to, each checked live and of its type. They are immutable and held
//!   by the code object: when its header (pointers included) reads the same after they were
//!   read, they were its own throughout.
//! - The location table covers exactly the code object's code units (`Py_SIZE`): the
//!   compiler gives every code unit an entry, so a table that does not is not its table,
//!   and the frame's instruction must be one of those units.
//!
//! What is not excluded: a code object freed and its memory reused by another code object
//! of the same size before the first read; only a copy made by the kernel at the call
//! could tell that.

use super::{
    detect::Types,
    linetable,
    memory::{gone_or, Mem, MAX_LINETABLE},
    offsets::CodeLayout,
};

/// Longest name or file name read (characters).
const MAX_STR: u64 = 4096;
/// Largest object header read at once (a code object's fields before its instructions).
const MAX_HEADER: u64 = 4096;

/// Why a code object was not named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRead {
    /// It is no longer the code object the frame ran (what shows it).
    Freed(String),
    /// It could not be read, or is not one fdaudit reads (a hostile process's).
    Bad(String),
}

impl NotRead {
    /// The frame's statement.
    pub fn why(&self) -> String {
        match self {
            NotRead::Freed(what) => {
                format!("the code object was freed before fdaudit read it ({what})")
            }
            NotRead::Bad(why) => why.clone(),
        }
    }
}

/// What names a code object's frames.
#[derive(Debug, Clone)]
pub struct Code {
    pub qualname: String,
    pub filename: String,
    pub first_line: i64,
    pub linetable: Vec<u8>,
    /// Its size in code units (`Py_SIZE`), which its location table covers.
    pub units: u64,
}

impl Code {
    /// The line of the instruction at `instr` (an address) of this code object at `code`
    /// (None: an instruction without a location); an instruction outside it says the
    /// frame did not run this code object.
    pub fn line(&self, l: &CodeLayout, code: u64, instr: u64) -> Result<Option<u32>, NotRead> {
        let unit = code
            .checked_add(l.code_adaptive)
            .and_then(|first| instr.checked_sub(first))
            .map(|off| off / 2)
            .filter(|u| *u < self.units);
        match unit {
            Some(u) => Ok(linetable::line_of(&self.linetable, self.first_line, u)),
            None => Err(NotRead::Freed(format!(
                "the frame's instruction {instr:#x} is not one of its {} code units",
                self.units
            ))),
        }
    }
}

/// An object's header words: its reference count (None: not read) and type; `whose` names
/// the object in the statement (`its`, `its name's`).
fn live(l: &CodeLayout, h: &[u8], ty: u64, whose: &str) -> Result<(), NotRead> {
    let cut = || NotRead::Bad(format!("{whose} header cut"));
    if let Some(at) = l.ob_refcnt {
        let n = word(h, at).ok_or_else(cut)?;
        if n == 0 || n > u64::from(u32::MAX) {
            return Err(NotRead::Freed(format!(
                "{whose} reference count reads {n:#x}"
            )));
        }
    }
    match word(h, l.ob_type) {
        Some(t) if t == ty => Ok(()),
        Some(t) => Err(NotRead::Freed(format!(
            "{whose} type reads {t:#x}, not {ty:#x}"
        ))),
        None => Err(cut()),
    }
}

fn word(b: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The first `len` bytes of the object at `addr`, at most [`MAX_HEADER`].
fn header(m: &Mem, addr: u64, len: u64, what: &str) -> Result<Vec<u8>, NotRead> {
    if len > MAX_HEADER {
        return Err(NotRead::Bad(format!("{what}: a header of {len} bytes")));
    }
    m.read(addr, len as usize)
        .map_err(|e| NotRead::Bad(gone_or(&e, what)))
}

/// A str object's text: a live str, compact (every name and file name of a code object
/// is one), at most [`MAX_STR`] characters.
fn read_str(m: &Mem, l: &CodeLayout, ty: &Types, addr: u64) -> Result<String, NotRead> {
    let h = header(m, addr, l.str_ascii_data, "str")?;
    live(l, &h, ty.str, "its name's")?;
    let cut = || NotRead::Bad("str: header cut".into());
    let len = word(&h, l.str_length).ok_or_else(cut)?;
    let state = word(&h, l.str_state).ok_or_else(cut)? as u32;
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
    if compact == 0 || !matches!(kind, 1 | 2 | 4) || len > MAX_STR {
        return Err(NotRead::Bad(format!(
            "not a compact str of at most {MAX_STR} characters (state {state:#x}, length {len})"
        )));
    }
    let data = if ascii == 1 {
        l.str_ascii_data
    } else {
        l.str_compact_data
    };
    let bytes = m
        .read(addr.wrapping_add(data), (len * u64::from(kind)) as usize)
        .map_err(|e| NotRead::Bad(gone_or(&e, "str")))?;
    let chars = bytes.chunks_exact(kind as usize).map(|c| {
        let mut v = [0u8; 4];
        v[..c.len()].copy_from_slice(c);
        char::from_u32(u32::from_le_bytes(v)).unwrap_or(char::REPLACEMENT_CHARACTER)
    });
    Ok(chars.collect())
}

/// A live bytes object's contents, at most [`MAX_LINETABLE`] bytes.
fn read_bytes(m: &Mem, l: &CodeLayout, ty: &Types, addr: u64) -> Result<Vec<u8>, NotRead> {
    let h = header(m, addr, l.bytes_data, "bytes")?;
    live(l, &h, ty.bytes, "its location table's")?;
    let len = word(&h, l.bytes_size).ok_or_else(|| NotRead::Bad("bytes: header cut".into()))?;
    if len > MAX_LINETABLE {
        return Err(NotRead::Bad(format!(
            "a location table of {len} bytes: not read"
        )));
    }
    m.read(addr.wrapping_add(l.bytes_data), len as usize)
        .map_err(|e| NotRead::Bad(gone_or(&e, "bytes")))
}

/// What of a code object's header says which object it is: its type, size, and the
/// objects it names.
#[derive(Debug, PartialEq, Eq)]
struct Fields {
    units: u64,
    qualname: u64,
    filename: u64,
    linetable: u64,
    first_line: u32,
}

/// The header of the code object at `addr`, checked live.
fn fields(m: &Mem, l: &CodeLayout, ty: &Types, addr: u64) -> Result<Fields, NotRead> {
    let h = header(m, addr, l.code_adaptive, "code object")?;
    live(l, &h, ty.code, "its")?;
    let w = |at: u64| word(&h, at).ok_or_else(|| NotRead::Bad("code object: header cut".into()));
    Ok(Fields {
        units: w(l.bytes_size)?,
        qualname: w(l.qualname)?,
        filename: w(l.filename)?,
        linetable: w(l.linetable)?,
        first_line: w(l.firstlineno)? as u32,
    })
}

/// The code object at `addr`, if it is still a live code object whose location table
/// covers its code.
pub fn read_code(m: &Mem, l: &CodeLayout, ty: &Types, addr: u64) -> Result<Code, NotRead> {
    let f = fields(m, l, ty, addr)?;
    let qualname = read_str(m, l, ty, f.qualname)?;
    let filename = read_str(m, l, ty, f.filename)?;
    let linetable = read_bytes(m, l, ty, f.linetable)?;
    let again = fields(m, l, ty, addr)?;
    if again != f {
        return Err(NotRead::Freed(
            "its header changed while it was read".into(),
        ));
    }
    let covered = linetable::units(&linetable);
    if covered != Some(f.units) {
        return Err(NotRead::Freed(format!(
            "its location table of {} bytes does not cover its {} code units",
            linetable.len(),
            f.units
        )));
    }
    Ok(Code {
        qualname,
        filename,
        first_line: i64::from(f.first_line as i32),
        linetable,
        units: f.units,
    })
}
