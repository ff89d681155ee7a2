//! CPython 3.11+'s location table (`co_linetable`, Objects/locations.md): the source line of
//! an instruction. The bytes come from the traced process: every read is checked, the walk
//! ends with the table, and a malformed entry gives no line.

/// Reads a varint (6 bits per byte, 0x40: more follow) at `*at`.
fn varint(t: &[u8], at: &mut usize) -> Option<u32> {
    let mut val: u32 = 0;
    let mut shift = 0u32;
    loop {
        let b = *t.get(*at)?;
        *at += 1;
        if shift > 30 {
            return None;
        }
        val |= u32::from(b & 0x3f) << shift;
        shift += 6;
        if b & 0x40 == 0 {
            return Some(val);
        }
    }
}

/// A signed varint: the sign in the lowest bit.
fn svarint(t: &[u8], at: &mut usize) -> Option<i64> {
    let v = varint(t, at)?;
    Some(if v & 1 != 0 {
        -i64::from(v >> 1)
    } else {
        i64::from(v >> 1)
    })
}

/// The entry at `*at` (moved past it): its code units, and the line delta it brings, or
/// `None` in the delta for an entry without a location; `None` for a byte that does not
/// start an entry or a varint cut by the table's end.
fn entry(table: &[u8], at: &mut usize) -> Option<(u64, Option<i64>)> {
    let first = *table.get(*at)?;
    *at += 1;
    if first & 0x80 == 0 {
        // Not the first byte of an entry: the table is malformed.
        return None;
    }
    let code = (first >> 3) & 0x0f;
    let units = u64::from(first & 0x07) + 1;
    let delta = match code {
        // Short forms: the same line, one byte of columns.
        0..=9 => {
            *at += 1;
            Some(0)
        }
        // One-line forms: the line moves by 0-2, two bytes of columns.
        10..=12 => {
            *at += 2;
            Some(i64::from(code - 10))
        }
        // No columns: a line delta.
        13 => Some(svarint(table, at)?),
        // Long form: line delta, end line delta, start and end columns.
        14 => {
            let d = svarint(table, at)?;
            for _ in 0..3 {
                varint(table, at)?;
            }
            Some(d)
        }
        // No location.
        _ => None,
    };
    Some((units, delta))
}

/// The line of the instruction at `instr` (in code units from the start of the code) of a
/// code object whose first line is `first_line` and location table `table`. `None`: the
/// table gives it no line (an artificial instruction) or it is not in the table.
pub fn line_of(table: &[u8], first_line: i64, instr: u64) -> Option<u32> {
    let mut line = first_line;
    let mut addr: u64 = 0;
    let mut at = 0usize;
    while at < table.len() {
        let (len, delta) = entry(table, &mut at)?;
        line += delta.unwrap_or(0);
        if instr < addr + len {
            return delta.and_then(|_| u32::try_from(line).ok());
        }
        addr += len;
    }
    None
}

/// The code units `table` describes, when every entry is whole and the last one ends
/// where the table does; `None` otherwise. CPython's compiler gives every code unit of a
/// code object (`Py_SIZE`, caches included) an entry, so a table of that code object
/// covers exactly its size: one that does not is not its table ([`super::code`]).
pub fn units(table: &[u8]) -> Option<u64> {
    let mut units: u64 = 0;
    let mut at = 0usize;
    while at < table.len() {
        units += entry(table, &mut at)?.0;
    }
    (at == table.len()).then_some(units)
}

#[cfg(test)]
mod tests {
    use super::{line_of, units};

    #[test]
    fn the_location_table_gives_each_instruction_its_line() {
        let t: &[u8] = &[
            0x80, 0x00, // code 0 (short form), 1 unit: line 1
            0xd9, 0x08, 0x09, // code 11 (line +1), 2 units: line 2
            0xe8, 0x06, // code 13 (no columns), 1 unit: line +3
            0x00, 0x02, // not the start of an entry
        ];
        assert_eq!(line_of(t, 1, 0), Some(1));
        assert_eq!(line_of(t, 1, 1), Some(2));
        assert_eq!(line_of(t, 1, 2), Some(2));
        assert_eq!(line_of(t, 1, 3), Some(5));
        assert_eq!(line_of(t, 1, 4), None, "past a malformed entry");
    }

