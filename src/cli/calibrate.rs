//! `perfmodel calibrate`: fit a device's whole-network correction from real runs of the zoo's training
//! architectures (see `perfmodel::estimate::calibration` for why and what is fitted).

use super::default_dir;
use super::validate::{bench_with_speed_probe, nominal_probe_ms};
use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::engine::RoundPlan;
use perfmodel::estimate::calibration::{
    models_fingerprint, read_core_cache_mib, Calibration, CalibrationPoint, DenseLayerPoint, ResidualAddPoint,
    MIN_NETWORKS,
};
use perfmodel::estimate::memory::{BYTES_PER_ELEMENT, MIB};
use perfmodel::estimate::validate::{NetworkError, Validation};
use perfmodel::estimate::{structure, Dirs, Estimator, Method, DEFAULT_DEVICE};
use perfmodel::{LayerType, Network};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Networks to run (net.json or .onnx) [default: every architecture in the zoo directory and its
    /// calibration/ subdirectory, never the holdout]
    nets: Vec<PathBuf>,
    /// Device whose learned estimates are calibrated; the networks run here with its profile's threads
    #[arg(long, default_value = DEFAULT_DEVICE)]
    device: String,
    /// Trained models; the calibration is written to MODELS_DIR/DEVICE/calibration.json [default: ./models, else the shipped models]
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Device profiles [default: ./collectors, else the shipped ones]
    #[arg(long)]
    collectors_dir: Option<PathBuf>,
    /// Zoo directory for the default networks [default: ./zoo, else the shipped zoo]
    #[arg(long)]
    zoo_dir: Option<PathBuf>,
    /// Timed rounds per network (the median is used; with 10 or more, only the rounds near nominal speed count
    /// when at least 10 are, as in `validate`)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Untimed warm-up runs per network
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Rounds a network runs back to back in one turn before the next network's turn
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    block: u64,
    /// Do not time the speed probe between the rounds. With it, the median round is brought to the nominal
    /// speed of the models' data (the share of the network in layer types that follow the probe), so the
    /// calibration holds the network-level effect only, not how busy a shared machine happened to be
    #[arg(long)]
    no_speed_probe: bool,
    /// Calibrate models that were trained on another machine (by default refused: the fit would carry this
    /// machine's runs into a calibration applied wherever those models are used)
    #[arg(long)]
    allow_other_machine: bool,
    /// Fit only the peak-memory correction, from one run per network (memory does not depend on the machine's
    /// speed)
    #[arg(long, conflicts_with = "network_latency")]
    memory_only: bool,
    /// Also fit the whole-network latency terms (a scale and a time per executing layer) on the network totals.
    /// Off by default: on a shared VM whose speed drifts by ±30% such a fit learns the drift, not the networks.
    /// The dense-weights term is always fitted (unless --memory-only): it comes from the dense layers' own times
    #[arg(long)]
    network_latency: bool,
    /// Collected data of the device, for `--method template`-style lookups of the estimator [default: ./data,
    /// else the shipped data]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

use super::TableOrJson as Format;

/// The zoo's architectures (`*.json` directly in `zoo`, except the sampled configs) and its calibration-only
/// networks (`zoo/calibration/*.json`, if that directory exists). The holdout, another subdirectory, is never
/// read.
fn zoo_networks(zoo: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut nets = json_files(zoo)?;
    let calibration = zoo.join(perfmodel::zoo::CALIBRATION_DIR);
    if calibration.is_dir() {
        nets.extend(json_files(&calibration)?);
    }
    Ok(nets)
}

/// The `*.json` files directly in `dir` except `configs.json`, sorted.
fn json_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading the zoo directory {}", dir.display()))?;
    let mut nets = Vec::new();
    for entry in entries {
        let path = entry.with_context(|| format!("reading the zoo directory {}", dir.display()))?.path();
        let is_net =
            path.extension().is_some_and(|e| e == "json") && path.file_name().is_some_and(|n| n != "configs.json");
        if is_net && path.is_file() {
            nets.push(path);
        }
    }
    nets.sort();
    Ok(nets)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let models = args.models_dir.clone().unwrap_or_else(|| default_dir("models"));
    let collectors = args.collectors_dir.clone().unwrap_or_else(|| default_dir("collectors"));
    let profile = DeviceProfile::load(&collectors, &args.device)?;
    // The calibration is fitted on this machine's runs: another machine's profile must not receive them.
    profile.check_host(perfmodel::device::Fingerprint::of_host())?;
    let data = args.data_dir.clone().unwrap_or_else(|| default_dir("data"));
    // Exactly what `perfmodel estimate` computes (bandwidth-priced cheap layers included), before calibration.
    let dirs = Dirs { models: &models, data: &data, collectors: &collectors };
    let estimator = Estimator::open_method("learned", &args.device, &dirs)?.without_calibration();
    let Method::Learned(store) = estimator.method() else { unreachable!("the learned method has a model store") };
    let fingerprint = models_fingerprint(store.manifest());
    let nets = if args.nets.is_empty() {
        zoo_networks(&args.zoo_dir.clone().unwrap_or_else(|| default_dir("zoo")))?
    } else {
        args.nets.clone()
    };
    if nets.len() < MIN_NETWORKS {
        anyhow::bail!(perfmodel::Error::Invalid(format!(
            "calibration needs at least {MIN_NETWORKS} networks, got {} (by default the zoo's architectures)",
            nets.len()
        )));
    }
    let nets = nets.iter().map(Network::load).collect::<perfmodel::Result<Vec<Network>>>()?;
    eprintln!("running {} networks, {} rounds each", nets.len(), args.rounds);
    let (rounds, warmup) = if args.memory_only { (1, 0) } else { (args.rounds as usize, args.warmup) };
    // Models of another machine: this machine's runs would be fitted into their calibration, and their nominal
    // probe time is that machine's.
    if let Some(machine) = estimator.trained_elsewhere() {
        if !args.allow_other_machine {
            anyhow::bail!(perfmodel::Error::Invalid(format!(
                "device '{}' has models trained on another machine ({machine}): calibrating them here would fit \
                 this machine's runs into the calibration they are used with everywhere; calibrate on that \
                 machine, or collect and train this one as a device of its own (--allow-other-machine to do it \
                 anyway)",
                args.device
            )));
        }
        eprintln!(
            "note: device '{}' has models trained on another machine ({machine}); their speed probe is not \
             compared with this machine's",
            args.device
        );
    }
    // What tract keeps per layer besides weights, measured here by probe networks: the estimates below count
    // it, and so will every estimate this calibration applies to. Only for models of tract on this machine.
    let structure = if estimator.models_tract() && estimator.trained_elsewhere().is_none() {
        let probes = structure::probes();
        eprintln!("measuring the engine's per-layer structure ({} probe networks)", 2 * probes.len());
        let structure = structure::measure(&probes, &perfmodel::engine::TractExecutor::new(1)?, &estimator)?;
        if structure.is_none() {
            eprintln!(
                "note: heap use cannot be counted in this process; the engine's per-layer structure is not measured"
            );
        }
        structure
    } else {
        None
    };
    let estimator = estimator.with_engine_structure(structure.clone());
    let nominal = if args.memory_only || args.no_speed_probe { None } else { nominal_probe_ms(&estimator) };
    let plan = RoundPlan { rounds, max_rounds: rounds, block: usize::try_from(args.block).unwrap_or(usize::MAX) };
    let (profiles, readings) = bench_with_speed_probe(&nets, &profile, nominal, plan, warmup)?;
    let estimates = nets.iter().map(|n| estimator.estimate(n)).collect::<perfmodel::Result<Vec<_>>>()?;
    let mut at_nominal = Validation::new(&args.device, "learned", {
        estimates.iter().zip(&profiles).map(|(e, m)| NetworkError::new(e, m)).collect()
    });
    if let Some(nominal) = nominal.filter(|_| !readings.is_empty()) {
        at_nominal = at_nominal.with_speed_probe(nominal, &readings, &estimates, &profiles);
        if let Some(p) = &at_nominal.speed_probe {
            eprintln!("machine speed: probe at {:.2}x the nominal time of the models' data", p.ratio);
        }
    }
    let mut points = Vec::with_capacity(nets.len());
    for (((net, measured), estimate), row) in nets.iter().zip(&profiles).zip(&estimates).zip(&at_nominal.networks) {
        eprintln!(
            "{}: measured {:.3} ms / {:.2} MiB, predicted {:.3} ms / {:.2} MiB",
            net.name,
            measured.total.latency_ms,
            measured.total.peak_memory_mib,
            estimate.total.latency_ms,
            estimate.total.peak_memory_mib
        );
        // Each layer's time brought to nominal speed like the network's total.
        let to_nominal = row.measured_latency_at_nominal_ms.map_or(1.0, |n| n / measured.total.latency_ms);
        let costs = net.analyze()?.costs;
        let dense_layers = estimate
            .layers
            .iter()
            .zip(&measured.layers)
            .zip(&costs)
            .filter(|((e, _), _)| e.layer_type == LayerType::Dense && e.predictor.fused_into().is_none())
            .filter(|((_, m), _)| m.latency_ms > 0.0)
            .filter_map(|((e, m), cost)| {
                Some(DenseLayerPoint {
                    layer: e.name.clone(),
                    weight_mib: (cost.weight_elems * BYTES_PER_ELEMENT) as f64 / MIB,
                    predicted_ms: e.latency_ms?,
                    measured_ms: m.latency_ms * to_nominal,
                })
            })
            .collect();
        let weight_mib = costs.iter().map(|c| c.weight_elems * BYTES_PER_ELEMENT).sum::<u64>() as f64 / MIB;
        // Convolutions that compute a residual add: their node's time and the add's (0 when tract fused it).
        let residual_adds = residual_add_points(net, estimate, measured, &costs, to_nominal);
        points.push(CalibrationPoint {
            dense_layers,
            residual_adds,
            weight_mib,
            network: net.name.clone(),
            executing_layers: estimate.executing_layers(),
            weighted_layers: estimate.weighted_layers(),
            measured_latency_ms: row.measured_latency_at_nominal_ms.unwrap_or(measured.total.latency_ms),
            predicted_latency_ms: estimate.total.latency_ms,
            measured_peak_memory_mib: measured.total.peak_memory_mib,
            predicted_peak_memory_mib: estimate.total.peak_memory_mib,
        });
    }
    // The machine the networks ran on (calibrate runs them here): the kernel's cache description, else the L2
    // size tract blocks its kernels by.
    let core_cache_mib = read_core_cache_mib(Path::new("/sys/devices/system/cpu/cpu0/cache"))
        .or_else(|| perfmodel::engine::packing::host_l2_bytes().map(|b| b as f64 / MIB));
    if core_cache_mib.is_none() {
        eprintln!("note: the core's cache size could not be read; the dense-layer term applies in every network");
    }
    let mut calibration = Calibration::fit(&args.device, "learned", &fingerprint, points, core_cache_mib)?;
    if let (true, Some(why)) = (args.network_latency, &calibration.network_latency_error) {
        anyhow::bail!(perfmodel::Error::Invalid(why.clone()));
    }
    if args.memory_only {
        calibration = calibration.memory_only();
    } else if !args.network_latency {
        calibration = calibration.without_network_latency();
    }
    calibration.machine_speed_ratio = at_nominal.speed_probe.as_ref().map(|p| p.ratio);
    calibration.engine_structure = structure;
    let path = calibration.save(&models)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&calibration)?),
        Format::Table => print_table(&calibration, &path),
    }
    Ok(())
}

