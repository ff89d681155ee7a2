//! Spawning children with each fd-closing strategy.
//!
//! [`Spawner`] runs a command N times, one spawn after another, and applies one
//! [`Strategy`] between fork and exec (or hands it to `posix_spawn`). Everything the child
//! needs (argv, envp, the `poll()` array, the `getdents64` buffer) is prepared before the
//! fork: the child only makes raw syscalls, allocates nothing and never panics.
//!
//! The hidden `fdaudit __spawner` command wraps it for `fdaudit bench` and the tests.
//!
//! # `__spawner --json` output
//! One JSON object per line, written after the last spawn (so printing never lands inside
//! a timed spawn): first one [`SpawnTime`] (`"type":"spawn_time"`) per spawn in order, then
//! one [`SpawnSummary`] (`"type":"summary"`), after an empty line. Output of the children
//! themselves goes to the same stdout, so a reader skips lines that are not such objects.

use std::ffi::{CString, OsStr, OsString};
use std::io::{BufRead as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use libc::{c_char, c_int, c_uint};
use serde::{Deserialize, Serialize};

/// How the child closes (or does not close) the fds it inherited, between fork and exec.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Nothing: fork + execve, every inherited fd leaks.
    None,
    /// close(fd) for every fd from 3 to the soft RLIMIT_NOFILE (L−3 calls).
    CloseLoop,
    /// fcntl(fd, F_SETFD, FD_CLOEXEC) for every fd from 3 to the soft limit (L−3 calls).
    FcntlLoop,
    /// Read /proc/self/fd with getdents64, then close the fds found.
    ProcfdWalk,
    /// One poll() over fds 0..L, then close those not POLLNVAL (D's std.process).
    PollScan,
    /// One close_range(3, ~0U, 0).
    CloseRange,
    /// One close_range(3, ~0U, CLOSE_RANGE_CLOEXEC).
    CloseRangeCloexec,
    /// glibc closefrom(3) (2.34+).
    Closefrom,
    /// posix_spawn with no file actions (leaks like `none`).
    PosixSpawn,
    /// posix_spawn with posix_spawn_file_actions_addclosefrom_np(3).
    PosixSpawnClosefrom,
}

impl Strategy {
    /// Every strategy, in the order tables show them.
    pub const ALL: [Strategy; 10] = [
        Strategy::None,
        Strategy::CloseLoop,
        Strategy::FcntlLoop,
        Strategy::ProcfdWalk,
        Strategy::PollScan,
        Strategy::CloseRange,
        Strategy::CloseRangeCloexec,
        Strategy::Closefrom,
        Strategy::PosixSpawn,
        Strategy::PosixSpawnClosefrom,
    ];

