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

/// The `fdaudit` binary under test.
pub fn fdaudit() -> PathBuf {
    target_bin("fdaudit")
}

/// Whether the tests run as root (CI does: the eBPF tests must run there).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
