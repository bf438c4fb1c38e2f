//! Calibrating a device: run networks here, estimate them uncalibrated, and fit the correction
//! ([`Calibration::fit`]) on what the two disagree on.
//!
//! Why in the library: a calibration is part of a device, and whoever makes devices (the CLI, a script driving
//! many machines through the C ABI) needs the same runs, the same points and the same refusals.

use super::{
    models_fingerprint, read_core_cache_mib, Calibration, CalibrationPoint, DenseLayerPoint, InputConvPoint,
    LayoutPoint, NetworkSize, ResidualAddPoint, MIN_NETWORKS,
};
use crate::collect::profile::DeviceProfile;
use crate::device::Fingerprint;
use crate::dirs::Dirs;
use crate::engine::{NetworkProfile, RoundPlan, TractExecutor};
use crate::error::{Error, Result};
use crate::estimate::memory::BYTES_PER_ELEMENT;
use crate::estimate::validation::{bench_with_speed_probe, nominal_probe_ms, NetworkError, Validation};
use crate::estimate::{structure, Estimate, Estimator, LayerEstimate, Method};
use crate::layer::{LayerCost, LayerType};
use crate::network::Network;
use crate::units::MIB;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How a calibration runs and what it fits. `Default`: 10 rounds after 2 warm-ups in two turns of 5 (so that a
/// network's rounds do not all fall in one slow moment of a shared machine, and the rounds near nominal speed can
/// be kept), the speed probe on, latency terms for dense layers and residual adds only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrateOptions {
    pub rounds: usize,
    pub warmup: usize,
    pub block: usize,
    /// Time the speed probe between the rounds and bring each network's time to the nominal speed of the
    /// models' data.
    pub speed_probe: bool,
    /// Calibrate models trained on another machine (refused by default).
    pub allow_other_machine: bool,
    /// Fit only the peak-memory correction, from one run per network.
    pub memory_only: bool,
    /// Also fit the whole-network latency terms (a scale and a time per executing layer) on the totals.
    pub network_latency: bool,
}

impl Default for CalibrateOptions {
    fn default() -> CalibrateOptions {
        CalibrateOptions {
            rounds: 10,
            warmup: 2,
            block: 5,
            speed_probe: true,
            allow_other_machine: false,
            memory_only: false,
            network_latency: false,
        }
    }
}

/// The zoo's architectures (`*.json` directly in `zoo`, except the sampled configs), its calibration-only
/// networks (`zoo/calibration/*.json`) and its transformers (`zoo/transformers/*.json`), of those directories
/// that exist. The holdout, another subdirectory, is never read. [`calibrate`] leaves out a network the device
/// has no models for (transformers on a device without their layer types).
pub fn zoo_networks(zoo: &Path) -> Result<Vec<PathBuf>> {
    let mut nets = json_files(zoo)?;
    for sub in [crate::zoo::CALIBRATION_DIR, crate::zoo::TRANSFORMERS_DIR] {
        let dir = zoo.join(sub);
        if dir.is_dir() {
            nets.extend(json_files(&dir)?);
        }
    }
    Ok(nets)
}

/// The `*.json` files directly in `dir` except `configs.json`, sorted.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut nets = crate::fsio::json_files(dir)?;
    nets.retain(|p| p.file_name().is_some_and(|n| n != "configs.json"));
    Ok(nets)
}

