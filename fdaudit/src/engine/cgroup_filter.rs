//! How the fork and exec programs tell a process of the followed cgroup (`trace --cgroup`,
//! `watch`, `unclosed --cgroup`), chosen by probing the kernel, never by its version:
//! - the hierarchy's root (whole-host `watch`, `--cgroup /`): every process is in it, so
//!   no filter and no helper at all;
//! - bpf_get_current_ancestor_cgroup_id, where raw tracepoint programs may call it (Linux
//!   5.14+, commit 95b861a7935b "bpf: Allow bpf_get_current_ancestor_cgroup_id for
//!   tracing"): current's ancestor at the cgroup's depth is the cgroup;
//! - else bpf_current_task_under_cgroup (tracing programs since 4.9) on a one-slot cgroup
//!   array that holds the cgroup's directory: current's cgroup is the cgroup or below it.
//!
//! Both ask the same question of the same (cgroup v2) hierarchy: the same processes are
//! followed either way.

use std::{
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::Path,
    sync::OnceLock,
};

use anyhow::{bail, Context as _, Result};
use aya::{
    maps::CgroupArray,
    programs::ProgramType,
    sys::{is_helper_supported, BpfHelper},
    Ebpf,
};
use fdaudit_common::{cgroup_filter, Config, MAP_FOLLOWED_CGROUP};

/// The way a followed cgroup below the root is recognised on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// bpf_get_current_ancestor_cgroup_id (5.14+).
    Ancestor,
    /// bpf_current_task_under_cgroup and a cgroup array (before 5.14).
    UnderCgroup,
}

impl Way {
    /// What `doctor` says of it.
    pub fn describe(self) -> &'static str {
        match self {
            Way::Ancestor => {
                "bpf_get_current_ancestor_cgroup_id (raw tracepoints may call it: Linux 5.14+)"
            }
            Way::UnderCgroup => {
                "bpf_current_task_under_cgroup with the cgroup's directory in a cgroup array \
                 (bpf_get_current_ancestor_cgroup_id is refused to raw tracepoints before \
                 Linux 5.14); the same processes are followed"
            }
        }
    }
}

/// Forces the way for tests and comparisons: `ancestor` or `under-cgroup` (a kernel that
/// lacks the helper then refuses the programs, as fdaudit did before it probed).
pub const ENV: &str = "FDAUDIT_CGROUP_FILTER";

/// The way this kernel takes, probed once (a two-instruction raw tracepoint program that
/// calls the helper), unless [`ENV`] forces one.
pub fn way() -> Way {
    static PROBE: OnceLock<Way> = OnceLock::new();
    *PROBE.get_or_init(|| match std::env::var(ENV).as_deref() {
        Ok("ancestor") => Way::Ancestor,
        Ok("under-cgroup") => Way::UnderCgroup,
        _ if has_ancestor_helper() => Way::Ancestor,
        _ => Way::UnderCgroup,
    })
}

/// Whether raw tracepoint programs may call bpf_get_current_ancestor_cgroup_id.
fn has_ancestor_helper() -> bool {
    is_helper_supported(
        ProgramType::RawTracePoint,
        BpfHelper::BPF_FUNC_get_current_ancestor_cgroup_id,
    )
    .unwrap_or(false)
}

/// The filter for `cgroup` (id, depth; None: only the tracked trees) on a kernel that
/// takes `way`: the root needs none.
pub fn filter_for(cgroup: Option<(u64, u32)>, way: impl FnOnce() -> Way) -> u64 {
    match cgroup {
        None => cgroup_filter::NONE,
        Some((_, 0)) => cgroup_filter::ALL,
        Some(_) => match way() {
            Way::Ancestor => cgroup_filter::ANCESTOR,
            Way::UnderCgroup => cgroup_filter::UNDER,
        },
    }
}

/// Sets the config's cgroup fields for `cgroup`, the kernel probed when a cgroup below the
/// root is followed.
pub fn configure(config: &mut Config, cgroup: Option<(u64, u32)>) {
    if let Some((id, level)) = cgroup {
        config.cgroup_id = id;
        config.cgroup_level = level;
    }
    config.cgroup_filter = filter_for(cgroup, way);
}

/// For [`cgroup_filter::UNDER`]: puts the followed cgroup's directory `dir` into the
/// programs' cgroup array, once its inode is the config's `cgroup_id` (a directory removed
/// and made again since it was resolved is another cgroup). The array keeps its own
/// reference to the cgroup: the fd is closed at once.
pub fn fill(bpf: &mut Ebpf, config: &Config, dir: Option<&Path>) -> Result<()> {
    if config.cgroup_filter != cgroup_filter::UNDER {
        return Ok(());
    }
    let Some(dir) = dir else {
        bail!(
            "no directory for the followed cgroup (id {})",
            config.cgroup_id
        );
    };
    let file = open_dir(dir)?;
    let ino = file
        .metadata()
        .with_context(|| format!("failed to stat {}", dir.display()))?
        .ino();
    if ino != config.cgroup_id {
        bail!(
            "{}: the cgroup was replaced while fdaudit started (id {ino}, not {}); run again",
            dir.display(),
            config.cgroup_id
        );
    }
    let map = bpf
        .map_mut(MAP_FOLLOWED_CGROUP)
        .with_context(|| format!("the eBPF object has no map {MAP_FOLLOWED_CGROUP}"))?;
    let mut array = CgroupArray::try_from(map)
        .with_context(|| format!("{MAP_FOLLOWED_CGROUP} is not a cgroup array"))?;
    array.set(0, file.as_raw_fd(), 0).with_context(|| {
        format!(
            "failed to put cgroup {} in the programs' map",
            dir.display()
        )
    })
}

/// The cgroup's directory, opened without following a link (cgroupfs has none: a link is
/// not a cgroup) and without blocking.
fn open_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir)
        .with_context(|| format!("failed to open cgroup directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_needs_no_filter_and_no_probe() {
        let never = || -> Way { panic!("the kernel was probed for the root cgroup") };
        assert_eq!(filter_for(Some((1, 0)), never), cgroup_filter::ALL);
        assert_eq!(filter_for(None, never), cgroup_filter::NONE);
    }

    #[test]
    fn a_cgroup_below_the_root_takes_the_probed_way() {
        assert_eq!(
            filter_for(Some((77, 2)), || Way::Ancestor),
            cgroup_filter::ANCESTOR
        );
        assert_eq!(
            filter_for(Some((77, 2)), || Way::UnderCgroup),
            cgroup_filter::UNDER
        );
    }
}
