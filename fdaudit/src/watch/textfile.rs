//! The node_exporter textfile: DIR/fdaudit.prom, written the way node_exporter's textfile
//! writers do it, so that whoever else can write DIR cannot make root write elsewhere.
//!
//! DIR is opened once per write with `O_DIRECTORY | O_NOFOLLOW` (a DIR that is itself a
//! symbolic link is refused: whoever can write its parent could repoint it between two
//! writes). In that directory (`openat`, so no path is looked up twice) a temporary file
//! with a name nobody can predict (`.fdaudit.prom.` and 16 random hex digits from
//! getrandom(2)) is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (the kernel refuses any
//! existing name, a symbolic link included), mode 0644, written and fsync'ed, then
//! renamed over `fdaudit.prom` with `renameat` (which replaces whatever is at that name,
//! a planted link included, and never follows it). On any failure the temporary file is
//! unlinked. The directory itself is not fsync'ed: a crash loses at most the newest
//! rename, and the next write replaces it.

use std::{
    ffi::{CStr, CString},
    fs::File,
    io::{self, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use anyhow::{Context as _, Result};

/// The file node_exporter reads, in DIR.
pub const NAME: &CStr = c"fdaudit.prom";

/// Writes `text` to DIR/fdaudit.prom atomically (module doc).
pub fn write(dir: &Path, text: &str) -> Result<()> {
    let fin = dir.join(NAME.to_str().expect("ASCII"));
    let res = (|| {
        let dirfd = open_dir(dir)?;
        let (tmp, file) = create_temp(&dirfd)?;
        let written = fill(file, text).and_then(|()| {
            // SAFETY: both names are NUL-terminated; dirfd is open.
            let rc = unsafe {
                libc::renameat(
                    dirfd.as_raw_fd(),
                    tmp.as_ptr(),
                    dirfd.as_raw_fd(),
                    NAME.as_ptr(),
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
        if written.is_err() {
            // SAFETY: a NUL-terminated name in an open directory.
            unsafe { libc::unlinkat(dirfd.as_raw_fd(), tmp.as_ptr(), 0) };
        }
        written
    })();
    res.with_context(|| format!("failed to write {}", fin.display()))
}

/// Whether `dir` can take the textfile: a directory, and not a symbolic link to one.
pub fn check_dir(dir: &Path) -> io::Result<()> {
    open_dir(dir).map(drop)
}

/// DIR, opened without following a link at its last component (trailing slashes are
/// dropped first: with one, the kernel would follow it).
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let mut bytes = dir.as_os_str().as_bytes();
    while bytes.len() > 1 && bytes.ends_with(b"/") {
        bytes = &bytes[..bytes.len() - 1];
    }
    let c = CString::new(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new temporary file in `dir` under a name nobody can guess, and its name.
fn create_temp(dir: &OwnedFd) -> io::Result<(CString, File)> {
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    // A name taken (by chance or on purpose) is not reused: another random one is drawn.
    for _ in 0..8 {
        let name = CString::new(format!(".fdaudit.prom.{:016x}", random_u64()?)).expect("no NUL");
        // SAFETY: a NUL-terminated name in an open directory.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: just created, owned here only.
            let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            return Ok((name, file));
        }
        last = io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EEXIST) {
            break;
        }
    }
    Err(last)
}

/// The text into the new file, mode 0644 whatever the umask, on disk before the rename.
fn fill(mut file: File, text: &str) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.write_all(text.as_bytes())?;
    file.sync_data()
}

/// 64 bits from getrandom(2).
fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: b is valid for 8 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fdaudit-tf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn textfile_is_replaced_atomically() {
        let dir = temp_dir("atomic");
        write(&dir, "a 1\n").unwrap();
        write(&dir, "a 2\n").unwrap();
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["fdaudit.prom"], "no temporary file is left");
        assert_eq!(
            std::fs::read_to_string(dir.join("fdaudit.prom")).unwrap(),
            "a 2\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            write(&dir, "a 3\n").is_err(),
            "a missing directory is an error"
        );
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        use std::os::unix::fs::{symlink, MetadataExt as _};
        let dir = temp_dir("link");
        let victim = dir.join("victim");
        std::fs::write(&victim, "untouched\n").unwrap();
        symlink(&victim, dir.join("fdaudit.prom")).unwrap();
        write(&dir, "a 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
        let meta = std::fs::symlink_metadata(dir.join("fdaudit.prom")).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(meta.mode() & 0o7777, 0o644);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_that_is_a_link_is_refused() {
        let dir = temp_dir("dirlink");
        let real = dir.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(check_dir(&link).is_err());
        assert!(write(&link, "a 1\n").is_err());
        let mut slash = link.clone().into_os_string();
        slash.push("/");
        assert!(
            check_dir(Path::new(&slash)).is_err(),
            "a trailing slash follows no link"
        );
        assert!(!real.join("fdaudit.prom").exists());
        check_dir(&real).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_differ() {
        let a = random_u64().unwrap();
        let b = random_u64().unwrap();
        assert_ne!(a, b);
    }
}
