//! `perfmodel import-onnx`.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'perfmodel import-onnx' is not implemented yet")
}
