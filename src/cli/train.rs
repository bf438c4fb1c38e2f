//! `perfmodel train`: fit per-(layer type, metric) predictors for a device and write the model store, report
//! and plots.

use indicatif::{ProgressBar, ProgressStyle};
use perfmodel::layer::LayerType;
use perfmodel::metric::Metric;
use perfmodel::train::cv::{SelectBy, METHODS};
use perfmodel::train::pipeline::{self, TrainOptions};
use perfmodel::train::report;
use perfmodel::Dirs;
use perfmodel::Error;

#[derive(clap::Args)]
pub struct Args {
    /// Device whose data to train on (DATA_DIR/DEVICE/*.csv)
    #[arg(long)]
    device: String,
    /// Only these layer types, comma-separated (default: all with data)
    #[arg(long, value_delimiter = ',')]
    layers: Vec<String>,
    /// Only these metrics, comma-separated: latency, power, memory (default: all)
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
    /// Cross-validation folds
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// Seed for folds, randomised methods and outlier detection
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Selection criterion: mape, mae or r2
    #[arg(long, default_value = "mape")]
    select_by: String,
    /// Fraction of rows the isolation forest removes before training (0 disables it)
    #[arg(long, default_value_t = 0.02)]
    contamination: f64,
    /// Only these method families, comma-separated: ert, xgb, tree, knn, linear (default: all)
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Threads for cross-validation (default: one per core); the results do not depend on it
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Also run the learning-curve study (15 growing training subsets against a fixed validation set)
    #[arg(long)]
    learning_curve: bool,
    /// Build on these devices' trained models (comma-separated, from the models directory): each triplet also
    /// tries learning this device's values relative to a source's prediction, and cross-validation on this
    /// device's rows chooses between transfer and training from scratch
    #[arg(long, value_delimiter = ',', value_name = "DEVICE")]
    transfer_from: Vec<String>,
    /// Hold out this fraction of each triplet's rows (seeded by --seed) from outlier removal, cross-validation
    /// and the refit, and report the trained model's error on them (report.md, holdout.csv). The store then
    /// holds models trained without those rows: an evaluation, not a device to ship
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    holdout: f64,
}

