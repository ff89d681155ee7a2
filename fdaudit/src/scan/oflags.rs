//! fdinfo's `flags:` are the file's `f_flags`, octal `O_*` bits whose values depend on the
//! architecture: x86_64 and arm64 (asm-generic) agree on all but four, which they permute.
//! A procfs tree captured on one architecture and read on the other is decoded with the
//! table of the architecture it comes from, so its flags mean what its kernel meant.
//!
//! The tables are the kernel's `arch/x86/include/uapi/asm/fcntl.h` (x86 takes the generic
//! values) against `arch/arm64/include/uapi/asm/fcntl.h`; both keep `O_CLOEXEC`, `O_PATH`,
//! `__O_TMPFILE` and the access mode at the same values.

use std::path::Path;

/// The name of the marker file in a procfs tree that says which architecture it was
/// captured on (`x86_64` or `aarch64`, one line). A real procfs has no such entry.
pub const MARKER: &str = "fdaudit-arch";

/// An architecture whose `O_*` values fdaudit knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "aarch64", alias = "arm64")]
    Aarch64,
}

/// The four flags whose values differ: (x86_64, arm64).
const O_DIRECT: (u32, u32) = (0o40000, 0o200000);
const O_LARGEFILE: (u32, u32) = (0o100000, 0o400000);
const O_DIRECTORY: (u32, u32) = (0o200000, 0o40000);
const O_NOFOLLOW: (u32, u32) = (0o400000, 0o100000);
const DIFFERING: [(u32, u32); 4] = [O_DIRECT, O_LARGEFILE, O_DIRECTORY, O_NOFOLLOW];

