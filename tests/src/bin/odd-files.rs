//! Fixture: `odd-files EXE DIR` holds, inheritable, a memfd named `fdaudit-short`, a memfd
//! with a 100-byte name, a file of DIR deleted while open, and a file under a 60-byte
//! directory name of DIR; then forks a child that execs `EXE 1` and waits for it. Prints
//! `fds SHORT LONG DELETED DEEP`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;

use fdaudit_tests::check;

fn cpath(p: &std::path::Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("a path without NUL")
}

fn main() {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    assert_eq!(args.len(), 2, "usage: odd-files EXE DIR");
    let exe = cpath(std::path::Path::new(&args[0]));
    let dir = std::path::PathBuf::from(&args[1]);
    let long_name = CString::new("x".repeat(100)).unwrap();
    let deleted = dir.join("deleted-file");
    let deep_dir = dir.join("c".repeat(60));
    std::fs::create_dir_all(&deep_dir).expect("create the long-named directory");
    let deep = deep_dir.join("file");
    std::fs::write(&deep, "x").expect("write a file");
    std::fs::write(&deleted, "x").expect("write a file");
    // SAFETY: plain syscalls on NUL-terminated strings; the child only execs or _exits.
    unsafe {
        let short = check(
            libc::memfd_create(c"fdaudit-short".as_ptr(), 0),
            "memfd_create",
        );
        let long = check(libc::memfd_create(long_name.as_ptr(), 0), "memfd_create");
        let del = check(libc::open(cpath(&deleted).as_ptr(), libc::O_RDONLY), "open");
        check(libc::unlink(cpath(&deleted).as_ptr()), "unlink");
        let deep_fd = check(libc::open(cpath(&deep).as_ptr(), libc::O_RDONLY), "open");
        println!("fds {short} {long} {del} {deep_fd}");
        let pid = check(libc::fork(), "fork");
        if pid == 0 {
            let argv = [exe.as_ptr(), c"1".as_ptr(), std::ptr::null()];
            libc::execv(exe.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
        fdaudit_tests::wait_for_success(pid);
    }
}
