//! `fdaudit trace` (stub).

/// Arguments of `fdaudit trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {}

pub fn run(_args: TraceArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`fdaudit trace` is not implemented yet")
}
