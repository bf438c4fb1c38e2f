//! `perfmodel calibrate`: fit a device's whole-network correction from real runs of the zoo's training
//! architectures (see `perfmodel::estimate::calibration` for why and what is fitted).

use perfmodel::estimate::calibration::{calibrate, refit, zoo_networks, CalibrateOptions};
use perfmodel::estimate::calibration::{
    Calibration, DenseLayerPoint, InputConvPoint, LayoutPoint, NetworkSize, ResidualAddPoint,
};
use perfmodel::estimate::DEFAULT_DEVICE;
use perfmodel::Dirs;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Networks to run (net.json or .onnx) [default: every architecture in the zoo directory and its
    /// calibration/ subdirectory, never the holdout]
    nets: Vec<PathBuf>,
    /// Device whose learned estimates are calibrated; the networks run here with its profile's threads
    #[arg(long, default_value = DEFAULT_DEVICE)]
    device: String,
    /// Timed rounds per network (the median is used; with 10 or more, only the rounds near nominal speed count
    /// when at least 10 are, as in `validate`)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
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
    /// Run nothing: refit the device's calibration with its current models from the measurements it holds (each
    /// recorded network estimated anew), after a retrain of the same data; after new rows were collected,
    /// calibrate instead
    #[arg(long, conflicts_with_all = ["nets", "memory_only", "network_latency", "no_speed_probe"])]
    refit: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

use super::TableOrJson as Format;

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let log = &mut |line: String| eprintln!("{line}");
    let (calibration, path) = if args.refit {
        refit(&args.device, dirs, args.allow_other_machine, log)?
    } else {
        let nets = if args.nets.is_empty() { zoo_networks(&dirs.zoo)? } else { args.nets.clone() };
        let options = CalibrateOptions {
            rounds: usize::try_from(args.rounds).unwrap_or(usize::MAX),
            warmup: args.warmup,
            block: usize::try_from(args.block).unwrap_or(usize::MAX),
            speed_probe: !args.no_speed_probe,
            allow_other_machine: args.allow_other_machine,
            memory_only: args.memory_only,
            network_latency: args.network_latency,
        };
        calibrate(&args.device, &nets, dirs, options, log)?
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&calibration)?),
        Format::Table => print_table(&calibration, &path),
    }
    Ok(())
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
    let median = |v: Vec<f64>| perfmodel::stats::median(&v).unwrap_or(f64::NAN);
    println!(
        "median |error| on these networks (in-sample): latency {:.1}% raw, {:.1}% calibrated; memory {:.1}% raw, {:.1}% calibrated",
        median(raw.iter().map(|e| e.0).collect()),
        median(calibrated.iter().map(|e| e.0).collect()),
        median(raw.iter().map(|e| e.1).collect()),
        median(calibrated.iter().map(|e| e.1).collect())
    );
    let dense: Vec<(&DenseLayerPoint, NetworkSize)> =
        c.networks.iter().flat_map(|n| n.dense_layers.iter().map(|d| (d, n.size()))).collect();
    if !c.memory_only && !dense.is_empty() {
        let error = |d: &DenseLayerPoint, extra: f64| pct(d.predicted_ms + extra, d.measured_ms).abs();
        let term = |d: &DenseLayerPoint, network: NetworkSize| k.dense_weight_ms_for_mib(d.weight_mib, network);
        println!(
            "dense layers: {} measured; median |error| {:.1}% raw, {:.1}% with the dense term",
            dense.len(),
            median(dense.iter().map(|&(d, _)| error(d, 0.0)).collect()),
            median(dense.iter().map(|&(d, network)| error(d, term(d, network))).collect())
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
    let norm: Vec<&ResidualAddPoint> = c.networks.iter().flat_map(|n| &n.norm_adds).collect();
    if !c.memory_only && !norm.is_empty() {
        let error = |r: &ResidualAddPoint, extra: f64| pct(r.predicted_ms + extra, r.measured_ms).abs();
        println!(
            "layer norms computing an add: {} measured; median |error| {:.1}% raw, {:.1}% with the norm-add term \
             ({:+.4} ms per MiB of the add's output)",
            norm.len(),
            median(norm.iter().map(|r| error(r, 0.0)).collect()),
            median(norm.iter().map(|r| error(r, k.norm_add_ms_per_mib * r.add_mib)).collect()),
            k.norm_add_ms_per_mib
        );
    }
    let matmul: Vec<&DenseLayerPoint> = c.networks.iter().flat_map(|n| &n.matmul_layers).collect();
    if !c.memory_only && !matmul.is_empty() {
        let error = |m: &DenseLayerPoint, extra: f64| pct(m.predicted_ms + extra, m.measured_ms).abs();
        println!(
            "products with a constant weight: {} measured; median |error| {:.1}% raw, {:.1}% with the \
             matmul term",
            matmul.len(),
            median(matmul.iter().map(|m| error(m, 0.0)).collect()),
            median(matmul.iter().map(|m| error(m, k.matmul_extra_for(m.predicted_ms, m.weight_mib))).collect())
        );
    }
    let pixel: Vec<&DenseLayerPoint> = c.networks.iter().flat_map(|n| &n.pixel_convs).collect();
    if !c.memory_only && !pixel.is_empty() {
        let error = |m: &DenseLayerPoint, extra: f64| pct(m.predicted_ms + extra, m.measured_ms).abs();
        println!(
            "convolutions over one pixel: {} measured; median |error| {:.1}% raw, {:.1}% with the one-pixel term",
            pixel.len(),
            median(pixel.iter().map(|m| error(m, 0.0)).collect()),
            median(pixel.iter().map(|m| error(m, k.pixel_conv_extra_for(m.predicted_ms, m.weight_mib))).collect())
        );
    }
    let input: Vec<&InputConvPoint> = c.networks.iter().flat_map(|n| &n.input_convs).collect();
    if !c.memory_only && !input.is_empty() {
        let error = |m: &InputConvPoint, extra: f64| pct(m.predicted_ms + extra, m.measured_ms).abs();
        println!(
            "convolutions reading the network input: {} measured; median |error| {:.1}% raw, {:.1}% with the input \
             term",
            input.len(),
            median(input.iter().map(|m| error(m, 0.0)).collect()),
            median(input.iter().map(|m| error(m, k.input_conv_extra_for(m.predicted_ms, m.input_mib))).collect())
        );
    }
    let layout: Vec<&LayoutPoint> = c.networks.iter().flat_map(|n| &n.layout_layers).collect();
    if !c.memory_only && !layout.is_empty() {
        let error = |l: &LayoutPoint, scale: f64| pct(l.predicted_ms + (1.0 - scale) * l.saved_ms, l.measured_ms).abs();
        println!(
            "blocked layers credited with layout conversions: {} measured; median |error| {:.1}% with the whole \
             credit, {:.1}% with {:.2} of it",
            layout.len(),
            median(layout.iter().map(|l| error(l, 1.0)).collect()),
            median(layout.iter().map(|l| error(l, k.layout_credit_scale)).collect()),
            k.layout_credit_scale
        );
    }
    println!(
        "correction: dense layers {:+.4} ms per MiB of weights above {:.2} MiB, up to {:.1} MiB{}; convolutions \
         computing a residual add {:+.4} ms per MiB of its output; products with a constant weight {:+.1}% {:+.4} ms \
         per MiB of weights; convolutions over one pixel {:+.1}% {:+.4} ms per MiB of weights; convolutions reading \
         the network input {:+.1}% {:+.4} ms per MiB of input; layer latency x {:.4} {:+.4} ms; peak memory {:+.3} MiB {:+.4} MiB per executing layer \
         {:+.4} MiB per weighted one",
        k.dense_weight_ms_per_mib,
        k.dense_weight_floor_mib,
        k.dense_weight_limit_mib,
        k.dense_gate_clause(),
        k.residual_add_ms_per_mib,
        100.0 * k.matmul_extra_fraction,
        k.matmul_weight_ms_per_mib,
        100.0 * k.pixel_conv_extra_fraction,
        k.pixel_conv_weight_ms_per_mib,
        100.0 * k.input_conv_extra_fraction,
        k.input_conv_ms_per_input_mib,
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
    if let Some(measured) = &c.measured {
        println!("refitted with the device's current models from the networks' runs of {measured}");
    }
    println!("written to {} (validate on networks not listed here, e.g. zoo/holdout/)", path.display());
}