impl Arch {
    /// The architecture this fdaudit was built for (and runs on).
    pub const fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::X86_64
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn parse(s: &str) -> Option<Arch> {
        match s {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    fn value(self, flag: (u32, u32)) -> u32 {
        match self {
            Arch::X86_64 => flag.0,
            Arch::Aarch64 => flag.1,
        }
    }

    /// `flags` as this architecture's kernel printed them, in `to`'s values (what the
    /// `libc::O_*` constants of a build for `to` mean).
    pub fn convert(self, flags: u32, to: Arch) -> u32 {
        if self == to {
            return flags;
        }
        let mut out = flags;
        for f in DIFFERING {
            out &= !self.value(f);
        }
        for f in DIFFERING {
            if flags & self.value(f) != 0 {
                out |= to.value(f);
            }
        }
        out
    }
}

/// Why a tree's architecture could not be told.
#[derive(Debug, thiserror::Error)]
pub enum ArchError {
    #[error("{marker} names no architecture fdaudit knows ({found:?}): write x86_64 or aarch64 in it, or give --arch")]
    Unknown { marker: String, found: String },
    #[error("{marker} says the tree comes from {marker_arch}, --arch says {arg}: drop one")]
    Conflict {
        marker: String,
        marker_arch: &'static str,
        arg: &'static str,
    },
    #[error("--arch {arg} on this machine's own procfs, whose flags are {host}'s: drop --arch")]
    Live {
        arg: &'static str,
        host: &'static str,
    },
    #[error("failed to read {marker}")]
    Read {
        marker: String,
        #[source]
        source: std::io::Error,
    },
}

/// The architecture whose table decodes the fdinfo flags under `root`: `--arch`, else the
/// tree's marker file, else this machine's. A live procfs is this machine's.
pub fn resolve(root: &Path, live: bool, arg: Option<Arch>) -> Result<Arch, ArchError> {
    if live {
        return match arg {
            Some(a) if a != Arch::host() => Err(ArchError::Live {
                arg: a.as_str(),
                host: Arch::host().as_str(),
            }),
            _ => Ok(Arch::host()),
        };
    }
    let path = root.join(MARKER);
    let shown = crate::output::text::escape_path(&path);
    let marker = match read_marker(&path) {
        Ok(text) => Some(Arch::parse(text.trim()).ok_or_else(|| ArchError::Unknown {
            marker: shown.clone(),
            found: text.trim().chars().take(32).collect(),
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ArchError::Read {
                marker: shown,
                source,
            })
        }
    };
    match (arg, marker) {
        (Some(a), Some(m)) if a != m => Err(ArchError::Conflict {
            marker: shown,
            marker_arch: m.as_str(),
            arg: a.as_str(),
        }),
        (a, m) => Ok(a.or(m).unwrap_or_else(Arch::host)),
    }
}

/// The marker's text: a regular file, not followed if a link, at most 64 bytes read.
fn read_marker(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut buf = Vec::with_capacity(64);
    f.take(64).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    // What each kernel prints for the same opens (fdinfo `flags:`, octal; O_LARGEFILE is
    // forced on 64-bit).
    const X86_DIR: u32 = 0o2200000; // O_RDONLY | O_DIRECTORY | O_CLOEXEC
    const ARM_DIR: u32 = 0o2440000; // arm64: O_DIRECTORY | O_LARGEFILE | O_CLOEXEC
    const X86_NOFOLLOW_DIRECT: u32 = 0o0540002;
    const ARM_NOFOLLOW_DIRECT: u32 = 0o0700002;

    #[test]
    fn x86_64_table() {
        assert_eq!(Arch::X86_64.convert(X86_DIR, Arch::X86_64), X86_DIR);
        assert_eq!(Arch::X86_64.convert(X86_DIR, Arch::Aarch64), 0o2040000);
        assert_eq!(
            Arch::X86_64.convert(X86_NOFOLLOW_DIRECT, Arch::Aarch64),
            ARM_NOFOLLOW_DIRECT
        );
        // O_CLOEXEC, O_PATH, __O_TMPFILE and the access mode pass unchanged.
        assert_eq!(Arch::X86_64.convert(0o32000003, Arch::Aarch64), 0o32000003);
    }

    #[test]
    fn aarch64_table() {
        // arm64's O_DIRECTORY is x86's O_DIRECT: read with x86's table, an opendir fd
        // would not be a directory (issue #43: 3 findings instead of 4).
        assert_eq!(Arch::Aarch64.convert(ARM_DIR, Arch::X86_64), 0o2300000);
        assert_eq!(Arch::Aarch64.convert(ARM_DIR, Arch::Aarch64), ARM_DIR);
        assert_eq!(
            Arch::Aarch64.convert(ARM_NOFOLLOW_DIRECT, Arch::X86_64),
            X86_NOFOLLOW_DIRECT
        );
        for flags in [0, 0o2, X86_DIR, ARM_DIR, 0o777777, 0o37777777] {
            let there = Arch::X86_64.convert(flags, Arch::Aarch64);
            assert_eq!(
                Arch::Aarch64.convert(there, Arch::X86_64),
                flags,
                "{flags:o}"
            );
        }
    }

    #[test]
    fn the_host_table_is_libc_s() {
        let host = Arch::host();
        assert_eq!(host.value(O_DIRECTORY), libc::O_DIRECTORY as u32);
        assert_eq!(host.value(O_DIRECT), libc::O_DIRECT as u32);
        assert_eq!(host.value(O_NOFOLLOW), libc::O_NOFOLLOW as u32);
    }

    #[test]
    fn markers() {
        let dir = std::env::temp_dir().join(format!("fdaudit-arch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        assert_eq!(resolve(&dir, false, None).expect("no marker"), Arch::host());
        std::fs::write(dir.join(MARKER), "aarch64\n").expect("marker");
        assert_eq!(resolve(&dir, false, None).expect("marker"), Arch::Aarch64);
        let conflict = resolve(&dir, false, Some(Arch::X86_64)).expect_err("conflict");
        assert!(conflict.to_string().contains("drop one"), "{conflict}");
        std::fs::write(dir.join(MARKER), "sparc\n").expect("marker");
        let e = resolve(&dir, false, None).expect_err("unknown");
        assert!(e.to_string().contains("x86_64 or aarch64"), "{e}");
        let other = if Arch::host() == Arch::X86_64 {
            Arch::Aarch64
        } else {
            Arch::X86_64
        };
        assert!(
            resolve(&dir, true, Some(other)).is_err(),
            "--arch against a live procfs"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