    /// The kebab-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::CloseLoop => "close-loop",
            Strategy::FcntlLoop => "fcntl-loop",
            Strategy::ProcfdWalk => "procfd-walk",
            Strategy::PollScan => "poll-scan",
            Strategy::CloseRange => "close-range",
            Strategy::CloseRangeCloexec => "close-range-cloexec",
            Strategy::Closefrom => "closefrom",
            Strategy::PosixSpawn => "posix-spawn",
            Strategy::PosixSpawnClosefrom => "posix-spawn-closefrom",
        }
    }

    /// Whether the child gets none of the parent's fds ≥ 3 (false for the two that leak).
    pub fn closes_fds(self) -> bool {
        !matches!(self, Strategy::None | Strategy::PosixSpawn)
    }

    /// Whether the cost is one syscall per possible fd (grows with RLIMIT_NOFILE).
    pub fn is_loop(self) -> bool {
        matches!(
            self,
            Strategy::CloseLoop | Strategy::FcntlLoop | Strategy::PollScan
        )
    }

    /// close() calls the child makes before exec with soft limit `nofile` and `open_fds`
    /// fds open (counting 0–2), when the strategy fixes the number.
    pub fn expected_close_calls(self, nofile: u64, open_fds: u64) -> Option<u64> {
        match self {
            Strategy::None
            | Strategy::FcntlLoop
            | Strategy::CloseRange
            | Strategy::CloseRangeCloexec
            | Strategy::PosixSpawn => Some(0),
            Strategy::CloseLoop => Some(nofile.saturating_sub(3)),
            // The open fds ≥ 3; procfd-walk also closes its directory fd.
            Strategy::PollScan => Some(open_fds.saturating_sub(3)),
            Strategy::ProcfdWalk => Some(open_fds.saturating_sub(3) + 1),
            // glibc uses close_range when the kernel has it; the fallback is a walk.
            Strategy::Closefrom | Strategy::PosixSpawnClosefrom => None,
        }
    }

    /// Whether the strategy goes through posix_spawn rather than fork + exec.
    fn is_posix_spawn(self) -> bool {
        matches!(self, Strategy::PosixSpawn | Strategy::PosixSpawnClosefrom)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors of the spawner library.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    #[error("RLIMIT_NOFILE {wanted} is above the hard limit {hard}")]
    NofileAboveHard { wanted: u64, hard: u64 },
    #[error("{wanted} open fds do not fit under the soft RLIMIT_NOFILE {nofile}")]
    TooManyFds { wanted: u64, nofile: u64 },
    #[error("command `{0}` not found in PATH")]
    NotFound(String),
    #[error("argument or environment string contains a NUL byte")]
    Nul,
    #[error("{call} failed")]
    Sys {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn sys_err(call: &'static str) -> SpawnerError {
    SpawnerError::Sys {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// The soft and hard RLIMIT_NOFILE of this process.
pub fn nofile_limits() -> Result<(u64, u64), SpawnerError> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(sys_err("getrlimit(RLIMIT_NOFILE)"));
    }
    Ok((r.rlim_cur, r.rlim_max))
}

/// Sets the soft RLIMIT_NOFILE of this process to `soft` (the hard limit is kept).
pub fn set_nofile(soft: u64) -> Result<(), SpawnerError> {
    let (_, hard) = nofile_limits()?;
    if soft > hard {
        return Err(SpawnerError::NofileAboveHard { wanted: soft, hard });
    }
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(sys_err("setrlimit(RLIMIT_NOFILE)"));
    }
    Ok(())
}

/// Closes every fd ≥ 3 this process inherited, so its fd table is exactly 0, 1, 2.
pub fn close_inherited_fds() -> Result<(), SpawnerError> {
    // SAFETY: close_range only closes fds; the caller owns none of them yet (called at start).
    if unsafe { libc::syscall(libc::SYS_close_range, 3 as c_uint, c_uint::MAX, 0 as c_uint) } != 0 {
        return Err(sys_err("close_range(3, ~0U, 0)"));
    }
    Ok(())
}

/// Opens fds until `total` are open counting 0–2 (`total`−3 new ones; none close-on-exec):
/// a socketpair, up to 8 pipes and /dev/null dups for the rest. Call after
/// [`close_inherited_fds`] for an exact count. Dropping the result closes them.
pub fn hold_fds(total: u64) -> Result<Vec<OwnedFd>, SpawnerError> {
    let (soft, _) = nofile_limits()?;
    if total > soft {
        return Err(SpawnerError::TooManyFds {
            wanted: total,
            nofile: soft,
        });
    }
    let want = total.saturating_sub(3) as usize;
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(want);
    let adopt = |fds: &mut Vec<OwnedFd>, raw: c_int| {
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
    };
    if want >= 2 {
        let mut sv = [0 as c_int; 2];
        // SAFETY: socketpair writes two fds into `sv`.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } != 0 {
            return Err(sys_err("socketpair"));
        }
        adopt(&mut fds, sv[0]);
        adopt(&mut fds, sv[1]);
    }
    let mut pipes = 0;
    // Leave room for at least one /dev/null so every kind is there.
    while pipes < 8 && want - fds.len() > 2 {
        let mut p = [0 as c_int; 2];
        // SAFETY: pipe2 writes two fds into `p`; flags 0 = not close-on-exec.
        if unsafe { libc::pipe2(p.as_mut_ptr(), 0) } != 0 {
            return Err(sys_err("pipe2"));
        }
        adopt(&mut fds, p[0]);
        adopt(&mut fds, p[1]);
        pipes += 1;
    }
    if fds.len() < want {
        // SAFETY: plain open of a NUL-terminated path, without O_CLOEXEC on purpose.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if null < 0 {
            return Err(sys_err("open(/dev/null)"));
        }
        adopt(&mut fds, null);
        while fds.len() < want {
            // SAFETY: dup of an fd we own; the copy is not close-on-exec.
            let d = unsafe { libc::dup(null) };
            if d < 0 {
                return Err(sys_err("dup(/dev/null)"));
            }
            adopt(&mut fds, d);
        }
    }
    Ok(fds)
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, SpawnerError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, with the set's true size.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(sys_err("sched_getaffinity"));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins this process (and the children it forks from now on) to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), SpawnerError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within the set; out-of-range CPUs are ignored.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity reads the set with its true size.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(sys_err("sched_setaffinity"));
    }
    Ok(())
}

