//! What a caller asks an estimate of, resolved once into an estimator: which device (the one made on this
//! machine when none is named, else the nearest by fingerprint, scaled zero-shot), which method, calibrated or
//! not.
//!
//! Why in the library: `estimate`, `validate` and `outliers` choose a device the same way, and so should a Rust,
//! C or Python caller asking "how long on this machine": the choice reads the device profiles, the model stores
//! and this machine's fingerprint, and a zero-shot scaling times speed probes here.

use super::zero_shot::{layer_classes, ProbeTimes, ZeroShot};
use super::{Estimate, Estimator, Method, DEFAULT_DEVICE};
use crate::collect::profile::{DeviceProfile, HostMatch};
use crate::device::Fingerprint;
use crate::dirs::Dirs;
use crate::error::{Error, Result};

/// What an estimate is asked of. `Default`: the device of this machine, learned models, calibrated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The device; `None` for the device made on this machine (else the nearest, zero-shot).
    pub device: Option<String>,
    /// One of [`Method::NAMES`].
    pub method: String,
    /// Ignore the device's whole-network calibration.
    pub uncalibrated: bool,
    /// Scale the device's latency models to this machine by speed probes timed here.
    pub zero_shot: bool,
}

impl Default for Request {
    fn default() -> Request {
        Request { device: None, method: "learned".to_string(), uncalibrated: false, zero_shot: false }
    }
}

/// The device a request resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub device: String,
    /// Whether its latency models are scaled to this machine.
    pub zero_shot: bool,
    /// Why no device of this machine was used (for the zero-shot line).
    pub chosen_because: Option<String>,
    /// When no device was named on a machine no device was made on: the other devices of the same engine with
    /// models and a known machine, nearest first, whose scaled predictions are combined with the chosen one's.
    pub also: Vec<String>,
    /// Profiles that could not be read while choosing (each named, with why).
    pub notes: Vec<String>,
}

/// A request opened: the device chosen, its estimator and, when zero-shot, the scaling measured here.
#[derive(Debug)]
pub struct Opened {
    pub choice: Choice,
    pub estimator: Estimator,
    pub zero_shot: Option<Scaling>,
}

/// A zero-shot scaling measured here: the chosen device's models and those of [`Choice::also`], each scaled by
/// the same probes.
#[derive(Debug)]
pub struct Scaling {
    /// The chosen device's scaling first, then each other source's.
    pub sources: Vec<ZeroShot>,
    /// The estimators of `sources[1..]`.
    others: Vec<Estimator>,
}

/// What zero-shot estimates showed in validation (docs/devices.md: the three shipped tract devices combined on a
/// machine none was made on, 22 networks, two runs on each of two days: medians 6.2-8.2%, worst 21-23%; one device
/// alone was off by up to 34-39% on another machine).
pub const ZERO_SHOT_EXPECTED_ERROR: &str = "±25% (a median of 6-8%; one device alone, up to ±40%)";

impl Request {
    pub fn with_device(mut self, device: Option<String>) -> Request {
        self.device = device;
        self
    }

    pub fn with_method(mut self, method: impl Into<String>) -> Request {
        self.method = method.into();
        self
    }

    pub fn with_uncalibrated(mut self, uncalibrated: bool) -> Request {
        self.uncalibrated = uncalibrated;
        self
    }

    pub fn with_zero_shot(mut self, zero_shot: bool) -> Request {
        self.zero_shot = zero_shot;
        self
    }

