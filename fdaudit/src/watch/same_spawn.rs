//! The engine completes a spawn once, for every front end: `watch` and `trace` report the
//! same probe-corrected window and the same parent for the same spawn. Drives the real
//! session (programs loaded and attached) on a child and a grandchild of the test.

use crate::tracer::{
    decode::{Event, Spawn},
    session::{Session, SessionOptions},
};

/// Forks a child held on a pipe: once released it forks a grandchild that closes fds
/// 3..=3000 and execs /bin/true, waits for it, then execs /bin/true itself. Returns the
/// child's pid and the pipe's write end.
fn held_child() -> (libc::pid_t, libc::c_int) {
    let mut p = [0; 2];
    // SAFETY: pipe into a two-int array; fork in a test process whose child only calls
    // async-signal-safe functions (read, fork, close, execv, waitpid, _exit).
    unsafe {
        assert_eq!(libc::pipe(p.as_mut_ptr()), 0, "pipe");
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::close(p[1]);
            let mut b = 0u8;
            libc::read(p[0], (&raw mut b).cast(), 1);
            libc::close(p[0]);
            let truth = c"/bin/true";
            let argv = [truth.as_ptr(), std::ptr::null()];
            let g = libc::fork();
            if g == 0 {
                for fd in 3..=3000 {
                    libc::close(fd);
                }
                libc::execv(truth.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            libc::waitpid(g, std::ptr::null_mut(), 0);
            libc::execv(truth.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
        libc::close(p[0]);
        (pid, p[1])
    }
}

fn spawns(events: Vec<Event>) -> Vec<Spawn> {
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::Spawn(s) => Some(*s),
            Event::Exit(e) => e.failed_spawn.map(|s| *s),
        })
        .collect()
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn watch_and_trace_see_the_same_corrected_window_and_parent() {
    let mut session = Session::start(&SessionOptions::default())
        .unwrap_or_else(|e| panic!("failed to start the session: {e:#}"));
    let (pid, go) = held_child();
    session.track(pid as u32).expect("track the child");
    // SAFETY: releasing and reaping our own child.
    unsafe {
        assert_eq!(libc::write(go, [1u8].as_ptr().cast(), 1), 1);
        libc::close(go);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let all = spawns(session.drain());
    assert!(session.take_warnings().is_empty(), "calibration failed");
    let probe_ns = session
        .probe_cost()
        .expect("the close loop needed the probes' cost");
    assert!(probe_ns > 0.0, "probe cost {probe_ns}");
    let grandchild = all
        .iter()
        .find(|s| s.parent_pid == pid as u32 && s.calls.close_calls >= 2998)
        .unwrap_or_else(|| panic!("no close-loop spawn of {pid}: {all:?}"));
    // Corrected in the engine, before any front end sees it.
    assert!(
        grandchild.window_corrected_ns < grandchild.window_ns,
        "window not corrected: {grandchild:?}"
    );
    // The child's own exec: the kernel saw no fork, the engine names the parent.
    let child = all
        .iter()
        .find(|s| s.pid == pid as u32)
        .unwrap_or_else(|| panic!("no exec of {pid}: {all:?}"));
    assert_eq!(child.parent_comm.lossy(), "fdaudit");
    for s in [grandchild, child] {
        let traced = serde_json::to_value(s).expect("serialise the spawn");
        let watched = super::observation(s, false);
        assert_eq!(
            watched.labels.parent,
            traced["parent_comm"].as_str().unwrap(),
            "{traced}"
        );
        let window = traced["window_corrected_ns"].as_u64().unwrap();
        assert_eq!(
            watched.window_seconds,
            (window > 0).then(|| window as f64 / 1e9),
            "{traced}"
        );
    }
}
