//! `perfmodel bench`: run a whole network with a device's engine (tract by default) on this machine and time it
//! per layer.

use anyhow::Context;
use perfmodel::collect::profile::DeviceProfile;
use perfmodel::engine::profile_networks;
use perfmodel::Dirs;
use perfmodel::Network;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Network to run (net.json or .onnx)
    net: PathBuf,
    /// Timed rounds (the median is reported)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Untimed warm-up runs before the first round
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Override the network's batch size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch: Option<u64>,
    /// Device profile whose engine and settings (executor, threads, graph optimisation) to use
    /// (collectors/NAME.toml); bench always measures this machine, whichever machine the profile was made for.
    /// Default: tract on one thread
    #[arg(long)]
    device: Option<String>,
    /// Output format: a table, or JSON with keys network, total {latency_ms, peak_memory_mib}, layers
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the heap around every engine node of the first run to this CSV (node, op, layer, before_mib,
    /// peak_mib, after_mib, and the engine's id of the node and of the nodes it reads): which node holds the
    /// network's peak memory
    #[arg(long, value_name = "FILE.csv")]
    memory_trace: Option<PathBuf>,
    /// Also write the ONNX model the engine runs (the network as perfmodel exports it, random weights) to this
    /// file: to run it with another tool, or with ONNX Runtime's own logging and profiling
    #[arg(long, value_name = "FILE.onnx")]
    export_onnx: Option<PathBuf>,
}

use super::TableOrJson as Format;

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let net = Network::load_with_batch(&args.net, args.batch.map(|b| b as usize))?;
    if let Some(path) = &args.export_onnx {
        use prost::Message;
        let bytes = perfmodel::onnx::export_network(&net)?.model.encode_to_vec();
        perfmodel::fsio::write_atomic(path, &bytes)
            .with_context(|| format!("writing the ONNX model to {}", path.display()))?;
    }
    let collectors = &dirs.collectors;
    let executor = match &args.device {
        Some(device) => perfmodel::engine::executor_for(&DeviceProfile::load(collectors, device)?)?,
        None => Box::new(perfmodel::engine::TractExecutor::new(1)?),
    };
    let rounds = args.rounds as usize;
    let profile = profile_networks(std::slice::from_ref(&net), executor.as_ref(), rounds, args.warmup, rounds)
        .with_context(|| format!("benchmarking {}", args.net.display()))?
        .remove(0);
    if let Some(path) = &args.memory_trace {
        let mut w = csv::Writer::from_writer(Vec::new());
        for node in &profile.node_memory {
            w.serialize(node)?;
        }
        let bytes = w.into_inner().context("writing the memory trace")?;
        perfmodel::fsio::write_atomic(path, &bytes)
            .with_context(|| format!("writing the memory trace to {}", path.display()))?;
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&profile)?),
        Format::Table => {
            println!(
                "{} on {} ({} thread{}), batch {}, median of {} rounds after {} warm-up",
                profile.network,
                profile.engine,
                profile.threads,
                if profile.threads == 1 { "" } else { "s" },
                profile.batch_size,
                profile.rounds,
                profile.warmup
            );
            let width = profile.layers.iter().map(|l| l.name.len()).max().unwrap_or(5).max(14);
            println!("{:<width$}  {:>12}  {:>7}  {:>13}", "layer", "latency_ms", "share", "peak_heap_MiB");
            let share = |ms: f64| 100.0 * ms / profile.total.latency_ms;
            for l in &profile.layers {
                let peak = l.peak_memory_mib.map_or("-".to_string(), |m| format!("{m:.3}"));
                println!("{:<width$}  {:>12.4}  {:>6.1}%  {:>13}", l.name, l.latency_ms, share(l.latency_ms), peak);
            }
            println!(
                "{:<width$}  {:>12.4}  {:>6.1}%",
                "(unattributed)",
                profile.unattributed_ms,
                share(profile.unattributed_ms)
            );
            println!(
                "total: {:.3} ms (min {:.3}, max {:.3})",
                profile.total.latency_ms, profile.total.latency_min_ms, profile.total.latency_max_ms
            );
            println!(
                "peak memory: {:.2} MiB ({}); planned {:.2} MiB",
                profile.total.peak_memory_mib, profile.total.memory_source, profile.total.planned_memory_mib
            );
            if let Some(resident) = profile.total.resident_memory_mib {
                println!("held by the built model before running (weights as packed, plan, input): {resident:.2} MiB");
            }
        }
    }
    Ok(())
}