/// Calibrate `device`'s learned models on the networks in `nets` (net.json or ONNX files, at least
/// [`MIN_NETWORKS`]; [`zoo_networks`] by default), run here with the device's engine settings, and write the
/// calibration beside the models. Refuses a profile of another machine, and models trained on another machine
/// unless `options.allow_other_machine`, before reading any network. `log` receives progress and notes.
pub fn calibrate(
    device: &str,
    nets: &[PathBuf],
    dirs: &Dirs,
    options: CalibrateOptions,
    log: &mut dyn FnMut(String),
) -> Result<(Calibration, PathBuf)> {
    let profile = DeviceProfile::load(&dirs.collectors, device)?;
    // The calibration is fitted on this machine's runs: another machine's profile must not receive them.
    profile.check_host(Fingerprint::of_host())?;
    // Exactly what `perfmodel estimate` computes (bandwidth-priced cheap layers included), before calibration.
    let estimator = Estimator::open_method("learned", device, dirs)?.without_calibration();
    let Method::Learned(store) = estimator.method() else {
        return Err(Error::Invalid("the learned method has no model store".to_string()));
    };
    let fingerprint = models_fingerprint(store.manifest());
    if nets.len() < MIN_NETWORKS {
        return Err(Error::Invalid(format!(
            "calibration needs at least {MIN_NETWORKS} networks, got {} (by default the zoo's architectures)",
            nets.len()
        )));
    }
    let nets = nets.iter().map(Network::load).collect::<Result<Vec<Network>>>()?;
    let (rounds, warmup) = if options.memory_only { (1, 0) } else { (options.rounds, options.warmup) };
    // Models of another machine: this machine's runs would be fitted into their calibration, and their nominal
    // probe time is that machine's.
    if let Some(machine) = estimator.trained_elsewhere() {
        if !options.allow_other_machine {
            return Err(Error::Invalid(format!(
                "device '{device}' has models trained on another machine ({machine}): calibrating them here would \
                 fit this machine's runs into the calibration they are used with everywhere; calibrate on that \
                 machine, or collect and train this one as a device of its own (--allow-other-machine to do it \
                 anyway)"
            )));
        }
        log(format!(
            "note: device '{device}' has models trained on another machine ({machine}); their speed probe is not \
             compared with this machine's"
        ));
    }
    // What tract keeps per layer besides weights, measured here by probe networks: the estimates below count
    // it, and so will every estimate this calibration applies to. Only for models of tract on this machine.
    let structure = if estimator.models_tract() && estimator.trained_elsewhere().is_none() {
        let probes = structure::probes();
        log(format!("measuring the engine's per-layer structure ({} probe networks)", 2 * probes.len()));
        let structure = structure::measure(&probes, &TractExecutor::new(1)?, &estimator)?;
        if structure.is_none() {
            log("note: heap use cannot be counted in this process; the engine's per-layer structure is not measured"
                .to_string());
        }
        structure
    } else {
        None
    };
    let estimator = estimator.with_engine_structure(structure.clone());
    // A network with layers no model covers has a lower bound for an estimate: nothing to calibrate on.
    let mut estimates = Vec::with_capacity(nets.len());
    let mut covered = Vec::with_capacity(nets.len());
    for net in nets {
        let estimate = estimator.estimate(&net)?;
        if estimate.uncovered.is_empty() {
            covered.push(net);
            estimates.push(estimate);
        } else {
            log(format!(
                "note: {} left out: {} of its layers have no model on device '{device}' (first: {})",
                net.name,
                estimate.uncovered.len(),
                estimate.uncovered[0].name
            ));
        }
    }
    if covered.len() < MIN_NETWORKS {
        return Err(Error::Invalid(format!(
            "calibration needs at least {MIN_NETWORKS} networks the device's models cover, got {}",
            covered.len()
        )));
    }
    let nets = covered.as_slice();
    log(format!("running {} networks, {} rounds each", nets.len(), options.rounds));
    let nominal = if options.memory_only || !options.speed_probe { None } else { nominal_probe_ms(&estimator, log) };
    let plan = RoundPlan { rounds, max_rounds: rounds, block: options.block };
    let (profiles, readings) = bench_with_speed_probe(nets, &profile, nominal, plan, warmup, log)?;
    let mut at_nominal = Validation::new(device, "learned", {
        estimates.iter().zip(&profiles).map(|(e, m)| NetworkError::new(e, m)).collect()
    });
    if let Some(nominal) = nominal.filter(|_| !readings.is_empty()) {
        at_nominal = at_nominal.with_speed_probe(nominal, &readings, &estimates, &profiles);
        if let Some(p) = &at_nominal.speed_probe {
            log(format!("machine speed: probe at {:.2}x the nominal time of the models' data", p.ratio));
        }
    }
    let mut points = Vec::with_capacity(nets.len());
    for (((net, measured), estimate), row) in nets.iter().zip(&profiles).zip(&estimates).zip(&at_nominal.networks) {
        log(format!(
            "{}: measured {:.3} ms / {:.2} MiB, predicted {:.3} ms / {:.2} MiB",
            net.name,
            measured.total.latency_ms,
            measured.total.peak_memory_mib,
            estimate.total.latency_ms,
            estimate.total.peak_memory_mib
        ));
        points.push(calibration_point(&estimator, net, estimate, measured, row)?);
    }
    // The machine the networks ran on (calibrate runs them here): the kernel's cache description, else the L2
    // size tract blocks its kernels by.
    let core_cache_mib = read_core_cache_mib(Path::new("/sys/devices/system/cpu/cpu0/cache"))
        .or_else(|| crate::engine::packing::host_l2_bytes().map(|b| b as f64 / MIB));
    if core_cache_mib.is_none() {
        log("note: the core's cache size could not be read; the dense-layer term applies in every network".to_string());
    }
    let mut calibration = Calibration::fit(device, "learned", &fingerprint, points, core_cache_mib)?;
    if let (true, Some(why)) = (options.network_latency, &calibration.network_latency_error) {
        return Err(Error::Invalid(why.clone()));
    }
    if options.memory_only {
        calibration = calibration.memory_only();
    } else if !options.network_latency {
        calibration = calibration.without_network_latency();
    }
    calibration.machine_speed_ratio = at_nominal.speed_probe.as_ref().map(|p| p.ratio);
    calibration.engine_structure = structure;
    let path = calibration.save(&dirs.models)?;
    Ok((calibration, path))
}

