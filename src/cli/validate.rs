//! `perfmodel validate`: benchmark each network here and compare with its estimate.

use super::estimate::EstimatorArgs;
use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::engine::profile_network;
use perfmodel::estimate::validate::{NetworkError, Validation};
use perfmodel::Network;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Networks (net.json or .onnx)
    #[arg(required = true)]
    nets: Vec<PathBuf>,
    #[command(flatten)]
    estimator: EstimatorArgs,
    /// Timed rounds per network (the median is used)
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Untimed warm-up runs per network
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

use super::TableOrJson as Format;

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = DeviceProfile::load(&args.estimator.collectors_dir(), &args.estimator.device)?;
    let estimator = args.estimator.open()?;
    let mut rows = Vec::with_capacity(args.nets.len());
    for path in &args.nets {
        let net = Network::load(path)?;
        let estimate = estimator.estimate(&net)?;
        let measured = profile_network(&net, device.threads, args.rounds, args.warmup)
            .with_context(|| format!("benchmarking {}", path.display()))?;
        rows.push(NetworkError::new(&estimate, &measured));
    }
    let v = Validation::new(estimator.device(), estimator.method().name(), rows);
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&v)?),
        Format::Table => {
            let width = v.networks.iter().map(|n| n.network.len()).max().unwrap_or(7).max(7);
            println!("device '{}', method {}", v.device, v.method);
            println!(
                "{:<width$}  {:>11}  {:>12}  {:>8}  {:>12}  {:>13}  {:>8}",
                "network", "measured_ms", "predicted_ms", "error_%", "measured_MiB", "predicted_MiB", "error_%"
            );
            for n in &v.networks {
                println!(
                    "{:<width$}  {:>11.3}  {:>12.3}  {:>+8.1}  {:>12.2}  {:>13.2}  {:>+8.1}{}",
                    n.network,
                    n.measured_latency_ms,
                    n.predicted_latency_ms,
                    n.latency_error_pct,
                    n.measured_peak_memory_mib,
                    n.predicted_peak_memory_mib,
                    n.memory_error_pct,
                    if n.uncovered_layers > 0 {
                        format!("  ({} uncovered layers)", n.uncovered_layers)
                    } else {
                        String::new()
                    }
                );
            }
            println!(
                "median |error|: latency {:.1}%, memory {:.1}%; max |error|: latency {:.1}%, memory {:.1}%",
                v.median_abs_latency_error_pct,
                v.median_abs_memory_error_pct,
                v.max_abs_latency_error_pct,
                v.max_abs_memory_error_pct
            );
        }
    }
    Ok(())
}
