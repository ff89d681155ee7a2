//! The one piece of code that builds fdaudit's eBPF object, used by `cargo xtask build-ebpf`
//! and by the `fdaudit` crate's build script.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

/// Target triple of the eBPF programs.
pub const BPF_TARGET: &str = "bpfel-unknown-none";
/// Toolchain used for the eBPF build (needs rust-src for `-Z build-std=core`), unless
/// [`BPF_TOOLCHAIN_ENV`] names another (e.g. a dated nightly where one can be installed).
pub const BPF_TOOLCHAIN: &str = "nightly";
/// Names the rustup toolchain of the eBPF build instead of [`BPF_TOOLCHAIN`].
pub const BPF_TOOLCHAIN_ENV: &str = "FDAUDIT_BPF_TOOLCHAIN";
/// The one compiler the eBPF build accepts (`rustc -vV`'s commit-hash): the committed
/// objects are compared byte for byte with a fresh build, so a nightly update alone would
/// fail that check. Moving the pin is a commit of its own: change this and
/// [`BPF_RUSTC_RELEASE`], run `cargo xtask build-ebpf`, commit the objects.
pub const BPF_RUSTC_COMMIT: &str = "e50aa6fba4e63ab34c72bf9acfd2c307c1155d1a";
/// [`BPF_RUSTC_COMMIT`] as `rustc --version` prints it, for messages.
pub const BPF_RUSTC_RELEASE: &str = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)";

/// The rustup toolchain name of the eBPF build ([`BPF_TOOLCHAIN_ENV`] or [`BPF_TOOLCHAIN`]).
pub fn bpf_toolchain() -> String {
    std::env::var(BPF_TOOLCHAIN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| BPF_TOOLCHAIN.to_string())
}
/// Set to `1` to skip the eBPF build (for `cargo check`/clippy where bpf-linker is absent);
/// the binary then refuses to trace, saying how to rebuild.
pub const SKIP_ENV: &str = "FDAUDIT_SKIP_EBPF";

/// Workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Where the eBPF build keeps its own cargo target directory.
pub fn ebpf_target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("ebpf")
}

/// Architectures the eBPF object can be built for (`bpf_target_arch`: which syscall
/// numbers and registers the programs use).
pub const BPF_ARCHES: [&str; 2] = ["x86_64", "aarch64"];

/// bpf-linker on PATH, if any.
pub fn bpf_linker() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
}

/// The eBPF toolchain: bpf-linker and the nightly toolchain's sysroot.
pub struct EbpfToolchain {
    pub linker: PathBuf,
    pub sysroot: PathBuf,
}

/// What building the eBPF object from source needs: bpf-linker on PATH and the pinned
/// nightly ([`BPF_RUSTC_COMMIT`]) with rust-src (for `-Z build-std=core`), or why the object
/// cannot be built here.
pub fn ebpf_toolchain() -> Result<EbpfToolchain> {
    let linker = bpf_linker().context(
        "bpf-linker is not on PATH: run `.ci/setup` (it builds bpf-linker 0.13.0 against LLVM 22)",
    )?;
    let tc = bpf_toolchain();
    let rustc = |args: &[&str]| {
        Command::new("rustup")
            .args(["run", &tc, "rustc"])
            .args(args)
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .context("failed to run rustup")
    };
    let out = rustc(&["-vV"])?;
    if !out.status.success() {
        bail!("the {tc} toolchain is not installed: run `.ci/setup`");
    }
    let verbose = String::from_utf8_lossy(&out.stdout);
    check_pinned_rustc(&tc, &verbose)?;
    let out = rustc(&["--print", "sysroot"])?;
    if !out.status.success() {
        bail!(
            "`rustup run {tc} rustc --print sysroot` failed ({})",
            out.status
        );
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        bail!("rust-src is missing from {tc}: rustup component add rust-src --toolchain {tc}");
    }
    Ok(EbpfToolchain { linker, sysroot })
}

