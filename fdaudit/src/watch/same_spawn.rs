//! The engine completes a spawn once, for every front end: `watch` and `trace` report the
//! same probe-corrected window and the same parent for the same spawn. Drives the real
//! session (programs loaded and attached) on a child and a grandchild of the test: the
//! grandchild closes fds 3..=3000 and execs /bin/true, the child then execs /bin/true.

use crate::engine::engine_tests::{trace_tree, Traced};

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn watch_and_trace_see_the_same_corrected_window_and_parent() {
    fn close_loop() {
        for fd in 3..=3000 {
            // SAFETY: closing the grandchild's own fds.
            unsafe { libc::close(fd) };
        }
    }
    let Traced {
        spawns: all,
        child: pid,
        probe_cost,
    } = trace_tree(close_loop, c"/bin/true", true);
    let probe_ns = probe_cost.expect("the close loop needed the probes' cost");
    assert!(probe_ns > 0.0, "probe cost {probe_ns}");
    let grandchild = all
        .iter()
        .find(|s| s.parent_pid == pid && s.calls.close_calls >= 2998)
        .unwrap_or_else(|| panic!("no close-loop spawn of {pid}: {all:?}"));
    // Corrected in the engine, before any front end sees it.
    assert!(
        grandchild.window_corrected_ns < grandchild.window_ns,
        "window not corrected: {grandchild:?}"
    );
    // The child's own exec: the kernel saw no fork, the engine names the parent.
    let child = all
        .iter()
        .find(|s| s.pid == pid)
        .unwrap_or_else(|| panic!("no exec of {pid}: {all:?}"));
    assert_eq!(child.parent_comm.lossy(), "fdaudit");
    for s in [grandchild, child] {
        let record = crate::trace::report::json::SpawnJson::new(s, 0, &|_| false);
        let traced = serde_json::to_value(record).expect("serialise the spawn");
        let watched = super::observation(s, crate::engine::counting::Counting::Syscalls);
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
