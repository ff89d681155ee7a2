//! The records stream: where a subcommand's output goes (`-o FILE`, stdout or stderr), its
//! header record, and the notes that share it.
//!
//! One stream per process, opened once by the subcommand. In `--json` mode every line on it is
//! a JSON object with a `"type"`, the first a [`Header`]; notes and warnings become
//! `{"type":"note"}` records on it, so a reader never meets a line that is not a record. In
//! human mode notes go to stderr as `note: ...` lines.
//!
//! Writes go straight to the file descriptor, not through `std::io::stdout()`: the standard
//! library silently discards writes to a closed stdout (EBADF), and a trace that lost all its
//! records must not exit 0.

use std::{
    fs::File,
    io::{self, Write},
    mem::ManuallyDrop,
    os::fd::{AsRawFd as _, FromRawFd as _},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use anyhow::Context as _;
use serde::Serialize;

use super::text::{self, Lossless};

/// The version of the JSON records' schema (`docs/json.md`, `docs/fdaudit.schema.json`).
/// Bumped when a field changes meaning or goes away; new fields do not bump it.
pub const SCHEMA_VERSION: u32 = 2;

/// Which of fdaudit's standard streams a records stream defaults to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdStream {
    Stdout,
    Stderr,
}

impl StdStream {
    fn fd(self) -> i32 {
        match self {
            StdStream::Stdout => 1,
            StdStream::Stderr => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            StdStream::Stdout => "stdout",
            StdStream::Stderr => "stderr",
        }
    }
}

/// Where the records of one run go.
#[derive(Debug, Clone)]
pub enum Dest {
    Std(StdStream),
    File(PathBuf),
}

impl Dest {
    /// `-o FILE` when given, else `default`.
    pub fn new(output: Option<&Path>, default: StdStream) -> Dest {
        match output {
            Some(p) => Dest::File(p.to_owned()),
            None => Dest::Std(default),
        }
    }

    fn describe(&self) -> String {
        match self {
            Dest::Std(s) => s.name().to_owned(),
            Dest::File(p) => text::escape(&p.to_string_lossy()),
        }
    }
}

/// Makes the /dev/null the runtime put on a closed fd 0-2 close-on-exec, so a traced command
/// still finds that fd closed, as fdaudit's caller left it. Writing records to a closed
/// stream is then an error (EBADF), not a silent loss.
///
/// Which fds were closed comes from [`crate::caller`]'s capture before `main`: the Rust
/// runtime fills a closed one with /dev/null, after which a closed stdout looks like a good
/// one and every record written to it would be silently lost.
pub fn guard_std_fds() {
    let closed = crate::caller::CallerState::get().stdio_closed;
    for fd in 0..3 {
        if closed & (1 << fd) != 0 {
            // SAFETY: fd is open (the runtime's /dev/null); F_SETFD changes only its flag.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
}

/// Whether fd 0, 1 or 2 was closed when fdaudit started.
pub fn std_closed(s: StdStream) -> bool {
    crate::caller::CallerState::get().stdio_closed & (1 << s.fd()) != 0
}

struct Inner {
    dest: Dest,
    /// The file, or fd 1 or 2 (never closed by us).
    file: ManuallyDrop<File>,
    owned: bool,
    json: bool,
    /// Bytes written, and of them those up to the last newline: a write that fails (a full
    /// file system) is cut back to whole lines.
    written: u64,
    whole: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: we opened it and drop it once.
            unsafe { ManuallyDrop::drop(&mut self.file) };
        }
    }
}

static STREAM: Mutex<Option<Inner>> = Mutex::new(None);
/// CLOCK_MONOTONIC at the header: `time_ns` fields count from here.
static START_MONO_NS: AtomicU64 = AtomicU64::new(0);

fn lock() -> std::sync::MutexGuard<'static, Option<Inner>> {
    STREAM.lock().unwrap_or_else(|p| p.into_inner())
}