/// Fails unless `rustc -vV` output `verbose` (of toolchain `tc`) is the pinned compiler.
fn check_pinned_rustc(tc: &str, verbose: &str) -> Result<()> {
    let commit = verbose
        .lines()
        .find_map(|l| l.strip_prefix("commit-hash: "))
        .map(str::trim);
    if commit == Some(BPF_RUSTC_COMMIT) {
        return Ok(());
    }
    let found = verbose.lines().next().unwrap_or("an unknown rustc").trim();
    bail!(
        "the eBPF build is pinned to {BPF_RUSTC_RELEASE} but toolchain `{tc}` is {found}: \
         install that nightly and name it in {BPF_TOOLCHAIN_ENV}, or move the pin \
         (xtask::BPF_RUSTC_COMMIT) and commit `cargo xtask build-ebpf`'s objects"
    )
}

/// Where the committed eBPF object for `arch` lives (embedded when the toolchain to rebuild
/// it is absent, as cilium/ebpf's bpf2go commits its objects).
pub fn prebuilt_object(root: &Path, arch: &str) -> PathBuf {
    root.join("fdaudit/ebpf")
        .join(format!("fdaudit-ebpf-{arch}.o"))
}

/// The file that records which sources the committed objects were built from.
pub fn prebuilt_fingerprint_file(root: &Path) -> PathBuf {
    root.join("fdaudit/ebpf/SOURCES.sha256")
}

/// What the eBPF object is built from: the eBPF and shared crates (sources and manifests).
/// The build script also watches these.
pub const EBPF_INPUTS: [&str; 4] = [
    "fdaudit-ebpf/src",
    "fdaudit-ebpf/Cargo.toml",
    "fdaudit-common/src",
    "fdaudit-common/Cargo.toml",
];

