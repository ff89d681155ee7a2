//! Test-only pause points, one at each step of a session's start-up and at the hand-off of
//! its links on exit: with `FDAUDIT_TEST_PAUSE=<step>` in its environment fdaudit writes
//! `paused <step>` to stderr there and stops itself (SIGSTOP, the whole process), so a root
//! test can SIGKILL it at exactly that point and check that nothing of it stays attached
//! (`tests/tests/trace_startup.rs`). Without the variable each point is one comparison.
//! Not for users: docs/architecture.md lists the steps.

use std::sync::OnceLock;

/// The environment variable that names the step to stop at.
pub const ENV: &str = "FDAUDIT_TEST_PAUSE";

/// Every pause point, in the order a `trace -- CMD` reaches them.
pub const STEPS: [&str; 7] = [
    "held",
    "maps",
    "early-attach",
    "attached",
    "tracked",
    "calibrate",
    "hand-off",
];

/// bench's pause points: after the first timed batch, with the traced pass's programs
/// loaded, before the fits (`tests/tests/bench_user.rs` interrupts it at each).
pub const BENCH_STEPS: [&str; 3] = ["bench-timed", "bench-traced", "bench-fit"];

/// Stops here when `step` is the one named by [`ENV`].
pub fn at(step: &str) {
    static WANTED: OnceLock<Option<String>> = OnceLock::new();
    let wanted = WANTED.get_or_init(|| std::env::var(ENV).ok());
    if wanted.as_deref() != Some(step) {
        return;
    }
    debug_assert!(
        STEPS.contains(&step) || BENCH_STEPS.contains(&step),
        "{step} is not in STEPS or BENCH_STEPS"
    );
    let line = format!("paused {step}\n");
    // SAFETY: a write of our own buffer to stderr, then a signal to ourselves.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::raise(libc::SIGSTOP);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_step_is_documented_and_killed_at_by_the_root_test() {
        let docs = include_str!("../../../docs/architecture.md");
        let test = include_str!("../../../tests/tests/trace_startup.rs");
        for step in super::STEPS {
            let quoted = format!("`{step}`");
            assert!(
                docs.contains(&quoted),
                "docs/architecture.md lacks {quoted}"
            );
            let listed = format!("\"{step}\",");
            assert!(
                test.contains(&listed),
                "trace_startup.rs does not kill at {step}"
            );
        }
    }

    #[test]
    fn every_bench_step_is_documented_and_interrupted_at_by_the_root_test() {
        let docs = include_str!("../../../docs/architecture.md");
        let test = include_str!("../../../tests/tests/bench_user.rs");
        for step in super::BENCH_STEPS {
            assert!(
                docs.contains(&format!("`{step}`")),
                "docs/architecture.md lacks `{step}`"
            );
            assert!(
                test.contains(&format!("\"{step}\"")),
                "bench_user.rs does not interrupt at {step}"
            );
        }
    }
}
