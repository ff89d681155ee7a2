//! `fdaudit watch`'s own cost per spawn (#44): the agent reads nothing per spawn (no /proc
//! file, no wake-up of its reader per record), and still counts every spawn.
//!
//! Counted with the kernel's own per-process tally of read syscalls (`syscr` in
//! /proc/PID/io, every thread of the agent included): exact, unlike CPU time on a shared
//! machine. The root test loads the eBPF programs: run it under `flock -o
//! /tmp/fdaudit-root.lock`.

use std::{
    os::unix::fs::symlink,
    process::Command,
    time::{Duration, Instant},
};

use crate::watch::{free_port, http_get, sample, start_watch, TempDir};

/// Read syscalls made so far by process `pid`, all its threads included.
fn read_calls(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_else(|e| panic!("failed to read /proc/{pid}/io: {e}"));
    io.lines()
        .find_map(|l| l.strip_prefix("syscr: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no syscr in /proc/{pid}/io: {io}"))
}

/// Runs `exe` `n` times, one at a time.
fn spawn_n(exe: &std::path::Path, n: u32) {
    for _ in 0..n {
        let st = Command::new(exe)
            .arg("/dev/null")
            .status()
            .unwrap_or_else(|e| panic!("failed to run {}: {e}", exe.display()));
        assert!(st.success(), "{} failed: {st}", exe.display());
    }
}

#[test]
#[ignore = "needs root"]
fn the_agent_reads_nothing_per_spawn_and_counts_every_spawn() {
    let _g = fdaudit_tests::guard();
    let dir = TempDir::new("watch-cost");
    // A name of its own, so that its spawns are counted apart from the machine's: a link to
    // a fixture, which ignores the name (the guests' /bin/true is busybox, which runs the
    // applet its name says).
    let exe = dir.0.join("fdaudit-cost-true");
    symlink(fdaudit_tests::target_bin("print-inherited"), &exe).expect("symlink the fixture");
    let port = free_port();
    let w = start_watch(port, &["--scan-interval", "0"]);
    let pid = w.0.id();
    // One-off work (first allocations, the first cgroup's path) before counting.
    spawn_n(&exe, 20);
    std::thread::sleep(Duration::from_millis(600));
    const N: u32 = 400;
    let before = read_calls(pid);
    let window = Instant::now();
    spawn_n(&exe, N);
    // The records' batch comes with the drain thread's tick at the latest.
    std::thread::sleep(Duration::from_millis(600));
    let reads = read_calls(pid) - before;
    // The ticks (5 a second, each at most a couple of reads) run however slow the spawns
    // are (an emulated guest's take tens of seconds): what they may read is by time.
    let ticks = (window.elapsed().as_secs_f64() * 5.0).ceil() as u64;
    let t0 = Instant::now();
    let counted = loop {
        let (_, body) = http_get(port, "/metrics").expect("watch serves /metrics");
        let n = sample(&body, "fdaudit_spawns_total", "child=\"fdaudit-cost-true\"").unwrap_or(0.0);
        if n >= f64::from(N + 20) || t0.elapsed() > Duration::from_secs(10) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        counted,
        f64::from(N + 20),
        "every spawn is counted once, none lost to batching"
    );
    // The ticks (5 a second) may read; a spawn must not (a /proc file, an fd's fdinfo, the
    // reader's wake-up eventfd were 3 or more a spawn).
    assert!(
        reads < u64::from(N) / 10 + 2 * ticks,
        "the agent made {reads} read calls during {N} spawns ({ticks} ticks): it reads per spawn"
    );
}
