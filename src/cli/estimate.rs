//! `perfmodel estimate`: latency, energy and memory of a network on a device, per layer and in total.

use perfmodel::estimate::request::{apply_zero_shot, trained_here_note, zero_shot_of, Choice, Request};
use perfmodel::estimate::{render, Estimator, Method};
use perfmodel::Dirs;
use perfmodel::Network;
use std::path::PathBuf;

/// The device and method an estimator is built from (shared with `outliers` and `validate`).
#[derive(clap::Args)]
pub struct EstimatorArgs {
    /// Device to estimate for (a trained model set under the models directory) [default: the device made on
    /// this machine; on a machine without one, the nearest shipped device, scaled to this machine (zero-shot)]
    #[arg(long)]
    pub device: Option<String>,
    /// Scale the device's latency models to this machine by a few seconds of speed probes timed here (zero-shot
    /// transfer; what happens by default on a machine no device was made on)
    #[arg(long)]
    pub zero_shot: bool,
    /// How single layers are predicted: trained models, or a baseline
    #[arg(long, default_value = "learned", value_parser = clap::builder::PossibleValuesParser::new(Method::NAMES))]
    pub method: String,
    /// Ignore the device's whole-network calibration (MODELS_DIR/DEVICE/calibration.json): raw sums of the layer
    /// predictions
    #[arg(long)]
    pub uncalibrated: bool,
}

impl EstimatorArgs {
    /// What these arguments ask of the library.
    pub fn request(&self) -> Request {
        Request::default()
            .with_device(self.device.clone())
            .with_method(self.method.clone())
            .with_uncalibrated(self.uncalibrated)
            .with_zero_shot(self.zero_shot)
    }

    /// The device chosen, the profiles it skipped said at once as notes (an error opening the device may be
    /// why).
    pub fn choose(&self, dirs: &Dirs) -> Choice {
        let choice = self.request().choose(dirs);
        for note in &choice.notes {
            eprintln!("note: {note}");
        }
        choice
    }

    /// The estimator of the device chosen.
    pub fn estimator(&self, choice: &Choice, dirs: &Dirs) -> anyhow::Result<Estimator> {
        Ok(self.request().estimator(choice, dirs)?)
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
fn current_speed(estimator: &Estimator, dirs: &Dirs) -> anyhow::Result<(f64, f64)> {
    use perfmodel::collect::speed::{median_reading, SpeedProbe};
    let invalid = |why: String| perfmodel::Error::Invalid(format!("--at-current-speed: {why}"));
    let Method::Learned(store) = estimator.method() else {
        anyhow::bail!(invalid(format!("needs --method learned, not {}", estimator.method().name())));
    };
    let device = perfmodel::collect::DeviceProfile::load(&dirs.collectors, estimator.device())?;
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
    let executor = perfmodel::engine::executor_for(&device)?;
    let mut probe = SpeedProbe::new(executor.as_ref(), device.protocol.burn_in_runs)?;
    let mut readings = Vec::with_capacity(CURRENT_SPEED_READINGS);
    for _ in 0..CURRENT_SPEED_READINGS {
        readings.push(probe.measure()?);
        std::thread::sleep(std::time::Duration::from_millis(CURRENT_SPEED_PAUSE_MS));
    }
    let now = median_reading(&readings).ok_or_else(|| invalid("the speed probe gave no usable reading".into()))?;
    Ok((now, nominal))
}

pub fn run(args: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let mut net = Network::load(&args.net)?;
    if let Some(batch) = args.batch {
        net.batch_size = batch as usize;
    }
    let choice = args.estimator.choose(dirs);
    let estimator = args.estimator.estimator(&choice, dirs)?;
    let mut estimate = estimator.estimate(&net)?;
    if args.at_current_speed && choice.zero_shot {
        anyhow::bail!(perfmodel::Error::Invalid(format!(
            "--at-current-speed: device '{}' is scaled to this machine by zero-shot speed probes already; its \
             models were not trained here",
            choice.device
        )));
    }
    match zero_shot_of(&choice, &estimator, dirs)? {
        Some(zero_shot) => estimate = apply_zero_shot(estimate, &zero_shot, &choice, &net)?,
        None => estimate.notes.extend(trained_here_note(&estimator, dirs)),
    }
    if args.at_current_speed {
        let (now, nominal) = current_speed(&estimator, dirs)?;
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
        render::plot(&estimate, path)?;
    }
    match args.format {
        Format::Table => print!("{}", render::table(&estimate)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&estimate)?),
        Format::Csv => {
            print!("{}", render::csv(&estimate)?);
            for note in &estimate.notes {
                eprintln!("warning: {note}");
            }
        }
    }
    Ok(())
}
