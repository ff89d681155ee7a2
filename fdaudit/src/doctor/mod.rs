//! `fdaudit doctor` (stub).

/// Arguments of `fdaudit doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

pub fn run(_args: DoctorArgs) -> anyhow::Result<u8> {
    anyhow::bail!("`fdaudit doctor` is not implemented yet")
}