/// CLOCK_MONOTONIC now, ns: the clock of the kernel's `bpf_ktime_get_ns()`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid storage.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// ns since the header for a CLOCK_MONOTONIC timestamp (0 for one before it).
pub fn since_header(mono_ns: u64) -> u64 {
    mono_ns.saturating_sub(START_MONO_NS.load(Ordering::Relaxed))
}

/// The first record of every JSON stream.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub fdaudit_version: &'static str,
    pub schema_version: u32,
    /// The subcommand: "scan", "trace", "bench" or "doctor".
    pub command: &'static str,
    pub host: String,
    /// "sysname release machine" from uname(2).
    pub kernel: String,
    /// RFC 3339, UTC, to the millisecond.
    pub started_at: String,
    /// fdaudit's own command line.
    #[serde(flatten)]
    pub argv: Lossless<Vec<Vec<u8>>, ArgvField>,
}

crate::lossless_field!(ArgvField, "argv");

impl Header {
    pub fn now(command: &'static str) -> Header {
        use std::os::unix::ffi::OsStringExt as _;
        Header {
            kind: "header",
            fdaudit_version: env!("CARGO_PKG_VERSION"),
            schema_version: SCHEMA_VERSION,
            command,
            host: hostname(),
            kernel: crate::sys::uname().unwrap_or_else(|| "unknown".into()),
            started_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            argv: Lossless::new(std::env::args_os().map(|a| a.into_vec()).collect()),
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Opens the records stream of this run; in JSON mode writes the header.
pub fn open(dest: Dest, json: bool, command: &'static str) -> anyhow::Result<()> {
    let (file, owned) = match &dest {
        Dest::Std(s) => {
            // SAFETY: fd 1 or 2 is open (guard_std_fds filled a closed one); ManuallyDrop
            // keeps it from being closed.
            (
                ManuallyDrop::new(unsafe { File::from_raw_fd(s.fd()) }),
                false,
            )
        }
        Dest::File(p) => (ManuallyDrop::new(create(p)?), true),
    };
    START_MONO_NS.store(monotonic_ns(), Ordering::Relaxed);
    *lock() = Some(Inner {
        dest,
        file,
        owned,
        json,
        written: 0,
        whole: 0,
    });
    if json {
        record(&Header::now(command))?;
    }
    Ok(())
}

/// Creates (or truncates) an output file (`-o`, `--junit`). Opened without blocking, so that a FIFO nobody reads
/// is an error now rather than a hang before anything starts; writes then block as usual.
/// std opens with O_CLOEXEC: a traced command never inherits it.
pub(crate) fn create(p: &Path) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = text::escape_path(p);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => anyhow::anyhow!(
                "failed to open {name}: it is a FIFO and nothing reads it: start the reader first"
            ),
            _ => anyhow::Error::new(e).context(format!("failed to create {name}")),
        })?;
    // SAFETY: F_GETFL/F_SETFL on the fd just opened.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok(file)
}

/// A file written whole at each report (`unclosed --folded`, `--pprof`): created when the run
/// starts, as `-o` is, so that a bad path fails before anything runs; every rewrite goes
/// through that open file (truncated first when it is a regular file), so the path is not
/// looked up again while fdaudit runs.
pub struct RewrittenFile {
    file: File,
    name: String,
    flag: &'static str,
}

impl RewrittenFile {
    /// Creates (or truncates) `path`, given with `flag`, which the errors name.
    pub fn create(path: &Path, flag: &'static str) -> anyhow::Result<RewrittenFile> {
        let file = create(path).map_err(|e| anyhow::anyhow!("{e:#} ({flag})"))?;
        Ok(RewrittenFile {
            file,
            name: text::escape_path(path),
            flag,
        })
    }

