//! `cargo xtask dist`: `target/dist/fdaudit_<version>_<debarch>.deb` and
//! `target/dist/fdaudit-<version>-<arch>-linux.tar.gz` for each architecture.
//!
//! Both carry the release binary, the man pages and the bash, zsh and fish completions (made
//! by the host's fdaudit from the same clap definition), the systemd unit, the README and
//! the licences. The .deb is assembled by `dpkg-deb`; its `Depends` is computed by
//! `dpkg-shlibdeps` from the libraries the binary links against and the symbol versions it
//! uses (for a foreign architecture, from the cross libraries' package, whose
//! `-ARCH-cross` name maps back to the native one, as dpkg-cross does).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::vm::{build::cargo_artifacts, Arch};

/// The version the packages carry (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What one architecture's packaging wrote.
pub struct Packages {
    pub arch: Arch,
    /// The release binary they carry.
    pub bin: PathBuf,
    pub deb: PathBuf,
    pub tarball: PathBuf,
}

/// Builds and packages fdaudit for each of `arches`.
pub fn run(root: &Path, arches: &[Arch]) -> Result<Vec<Packages>> {
    let dist = root.join("target/dist");
    // The host's binary writes the man pages and completions for every architecture.
    let host = Arch::host().context("cargo xtask dist runs on x86_64 or aarch64")?;
    let host_bin = build(root, host)?;
    let files = generated(&host_bin, &dist.join("stage"))?;
    let mut out = Vec::new();
    for &arch in arches {
        crate::vm::provision::cross_toolchain(root, arch, "cargo xtask dist")?;
        let bin = if arch == host {
            host_bin.clone()
        } else {
            build(root, arch)?
        };
        let stage = dist.join("stage").join(arch.name());
        if stage.exists() {
            std::fs::remove_dir_all(&stage)
                .with_context(|| format!("failed to clear {}", stage.display()))?;
        }
        let deb = deb(root, arch, &bin, &files, &stage.join("deb"), &dist)?;
        let tarball = tarball(root, arch, &bin, &files, &stage.join("tar"), &dist)?;
        println!("{}\n{}", deb.display(), tarball.display());
        out.push(Packages {
            arch,
            bin,
            deb,
            tarball,
        });
    }
    Ok(out)
}

/// `cargo build --release` of fdaudit for `arch`; the binary's path.
fn build(root: &Path, arch: Arch) -> Result<PathBuf> {
    eprintln!("dist: building fdaudit (release) for {}", arch.name());
    // The same packages as vm-test's build, so that one release build serves both.
    let arts = cargo_artifacts(
        root,
        arch,
        &["build", "-p", "fdaudit", "-p", "fdaudit-tests", "--bins"],
    )?;
    arts.into_iter()
        .find(|(k, n, _)| k == "bin" && n == "fdaudit")
        .map(|(_, _, p)| p)
        .context("cargo built no fdaudit binary")
}

/// Runs `cmd`, failing with its name and status.
pub(crate) fn run_cmd(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .with_context(|| format!("failed to run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("failed to copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn write(to: &Path, data: &[u8]) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
    }
    std::fs::write(to, data).with_context(|| format!("failed to write {}", to.display()))
}

/// Where each shell's completion script goes (the tarball uses the file names alone).
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions/fdaudit"),
    ("zsh", "usr/share/zsh/vendor-completions/_fdaudit"),
    ("fish", "usr/share/fish/vendor_completions.d/fdaudit.fish"),
];

/// The completion scripts and man pages, written by the host's binary: (relative path in a
/// package tree, bytes). Man pages are `man/man1/NAME.1`.
fn generated(host_bin: &Path, scratch: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for (shell, path) in COMPLETIONS {
        let out = run_cmd(Command::new(host_bin).args(["completions", shell]))?;
        files.push((path.to_string(), out.stdout));
    }
    let man = scratch.join("man");
    std::fs::create_dir_all(&man).context("failed to create the man page directory")?;
    run_cmd(Command::new(host_bin).arg("__man").arg(&man))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)
        .context("failed to list the man pages")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pages.sort();
    for p in pages {
        let name = p.file_name().expect("a page has a name").to_string_lossy();
        let bytes = std::fs::read(&p).with_context(|| format!("failed to read {}", p.display()))?;
        files.push((format!("man/man1/{name}"), bytes));
    }
    std::fs::remove_dir_all(&man).ok();
    Ok(files)
}

