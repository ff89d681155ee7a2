//! Where CPython 3.11, 3.12 and 3.13 keep what the Python walk reads. 3.11 and 3.12: tables
//! for those versions, from CPython's headers (checked against pyenv's 3.11.7 and 3.12.1
//! with gdb: docs/architecture.md, "Python frames"); 3.13: its own `_Py_DebugOffsets`, at the start of
//! `_PyRuntime` (cookie `xdebugpy`), read from the process and checked. Any other version
//! is unsupported: no guess.

use fdaudit_common::{PyProc, PY_DIRECT};

/// What userspace reads of a code object and a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLayout {
    pub filename: u64,
    pub qualname: u64,
    pub firstlineno: u64,
    pub linetable: u64,
    /// `co_code_adaptive`: the first instruction.
    pub code_adaptive: u64,
    /// PyASCIIObject's `length` and `state`, and where a compact string's characters are
    /// (ASCII: after a PyASCIIObject; else after a PyCompactUnicodeObject).
    pub str_length: u64,
    pub str_state: u64,
    pub str_ascii_data: u64,
    pub str_compact_data: u64,
    /// PyBytesObject's `ob_size` and `ob_sval`. `bytes_size` is PyVarObject's `ob_size`,
    /// also a code object's size in code units.
    pub bytes_size: u64,
    pub bytes_data: u64,
    /// PyObject's `ob_refcnt` (None: a free-threaded build, whose count is split in two)
    /// and `ob_type`: what tells a live object from a freed one ([`super::check`]).
    pub ob_refcnt: Option<u64>,
    pub ob_type: u64,
}

/// A supported version's layout: the kernel's part ([`PyProc`], without the address) and
/// userspace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub walk: PyProc,
    pub code: CodeLayout,
}

/// `Py_Version` (PY_VERSION_HEX) as text: `3.12.1`.
pub fn version_text(hex: u32) -> String {
    format!("{}.{}.{}", hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff)
}

/// (major, minor) of a PY_VERSION_HEX.
fn minor(hex: u32) -> (u32, u32) {
    (hex >> 24, (hex >> 16) & 0xff)
}

/// Whether the version needs `_Py_DebugOffsets` (3.13) rather than a table.
pub fn needs_debug_offsets(hex: u32) -> bool {
    minor(hex) == (3, 13)
}

/// The table of a 3.11 or 3.12 interpreter; why not otherwise.
pub fn table(hex: u32) -> Result<Layout, String> {
    let l = match minor(hex) {
        (3, 11) => Layout {
            walk: PyProc {
                runtime: 0,
                interpreters_head: 40,
                interp_next: 0,
                interp_threads: 16,
                tstate_next: 8,
                tstate_native_tid: 160,
                tstate_frame: 56,
                cframe_frame: 8,
                frame_previous: 48,
                frame_code: 32,
                frame_instr: 56,
                frame_owner: 69,
            },
            code: CodeLayout {
                filename: 112,
                qualname: 128,
                firstlineno: 72,
                linetable: 136,
                code_adaptive: 184,
                str_length: 16,
                str_state: 32,
                str_ascii_data: 48,
                str_compact_data: 72,
                bytes_size: 16,
                bytes_data: 32,
                ob_refcnt: Some(0),
                ob_type: 8,
            },
        },
        (3, 12) => Layout {
            walk: PyProc {
                runtime: 0,
                interpreters_head: 40,
                interp_next: 0,
                interp_threads: 72,
                tstate_next: 8,
                tstate_native_tid: 144,
                tstate_frame: 56,
                cframe_frame: 0,
                frame_previous: 8,
                frame_code: 0,
                frame_instr: 56,
                frame_owner: 70,
            },
            code: CodeLayout {
                filename: 112,
                qualname: 128,
                firstlineno: 68,
                linetable: 136,
                code_adaptive: 192,
                str_length: 16,
                str_state: 32,
                str_ascii_data: 40,
                str_compact_data: 56,
                bytes_size: 16,
                bytes_data: 32,
                ob_refcnt: Some(0),
                ob_type: 8,
            },
        },
        _ => return Err(unsupported(hex)),
    };
    Ok(l)
}