    /// Replaces the file's contents with `bytes`.
    pub fn rewrite(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        use std::io::Seek as _;
        let file = &mut self.file;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        if regular {
            file.set_len(0)
                .and_then(|()| file.rewind())
                .with_context(|| format!("failed to truncate {} ({})", self.name, self.flag))?;
        }
        file.write_all(bytes)
            .and_then(|()| file.flush())
            .with_context(|| format!("failed to write {} ({})", self.name, self.flag))
    }
}

/// Whether the stream is open in JSON mode.
pub fn is_json() -> bool {
    lock().as_ref().is_some_and(|i| i.json)
}

/// Whether the stream is a file (`-o FILE`): human-mode notes then go into it too.
fn is_file() -> bool {
    lock()
        .as_ref()
        .is_some_and(|i| matches!(i.dest, Dest::File(_)))
}

/// `-q`: human-mode notes ([`Level::Note`]) are not printed; warnings and verdicts are.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `-q` for the notes of this run.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether the stream is fdaudit's stderr (so notes in human mode would interleave).
pub fn is_stderr() -> bool {
    lock()
        .as_ref()
        .is_some_and(|i| matches!(i.dest, Dest::Std(StdStream::Stderr)))
}

/// The width and colour of the stream's destination for people: stdout's or stderr's
/// terminal; a file has no width and colour only when forced (`--color always`,
/// CLICOLOR_FORCE).
pub fn term() -> super::table::Term {
    use super::table::{stderr_width, Term};
    use std::io::IsTerminal as _;
    let dest = lock().as_ref().map(|i| i.dest.clone());
    match dest {
        None | Some(Dest::Std(StdStream::Stdout)) => Term::stdout(),
        Some(Dest::Std(StdStream::Stderr)) => Term {
            width: stderr_width(),
            color: super::color::enabled_for(io::stderr().is_terminal()),
        },
        Some(Dest::File(_)) => Term {
            width: None,
            color: super::color::enabled_for(false),
        },
    }
}

// Here rather than in `table`, which then need not know about the stream.
impl std::fmt::Display for super::table::Table {
    /// Fitted to the records stream's terminal (stdout's when none is open; no fitting
    /// into an `-o` file), coloured when colour is on there.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render_for(term()))
    }
}

/// The error for a failed write to the stream, naming where it goes.
fn write_error(e: io::Error) -> anyhow::Error {
    let what = lock()
        .as_ref()
        .map_or_else(|| "stdout".to_owned(), |i| i.dest.describe());
    anyhow::Error::new(e).context(format!("failed to write the output to {what}"))
}

fn write_all_raw(bytes: &[u8]) -> io::Result<()> {
    let mut g = lock();
    let Some(inner) = g.as_mut() else {
        return Err(io::Error::other("no output stream is open"));
    };
    if let Dest::Std(s) = inner.dest {
        if std_closed(s) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
    }
    if let Err(e) = inner.file.write_all(bytes) {
        if inner.owned && inner.file.metadata().is_ok_and(|m| m.is_file()) {
            // Best effort: leave whole lines (whole JSON records) in the file.
            let _ = inner.file.set_len(inner.whole);
        }
        return Err(e);
    }
    inner.written += bytes.len() as u64;
    if let Some(nl) = bytes.iter().rposition(|&b| b == b'\n') {
        inner.whole = inner.written - (bytes.len() - nl - 1) as u64;
    }
    Ok(())
}

/// A `Write` handle on the stream: each `write` call goes out whole (wrap it in a
/// `BufWriter` to batch). Errors name the destination.
#[derive(Debug, Default, Clone, Copy)]
pub struct Out;

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_all_raw(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        write_all_raw(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        match lock().as_mut() {
            Some(i) => i.file.flush(),
            None => Ok(()),
        }
    }
}

/// Writes one JSON record (a whole line in one write).
pub fn record<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(value).context("failed to encode a JSON record")?;
    line.push(b'\n');
    write_all_raw(&line).map_err(write_error)
}

/// Writes text for people (already rendered and escaped).
pub fn text(s: &str) -> anyhow::Result<()> {
    write_all_raw(s.as_bytes()).map_err(write_error)
}