/// One network's point: its totals (measured at nominal speed when the probe ran), its dense layers and its
/// convolutions computing a residual add.
fn calibration_point(
    estimator: &Estimator,
    net: &Network,
    estimate: &Estimate,
    measured: &NetworkProfile,
    row: &NetworkError,
) -> Result<CalibrationPoint> {
    // Each layer's time brought to nominal speed like the network's total.
    let to_nominal = row.measured_latency_at_nominal_ms.map_or(1.0, |n| n / measured.total.latency_ms);
    let analysis = net.analyze()?;
    let costs = &analysis.costs[..];
    // The executing layers `pick` chooses (by index and estimate) with a measured node: their node's time.
    let own_time_points = |pick: &dyn Fn(usize, &LayerEstimate) -> bool| -> Vec<DenseLayerPoint> {
        estimate
            .layers
            .iter()
            .zip(&measured.layers)
            .zip(costs)
            .enumerate()
            .filter(|(i, ((e, m), _))| pick(*i, e) && e.predictor.fused_into().is_none() && m.latency_ms > 0.0)
            .filter_map(|(_, ((e, m), cost))| {
                Some(DenseLayerPoint {
                    layer: e.name.clone(),
                    weight_mib: (cost.weight_elems * BYTES_PER_ELEMENT) as f64 / MIB,
                    predicted_ms: e.latency_ms?,
                    measured_ms: m.latency_ms * to_nominal,
                })
            })
            .collect()
    };
    let dense_layers = own_time_points(&|_, e| e.layer_type == LayerType::Dense);
    let plan = estimator.rules.plan(net, &analysis);
    let NetworkSize { weight_mib, touched_mib } = NetworkSize::of(costs, &plan);
    // Layers by name: a fused add is named by the layer whose product computes it.
    let index: HashMap<&str, usize> = net.layers.iter().enumerate().map(|(i, l)| (l.name.as_str(), i)).collect();
    // Convolutions that compute a residual add: their node's time and the add's (0 when tract fused it).
    let residual_adds = fused_add_points(LayerType::Conv2d, net, &index, estimate, measured, costs, to_nominal);
    let norm_adds = fused_add_points(LayerType::LayerNorm, net, &index, estimate, measured, costs, to_nominal);
    // Products with a constant weight: their node's time and a fused add's (whose node tract names after the add).
    let matmul_layers = estimate
        .layers
        .iter()
        .zip(&measured.layers)
        .zip(costs)
        .filter(|((e, _), cost)| e.layer_type == LayerType::MatMul && cost.weight_elems > 0)
        .filter(|((e, _), _)| e.predictor.fused_into().is_none())
        .filter_map(|((e, m), cost)| {
            let add = e.predictor.fused_add().and_then(|name| index.get(name)).map(|&a| measured.layers.get(a));
            let add_ms = match add {
                Some(layer) => layer?.latency_ms,
                None => 0.0,
            };
            Some(DenseLayerPoint {
                layer: e.name.clone(),
                weight_mib: (cost.weight_elems * BYTES_PER_ELEMENT) as f64 / MIB,
                predicted_ms: e.latency_ms?,
                measured_ms: (m.latency_ms + add_ms) * to_nominal,
            })
        })
        .collect();
    // Convolutions over one pixel: their node's time.
    let pixel_convs = own_time_points(&|i, _| analysis.is_pixel_convolution(i));
    // Convolutions that read the network's input: their node's time.
    let reads_input = crate::estimate::passes::input_convolutions(net, &analysis, &plan);
    let input_convs = own_time_points(&|i, _| reads_input[i])
        .into_iter()
        .filter_map(|p| {
            let i = *index.get(p.layer.as_str())?;
            let input_mib = crate::estimate::passes::input_bytes(&analysis, i) as f64 / MIB;
            Some(InputConvPoint { layer: p.layer, input_mib, predicted_ms: p.predicted_ms, measured_ms: p.measured_ms })
        })
        .collect();
    let layout_layers = layout_points(estimator, net, estimate)?
        .into_iter()
        .filter_map(|mut p| {
            let i = index.get(p.layer.as_str())?;
            p.measured_ms = measured.layers.get(*i)?.latency_ms * to_nominal;
            Some(p)
        })
        .collect();
    Ok(CalibrationPoint {
        dense_layers,
        residual_adds,
        norm_adds,
        matmul_layers,
        pixel_convs,
        input_convs,
        layout_layers,
        weight_mib,
        touched_mib,
        network: net.name.clone(),
        executing_layers: estimate.executing_layers(),
        weighted_layers: estimate.weighted_layers(),
        measured_latency_ms: row.measured_latency_at_nominal_ms.unwrap_or(measured.total.latency_ms),
        predicted_latency_ms: estimate.total.latency_ms,
        measured_peak_memory_mib: measured.total.peak_memory_mib,
        predicted_peak_memory_mib: estimate.total.peak_memory_mib,
    })
}

