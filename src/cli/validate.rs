//! `perfmodel validate`: benchmark each network here and compare with its estimate.

use super::estimate::EstimatorArgs;
use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::collect::{is_speed_reference, remeasure_some, Observer};
use perfmodel::engine::{profile_networks, TractExecutor};
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
    /// Timed rounds per network, interleaved across the networks (the median is used)
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Untimed warm-up runs per network
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Stored single-layer samples of the device (batch-1 convolutions and dense layers of 1-100 ms, where
    /// networks spend their time) re-measured before and after the benchmarks (half each) to tell how fast the
    /// machine runs right now compared with when its data was collected (0 = skip)
    #[arg(long, default_value_t = 40)]
    reference_samples: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// Prints the collector's notes, nothing else: the reference re-measurement is a side measurement.
struct Notes;

impl Observer for Notes {
    fn note(&mut self, message: &str) {
        eprintln!("{message}");
    }
    fn planned(&mut self, _: usize) {}
    fn recorded(&mut self, _: &perfmodel::data::Sample) {}
}

/// Profile `nets` with rounds interleaved across them (so a slow spell of the machine does not land on one of
/// them), between two re-measurements of `reference_samples` stored samples in all (half before, half after).
/// Returns the profiles and the machine's speed of the moment: the median new/stored latency ratio of the
/// reference samples, `None` when none was measured.
pub(super) fn bench_with_speed_reference(
    nets: &[Network],
    device: &DeviceProfile,
    data_dir: &std::path::Path,
    reference_samples: usize,
    rounds: usize,
    warmup: usize,
) -> anyhow::Result<(Vec<perfmodel::engine::NetworkProfile>, Option<f64>)> {
    let executor = TractExecutor::new(device.threads)?;
    let half = reference_samples / 2;
    let mut ratios = if half > 0 { reference_ratios(data_dir, device, &executor, half, 1)? } else { Vec::new() };
    let measured = profile_networks(nets, &executor, rounds, warmup).context("benchmarking")?;
    if half > 0 {
        ratios.extend(reference_ratios(data_dir, device, &executor, reference_samples - half, 2)?);
    }
    ratios.sort_by(f64::total_cmp);
    Ok((measured, ratios.get(ratios.len() / 2).copied()))
}

/// Re-measure `count` stored samples (seeded) of the device's data that resemble where networks spend their time
/// ([`is_speed_reference`]) and return their new/stored latency ratios: how fast the machine runs now compared
/// with when the data was collected.
fn reference_ratios(
    data_dir: &std::path::Path,
    device: &DeviceProfile,
    executor: &TractExecutor,
    count: usize,
    seed: u64,
) -> anyhow::Result<Vec<f64>> {
    match remeasure_some(
        device,
        executor,
        data_dir,
        count,
        seed,
        is_speed_reference,
        "batch-1 weighted-layer ",
        &mut Notes,
    ) {
        Ok(report) => Ok(report.samples.iter().map(|s| s.3 / s.2).collect()),
        // No stored samples to compare with: the reference is a side measurement, so go on without it.
        Err(e @ perfmodel::Error::Device { .. }) => {
            eprintln!("note: machine speed not measured: {e}");
            Ok(Vec::new())
        }
        Err(e) => Err(anyhow::Error::new(e)
            .context("re-measuring stored samples for the machine-speed reference (--reference-samples 0 skips it)")),
    }
}

use super::TableOrJson as Format;

pub fn run(args: Args) -> anyhow::Result<()> {
    let device = DeviceProfile::load(&args.estimator.collectors_dir(), &args.estimator.device)?;
    let estimator = args.estimator.open()?;
    let nets = args.nets.iter().map(Network::load).collect::<perfmodel::Result<Vec<Network>>>()?;
    let estimates = nets.iter().map(|n| estimator.estimate(n)).collect::<perfmodel::Result<Vec<_>>>()?;
    let data_dir = args.estimator.data_dir.clone().unwrap_or_else(|| super::default_dir("data"));
    let (measured, speed) =
        bench_with_speed_reference(&nets, &device, &data_dir, args.reference_samples, args.rounds, args.warmup)?;
    let rows = estimates.iter().zip(&measured).map(|(e, m)| NetworkError::new(e, m)).collect();
    let mut v = Validation::new(estimator.device(), estimator.method().name(), rows);
    if let Some(ratio) = speed {
        v = v.with_machine_speed(ratio);
    }
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
            if let (Some(ratio), Some(errors), Some(median)) = (
                v.machine_speed_ratio,
                &v.latency_error_at_machine_speed_pct,
                v.median_abs_latency_error_at_machine_speed_pct,
            ) {
                let per_network: Vec<String> =
                    v.networks.iter().zip(errors).map(|(n, e)| format!("{} {e:+.1}%", n.network)).collect();
                println!(
                    "machine speed now: stored layers re-measured at {ratio:.2}x their collected time; latency error \
                     at that speed: {} (median |error| {median:.1}%)",
                    per_network.join(", ")
                );
            }
        }
    }
    Ok(())
}
