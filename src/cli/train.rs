//! `perfmodel train`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel train' is not implemented yet")
}
