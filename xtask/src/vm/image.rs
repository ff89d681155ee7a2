//! What goes into the guest's initramfs: the tools the checks run (from this machine, or
//! from Debian packages of the guest's architecture), fdaudit and the test binaries, a few
//! /etc files, the check script and /init.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use super::{apt, build::Built, guest, initramfs, Arch, Options, Plan};

/// Host tools put into an x86_64 guest, from the host itself (Debian packages installed by
/// .ci/setup): (guest path, host path).
const HOST_TOOLS: &[(&str, &str)] = &[
    ("/bin/busybox", "/bin/busybox"),
    ("/bin/true", "/bin/true"),
    ("/bin/echo", "/bin/echo"),
    ("/usr/bin/printenv", "/usr/bin/printenv"),
    ("/bin/dash", "/bin/dash"),
    ("/bin/bash", "/bin/bash"),
    ("/usr/bin/setpriv", "/usr/bin/setpriv"),
    ("/usr/bin/unshare", "/usr/bin/unshare"),
    ("/usr/bin/strace", "/usr/bin/strace"),
    ("/usr/sbin/bpftool", "/usr/sbin/bpftool"),
];

/// The font `fdaudit bench` draws its plot with (fonts-dejavu-core, from .ci/setup).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Debian packages whose files make up a foreign-architecture guest's userland, and the
/// libraries those tools link against.
const GUEST_DEBS: &[&str] = &[
    "busybox-static",
    "coreutils",
    "dash",
    "bash",
    "util-linux",
    "strace",
    "bpftool",
    "libc6",
    "libgcc-s1",
    "libtinfo6",
    "libcap-ng0",
    "libcap2",
    "libelf1",
    "zlib1g",
    "libzstd1",
    "libunwind8",
    "liblzma5",
    "libdw1",
    "libbz2-1.0",
    "libselinux1",
    "libpcre2-8-0",
    "libaudit1",
    "libsmartcols1",
    "libsystemd0",
    "libmount1",
    "libblkid1",
    "libacl1",
    "libattr1",
    "libgmp10",
    "libssl3",
    "liblz4-1",
    "libgcrypt20",
    "libgpg-error0",
    "libbpf1",
];

/// A sysroot of Debian bookworm packages for `arch` (cached under target/vm/sysroot).
fn foreign_sysroot(vm_dir: &Path, arch: Arch, refresh: bool) -> Result<PathBuf> {
    let dir = vm_dir.join("sysroot").join(arch.deb());
    let stamp = dir.join(".complete");
    if stamp.exists() && !refresh {
        return Ok(dir);
    }
    let apt = apt::Apt::open(vm_dir, "bookworm", arch.deb(), refresh)?;
    let debs = vm_dir.join("debs").join(arch.deb());
    for pkg in GUEST_DEBS {
        let deb = apt.download(pkg, &debs)?;
        apt::unpack(&deb, &dir, &[])?;
    }
    std::fs::write(&stamp, b"").context("failed to mark the sysroot complete")?;
    Ok(dir)
}

/// Builds the guest's initramfs for `built` and `plan`; returns its path.
pub(super) fn build_initramfs(
    root: &Path,
    vm_dir: &Path,
    opts: &Options,
    built: &Built,
    plan: &Plan,
) -> Result<PathBuf> {
    let mut tree = initramfs::Tree::default();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/root",
        "/etc",
        "/usr/local/bin",
    ] {
        tree.dir(d);
    }
    let libs = if Some(opts.arch) == Arch::host() {
        add_host_tools(&mut tree, opts.arch)?
    } else {
        add_foreign_tools(&mut tree, vm_dir, opts)?
    };
    tree.symlink("/bin/sh", "busybox");
    // The bench plot's font (architecture-independent: the host's own).
    let font = Path::new(FONT);
    if font.exists() {
        let bytes = std::fs::read(font).with_context(|| format!("failed to read {FONT}"))?;
        tree.data(FONT, bytes, 0o644);
    }
    add_built(&mut tree, root, built)?;
    tree.add_shared_libs(&libs)?;
    add_etc(&mut tree);
    tree.data("/checks.sh", plan.script(), 0o755);
    tree.data("/init", guest::init_script("/checks.sh"), 0o755);
    let out = vm_dir.join(format!("initramfs-{}.cpio", opts.arch.name()));
    tree.write_cpio(&out)?;
    Ok(out)
}

/// The guest's tools taken from this machine; the libraries they need come from `/`.
fn add_host_tools(tree: &mut initramfs::Tree, arch: Arch) -> Result<initramfs::Libs> {
    for (guest, host) in HOST_TOOLS {
        let p = Path::new(host);
        if !p.exists() {
            bail!("{host} is missing on this machine: run `bash .ci/setup`");
        }
        tree.file(guest, p);
    }
    Ok(initramfs::Libs {
        sysroot: PathBuf::from("/"),
        multiarch: arch.multiarch().into(),
    })
}

/// The guest's tools taken from a Debian sysroot of the guest's architecture, which also
/// supplies their libraries.
fn add_foreign_tools(
    tree: &mut initramfs::Tree,
    vm_dir: &Path,
    opts: &Options,
) -> Result<initramfs::Libs> {
    let sys = foreign_sysroot(vm_dir, opts.arch, opts.refresh)?;
    for (guest, _) in HOST_TOOLS {
        let name = Path::new(guest).file_name().expect("tool paths have names");
        let src = ["bin", "usr/bin", "sbin", "usr/sbin"]
            .iter()
            .map(|d| sys.join(d).join(name))
            .find(|p| p.is_file())
            .with_context(|| format!("{} is not in the {} sysroot", guest, opts.arch.deb()))?;
        tree.file(guest, &src);
    }
    Ok(initramfs::Libs {
        sysroot: sys,
        multiarch: opts.arch.multiarch().into(),
    })
}

/// fdaudit, and the test binaries and fixtures at the absolute paths they were built for.
fn add_built(tree: &mut initramfs::Tree, root: &Path, built: &Built) -> Result<()> {
    tree.file("/usr/local/bin/fdaudit", &built.fdaudit);
    let pd = built.profile_dir.to_string_lossy().into_owned();
    for b in &built.bins {
        let name = b
            .file_name()
            .expect("binaries have names")
            .to_string_lossy();
        tree.file(&format!("{pd}/{name}"), b);
    }
    for (_, t, _) in &built.tests {
        tree.file(&t.to_string_lossy(), t);
    }
    let fixtures = root.join("tests/fixtures");
    if !built.tests.is_empty() && fixtures.is_dir() {
        tree.copy_dir(&fixtures.to_string_lossy(), &fixtures)?;
    }
    Ok(())
}

/// The few files of /etc the tests look up (host name, root and nobody).
fn add_etc(tree: &mut initramfs::Tree) {
    tree.data("/etc/hostname", "guest\n", 0o644);
    tree.data(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        0o644,
    );
    tree.data("/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
}
