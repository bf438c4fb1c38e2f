//! `perfmodel import-onnx`: convert an ONNX model to net.json.

use perfmodel::fsio::write_atomic;
use perfmodel::onnx::import_onnx;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// ONNX model to read
    model: PathBuf,
    /// net.json to write
    #[arg(short, long)]
    output: PathBuf,
    /// Keep ops perfmodel cannot model as 'unsupported' layers instead of failing
    #[arg(long)]
    allow_unsupported: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let network = import_onnx(&args.model, args.allow_unsupported)?;
    let mut text = network.to_json_string();
    text.push('\n');
    write_atomic(&args.output, text.as_bytes())?;
    let unsupported = network.unsupported_layers();
    println!(
        "{}: {} layers, input {:?}, batch {} -> {}",
        network.name,
        network.layers.len(),
        network.input_shape,
        network.batch_size,
        args.output.display()
    );
    if !unsupported.is_empty() {
        let names: Vec<String> = unsupported.iter().map(|l| l.name.clone()).collect();
        eprintln!("warning: {} unsupported layer(s) kept: {}", names.len(), names.join(", "));
    }
    Ok(())
}
