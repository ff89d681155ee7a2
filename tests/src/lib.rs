//! Shared helpers for fdaudit's integration tests.

use std::path::PathBuf;

/// A binary built into the same target directory as the running test (`fdaudit`, fixtures).
/// `cargo test --workspace` builds every bin of the workspace before running tests.
pub fn target_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} not found: run `cargo build --workspace` (or `cargo test --workspace`) first",
        bin.display()
    );
    bin
}

/// The `fdaudit` binary under test, built (or brought up to date) once per test binary.
///
/// Cargo builds a package's binaries only for that package's own integration tests, so
/// `cargo test --workspace` on a fresh clone would not have it: ask cargo for it, in the
/// profile these tests were built with.
pub fn fdaudit() -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let release = exe
            .parent()
            .and_then(|d| d.parent())
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "fdaudit", "--bin", "fdaudit"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("failed to run cargo build for fdaudit");
        assert!(status.success(), "cargo build -p fdaudit failed: {status}");
    });
    target_bin("fdaudit")
}

/// Whether the kernel takes close_range(CLOSE_RANGE_CLOEXEC) (5.11+; 5.10 has close_range
/// but refuses the flag with EINVAL, so a spawner relying on it leaks). Probed on an empty
/// range, which changes nothing.
pub fn close_range_cloexec_supported() -> bool {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let top: libc::c_uint = 0x7fff_fff0;
    // SAFETY: close_range on fds nobody holds (far above any limit) only validates flags.
    unsafe { libc::syscall(libc::SYS_close_range, top, top, CLOSE_RANGE_CLOEXEC) == 0 }
}

/// Whether the tests run as root (CI does: the eBPF tests must run there).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Fails a root-only test run without root. Such tests are `#[ignore = "needs root..."]`,
/// so only `--include-ignored` (`.ci/run`, as root) gets here: never a silent pass.
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: run it as root (`.ci/run` does), or leave out --include-ignored"
    );
}

/// A libc return value, or a panic naming what failed and errno (fixtures only).
pub fn check(ret: libc::c_int, what: &str) -> libc::c_int {
    if ret < 0 {
        panic!("failed to {what}: {}", std::io::Error::last_os_error());
    }
    ret
}

/// A TCP socket listening on 127.0.0.1 at an ephemeral port, without close-on-exec:
/// (fd, port).
pub fn listen_loopback(backlog: libc::c_int) -> (libc::c_int, u16) {
    // SAFETY: plain socket syscalls on a local sockaddr_in.
    unsafe {
        let sock = check(
            libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0),
            "create a socket",
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of_val(&addr) as libc::socklen_t;
        check(
            libc::bind(sock, (&addr as *const libc::sockaddr_in).cast(), len),
            "bind",
        );
        check(libc::listen(sock, backlog), "listen");
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut blen = len;
        check(
            libc::getsockname(
                sock,
                (&mut bound as *mut libc::sockaddr_in).cast(),
                &mut blen,
            ),
            "getsockname",
        );
        (sock, u16::from_be(bound.sin_port))
    }
}
