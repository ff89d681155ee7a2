//! `cargo xtask dist --oci`: an OCI image of fdaudit for the host's architecture, built
//! with buildah from `deploy/Containerfile` (`FROM scratch`, no registry, no base image).
//!
//! The build context is a root filesystem staged here: the release binary at
//! `/usr/local/bin/fdaudit`, the shared libraries it links against (as the dynamic loader
//! resolves them on this machine, copied to the paths it asks for), and the licences. The
//! image is committed to the local containers storage as `localhost/fdaudit:VERSION` (the
//! tag deploy/kubernetes/daemonset.yaml names) and written to
//! `target/dist/fdaudit-VERSION-ARCH.oci.tar` (an OCI archive: `podman load -i`,
//! `skopeo copy oci-archive:…`).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::dist::{copy, run_cmd, VERSION};
use crate::vm::Arch;

/// The image's name in the local containers storage.
pub fn tag() -> String {
    format!("localhost/fdaudit:{VERSION}")
}

/// Builds the image from `bin` (the host architecture's release binary); the archive's path.
pub fn build(root: &Path, arch: Arch, bin: &Path, stage: &Path, dist: &Path) -> Result<PathBuf> {
    if Command::new("buildah").arg("--version").output().is_err() {
        bail!("cargo xtask dist --oci needs buildah: apt-get install buildah (.ci/setup does)");
    }
    let rootfs = stage.join("rootfs");
    copy(bin, &rootfs.join("usr/local/bin/fdaudit"))?;
    for lib in libraries(bin)? {
        let rel = lib.strip_prefix("/").unwrap_or(&lib);
        // The loader asks for these paths; some are symlinks on the host: the file they
        // name is copied to the path itself.
        copy(&lib, &rootfs.join(rel))?;
    }
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        copy(&root.join(f), &rootfs.join("usr/share/doc/fdaudit").join(f))?;
    }
    let tag = tag();
    run_cmd(
        Command::new("buildah")
            .args(["build", "--quiet", "--layers=false", "--pull=never"])
            .args(["--timestamp", "0"])
            .arg("-f")
            .arg(root.join("deploy/Containerfile"))
            .args(["-t", &tag])
            .arg(&rootfs),
    )
    .context("failed to build the image (buildah build)")?;
    let archive = dist.join(format!("fdaudit-{VERSION}-{}.oci.tar", arch.name()));
    let _ = std::fs::remove_file(&archive);
    run_cmd(
        Command::new("buildah")
            .args(["push", "--quiet", &tag])
            .arg(format!("oci-archive:{}:{tag}", archive.display())),
    )
    .context("failed to write the image archive (buildah push)")?;
    Ok(archive)
}

/// The shared libraries `bin` loads on this machine, the dynamic loader first, by the paths
/// the loader uses (`ldd`'s `=> /path` and the interpreter's own line).
fn libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = run_cmd(Command::new("ldd").arg(bin)).context("failed to list the libraries")?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_the_paths_the_loader_uses() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }
}
