//! `perfmodel collect`: measure sampled layer configs on a device (or re-measure stored ones).

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use perfmodel::collect::profile::HostMatch;
use perfmodel::collect::{self, CollectOptions, DeviceProfile, Observer, Shard};
use perfmodel::data::{Sample, Status};
use perfmodel::layer::LayerType;
use perfmodel::sample::ConfigSet;
use perfmodel::Dirs;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Device profile (collectors/NAME.toml)
    #[arg(long)]
    device: String,
    /// Sampled configs (from `perfmodel zoo sample`); default: ZOO_DIR/configs.json
    #[arg(long)]
    configs: Option<PathBuf>,
    /// Only these layer types, comma-separated (e.g. conv2d,dense)
    #[arg(long, value_delimiter = ',')]
    layers: Vec<String>,
    /// Stop after measuring this many samples
    #[arg(long)]
    max_samples: Option<usize>,
    /// Stop starting new measurements after this long (e.g. 90s, 30m, 1h30m); 5m with --quick
    #[arg(long, value_parser = parse_duration)]
    time_budget: Option<Duration>,
    /// Measure the most informative configs first (a cover of each layer type's configurations, types in
    /// proportion to their share of the zoo's time, batch size 1 first) and stop after --time-budget (default
    /// 5m). Rerunning without --quick continues to the full set; no row is measured twice
    #[arg(long)]
    quick: bool,
    /// Measure only slice i of n (0-based), e.g. 0/4; default from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT
    #[arg(long)]
    shard: Option<String>,
    /// Instead of collecting: re-measure N random stored samples in this process and report the relative
    /// differences (repeatability); written to DATA_DIR/DEVICE/repeatability.json
    #[arg(long, value_name = "N")]
    remeasure: Option<usize>,
    /// Seed choosing the samples to re-measure
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// A quick collection's time budget unless --time-budget says otherwise.
const QUICK_BUDGET_S: u64 = 300;
/// Roofline used to weigh layer types when a profile has none (a typical x86 server core).
const DEFAULT_PEAK_GFLOPS: f64 = 100.0;
const DEFAULT_BANDWIDTH_GBS: f64 = 20.0;

/// `90` (seconds), or a duration as humantime reads it: `90s`, `30m`, `1h30m`, `2h`, `1h 30min`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = |why: String| format!("expected a duration like 90s, 30m or 1h30m, got '{text}' ({why})");
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return text.parse::<u64>().map(Duration::from_secs).map_err(|e| bad(e.to_string()));
    }
    humantime::parse_duration(text).map_err(|e| bad(e.to_string()))
}

/// Progress bar on a terminal; a status line every 30 s in a log file.
struct Progress {
    bar: ProgressBar,
    log: bool,
    started: Instant,
    last_line: Instant,
    counts: [usize; 3],
}

impl Progress {
    fn new() -> Progress {
        let log = !std::io::stderr().is_terminal();
        let bar = if log { ProgressBar::hidden() } else { ProgressBar::new(0) };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
                .expect("static template is valid")
                .progress_chars("=> "),
        );
        Progress { bar, log, started: Instant::now(), last_line: Instant::now(), counts: [0; 3] }
    }
}

