//! What the VM matrix and cross builds need beyond `.ci/setup`, installed when missing: a
//! user's set-up installs nothing it does not use, and the Debian packages go through the
//! same `.ci/apt-install` (with its pinning of conflicting image packages) as `.ci/setup`.

use std::{path::Path, process::Command};

use anyhow::{bail, Context as _, Result};

use super::Arch;

/// Installs the Debian packages `pkgs` that are missing, through `.ci/apt-install`.
pub fn apt_install(root: &Path, what_for: &str, pkgs: &[&str]) -> Result<()> {
    let status = Command::new("bash")
        .arg(root.join(".ci/apt-install"))
        .arg(what_for)
        .args(pkgs)
        .status()
        .context("failed to run .ci/apt-install")?;
    if !status.success() {
        bail!(
            "installing {} failed ({status}): see the lines above",
            pkgs.join(" ")
        );
    }
    Ok(())
}

/// A C cross toolchain and the Rust target for building fdaudit for `arch` on this machine
/// (nothing when `arch` is the host's).
pub fn cross_toolchain(root: &Path, arch: Arch, what_for: &str) -> Result<()> {
    if Arch::host() == Some(arch) {
        return Ok(());
    }
    let gcc = format!("gcc-{}", arch.multiarch());
    let libc = format!("libc6-dev-{}-cross", arch.deb());
    apt_install(root, what_for, &[&gcc, &libc])?;
    let target = arch.rust_target();
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("failed to run rustup target list")?;
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l == target)
    {
        eprintln!("provision: adding the Rust target {target} ({what_for})");
        let status = Command::new("rustup")
            .args(["target", "add", &target])
            .status()
            .context("failed to run rustup target add")?;
        if !status.success() {
            bail!("rustup target add {target} failed ({status})");
        }
    }
    Ok(())
}

/// Everything `cargo xtask vm-test --arch ARCH` needs: QEMU for the guest, busybox-static
/// for its shell, readelf (binutils) for the libraries packed into it, Debian's archive
/// keyring for the private apt state the kernels come from, and a cross toolchain for a
/// foreign guest.
pub fn vm_test(root: &Path, arch: Arch) -> Result<()> {
    let qemu = match arch {
        Arch::X86_64 => "qemu-system-x86",
        Arch::Aarch64 => "qemu-system-arm",
    };
    let what_for = "cargo xtask vm-test";
    apt_install(
        root,
        what_for,
        &[qemu, "busybox-static", "binutils", "debian-archive-keyring"],
    )?;
    cross_toolchain(root, arch, what_for)
}