    #[test]
    fn long_forms_negative_deltas_and_no_location() {
        let t: &[u8] = &[
            // code 14 (long), 3 units: line delta +10 (svarint 20 = 0x14), end line
            // delta 0, columns 4 and 0x41 0x01 (a two-byte varint).
            0xf2, 0x14, 0x00, 0x04, 0x41, 0x01,
            // code 13, 1 unit: line delta -2 (svarint 5).
            0xe8, 0x05, // code 15, 2 units: no location.
            0xf9,
        ];
        assert_eq!(line_of(t, 7, 0), Some(17));
        assert_eq!(line_of(t, 7, 2), Some(17));
        assert_eq!(line_of(t, 7, 3), Some(15));
        assert_eq!(line_of(t, 7, 4), None);
        assert_eq!(line_of(t, 7, 5), None);
        assert_eq!(line_of(t, 7, 6), None, "past the table");
    }

    /// CPython 3.12.1's table for `def make_leak(path)` (line 1) whose body is on lines 2, 3
    /// and 5, against what its `co_positions()` says of each code unit.
    #[test]
    fn a_real_table_matches_cpythons_own_positions() {
        let t: &[u8] = &[
            128, 0, 220, 9, 13, 136, 100, 139, 26, 128, 66, 220, 20, 25, 152, 33, 147, 72, 214, 8,
            29, 136, 113, 138, 17, 208, 8, 29, 128, 65, 208, 8, 29, 224, 11, 13, 143, 57, 137, 57,
            139, 59, 156, 19, 152, 81, 155, 22, 209, 11, 31, 208, 4, 31, 249, 242, 5, 0, 9, 30,
        ];
        let want = |i: u64| match i {
            0 => Some(1),
            1..=11 => Some(2),
            12..=35 | 66..=68 => Some(3),
            36..=63 => Some(5),
            _ => None,
        };
        for i in 0..70 {
            assert_eq!(line_of(t, 1, i), want(i), "code unit {i}");
        }
        // It covers each of the 69 code units the test looks up, and no more.
        assert_eq!(units(t), Some(69));
    }

    #[test]
    fn a_table_covers_its_units_only_when_whole() {
        assert_eq!(units(&[]), Some(0));
        assert_eq!(units(&[0x80, 0x00, 0xd9, 0x08, 0x09, 0xe8, 0x06]), Some(4));
        assert_eq!(units(&[0xf2, 0x14, 0x00, 0x04, 0x41, 0x01, 0xf9]), Some(5));
        // Cut inside an entry's columns, inside a varint; a byte that starts no entry.
        assert_eq!(units(&[0x80, 0x00, 0xd9, 0x08]), None);
        assert_eq!(units(&[0xe8, 0x46]), None);
        assert_eq!(units(&[0x80, 0x00, 0x00]), None);
    }

    #[test]
    fn hostile_tables_end_without_a_line() {
        assert_eq!(line_of(&[], 1, 0), None);
        // A varint that never ends, one too long, a cut entry.
        assert_eq!(line_of(&[0xe8, 0x7f, 0x7f], 1, 0), None);
        assert_eq!(
            line_of(&[0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x01], 1, 0),
            None
        );
        assert_eq!(line_of(&[0xf0], 1, 0), None);
        // A line below zero.
        assert_eq!(line_of(&[0xe8, 0x05], 1, 0), None);
        // 256 KiB of short entries: walked to the end, no loop.
        let big = vec![0x80u8; 256 << 10];
        assert_eq!(line_of(&big, 3, u64::MAX), None);
        assert_eq!(line_of(&big, 3, 1000), Some(3));
    }
}
