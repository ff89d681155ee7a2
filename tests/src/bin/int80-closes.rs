//! Fixture: a 64-bit child that closes fds 3..1024 through the 32-bit `int $0x80` entry
//! (1021 ia32 close calls, number 6) and makes 500 one-byte ia32 `read`s (number 3, which is
//! x86_64's close) from /dev/zero into a buffer below 4 GiB, then execs /bin/true. Prints
//! `int80 ok` when the kernel runs ia32 syscalls. When it does not (a kernel without
//! CONFIG_IA32_EMULATION, booted with it off, or not x86_64) it prints `int80 unavailable:
//! WHY` (`ENOSYS`, `SIGSEGV`: how a probing `int $0x80` failed, or `not x86_64`) and its
//! child execs /bin/true at once, with no syscall in between.

#[cfg(target_arch = "x86_64")]
fn int80(nr: u32, a: u32, b: u32, c: u32) -> i32 {
    let ret: i32;
    // SAFETY: the ia32 syscall ABI: number in eax, arguments in ebx, ecx, edx; the kernel
    // preserves every other register. rbx is reserved by LLVM, so it is swapped by hand.
    unsafe {
        std::arch::asm!(
            "xchg {a:r}, rbx",
            "int 0x80",
            "xchg {a:r}, rbx",
            a = inout(reg) u64::from(a) => _,
            inlateout("eax") nr as i32 => ret,
            in("ecx") b,
            in("edx") c,
            options(nostack)
        );
    }
    ret
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use fdaudit_tests::check;
    // SAFETY: fork; the child only makes raw syscalls, then execs or _exits.
    unsafe {
        if let Some(why) = int80_refused() {
            println!("int80 unavailable: {why}");
            exec_true_in_a_child();
            return;
        }
        let buf = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
            -1,
            0,
        );
        assert!(buf != libc::MAP_FAILED && (buf as u64) < (1 << 32));
        let zero = check(
            libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
            "open /dev/zero",
        );
        // Above the close loop's range (3..1024): the soft NOFILE limit is often 1024 (the
        // VM guests' init), so raise it within the hard limit first.
        let mut lim: libc::rlimit = std::mem::zeroed();
        check(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), "getrlimit");
        if lim.rlim_cur <= 1024 {
            lim.rlim_cur = lim.rlim_max.min(2048);
            check(
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim),
                "raise the soft NOFILE limit",
            );
        }
        let zero = check(
            libc::fcntl(zero, libc::F_DUPFD_CLOEXEC, 1024),
            "dup /dev/zero to 1024+",
        );
        println!("int80 ok");
        let pid = check(libc::fork(), "fork");
        if pid == 0 {
            for _ in 0..500 {
                if int80(3, zero as u32, buf as u32, 1) != 1 {
                    libc::_exit(3);
                }
            }
            for fd in 3..1024u32 {
                int80(6, fd, 0, 0);
            }
            let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
            libc::execv(argv[0], argv.as_ptr());
            libc::_exit(127);
        }
        fdaudit_tests::wait_for_success(pid);
    }
}

/// How ia32 getpid (20) through `int $0x80` fails, probed in a child (without the ia32
/// entry the instruction faults): `None` when it returns the pid.
#[cfg(target_arch = "x86_64")]
fn int80_refused() -> Option<&'static str> {
    use fdaudit_tests::check;
    // SAFETY: fork; the child only makes raw syscalls and _exits.
    unsafe {
        let pid = check(libc::fork(), "fork");
        if pid == 0 {
            let r = int80(20, 0, 0, 0);
            libc::_exit(if r == libc::getpid() {
                0
            } else if r == -libc::ENOSYS {
                1
            } else {
                2
            });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => None,
            (true, 1) => Some("ENOSYS"),
            _ if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV => {
                Some("SIGSEGV")
            }
            _ => panic!("int $0x80 getpid failed oddly: status {status:#x}"),
        }
    }
}

/// A child that execs /bin/true straight after fork, and its wait.
fn exec_true_in_a_child() {
    // SAFETY: fork; the child only execs or _exits.
    unsafe {
        let pid = fdaudit_tests::check(libc::fork(), "fork");
        if pid == 0 {
            let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
            libc::execv(argv[0], argv.as_ptr());
            libc::_exit(127);
        }
        fdaudit_tests::wait_for_success(pid);
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("int80 unavailable: not x86_64");
    exec_true_in_a_child();
}
