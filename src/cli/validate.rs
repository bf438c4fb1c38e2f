//! `perfmodel validate`: benchmark each network here and compare with its estimate.

use super::estimate::EstimatorArgs;
use perfmodel::collect::speed::MIN_ROUNDS_NEAR_NOMINAL;
use perfmodel::collect::DeviceProfile;
use perfmodel::engine::RoundPlan;
use perfmodel::estimate::request::{zero_shot_of, Opened};
use perfmodel::estimate::validation::{validate, BenchOptions};
use perfmodel::Dirs;
use perfmodel::Network;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Networks (net.json or .onnx)
    #[arg(required = true)]
    nets: Vec<PathBuf>,
    #[command(flatten)]
    estimator: EstimatorArgs,
    /// Timed rounds per network (the median is used; more may run, see --max-rounds)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Most rounds a network runs in all (at least --rounds; default 3 x --rounds): with the speed probe, a
    /// network with fewer than 10 rounds near the nominal speed of the models' data after --rounds runs more
    /// turns, until it has them or reaches this
    #[arg(long)]
    max_rounds: Option<u64>,
    /// Rounds a network runs back to back in one turn before the next network's turn
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    block: u64,
    /// Untimed warm-up runs per network
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Do not time the speed probe between the rounds (the errors at nominal speed are then not reported)
    #[arg(long)]
    no_speed_probe: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

use super::TableOrJson as Format;

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let block = usize::try_from(args.block).unwrap_or(usize::MAX);
    let rounds = usize::try_from(args.rounds).unwrap_or(usize::MAX);
    let max_rounds = args.max_rounds.map_or(rounds.saturating_mul(3), |m| usize::try_from(m).unwrap_or(usize::MAX));
    if max_rounds < rounds {
        anyhow::bail!(perfmodel::Error::Invalid(format!(
            "--max-rounds {max_rounds} is below --rounds {rounds}: a network runs at least --rounds rounds"
        )));
    }
    let choice = args.estimator.choose(dirs);
    // The networks run with the device's engine settings: its profile must be there before anything is built.
    DeviceProfile::load(&dirs.collectors, &choice.device)?;
    let estimator = args.estimator.estimator(&choice, dirs)?;
    let nets = args.nets.iter().map(Network::load).collect::<perfmodel::Result<Vec<Network>>>()?;
    let zero_shot = zero_shot_of(&choice, &estimator, dirs)?;
    let opened = Opened { choice, estimator, zero_shot };
    let options = BenchOptions {
        plan: RoundPlan { rounds, max_rounds, block },
        warmup: args.warmup,
        speed_probe: !args.no_speed_probe,
    };
    let v = validate(&nets, &opened, dirs, options, &mut |line| eprintln!("{line}"))?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&v)?),
        Format::Table => {
            for note in &v.notes {
                eprintln!("note: {note}");
            }
            let width = v.networks.iter().map(|n| n.network.len()).max().unwrap_or(7).max(7);
            println!("device '{}', method {}", v.device, v.method);
            if let Some(other) = &v.other_machine {
                println!("ANOTHER MACHINE: {other}");
            }
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
            if let (Some(probe), Some(median), Some(max)) =
                (&v.speed_probe, v.median_abs_latency_error_at_nominal_pct, v.max_abs_latency_error_at_nominal_pct)
            {
                let per_network: Vec<String> = v
                    .networks
                    .iter()
                    .filter_map(|n| {
                        let all = n.rounds.len();
                        let near = match n.rounds_near_nominal {
                            Some(k) if k >= MIN_ROUNDS_NEAR_NOMINAL => {
                                format!(", from the {k} of {all} rounds near it")
                            }
                            Some(k) => format!(", all {all} rounds: {k} near it"),
                            None => String::new(),
                        };
                        Some(format!(
                            "{} {:.3} ms ({:+.1}%{near})",
                            n.network, n.measured_latency_at_nominal_ms?, n.latency_error_at_nominal_pct?
                        ))
                    })
                    .collect();
                let cpu = probe.cpu_median_ms.map_or(String::new(), |ms| format!(" ({ms:.3} ms of CPU)"));
                println!(
                    "machine speed: probe median {:.3} ms{cpu} over {} readings, {:.2}x the nominal {:.3} ms of the \
                     models' data",
                    probe.median_ms, probe.readings, probe.ratio, probe.nominal_ms
                );
                let clock = match probe.clock {
                    "cpu" => "from the CPU clock of rounds and probe",
                    _ => "from the wall clock",
                };
                println!(
                    "measured at nominal speed ({clock}): {}; median |error| {median:.1}%, max |error| {max:.1}%",
                    per_network.join(", ")
                );
            }
        }
    }
    Ok(())
}
