//! `fdaudit scan` (stub).

/// Arguments of `fdaudit scan`.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {}

pub fn run(_args: ScanArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`fdaudit scan` is not implemented yet")
}
