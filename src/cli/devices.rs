//! `perfmodel devices`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel devices' is not implemented yet")
}
