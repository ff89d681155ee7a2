//! The one piece of code that builds fdaudit's eBPF object, used by `cargo xtask build-ebpf`
//! and by the `fdaudit` crate's build script.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

/// Target triple of the eBPF programs.
pub const BPF_TARGET: &str = "bpfel-unknown-none";
/// Toolchain used for the eBPF build (needs rust-src for `-Z build-std=core`).
pub const BPF_TOOLCHAIN: &str = "nightly";
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

/// Whether bpf-linker can be found on PATH or in ~/.cargo/bin.
pub fn bpf_linker() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
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
    let linker = bpf_linker().context(
        "bpf-linker not found: run `.ci/setup` (or `cargo install bpf-linker --version 0.13.0 ...`, see README)",
    )?;
    // One target directory per architecture, so switching does not rebuild.
    let target_dir = ebpf_target_dir(root).join(arch);
    let mut cmd = Command::new("rustup");
    cmd.current_dir(root)
        .args(["run", BPF_TOOLCHAIN, "cargo", "build", "--release"])
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
    let flags = [
        "-Cdebuginfo=2".to_string(),
        "-Clink-arg=--btf".to_string(),
        format!("-Clinker={}", linker.display()),
        format!("--cfg=bpf_target_arch=\"{arch}\""),
    ];
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    let status = cmd
        .status()
        .context("failed to run `rustup run nightly cargo build` for the eBPF crate")?;
    if !status.success() {
        bail!("the eBPF build failed ({status}); is `rustup component add rust-src --toolchain nightly` done? see README");
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

/// The object without its DWARF sections (`llvm-objcopy --strip-debug`: .BTF and .BTF.ext,
/// which the loader and the verifier use, stay): 145 KB instead of 700 KB, which fdaudit
/// embeds, copies and has aya parse at every start (~0.5 ms less on this project's CI
/// machine). The LLVM 22 tools come with bpf-linker's llvm-22-dev (`.ci/setup`); without
/// them the object is used as it is.
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

/// `cargo xtask sizes`: file and function lengths, import cycles.
#[cfg(feature = "cli")]
pub mod layout;

/// `cargo xtask vm-test`: the kernel matrix in QEMU.
#[cfg(feature = "cli")]
pub mod vm;