/// The residual-add points of one network ([`ResidualAddPoint`]): each convolution the estimate credits with a
/// fused add (its predictor ends in `+add:<name>`), predicted with the add, measured as its node and the add's
/// together.
fn residual_add_points(
    net: &Network,
    estimate: &perfmodel::estimate::Estimate,
    measured: &perfmodel::engine::NetworkProfile,
    costs: &[perfmodel::layer::LayerCost],
    to_nominal: f64,
) -> Vec<ResidualAddPoint> {
    let index: std::collections::HashMap<&str, usize> =
        net.layers.iter().enumerate().map(|(i, l)| (l.name.as_str(), i)).collect();
    let mut points = Vec::new();
    for (conv, e) in estimate.layers.iter().enumerate() {
        let Some(add) = e.predictor.fused_add().and_then(|name| index.get(name).copied()) else {
            continue;
        };
        let (Some(predicted_ms), Some(conv_ms), Some(add_ms)) = (
            e.latency_ms,
            measured.layers.get(conv).map(|l| l.latency_ms),
            measured.layers.get(add).map(|l| l.latency_ms),
        ) else {
            continue;
        };
        points.push(ResidualAddPoint {
            layer: e.name.clone(),
            add: net.layers[add].name.clone(),
            add_mib: (costs[add].output_elems * BYTES_PER_ELEMENT) as f64 / MIB,
            predicted_ms,
            measured_ms: (conv_ms + add_ms) * to_nominal,
        });
    }
    points
}