/// Flushes the stream (a full disk shows up here for buffered files).
pub fn finish() -> anyhow::Result<()> {
    let mut g = lock();
    if let Some(i) = g.as_mut() {
        i.file.flush().map_err(|e| {
            let what = i.dest.describe();
            anyhow::Error::new(e).context(format!("failed to write the output to {what}"))
        })?;
    }
    Ok(())
}

/// How serious a note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Note,
    Warning,
    /// What a CI policy (`--fail-on`, `--fail-on-leak`) decided and why: shown with `-q`.
    Verdict,
}

/// A `{"type":"note"}` record: what a person reads as `note: ...` or `warning: ...`.
#[derive(Debug, Clone, Serialize)]
pub struct Note<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub level: Level,
    pub message: &'a str,
}

/// A `{"type":"error"}` record: the run failed (written where a JSON reader looks, when the
/// records go to stderr; the `error:` line otherwise).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorRecord {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
    pub causes: Vec<String>,
}

/// A note or warning: a record in JSON mode, a `note: ...` line on stderr otherwise.
/// Never fails: a note that cannot be written is not worth stopping for (a lost record
/// fails the run when the next record or the final flush is written).
pub fn note(level: Level, message: &str) {
    if is_json() {
        let _ = record(&Note {
            kind: "note",
            level,
            message,
        });
        // A CI log shows the verdict without parsing JSON: when the records go to a file
        // or stdout, the verdict is said on stderr too (when they go to stderr, every line
        // there stays JSON).
        if level == Level::Verdict && !is_stderr() {
            crate::diag!("verdict: {}", text::escape(message));
        }
    } else {
        if level == Level::Note && QUIET.load(Ordering::Relaxed) {
            return;
        }
        let prefix = match level {
            Level::Note => "note",
            Level::Warning => "warning",
            Level::Verdict => "verdict",
        };
        let line = format!("{prefix}: {}", text::escape(message));
        crate::diag!("{line}");
        // A records file keeps what the terminal was told (`trace -o t.txt`).
        if is_file() {
            let _ = self::text(&format!("{line}\n"));
        }
    }
}

/// Reports a fatal error: as an `error` record when the JSON records go to stderr (so
/// every line there stays JSON), else as `error:` and `caused by:` lines on stderr.
pub fn report_error(e: &anyhow::Error) {
    let message = e.to_string();
    let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    if is_json() && is_stderr() {
        let _ = record(&ErrorRecord {
            kind: "error",
            message,
            causes,
        });
        return;
    }
    if is_json() {
        // The records go to a file or stdout: leave a last record there too.
        let _ = record(&ErrorRecord {
            kind: "error",
            message: message.clone(),
            causes: causes.clone(),
        });
    }
    crate::diag!("error: {}", text::escape(&message));
    for c in &causes {
        crate::diag!("caused by: {}", text::escape(c));
    }
}

#[cfg(test)]
mod tests {
    use super::RewrittenFile;

    #[test]
    fn a_rewritten_file_holds_only_the_last_contents_even_after_its_path_moved() {
        let dir = std::env::temp_dir().join(format!("fdaudit-rewritten-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, moved) = (dir.join("profile"), dir.join("moved"));
        let mut f = RewrittenFile::create(&path, "--pprof").unwrap();
        f.rewrite(b"a longer first report\n").unwrap();
        f.rewrite(b"short\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"short\n");
        // The path is not looked up again: what replaced it is left alone.
        std::fs::rename(&path, &moved).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        f.rewrite(b"third\n").unwrap();
        assert_eq!(std::fs::read(&moved).unwrap(), b"third\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
        let bad = RewrittenFile::create(&dir.join("no/such/dir"), "--folded").err();
        let msg = format!("{:#}", bad.expect("a missing directory fails"));
        assert!(
            msg.starts_with("failed to create ") && msg.ends_with("(--folded)"),
            "{msg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
