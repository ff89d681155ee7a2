//! Engine-level tests: the real programs, loaded and attached by a [`Session`], follow a
//! child of the test; each case asserts on the completed spawns the session hands out, one
//! feature per case (as aya's integration tests drive their programs directly). The
//! binary-level tests in tests/tests/ check the same through `fdaudit trace`.

use std::sync::Mutex;

use super::{
    decode::{Event, Spawn},
    session::{Session, SessionOptions},
    strategy::Strategy,
};

/// One session at a time: the cases share the kernel's tracepoints.
static KERNEL: Mutex<()> = Mutex::new(());

/// What a traced tree gave: every completed spawn, the child's pid, and the probe cost
/// the session corrected windows with.
pub(crate) struct Traced {
    pub spawns: Vec<Spawn>,
    pub child: u32,
    pub probe_cost: Option<f64>,
}

/// Forks a child held on a pipe and tracked by a fresh session; once released, the child
/// forks a grandchild that runs `pre_exec` and execs `path` (or exits 127), waits for it,
/// then execs `path` itself when `child_execs`, else exits. Returns what the session saw.
pub(crate) fn trace_tree(pre_exec: fn(), path: &std::ffi::CStr, child_execs: bool) -> Traced {
    let _one = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    let mut session = Session::start(&SessionOptions::default())
        .unwrap_or_else(|e| panic!("failed to start the session: {e:#}"));
    let mut p = [0; 2];
    // SAFETY: pipe into a two-int array; the forked child only calls async-signal-safe
    // functions (read, close, fork, execv, waitpid, _exit) and `pre_exec`, which must too.
    let pid = unsafe {
        assert_eq!(libc::pipe(p.as_mut_ptr()), 0, "pipe");
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::close(p[1]);
            let mut b = 0u8;
            libc::read(p[0], (&raw mut b).cast(), 1);
            libc::close(p[0]);
            let argv = [path.as_ptr(), std::ptr::null()];
            let g = libc::fork();
            if g == 0 {
                pre_exec();
                libc::execv(path.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            libc::waitpid(g, std::ptr::null_mut(), 0);
            if child_execs {
                libc::execv(path.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            libc::_exit(0);
        }
        libc::close(p[0]);
        pid
    };
    session.track(pid as u32).expect("track the child");
    // SAFETY: releasing and reaping our own child.
    unsafe {
        assert_eq!(libc::write(p[1], [1u8].as_ptr().cast(), 1), 1);
        libc::close(p[1]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let spawns = session
        .drain()
        .into_iter()
        .filter_map(|e| match e {
            Event::Spawn(s) => Some(*s),
            Event::Exit(e) => e.failed_spawn.map(|s| *s),
        })
        .collect();
    assert!(session.take_warnings().is_empty(), "the session warned");
    Traced {
        spawns,
        child: pid as u32,
        probe_cost: session.probe_cost(),
    }
}

/// The spawns of the traced child's children.
fn spawns_of_grandchild(pre_exec: fn(), path: &std::ffi::CStr) -> Vec<Spawn> {
    let t = trace_tree(pre_exec, path, false);
    t.spawns
        .into_iter()
        .filter(|s| s.parent_pid == t.child)
        .collect()
}

fn one(spawns: Vec<Spawn>) -> Spawn {
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    spawns.into_iter().next().expect("one spawn")
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn close_range_is_one_call_and_its_strategy() {
    fn pre_exec() {
        // SAFETY: close_range on the grandchild's own fds.
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    }
    let s = one(spawns_of_grandchild(pre_exec, c"/bin/true"));
    assert!(s.exec_ok, "{s:?}");
    assert_eq!(s.calls.close_range_calls, 1, "{s:?}");
    assert_eq!(s.calls.close_calls, 0, "{s:?}");
    assert_eq!(s.strategy, Strategy::CloseRange);
    assert!(s.leaked_fds.is_empty(), "{s:?}");
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn an_inheritable_fd_leaks_with_its_path() {
    fn pre_exec() {
        // SAFETY: open and dup2 in the grandchild; the fd is inheritable on purpose.
        unsafe {
            let fd = libc::open(c"/etc/hostname".as_ptr(), libc::O_RDONLY);
            libc::dup2(fd, 77);
            libc::close(fd);
        }
    }
    let s = one(spawns_of_grandchild(pre_exec, c"/bin/true"));
    let fd = s
        .leaked_fds
        .iter()
        .find(|f| f.fd == 77)
        .unwrap_or_else(|| panic!("fd 77 did not leak: {s:?}"));
    assert_eq!(fd.target.lossy(), "/etc/hostname");
    assert_eq!(s.calls.dup_calls, 1, "{s:?}");
    assert_eq!(s.calls.close_calls, 1, "{s:?}");
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn a_failed_exec_has_its_errno_and_path() {
    fn pre_exec() {}
    let s = one(spawns_of_grandchild(
        pre_exec,
        c"/nonexistent/fdaudit-engine-test",
    ));
    assert!(!s.exec_ok, "{s:?}");
    assert_eq!(s.exec_errno, Some(libc::ENOENT), "{s:?}");
    assert_eq!(s.exec_error, Some("ENOENT"));
    assert_eq!(s.exec_path.lossy(), "/nonexistent/fdaudit-engine-test");
}