/// Resolves `cmd` like execvp would: as a path when it has a slash, else through PATH.
pub fn resolve_command(cmd: &OsStr) -> Result<PathBuf, SpawnerError> {
    if cmd.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(cmd);
        if let Ok(c) = CString::new(candidate.as_os_str().as_bytes()) {
            // SAFETY: access reads a NUL-terminated path.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
                return Ok(candidate);
            }
        }
    }
    Err(SpawnerError::NotFound(cmd.to_string_lossy().into_owned()))
}

/// Size of the getdents64 buffer `procfd-walk` uses (several calls when fds are many).
const DIRENT_BUF: usize = 32 * 1024;

/// One spawn's outcome.
#[derive(Debug, Clone, Copy)]
pub struct SpawnResult {
    /// Wall time from just before fork/posix_spawn to waitpid's return.
    pub ns: u64,
    /// The child's pid.
    pub pid: i32,
    /// The raw wait status.
    pub status: c_int,
}

impl SpawnResult {
    /// Whether the child exited with status 0.
    pub fn success(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }
}

/// A prepared spawner: the command, its argv/envp and every buffer the child may touch.
pub struct Spawner {
    strategy: Strategy,
    /// Soft RLIMIT_NOFILE when prepared (L).
    nofile: c_int,
    path: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const c_char>,
    pollfds: Vec<libc::pollfd>,
    dirent_buf: Vec<u8>,
    fd_list: Vec<c_int>,
    file_actions: Option<Box<libc::posix_spawn_file_actions_t>>,
}

