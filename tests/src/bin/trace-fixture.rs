//! Spawners whose pre-exec behaviour is known exactly, for `fdaudit trace` tests.
//!
//! Usage: trace-fixture MODE [ARG]. Every mode first closes the fds >= 3 it inherited, so what
//! its children inherit is exactly what the mode opened. Modes:
//! - `leak7 PATH`: opens PATH as inheritable fd 7, posix_spawn()s /bin/true (no file actions).
//! - `vfork`: vfork() + execve(/bin/true).
//! - `thread-exec`: fork(); in the child a second thread calls execve(/bin/true).
//! - `failed-exec`: fork(); the child execve()s a missing file, then /bin/true.
//! - `grandchild`: fork(); the child forks a grandchild that execs /bin/true, waits, exits.
//! - `wait-then-spawn PATH`: opens PATH as fd 7, prints `ready PID`, waits for a line on
//!   stdin, then fork()+execve(/bin/true) (for `trace -p`).
//! - `chain PATH`: opens PATH as fd 7, fork()s, and the child execs this fixture as
//!   `chain-helper`, a spawn helper that close_range()s (on start, like every mode) and
//!   execs /bin/true: fd 7 crosses the first exec but not the second.
//! - `fexecve-memfd`: copies this fixture into a memfd named `payload`, fork()s, and the
//!   child fexecve()s it (execveat(fd, "", AT_EMPTY_PATH): the kernel's file name is
//!   `/dev/fd/N`) as `linger`, which sleeps 300 ms and exits.
//! - `read-bytes N`: reads N bytes of a pipe it wrote itself, one byte per read() on fd 9
//!   (N + 1 read calls with the one that sees end of file).

use std::ffi::CString;
use std::io::{BufRead as _, Write as _};

const TRUE: &str = "/bin/true";

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn close_inherited() {
    // SAFETY: close_range on our own fd table.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
}

fn open_as(path: &str, fd: i32) {
    let p = cstr(path);
    // SAFETY: plain open/dup2/close with valid arguments.
    unsafe {
        let f = libc::open(p.as_ptr(), libc::O_RDONLY);
        assert!(f >= 0, "open {path}: {}", std::io::Error::last_os_error());
        assert_eq!(libc::dup2(f, fd), fd);
        if f != fd {
            libc::close(f);
        }
    }
}

fn wait_all() -> i32 {
    let mut worst = 0;
    loop {
        let mut st = 0;
        // SAFETY: waiting for our own children.
        let pid = unsafe { libc::wait(&mut st) };
        if pid < 0 {
            return worst;
        }
        if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
            worst = 1;
        }
    }
}

fn exec_true() -> ! {
    let path = cstr(TRUE);
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null()];
    // SAFETY: valid NUL-terminated argv/envp arrays.
    unsafe {
        libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        libc::_exit(127)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    close_inherited();
    match mode {
        "leak7" => {
            open_as(args.get(2).expect("leak7 PATH"), 7);
            let path = cstr(TRUE);
            let argv = [path.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
            let envp = [std::ptr::null_mut()];
            let mut pid = 0;
            // SAFETY: valid arguments; no file actions or attributes.
            let rc = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    path.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv.as_ptr(),
                    envp.as_ptr(),
                )
            };
            assert_eq!(rc, 0, "posix_spawn");
        }
        "vfork" => {
            let path = cstr(TRUE);
            let argv = [path.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: the vfork child only calls execve and _exit.
            unsafe {
                #[allow(deprecated)]
                let pid = libc::vfork();
                if pid == 0 {
                    libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127);
                }
            }
        }
        "thread-exec" => {
            // SAFETY: fork in a single-threaded process.
            if unsafe { libc::fork() } == 0 {
                let t = std::thread::spawn(|| exec_true());
                let _ = t.join();
                // SAFETY: unreachable unless exec failed.
                unsafe { libc::_exit(127) };
            }
        }
        "failed-exec" => {
            // SAFETY: fork in a single-threaded process; the child only execs.
            if unsafe { libc::fork() } == 0 {
                let missing = cstr("/nonexistent/fdaudit-fixture");
                let argv = [missing.as_ptr(), std::ptr::null()];
                let envp = [std::ptr::null()];
                unsafe { libc::execve(missing.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
                exec_true();
            }
        }
        "grandchild" => {
            // SAFETY: fork in a single-threaded process.
            if unsafe { libc::fork() } == 0 {
                if unsafe { libc::fork() } == 0 {
                    exec_true();
                }
                let code = wait_all();
                unsafe { libc::_exit(code) };
            }
        }
        "wait-then-spawn" => {
            open_as(args.get(2).expect("wait-then-spawn PATH"), 7);
            println!("ready {}", std::process::id());
            std::io::stdout().flush().expect("flush");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).expect("stdin");
            // SAFETY: fork in a single-threaded process.
            if unsafe { libc::fork() } == 0 {
                exec_true();
            }
        }
        "chain" => {
            open_as(args.get(2).expect("chain PATH"), 7);
            let me = std::fs::read_link("/proc/self/exe").expect("own exe");
            let me = CString::new(me.as_os_str().as_encoded_bytes()).expect("no NUL");
            let helper = cstr("chain-helper");
            let argv = [me.as_ptr(), helper.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: fork in a single-threaded process; the child only execs.
            if unsafe { libc::fork() } == 0 {
                unsafe {
                    libc::execve(me.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127);
                }
            }
        }
        "chain-helper" => exec_true(),
        "linger" => std::thread::sleep(std::time::Duration::from_millis(300)),
        "fexecve-memfd" => {
            let image = std::fs::read("/proc/self/exe").expect("own exe");
            let name = cstr("payload");
            let linger = cstr("linger");
            let argv = [name.as_ptr(), linger.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: memfd_create/write on our own fd; fork in a single-threaded process,
            // the child only execs.
            unsafe {
                let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
                assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
                let written = libc::write(fd, image.as_ptr().cast(), image.len());
                assert_eq!(written, image.len() as isize);
                if libc::fork() == 0 {
                    libc::fexecve(fd, argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127);
                }
            }
        }
        "read-bytes" => {
            let n: usize = args
                .get(2)
                .and_then(|s| s.parse().ok())
                .expect("read-bytes N");
            let mut fds = [0; 2];
            // SAFETY: pipe and byte-wise I/O on fds we own.
            unsafe {
                assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                // Read through fd 9, a number the dynamic loader did not use before us.
                assert_eq!(libc::dup2(fds[0], 9), 9);
                libc::close(fds[0]);
                fds[0] = 9;
                let data = vec![b'x'; n];
                assert_eq!(libc::write(fds[1], data.as_ptr().cast(), n), n as isize);
                libc::close(fds[1]);
                let mut b = 0u8;
                let mut got = 0;
                while libc::read(fds[0], (&mut b as *mut u8).cast(), 1) == 1 {
                    got += 1;
                }
                assert_eq!(got, n);
            }
        }
        _ => {
            eprintln!("usage: trace-fixture leak7 PATH|vfork|thread-exec|failed-exec|grandchild|wait-then-spawn PATH|read-bytes N");
            std::process::exit(2);
        }
    }
    std::process::exit(wait_all());
}
