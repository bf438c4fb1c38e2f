//! `perfmodel outliers`: layers whose measured time is far above their prediction, ranked by what tuning could
//! save.

use super::estimate::EstimatorArgs;
use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::engine::profile_networks;
use perfmodel::estimate::outliers::{find_outliers, read_measured, MeasuredLayer};
use perfmodel::estimate::request::{apply_zero_shot, zero_shot_of};
use perfmodel::Dirs;
use perfmodel::Network;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Network (net.json or .onnx)
    net: PathBuf,
    #[command(flatten)]
    estimator: EstimatorArgs,
    /// Measured per-layer times: `perfmodel bench --format json` output, or any JSON with
    /// "layers": [{"name", "latency_ms"}]. Without it, the network is benchmarked here with the device's threads.
    #[arg(long)]
    measured: Option<PathBuf>,
    /// Flag layers whose measured/predicted latency exceeds this
    #[arg(long, default_value_t = 2.0)]
    threshold: f64,
    /// Rounds when benchmarking here
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

use super::TableOrJson as Format;

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let net = Network::load(&args.net)?;
    let choice = args.estimator.choose(dirs);
    let estimator = args.estimator.estimator(&choice, dirs)?;
    let mut estimate = estimator.estimate(&net)?;
    if let Some(zero_shot) = zero_shot_of(&choice, &estimator, dirs)? {
        estimate = apply_zero_shot(estimate, &zero_shot, &choice, &net)?;
    }
    let measured: Vec<MeasuredLayer> = match &args.measured {
        Some(path) => read_measured(path)?,
        None => {
            let device = DeviceProfile::load(&dirs.collectors, &choice.device)?;
            // Measured with the device's own engine, as its models were.
            let executor = perfmodel::engine::executor_for(&device)?;
            let profile = profile_networks(std::slice::from_ref(&net), executor.as_ref(), args.rounds, 3, args.rounds)
                .with_context(|| format!("benchmarking {}", args.net.display()))?
                .remove(0);
            profile.layers.into_iter().map(|l| MeasuredLayer { name: l.name, latency_ms: l.latency_ms }).collect()
        }
    };
    let report = find_outliers(&net, &estimate, &measured, args.threshold)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => {
            println!(
                "{} on device '{}': measured {:.3} ms, predicted {:.3} ms; {} outlier(s) (ratio > {} or isolated)",
                report.network,
                report.device,
                report.measured_total_ms,
                report.predicted_total_ms,
                report.outliers.len(),
                report.threshold
            );
            let width = report.layers.iter().map(|l| l.name.len()).max().unwrap_or(5).max(5);
            println!(
                "{:<width$}  {:<18}  {:>11}  {:>12}  {:>7}  {:>9}  {:>10}  flagged by",
                "layer", "type", "measured_ms", "predicted_ms", "ratio", "isolation", "saving_ms"
            );
            for c in &report.outliers {
                println!(
                    "{:<width$}  {:<18}  {:>11.4}  {:>12.4}  {:>7}  {:>9}  {:>10.4}  {}",
                    c.name,
                    c.layer_type.as_str(),
                    c.measured_ms,
                    c.predicted_ms,
                    c.ratio.map_or("-".into(), |r| format!("{r:.2}")),
                    c.isolation_score.map_or("-".into(), |s| format!("{s:.2}")),
                    c.saving_ms,
                    c.flagged_by.join("+")
                        + &match c.fused.as_slice() {
                            [] => String::new(),
                            fused => format!(" (prediction includes {}, which ran inside it)", fused.join(", ")),
                        }
                );
            }
            let folded = report.layers.iter().filter(|c| c.fused_into.is_some()).count();
            if folded > 0 {
                println!(
                    "{folded} layer(s) measured at 0 ms ran inside a neighbour and are compared there (JSON: fused, \
                     fused_into)"
                );
            }
            for note in &report.notes {
                println!("note: {note}");
            }
        }
    }
    Ok(())
}