/// The layers of `net` its (uncalibrated) `estimate` credits with layout conversions they do not pay in it
/// ([`crate::engine::rules::EngineRules::layout_bytes_saved`] at the model store's rate), each with the time
/// taken off and its prediction after it; `measured_ms` is left 0 for the caller. Empty for a store without
/// a conversion rate (every engine but ONNX Runtime's blocked layout).
pub(crate) fn layout_points(estimator: &Estimator, net: &Network, estimate: &Estimate) -> Result<Vec<LayoutPoint>> {
    let Method::Learned(store) = estimator.method() else { return Ok(Vec::new()) };
    let Some(rate) = store.manifest().reorder_ms_per_mib.filter(|r| *r > 0.0) else { return Ok(Vec::new()) };
    let analysis = net.analyze()?;
    let plan = estimator.rules.plan(net, &analysis);
    let saved = estimator.rules.layout_bytes_saved(net, &analysis, &plan);
    Ok(saved
        .iter()
        .zip(&estimate.layers)
        .filter(|(bytes, _)| **bytes > 0)
        .filter_map(|(&bytes, layer)| {
            let predicted_ms = layer.latency_ms?;
            let saved_mib = bytes as f64 / MIB;
            // Taken off at the rate, at most half the layer's own time (which leaves the prediction).
            let saved_ms = (saved_mib * rate).min(predicted_ms);
            Some(LayoutPoint { layer: layer.name.clone(), saved_mib, saved_ms, predicted_ms, measured_ms: 0.0 })
        })
        .collect())
}