/// The unit with ExecStart pointing at `bin`.
fn unit(root: &Path, bin: &str) -> Result<Vec<u8>> {
    let text = std::fs::read_to_string(root.join("deploy/fdaudit.service"))
        .context("failed to read deploy/fdaudit.service")?;
    Ok(text.replace("/usr/local/bin/fdaudit", bin).into_bytes())
}

fn deb(
    root: &Path,
    arch: Arch,
    bin: &Path,
    files: &[(String, Vec<u8>)],
    tree: &Path,
    dist: &Path,
) -> Result<PathBuf> {
    copy(bin, &tree.join("usr/bin/fdaudit"))?;
    for (path, bytes) in files {
        match path.strip_prefix("man/") {
            // Debian ships man pages gzipped; -n keeps the package reproducible.
            Some(page) => {
                let dest = tree.join("usr/share/man").join(format!("{page}.gz"));
                write(&dest, &gzip(bytes)?)?;
            }
            None => write(&tree.join(path), bytes)?,
        }
    }
    write(
        &tree.join("lib/systemd/system/fdaudit.service"),
        &unit(root, "/usr/bin/fdaudit")?,
    )?;
    let doc = tree.join("usr/share/doc/fdaudit");
    copy(&root.join("README.md"), &doc.join("README.md"))?;
    write(&doc.join("copyright"), copyright(root)?.as_bytes())?;
    let depends = depends(arch, bin)?;
    let size_kib = tree_size(tree)?.div_ceil(1024);
    let control = format!(
        "Package: fdaudit\nVersion: {VERSION}\nArchitecture: {}\nMaintainer: The fdaudit developers <fdaudit@example.invalid>\n\
         Installed-Size: {size_kib}\nDepends: {depends}\nSection: admin\nPriority: optional\n\
         Homepage: https://example.invalid/fdaudit\n\
         Description: audits how processes hand file descriptors to their children\n \
         fdaudit finds file descriptors that leak across execve (no close-on-exec) and the\n \
         close loops that make spawning slow under high RLIMIT_NOFILE limits: `scan` reads\n \
         /proc, `trace` follows a process tree with eBPF, `bench` measures each fd-closing\n \
         strategy, `watch` exports Prometheus metrics.\n",
        arch.deb()
    );
    write(&tree.join("DEBIAN/control"), control.as_bytes())?;
    let deb = dist.join(format!("fdaudit_{VERSION}_{}.deb", arch.deb()));
    run_cmd(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(tree)
            .arg(&deb),
    )?;
    Ok(deb)
}

fn tarball(
    root: &Path,
    arch: Arch,
    bin: &Path,
    files: &[(String, Vec<u8>)],
    stage: &Path,
    dist: &Path,
) -> Result<PathBuf> {
    let name = format!("fdaudit-{VERSION}-{}-linux", arch.name());
    let top = stage.join(&name);
    copy(bin, &top.join("fdaudit"))?;
    for (path, bytes) in files {
        let dest = match path.strip_prefix("man/") {
            Some(page) => top.join("man").join(page),
            // completions/fdaudit.bash, _fdaudit (zsh), fdaudit.fish
            None => {
                let file = Path::new(&path)
                    .file_name()
                    .expect("a completion file name");
                let file = file.to_string_lossy();
                let file = if file == "fdaudit" {
                    "fdaudit.bash".into()
                } else {
                    file
                };
                top.join("completions").join(&*file)
            }
        };
        write(&dest, bytes)?;
    }
    write(
        &top.join("fdaudit.service"),
        &unit(root, "/usr/local/bin/fdaudit")?,
    )?;
    for f in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        copy(&root.join(f), &top.join(f))?;
    }
    let tarball = dist.join(format!("{name}.tar.gz"));
    run_cmd(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "--sort=name"])
            .arg("-C")
            .arg(stage)
            .arg("-czf")
            .arg(&tarball)
            .arg(&name),
    )?;
    Ok(tarball)
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("failed to run gzip")?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(bytes)
        .context("failed to write to gzip")?;
    let out = child
        .wait_with_output()
        .context("failed to wait for gzip")?;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    Ok(out.stdout)
}

