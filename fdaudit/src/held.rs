//! A command forked before anything is attached and held before its exec until the
//! programs are in place, then released (`trace -- CMD`, `bench -- CMD`); and how it is
//! stopped when a signal stops fdaudit.

use std::ffi::OsString;

use anyhow::{Context as _, Result};

use crate::{caller::CallerState, exit};

/// The command, forked and held before exec until the programs are attached.
pub struct Held {
    pub pid: u32,
    release_fd: i32,
    error_fd: i32,
    /// The command's name as given (argv[0]), escaped for messages.
    pub name: String,
}

impl Held {
    /// Lets the command exec. `Ok(Err(errno))` when the exec itself failed (no such file,
    /// ...): the child has then been reaped.
    pub fn release(self) -> Result<Result<(), i32>> {
        // SAFETY: writing one byte to the pipe we own, then closing it.
        let rc = unsafe { libc::write(self.release_fd, [0u8].as_ptr().cast(), 1) };
        unsafe { libc::close(self.release_fd) };
        if rc != 1 {
            return Err(std::io::Error::last_os_error()).context("failed to release the command");
        }
        // The error pipe is close-on-exec: EOF means the exec happened.
        let mut errno = [0u8; 4];
        // SAFETY: reading into a buffer we own.
        let n = unsafe { libc::read(self.error_fd, errno.as_mut_ptr().cast(), 4) };
        unsafe { libc::close(self.error_fd) };
        if n == 4 {
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            return Ok(Err(i32::from_ne_bytes(errno)));
        }
        Ok(Ok(()))
    }
}

/// Forks CMD with exactly fdaudit's own fds, environment and limits; it waits on a
/// close-on-exec pipe before exec, so none of fdaudit's own fds (created later) cross into it.
/// Before exec it takes back the signal dispositions, mask and closed stdio fdaudit's caller
/// had ([`CallerState`]).
pub fn start_held(cmd: &[OsString]) -> Result<Held> {
    start_held_with(cmd, HeldOptions::default())
}

/// What [`start_held_with`] changes in the command before its exec (`bench -- CMD`).
#[derive(Debug, Default, Clone, Copy)]
pub struct HeldOptions {
    /// The soft RLIMIT_NOFILE to exec with (the hard limit unchanged).
    pub nofile: Option<u64>,
    /// Stdout to /dev/null (so the command cannot mix its output with fdaudit's).
    pub null_stdout: bool,
    /// The one CPU the command (and what it forks) runs on, as bench's own cells do.
    pub cpu: Option<usize>,
}

/// [`start_held`], with the soft RLIMIT_NOFILE and stdout of [`HeldOptions`].
pub fn start_held_with(cmd: &[OsString], opts: HeldOptions) -> Result<Held> {
    use std::os::unix::ffi::OsStrExt as _;
    let argv: Vec<std::ffi::CString> = cmd
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("the command has an argument with a NUL byte")?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let caller = CallerState::get();
    let (_, hard) = crate::sys::nofile().context("failed to read RLIMIT_NOFILE")?;
    let limit = opts.nofile.map(|soft| libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    });
    let null = if opts.null_stdout {
        Some(
            std::fs::File::options()
                .write(true)
                .open("/dev/null")
                .context("failed to open /dev/null")?,
        )
    } else {
        None
    };
    let null_fd = null.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let cpus = opts.cpu.map(crate::sys::one_cpu);
    let (mut hold, mut err) = ([0i32; 2], [0i32; 2]);
    // SAFETY: pipe2 fills arrays we own.
    if unsafe { libc::pipe2(hold.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        || unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0
    {
        return Err(std::io::Error::last_os_error()).context("failed to create the hold pipe");
    }
    let pid = fork_with_signals_blocked();
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("failed to fork the command");
    }
    if pid == 0 {
        unsafe {
            libc::close(hold[1]);
            libc::close(err[0]);
            let mut b = 0u8;
            // Signals are blocked here: only fdaudit's release or its exit ends the wait.
            if libc::read(hold[0], (&mut b as *mut u8).cast(), 1) != 1 {
                // fdaudit went away before attaching: do not run untraced.
                libc::_exit(exit::INTERRUPTED as i32);
            }
            // fdaudit's handlers and the runtime's SIGPIPE go; the caller's ignored
            // signals, mask and closed stdio come back: CMD starts as it would untraced.
            caller.restore_in_child();
            if let Some(fd) = null_fd {
                libc::dup2(fd, 1);
            }
            if let Some(l) = &limit {
                libc::setrlimit(libc::RLIMIT_NOFILE, l);
            }
            if let Some(set) = &cpus {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
            libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(err[1], errno.to_ne_bytes().as_ptr().cast(), 4);
            libc::_exit(exit::NOT_EXECUTED as i32);
        }
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
        libc::close(hold[0]);
        libc::close(err[1]);
    }
    Ok(Held {
        pid: pid as u32,
        release_fd: hold[1],
        error_fd: err[0],
        name: crate::output::escape_bytes(cmd[0].as_bytes()),
    })
}

/// fork(2), the child starting with every signal blocked (the parent's mask is put back
/// at once): until restore_in_child has put the caller's dispositions back and then the
/// caller's mask, a signal that comes between the release and the exec (a Ctrl-C) waits,
/// and is then delivered under the caller's disposition, not lost to a copy of fdaudit's
/// handlers (which the exec would drop).
fn fork_with_signals_blocked() -> libc::pid_t {
    // SAFETY: sigfillset and pthread_sigmask fill and apply sets we own; this thread's mask
    // is restored right after the fork. The caller's child only makes async-signal-safe
    // calls on memory prepared before the fork.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let pid = libc::fork();
        if pid != 0 {
            libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        }
        pid
    }
}

/// After signal `sig` stopped fdaudit while it traced its own command `pid`: passes the
/// signal on (unless the kernel sent it to the whole foreground group, as a terminal's
/// Ctrl-C does: the command has it already), then goes on following with `follow_until`
/// until the command exits, for at most `grace`; a second signal or the end of `grace`
/// SIGKILLs it. Returns the command's wait status.
pub fn stop_command(
    pid: u32,
    sig: i32,
    grace: std::time::Duration,
    mut follow_until: impl FnMut(std::time::Instant) -> Result<Option<i32>>,
) -> Result<i32> {
    use crate::output::stream;
    let name = crate::sys::signal_name(sig).unwrap_or("the signal");
    let passed = if crate::signals::from_kernel() {
        "the command got it too"
    } else {
        // SAFETY: signalling our own child, not reaped yet (try_wait has not seen it exit).
        unsafe { libc::kill(pid as i32, sig) };
        "passed on to the command"
    };
    stream::note(
        stream::Level::Note,
        &format!(
            "{name}: {passed} (pid {pid}); waiting up to {} s for it to exit (--kill-after), \
             a second signal kills it",
            grace.as_secs_f64()
        ),
    );
    crate::signals::rearm();
    if let Some(status) = follow_until(std::time::Instant::now() + grace)? {
        return Ok(status);
    }
    stream::note(
        stream::Level::Warning,
        &format!("the command (pid {pid}) did not exit: killed it with SIGKILL"),
    );
    let mut status = 0;
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
        libc::waitpid(pid as i32, &mut status, 0);
    }
    Ok(status)
}
