//! Spawning children with each fd-closing strategy (stub; `bench` owns it).

/// Arguments of the internal `__spawner` command.
#[derive(Debug, clap::Args)]
pub struct SpawnerArgs {}

pub fn run(_args: SpawnerArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
