//! What a trace takes from the kernel's BTF (the offsets, [`Config`], and whether the
//! kernel runs ia32 syscalls), kept per kernel build and fdaudit binary: parsing the 5 MB
//! of /sys/kernel/btf/vmlinux was the longest step before the maps (docs/performance.md).
//!
//! One file per kernel, `btf-<kernel build id>.bin` in [`dir`], says which fdaudit binary
//! wrote it (its inode, size and mtime) and the BTF's size; anything else, a file not owned
//! by the caller or writable by others, or a short read is a miss, and the trace parses
//! the BTF as before and writes the file again.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use fdaudit_common::Config;

use super::btf::VMLINUX_BTF;

/// Where the files go: `FDAUDIT_CACHE_DIR`, else /var/cache/fdaudit (a trace runs as root).
pub fn dir() -> PathBuf {
    std::env::var_os("FDAUDIT_CACHE_DIR")
        .map_or_else(|| PathBuf::from("/var/cache/fdaudit"), PathBuf::from)
}

/// What one file is for: the kernel, its BTF's size and the fdaudit binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The kernel's GNU build id, hex (/sys/kernel/notes).
    pub kernel: String,
    pub btf_size: u64,
    /// The running fdaudit binary: device, inode, size and mtime.
    pub exe: String,
}

impl Key {
    /// The running kernel's and binary's key; None where the kernel publishes no build id.
    pub fn current() -> Option<Key> {
        let kernel = build_id(&fs::read("/sys/kernel/notes").ok()?)?;
        let btf_size = fs::metadata(VMLINUX_BTF).ok()?.len();
        let m = fs::metadata("/proc/self/exe").ok()?;
        let exe = format!(
            "{}:{}:{}:{}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec()
        );
        Some(Key {
            kernel,
            btf_size,
            exe,
        })
    }

    fn file(&self, dir: &Path) -> PathBuf {
        dir.join(format!("btf-{}.bin", self.kernel))
    }

    /// The file's first line: everything but the kernel, which names the file.
    fn header(&self) -> String {
        format!("fdaudit btf cache 1 {} {}\n", self.btf_size, self.exe)
    }
}

/// The GNU build id (hex) among the ELF notes in `notes` (4-byte aligned, as the kernel
/// publishes them).
pub fn build_id(notes: &[u8]) -> Option<String> {
    type Elf = object::elf::FileHeader64<object::NativeEndian>;
    let endian = object::NativeEndian;
    object::read::elf::NoteIterator::<Elf>::new(endian, 4, notes)
        .ok()?
        .map_while(Result::ok)
        .find(|n| n.name() == b"GNU" && n.n_type(endian) == object::elf::NT_GNU_BUILD_ID)
        .filter(|n| !n.desc().is_empty())
        .map(|n| n.desc().iter().map(|b| format!("{b:02x}")).collect())
}

/// The cached offsets and ia32 answer for `key` in `dir`, if a valid file has them.
pub fn load(dir: &Path, key: &Key) -> Option<(Config, bool)> {
    let path = key.file(dir);
    let m = fs::symlink_metadata(&path).ok()?;
    // SAFETY: geteuid has no preconditions.
    if !m.is_file() || m.uid() != unsafe { libc::geteuid() } || m.mode() & 0o022 != 0 {
        return None;
    }
    let bytes = fs::read(&path).ok()?;
    let body = bytes.strip_prefix(key.header().as_bytes())?;
    let (&ia32, config) = body.split_first()?;
    if config.len() != size_of::<Config>() || ia32 > 1 {
        return None;
    }
    // SAFETY: Config is repr(C) and all u32 (any bytes are a value), and the length is
    // checked; the header matched, so this binary, with this Config layout, wrote it.
    let config = unsafe { std::ptr::read_unaligned(config.as_ptr().cast::<Config>()) };
    Some((config, ia32 == 1))
}

/// Writes `config` and `ia32` for `key` into `dir` (made 0700 when missing), replacing the
/// file whole (a new file renamed over the old one).
pub fn store(dir: &Path, key: &Key, config: &Config, ia32: bool) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = key.file(dir);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    // SAFETY: Config is repr(C), all u32, no padding: its bytes are initialised.
    let config = unsafe {
        std::slice::from_raw_parts((config as *const Config).cast::<u8>(), size_of::<Config>())
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let written = f
        .write_all(key.header().as_bytes())
        .and_then(|()| f.write_all(&[u8::from(ia32)]))
        .and_then(|()| f.write_all(config))
        .and_then(|()| fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            kernel: "7dd4ff07".into(),
            btf_size: 6_000_000,
            exe: "1:2:3:4.5".into(),
        }
    }

    /// A fresh directory for one test, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let d =
                std::env::temp_dir().join(format!("fdaudit-btfc-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).expect("temp dir");
            TempDir(d)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn config() -> Config {
        Config {
            task_pid: 2_456,
            fdt_fd: 8,
            ..Config::default()
        }
    }

    #[test]
    fn the_build_id_is_the_gnu_note() {
        // /sys/kernel/notes of this machine's kernel, cut to the first two notes: a Xen
        // note (name "Xen", type 6) and then the build id.
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 6u32, &[1u8, 2, 3, 4, 5][..]),
            (&b"GNU\0"[..], 3, &[0x7d, 0xd4, 0xff, 0x07][..]),
        ] {
            notes.extend((name.len() as u32).to_ne_bytes());
            notes.extend((desc.len() as u32).to_ne_bytes());
            notes.extend(kind.to_ne_bytes());
            notes.extend(name);
            notes.extend(desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        assert_eq!(build_id(&notes).as_deref(), Some("7dd4ff07"));
        assert_eq!(build_id(&notes[..20]), None);
        assert_eq!(build_id(&[]), None);
    }

    #[test]
    fn a_stored_file_loads_for_its_key_only() {
        let dir = TempDir::new("store");
        let sub = dir.path().join("cache");
        store(&sub, &key(), &config(), true).expect("store");
        assert_eq!(load(&sub, &key()), Some((config(), true)));
        let mode = fs::metadata(&sub).expect("dir").mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Another fdaudit binary or another BTF size: a miss.
        let other_exe = Key {
            exe: "1:2:3:9.9".into(),
            ..key()
        };
        assert_eq!(load(&sub, &other_exe), None);
        let other_btf = Key {
            btf_size: 1,
            ..key()
        };
        assert_eq!(load(&sub, &other_btf), None);
        // Rewritten for the other binary: it loads there, and no temporary file is left.
        store(&sub, &other_exe, &Config::default(), false).expect("store again");
        assert_eq!(load(&sub, &other_exe), Some((Config::default(), false)));
        assert_eq!(fs::read_dir(&sub).expect("list").count(), 1);
    }

    #[test]
    fn a_short_or_open_file_is_a_miss() {
        let dir = TempDir::new("short");
        store(dir.path(), &key(), &config(), false).expect("store");
        let path = key().file(dir.path());
        let bytes = fs::read(&path).expect("read");
        fs::write(&path, &bytes[..bytes.len() - 1]).expect("truncate");
        assert_eq!(load(dir.path(), &key()), None);
        fs::write(&path, &bytes).expect("restore");
        assert!(load(dir.path(), &key()).is_some());
        let mut perms = fs::metadata(&path).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o666);
        fs::set_permissions(&path, perms).expect("chmod");
        assert_eq!(load(dir.path(), &key()), None, "writable by others");
    }
}
