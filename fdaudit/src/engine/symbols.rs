//! What `trace --origin` reads of a module (a file a traced process mapped): its function
//! symbols (or, for a Go binary without them, its `.gopclntab`) and DWARF line table
//! ([`Symbols`]) and its first executable segment ([`text_segment`]). Every read is a bounded `pread` of a file
//! [`crate::untrusted`] opened: a module's reads are kept within [`LOAD_BUDGET`] while it
//! is parsed, what is kept of it afterwards within [`FUNCS_BUDGET`] of names and
//! [`DWARF_BUDGET`] of debug sections (a module with more DWARF is named without source
//! lines).

use std::{fs::File, sync::Arc};

use crate::untrusted::Bounded;

/// The most bytes of a module read while its headers and symbol tables are parsed.
pub const LOAD_BUDGET: u64 = 16 << 20;
/// The most bytes of function names (and their entries) kept per module.
pub const FUNCS_BUDGET: u64 = 8 << 20;
/// The most bytes of DWARF sections kept per module: a module with more is named from its
/// symbols alone, without source file and line.
pub const DWARF_BUDGET: u64 = 8 << 20;
/// What one kept function costs besides its name (the tuple and the String's header).
const FUNC_COST: u64 = 48;
/// Symbols looked at per table (`.symtab`, `.dynsym`): what bounds a module's load time.
const MAX_SYMBOLS: usize = 1 << 16;

/// DWARF of a module, over the debug sections it owns.
type Dwarf = addr2line::Context<gimli::EndianArcSlice<gimli::RunTimeEndian>>;

/// A module's function symbols by file offset: (start, size, name), sorted; its sections
/// (file offset, size, address) to turn an offset into the address DWARF knows; its DWARF.
pub struct Symbols {
    funcs: Vec<(u64, u64, String)>,
    sections: Vec<(u64, u64, u64)>,
    dwarf: Option<Dwarf>,
    pub build_id: Option<String>,
    /// What keeping it costs, in bytes (an estimate: the DWARF sections count twice, for
    /// what addr2line parses of them as it answers).
    pub cost: u64,
}

impl Symbols {
    /// Reads the symbols of module `file` (`len` bytes when opened).
    pub fn load(file: &File, len: u64) -> Option<Symbols> {
        use object::{Object as _, ObjectSection as _};
        let data = Bounded::new(file.try_clone().ok()?, len, LOAD_BUDGET);
        let obj = object::File::parse(&data).ok()?;
        // Symbol values are virtual addresses; the mapping gives file offsets: convert
        // through the section that holds each address.
        let sections: Vec<(u64, u64, u64)> = obj
            .sections()
            .filter(|s| s.address() != 0)
            .filter_map(|s| Some((s.file_range()?.0, s.size(), s.address())))
            .take(1 << 16)
            .collect();
        let funcs = functions(&obj, &sections);
        let (dwarf, dwarf_bytes) = match obj.section_by_name(".debug_info") {
            Some(_) => dwarf(&obj, &data).map_or((None, 0), |(d, n)| (Some(d), n)),
            None => (None, 0),
        };
        let build_id = obj
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().take(64).map(|b| format!("{b:02x}")).collect());
        let cost = funcs
            .iter()
            .map(|f| FUNC_COST + f.2.len() as u64)
            .sum::<u64>()
            + sections.len() as u64 * 24
            + 2 * dwarf_bytes
            + 1024;
        Some(Symbols {
            funcs,
            sections,
            dwarf,
            build_id,
            cost,
        })
    }

    /// `name+0xoff` of the function holding file offset `off`.
    pub fn name(&self, off: u64) -> Option<String> {
        let i = self.funcs.partition_point(|f| f.0 <= off).checked_sub(1)?;
        let (start, size, name) = &self.funcs[i];
        (*size == 0 || off < start + size).then(|| format!("{name}+{:#x}", off - start))
    }

    /// The source file and line of the call that returns to file offset `ret` (DWARF
    /// line table; the byte before the return address is inside the call).
    pub fn line(&self, ret: u64) -> Option<(String, Option<u32>)> {
        let at = ret.checked_sub(1)?;
        let addr = self
            .sections
            .iter()
            .find(|&&(off, size, _)| off <= at && at < off + size)
            .map(|&(off, _, a)| at - off + a)?;
        let loc = self.dwarf.as_ref()?.find_location(addr).ok()??;
        Some((loc.file?.to_owned(), loc.line))
    }
}