/// SHA-256 over [`EBPF_INPUTS`] (each file's path relative to `root`, then its bytes, in path
/// order), in hex: what the committed objects' fingerprint file holds.
pub fn source_fingerprint(root: &Path) -> Result<String> {
    use sha2::Digest as _;
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        if dir.is_file() {
            out.push(dir.to_path_buf());
            return Ok(());
        }
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))?;
        for e in entries {
            walk(&e.context("failed to read a directory entry")?.path(), out)?;
        }
        Ok(())
    }
    let mut files = Vec::new();
    for input in EBPF_INPUTS {
        walk(&root.join(input), &mut files)?;
    }
    files.sort();
    let mut h = sha2::Sha256::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap_or(f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(f).with_context(|| format!("failed to read {}", f.display()))?);
        h.update([0]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The fingerprint recorded beside the committed objects, if any.
pub fn recorded_fingerprint(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(prebuilt_fingerprint_file(root)).ok()?;
    text.lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// Builds `fdaudit-ebpf` in release mode for bpfel-unknown-none with BTF, for the machine
/// architecture `arch` (one of [`BPF_ARCHES`], passed as `--cfg bpf_target_arch`), and
/// returns the path of the object (an ELF file with the programs, maps and .BTF).
pub fn build_ebpf(root: &Path, arch: &str) -> Result<PathBuf> {
    if !BPF_ARCHES.contains(&arch) {
        bail!(
            "no eBPF build for architecture {arch:?}: fdaudit supports {}",
            BPF_ARCHES.join(", ")
        );
    }
    let toolchain = ebpf_toolchain()?;
    let tc = bpf_toolchain();
    // One target directory per architecture, so switching does not rebuild.
    let target_dir = ebpf_target_dir(root).join(arch);
    let mut cmd = Command::new("rustup");
    cmd.current_dir(root)
        .args(["run", &tc, "cargo", "build", "--release"])
        .args(["--package", "fdaudit-ebpf", "--target", BPF_TARGET])
        .args(["-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer cargo (stable) must not leak its compiler, flags or toolchain choice into the
    // nightly build; our own flags go through CARGO_ENCODED_RUSTFLAGS.
    for var in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTDOC",
        "RUSTFLAGS",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cmd.env_remove(var);
    }
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_ENCODED_")
            || k.starts_with("CARGO_CFG_")
            || k.starts_with("CARGO_FEATURE_")
        {
            cmd.env_remove(&*k);
        }
    }
    let flags = rustflags(root, arch, &toolchain);
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    let status = cmd.status().with_context(|| {
        format!("failed to run `rustup run {tc} cargo build` for the eBPF crate")
    })?;
    if !status.success() {
        bail!("the eBPF build failed ({status}); run `.ci/setup` (nightly with rust-src, bpf-linker on PATH), or build without them: the committed object is embedded then (docs/architecture.md)");
    }
    let obj = target_dir
        .join(BPF_TARGET)
        .join("release")
        .join("fdaudit-ebpf");
    if !obj.is_file() {
        bail!("the eBPF build succeeded but {} is missing", obj.display());
    }
    strip_debug(&obj)
}

/// The eBPF build's rustflags: BTF, bpf-linker, the architecture cfg, and path remapping.
fn rustflags(root: &Path, arch: &str, toolchain: &EbpfToolchain) -> Vec<String> {
    // The BTF line info names source files: paths are remapped so that the object is the same
    // byte for byte wherever the tree, the registry and the toolchain live (CI compares the
    // committed object with a fresh build).
    let mut flags = vec![
        "-Cdebuginfo=2".to_string(),
        "-Clink-arg=--btf".to_string(),
        format!("-Clinker={}", toolchain.linker.display()),
        format!("--cfg=bpf_target_arch=\"{arch}\""),
        format!("--remap-path-prefix={}=/fdaudit", root.display()),
    ];
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags.push(format!(
        "--remap-path-prefix={}=/rustc",
        toolchain.sysroot.display()
    ));
    flags
}

/// Cargo's home (registry sources live below it).
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// The object without its DWARF sections (`llvm-objcopy --strip-debug`: .BTF and .BTF.ext,
/// which the loader and the verifier use, stay): 145 KB instead of 700 KB, which fdaudit
/// embeds, copies and has aya parse at every start. The LLVM 22 tools come with
/// bpf-linker's llvm-22-dev (`.ci/setup`); without them the object is used as it is.
fn strip_debug(obj: &Path) -> Result<PathBuf> {
    let candidates = [
        std::env::var_os("LLVM_PREFIX").map(|p| PathBuf::from(p).join("bin/llvm-objcopy")),
        Some(PathBuf::from("/usr/lib/llvm-22/bin/llvm-objcopy")),
    ];
    let Some(objcopy) = candidates.into_iter().flatten().find(|p| p.is_file()) else {
        return Ok(obj.to_path_buf());
    };
    let stripped = obj.with_extension("stripped.o");
    let status = Command::new(&objcopy)
        .arg("--strip-debug")
        .arg(obj)
        .arg(&stripped)
        .status()
        .with_context(|| format!("failed to run {}", objcopy.display()))?;
    if !status.success() {
        bail!("{} --strip-debug failed ({status})", objcopy.display());
    }
    Ok(stripped)
}

/// `cargo xtask build-ebpf`: the committed objects and their check.
#[cfg(feature = "cli")]
pub mod ebpf;

/// `cargo xtask sizes`: file and function lengths, import cycles.
#[cfg(feature = "cli")]
pub mod layout;

/// `cargo xtask dist`: the .deb and tarball packages.
#[cfg(feature = "cli")]
pub mod dist;

/// `cargo xtask dist --oci`: the OCI image.
#[cfg(feature = "cli")]
pub mod oci;

/// `cargo xtask vm-test`: the kernel matrix in QEMU.
#[cfg(feature = "cli")]
pub mod vm;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pinned_rustc_builds_the_ebpf_object() {
        let pinned = format!("rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\ncommit-hash: {BPF_RUSTC_COMMIT}\n");
        check_pinned_rustc("nightly", &pinned).expect("the pinned rustc is accepted");
        let other = "rustc 1.98.0-nightly (0123456789 2026-06-01)\nbinary: rustc\ncommit-hash: 0123456789abcdef\n";
        let err = check_pinned_rustc("nightly", other)
            .expect_err("another nightly must be refused")
            .to_string();
        assert!(
            err.contains(BPF_RUSTC_RELEASE)
                && err.contains("1.98.0-nightly")
                && !err.contains('\n'),
            "the message names both compilers on one line: {err}"
        );
    }
}
