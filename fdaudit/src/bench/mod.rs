//! `fdaudit bench` (stub).

/// Arguments of `fdaudit bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`fdaudit bench` is not implemented yet")
}
