//! Fixture for `trace --reads`: `read-patterns A B C` reads, through one fd number reused
//! for three files: A with 30 reads of 2000 bytes then 500 one-byte reads (a storm hidden in
//! the average), B with 30 reads of 2000 bytes (no storm), C with 500 one-byte reads (a
//! storm on a reused fd number). Prints the fd number used.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;

use fdaudit_tests::check;

fn open(path: &std::ffi::OsStr) -> i32 {
    let c = CString::new(path.as_bytes()).expect("a path without NUL");
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY) }, "open")
}

fn reads(fd: i32, n: usize, size: usize) {
    let mut buf = vec![0u8; size];
    for _ in 0..n {
        // SAFETY: reading into a buffer of `size` bytes.
        let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), size) };
        assert_eq!(got, size as isize, "the file is long enough");
    }
}

fn main() {
    let paths: Vec<_> = std::env::args_os().skip(1).collect();
    assert_eq!(paths.len(), 3, "usage: read-patterns A B C");
    let a = open(&paths[0]);
    reads(a, 30, 2000);
    reads(a, 500, 1);
    // SAFETY: closing our fd; the next open takes the same number.
    unsafe { libc::close(a) };
    let b = open(&paths[1]);
    assert_eq!(a, b, "the fd number is reused");
    reads(b, 30, 2000);
    // SAFETY: as above.
    unsafe { libc::close(b) };
    let c = open(&paths[2]);
    assert_eq!(a, c, "the fd number is reused");
    reads(c, 500, 1);
    println!("fd {a}");
}
