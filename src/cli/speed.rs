//! `perfmodel speed`: how fast this machine runs right now, by the collector's speed probe.
//!
//! On a shared machine a latency means little without the speed it was taken at. This times the probe
//! (`collect::speed`) for a while and compares it with the nominal probe time of the device's collected data, so
//! a user can tell a slow spell from a slow model before measuring anything.

use perfmodel::collect::speed::{nominal_ms, SpeedProbe};
use perfmodel::collect::DeviceProfile;
use perfmodel::Dirs;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Device whose engine settings (threads) and collected data to use
    #[arg(long, default_value = perfmodel::estimate::DEFAULT_DEVICE)]
    device: String,
    /// How long to keep timing the probe, in seconds (up to a day)
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Pause between readings, in ms
    #[arg(long, default_value_t = 250)]
    interval_ms: u64,
    /// Print every reading, not only the summary
    #[arg(long)]
    each: bool,
}

/// A duration in seconds, above 0 and at most a day: a usage error (exit code 2) otherwise, like every other
/// malformed argument.
fn parse_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| format!("expected a number of seconds, got '{text}'"))?;
    if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 {
        Ok(seconds)
    } else {
        Err(format!("expected a duration above 0 and at most 86400 s, got {text}"))
    }
}

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let profile = DeviceProfile::load(&dirs.collectors, &args.device)?;
    let executor = perfmodel::engine::executor_for(&profile)?;
    let mut probe = SpeedProbe::new(executor.as_ref(), profile.protocol.burn_in_runs)?;
    let started = Instant::now();
    let mut readings = Vec::new();
    while readings.is_empty() || started.elapsed().as_secs_f64() < args.seconds {
        let ms = probe.measure()?;
        if args.each {
            println!("{:>8.3} s  {ms:.4} ms", started.elapsed().as_secs_f64());
        }
        readings.push(ms);
        std::thread::sleep(Duration::from_millis(args.interval_ms));
    }
    readings.sort_by(f64::total_cmp);
    let q = |p: f64| perfmodel::stats::quantile_sorted(&readings, p);
    println!(
        "speed probe on '{}': {} readings, median {:.3} ms (10th-90th percentile {:.3}-{:.3} ms)",
        profile.name,
        readings.len(),
        q(0.5),
        q(0.1),
        q(0.9)
    );
    let (models, data) = (&dirs.models, &dirs.data);
    let from_models = perfmodel::train::store::ModelStore::open(models, &profile.name)
        .ok()
        .and_then(|store| store.manifest().nominal_probe_ms().ok())
        .map(|n| (n, format!("the training data of the models in {}", models.join(&profile.name).display())));
    let nominal = from_models.or_else(|| {
        let by_type = perfmodel::data::read_device(data, &profile.name).ok()?;
        let n = nominal_ms(by_type.values().flatten().filter_map(|s| s.speed_ref_ms))?;
        Some((n, format!("the data in {}", data.join(&profile.name).display())))
    });
    match nominal {
        Some((n, source)) => println!(
            "nominal: {n:.3} ms (the median reading over {source}); the machine runs at {:.2}x the nominal time now",
            q(0.5) / n
        ),
        None => println!(
            "no nominal speed: neither the models in {} nor the data in {} have speed-probe readings",
            models.join(&profile.name).display(),
            data.join(&profile.name).display()
        ),
    }
    Ok(())
}