fn tree_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))? {
        let e = e.context("failed to read a directory entry")?;
        let meta = e.metadata().context("failed to stat a package file")?;
        total += if meta.is_dir() {
            tree_size(&e.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// /usr/share/doc/fdaudit/copyright in Debian's machine-readable format.
fn copyright(root: &Path) -> Result<String> {
    let mit =
        std::fs::read_to_string(root.join("LICENSE-MIT")).context("failed to read LICENSE-MIT")?;
    let indent = |t: &str| {
        t.lines()
            .map(|l| {
                if l.trim().is_empty() {
                    " .".to_string()
                } else {
                    format!(" {l}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: fdaudit\n\nFiles: *\nCopyright: 2026 The fdaudit developers\n\
         License: MIT or Apache-2.0\n\nLicense: MIT\n{}\n\nLicense: Apache-2.0\n \
         On Debian systems, the full text of the Apache License, Version 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n",
        indent(&mit)
    ))
}

/// The .deb's Depends for `bin`, computed by dpkg-shlibdeps.
fn depends(arch: Arch, bin: &Path) -> Result<String> {
    let scratch = std::env::temp_dir().join(format!("fdaudit-shlibdeps-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("debian")).context("failed to create a scratch dir")?;
    std::fs::write(
        scratch.join("debian/control"),
        "Source: fdaudit\n\nPackage: fdaudit\nArchitecture: any\n",
    )
    .context("failed to write the scratch debian/control")?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.current_dir(&scratch).arg("-O");
    let foreign = Arch::host() != Some(arch);
    if foreign {
        // The cross libraries (libc6-ARCH-cross and friends) under /usr/<multiarch>/lib.
        cmd.arg(format!("-l/usr/{}/lib", arch.multiarch()));
        cmd.env("DEB_HOST_ARCH", arch.deb());
        cmd.env("DEB_HOST_MULTIARCH", arch.multiarch());
    }
    cmd.arg(format!("-e{}", bin.display()));
    let out = run_cmd(&mut cmd);
    std::fs::remove_dir_all(&scratch).ok();
    let out = out.context("failed to compute the package's Depends")?;
    parse_shlibdeps(
        &String::from_utf8_lossy(&out.stdout),
        foreign.then(|| arch.deb()),
    )
}

/// `shlibs:Depends=…` from dpkg-shlibdeps' output, with `-ARCH-cross` names mapped back and
/// `:ARCH` qualifiers (which a foreign-architecture lookup adds) dropped: the package is of
/// that architecture itself.
fn parse_shlibdeps(out: &str, cross_arch: Option<&str>) -> Result<String> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .context("dpkg-shlibdeps printed no shlibs:Depends")?;
    let mut deps = line.trim().to_string();
    if let Some(a) = cross_arch {
        deps = deps
            .replace(&format!("-{a}-cross"), "")
            .replace(&format!(":{a}"), "");
    }
    if deps.is_empty() {
        bail!("dpkg-shlibdeps found no library the binary links against");
    }
    Ok(deps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shlibdeps_output_is_parsed_and_cross_names_mapped_back() {
        let native = "shlibs:Depends=libc6 (>= 2.34), libgcc-s1 (>= 4.2)\n";
        assert_eq!(
            parse_shlibdeps(native, None).unwrap(),
            "libc6 (>= 2.34), libgcc-s1 (>= 4.2)"
        );
        let cross = "shlibs:Depends=libc6-arm64-cross (>= 2.34), libgcc-s1-arm64-cross (>= 4.2)\n";
        assert_eq!(
            parse_shlibdeps(cross, Some("arm64")).unwrap(),
            "libc6 (>= 2.34), libgcc-s1 (>= 4.2)"
        );
        // What dpkg-shlibdeps 1.21 prints for an arm64 binary on amd64.
        let qualified = "shlibs:Depends=libc6:arm64 (>= 2.36), libgcc-s1 (>= 4.2)\n";
        assert_eq!(
            parse_shlibdeps(qualified, Some("arm64")).unwrap(),
            "libc6 (>= 2.36), libgcc-s1 (>= 4.2)"
        );
        assert!(parse_shlibdeps("", None).is_err());
    }
}
