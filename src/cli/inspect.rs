//! `perfmodel inspect`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel inspect' is not implemented yet")
}