fn options(args: &Args) -> Result<TrainOptions, Error> {
    let layers = args
        .layers
        .iter()
        .map(|l| {
            LayerType::parse(l).ok_or_else(|| {
                Error::Invalid(format!("--layers: unknown layer type '{l}' (known: {})", LayerType::names_list()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metrics = if args.metrics.is_empty() {
        Metric::ALL.to_vec()
    } else {
        args.metrics
            .iter()
            .map(|m| {
                Metric::parse(m).ok_or_else(|| {
                    Error::Invalid(format!("--metrics: unknown metric '{m}' (known: latency, power, memory)"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    if let Some(unknown) = args.methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(Error::Invalid(format!("--methods: unknown method '{unknown}' (known: {})", METHODS.join(", "))));
    }
    let select_by = SelectBy::parse(&args.select_by)
        .ok_or_else(|| Error::Invalid(format!("--select-by: expected mape, mae or r2, got '{}'", args.select_by)))?;
    if args.folds < 2 {
        return Err(Error::Invalid(format!("--folds: need at least 2, got {}", args.folds)));
    }
    if !(0.0..0.5).contains(&args.contamination) {
        return Err(Error::Invalid(format!(
            "--contamination: expected a fraction in [0, 0.5), got {}",
            args.contamination
        )));
    }
    if !(0.0..0.5).contains(&args.holdout) {
        return Err(Error::Invalid(format!("--holdout: expected a fraction in [0, 0.5), got {}", args.holdout)));
    }
    Ok(TrainOptions {
        holdout: args.holdout,
        layers,
        metrics,
        folds: args.folds,
        seed: args.seed,
        select_by,
        contamination: args.contamination,
        learning_curve: args.learning_curve,
        methods: args.methods.clone(),
        jobs: args.jobs,
        host_engine: perfmodel::train::pipeline::HostEngine::Off,
        transfer_from: Vec::new(),
        reorder_ms_per_mib: None,
        nchwc_block: None,
    })
}

use perfmodel::engine::{GraphOptimization, OrtExecutor};

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    // Training measures no memory, and its threads allocate at a rate at which counting every block costs time.
    perfmodel::collect::alloc::stop_counting();
    let mut options = options(&args)?;
    // Data measured with tract on this very machine: memory models can count weights as tract packs them here,
    // and latency models can see tract's decisions. Only on one thread: the engine features mirror tract's
    // single-thread tile walk (with more threads it splits the product into chunks that share the caches).
    use perfmodel::train::pipeline::HostEngine;
    // The engine is asked here, so only for a device whose profile records no other machine than this one.
    let collectors = &dirs.collectors;
    let host = perfmodel::device::Fingerprint::of_host();
    let profile = perfmodel::collect::profile::DeviceProfile::load(collectors, &args.device);
    // ONNX Runtime's layout conversions, timed here for a device measured here with its blocked layout.
    if let Ok(p) = &profile {
        if p.executor == "onnxruntime" {
            options.nchwc_block = p.fingerprint.as_ref().map(perfmodel::engine::rules::OnnxRuntime::nchwc_block_of);
        }
        let level = p.graph_optimization.unwrap_or_default();
        if p.host && p.executor == "onnxruntime" && p.check_host(host).is_ok() && level == GraphOptimization::All {
            let rate = OrtExecutor::new(p.threads, level)?.reorder_ms_per_mib()?;
            eprintln!("ONNX Runtime's layout conversions cost {rate:.4} ms per MiB here (subtracted where a network needs none)");
            options.reorder_ms_per_mib = Some(rate);
        }
    }
    let recorded =
        perfmodel::train::ModelStore::open(&dirs.models, &args.device).ok().and_then(|s| s.engine_answers_here());
    options.host_engine = match profile {
        // ONNX Runtime's layout follows from a layer's shape and the block of the machine the profile records.
        Ok(p) if p.executor == "onnxruntime" => {
            let all = p.graph_optimization.unwrap_or_default() == GraphOptimization::All;
            let block =
                options.nchwc_block.unwrap_or_else(|| perfmodel::engine::rules::OnnxRuntime::nchwc_block_of(host));
            let nchwc_block = if all { block } else { 0 };
            eprintln!(
                "conv2d and depthwise latency are also tried with ONNX Runtime's layout (NCHWc block {nchwc_block}) and group \
                 sizes as features"
            );
            HostEngine::OnnxRuntime { nchwc_block }
        }
        // Another machine whose tract answers as this one's: the device's current models record the kernels (and,
        // with tract's tiles, the caches) tract was asked about where they were trained, and they are this host's.
        // The engine features then describe the device's machine although they are computed here (a retrain in a
        // newer store format does not need the device's host); tiles only when the caches are known to match.
        Ok(p) if p.check_host(host).is_err() && p.host && p.executor == "tract" && recorded.is_some() => {
            use perfmodel::train::store::RecordedEngine;
            eprintln!(
                "device '{}' was measured on another machine, whose models record the same tract answers as this \
                 one gives ({}, {}): its engine features are computed here as they were there",
                args.device,
                perfmodel::engine::packing::host_isa(),
                perfmodel::engine::packing::host_caches()
            );
            match recorded {
                Some(RecordedEngine::LayoutsAndTiles) if p.threads == 1 => HostEngine::LayoutsAndTiles,
                _ => HostEngine::Layouts,
            }
        }
        Ok(p) if p.check_host(host).is_err() => {
            eprintln!(
                "device '{}' was measured on another machine: its models are trained without this machine's \
                 engine features",
                args.device
            );
            HostEngine::Off
        }
        Ok(p) if p.host && p.executor == "tract" && p.threads == 1 => HostEngine::LayoutsAndTiles,
        Ok(p) if p.host && p.executor == "tract" => HostEngine::Layouts,
        _ => HostEngine::Off,
    };
    if options.host_engine == HostEngine::Layouts {
        eprintln!(
            "memory models count dense/conv2d weights and convolution scratch as tract lays them out on this \
             machine (profile '{}' has host = true)",
            args.device
        );
    }
    if options.host_engine == HostEngine::LayoutsAndTiles {
        eprintln!(
            "memory models count dense/conv2d weights and convolution scratch as tract lays them out on this \
             machine, and conv2d/dense latency is also tried with tract's lowering, tile walk and kernel tile as features (profile \
             '{}' has host = true)",
            args.device
        );
    }
    let (data_dir, models_dir) = (&dirs.data, &dirs.models);
    for source in &args.transfer_from {
        if source == &args.device {
            anyhow::bail!(Error::Invalid(format!(
                "--transfer-from: '{source}' is the device being trained (its models are about to be replaced)"
            )));
        }
        let store = perfmodel::train::ModelStore::open(models_dir, source)?;
        options.transfer_from.push(std::sync::Arc::new(store));
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut progress = |done: usize, total: usize, what: &str| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        if !what.is_empty() {
            bar.set_message(what.to_string());
        }
    };
    let run = pipeline::train_device(data_dir, models_dir, &args.device, &options, &mut progress)?;
    bar.finish_and_clear();
    let bench = report::bench_store(models_dir, &args.device, &run.results)?;
    let options_line = format!(
        "{} folds, seed {}, selected by {}, contamination {}",
        options.folds, options.seed, args.select_by, options.contamination
    );
    report::write_report(models_dir, &run, &bench, &options_line)?;

    println!(
        "{:<18} {:<8} {:<30} {:>10} {:>8} {:>8} {:>8} {:>8}",
        "layer", "metric", "method", "CV MAPE %", "R²", "samples", "removed", "train s"
    );
    for r in &run.results {
        let s = r.cv();
        println!(
            "{:<18} {:<8} {:<30} {:>10.2} {:>8.4} {:>8} {:>8} {:>8.1}",
            r.layer_type.as_str(),
            r.metric.as_str(),
            r.chosen().label,
            s.mape,
            s.r2,
            r.samples,
            r.removed.len(),
            r.train_seconds
        );
    }
    if options.holdout > 0.0 {
        println!("held-out rows (never trained on; every row in holdout.csv):");
        for r in &run.results {
            if r.holdout.is_none() {
                println!(
                    "  {:<18} {:<8} none held out: {} rows leave too few to train on",
                    r.layer_type.as_str(),
                    r.metric.as_str(),
                    r.samples + r.removed.len()
                );
            }
            if let Some(h) = &r.holdout {
                println!(
                    "  {:<18} {:<8} {:>4} rows  MAPE {:>7.2} %  median APE {:>7.2} %",
                    r.layer_type.as_str(),
                    r.metric.as_str(),
                    h.keys.len(),
                    h.scores().mape,
                    h.median_ape()
                );
            }
        }
    }
    for s in &run.skipped {
        println!("{:<18} {:<8} not trained: {}", s.layer_type.as_str(), s.metric.as_str(), s.reason);
    }
    if let Some((kept, rows)) = run.kept_nominal_ms {
        println!(
            "latency models at the stored models' nominal speed, a probe of {kept:.4} ms (the rows' median is now \
             {rows:.4} ms; retrain without --layers to take it)"
        );
    }
    let verdicts: Vec<_> = run.results.iter().filter_map(|r| Some((r, r.transfer_verdict()?))).collect();
    if !verdicts.is_empty() {
        println!("transfer from {} against training from scratch (CV MAPE %):", args.transfer_from.join(", "));
        for (r, verdict) in verdicts {
            println!("  {:<18} {:<8} {verdict}", r.layer_type.as_str(), r.metric.as_str());
        }
    }
    let slowest_wall = bench.predict_ns.iter().map(|p| p.wall_ns).fold(0.0, f64::max);
    let slowest_cpu = bench.predict_ns.iter().map(|p| p.cpu_ns).fold(0.0, f64::max);
    println!(
        "store {}: {} models, {:.2} MB, opened in {:.1} ms; single-layer prediction ≤ {:.2} µs wall, ≤ {:.2} µs CPU \
         (slowest predictor)",
        models_dir.join(&args.device).display(),
        bench.files,
        bench.size_bytes as f64 / 1e6,
        bench.open_ms,
        slowest_wall / 1e3,
        slowest_cpu / 1e3
    );
    println!("report: {}", models_dir.join(&args.device).join("report.md").display());
    Ok(())
}