/// The text symbols of `.symtab` and `.dynsym` by file offset, names within
/// [`FUNCS_BUDGET`].
fn functions<'a>(
    obj: &object::File<'a, &'a Bounded>,
    sections: &[(u64, u64, u64)],
) -> Vec<(u64, u64, String)> {
    use object::{Object as _, ObjectSymbol as _};
    let to_offset = |addr: u64| {
        sections
            .iter()
            .find(|&&(_, size, a)| a <= addr && addr < a + size)
            .map(|&(off, _, a)| addr - a + off)
    };
    let mut left = FUNCS_BUDGET;
    let mut funcs: Vec<(u64, u64, String)> = Vec::new();
    let symbols = obj.symbols().take(MAX_SYMBOLS);
    for s in symbols.chain(obj.dynamic_symbols().take(MAX_SYMBOLS)) {
        if s.kind() != object::SymbolKind::Text || s.address() == 0 {
            continue;
        }
        let (Some(off), Ok(name)) = (to_offset(s.address()), s.name()) else {
            continue;
        };
        let Some(rest) = left.checked_sub(FUNC_COST + name.len() as u64) else {
            break;
        };
        left = rest;
        funcs.push((off, s.size(), name.to_owned()));
    }
    if funcs.is_empty() {
        // A Go binary built without its symbol table still has the runtime's own.
        use object::ObjectSection as _;
        let tab = obj
            .section_by_name(".gopclntab")
            .and_then(|s| s.data().ok());
        for (addr, size, name) in tab.map(super::gopclntab::functions).unwrap_or_default() {
            let Some(off) = to_offset(addr) else {
                continue;
            };
            let Some(rest) = left.checked_sub(FUNC_COST + name.len() as u64) else {
                break;
            };
            left = rest;
            funcs.push((off, size, name));
        }
    }
    funcs.sort_unstable();
    funcs.dedup_by_key(|f| f.0);
    funcs
}

/// The DWARF of a module and the bytes of its sections, if they fit [`DWARF_BUDGET`].
fn dwarf<'a>(obj: &object::File<'a, &'a Bounded>, data: &Bounded) -> Option<(Dwarf, u64)> {
    use object::{Object as _, ObjectSection as _};
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut left = DWARF_BUDGET;
    let load = |id: gimli::SectionId| -> Result<gimli::EndianArcSlice<_>, ()> {
        let bytes: Arc<[u8]> = match obj.section_by_name(id.name()).and_then(|s| s.file_range()) {
            Some((off, size)) => {
                left = left.checked_sub(size).ok_or(())?;
                let want = usize::try_from(size).map_err(|_| ())?;
                let got = data.read_at(off, want).map_err(|_| ())?;
                if got.len() != want {
                    return Err(()); // truncated meanwhile
                }
                got.into()
            }
            None => Arc::from(Vec::new()),
        };
        Ok(gimli::EndianArcSlice::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    let bytes = DWARF_BUDGET - left;
    Some((addr2line::Context::from_dwarf(dwarf).ok()?, bytes))
}

/// (p_vaddr, p_offset) of the lowest executable PT_LOAD segment of ELF file `file`.
pub fn text_segment(file: &File, len: u64) -> Option<(u64, u64)> {
    use object::{
        elf::{FileHeader32, FileHeader64, PF_X, PT_LOAD},
        read::elf::{FileHeader, ProgramHeader as _},
        Endianness, FileKind,
    };
    fn lowest<H: FileHeader<Endian = Endianness>>(data: &Bounded) -> Option<(u64, u64)> {
        let elf = H::parse(data).ok()?;
        let e = elf.endian().ok()?;
        elf.program_headers(e, data)
            .ok()?
            .iter()
            .filter(|p| p.p_type(e) == PT_LOAD && p.p_flags(e) & PF_X != 0)
            .map(|p| (p.p_vaddr(e).into(), p.p_offset(e).into()))
            .min()
    }
    let data = Bounded::new(file.try_clone().ok()?, len, 1 << 20);
    match FileKind::parse(&data).ok()? {
        FileKind::Elf32 => lowest::<FileHeader32<Endianness>>(&data),
        FileKind::Elf64 => lowest::<FileHeader64<Endianness>>(&data),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_s_symbols_and_text_segment_are_read_within_budget() {
        let o = crate::untrusted::open_exe(std::process::id(), u64::MAX).expect("our exe");
        let (vaddr, off) = text_segment(&o.file, o.len).expect("an executable segment");
        assert!(vaddr >= off);
        let s = Symbols::load(&o.file, o.len).expect("symbols");
        assert!(!s.funcs.is_empty());
        assert!(
            s.cost <= FUNCS_BUDGET + 2 * DWARF_BUDGET + (1 << 22),
            "{}",
            s.cost
        );
        // This test binary's DWARF is far over the budget: named without lines.
        assert!(s.dwarf.is_none());
    }
}
