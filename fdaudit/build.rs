//! Hands the crate the eBPF object it embeds with `include_bytes!`:
//! - built from source (through the same code as `cargo xtask build-ebpf`) where the eBPF
//!   toolchain is present: bpf-linker on PATH and the pinned nightly (xtask::BPF_RUSTC_COMMIT)
//!   with rust-src;
//! - otherwise the committed object in `fdaudit/ebpf/` for the target architecture, so that a
//!   build with stable Rust alone works (CI proves the committed objects are what the sources
//!   build). A warning says when the sources have changed since that object was built.
//!
//! `FDAUDIT_EBPF=prebuilt` takes the committed object even where the toolchain is present;
//! `FDAUDIT_EBPF=source` fails instead of falling back. With FDAUDIT_SKIP_EBPF=1 an empty
//! object is embedded (a binary that refuses to load programs and says how to rebuild).

use std::path::{Path, PathBuf};

fn main() {
    let root = xtask::workspace_root();
    for p in xtask::EBPF_INPUTS
        .iter()
        .chain(&["xtask/src/lib.rs", "fdaudit/ebpf"])
    {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for var in [
        xtask::SKIP_ENV,
        xtask::BPF_TOOLCHAIN_ENV,
        CHOICE_ENV,
        "RUSTUP_TOOLCHAIN",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("fdaudit-ebpf.o");
    if std::env::var(xtask::SKIP_ENV).is_ok_and(|v| v == "1") {
        std::fs::write(&dest, b"").expect("write the empty eBPF placeholder");
        return;
    }
    // The programs are built for the architecture fdaudit is built for (cross builds too).
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let choice = std::env::var(CHOICE_ENV).unwrap_or_default();
    let from_source = match choice.as_str() {
        "source" => true,
        "prebuilt" => false,
        "" => xtask::ebpf_toolchain().is_ok() && root.join("fdaudit-ebpf").is_dir(),
        other => panic!("{CHOICE_ENV}={other:?}: use `source` or `prebuilt`"),
    };
    if from_source {
        match xtask::build_ebpf(&root, &arch) {
            Ok(obj) => std::fs::copy(&obj, &dest)
                .map(drop)
                .expect("copy the eBPF object"),
            Err(e) => {
                eprintln!("error: {e:#}");
                panic!(
                    "failed to build the eBPF object; unset {CHOICE_ENV} to use the committed one"
                );
            }
        }
    } else {
        embed_prebuilt(&root, &arch, &dest);
    }
}

/// Chooses where the object comes from (see the module doc).
const CHOICE_ENV: &str = "FDAUDIT_EBPF";

fn embed_prebuilt(root: &Path, arch: &str, dest: &Path) {
    let obj = xtask::prebuilt_object(root, arch);
    if let Err(e) = std::fs::copy(&obj, dest) {
        panic!(
            "no eBPF object for {arch} at {} ({e}); build it with `cargo xtask build-ebpf` \
             (needs bpf-linker and nightly: .ci/setup)",
            obj.display()
        );
    }
    let now = xtask::source_fingerprint(root).ok();
    if now.is_some() && now != xtask::recorded_fingerprint(root) {
        println!(
            "cargo:warning=the eBPF sources changed since the committed object was built; \
             fdaudit embeds the committed one. Rebuild it with `cargo xtask build-ebpf` \
             (bpf-linker and nightly: .ci/setup)"
        );
    }
}