    /// The named device; else the device whose profile was made for this machine and has models; else the
    /// device with models whose machine is nearest this one (by fingerprint), zero-shot; else the default.
    pub fn choose(&self, dirs: &Dirs) -> Choice {
        let plain = |device: &str, notes| Choice {
            device: device.to_string(),
            zero_shot: self.zero_shot,
            chosen_because: None,
            also: Vec::new(),
            notes,
        };
        if let Some(device) = &self.device {
            return plain(device, Vec::new());
        }
        let host = Fingerprint::of_host();
        let has_models = |name: &str| crate::train::store::manifest_path(&dirs.models, name).is_file();
        // Each profile on its own: one unreadable profile must not hide the others (it is named).
        let mut profiles: Vec<DeviceProfile> = Vec::new();
        let mut notes = Vec::new();
        for name in DeviceProfile::names(&dirs.collectors).unwrap_or_default() {
            match DeviceProfile::load(&dirs.collectors, &name) {
                Ok(p) if has_models(&p.name) && p.executor == "tract" => profiles.push(p),
                Ok(_) => {}
                Err(e) => notes.push(format!("profile '{name}' is skipped when choosing a device: {e}")),
            }
        }
        let here = |wanted: HostMatch| profiles.iter().find(|p| p.check_host(host).ok() == Some(wanted));
        if let Some(p) = here(HostMatch::Recorded).or_else(|| here(HostMatch::Partial)) {
            return plain(&p.name, notes);
        }
        let mut by_distance: Vec<(&DeviceProfile, f64)> =
            profiles.iter().filter_map(|p| Some((p, host.distance(p.fingerprint.as_ref()?)))).collect();
        by_distance.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.name.cmp(&b.0.name)));
        // Only learned models are scaled; a baseline of the nearest device is estimated as it is.
        match by_distance.first() {
            Some((p, _)) if self.method != "learned" => plain(&p.name, notes),
            Some((p, _)) => Choice {
                device: p.name.clone(),
                zero_shot: true,
                chosen_because: Some(format!(
                    "no device was made on this machine ({}); '{}' was made on the nearest one ({})",
                    host.summary(),
                    p.name,
                    p.fingerprint.as_ref().map(|f| f.summary()).unwrap_or_default()
                )),
                also: by_distance[1..].iter().map(|(p, _)| p.name.clone()).collect(),
                notes,
            },
            None => plain(DEFAULT_DEVICE, notes),
        }
    }

    /// The estimator of `choice` (`perfmodel estimate --method`'s), without calibration when asked.
    pub fn estimator(&self, choice: &Choice, dirs: &Dirs) -> Result<Estimator> {
        let estimator = Estimator::open_method(&self.method, &choice.device, dirs)?;
        let estimator = if self.uncalibrated { estimator.without_calibration() } else { estimator };
        // Scaled to this machine, the models estimate this machine's memory too: tract's packing here.
        Ok(if choice.zero_shot { estimator.packing_for_this_machine() } else { estimator })
    }

    /// Choose the device, open its estimator and, when zero-shot, time the speed probes (a few seconds, with the
    /// device's engine settings).
    pub fn open(&self, dirs: &Dirs) -> Result<Opened> {
        let choice = self.choose(dirs);
        let estimator = self.estimator(&choice, dirs)?;
        let zero_shot = zero_shot_of(&choice, &estimator, dirs)?;
        Ok(Opened { choice, estimator, zero_shot })
    }
}

/// The zero-shot scaling of `estimator`'s models (and of [`Choice::also`]'s) to this machine when `choice` asks
/// for it: the probes are timed once, with the chosen device's engine settings. Another source is opened as the
/// chosen one is (calibrated when it is); one that cannot be opened or has no model of the probes is left out, and
/// the estimate names the sources it combined.
pub fn zero_shot_of(choice: &Choice, estimator: &Estimator, dirs: &Dirs) -> Result<Option<Scaling>> {
    if !choice.zero_shot {
        return Ok(None);
    }
    let Method::Learned(store) = estimator.method() else {
        return Err(Error::Invalid(format!("--zero-shot needs --method learned, not {}", estimator.method().name())));
    };
    // The probes run with the engine the source device's rows were measured with.
    let executor: Box<dyn crate::engine::Executor> = match DeviceProfile::load(&dirs.collectors, &choice.device) {
        Ok(profile) => crate::engine::executor_for(&profile)?,
        Err(_) => Box::new(crate::engine::TractExecutor::new(1)?),
    };
    let times = ProbeTimes::measure(executor.as_ref())?;
    let mut sources = vec![ZeroShot::from_times(store, &times)?];
    let mut others = Vec::new();
    for device in &choice.also {
        let Ok(other) = Estimator::open_method("learned", device, dirs) else { continue };
        let other = if estimator.calibration().is_some() { other } else { other.without_calibration() };
        let other = other.packing_for_this_machine();
        let Method::Learned(other_store) = other.method() else { continue };
        let Ok(scaled) = ZeroShot::from_times(other_store, &times) else { continue };
        sources.push(scaled);
        others.push(other);
    }
    Ok(Some(Scaling { sources, others }))
}

