//! `trace --origin`'s Python walk: its programs loaded into the chain origin_exit
//! tail-calls (fdaudit-ebpf/src/python.rs).

use aya::{maps::ProgramArray, Ebpf};

use super::{load_one, raw_tracepoint, LoadError, Verified};

/// The programs by [`fdaudit_common::MAP_PY_CHAIN`] slot: loaded, never attached.
pub(crate) const PY_CHAIN_PROGRAMS: [&str; 2] = ["python_after_origin", "python_after_made"];

/// With `--origin`: loads the programs into their chain; what the verifier took.
pub fn load_chain(ebpf: &mut Ebpf, origin: bool) -> Result<Vec<Verified>, LoadError> {
    let mut all = Vec::new();
    if !origin {
        return Ok(all);
    }
    for (slot, prog) in (0u32..).zip(PY_CHAIN_PROGRAMS) {
        all.push(load_one(ebpf, prog, "origin_exit")?);
        let fd = raw_tracepoint(ebpf, prog, "origin_exit")?
            .fd()
            .and_then(|fd| fd.try_clone().map_err(Into::into))
            .map_err(|source| LoadError::Verifier {
                name: "origin_exit",
                summary: format!("no fd for {prog}"),
                source,
            })?;
        let map = ebpf
            .map_mut(fdaudit_common::MAP_PY_CHAIN)
            .ok_or(LoadError::MissingMap(fdaudit_common::MAP_PY_CHAIN))?;
        let mut chain = ProgramArray::try_from(map).map_err(|e| LoadError::Chain(e.into()))?;
        chain
            .set(slot, &fd, 0)
            .map_err(|e| LoadError::Chain(e.into()))?;
    }
    Ok(all)
}
