//! `cargo xtask build-ebpf [--check]`: the committed eBPF objects in fdaudit/ebpf/ and the
//! check that they are exactly what the sources build.
//!
//! The comparison is byte for byte, not instruction by instruction: the maps' definitions,
//! the BTF the loader reads struct layouts and map types from, and the program sections all
//! live in the same file and all change behaviour, and the build is reproducible (paths in
//! the BTF line info are remapped, see [`crate::build_ebpf`]), so any difference is drift.

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::vm::Arch;

/// Builds the objects for `arches`; writes them (and the fingerprint) unless `check`, in
/// which case it compares and returns 1 on any difference.
pub fn build(root: &Path, arches: &[Arch], check: bool) -> Result<i32> {
    let mut drift = Vec::new();
    for arch in arches {
        let built = crate::build_ebpf(root, arch.name())
            .with_context(|| format!("failed to build the eBPF object for {}", arch.name()))?;
        let new =
            std::fs::read(&built).with_context(|| format!("failed to read {}", built.display()))?;
        let committed = crate::prebuilt_object(root, arch.name());
        if check {
            let old = std::fs::read(&committed).unwrap_or_default();
            if let Some(why) = difference(&old, &new) {
                drift.push(format!("{}: {why}", rel(root, &committed)));
            }
            continue;
        }
        std::fs::create_dir_all(committed.parent().expect("fdaudit/ebpf has a parent"))
            .context("failed to create fdaudit/ebpf")?;
        std::fs::write(&committed, &new)
            .with_context(|| format!("failed to write {}", committed.display()))?;
        println!("{}", committed.display());
        if Some(*arch) == Arch::host() {
            let dest = crate::ebpf_target_dir(root)
                .parent()
                .expect("the ebpf target dir has a parent")
                .join("fdaudit-ebpf.o");
            std::fs::copy(&built, &dest)
                .with_context(|| format!("failed to copy the object to {}", dest.display()))?;
        }
    }
    let now = crate::source_fingerprint(root)?;
    let file = crate::prebuilt_fingerprint_file(root);
    if check {
        if crate::recorded_fingerprint(root).as_deref() != Some(now.as_str()) {
            drift.push(format!(
                "{}: does not match the sources ({now})",
                rel(root, &file)
            ));
        }
        for d in &drift {
            eprintln!("build-ebpf: {d}");
        }
        if drift.is_empty() {
            eprintln!("build-ebpf: the committed objects are what the sources build");
            return Ok(0);
        }
        eprintln!("build-ebpf: run `cargo xtask build-ebpf` and commit fdaudit/ebpf/");
        return Ok(1);
    }
    if arches.len() == 2 {
        let text = format!(
            "# SHA-256 of the eBPF sources (xtask::EBPF_INPUTS) the objects here were built \
             from;\n# written by `cargo xtask build-ebpf`, checked by `cargo xtask build-ebpf --check`.\n{now}\n"
        );
        std::fs::write(&file, text)
            .with_context(|| format!("failed to write {}", file.display()))?;
    }
    Ok(0)
}

/// Why `new` is not `old`, or None when they are the same bytes.
fn difference(old: &[u8], new: &[u8]) -> Option<String> {
    if old == new {
        return None;
    }
    if old.is_empty() {
        return Some("missing".into());
    }
    let at = old.iter().zip(new).position(|(a, b)| a != b);
    Some(match at {
        Some(i) => format!(
            "differs from what the sources build ({} committed bytes, {} built, first difference at byte {i})",
            old.len(),
            new.len()
        ),
        None => format!(
            "differs in length from what the sources build ({} committed bytes, {} built)",
            old.len(),
            new.len()
        ),
    })
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_names_the_first_differing_byte() {
        assert_eq!(difference(b"abc", b"abc"), None);
        assert_eq!(difference(b"", b"abc").as_deref(), Some("missing"));
        assert!(difference(b"abc", b"abd").unwrap().contains("byte 2"));
        assert!(difference(b"ab", b"abc").unwrap().contains("length"));
    }
}
