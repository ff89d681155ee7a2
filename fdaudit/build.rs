//! Builds the eBPF object (through the same code as `cargo xtask build-ebpf`) and hands its
//! path to the crate, which embeds it with `include_bytes!`.
//! With FDAUDIT_SKIP_EBPF=1 an empty object is embedded instead (for cargo check/clippy where
//! bpf-linker is absent); that binary refuses to load programs and says how to rebuild.

use std::path::PathBuf;

fn main() {
    let root = xtask::workspace_root();
    for p in [
        "fdaudit-ebpf/src",
        "fdaudit-ebpf/Cargo.toml",
        "fdaudit-common/src",
        "fdaudit-common/Cargo.toml",
        "xtask/src/lib.rs",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-env-changed={}", xtask::SKIP_ENV);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("fdaudit-ebpf.o");
    if std::env::var(xtask::SKIP_ENV).is_ok_and(|v| v == "1") {
        std::fs::write(&dest, b"").expect("write the empty eBPF placeholder");
        return;
    }
    // The programs are built for the architecture fdaudit is built for (cross builds too).
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    match xtask::build_ebpf(&root, &arch) {
        Ok(obj) => {
            std::fs::copy(&obj, &dest).expect("copy the eBPF object into OUT_DIR");
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            panic!(
                "failed to build the eBPF object; set {}=1 to build without it (check/clippy only)",
                xtask::SKIP_ENV
            );
        }
    }
}
