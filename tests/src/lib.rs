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

/// Whether the tests run as root (CI does: the eBPF tests must run there).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
