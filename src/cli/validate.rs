//! `perfmodel validate`: benchmark each network here and compare with its estimate.

use super::estimate::EstimatorArgs;
use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::collect::speed::MIN_ROUNDS_NEAR_NOMINAL;
use perfmodel::collect::speed::{SpeedProbe, PROBE_MAX_AGE};
use perfmodel::engine::{profile_networks_observed, BenchObserver, BenchStep, RoundPlan, TractExecutor};
use perfmodel::estimate::validate::{NetworkError, ProbeReadings, Validation};
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

/// The speed probe timed around a bench's rounds, asking for more rounds of a network that has too few near
/// the nominal speed.
struct ProbeObserver {
    probe: Option<SpeedProbe>,
    readings: ProbeReadings,
    nominal_ms: Option<f64>,
    /// Count rounds near nominal on the CPU clock, as [`Validation::with_speed_probe`] does for a one-thread
    /// engine (a pool computes on other threads, whose time the calling thread's clock does not see).
    cpu_clock: bool,
}

impl BenchObserver for ProbeObserver {
    fn step(&mut self, step: BenchStep) -> perfmodel::Result<()> {
        if let Some(p) = self.probe.as_mut() {
            match p.reading(PROBE_MAX_AGE) {
                Ok(ms) => self.readings.record(step, ms, p.last_cpu_ms()),
                Err(e) => {
                    // Later rounds then have no bracket and get no error at nominal speed.
                    eprintln!("note: the speed probe failed ({e}); machine speed not measured from here on");
                    self.probe = None;
                }
            }
        }
        Ok(())
    }

    fn wants_more(&self, network: usize, _rounds: usize) -> bool {
        match (&self.probe, self.nominal_ms) {
            (Some(_), Some(nominal)) => {
                self.readings.rounds_near_nominal(network, nominal, self.cpu_clock) < MIN_ROUNDS_NEAR_NOMINAL
            }
            _ => false,
        }
    }
}

/// Profile `nets` in turns of `block` rounds ([`profile_networks_observed`]), with the speed probe
/// (`collect::speed`) timed before and right after every round (a reading is reused for [`PROBE_MAX_AGE`], so a
/// small network's rounds mostly run back to back). After `rounds`, a network with fewer than
/// [`MIN_ROUNDS_NEAR_NOMINAL`] rounds near `nominal_ms` runs more turns, up to `max_rounds`: this VM can spend
/// a whole minute in a fast state (probe at 0.66-0.69x nominal), where one elasticity does not describe every
/// network (yolo_tiny came out +26-27% at nominal from 5-6 rounds near it, 2026-11-22). Returns the profiles
/// and the probe readings (empty when `nominal_ms` is `None` or the probe could not be built; a note says why).
pub(super) fn bench_with_speed_probe(
    nets: &[Network],
    device: &DeviceProfile,
    nominal_ms: Option<f64>,
    plan: RoundPlan,
    warmup: usize,
) -> anyhow::Result<(Vec<perfmodel::engine::NetworkProfile>, ProbeReadings)> {
    let executor = TractExecutor::new(device.threads)?;
    let probe = match nominal_ms.map(|_| SpeedProbe::new(&executor, device.protocol.burn_in_runs)) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            eprintln!("note: machine speed not measured: {e}");
            None
        }
        None => None,
    };
    let readings = ProbeReadings::new(nets.len(), plan.rounds);
    let mut observer = ProbeObserver { probe, readings, nominal_ms, cpu_clock: executor.threads() == 1 };
    let measured = profile_networks_observed(nets, &executor, plan, warmup, &mut observer).context("benchmarking")?;
    Ok((measured, observer.readings))
}

/// The nominal probe time the estimator's latency models were trained at, with a note when there is none;
/// `None` too for models trained on another machine, whose nominal time is that machine's probe time.
pub(super) fn nominal_probe_ms(estimator: &perfmodel::estimate::Estimator) -> Option<f64> {
    let perfmodel::estimate::Method::Learned(store) = estimator.method() else { return None };
    if estimator.trained_elsewhere().is_some() {
        return None;
    }
    match store.manifest().nominal_probe_ms() {
        Ok(nominal) => Some(nominal),
        Err(why) => {
            eprintln!("note: the models {why}; errors at nominal speed not reported");
            None
        }
    }
}

use super::TableOrJson as Format;

pub fn run(args: Args) -> anyhow::Result<()> {
    let resolved = args.estimator.resolve()?;
    let device = DeviceProfile::load(&args.estimator.collectors_dir(), &resolved.device)?;
    let estimator = args.estimator.open(&resolved.device)?;
    let nets = args.nets.iter().map(Network::load).collect::<perfmodel::Result<Vec<Network>>>()?;
    let mut estimates = nets.iter().map(|n| estimator.estimate(n)).collect::<perfmodel::Result<Vec<_>>>()?;
    let zero_shot = args.estimator.zero_shot(&resolved, &estimator)?;
    if let Some(z) = &zero_shot {
        estimates = estimates.into_iter().map(|e| super::estimate::apply_zero_shot(e, z, &resolved)).collect();
    }
    let nominal = if args.no_speed_probe { None } else { nominal_probe_ms(&estimator) };
    let block = usize::try_from(args.block).unwrap_or(usize::MAX);
    let rounds = usize::try_from(args.rounds).unwrap_or(usize::MAX);
    let max_rounds = args.max_rounds.map_or(rounds.saturating_mul(3), |m| usize::try_from(m).unwrap_or(usize::MAX));
    if max_rounds < rounds {
        anyhow::bail!(perfmodel::Error::Invalid(format!(
            "--max-rounds {max_rounds} is below --rounds {rounds}: a network runs at least --rounds rounds"
        )));
    }
    let plan = RoundPlan { rounds, max_rounds, block };
    let (measured, readings) = bench_with_speed_probe(&nets, &device, nominal, plan, args.warmup)?;
    let rows = estimates.iter().zip(&measured).map(|(e, m)| NetworkError::new(e, m)).collect();
    let mut v = Validation::new(estimator.device(), estimator.method().name(), rows);
    if let Some(nominal) = nominal.filter(|_| !readings.is_empty()) {
        v = v.with_speed_probe(nominal, &readings, &estimates, &measured);
    }
    // A note every network shares once; one that only some networks have, with their names.
    for note in estimates.iter().flat_map(|e| &e.notes) {
        let with: Vec<&str> = estimates.iter().filter(|e| e.notes.contains(note)).map(|e| e.network.as_str()).collect();
        match with.len() == estimates.len() {
            true => v.note(note),
            false => v.note(&format!("{}: {note}", with.join(", "))),
        }
    }
    // bench measures this machine whatever the profile says; the table says when that is another machine.
    let host = perfmodel::device::Fingerprint::of_host();
    if let (Err(_), Some(recorded)) = (device.check_host(host), &device.fingerprint) {
        v.other_machine = Some(format!(
            "device '{}' was made for {}; the networks ran on this host, {}: the errors are its transfer errors",
            device.name,
            recorded.summary(),
            host.summary()
        ));
    }
    if let Some(note) = args.estimator.trained_here_note(&estimator).filter(|_| zero_shot.is_none()) {
        v.note(&note);
    }
    if estimator.trained_elsewhere().is_some() && !args.no_speed_probe {
        v.note(
            "the speed probe was not timed against the models' nominal speed: that is its time on the machine the \
             models were trained on; errors at nominal speed not reported",
        );
    }
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