fn print_table(c: &Calibration, path: &Path) {
    let k = c.correction;
    let pct = |predicted: f64, measured: f64| 100.0 * (predicted - measured) / measured;
    let width = c.networks.iter().map(|n| n.network.len()).max().unwrap_or(7).max(7);
    println!(
        "{:<width$}  {:>6}  {:>11}  {:>8}  {:>8}  {:>12}  {:>8}  {:>8}",
        "network", "layers", "measured_ms", "raw_%", "calib_%", "measured_MiB", "raw_%", "calib_%"
    );
    let (mut raw, mut calibrated) = (Vec::new(), Vec::new());
    for n in &c.networks {
        let latency = k.network_latency_ms(n);
        let memory = k.peak_memory_mib(n.predicted_peak_memory_mib, n.executing_layers, n.weighted_layers);
        let errors = [
            pct(n.predicted_latency_ms, n.measured_latency_ms),
            pct(latency, n.measured_latency_ms),
            pct(n.predicted_peak_memory_mib, n.measured_peak_memory_mib),
            pct(memory, n.measured_peak_memory_mib),
        ];
        raw.push((errors[0].abs(), errors[2].abs()));
        calibrated.push((errors[1].abs(), errors[3].abs()));
        println!(
            "{:<width$}  {:>6}  {:>11.3}  {:>+8.1}  {:>+8.1}  {:>12.2}  {:>+8.1}  {:>+8.1}",
            n.network,
            n.executing_layers,
            n.measured_latency_ms,
            errors[0],
            errors[1],
            n.measured_peak_memory_mib,
            errors[2],
            errors[3]
        );
    }
    let median = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "median |error| on these networks (in-sample): latency {:.1}% raw, {:.1}% calibrated; memory {:.1}% raw, {:.1}% calibrated",
        median(raw.iter().map(|e| e.0).collect()),
        median(calibrated.iter().map(|e| e.0).collect()),
        median(raw.iter().map(|e| e.1).collect()),
        median(calibrated.iter().map(|e| e.1).collect())
    );
    let dense: Vec<(&DenseLayerPoint, f64)> =
        c.networks.iter().flat_map(|n| n.dense_layers.iter().map(|d| (d, n.weight_mib))).collect();
    if !c.memory_only && !dense.is_empty() {
        let error = |d: &DenseLayerPoint, extra: f64| pct(d.predicted_ms + extra, d.measured_ms).abs();
        let term = |d: &DenseLayerPoint, network_mib: f64| k.dense_weight_ms_for_mib(d.weight_mib, network_mib);
        println!(
            "dense layers: {} measured; median |error| {:.1}% raw, {:.1}% with the dense term",
            dense.len(),
            median(dense.iter().map(|&(d, _)| error(d, 0.0)).collect()),
            median(dense.iter().map(|&(d, network_mib)| error(d, term(d, network_mib))).collect())
        );
    }
    let residual: Vec<&ResidualAddPoint> = c.networks.iter().flat_map(|n| &n.residual_adds).collect();
    if !c.memory_only && !residual.is_empty() {
        let error = |r: &ResidualAddPoint, extra: f64| pct(r.predicted_ms + extra, r.measured_ms).abs();
        println!(
            "convolutions computing a residual add: {} measured; median |error| {:.1}% raw, {:.1}% with the \
             residual-add term",
            residual.len(),
            median(residual.iter().map(|r| error(r, 0.0)).collect()),
            median(residual.iter().map(|r| error(r, k.residual_add_ms_per_mib * r.add_mib)).collect())
        );
    }
    println!(
        "correction: dense layers {:+.4} ms per MiB of weights above {:.2} MiB, up to {:.1} MiB{}; convolutions \
         computing a residual add {:+.4} ms per MiB of its output; layer latency x {:.4} {:+.4} ms; peak memory \
         {:+.3} MiB {:+.4} MiB per executing layer {:+.4} MiB per weighted one",
        k.dense_weight_ms_per_mib,
        k.dense_weight_floor_mib,
        k.dense_weight_limit_mib,
        k.dense_gate_clause(),
        k.residual_add_ms_per_mib,
        k.latency_scale,
        k.latency_per_layer_ms,
        k.memory_fixed_mib,
        k.memory_per_layer_mib,
        k.memory_per_weighted_layer_mib
    );
    let loo: Vec<String> = c.memory_leave_one_out_pct.iter().map(|(terms, pct)| format!("{terms} {pct:.2}%")).collect();
    if !loo.is_empty() {
        println!(
            "peak-memory terms: {} (median |error| with each fitted on the other networks: {})",
            c.memory_terms,
            loo.join(", ")
        );
    }
    match &c.engine_structure {
        Some(s) => {
            let kinds: Vec<String> =
                s.bytes_per_layer.iter().map(|(kind, bytes)| format!("{kind} {:.1}", bytes / 1024.0)).collect();
            println!("engine structure per layer, KiB ({}): {}", s.engine, kinds.join(", "));
        }
        None => println!("engine structure: not measured (the estimates count weights and plan tables only)"),
    }
    println!("written to {} (validate on networks not listed here, e.g. zoo/holdout/)", path.display());
}