impl Spawner {
    /// Prepares spawning `cmd` (argv[0] is resolved through PATH) with `strategy`, under the
    /// current soft RLIMIT_NOFILE: set the limit and open fds before calling this.
    pub fn new(strategy: Strategy, cmd: &[OsString]) -> Result<Spawner, SpawnerError> {
        let default = [OsString::from("/bin/true")];
        let cmd = if cmd.is_empty() { &default[..] } else { cmd };
        let path = resolve_command(&cmd[0])?;
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| SpawnerError::Nul)?;
        let argv = cmd
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SpawnerError::Nul)?;
        let envp = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SpawnerError::Nul)?;
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let argv_ptrs = ptrs(&argv);
        let envp_ptrs = ptrs(&envp);
        let (soft, _) = nofile_limits()?;
        let nofile = c_int::try_from(soft).unwrap_or(c_int::MAX);
        let l = nofile as usize;
        let pollfds = if strategy == Strategy::PollScan {
            (0..nofile)
                .map(|fd| libc::pollfd {
                    fd,
                    events: 0,
                    revents: 0,
                })
                .collect()
        } else {
            Vec::new()
        };
        let (dirent_buf, fd_list) = if strategy == Strategy::ProcfdWalk {
            (vec![0u8; DIRENT_BUF], vec![0 as c_int; l])
        } else {
            (Vec::new(), Vec::new())
        };
        let file_actions = if strategy.is_posix_spawn() {
            // SAFETY: zeroed storage that posix_spawn_file_actions_init then initialises.
            let mut fa: Box<libc::posix_spawn_file_actions_t> =
                Box::new(unsafe { std::mem::zeroed() });
            // SAFETY: `fa` points to valid storage.
            let rc = unsafe { libc::posix_spawn_file_actions_init(&mut *fa) };
            if rc != 0 {
                return Err(SpawnerError::Sys {
                    call: "posix_spawn_file_actions_init",
                    source: std::io::Error::from_raw_os_error(rc),
                });
            }
            if strategy == Strategy::PosixSpawnClosefrom {
                // SAFETY: `fa` was initialised above.
                let rc = unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut *fa, 3) };
                if rc != 0 {
                    // SAFETY: initialised above, destroyed once.
                    unsafe { libc::posix_spawn_file_actions_destroy(&mut *fa) };
                    return Err(SpawnerError::Sys {
                        call: "posix_spawn_file_actions_addclosefrom_np",
                        source: std::io::Error::from_raw_os_error(rc),
                    });
                }
            }
            Some(fa)
        } else {
            None
        };
        Ok(Spawner {
            strategy,
            nofile,
            path,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            pollfds,
            dirent_buf,
            fd_list,
            file_actions,
        })
    }

    /// The strategy this spawner applies.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The soft RLIMIT_NOFILE the loops run up to.
    pub fn nofile(&self) -> u64 {
        self.nofile as u64
    }

    /// Spawns the command once, waits for it and returns the timing and status.
    pub fn spawn_once(&mut self) -> Result<SpawnResult, SpawnerError> {
        let start = Instant::now();
        let pid = if let Some(fa) = self.file_actions.as_deref() {
            let mut pid: libc::pid_t = 0;
            // SAFETY: path, argv and envp are NUL-terminated and NULL-terminated arrays
            // that outlive the call; `fa` is initialised.
            let rc = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    self.path.as_ptr(),
                    fa,
                    std::ptr::null(),
                    self.argv_ptrs.as_ptr() as *const *mut c_char,
                    self.envp_ptrs.as_ptr() as *const *mut c_char,
                )
            };
            if rc != 0 {
                return Err(SpawnerError::Sys {
                    call: "posix_spawn",
                    source: std::io::Error::from_raw_os_error(rc),
                });
            }
            pid
        } else {
            let child = self.child_context();
            // SAFETY: this process is single-threaded while it spawns, and the child only
            // runs `child_exec`, which makes raw syscalls on memory prepared before the fork.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(sys_err("fork"));
            }
            if pid == 0 {
                // SAFETY: we are the child of a fork; see above.
                unsafe { child_exec(&child) }
            }
            pid
        };
        let mut status: c_int = 0;
        loop {
            // SAFETY: waits for our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r == pid {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Err(sys_err("waitpid"));
            }
        }
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Ok(SpawnResult { ns, pid, status })
    }

    fn child_context(&mut self) -> ChildContext {
        ChildContext {
            strategy: self.strategy,
            nofile: self.nofile,
            path: self.path.as_ptr(),
            argv: self.argv_ptrs.as_ptr(),
            envp: self.envp_ptrs.as_ptr(),
            pollfds: self.pollfds.as_mut_ptr(),
            npollfds: self.pollfds.len(),
            dirent_buf: self.dirent_buf.as_mut_ptr(),
            dirent_len: self.dirent_buf.len(),
            fd_list: self.fd_list.as_mut_ptr(),
            fd_cap: self.fd_list.len(),
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        if let Some(fa) = self.file_actions.as_deref_mut() {
            // SAFETY: initialised in `new`, destroyed once here.
            unsafe { libc::posix_spawn_file_actions_destroy(fa) };
        }
    }
}

/// Raw pointers to what the child may use; all of it allocated before the fork.
struct ChildContext {
    strategy: Strategy,
    nofile: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    pollfds: *mut libc::pollfd,
    npollfds: usize,
    dirent_buf: *mut u8,
    dirent_len: usize,
    fd_list: *mut c_int,
    fd_cap: usize,
}

extern "C" {
    /// glibc 2.34+: closes every fd ≥ `lowfd` (close_range, else a /proc/self/fd walk).
    fn closefrom(lowfd: c_int);
}