/// The points of one network's layers of `layer_type` that compute an add ([`ResidualAddPoint`]): each such
/// layer the estimate credits with a fused add ([`crate::estimate::AnsweredBy::fused_add`]), predicted with the
/// add, measured as its node and the add's together. Convolutions give the residual-add points (a product with a
/// constant weight is a matmul point: its weights, not the add, set its extra time), layer norms the norm-add
/// points.
fn fused_add_points(
    layer_type: LayerType,
    net: &Network,
    index: &HashMap<&str, usize>,
    estimate: &Estimate,
    measured: &NetworkProfile,
    costs: &[LayerCost],
    to_nominal: f64,
) -> Vec<ResidualAddPoint> {
    let mut points = Vec::new();
    for (layer, e) in estimate.layers.iter().enumerate() {
        if e.layer_type != layer_type {
            continue;
        }
        let Some(add) = e.predictor.fused_add().and_then(|name| index.get(name).copied()) else {
            continue;
        };
        let (Some(predicted_ms), Some(layer_ms), Some(add_ms)) = (
            e.latency_ms,
            measured.layers.get(layer).map(|l| l.latency_ms),
            measured.layers.get(add).map(|l| l.latency_ms),
        ) else {
            continue;
        };
        points.push(ResidualAddPoint {
            layer: e.name.clone(),
            add: net.layers[add].name.clone(),
            add_mib: (costs[add].output_elems * BYTES_PER_ELEMENT) as f64 / MIB,
            predicted_ms,
            measured_ms: (layer_ms + add_ms) * to_nominal,
        });
    }
    points
}

