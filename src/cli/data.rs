//! `perfmodel data ...`.

#[derive(clap::Subcommand)]
pub enum Command {}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {}
}