/// Runs in the child between fork and exec: applies the strategy, then execve.
/// Async-signal-safe: raw syscalls only, no allocation, no panics.
///
/// # Safety
/// Must only be called in a freshly forked child, with `c` pointing into memory that
/// was allocated before the fork.
unsafe fn child_exec(c: &ChildContext) -> ! {
    // SAFETY (whole body): raw syscalls on pre-allocated buffers of the stated sizes.
    unsafe {
        match c.strategy {
            Strategy::None | Strategy::PosixSpawn | Strategy::PosixSpawnClosefrom => {}
            Strategy::CloseLoop => {
                let mut fd = 3;
                while fd < c.nofile {
                    libc::close(fd);
                    fd += 1;
                }
            }
            Strategy::FcntlLoop => {
                let mut fd = 3;
                while fd < c.nofile {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                    fd += 1;
                }
            }
            Strategy::ProcfdWalk => procfd_walk(c),
            Strategy::PollScan => poll_scan(c),
            Strategy::CloseRange => {
                libc::syscall(libc::SYS_close_range, 3 as c_uint, c_uint::MAX, 0 as c_uint);
            }
            Strategy::CloseRangeCloexec => {
                libc::syscall(
                    libc::SYS_close_range,
                    3 as c_uint,
                    c_uint::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
            }
            Strategy::Closefrom => closefrom(3),
        }
        libc::execve(c.path, c.argv, c.envp);
        libc::_exit(127)
    }
}

/// `procfd-walk`: list /proc/self/fd with getdents64 into the pre-allocated array, then
/// close what was listed.
unsafe fn procfd_walk(c: &ChildContext) {
    // SAFETY (whole body): raw syscalls; every write stays inside the buffers' lengths.
    unsafe {
        let dir = libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return;
        }
        let mut count = 0usize;
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, c.dirent_buf, c.dirent_len);
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off < n as usize {
                // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
                let rec = c.dirent_buf.add(off);
                let reclen = u16::from_ne_bytes([*rec.add(16), *rec.add(17)]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = rec.add(19);
                if let Some(fd) = parse_fd(name, reclen - 19) {
                    if fd >= 3 && fd != dir && count < c.fd_cap {
                        *c.fd_list.add(count) = fd;
                        count += 1;
                    }
                }
                off += reclen;
            }
        }
        libc::close(dir);
        for i in 0..count {
            libc::close(*c.fd_list.add(i));
        }
    }
}

/// Parses a NUL-terminated decimal name of at most `max` bytes; `None` for "." and "..".
///
/// # Safety
/// `name` must point to at least `max` readable bytes.
unsafe fn parse_fd(name: *const u8, max: usize) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut digits = 0;
    for i in 0..max {
        // SAFETY: i < max, guaranteed readable by the caller.
        let b = unsafe { *name.add(i) };
        if b == 0 {
            break;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(c_int::from(b - b'0'))?;
        digits += 1;
    }
    (digits > 0).then_some(v)
}

/// `poll-scan`: one poll() over fds 0..L with the pre-built array, then close each fd ≥ 3
/// that is not POLLNVAL. Like D's std.process, falls back to a close loop if poll fails.
unsafe fn poll_scan(c: &ChildContext) {
    // SAFETY (whole body): the array has `npollfds` entries, built before the fork.
    unsafe {
        let r = libc::poll(c.pollfds, c.npollfds as libc::nfds_t, 0);
        if r < 0 {
            let mut fd = 3;
            while fd < c.nofile {
                libc::close(fd);
                fd += 1;
            }
            return;
        }
        for i in 3..c.npollfds {
            let p = &*c.pollfds.add(i);
            if p.revents & libc::POLLNVAL == 0 {
                libc::close(p.fd);
            }
        }
    }
}

/// One spawn of `__spawner --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpawnTime {
    /// Always `"spawn_time"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub strategy: Strategy,
    /// Wall time from just before fork/posix_spawn to waitpid's return, CLOCK_MONOTONIC.
    pub ns: u64,
    /// The child's exit code (128 + signal when killed).
    pub exit_code: i32,
}

/// The last line of `__spawner --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpawnSummary {
    /// Always `"summary"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub strategy: Strategy,
    /// Soft RLIMIT_NOFILE while spawning.
    pub nofile: u64,
    /// Fds open in the spawner, counting 0–2.
    pub open_fds: u64,
    pub spawns: u64,
    /// Spawns whose child did not exit 0.
    pub failures: u64,
    pub median_ns: u64,
}

