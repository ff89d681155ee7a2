//! `cargo xtask build-ebpf`: builds the eBPF object and copies it to target/fdaudit-ebpf.o.

use anyhow::{bail, Context as _, Result};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("caused by: {cause}");
        }
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-ebpf") => {
            let root = xtask::workspace_root();
            let obj = xtask::build_ebpf(&root).context("failed to build the eBPF object")?;
            let dest = xtask::ebpf_target_dir(&root)
                .parent()
                .expect("the ebpf target dir has a parent")
                .join("fdaudit-ebpf.o");
            std::fs::copy(&obj, &dest).with_context(|| {
                format!("failed to copy {} to {}", obj.display(), dest.display())
            })?;
            println!("{}", dest.display());
            Ok(())
        }
        _ => bail!("usage: cargo xtask build-ebpf"),
    }
}
