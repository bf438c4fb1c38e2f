//! `perfmodel outliers`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel outliers' is not implemented yet")
}