/// A shell-like exit status from a wait status: the code, 128+signal, or -1.
pub(crate) fn exit_code(status: c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    }
}

/// Counts this process's open fds (by probing 0..soft limit with F_GETFD).
pub fn count_open_fds() -> u64 {
    let soft = nofile_limits().map(|(s, _)| s).unwrap_or(1024);
    let soft = c_int::try_from(soft).unwrap_or(c_int::MAX);
    // SAFETY: F_GETFD only queries.
    (0..soft)
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .count() as u64
}

/// Arguments of the internal `__spawner` command.
#[derive(Debug, Clone, clap::Args)]
pub struct SpawnerArgs {
    /// What the child does with inherited fds between fork and exec.
    #[arg(long, value_enum)]
    pub strategy: Strategy,
    /// Number of spawns, one after another.
    #[arg(short = 'n', long = "spawns", default_value_t = 1)]
    pub n: u64,
    /// Soft RLIMIT_NOFILE to set first (at most the hard limit).
    #[arg(long)]
    pub nofile: Option<u64>,
    /// Fds to hold open, counting 0–2 (not close-on-exec); fds inherited beyond 0–2 are
    /// closed at start either way, so the table is exactly 0..K.
    #[arg(long)]
    pub open_fds: Option<u64>,
    /// Pin the spawner (and so its children) to this CPU, for steadier timings.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// After setup print `ready <pid>`, then wait for a line on stdin before spawning.
    #[arg(long)]
    pub wait_stdin: bool,
    /// Print one JSON object per spawn and a summary, after the last spawn.
    #[arg(long)]
    pub json: bool,
    /// The command to spawn (default /bin/true).
    #[arg(last = true)]
    pub cmd: Vec<OsString>,
}

impl SpawnerArgs {
    /// The arguments after `__spawner` that reproduce these settings.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--strategy".into(),
            self.strategy.name().into(),
            "-n".into(),
            self.n.to_string().into(),
        ];
        if let Some(l) = self.nofile {
            a.extend(["--nofile".into(), l.to_string().into()]);
        }
        if let Some(k) = self.open_fds {
            a.extend(["--open-fds".into(), k.to_string().into()]);
        }
        if let Some(c) = self.cpu {
            a.extend(["--cpu".into(), c.to_string().into()]);
        }
        if self.wait_stdin {
            a.push("--wait-stdin".into());
        }
        if self.json {
            a.push("--json".into());
        }
        if !self.cmd.is_empty() {
            a.push("--".into());
            a.extend(self.cmd.iter().cloned());
        }
        a
    }
}

/// The median of `v` (sorted in place); 0 when empty.
pub fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        v[m - 1] / 2 + v[m] / 2 + (v[m - 1] % 2 + v[m] % 2) / 2
    }
}

