//! An ended trace's hand-off child drops its anchors on the syscall trace events only while
//! no other trace is starting (`fdaudit/src/engine/ebpf/handover.rs`): a drop unregisters
//! the event under the kernel's `event_mutex`, which a starting trace's `perf_event_open`
//! would wait for. The test plays a starting trace by holding the lock shared, as fdaudit
//! does from the start of its load until its programs are attached. Needs root.

use std::os::fd::AsRawFd as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fdaudit_tests::{fdaudit, guard};

/// The lock a starting trace holds shared (`handover::LOCK`).
const LOCK: &str = "/run/fdaudit/trace-events.lock";

/// Longer than the hand-off child's linger (`ANCHOR_LINGER_S`, 2 s) with room for a loaded
/// machine, shorter than how long it waits for starting traces (5 s).
const HOLD: Duration = Duration::from_millis(3500);

/// Processes named like the hand-off child, not exited, that are not children of one (its
/// closers of links, which share its name, end at once).
fn hand_off_children() -> Vec<u32> {
    let named: Vec<(u32, u32)> = named(&["fdaudit-detach"])
        .into_iter()
        .filter_map(|p| Some((p, state_and_ppid(p)?)))
        .filter(|(_, (state, _))| !matches!(state, 'Z' | 'X'))
        .map(|(p, (_, ppid))| (p, ppid))
        .collect();
    named
        .iter()
        .filter(|(_, ppid)| !named.iter().any(|(p, _)| p == ppid))
        .map(|(p, _)| *p)
        .collect()
}

/// The processes whose name is one of `names`.
fn named(names: &[&str]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| names.contains(&c.trim_end()))
        })
        .collect()
}

/// `/proc/PID/stat`'s state letter and parent pid.
fn state_and_ppid(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    Some((f.next()?.chars().next()?, f.next()?.parse().ok()?))
}

/// Running, not a zombie.
fn alive(pid: u32) -> bool {
    !matches!(state_and_ppid(pid), None | Some(('Z' | 'X', _)))
}

/// How many perf events `pid` holds (its anchors, once fdaudit has exited).
fn perf_events(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy() == "anon_inode:[perf_event]")
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits up to `bound` for `done`; whether it came.
fn wait_for(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
#[ignore = "needs root and BTF"]
fn a_hand_off_child_keeps_its_anchors_while_a_trace_starts_and_drops_them_after() {
    let _g = guard();
    if !fdaudit_tests::syscall_tracepoints() {
        eprintln!("no syscall tracepoints here: nothing is anchored, nothing to check");
        return;
    }
    // (fdaudit makes it too; root can, here and in the guests)
    std::fs::create_dir_all("/run/fdaudit").expect("make /run/fdaudit");
    // An earlier test's fdaudit may still be exiting: its hand-off child is named only
    // after its fork, so an unnamed one would be counted below as this trace's.
    let running = || {
        named(&["fdaudit", "fdaudit-detach"])
            .into_iter()
            .filter(|&p| state_and_ppid(p).is_some_and(|(s, _)| !matches!(s, 'Z' | 'X')))
            .collect::<Vec<u32>>()
    };
    assert!(
        wait_for(Duration::from_secs(20), || running().is_empty()),
        "an earlier trace or its hand-off child is still there: {:?}",
        running()
    );
    let out = Command::new(fdaudit())
        .args(["trace", "-q", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run fdaudit trace");
    fdaudit_tests::assert_success(&out);
    let children = hand_off_children();
    let [child] = children[..] else {
        panic!("want one hand-off child right after the trace, found {children:?}");
    };
    // It opens its anchors once it has closed its copies of fdaudit's other fds (the
    // pipes this test read to their end): wait for the count to settle.
    let mut anchors = 0;
    let settled = wait_for(Duration::from_secs(5), || {
        let before = perf_events(child);
        std::thread::sleep(Duration::from_millis(200));
        let now = perf_events(child);
        anchors = now;
        now > 0 && now == before
    });
    assert!(settled, "the hand-off child {child} holds no anchor");
    // A trace starting: the lock held shared for longer than the child's linger.
    // Made here too, so that a build without the lock fails on what follows, not here.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(LOCK)
        .expect("open the lock file");
    // SAFETY: flock on our own open file.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_SH) };
    assert_eq!(locked, 0, "flock {LOCK}");
    std::thread::sleep(HOLD);
    let held = (alive(child), perf_events(child));
    drop(lock);
    assert_eq!(
        held,
        (true, anchors),
        "{} ms after the trace, while a trace was starting, the hand-off child {child} \
         (alive, anchors) should still hold its {anchors} anchors",
        HOLD.as_millis()
    );
    assert!(
        wait_for(Duration::from_secs(10), || !alive(child)),
        "the hand-off child {child} kept its anchors 10 s after the starting trace let go"
    );
    assert!(
        hand_off_children().is_empty(),
        "hand-off children left: {:?}",
        hand_off_children()
    );
}
