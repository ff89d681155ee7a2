//! Function names of a Go binary without an ELF symbol table (`go build -ldflags=-s`, as
//! release and container builds often are) from its `.gopclntab`, the table Go's runtime
//! keeps for its own tracebacks. The layout is Go 1.18's and later's `pcHeader`
//! (`runtime/symtab.go`): magic, pad, pad, instruction quantum, pointer size, then
//! nfunc, nfiles, textStart, funcnameOffset, cuOffset, filetabOffset, pctabOffset,
//! pclnOffset (pointer-sized); at pclnOffset `nfunc + 1` pairs (entry offset from
//! textStart, `_func` offset from pclnOffset) of `u32`; each `_func` opens with its entry
//! offset and the offset of its NUL-terminated name in the name table. The table is the
//! module's (hostile) bytes: every offset is checked against the section, names are cut
//! at [`MAX_NAME`] and the walk at [`MAX_FUNCS`].

/// Go 1.18–1.19 and Go 1.20 and later.
const MAGICS: [u32; 2] = [0xffff_fff0, 0xffff_fff1];
/// Functions read from one table.
const MAX_FUNCS: usize = 1 << 18;
/// Bytes of one name.
const MAX_NAME: usize = 1024;

/// (virtual address, size, name) of each function of the little-endian table `tab`.
pub fn functions(tab: &[u8]) -> Vec<(u64, u64, String)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            tab.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let Some(magic) = u32_at(0) else {
        return Vec::new();
    };
    let ptr = usize::from(*tab.get(7).unwrap_or(&0));
    if !MAGICS.contains(&magic) || ptr != 8 {
        return Vec::new();
    }
    let word = |i: usize| -> Option<usize> {
        let at = 8 + i * 8;
        let b = tab.get(at..at + 8)?;
        usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let (Some(nfunc), Some(text), Some(names), Some(pcln)) = (word(0), word(2), word(3), word(7))
    else {
        return Vec::new();
    };
    let name_at = |off: u32| -> Option<String> {
        let start = names.checked_add(off as usize)?;
        let rest = tab.get(start..)?;
        let rest = &rest[..rest.len().min(MAX_NAME)];
        let end = memchr::memchr(0, rest)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    let entry = |i: usize| -> Option<(u32, u32)> {
        let at = pcln.checked_add(i.checked_mul(8)?)?;
        Some((u32_at(at)?, u32_at(at.checked_add(4)?)?))
    };
    let mut out = Vec::new();
    for i in 0..nfunc.min(MAX_FUNCS) {
        let (Some((start, func)), Some((next, _))) = (entry(i), entry(i + 1)) else {
            break;
        };
        let name = pcln
            .checked_add(func as usize)
            .and_then(|f| u32_at(f.checked_add(4)?))
            .and_then(name_at);
        let addr = (text as u64).checked_add(u64::from(start));
        if let (Some(name), Some(addr)) = (name, addr) {
            let size = u64::from(next.saturating_sub(start));
            out.push((addr, size, name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of two functions at textStart 0x401000: `main.a` at +0x10, `main.b` at
    /// +0x40, ending at +0x70.
    fn table() -> Vec<u8> {
        let mut t = vec![0u8; 72];
        t[..4].copy_from_slice(&0xffff_fff1u32.to_le_bytes());
        t[6] = 1;
        t[7] = 8;
        let names_at = 200usize;
        let pcln_at = 72usize;
        for (i, v) in [2usize, 0, 0x401000, names_at, 0, 0, 0, pcln_at]
            .into_iter()
            .enumerate()
        {
            t[8 + i * 8..16 + i * 8].copy_from_slice(&(v as u64).to_le_bytes());
        }
        // functab: (0x10, 24), (0x40, 32), (0x70, 0); the _funcs at pcln+24 and pcln+32.
        for (e, f) in [(0x10u32, 24u32), (0x40, 32), (0x70, 0)] {
            t.extend_from_slice(&e.to_le_bytes());
            t.extend_from_slice(&f.to_le_bytes());
        }
        for (e, n) in [(0x10u32, 0u32), (0x40, 7)] {
            t.extend_from_slice(&e.to_le_bytes());
            t.extend_from_slice(&n.to_le_bytes());
        }
        t.resize(names_at, 0);
        t.extend_from_slice(b"main.a\0main.b\0");
        t
    }

    #[test]
    fn a_table_s_functions_are_named_with_their_addresses_and_sizes() {
        assert_eq!(
            functions(&table()),
            [
                (0x401010, 0x30, "main.a".to_owned()),
                (0x401040, 0x30, "main.b".to_owned())
            ]
        );
    }

    #[test]
    fn a_cut_or_foreign_table_gives_what_it_holds_and_never_panics() {
        let t = table();
        for len in 0..t.len() {
            let got = functions(&t[..len]);
            assert!(got.len() <= 2, "{len}: {got:?}");
        }
        let mut other = t.clone();
        other[0] = 0xfb; // Go 1.16's magic: not read
        assert!(functions(&other).is_empty());
        let mut huge = t;
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // nfunc
        huge[64..72].copy_from_slice(&(u64::MAX - 3).to_le_bytes()); // pclnOffset
        assert!(functions(&huge).is_empty());
        let mut high = table();
        high[24..32].copy_from_slice(&u64::MAX.to_le_bytes()); // textStart
        assert!(functions(&high).is_empty());
    }
}