/// Refit `device`'s calibration with its current models from the measurements the calibration already holds:
/// each recorded network (found by name among [`zoo_networks`]) is estimated anew, uncalibrated, with the engine
/// structure measured at calibration time, and the correction is fitted on the recorded measurements against
/// these estimates. No network runs (only the probes of structure kinds the calibration lacks, see below).
/// Models that describe their machine's engine (tract's lowering and tiles there)
/// are refused on another machine unless `allow_other_machine`, as [`calibrate`] refuses them. The engine
/// structure is kept, and the kinds measured since it was (new probes) are measured on the machine it was
/// measured on ([`with_new_kinds`]).
///
/// Why: retraining a device's models (a new learner, a new store format) on the same data changes every
/// prediction and so voids the calibration, whose measurements are still those of the device's machine. A
/// device whose machine is out of reach keeps a calibration that way. The measurements were brought to the
/// nominal speed of the data the models were trained on; refit after a retrain of the same data, not after new
/// rows were collected (then calibrate on the device's machine).
pub fn refit(
    device: &str,
    dirs: &Dirs,
    allow_other_machine: bool,
    log: &mut dyn FnMut(String),
) -> Result<(Calibration, PathBuf)> {
    let old = Calibration::load(&dirs.models, device)?.ok_or_else(|| {
        Error::Invalid(format!(
            "device '{device}' has no calibration in {} to refit; run 'perfmodel calibrate --device {device}' on \
             its machine",
            dirs.models.join(device).display()
        ))
    })?;
    let estimator = Estimator::open_method(&old.method, device, dirs)?.without_calibration();
    let structure = with_new_kinds(old.engine_structure.clone(), &estimator, log)?;
    let estimator = estimator.with_engine_structure(structure.clone());
    let Method::Learned(store) = estimator.method() else {
        return Err(Error::Invalid(format!("calibration of the '{}' method, which has no model store", old.method)));
    };
    // Such models ask tract how it runs each layer on the machine at hand: here they would be asked about this
    // machine, and the estimates would not be those the device's machine makes.
    if let Some(machine) = estimator.trained_elsewhere() {
        if !allow_other_machine {
            return Err(Error::Invalid(format!(
                "device '{device}' has models that describe the engine of the machine they were trained on \
                 ({machine}), not this one: estimated here, its networks are not estimated as there; refit on that \
                 machine (--allow-other-machine to do it anyway, as for a calibration made here with it)"
            )));
        }
        log(format!("note: device '{device}' has models trained on another machine ({machine}); estimated as here"));
    }
    let fingerprint = models_fingerprint(store.manifest());
    if fingerprint == old.models_fingerprint {
        log(format!("note: device '{device}' has the models its calibration was fitted for; the refit fits them anew"));
    }
    let mut zoo: HashMap<String, Network> = HashMap::new();
    for path in zoo_networks(&dirs.zoo)? {
        let net = Network::load(&path)?;
        zoo.insert(net.name.clone(), net);
    }
    let mut points = Vec::with_capacity(old.networks.len());
    for recorded in &old.networks {
        let net = zoo.get(&recorded.network).ok_or_else(|| {
            Error::Invalid(format!(
                "calibration network '{}' is not among the zoo's networks in {}: its measurements cannot be \
                 estimated anew (point --zoo-dir at the zoo it was calibrated with)",
                recorded.network,
                dirs.zoo.display()
            ))
        })?;
        // The network measured: the same weights (a network of that name changed since is not).
        let analysis = net.analyze()?;
        let size = NetworkSize::of(&analysis.costs, &estimator.rules.plan(net, &analysis));
        let weight_mib = size.weight_mib;
        if (weight_mib - recorded.weight_mib).abs() > 1e-9 * recorded.weight_mib.max(1.0) {
            return Err(Error::Invalid(format!(
                "calibration network '{}' has {weight_mib:.3} MiB of weights in the zoo at {}, {:.3} MiB when it \
                 was measured: it is not the network measured; calibrate on the device's machine",
                recorded.network,
                dirs.zoo.display(),
                recorded.weight_mib
            )));
        }
        let estimate = estimator.estimate(net)?;
        if let Some(first) = estimate.uncovered.first() {
            return Err(Error::Invalid(format!(
                "calibration network '{}': {} of its layers have no model on device '{device}' now (first: {}); \
                 calibrate on the device's machine",
                net.name,
                estimate.uncovered.len(),
                first.name
            )));
        }
        let point = refit_point(recorded, &estimate, layout_points(&estimator, net, &estimate)?, size);
        let layer_points = |p: &CalibrationPoint| {
            p.dense_layers.len()
                + p.residual_adds.len()
                + p.norm_adds.len()
                + p.matmul_layers.len()
                + p.pixel_convs.len()
                + p.input_convs.len()
                + p.layout_layers.len()
        };
        let dropped = layer_points(recorded).saturating_sub(layer_points(&point));
        log(format!(
            "{}: measured {:.3} ms / {:.2} MiB, predicted {:.3} ms / {:.2} MiB (was {:.3} ms / {:.2} MiB){}",
            net.name,
            recorded.measured_latency_ms,
            recorded.measured_peak_memory_mib,
            point.predicted_latency_ms,
            point.predicted_peak_memory_mib,
            recorded.predicted_latency_ms,
            recorded.predicted_peak_memory_mib,
            match dropped {
                0 => String::new(),
                n => format!("; {n} layer points left out (the estimate no longer runs them as measured)"),
            }
        ));
        points.push(point);
    }
    let core_cache_mib = Some(old.correction.dense_cache_mib).filter(|c| *c > 0.0);
    let mut calibration = Calibration::fit(device, &old.method, &fingerprint, points, core_cache_mib)?;
    if old.memory_only {
        calibration = calibration.memory_only();
    } else if !old.network_latency {
        calibration = calibration.without_network_latency();
    } else if let Some(why) = &calibration.network_latency_error {
        log(format!("note: the whole-network latency terms are dropped: {why}"));
    }
    calibration.machine_speed_ratio = old.machine_speed_ratio;
    calibration.engine_structure = structure;
    calibration.measured = Some(old.measured.unwrap_or(old.created));
    let path = calibration.save(&dirs.models)?;
    Ok((calibration, path))
}

