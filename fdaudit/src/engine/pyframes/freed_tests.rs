//! Code objects crafted in this test process's own memory, read through its
//! /proc/self/mem as fdaudit reads a traced CPython's (issue #38): a live one is named with
//! its line; a freed one (reference count 0 or a free-list link, type changed) or one whose
//! location table does not cover its code says so and is never named; the cache keeps
//! such a verdict only for the records made before it.

use fdaudit_common::PyFramesRecord;

use super::{
    code::{read_code, NotRead},
    detect::Types,
    memory::Mem,
    offsets::{table, CodeLayout},
    Registry, Resolver, Status,
};

const TYPES: Types = Types {
    code: 0x5550_0000_1000,
    bytes: 0x5550_0000_2000,
    str: 0x5550_0000_3000,
};

/// CPython 3.12.1's location table of a `make_leak` of 69 code units (line 1 to 5), as in
/// linetable.rs's test.
const TABLE: &[u8] = &[
    128, 0, 220, 9, 13, 136, 100, 139, 26, 128, 66, 220, 20, 25, 152, 33, 147, 72, 214, 8, 29, 136,
    113, 138, 17, 208, 8, 29, 128, 65, 208, 8, 29, 224, 11, 13, 143, 57, 137, 57, 139, 59, 156, 19,
    152, 81, 155, 22, 209, 11, 31, 208, 4, 31, 249, 242, 5, 0, 9, 30,
];
const UNITS: u64 = 69;

fn layout() -> CodeLayout {
    table(0x030c_01f0).expect("3.12").code
}

fn put(b: &mut [u8], at: u64, v: u64) {
    b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
}

/// A code object and the objects it names, each in its own heap buffer (which does not
/// move while the test holds it).
struct Fake {
    code: Vec<u8>,
    qualname: Vec<u8>,
    filename: Vec<u8>,
    linetable: Vec<u8>,
}

impl Fake {
    fn new(table: &[u8], units: u64) -> Fake {
        let l = layout();
        let mut f = Fake {
            code: vec![0; (l.code_adaptive + 2 * units) as usize],
            qualname: ascii(&l, "make_leak"),
            filename: ascii(&l, "/srv/leak.py"),
            linetable: vec![0; l.bytes_data as usize + table.len() + 1],
        };
        let b = &mut f.linetable;
        put(b, 0, 1);
        put(b, l.ob_type, TYPES.bytes);
        put(b, l.bytes_size, table.len() as u64);
        b[l.bytes_data as usize..][..table.len()].copy_from_slice(table);
        let (q, n, t) = (
            f.addr(&f.qualname),
            f.addr(&f.filename),
            f.addr(&f.linetable),
        );
        let c = &mut f.code;
        put(c, 0, 3);
        put(c, l.ob_type, TYPES.code);
        put(c, l.bytes_size, units);
        put(c, l.qualname, q);
        put(c, l.filename, n);
        put(c, l.linetable, t);
        c[l.firstlineno as usize..][..4].copy_from_slice(&1u32.to_le_bytes());
        f
    }

    fn addr(&self, b: &[u8]) -> u64 {
        b.as_ptr() as u64
    }

    fn at(&self) -> u64 {
        self.addr(&self.code)
    }

    /// The address of the instruction at code unit `u`.
    fn instr(&self, u: u64) -> u64 {
        self.at() + layout().code_adaptive + 2 * u
    }
}

/// A compact ASCII str object.
fn ascii(l: &CodeLayout, s: &str) -> Vec<u8> {
    let mut b = vec![0; l.str_ascii_data as usize + s.len() + 1];
    put(&mut b, 0, 1);
    put(&mut b, l.ob_type, TYPES.str);
    put(&mut b, l.str_length, s.len() as u64);
    // kind 1, compact, ascii.
    put(&mut b, l.str_state, (1 << 2) | (1 << 5) | (1 << 6));
    b[l.str_ascii_data as usize..][..s.len()].copy_from_slice(s.as_bytes());
    b
}

fn mem() -> Mem {
    Mem::open(std::process::id()).expect("/proc/self/mem")
}

fn freed(r: Result<super::code::Code, NotRead>) -> String {
    match r {
        Err(NotRead::Freed(what)) => NotRead::Freed(what).why(),
        other => panic!("not said to be freed: {other:?}"),
    }
}

