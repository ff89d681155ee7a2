//! Engine-level tests: the real programs, loaded and attached by a [`Session`], follow a
//! child of the test; each case asserts on the completed spawns the session hands out, one
//! feature per case (as aya's integration tests drive their programs directly). The
//! binary-level tests in tests/tests/ check the same through `fdaudit trace`.

use std::sync::Mutex;

use super::{
    session::{Session, SessionOptions},
    spawn::{Event, Spawn},
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
            Event::Exit(e) => e.failed_exec.map(|s| *s),
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

/// Forks a child held on a pipe and tracked by `session`; once released it runs `body` and
/// exits 0. Returns its pid and the pipe's write end (write a byte to release it).
fn held_child(session: &mut Session, body: impl FnOnce()) -> (libc::pid_t, libc::c_int) {
    let mut p = [0; 2];
    // SAFETY: pipe into a two-int array; the child makes only async-signal-safe calls.
    let pid = unsafe {
        assert_eq!(libc::pipe(p.as_mut_ptr()), 0, "pipe");
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::close(p[1]);
            let mut b = 0u8;
            libc::read(p[0], (&raw mut b).cast(), 1);
            body();
            libc::_exit(0);
        }
        libc::close(p[0]);
        pid
    };
    session.track(pid as u32).expect("track the child");
    (pid, p[1])
}

/// Releases and reaps a [`held_child`].
fn release_and_reap(pid: libc::pid_t, release: libc::c_int) {
    // SAFETY: writing to our pipe and reaping our own child.
    unsafe {
        assert_eq!(libc::write(release, [1u8].as_ptr().cast(), 1), 1);
        libc::close(release);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn a_read_storm_has_the_path_the_kernel_walked_after_its_reader_is_gone() {
    let _one = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    let file = std::env::temp_dir().join(format!("fdaudit-engine-reads-{}", std::process::id()));
    std::fs::write(&file, [b'x'; 200]).expect("write the file");
    let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).expect("no NUL");
    let opts = SessionOptions {
        counting: crate::engine::counting::Counting::SyscallsAndReads,
        ..Default::default()
    };
    let mut session = Session::start(&opts).unwrap_or_else(|e| panic!("session: {e:#}"));
    let (pid, release) = held_child(&mut session, || {
        // SAFETY: open and read are async-signal-safe; the path was made before the fork.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            let mut b = 0u8;
            while libc::read(fd, (&raw mut b).cast(), 1) == 1 {}
        }
    });
    release_and_reap(pid, release);
    let _ = std::fs::remove_file(&file);
    let counts = session.read_counts();
    let c = counts
        .iter()
        .find(|c| c.key.pid == pid as u32 && c.stat.tiny_calls == 200)
        .unwrap_or_else(|| panic!("no 200-read counter of pid {pid}: {counts:?}"));
    let walked = c
        .kernel_path
        .as_deref()
        .expect("the kernel walked the path");
    assert_eq!(walked.complete, 1, "{walked:?}");
    assert_eq!(
        super::fdtarget::join_path(walked),
        file.as_os_str().as_encoded_bytes()
    );
}

#[test]
#[ignore = "needs root: loads and attaches the programs"]
fn traced_alive_counts_the_traced_processes_until_they_exit() {
    let _one = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    let mut session =
        Session::start(&SessionOptions::default()).unwrap_or_else(|e| panic!("session: {e:#}"));
    assert_eq!(session.traced_alive(), 0);
    let (pid, release) = held_child(&mut session, || {});
    assert_eq!(session.traced_alive(), 1);
    release_and_reap(pid, release);
    assert_eq!(session.traced_alive(), 0);
}
