//! What fdaudit takes from the running kernel's BTF, parsed or cached.

use std::sync::OnceLock;

use aya::programs::ProgramType;
use aya::sys::{is_helper_supported, BpfHelper};
use fdaudit_common::Config;

use super::{ia32_syscalls, LoadError};
use crate::engine::btf::{self, Btf};
use crate::engine::btf_cache;

/// What fdaudit takes from the running kernel's BTF: the offsets and whether it runs ia32
/// syscalls, parsed or from [`crate::engine::btf_cache`]; the BTF itself (fdaudit's index
/// of it, whose raw bytes aya parses to load fentry programs) is read when first asked for.
pub struct KernelBtf {
    btf: OnceLock<Btf>,
    pub config: Config,
    /// x86_64 with CONFIG_IA32_EMULATION ([`ia32_syscalls`]).
    pub ia32: bool,
    /// The offsets came from the cache.
    pub cached: bool,
}

impl KernelBtf {
    /// Parses the BTF.
    pub fn read() -> Result<Self, LoadError> {
        let btf = Btf::from_sys_fs().map_err(LoadError::NoBtf)?;
        let config = btf::config_from_btf(&btf).map_err(LoadError::Offsets)?;
        let ia32 = ia32_syscalls(&btf);
        Ok(KernelBtf {
            btf: OnceLock::from(btf),
            config: with_task_btf(config),
            ia32,
            cached: false,
        })
    }

    /// From the cache when it has this kernel and binary, else [`KernelBtf::read`], then
    /// stored there (a cache that cannot be written is only slower).
    pub fn read_cached() -> Result<Self, LoadError> {
        let key = btf_cache::Key::current();
        let dir = btf_cache::dir();
        if let Some((config, ia32)) = key.as_ref().and_then(|k| btf_cache::load(&dir, k)) {
            return Ok(KernelBtf {
                btf: OnceLock::new(),
                config: with_task_btf(config),
                ia32,
                cached: true,
            });
        }
        let kernel = Self::read()?;
        if let Some(key) = key {
            let _ = btf_cache::store(&dir, &key, &kernel.config, kernel.ia32);
        }
        Ok(kernel)
    }

    /// The BTF, read now if the offsets came from the cache.
    pub fn btf(&self) -> Result<&Btf, LoadError> {
        if let Some(btf) = self.btf.get() {
            return Ok(btf);
        }
        let btf = Btf::from_sys_fs().map_err(LoadError::NoBtf)?;
        Ok(self.btf.get_or_init(|| btf))
    }

    /// aya's parse of the same bytes (FEntry::load looks the hooked function up in it).
    pub fn for_aya(&self) -> Result<aya::Btf, LoadError> {
        aya::Btf::parse(self.btf()?.bytes(), aya::Endianness::default()).map_err(LoadError::AyaBtf)
    }
}

/// `config` with `task_btf` probed: the programs must not reach a helper the kernel lacks
/// (the verifier rejects an unknown helper only on a path it visits; CONFIG's values are
/// constants). Probed each time, not cached: cheap loads.
fn with_task_btf(mut config: Config) -> Config {
    config.task_btf = task_btf();
    config
}

/// Which BTF-typed task helpers the kernel offers raw tracepoint programs
/// ([`fdaudit_common::task_btf`]): bpf_get_current_task_btf (5.11+), then bpf_task_pt_regs
/// (5.15+), probed once like [`super::has_bpf_loop`].
pub fn task_btf() -> u32 {
    use fdaudit_common::task_btf;
    static PROBE: OnceLock<u32> = OnceLock::new();
    *PROBE.get_or_init(|| {
        let has = |helper| is_helper_supported(ProgramType::RawTracePoint, helper).unwrap_or(false);
        if !has(BpfHelper::BPF_FUNC_get_current_task_btf) {
            task_btf::NONE
        } else if !has(BpfHelper::BPF_FUNC_task_pt_regs) {
            task_btf::TASK
        } else {
            task_btf::REGS
        }
    })
}
