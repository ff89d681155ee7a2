//! The guest's root file system: a tree of files gathered from the host (or from unpacked
//! Debian packages for another architecture), written as a newc cpio archive the kernel
//! unpacks into its rootfs. Everything the checks use is in it, so no module (9p, virtio)
//! is needed: Debian's 5.10 and 6.1 kernels have those as modules only.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

enum Node {
    Dir,
    File { src: PathBuf, mode: u32 },
    Data { bytes: Vec<u8>, mode: u32 },
    Symlink(String),
}

/// The files of the guest, by absolute guest path.
#[derive(Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

impl Tree {
    fn parents(&mut self, path: &str) {
        let mut p = Path::new(path).parent();
        while let Some(d) = p {
            let s = d.to_string_lossy();
            if s == "/" || s.is_empty() {
                break;
            }
            self.nodes.entry(s.into_owned()).or_insert(Node::Dir);
            p = d.parent();
        }
    }
    pub fn dir(&mut self, path: &str) {
        self.parents(path);
        self.nodes.entry(path.to_string()).or_insert(Node::Dir);
    }
    /// `src` from the host (symlinks followed) at `path`, executable.
    pub fn file(&mut self, path: &str, src: &Path) {
        self.parents(path);
        self.nodes.insert(
            path.to_string(),
            Node::File {
                src: src.to_path_buf(),
                mode: 0o755,
            },
        );
    }
    pub fn data(&mut self, path: &str, bytes: impl Into<Vec<u8>>, mode: u32) {
        self.parents(path);
        self.nodes.insert(
            path.to_string(),
            Node::Data {
                bytes: bytes.into(),
                mode,
            },
        );
    }
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.parents(path);
        self.nodes
            .insert(path.to_string(), Node::Symlink(target.to_string()));
    }
    /// A host directory tree, copied to the same path in the guest (regular files only).
    pub fn copy_dir(&mut self, guest: &str, src: &Path) -> Result<()> {
        self.dir(guest);
        for e in
            std::fs::read_dir(src).with_context(|| format!("failed to read {}", src.display()))?
        {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let g = format!("{guest}/{name}");
            let ft = e.file_type()?;
            if ft.is_dir() {
                self.copy_dir(&g, &e.path())?;
            } else if ft.is_symlink() {
                let t = std::fs::read_link(e.path())?;
                self.symlink(&g, &t.to_string_lossy());
            } else {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = e.metadata()?.permissions().mode() & 0o7777;
                self.parents(&g);
                self.nodes.insert(
                    g,
                    Node::File {
                        src: e.path(),
                        mode,
                    },
                );
            }
        }
        Ok(())
    }

    /// Regular files in the tree that are ELF executables or libraries (for [`Libs`]).
    fn elf_files(&self) -> Vec<PathBuf> {
        self.nodes
            .values()
            .filter_map(|n| match n {
                Node::File { src, .. } if is_elf(src) => Some(src.clone()),
                _ => None,
            })
            .collect()
    }

    /// Adds the dynamic loader and every shared library the tree's ELF files need, found
    /// in `libs`; fails naming the libraries it cannot find.
    pub fn add_shared_libs(&mut self, libs: &Libs) -> Result<()> {
        let mut todo = self.elf_files();
        let mut seen = BTreeSet::new();
        let mut missing = BTreeSet::new();
        while let Some(elf) = todo.pop() {
            let (interp, needed) = elf_deps(&elf)?;
            if let Some(interp) = interp {
                if !self.nodes.contains_key(&interp) {
                    let src = libs.sysroot.join(interp.trim_start_matches('/'));
                    if !src.exists() {
                        bail!(
                            "the dynamic loader {interp} of {} is not in {}",
                            elf.display(),
                            libs.sysroot.display()
                        );
                    }
                    self.file(&interp, &src);
                }
            }
            for name in needed {
                if !seen.insert(name.clone()) {
                    continue;
                }
                match libs.find(&name) {
                    Some(src) => {
                        let guest = format!("/lib/{}/{name}", libs.multiarch);
                        self.file(&guest, &src);
                        todo.push(src);
                    }
                    None => {
                        missing.insert(format!("{name} (for {})", elf.display()));
                    }
                }
            }
        }
        if !missing.is_empty() {
            bail!(
                "shared libraries not found in {}: {}",
                libs.sysroot.display(),
                missing.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }

    /// Writes the tree as a newc cpio archive (what the kernel's initramfs unpacker reads).
    pub fn write_cpio(&self, out: &Path) -> Result<()> {
        let f = std::fs::File::create(out)
            .with_context(|| format!("failed to create {}", out.display()))?;
        let mut w = std::io::BufWriter::new(f);
        for (ino, (path, node)) in (1u32..).zip(&self.nodes) {
            let name = path.trim_start_matches('/');
            let b = cpio::newc::Builder::new(name)
                .ino(ino)
                .uid(0)
                .gid(0)
                .nlink(1);
            match node {
                Node::Dir => {
                    let mode = if name == "tmp" { 0o41777 } else { 0o40755 };
                    b.mode(mode).nlink(2).write(&mut w, 0).finish()?;
                }
                Node::Symlink(t) => {
                    let mut e = b.mode(0o120777).write(&mut w, t.len() as u32);
                    e.write_all(t.as_bytes())?;
                    e.finish()?;
                }
                Node::Data { bytes, mode } => {
                    let mut e = b.mode(0o100000 | mode).write(&mut w, bytes.len() as u32);
                    e.write_all(bytes)?;
                    e.finish()?;
                }
                Node::File { src, mode } => {
                    let bytes = std::fs::read(src)
                        .with_context(|| format!("failed to read {}", src.display()))?;
                    let size = u32::try_from(bytes.len())
                        .with_context(|| format!("{} is over 4 GiB", src.display()))?;
                    let mut e = b.mode(0o100000 | mode).write(&mut w, size);
                    e.write_all(&bytes)?;
                    e.finish()?;
                }
            }
        }
        cpio::newc::trailer(&mut w)?;
        w.flush()?;
        Ok(())
    }
}

/// Where the guest's shared libraries come from: the host's own (`/`) for the host
/// architecture, unpacked Debian packages for another.
pub struct Libs {
    pub sysroot: PathBuf,
    pub multiarch: String,
}

impl Libs {
    fn find(&self, name: &str) -> Option<PathBuf> {
        let m = &self.multiarch;
        [
            format!("lib/{m}"),
            format!("usr/lib/{m}"),
            "lib".to_string(),
            "usr/lib".to_string(),
            "lib64".to_string(),
        ]
        .iter()
        .map(|d| self.sysroot.join(d).join(name))
        .find(|p| p.exists())
    }
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read as _;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// (PT_INTERP, DT_NEEDED names) of an ELF file of any architecture, read with binutils'
/// `readelf` (ldd would run the loader, which cannot work for a foreign architecture).
fn elf_deps(elf: &Path) -> Result<(Option<String>, Vec<String>)> {
    let out = Command::new("readelf")
        .args(["-W", "-l", "-d"])
        .arg(elf)
        .env("LC_ALL", "C")
        .output()
        .context("failed to run readelf (binutils)")?;
    if !out.status.success() {
        bail!("readelf failed on {}", elf.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut interp = None;
    let mut needed = Vec::new();
    for line in text.lines() {
        if let Some(i) = line.find("[Requesting program interpreter: ") {
            let rest = &line[i + "[Requesting program interpreter: ".len()..];
            interp = rest.strip_suffix(']').map(str::to_string);
        }
        if line.contains("(NEEDED)") {
            if let Some(i) = line.find("Shared library: [") {
                let rest = &line[i + "Shared library: [".len()..];
                if let Some(n) = rest.strip_suffix(']') {
                    needed.push(n.to_string());
                }
            }
        }
    }
    Ok((interp, needed))
}
