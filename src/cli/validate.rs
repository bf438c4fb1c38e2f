//! `perfmodel validate`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel validate' is not implemented yet")
}
