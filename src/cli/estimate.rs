//! `perfmodel estimate`: latency, energy and memory of a network on a device, per layer and in total.

use super::default_dir;
use perfmodel::collect::profile::HostMatch;
use perfmodel::collect::DeviceProfile;
use perfmodel::device::Fingerprint;
use perfmodel::estimate::zero_shot::ZeroShot;
use perfmodel::estimate::{report, Dirs, Estimate, Estimator, Method, DEFAULT_DEVICE};
use perfmodel::Network;
use std::path::PathBuf;

/// The device, method and directories an estimator is built from (shared with `outliers` and `validate`).
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

/// The device an estimate is for, and whether it is scaled to this machine.
pub struct Resolved {
    pub device: String,
    pub zero_shot: bool,
    /// Why no device of this machine was used (for the zero-shot line).
    pub chosen_because: Option<String>,
}

impl EstimatorArgs {
    pub fn collectors_dir(&self) -> PathBuf {
        self.collectors_dir.clone().unwrap_or_else(|| default_dir("collectors"))
    }

    pub fn models_dir(&self) -> PathBuf {
        self.models_dir.clone().unwrap_or_else(|| default_dir("models"))
    }

    /// The named device; else the device whose profile was made for this machine and has models; else the
    /// device with models whose machine is nearest this one (by fingerprint), zero-shot; else the default.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        if let Some(device) = &self.device {
            return Ok(Resolved { device: device.clone(), zero_shot: self.zero_shot, chosen_because: None });
        }
        let host = Fingerprint::of_host();
        let models = self.models_dir();
        let has_models = |name: &str| perfmodel::train::store::manifest_path(&models, name).is_file();
        // Each profile on its own: one unreadable profile must not hide the others (it is named).
        let collectors = self.collectors_dir();
        let mut profiles: Vec<DeviceProfile> = Vec::new();
        for name in DeviceProfile::names(&collectors).unwrap_or_default() {
            match DeviceProfile::load(&collectors, &name) {
                Ok(p) if has_models(&p.name) && p.executor == "tract" => profiles.push(p),
                Ok(_) => {}
                Err(e) => eprintln!("note: profile '{name}' is skipped when choosing a device: {e}"),
            }
        }
        let here = |wanted: HostMatch| profiles.iter().find(|p| p.check_host(host).ok() == Some(wanted));
        if let Some(p) = here(HostMatch::Recorded).or_else(|| here(HostMatch::Partial)) {
            return Ok(Resolved { device: p.name.clone(), zero_shot: self.zero_shot, chosen_because: None });
        }
        let nearest = profiles
            .iter()
            .filter_map(|p| Some((p, host.distance(p.fingerprint.as_ref()?))))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.name.cmp(&b.0.name)));
        // Only learned models are scaled; a baseline of the nearest device is estimated as it is.
        let learned = self.method == "learned";
        Ok(match nearest {
            Some((p, _)) if !learned => {
                Resolved { device: p.name.clone(), zero_shot: self.zero_shot, chosen_because: None }
            }
            Some((p, _)) => Resolved {
                device: p.name.clone(),
                zero_shot: true,
                chosen_because: Some(format!(
                    "no device was made on this machine ({}); '{}' was made on the nearest one ({})",
                    host.summary(),
                    p.name,
                    p.fingerprint.as_ref().map(|f| f.summary()).unwrap_or_default()
                )),
            },
            None => Resolved { device: DEFAULT_DEVICE.to_string(), zero_shot: self.zero_shot, chosen_because: None },
        })
    }

    /// The zero-shot scaling of `estimator`'s models to this machine when `resolved` asks for it (a few seconds
    /// of probes with the device's engine settings).
    pub fn zero_shot(&self, resolved: &Resolved, estimator: &Estimator) -> anyhow::Result<Option<ZeroShot>> {
        if !resolved.zero_shot {
            return Ok(None);
        }
        let Method::Learned(store) = estimator.method() else {
            anyhow::bail!(perfmodel::Error::Invalid(format!(
                "--zero-shot needs --method learned, not {}",
                estimator.method().name()
            )));
        };
        let threads = DeviceProfile::load(&self.collectors_dir(), &resolved.device).map_or(1, |p| p.threads);
        let executor = perfmodel::engine::TractExecutor::new(threads)?;
        Ok(Some(ZeroShot::measure(store, &executor)?))
    }

    /// When the estimator's models come from another machine: the shipped devices whose models were trained on
    /// this one, as a note (it opens every store, so the CLI asks, not the library's `Estimator::open`).
    pub fn trained_here_note(&self, estimator: &Estimator) -> Option<String> {
        estimator.trained_elsewhere()?;
        let models = self.models_dir();
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

    pub fn open(&self, device: &str) -> anyhow::Result<Estimator> {
        let models = self.models_dir();
        let data = self.data_dir.clone().unwrap_or_else(|| default_dir("data"));
        let collectors = self.collectors_dir();
        let dirs = Dirs { models: &models, data: &data, collectors: &collectors };
        let estimator = Estimator::open_method(&self.method, device, &dirs)?;
        Ok(if self.uncalibrated { estimator.without_calibration() } else { estimator })
    }
}

/// `estimate` scaled to this machine by `zero_shot`, its notes about another machine's models replaced by one
/// line: which device, why, the factors, and the error zero-shot estimates have shown.
pub fn apply_zero_shot(estimate: Estimate, zero_shot: &ZeroShot, resolved: &Resolved) -> Estimate {
    let mut estimate = estimate;
    estimate.notes.retain(|n| !n.contains("has models trained on another machine"));
    let why = resolved.chosen_because.as_ref().map_or(String::new(), |w| format!("{w}; "));
    let note = format!(
        "zero-shot: {why}'{}''s latency models scaled to this machine by {:.1} s of speed probes ({}); expect \
         errors of up to {ZERO_SHOT_EXPECTED_ERROR} (docs/devices.md); 'perfmodel device init' and 'collect --quick' \
         make a device of this machine",
        zero_shot.source_device,
        zero_shot.seconds,
        zero_shot.factors_text()
    );
    estimate.with_zero_shot(zero_shot, note)
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

/// What zero-shot estimates showed in validation (docs/devices.md: two source devices, 19 networks, 2 runs).
const ZERO_SHOT_EXPECTED_ERROR: &str = "±40% (a median of 6-15%)";

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
    let resolved = args.estimator.resolve()?;
    let estimator = args.estimator.open(&resolved.device)?;
    let mut estimate = estimator.estimate(&net)?;
    match args.estimator.zero_shot(&resolved, &estimator)? {
        Some(zero_shot) => estimate = apply_zero_shot(estimate, &zero_shot, &resolved),
        None => estimate.notes.extend(args.estimator.trained_here_note(&estimator)),
    }
    if args.at_current_speed && resolved.zero_shot {
        anyhow::bail!(perfmodel::Error::Invalid(format!(
            "--at-current-speed: device '{}' is scaled to this machine by zero-shot speed probes already; its              models were not trained here",
            resolved.device
        )));
    }
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