impl Opened {
    /// `net` estimated as asked: scaled to this machine when zero-shot.
    pub fn estimate(&self, net: &crate::Network) -> Result<Estimate> {
        let estimate = self.estimator.estimate(net)?;
        match &self.zero_shot {
            Some(z) => apply_zero_shot(estimate, z, &self.choice, net),
            None => Ok(estimate),
        }
    }
}

/// `estimate` (of `net`) scaled to this machine by `scaling`, combined layer by layer with the other sources'
/// scaled estimates of `net` (a geometric mean), its notes about another machine's models replaced by one line:
/// which devices, why, the factors, and the error zero-shot estimates have shown. Memory is the chosen device's.
pub fn apply_zero_shot(
    estimate: Estimate,
    scaling: &Scaling,
    choice: &Choice,
    net: &crate::Network,
) -> Result<Estimate> {
    let analysis = net.analyze()?;
    let classes = layer_classes(net, &analysis);
    let primary = &scaling.sources[0];
    let mut combined = Vec::new();
    for (other, z) in scaling.others.iter().zip(&scaling.sources[1..]) {
        // A source that cannot estimate this network (a layer type it has no model of) is left out of it.
        if let Ok(e) = other.estimate(net) {
            combined.push((z, e.scaled_by(z, &classes)));
        }
    }
    let mut estimate = estimate.scaled_by(primary, &classes);
    estimate.notes.retain(|n| !n.contains("has models trained on another machine"));
    let why = choice.chosen_because.as_ref().map_or(String::new(), |w| format!("{w}; "));
    let advice = format!(
        "expect errors of up to {ZERO_SHOT_EXPECTED_ERROR} (docs/devices.md); 'perfmodel device init' and 'collect \
         --quick' make a device of this machine"
    );
    let note = if combined.is_empty() {
        format!(
            "zero-shot: {why}'{}''s latency models scaled to this machine by {:.1} s of speed probes ({}); {advice}",
            primary.source_device,
            primary.seconds,
            primary.factors_text()
        )
    } else {
        let names: Vec<String> = combined.iter().map(|(z, _)| format!("'{}'", z.source_device)).collect();
        let factors: Vec<String> = std::iter::once(primary)
            .chain(combined.iter().map(|(z, _)| *z))
            .map(|z| format!("'{}': {}", z.source_device, z.factors_text()))
            .collect();
        format!(
            "zero-shot: {why}the latency models of '{}' and of {} scaled to this machine by {:.1} s of speed probes \
             ({}) and combined layer by layer (geometric mean), memory from '{}'; {advice}",
            primary.source_device,
            names.join(", "),
            primary.seconds,
            factors.join("; "),
            primary.source_device
        )
    };
    let (sources, others): (Vec<&ZeroShot>, Vec<Estimate>) = combined.into_iter().unzip();
    estimate.combine_latency(&others);
    estimate.notes.push(note);
    estimate.zero_shot_others = sources.into_iter().cloned().collect();
    Ok(estimate)
}

/// When the estimator's models come from another machine: the devices under `models_dir` whose models were
/// trained on this one, as a note (it opens every store, so it is asked for, not part of every estimate).
pub fn trained_here_note(estimator: &Estimator, dirs: &Dirs) -> Option<String> {
    estimator.trained_elsewhere()?;
    let here: Vec<String> = crate::train::store::devices_trained_here(&dirs.models)
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