/// The plain statement for a version fdaudit does not read.
pub fn unsupported(hex: u32) -> String {
    format!(
        "Python frames unsupported: CPython {} (fdaudit reads 3.11, 3.12 and 3.13)",
        version_text(hex)
    )
}

/// Bytes of `_Py_DebugOffsets` read (3.13.0's size; the fields used are in them).
pub const DEBUG_OFFSETS_LEN: usize = 584;
/// Largest offset accepted from the process: past it the table is not believed.
const MAX_OFFSET: u64 = 1 << 20;

fn field(b: &[u8], at: usize) -> Result<u64, String> {
    let bytes = b
        .get(at..at + 8)
        .ok_or_else(|| "_Py_DebugOffsets cut short".to_string())?;
    let v = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    if v > MAX_OFFSET {
        return Err(format!(
            "_Py_DebugOffsets field at {at} is {v}: not believed"
        ));
    }
    Ok(v)
}

/// The layout a 3.13 interpreter describes in the `_Py_DebugOffsets` at the start of its
/// `_PyRuntime` (`b`, [`DEBUG_OFFSETS_LEN`] bytes), for the version `hex` its `Py_Version`
/// says: the cookie and the version must agree, every offset be plausible.
pub fn from_debug_offsets(b: &[u8], hex: u32) -> Result<Layout, String> {
    if b.get(..8) != Some(b"xdebugpy".as_slice()) {
        return Err("no _Py_DebugOffsets cookie at _PyRuntime".into());
    }
    let version = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    if version >> 16 != u64::from(hex >> 16) || !needs_debug_offsets(hex) {
        return Err(format!(
            "_Py_DebugOffsets says version {version:#x}, Py_Version {hex:#x}: not read"
        ));
    }
    // Offsets into the 3.13.0 struct (Include/internal/pycore_runtime.h).
    let f = |at| field(b, at);
    // `free_threaded`: such a build splits the reference count (not checked there).
    let free_threaded = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")) != 0;
    Ok(Layout {
        walk: PyProc {
            runtime: 0,
            interpreters_head: f(40)?,
            interp_next: f(64)?,
            interp_threads: f(72)?,
            tstate_next: f(168)?,
            tstate_native_tid: f(200)?,
            tstate_frame: f(184)?,
            cframe_frame: PY_DIRECT,
            frame_previous: f(232)?,
            frame_code: f(240)?,
            frame_instr: f(248)?,
            frame_owner: f(264)?,
        },
        code: CodeLayout {
            filename: f(280)?,
            qualname: f(296)?,
            firstlineno: f(312)?,
            linetable: f(304)?,
            code_adaptive: f(344)?,
            str_length: f(552)?,
            str_state: f(544)?,
            str_ascii_data: f(560)?,
            // PyCompactUnicodeObject: the ASCII header, utf8_length and utf8.
            str_compact_data: f(560)? + 16,
            bytes_size: f(520)?,
            bytes_data: f(528)?,
            ob_refcnt: (!free_threaded).then_some(0),
            ob_type: f(360)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `_Py_DebugOffsets` of pyenv's 3.13.0 (`print _PyRuntime.debug_offsets` in gdb),
    /// as the bytes at `_PyRuntime`.
    fn debug_offsets_3_13_0() -> Vec<u8> {
        let mut b = vec![0u8; DEBUG_OFFSETS_LEN];
        b[..8].copy_from_slice(b"xdebugpy");
        let put =
            |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut b, 8, 0x030d_00f0);
        for (at, v) in [
            (40, 632),
            (64, 7264),
            (72, 7344),
            (168, 8),
            (184, 72),
            (200, 160),
            (232, 8),
            (240, 0),
            (248, 56),
            (264, 70),
            (280, 112),
            (296, 128),
            (304, 136),
            (312, 68),
            (344, 200),
            (520, 16),
            (528, 32),
            (544, 32),
            (552, 16),
            (560, 40),
            (360, 8),
        ] {
            put(&mut b, at, v);
        }
        b
    }

    #[test]
    fn a_3_13_layout_comes_from_its_debug_offsets() {
        let l = from_debug_offsets(&debug_offsets_3_13_0(), 0x030d_00f0).expect("3.13.0");
        assert_eq!(l.walk.interpreters_head, 632);
        assert_eq!((l.walk.interp_next, l.walk.interp_threads), (7264, 7344));
        assert_eq!((l.walk.tstate_native_tid, l.walk.tstate_frame), (160, 72));
        assert_eq!(l.walk.cframe_frame, PY_DIRECT);
        let w = l.walk;
        assert_eq!(
            (w.frame_previous, w.frame_code, w.frame_instr, w.frame_owner),
            (8, 0, 56, 70)
        );
        let c = l.code;
        assert_eq!(
            (c.filename, c.qualname, c.linetable, c.firstlineno),
            (112, 128, 136, 68)
        );
        assert_eq!(
            (c.code_adaptive, c.str_ascii_data, c.str_compact_data),
            (200, 40, 56)
        );
        assert_eq!((c.ob_refcnt, c.ob_type), (Some(0), 8));
        let mut ft = debug_offsets_3_13_0();
        ft[16] = 1;
        let l = from_debug_offsets(&ft, 0x030d_00f0).expect("3.13.0t");
        assert_eq!(l.code.ob_refcnt, None, "a free-threaded count is not read");
    }

    #[test]
    fn debug_offsets_that_disagree_are_not_believed() {
        let good = debug_offsets_3_13_0();
        let mut cookie = good.clone();
        cookie[0] = b'y';
        assert!(from_debug_offsets(&cookie, 0x030d_00f0).is_err());
        // Py_Version says 3.12, or 3.14.
        assert!(from_debug_offsets(&good, 0x030c_01f0).is_err());
        assert!(from_debug_offsets(&good, 0x030e_00f0).is_err());
        let mut huge = good.clone();
        huge[72..80].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(from_debug_offsets(&huge, 0x030d_00f0)
            .unwrap_err()
            .contains("not believed"));
        assert!(from_debug_offsets(&good[..100], 0x030d_00f0).is_err());
    }

    /// The tables, against gdb's offsets in pyenv's 3.11.7 and 3.12.1 (docs/architecture.md
    /// has the command); Debian's 3.11.2 is checked by the integration test.
    #[test]
    fn the_tables_are_the_headers_offsets() {
        let l = table(0x030b_07f0).expect("3.11");
        assert_eq!((l.walk.interp_threads, l.walk.tstate_native_tid), (16, 160));
        assert_eq!((l.walk.tstate_frame, l.walk.cframe_frame), (56, 8));
        let w = l.walk;
        assert_eq!(
            (w.frame_previous, w.frame_code, w.frame_instr, w.frame_owner),
            (48, 32, 56, 69)
        );
        assert_eq!(
            (
                l.code.firstlineno,
                l.code.code_adaptive,
                l.code.str_ascii_data
            ),
            (72, 184, 48)
        );
        let l = table(0x030c_01f0).expect("3.12");
        assert_eq!((l.walk.interp_threads, l.walk.tstate_native_tid), (72, 144));
        assert_eq!((l.walk.tstate_frame, l.walk.cframe_frame), (56, 0));
        let w = l.walk;
        assert_eq!(
            (w.frame_previous, w.frame_code, w.frame_instr, w.frame_owner),
            (8, 0, 56, 70)
        );
        assert_eq!(
            (
                l.code.firstlineno,
                l.code.code_adaptive,
                l.code.str_ascii_data
            ),
            (68, 192, 40)
        );
    }

    #[test]
    fn other_versions_are_unsupported_plainly() {
        for hex in [0x030a_0df0, 0x0207_12f0, 0x030e_00a1] {
            let e = table(hex).unwrap_err();
            assert!(e.starts_with("Python frames unsupported: CPython "), "{e}");
        }
        assert!(table(0x030a_0df0).unwrap_err().contains("3.10.13"));
        assert!(needs_debug_offsets(0x030d_00f0) && !needs_debug_offsets(0x030c_01f0));
    }
}
