//! `perfmodel inspect`: per-layer shapes, parameters, FLOPs and tensor sizes of a network, and totals.

use perfmodel::Network;
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Network file: net.json or .onnx
    net: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Batch size (overrides the file's batch_size)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let net = Network::load_with_batch(&args.net, args.batch.map(|b| b as usize))?;
    let analysis = net.analyze()?;
    let mut text = String::new();
    let total_elems = |f: fn(&perfmodel::layer::LayerCost) -> u64| analysis.costs.iter().map(f).sum::<u64>();
    match args.format {
        Format::Json => {
            let layers: Vec<_> = net
                .layers
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let c = &analysis.costs[i];
                    json!({
                        "index": i, "name": l.name, "type": l.op.layer_type().as_str(),
                        "input_shapes": analysis.input_shapes(i), "output_shape": analysis.output_shapes[i],
                        "params": c.weight_elems, "flops": c.flops, "input_elems": c.input_elems,
                        "weight_elems": c.weight_elems, "output_elems": c.output_elems,
                    })
                })
                .collect();
            let out = json!({
                "network": net.name, "batch_size": net.batch_size, "input_shape": net.input_shape,
                "layers": layers,
                "total": {
                    "layers": net.layers.len(), "params": analysis.total_params(), "flops": analysis.total_flops(),
                    "input_elems": total_elems(|c| c.input_elems), "output_elems": total_elems(|c| c.output_elems),
                },
            });
            writeln!(text, "{}", serde_json::to_string_pretty(&out)?)?;
        }
        Format::Table => {
            writeln!(text, "network {} (batch {}, input {:?})", net.name, net.batch_size, net.input_shape)?;
            writeln!(
                text,
                "{:>5}  {:<40} {:<18} {:<18} {:>12} {:>15} {:>12} {:>12} {:>12}",
                "#", "name", "type", "output shape", "params", "FLOPs", "input", "weights", "output"
            )?;
            for (i, l) in net.layers.iter().enumerate() {
                let c = &analysis.costs[i];
                writeln!(
                    text,
                    "{:>5}  {:<40} {:<18} {:<18} {:>12} {:>15} {:>12} {:>12} {:>12}",
                    i,
                    l.name,
                    l.op.layer_type().as_str(),
                    format!("{:?}", analysis.output_shapes[i]),
                    c.weight_elems,
                    c.flops,
                    c.input_elems,
                    c.weight_elems,
                    c.output_elems
                )?;
            }
            writeln!(
                text,
                "total: {} layers, {} params, {} FLOPs ({:.3} GFLOPs), {} input elems, {} output elems",
                net.layers.len(),
                analysis.total_params(),
                analysis.total_flops(),
                analysis.total_flops() as f64 / 1e9,
                total_elems(|c| c.input_elems),
                total_elems(|c| c.output_elems)
            )?;
        }
    }
    // A closed pipe (`inspect ... | head`) is the reader's choice, not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
