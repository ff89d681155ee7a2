//! Spawning children with each fd-closing method.
//!
//! [`Spawner`] runs a command N times, one spawn after another, and applies one
//! [`CloseMethod`] between fork and exec (or hands it to `posix_spawn`). Everything the child
//! needs (argv, envp, the `poll()` array, the `getdents64` buffer) is prepared before the
//! fork; the child itself ([`child`]) only makes raw syscalls, allocates nothing and never
//! panics.
//!
//! The hidden `fdaudit __spawner` command ([`command`]) wraps it for `fdaudit bench` and the
//! tests.
//!
//! # `__spawner --json` output
//! One JSON object per line, written after the last spawn (so printing never lands inside
//! a timed spawn): first one [`SpawnTime`] (`"type":"spawn_time"`) per spawn in order, then
//! one [`command::SpawnSummary`] (`"type":"summary"`), after an empty line. Output of the children
//! themselves goes to the same stdout, so a reader skips lines that are not such objects.

mod child;
pub mod command;
pub mod method;

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::PathBuf;
use std::time::Instant;

use libc::{c_char, c_int};

use crate::sys::{self, errno_err, sys_err, SysError};
use child::{child_exec, ChildContext, DIRENT_BUF};
pub use command::{run, SpawnTime, SpawnerArgs};
pub use method::CloseMethod;

/// Errors of the spawner library.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    #[error("command `{0}` not found in PATH")]
    NotFound(String),
    #[error("argument or environment string contains a NUL byte")]
    Nul,
    #[error(transparent)]
    Sys(#[from] SysError),
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

/// One spawn's outcome.
#[derive(Debug, Clone, Copy)]
pub struct SpawnResult {
    /// Wall time from just before fork/posix_spawn to waitpid's return.
    pub ns: u64,
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
    strategy: CloseMethod,
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
    pub fn new(strategy: CloseMethod, cmd: &[OsString]) -> Result<Spawner, SpawnerError> {
        let default = [OsString::from("/bin/true")];
        let cmd = if cmd.is_empty() { &default[..] } else { cmd };
        let path = resolve_command(&cmd[0])?;
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| SpawnerError::Nul)?;
        let argv = cmd
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SpawnerError::Nul)?;
        let envp = environment()?;
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let argv_ptrs = ptrs(&argv);
        let envp_ptrs = ptrs(&envp);
        let (soft, _) = sys::nofile()?;
        let nofile = c_int::try_from(soft).unwrap_or(c_int::MAX);
        let l = nofile as usize;
        let pollfds = if strategy == CloseMethod::PollScan {
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
        let (dirent_buf, fd_list) = if strategy == CloseMethod::ProcfdWalk {
            (vec![0u8; DIRENT_BUF], vec![0 as c_int; l])
        } else {
            (Vec::new(), Vec::new())
        };
        let file_actions = file_actions(strategy)?;
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

    /// The program spawned (argv[0] resolved).
    pub fn path(&self) -> &CString {
        &self.path
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
                return Err(errno_err("posix_spawn", rc).into());
            }
            pid
        } else {
            let child = self.child_context();
            // SAFETY: this process is single-threaded while it spawns, and the child only
            // runs `child_exec`, which makes raw syscalls on memory prepared before the fork.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(sys_err("fork").into());
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
                return Err(sys_err("waitpid").into());
            }
        }
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Ok(SpawnResult { ns, status })
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

/// The environment as `KEY=VALUE` C strings, for execve.
fn environment() -> Result<Vec<CString>, SpawnerError> {
    std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SpawnerError::Nul)
}

/// posix_spawn file actions for the posix-spawn methods (`None` for the fork ones).
fn file_actions(
    method: CloseMethod,
) -> Result<Option<Box<libc::posix_spawn_file_actions_t>>, SpawnerError> {
    if !method.is_posix_spawn() {
        return Ok(None);
    }
    // SAFETY: zeroed storage that posix_spawn_file_actions_init then initialises.
    let mut fa: Box<libc::posix_spawn_file_actions_t> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `fa` points to valid storage.
    let rc = unsafe { libc::posix_spawn_file_actions_init(&mut *fa) };
    if rc != 0 {
        return Err(errno_err("posix_spawn_file_actions_init", rc).into());
    }
    if method == CloseMethod::PosixSpawnClosefrom {
        // SAFETY: `fa` was initialised above.
        let rc = unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut *fa, 3) };
        if rc != 0 {
            // SAFETY: initialised above, destroyed once.
            unsafe { libc::posix_spawn_file_actions_destroy(&mut *fa) };
            return Err(errno_err("posix_spawn_file_actions_addclosefrom_np", rc).into());
        }
    }
    Ok(Some(fa))
}

impl Drop for Spawner {
    fn drop(&mut self) {
        if let Some(fa) = self.file_actions.as_deref_mut() {
            // SAFETY: initialised in `new`, destroyed once here.
            unsafe { libc::posix_spawn_file_actions_destroy(fa) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_clap_serde_and_display() {
        use clap::ValueEnum as _;
        for s in CloseMethod::ALL {
            let v = s.to_possible_value().expect("every strategy is a value");
            assert_eq!(v.get_name(), s.name(), "clap name of {s:?}");
            assert_eq!(s.to_string(), s.name());
            let j = serde_json::to_string(&s).expect("serialises");
            assert_eq!(j, format!("\"{}\"", s.name()), "serde name of {s:?}");
            let back: CloseMethod = serde_json::from_str(&j).expect("deserialises");
            assert_eq!(back, s);
        }
        assert_eq!(CloseMethod::value_variants().len(), CloseMethod::ALL.len());
    }

    #[test]
    fn expected_close_calls() {
        assert_eq!(
            CloseMethod::CloseLoop.expected_close_calls(1024, 3),
            Some(1021)
        );
        assert_eq!(
            CloseMethod::CloseRange.expected_close_calls(1024, 1000),
            Some(0)
        );
        assert_eq!(
            CloseMethod::PollScan.expected_close_calls(1024, 10),
            Some(7)
        );
        assert_eq!(CloseMethod::Closefrom.expected_close_calls(1024, 10), None);
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
            strategy: CloseMethod::PollScan,
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
        for s in CloseMethod::ALL {
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