/// A recorded network's point with the new estimate's predictions. A layer point is kept only while the
/// estimate still runs that layer as it was measured: a dense layer or product of its own, a convolution
/// computing the same add. `size` is the network's (the same weights as recorded, checked by the caller).
fn refit_point(
    recorded: &CalibrationPoint,
    estimate: &Estimate,
    layout: Vec<LayoutPoint>,
    size: NetworkSize,
) -> CalibrationPoint {
    let layers: HashMap<&str, &crate::estimate::LayerEstimate> =
        estimate.layers.iter().map(|l| (l.name.as_str(), l)).collect();
    let own_time = |name: &str| {
        let layer = layers.get(name)?;
        layer.predictor.fused_into().is_none().then_some(layer.latency_ms).flatten()
    };
    let retimed = |points: &[DenseLayerPoint]| -> Vec<DenseLayerPoint> {
        points.iter().filter_map(|p| Some(DenseLayerPoint { predicted_ms: own_time(&p.layer)?, ..p.clone() })).collect()
    };
    let adds = |points: &[ResidualAddPoint]| -> Vec<ResidualAddPoint> {
        points
            .iter()
            .filter(|r| layers.get(r.layer.as_str()).is_some_and(|l| l.predictor.fused_add() == Some(r.add.as_str())))
            .filter_map(|r| Some(ResidualAddPoint { predicted_ms: own_time(&r.layer)?, ..r.clone() }))
            .collect()
    };
    let residual_adds = adds(&recorded.residual_adds);
    let norm_adds = adds(&recorded.norm_adds);
    let measured: HashMap<&str, f64> =
        recorded.layout_layers.iter().map(|l| (l.layer.as_str(), l.measured_ms)).collect();
    let layout_layers = layout
        .into_iter()
        .filter_map(|l| Some(LayoutPoint { measured_ms: *measured.get(l.layer.as_str())?, ..l }))
        .collect();
    CalibrationPoint {
        dense_layers: retimed(&recorded.dense_layers),
        layout_layers,
        matmul_layers: retimed(&recorded.matmul_layers),
        pixel_convs: retimed(&recorded.pixel_convs),
        input_convs: recorded
            .input_convs
            .iter()
            .filter_map(|p| Some(InputConvPoint { predicted_ms: own_time(&p.layer)?, ..p.clone() }))
            .collect(),
        residual_adds,
        norm_adds,
        executing_layers: estimate.executing_layers(),
        weighted_layers: estimate.weighted_layers(),
        predicted_latency_ms: estimate.total.latency_ms,
        predicted_peak_memory_mib: estimate.total.peak_memory_mib,
        touched_mib: size.touched_mib,
        ..recorded.clone()
    }
}

/// `structure` with the kinds it lacks measured here (probes added to [`structure::probes`] after it was
/// measured), when it describes tract on this machine: the models are of this machine's tract and the
/// structure was measured with them. The kinds it has are kept as measured. `estimator` counts no structure.
fn with_new_kinds(
    structure: Option<structure::EngineStructure>,
    estimator: &Estimator,
    log: &mut dyn FnMut(String),
) -> Result<Option<structure::EngineStructure>> {
    let Some(mut structure) = structure else { return Ok(None) };
    let this_engine = format!("tract {}", crate::engine::TRACT_VERSION);
    if !estimator.models_tract() || estimator.trained_elsewhere().is_some() || structure.engine != this_engine {
        return Ok(Some(structure));
    }
    let probes: Vec<structure::Probe> =
        structure::probes().into_iter().filter(|p| !structure.bytes_per_layer.contains_key(p.kind)).collect();
    if probes.is_empty() {
        return Ok(Some(structure));
    }
    let mut kinds: Vec<&str> = probes.iter().map(|p| p.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    log(format!("measuring the engine's per-layer structure of {} kinds it lacks ({})", kinds.len(), kinds.join(", ")));
    if let Some(new) = structure::measure(&probes, &TractExecutor::new(1)?, estimator)? {
        structure.bytes_per_layer.extend(new.bytes_per_layer);
    } else {
        log("note: heap use cannot be counted in this process; the new kinds are not measured".to_string());
    }
    Ok(Some(structure))
}
