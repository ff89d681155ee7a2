//! `cargo xtask build-ebpf`: builds the eBPF object and copies it to target/fdaudit-ebpf.o.
//! `cargo xtask man`: regenerates the manual pages in docs/man from fdaudit's clap definition.

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
        Some("man") => {
            // The pages come from fdaudit's own clap definition, rendered by its hidden
            // `__man` command (xtask cannot depend on fdaudit: fdaudit's build uses xtask).
            let root = xtask::workspace_root();
            let dir = root.join("docs/man");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = std::process::Command::new(cargo)
                .current_dir(&root)
                .args(["run", "--quiet", "-p", "fdaudit", "--", "__man"])
                .arg(&dir)
                .status()
                .context("failed to run cargo")?;
            if !status.success() {
                bail!("`fdaudit __man` failed ({status})");
            }
            println!("{}", dir.display());
            Ok(())
        }
        _ => bail!("usage: cargo xtask build-ebpf | cargo xtask man"),
    }
}