#[test]
fn a_live_code_object_is_named_with_its_lines() {
    let (f, l) = (Fake::new(TABLE, UNITS), layout());
    let c = read_code(&mem(), &l, &TYPES, f.at()).expect("a live code object");
    assert_eq!(
        (c.qualname.as_str(), c.filename.as_str()),
        ("make_leak", "/srv/leak.py")
    );
    assert_eq!(c.line(&l, f.at(), f.instr(0)), Ok(Some(1)));
    assert_eq!(c.line(&l, f.at(), f.instr(40)), Ok(Some(5)));
    // Code unit 64 has no location: no line, and nothing wrong.
    assert_eq!(c.line(&l, f.at(), f.instr(64)), Ok(None));
}

#[test]
fn a_freed_code_object_is_said_freed_never_named() {
    let l = layout();
    // Reference count 0; a pymalloc free-list link over it; a type that changed.
    for (at, v, what) in [
        (0, 0, "reference count reads 0x0"),
        (0, 0x7f3a_1234_5670, "reference count reads 0x7f3a12345670"),
        (l.ob_type, 0x7f3a_0000_0040, "type reads 0x7f3a00000040"),
    ] {
        let mut f = Fake::new(TABLE, UNITS);
        put(&mut f.code, at, v);
        let why = freed(read_code(&mem(), &l, &TYPES, f.at()));
        assert!(why.starts_with("the code object was freed before fdaudit read it ("));
        assert!(why.contains(what), "{why}");
    }
    // The name or the location table freed (their memory reused).
    let mut f = Fake::new(TABLE, UNITS);
    put(&mut f.qualname, 0, 0);
    assert!(freed(read_code(&mem(), &l, &TYPES, f.at())).contains("its name"));
    let mut f = Fake::new(TABLE, UNITS);
    put(&mut f.linetable, l.ob_type, TYPES.str);
    assert!(freed(read_code(&mem(), &l, &TYPES, f.at())).contains("its location table"));
}

#[test]
fn a_location_table_that_does_not_cover_the_code_gives_no_name_and_says_why() {
    let l = layout();
    // Empty (ob_size 0, as read under a finalizing interpreter), cut in an entry, cut at an
    // entry's end (fewer units than the code has).
    for table in [&TABLE[..0], &TABLE[..TABLE.len() - 1], &TABLE[..2]] {
        let f = Fake::new(table, UNITS);
        let why = freed(read_code(&mem(), &l, &TYPES, f.at()));
        assert!(why.contains("does not cover its 69 code units"), "{why}");
    }
    // The instruction the frame ran is not in the code object found at its address.
    let f = Fake::new(TABLE, UNITS);
    let c = read_code(&mem(), &l, &TYPES, f.at()).expect("a live code object");
    for instr in [f.instr(UNITS), f.at(), f.instr(0) - 2] {
        match c.line(&l, f.at(), instr) {
            Err(NotRead::Freed(what)) => assert!(what.contains("not one of its 69"), "{what}"),
            other => panic!("{instr:#x}: {other:?}"),
        }
    }
}

fn record(code: u64, instr: u64, time_ns: u64) -> PyFramesRecord {
    // SAFETY: a plain-integer record; all zeroes is a valid value.
    let mut rec: PyFramesRecord = unsafe { std::mem::zeroed() };
    rec.pid = std::process::id();
    rec.nframes = 1;
    rec.time_ns = time_ns;
    rec.code[0] = code;
    rec.instr[0] = instr;
    rec
}

#[test]
fn the_cache_keeps_a_freed_verdict_only_for_records_made_before_it() {
    let reg = Registry::default();
    let status = Status::Python {
        code: layout(),
        types: TYPES,
    };
    reg.status
        .lock()
        .expect("status")
        .insert(std::process::id(), status);
    let mut f = Fake::new(TABLE, UNITS);
    put(&mut f.code, 0, 0);
    let mut resolver = Resolver::default();
    let frames = resolver.frames(&reg, &record(f.at(), f.instr(40), 1));
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].symbol, None, "{frames:?}");
    let why = frames[0].unnamed.as_deref().expect("a reason");
    assert!(
        why.starts_with("Python frame not read: the code object was freed before fdaudit"),
        "{why}"
    );
    // A new code object at that address: the same record (made before the verdict) is
    // still said freed; a record made after it names the new object.
    put(&mut f.code, 0, 1);
    let again = resolver.frames(&reg, &record(f.at(), f.instr(40), 2));
    assert_eq!(again[0].symbol, None, "{again:?}");
    let later = super::monotonic_ns();
    let named = resolver.frames(&reg, &record(f.at(), f.instr(40), later));
    assert_eq!(named[0].symbol.as_deref(), Some("make_leak"), "{named:?}");
    assert_eq!(named[0].line, Some(5));
    // A good object read is kept as before.
    let kept = resolver.frames(&reg, &record(f.at(), f.instr(0), 1));
    assert_eq!(kept[0].line, Some(1));
}
