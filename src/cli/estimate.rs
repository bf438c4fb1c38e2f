//! `perfmodel estimate`: latency, energy and memory of a network on a device, per layer and in total.

use super::default_dir;
use perfmodel::estimate::{report, Dirs, Estimator, Method, DEFAULT_DEVICE};
use perfmodel::Network;
use std::path::PathBuf;

/// The device, method and directories an estimator is built from (shared with `outliers` and `validate`).
#[derive(clap::Args)]
pub struct EstimatorArgs {
    /// Device to estimate for (a trained model set under the models directory)
    #[arg(long, default_value = DEFAULT_DEVICE)]
    pub device: String,
    /// How single layers are predicted: trained models, or a baseline
    #[arg(long, default_value = "learned", value_parser = clap::builder::PossibleValuesParser::new(Method::NAMES))]
    pub method: String,
    /// Trained models [default: ./models, else the shipped models]
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Collected measurements, for --method template [default: ./data, else the shipped data]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Device profiles, for --method paleo and memory bandwidth [default: ./collectors, else the shipped ones]
    #[arg(long)]
    pub collectors_dir: Option<PathBuf>,
    /// Ignore the device's whole-network calibration (MODELS_DIR/DEVICE/calibration.json): raw sums of the layer
    /// predictions
    #[arg(long)]
    pub uncalibrated: bool,
}

impl EstimatorArgs {
    pub fn collectors_dir(&self) -> PathBuf {
        self.collectors_dir.clone().unwrap_or_else(|| default_dir("collectors"))
    }

    /// When the estimator's models come from another machine: the shipped devices whose models were trained on
    /// this one, as a note (it opens every store, so the CLI asks, not the library's `Estimator::open`).
    pub fn trained_here_note(&self, estimator: &Estimator) -> Option<String> {
        estimator.trained_elsewhere()?;
        let models = self.models_dir.clone().unwrap_or_else(|| default_dir("models"));
        let here: Vec<String> = perfmodel::train::store::devices_trained_here(&models)
            .into_iter()
            .map(|d| format!("'{d}' (--device {d})"))
            .collect();
        Some(match here.is_empty() {
            true => "no device under the models directory was trained on this machine: 'perfmodel collect --device \
                     NAME' and 'perfmodel train --device NAME' make one"
                .to_string(),
            false => format!("models trained on this machine: {}", here.join(", ")),
        })
    }

    pub fn open(&self) -> anyhow::Result<Estimator> {
        let models = self.models_dir.clone().unwrap_or_else(|| default_dir("models"));
        let data = self.data_dir.clone().unwrap_or_else(|| default_dir("data"));
        let collectors = self.collectors_dir();
        let dirs = Dirs { models: &models, data: &data, collectors: &collectors };
        let estimator = Estimator::open_method(&self.method, &self.device, &dirs)?;
        Ok(if self.uncalibrated { estimator.without_calibration() } else { estimator })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(clap::Args)]
pub struct Args {
    /// Network to estimate (net.json or .onnx)
    net: PathBuf,
    #[command(flatten)]
    estimator: EstimatorArgs,
    /// Override the network's batch size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch: Option<u64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also draw per-layer latency (and energy) bars to this .svg or .png file
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Scale the latency of the layer types that follow the machine's speed (conv2d, depthwise, dense, pooling)
    /// to how fast this machine runs right now: times the speed probe for about half a second against the
    /// models' nominal time. Learned models of a device measured on this machine (`host = true`) only
    #[arg(long)]
    at_current_speed: bool,
}

/// Readings of the speed probe behind `--at-current-speed`, and the pause between them.
const CURRENT_SPEED_READINGS: usize = 9;
const CURRENT_SPEED_PAUSE_MS: u64 = 50;

/// How fast this machine runs now relative to the nominal speed of the estimator's models: (probe ms now,
/// nominal ms).
fn current_speed(args: &Args, estimator: &Estimator) -> anyhow::Result<(f64, f64)> {
    use perfmodel::collect::speed::{median_reading, SpeedProbe};
    let invalid = |why: String| perfmodel::Error::Invalid(format!("--at-current-speed: {why}"));
    let Method::Learned(store) = estimator.method() else {
        anyhow::bail!(invalid(format!("needs --method learned, not {}", estimator.method().name())));
    };
    let device = perfmodel::collect::DeviceProfile::load(&args.estimator.collectors_dir(), estimator.device())?;
    if !device.host {
        anyhow::bail!(invalid(format!(
            "device '{}' was not measured on this machine (its profile has no `host = true`), so this machine's \
             speed says nothing about it",
            device.name
        )));
    }
    if let Some(machine) = estimator.trained_elsewhere() {
        anyhow::bail!(invalid(format!(
            "the models of device '{}' were trained on another machine ({machine}): their nominal speed is the \
             probe's time there, not a speed of this machine",
            device.name
        )));
    }
    let nominal = store
        .manifest()
        .nominal_probe_ms()
        .map_err(|why| invalid(format!("the models of device '{}' {why}", device.name)))?;
    let executor = perfmodel::engine::TractExecutor::new(device.threads)?;
    let mut probe = SpeedProbe::new(&executor, device.protocol.burn_in_runs)?;
    let mut readings = Vec::with_capacity(CURRENT_SPEED_READINGS);
    for _ in 0..CURRENT_SPEED_READINGS {
        readings.push(probe.measure()?);
        std::thread::sleep(std::time::Duration::from_millis(CURRENT_SPEED_PAUSE_MS));
    }
    let now = median_reading(&readings).ok_or_else(|| invalid("the speed probe gave no usable reading".into()))?;
    Ok((now, nominal))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut net = Network::load(&args.net)?;
    if let Some(batch) = args.batch {
        net.batch_size = batch as usize;
    }
    let estimator = args.estimator.open()?;
    let mut estimate = estimator.estimate(&net)?;
    estimate.notes.extend(args.estimator.trained_here_note(&estimator));
    if args.at_current_speed {
        let (now, nominal) = current_speed(&args, &estimator)?;
        estimate = estimate.at_machine_speed(
            perfmodel::collect::speed::speed_factor(now, nominal),
            format!(
                "conv2d, depthwise, dense and pooling latencies scaled to this machine's speed now: speed probe \
                 {now:.3} ms, {:.2}x the models' nominal {nominal:.3} ms, so these layers x{:.2} (they follow the \
                 probe with elasticity {})",
                now / nominal,
                perfmodel::collect::speed::speed_factor(now, nominal),
                perfmodel::collect::speed::PROBE_ELASTICITY
            ),
        );
    }
    if let Some(path) = &args.plot {
        report::plot(&estimate, path)?;
    }
    match args.format {
        Format::Table => print!("{}", report::table(&estimate)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&estimate)?),
        Format::Csv => {
            print!("{}", report::csv(&estimate)?);
            for note in &estimate.notes {
                eprintln!("warning: {note}");
            }
        }
    }
    Ok(())
}
