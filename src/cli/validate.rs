//! `perfmodel validate`: benchmark each network here and compare with its estimate.

use super::estimate::EstimatorArgs;
use anyhow::Context;
use perfmodel::collect::is_speed_reference;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::engine::{profile_networks_between, TractExecutor};
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
    /// networks spend their time) re-measured in step with the benchmarks, a few after every round, to tell how
    /// fast the machine runs right now compared with when its data was collected (0 = skip)
    #[arg(long, default_value_t = 40)]
    reference_samples: usize,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// Profile `nets` with rounds interleaved across them (so a slow spell of the machine does not land on one of
/// them), with stored single-layer samples re-measured after every round ([`SpeedReference`]). Returns the
/// profiles and the machine's speed during them: the median new/stored latency ratio of the reference
/// measurements, `None` when none was taken.
pub(super) fn bench_with_speed_reference(
    nets: &[Network],
    device: &DeviceProfile,
    data_dir: &std::path::Path,
    reference_samples: usize,
    rounds: usize,
    warmup: usize,
) -> anyhow::Result<(Vec<perfmodel::engine::NetworkProfile>, Option<f64>)> {
    let executor = TractExecutor::new(device.threads)?;
    let mut reference = SpeedReference::new(device, data_dir, &executor, reference_samples)?;
    let per_round = reference.as_ref().map_or(0, |r| r.len().div_ceil(rounds.max(1)).max(1));
    let measured = profile_networks_between(nets, &executor, rounds, warmup, &mut |_| match reference.as_mut() {
        Some(r) => r.measure(per_round),
        None => Ok(()),
    })
    .context("benchmarking")?;
    Ok((measured, reference.and_then(|r| r.median_ratio())))
}

/// How fast the machine runs right now compared with when the device's data was collected, measured in step
/// with the networks: after every round, the next stored samples of a seeded choice are run again and timed
/// against their stored latency. On this VM the speed changes within minutes (a network measured 0.6-1.7x its
/// time of 20 minutes earlier), so samples re-measured only before and after the rounds describe other minutes
/// than the networks ran in. The samples are batch-1 convolutions and dense layers of 1-100 ms
/// ([`is_speed_reference`]), where networks spend their time.
struct SpeedReference {
    /// Built workloads and their stored latency (ms).
    samples: Vec<(perfmodel::engine::TractWorkload, f64)>,
    /// Untimed runs before each timing, as the device's collection protocol does.
    burn_in: usize,
    next: usize,
    ratios: Vec<f64>,
}

impl SpeedReference {
    /// `None` when `count` is 0 or the device has no such stored samples (a note says so).
    fn new(
        device: &DeviceProfile,
        data_dir: &std::path::Path,
        executor: &TractExecutor,
        count: usize,
    ) -> anyhow::Result<Option<SpeedReference>> {
        use rand::seq::IndexedRandom;
        use rand::SeedableRng;
        if count == 0 {
            return Ok(None);
        }
        let stored = match perfmodel::data::read_device(data_dir, &device.name) {
            Ok(stored) => stored,
            Err(e) => {
                eprintln!("note: machine speed not measured: {e}");
                return Ok(None);
            }
        };
        let pool: Vec<perfmodel::data::Sample> = stored
            .into_values()
            .flatten()
            .filter(|s| s.status == perfmodel::data::Status::Ok && is_speed_reference(s))
            .collect();
        if pool.is_empty() {
            eprintln!(
                "note: machine speed not measured: no ok batch-1 convolution or dense samples of 1-100 ms in {}",
                data_dir.join(&device.name).display()
            );
            return Ok(None);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut samples = Vec::new();
        for s in pool.choose_multiple(&mut rng, count) {
            let workload = executor.layer_workload(&s.config).with_context(|| {
                format!(
                    "building stored sample {} for the machine-speed reference (--reference-samples 0 skips it)",
                    s.key
                )
            })?;
            samples.push((workload, s.latency_ms.unwrap_or(f64::NAN)));
        }
        Ok(Some(SpeedReference { samples, burn_in: device.protocol.burn_in_runs.max(1), next: 0, ratios: Vec::new() }))
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    /// Time the next `count` samples (cycling): the protocol's untimed burn-in runs, then the median of 3 timed
    /// runs (the collector times more repetitions over rounds; three keep a round of the networks short).
    fn measure(&mut self, count: usize) -> perfmodel::Result<()> {
        use perfmodel::engine::Workload;
        for _ in 0..count {
            let at = self.next % self.samples.len();
            let (workload, stored_ms) = &mut self.samples[at];
            self.next += 1;
            for _ in 0..self.burn_in {
                workload.run()?;
            }
            let mut times = [0.0; 3];
            for t in &mut times {
                let started = std::time::Instant::now();
                workload.run()?;
                *t = started.elapsed().as_secs_f64() * 1e3;
            }
            times.sort_by(f64::total_cmp);
            let ratio = times[1] / *stored_ms;
            if ratio.is_finite() {
                self.ratios.push(ratio);
            }
        }
        Ok(())
    }

    fn median_ratio(&self) -> Option<f64> {
        let mut ratios = self.ratios.clone();
        ratios.sort_by(f64::total_cmp);
        ratios.get(ratios.len() / 2).copied()
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