/// `fdaudit __spawner`.
pub fn run(args: SpawnerArgs) -> anyhow::Result<u8> {
    close_inherited_fds().context("failed to close inherited fds")?;
    if let Some(c) = args.cpu {
        pin_to_cpu(c).with_context(|| format!("failed to pin to CPU {c}"))?;
    }
    if let Some(l) = args.nofile {
        set_nofile(l).context("failed to set RLIMIT_NOFILE")?;
    }
    let _held = match args.open_fds {
        Some(k) => hold_fds(k).context("failed to open the fds to hold")?,
        None => Vec::new(),
    };
    let mut spawner =
        Spawner::new(args.strategy, &args.cmd).context("failed to prepare the spawner")?;
    let open_fds = count_open_fds();
    let mut times = Vec::with_capacity(args.n as usize);
    if args.wait_stdin {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {}", std::process::id()).context("failed to write to stdout")?;
        out.flush().context("failed to write to stdout")?;
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("failed to read stdin")?;
    }
    for _ in 0..args.n {
        let r = spawner
            .spawn_once()
            .with_context(|| format!("failed to spawn with {}", args.strategy))?;
        times.push(r);
    }
    let failures = times.iter().filter(|r| !r.success()).count() as u64;
    let mut ns: Vec<u64> = times.iter().map(|r| r.ns).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        // A child's output without a final newline must not glue onto the first object.
        writeln!(out).context("failed to write to stdout")?;
        for r in &times {
            let t = SpawnTime {
                kind: "spawn_time".into(),
                strategy: args.strategy,
                ns: r.ns,
                exit_code: exit_code(r.status),
            };
            crate::output::json_line(&mut out, &t).context("failed to write to stdout")?;
        }
        let s = SpawnSummary {
            kind: "summary".into(),
            strategy: args.strategy,
            nofile: spawner.nofile(),
            open_fds,
            spawns: args.n,
            failures,
            median_ns: median(&mut ns),
        };
        crate::output::json_line(&mut out, &s).context("failed to write to stdout")?;
    } else {
        writeln!(
            out,
            "{}: {} spawns of {}, NOFILE {}, {} fds open: median {} ns, {} failed",
            args.strategy,
            args.n,
            Path::new(OsStr::from_bytes(spawner.path.as_bytes())).display(),
            spawner.nofile(),
            open_fds,
            median(&mut ns),
            failures
        )
        .context("failed to write to stdout")?;
    }
    out.flush().context("failed to write to stdout")?;
    Ok(if failures == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_clap_serde_and_display() {
        use clap::ValueEnum as _;
        for s in Strategy::ALL {
            let v = s.to_possible_value().expect("every strategy is a value");
            assert_eq!(v.get_name(), s.name(), "clap name of {s:?}");
            assert_eq!(s.to_string(), s.name());
            let j = serde_json::to_string(&s).expect("serialises");
            assert_eq!(j, format!("\"{}\"", s.name()), "serde name of {s:?}");
            let back: Strategy = serde_json::from_str(&j).expect("deserialises");
            assert_eq!(back, s);
        }
        assert_eq!(Strategy::value_variants().len(), Strategy::ALL.len());
    }

    #[test]
    fn parses_dirent_names() {
        let p = |s: &[u8]| unsafe { parse_fd(s.as_ptr(), s.len()) };
        assert_eq!(p(b"17\0\0\0"), Some(17));
        assert_eq!(p(b"0\0"), Some(0));
        assert_eq!(p(b".\0"), None);
        assert_eq!(p(b"..\0"), None);
        assert_eq!(p(b"\0"), None);
        assert_eq!(p(b"12"), Some(12), "no NUL within max");
        assert_eq!(p(b"99999999999\0"), None, "overflow");
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut []), 0);
        assert_eq!(median(&mut [5]), 5);
        assert_eq!(median(&mut [9, 1, 5]), 5);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2);
        assert_eq!(median(&mut [u64::MAX, u64::MAX]), u64::MAX);
    }

    #[test]
    fn expected_close_calls() {
        assert_eq!(
            Strategy::CloseLoop.expected_close_calls(1024, 3),
            Some(1021)
        );
        assert_eq!(
            Strategy::CloseRange.expected_close_calls(1024, 1000),
            Some(0)
        );
        assert_eq!(Strategy::PollScan.expected_close_calls(1024, 10), Some(7));
        assert_eq!(Strategy::Closefrom.expected_close_calls(1024, 10), None);
    }

    #[test]
    fn args_round_trip() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: SpawnerArgs,
        }
        let a = SpawnerArgs {
            strategy: Strategy::PollScan,
            n: 7,
            nofile: Some(64),
            open_fds: Some(10),
            cpu: Some(1),
            wait_stdin: true,
            json: true,
            cmd: vec!["/bin/echo".into(), "hi".into()],
        };
        let mut argv: Vec<OsString> = vec!["x".into()];
        argv.extend(a.to_args());
        let b = P::try_parse_from(argv).expect("parses").a;
        assert_eq!(b.strategy, a.strategy);
        assert_eq!(
            (b.n, b.nofile, b.open_fds, b.cpu),
            (7, Some(64), Some(10), Some(1))
        );
        assert!(b.wait_stdin && b.json);
        assert_eq!(b.cmd, a.cmd);
    }

    #[test]
    fn spawns_true_with_every_strategy() {
        for s in Strategy::ALL {
            let mut sp = Spawner::new(s, &[]).expect("prepares");
            let r = sp.spawn_once().expect("spawns");
            assert!(
                r.success(),
                "{s}: /bin/true failed with status {}",
                r.status
            );
        }
    }
}