impl Observer for Progress {
    fn note(&mut self, message: &str) {
        self.bar.suspend(|| eprintln!("{message}"));
    }
    fn planned(&mut self, samples: usize) {
        self.bar.set_length(samples as u64);
        if self.log {
            eprintln!("{samples} samples to measure");
        }
    }
    fn recorded(&mut self, s: &Sample) {
        self.counts[match s.status {
            Status::Ok => 0,
            Status::Unstable => 1,
            Status::Failed => 2,
        }] += 1;
        let what = match s.latency_ms {
            Some(ms) => format!("{} b{} {ms:.3} ms", s.layer_type, s.batch),
            None => format!("{} b{} failed", s.layer_type, s.batch),
        };
        self.bar.set_message(what.clone());
        self.bar.inc(1);
        if self.log && self.last_line.elapsed() >= Duration::from_secs(30) {
            self.last_line = Instant::now();
            let eta = self.bar.eta().as_secs();
            eprintln!(
                "[{:>5} s] {}/{} (ok {}, unstable {}, failed {}), eta {} s, last: {what}",
                self.started.elapsed().as_secs(),
                self.bar.position(),
                self.bar.length().unwrap_or(0),
                self.counts[0],
                self.counts[1],
                self.counts[2],
                eta
            );
        }
    }
}

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let (collectors_dir, data_dir) = (&dirs.collectors, dirs.data.clone());
    let mut profile = DeviceProfile::load(collectors_dir, &args.device)?;
    let host = perfmodel::device::Fingerprint::of_host();
    // Refused before anything is built or written; an older profile gets this machine recorded below.
    let host_match = profile.check_host(host)?;
    let executor = perfmodel::engine::executor_for(&profile)?;
    let executor = executor.as_ref();
    let mut progress = Progress::new();

    if let Some(n) = args.remeasure {
        let report = collect::remeasure(&profile, executor, &data_dir, n, args.seed, &mut progress)?;
        progress.bar.finish_and_clear();
        let path = data_dir.join(&profile.name).join("repeatability.json");
        perfmodel::fsio::write_atomic(&path, serde_json::to_string_pretty(&report)?.as_bytes())?;
        println!(
            "re-measured {} samples of '{}' in a fresh process: relative latency difference median {:.1}%, \
             90th percentile {:.1}%; median new/stored ratio {:.2} (details: {})",
            report.samples.len(),
            profile.name,
            100.0 * report.median_relative_difference,
            100.0 * report.p90_relative_difference,
            report.median_ratio,
            path.display()
        );
        if let (Some(diff), Some(ratio)) =
            (report.median_relative_difference_at_probe_speed, report.median_ratio_at_probe_speed)
        {
            println!(
                "with each latency divided by its speed-probe reading ({} samples): median relative difference \
                 {:.1}%, median new/stored ratio {ratio:.2}",
                report.probed_samples,
                100.0 * diff
            );
        }
        return Ok(());
    }

    let configs_path = args.configs.clone().unwrap_or_else(|| dirs.configs());
    let set = ConfigSet::load(&configs_path).context("loading configs (create them with `perfmodel zoo sample`)")?;
    if set.batch_sizes != profile.batch_sizes {
        progress.note(&format!(
            "{} lists batch sizes {:?}; device '{}' measures its profile's batch sizes {:?}",
            configs_path.display(),
            set.batch_sizes,
            profile.name,
            profile.batch_sizes
        ));
    }
    let layers = if args.layers.is_empty() {
        None
    } else {
        let parsed: Result<Vec<LayerType>, _> = args
            .layers
            .iter()
            .map(|l| {
                LayerType::parse(l.trim()).ok_or_else(|| {
                    anyhow::anyhow!("--layers: unknown layer type '{l}' (known: {})", LayerType::names_list())
                })
            })
            .collect();
        Some(parsed?)
    };
    let shard = match &args.shard {
        Some(s) => Some(Shard::parse(s)?),
        None => Shard::from_slurm(|k| std::env::var(k).ok())?,
    };
    if host_match != HostMatch::Recorded && profile.record_host(host)? {
        progress.note(&format!(
            "device '{}': recorded this machine in {} ({}); the device is refused on any other",
            profile.name,
            profile.path.display(),
            host.summary()
        ));
    }
    let time_budget = match (args.time_budget, args.quick) {
        (None, true) => Some(Duration::from_secs(QUICK_BUDGET_S)),
        (budget, _) => budget,
    };
    let options =
        CollectOptions { data_dir, layers, max_samples: args.max_samples, time_budget, shard, quick: args.quick };
    let configs: Vec<_> = if args.quick {
        let q = collect::quick::quick_order(
            &set.configs,
            profile.peak_gflops.unwrap_or(DEFAULT_PEAK_GFLOPS),
            profile.memory_bandwidth_gbs.unwrap_or(DEFAULT_BANDWIDTH_GBS),
        );
        let shares: Vec<String> = q.shares.iter().map(|(t, s)| format!("{t} {:.0}%", 100.0 * s)).collect();
        progress.note(&format!(
            "quick collection: configs of each type in coverage order, types by share: {}",
            shares.join(", ")
        ));
        q.order.iter().map(|&i| set.configs[i].config.clone()).collect()
    } else {
        set.configs.into_iter().map(|c| c.config).collect()
    };
    let summary = collect::collect(&profile, executor, &configs, &options, &mut progress)?;
    progress.bar.finish_and_clear();

    println!(
        "device '{}' ({}), {} thread(s), {:.0} s, data in {}",
        profile.name,
        executor_description(executor),
        profile.threads,
        summary.elapsed.as_secs_f64(),
        summary.device_dir.display()
    );
    println!(
        "{:<18} {:>6} {:>9} {:>7} {:>10} {:>16}",
        "layer type", "ok", "unstable", "failed", "rows", "median ms (run)"
    );
    for t in &summary.types {
        let median = t.median_latency_ms.map(|m| format!("{m:.4}")).unwrap_or_else(|| "-".into());
        println!(
            "{:<18} {:>6} {:>9} {:>7} {:>10} {:>16}",
            t.layer_type.as_str(),
            t.ok,
            t.unstable,
            t.failed,
            t.rows,
            median
        );
    }
    match &summary.stopped_by {
        Some(why) => println!("stopped: {why}; {} samples remain (rerun to continue)", summary.remaining),
        None => println!("complete: every config is measured"),
    }
    Ok(())
}

fn executor_description(executor: &dyn perfmodel::engine::Executor) -> String {
    executor.describe()
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("soon").is_err() && parse_duration("").is_err());
    }
}
