//! Whole-network estimation: the engine's rules make a plan of the network ([`crate::engine::rules`]), every
//! layer that runs is predicted in isolation, then the passes combine ([`passes`]).
//!
//! Latency is the sum of the layer latencies (the engine runs layers one after another); energy is
//! Σ latencyₙ × powerₙ (ms × W = mJ), because power differs per layer; peak memory comes from a liveness walk over
//! the DAG ([`memory`]), with the paper's two cruder rules ("two largest layer estimates", "2 × mean") reported
//! beside it for comparison.
//!
//! A layer is answered by the first rule that applies, and the `predictor` of each layer says which one did:
//! 1. `free`: views and inference no-ops (flatten, reshape, dropout) do no work: 0 ms, no allocation.
//! 2. `fused:<producer>`: an activation the engine fuses into the convolution / dense kernel that produces its
//!    input (linear, relu, relu6, leaky relu), and a batch norm directly after a convolution without activation
//!    (folded into its weights), when that producer has no other consumer; with tract's models only when the
//!    producer is one matrix product, not a depthwise or grouped convolution. The producer's prediction already
//!    contains the work; the layer itself costs 0 ms and computes in place. Likewise a zero padding whose only
//!    reader is a convolution: the engine folds it into the convolution's own padding (tract does; measured
//!    0 ms in whole-network runs), so the padded tensor is never made. With tract's models on this machine, a
//!    channel concat read only by 1×1 convolutions is `fused:<first of them>` as well: tract computes those one
//!    concatenated part at a time and never builds the concat ([`Tract`]'s `unbuilt_concats`). So is a residual add
//!    that tract computes inside the matrix product of the ungrouped convolution feeding it
//!    ([`Tract`]'s `residual_adds`): the convolution's prediction then includes the add's, and a calibrated estimate
//!    adds what such a fused add costs beyond that ([`calibration`]).
//! 3. The method's predictor (a trained regressor, a baseline formula, a nearest measured sample).
//! 4. `analytic:bandwidth`: a cheap memory-bound layer with no predictor (activation, batch norm, add, multiply,
//!    concat, padding, cropping, global pooling: a few operations per element at most) takes the time to read its
//!    inputs and write its output at the device's memory bandwidth (from its device profile), when known.
//! 5. `uncovered`: anything else gets no number (null), is listed under `uncovered` with its share of the
//!    network's FLOPs, and a note says the total latency is a lower bound. Never a silent 0.
//!
//! A metric the device has no model for (power on a machine without a power sensor) is null with a note, never 0.

pub mod arena;
pub mod baseline;
pub mod calibration;
pub mod memory;
pub mod outliers;
pub mod passes;
pub mod render;
pub mod request;
pub mod structure;
pub mod validation;
pub mod zero_shot;

use crate::collect::profile::DeviceProfile;
use crate::engine::rules::{EngineRules, Generic, Tract};
use crate::error::{Error, Location, Result};
use crate::layer::{LayerConfig, LayerCost, LayerError, LayerType, Shape};
use crate::metric::Metric;
use crate::network::Network;
use crate::train::ModelStore;
use crate::units::MIB;
use baseline::{Roofline, Templates};
use calibration::{Calibration, Correction};
use memory::BYTES_PER_ELEMENT;
pub use passes::AnsweredBy;
use serde::{Serialize, Serializer};
use std::path::Path;

/// The device estimated for when none is named: the machine perfmodel runs on, measured with tract.
pub const DEFAULT_DEVICE: &str = "local";

/// How single layers are predicted.
#[derive(Debug)]
pub enum Method {
    /// The device's trained per-(layer type, metric) regressors.
    Learned(ModelStore),
    /// Paleo's analytic roofline from the device's peak numbers.
    Paleo(Roofline),
    /// The nearest measured sample of the same layer type.
    Template(Templates),
}

impl Method {
    /// Names accepted on the command line, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["learned", "paleo", "template"];

    pub fn name(&self) -> &'static str {
        match self {
            Method::Learned(_) => "learned",
            Method::Paleo(_) => "paleo",
            Method::Template(_) => "template",
        }
    }

    /// Whether at least one layer type has a model for `metric`.
    fn covers(&self, metric: Metric) -> bool {
        match self {
            Method::Learned(store) => LayerType::ALL.iter().any(|&t| store.predictor(t, metric).is_some()),
            Method::Paleo(_) => metric == Metric::Latency,
            Method::Template(templates) => templates.covers(metric),
        }
    }

    /// Whether the models describe tract (the conv2d memory model was trained on tract's packed weights), so
    /// that tract's graph rewrites shape the estimate too. On any machine: a rewrite such as ConcatThenEinsum
    /// is decided on the graph, not on the instruction set (models trained on a core with AVX-512 FP16 hold
    /// on cores without it).
    fn models_tract(&self) -> bool {
        match self {
            Method::Learned(store) => store
                .predictor(LayerType::Conv2d, Metric::Memory)
                .and_then(|p| p.known_part())
                .is_some_and(|k| k.knows_tract()),
            _ => false,
        }
    }

    /// `output` and `cost` are the layer's output shape and cost as the network's analysis inferred them.
    fn predict(
        &self,
        config: &LayerConfig,
        output: &Shape,
        cost: &LayerCost,
        cache: bool,
    ) -> std::result::Result<Option<passes::Prediction<'_>>, LayerError> {
        let layer_type = config.layer_type();
        match self {
            Method::Learned(store) => {
                let Some(latency) = store.predictor(layer_type, Metric::Latency) else { return Ok(None) };
                let features = config.features_of(output, *cost)?;
                let predict = || {
                    let other = |metric| store.predictor(layer_type, metric).map(|p| p.predict(&features));
                    let memory = store.predictor(layer_type, Metric::Memory);
                    LearnedPrediction {
                        latency_ms: latency.predict(&features),
                        power_w: other(Metric::Power),
                        memory_mib: memory.map(|p| p.predict(&features)),
                        weight_bytes: memory
                            .and_then(|p| p.known_part())
                            .and_then(|k| k.resident_weight_bytes(&features)),
                    }
                };
                let p = if cache { cached_prediction(store.id(), layer_type, &features, predict) } else { predict() };
                Ok(Some(passes::Prediction {
                    latency_ms: p.latency_ms,
                    power_w: p.power_w,
                    memory_mib: p.memory_mib,
                    weight_bytes: p.weight_bytes,
                    name: latency.method().into(),
                }))
            }
            Method::Paleo(roofline) if layer_type != LayerType::Unsupported => Ok(Some(passes::Prediction {
                latency_ms: roofline.latency_ms(cost),
                power_w: None,
                memory_mib: None,
                weight_bytes: None,
                name: "paleo".into(),
            })),
            Method::Paleo(_) => Ok(None),
            Method::Template(templates) if templates.has(layer_type) => {
                let features = config.features_of(output, *cost)?;
                Ok(templates.nearest(layer_type, &features).map(|m| passes::Prediction {
                    latency_ms: m.latency_ms,
                    power_w: m.power_w,
                    memory_mib: m.workspace_mib.map(|w| w + footprint_mib(cost)),
                    weight_bytes: None,
                    name: format!("template:{}", m.key).into(),
                }))
            }
            Method::Template(_) => Ok(None),
        }
    }
}

/// What the trained models of a store answer for one layer's features.
#[derive(Debug, Clone, Copy)]
struct LearnedPrediction {
    latency_ms: f64,
    power_w: Option<f64>,
    memory_mib: Option<f64>,
    weight_bytes: Option<u64>,
}

/// Entries the per-thread prediction cache holds before it starts over: at about 400 bytes an entry (the
/// features are the key) a few megabytes per thread, and far more layer configurations than a NAS loop's
/// population has in flight.
const LAYER_CACHE_LIMIT: usize = 1 << 14;

/// `predict()` for a layer of `layer_type` with these features under the store `store_id`, remembered per
/// thread. The models are pure functions of the features, so a remembered answer is the answer, bit for bit.
/// A NAS loop mutates one block of a candidate at a time: most layers it asks about were asked before, and a
/// lookup (hashing ~40 numbers) costs a fraction of walking a 190,000-node forest. Per thread, so an estimator
/// shared by several threads takes no lock.
fn cached_prediction(
    store_id: u64,
    layer_type: LayerType,
    features: &[f64],
    predict: impl FnOnce() -> LearnedPrediction,
) -> LearnedPrediction {
    // The key: the store, the layer type, then the features' bits. Looked up as a slice built on the stack, so
    // a hit allocates nothing; only a new entry stores its key.
    thread_local! {
        static CACHE: std::cell::RefCell<rustc_hash::FxHashMap<Vec<u64>, LearnedPrediction>> =
            std::cell::RefCell::new(rustc_hash::FxHashMap::default());
    }
    let mut buffer = [0u64; 66];
    let mut heap = Vec::new();
    let width = features.len() + 2;
    let key: &mut [u64] = if width <= buffer.len() {
        &mut buffer[..width]
    } else {
        heap.resize(width, 0);
        &mut heap
    };
    key[0] = store_id;
    key[1] = layer_type as u64;
    for (k, x) in key[2..].iter_mut().zip(features) {
        *k = x.to_bits();
    }
    crate::engine::packing::cached(&CACHE, &*key, LAYER_CACHE_LIMIT, predict)
}

/// Inputs, output and weights of a layer (f32), MiB.
fn footprint_mib(cost: &LayerCost) -> f64 {
    ((cost.input_elems + cost.output_elems + cost.weight_elems) * BYTES_PER_ELEMENT) as f64 / MIB
}

/// Estimates whole networks for one device. Built once (loading models is the slow part), then reused; safe to
/// share between threads.
#[derive(Debug)]
pub struct Estimator {
    device: String,
    method: Method,
    memory_bandwidth_gbs: Option<f64>,
    has_power: bool,
    has_memory: bool,
    /// The device's whole-network calibration, when it has one fitted for these models.
    calibration: Option<Calibration>,
    /// Why a calibration on disk is not applied.
    calibration_note: Option<String>,
    /// The machine the learned models were trained on, when it is not this one ([`ModelStore::trained_elsewhere`]).
    trained_elsewhere: Option<String>,
    /// Whether learned per-layer predictions are remembered per thread ([`Estimator::with_layer_cache`]).
    layer_cache: bool,
    /// What the engine keeps per layer besides weights, by kind ([`structure`]): counted as resident.
    structure: Option<structure::EngineStructure>,
    /// The engine rules the estimate follows ([`Estimator::rules`]).
    rules: &'static dyn EngineRules,
}

impl Estimator {
    /// The learned method with the trained models of `device` under `models_dir`, calibrated by
    /// `<models_dir>/<device>/calibration.json` when it was fitted for these models ([`calibration`]).
    pub fn open(models_dir: &Path, device: &str) -> Result<Estimator> {
        let store = ModelStore::open(models_dir, device)?;
        let fingerprint = calibration::models_fingerprint(store.manifest());
        let trained_elsewhere = store.trained_elsewhere();
        let mut estimator = Estimator::new(device, Method::Learned(store));
        estimator.trained_elsewhere = trained_elsewhere;
        let calibration = match Calibration::read(models_dir, device)? {
            Some(calibration::Stored::Outdated { format }) => {
                estimator.calibration_note = Some(format!(
                    "{} has format {format}, this perfmodel reads format {} and does not apply it: rerun 'perfmodel \
                     calibrate --device {device}'",
                    Calibration::path(models_dir, device).display(),
                    calibration::CALIBRATION_FORMAT
                ));
                return Ok(estimator);
            }
            Some(calibration::Stored::Current(c)) => Some(c),
            None => None,
        };
        if let Some(c) = calibration {
            if c.method == "learned" && c.models_fingerprint == fingerprint {
                if !calibration::rules_current(c.estimator_rules, estimator.rules.name()) {
                    estimator.calibration_note = Some(format!(
                        "{} was fitted under older estimator rules ({} of {}: the engine's fusions the estimate \
                         follows, and since rules 2 the engine's per-layer structure measured with it); it is \
                         applied, but its terms were fitted on what those rules counted: rerun 'perfmodel calibrate \
                         --device {device}' on the machine its models were trained on",
                        Calibration::path(models_dir, device).display(),
                        c.estimator_rules,
                        calibration::ESTIMATOR_RULES
                    ));
                }
                estimator.structure = c.engine_structure.clone();
                estimator.calibration = Some(c);
            } else {
                estimator.calibration_note = Some(format!(
                    "{} was fitted for other models (retrained since) and is not applied: rerun 'perfmodel calibrate --device {device}'",
                    Calibration::path(models_dir, device).display()
                ));
            }
        }
        Ok(estimator)
    }

    /// The same estimator without its whole-network calibration (raw sums of the layer predictions), nor the
    /// engine structure measured with it.
    pub fn without_calibration(mut self) -> Estimator {
        self.calibration = None;
        self.calibration_note = None;
        self.structure = None;
        self
    }

    /// The same estimator for this machine's memory: learned memory models count the weights as tract packs them
    /// here ([`ModelStore::packing_for_this_machine`]); for models scaled to this machine (zero-shot).
    pub fn packing_for_this_machine(mut self) -> Estimator {
        self.method = match self.method {
            Method::Learned(store) => Method::Learned(store.packing_for_this_machine()),
            other => other,
        };
        self
    }

    /// Count what the engine keeps per layer besides weights ([`structure`]) as resident memory.
    pub fn with_engine_structure(mut self, structure: Option<structure::EngineStructure>) -> Estimator {
        self.structure = structure;
        self
    }

    /// Whether the learned models describe tract here (see `Method::models_tract`): what the engine structure
    /// is measured for.
    pub fn models_tract(&self) -> bool {
        self.method.models_tract()
    }

    /// The machine the learned models were trained on, when it is not this one: their latency does not describe
    /// this machine, and their nominal speed-probe time is another machine's (`validate` and `--at-current-speed`
    /// do not compare this machine's probe with it).
    pub fn trained_elsewhere(&self) -> Option<&str> {
        self.trained_elsewhere.as_deref()
    }

    /// The calibration applied to every estimate, if any.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    pub fn new(device: &str, method: Method) -> Estimator {
        let method_models_tract = method.models_tract();
        // Models measured with ONNX Runtime follow its rules.
        let ort_rules: Option<&'static dyn EngineRules> = match &method {
            Method::Learned(store) => {
                let manifest = store.manifest();
                manifest
                    .engine
                    .as_deref()
                    .and_then(|e| crate::engine::rules::OnnxRuntime::for_engine(e, manifest.nchwc_block))
                    .map(|r| r as &'static dyn EngineRules)
            }
            _ => None,
        };
        let memory_bandwidth_gbs = match &method {
            Method::Paleo(r) => Some(r.memory_bandwidth_gbs),
            _ => None,
        };
        Estimator {
            device: device.to_string(),
            has_power: method.covers(Metric::Power),
            has_memory: method.covers(Metric::Memory),
            method,
            memory_bandwidth_gbs,
            calibration: None,
            calibration_note: None,
            trained_elsewhere: None,
            layer_cache: true,
            structure: None,
            rules: match ort_rules {
                Some(rules) => rules,
                None if method_models_tract => &Tract,
                None => &Generic,
            },
        }
    }

    /// Follow another engine's rules (by default tract's when the learned models describe tract, else
    /// [`Generic`]): the seam a second engine's models plug into.
    pub fn with_rules(mut self, rules: &'static dyn EngineRules) -> Estimator {
        self.rules = rules;
        self
    }

    /// Remember the learned models' answer for each layer configuration, per thread (on by default). The
    /// answers are the same either way; off, every layer is predicted afresh (what a benchmark of the models'
    /// speed wants).
    pub fn with_layer_cache(mut self, on: bool) -> Estimator {
        self.layer_cache = on;
        self
    }

    /// The estimator `perfmodel estimate --method NAME` uses: the method's inputs come from `dirs`, and the
    /// device profile (when `collectors/<device>.toml` exists) supplies the memory bandwidth for cheap layers
    /// and, for paleo, the peak numbers.
    pub fn open_method(method: &str, device: &str, dirs: &crate::Dirs) -> Result<Estimator> {
        let profile_file = dirs.collectors.join(format!("{device}.toml"));
        let profile = if profile_file.is_file() { Some(DeviceProfile::load(&dirs.collectors, device)?) } else { None };
        let bandwidth = profile.as_ref().and_then(|p| p.memory_bandwidth_gbs);
        let estimator = match method {
            "learned" => Estimator::open(&dirs.models, device)?,
            "template" => Estimator::new(device, Method::Template(Templates::load(&dirs.data, device)?)),
            "paleo" => {
                let missing = |field: &str| Error::Device {
                    device: device.to_string(),
                    message: format!("the paleo baseline needs '{field}' in {}", profile_file.display()),
                };
                let profile = match profile {
                    Some(p) => p,
                    // Not there: the profile loader's error lists the known devices.
                    None => DeviceProfile::load(&dirs.collectors, device)?,
                };
                let roofline = Roofline {
                    peak_gflops: profile.peak_gflops.ok_or_else(|| missing("peak_gflops"))?,
                    memory_bandwidth_gbs: profile
                        .memory_bandwidth_gbs
                        .ok_or_else(|| missing("memory_bandwidth_gbs"))?,
                };
                Estimator::new(device, Method::Paleo(roofline))
            }
            other => {
                return Err(Error::Invalid(format!(
                    "unknown estimation method '{other}' (known: {})",
                    Method::NAMES.join(", ")
                )))
            }
        };
        Ok(match bandwidth {
            Some(gbs) => estimator.with_memory_bandwidth(gbs),
            None => estimator,
        })
    }

    /// The same device predicted another way.
    pub fn with_method(self, method: Method) -> Estimator {
        let bandwidth = self.memory_bandwidth_gbs;
        // A calibration belongs to the method it was fitted for; another method starts uncalibrated.
        let mut e = Estimator::new(&self.device, method).with_layer_cache(self.layer_cache);
        e.memory_bandwidth_gbs = e.memory_bandwidth_gbs.or(bandwidth);
        e
    }

    /// The device's memory bandwidth, for the analytic cost of cheap layers that have no predictor.
    pub fn with_memory_bandwidth(mut self, gbs: f64) -> Estimator {
        self.memory_bandwidth_gbs = Some(gbs);
        self
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The engine rules the estimate follows: tract's when the learned models describe tract
    /// (`Method::models_tract`), else the generic ones.
    pub fn rules(&self) -> &'static dyn EngineRules {
        self.rules
    }

    /// The method's answer for one layer, remembered per thread when the layer cache is on.
    fn predict(
        &self,
        config: &LayerConfig,
        output: &Shape,
        cost: &LayerCost,
    ) -> std::result::Result<Option<passes::Prediction<'_>>, LayerError> {
        self.method.predict(config, output, cost, self.layer_cache)
    }

    /// Estimate a network at its own batch size: the engine's rules make a plan of it, then the passes predict
    /// the layers that run and combine latency, energy and memory over the plan ([`passes`]).
    pub fn estimate(&self, net: &Network) -> Result<Estimate> {
        let Passes { answers, uncovered, latency, energy, missing_power, memory } = self.passes(net)?;
        let correction = self.calibration.as_ref().map(|c| c.correction);
        let layers: Vec<LayerEstimate> = answers
            .into_iter()
            .enumerate()
            .map(|(i, answer)| LayerEstimate {
                name: net.layers[i].name.clone(),
                layer_type: net.layers[i].op.layer_type(),
                latency_ms: latency[i],
                power_w: answer.power_w,
                energy_mj: energy[i],
                memory_mib: memory.layer_mib[i],
                in_use_mib: memory.in_use_bytes[i].map(|b| b as f64 / MIB),
                predictor: answer.by.named(net),
            })
            .collect();
        let type_of = |i: usize| layers[i].layer_type;
        let total =
            passes::totals(type_of, &latency, &energy, &memory, self.calibration.as_ref(), self.has_power, |i| {
                layers[i].name.clone()
            });
        let notes = self.notes(&uncovered, missing_power, memory.missing);
        Ok(Estimate {
            network: net.name.clone(),
            device: self.device.clone(),
            batch_size: net.batch_size,
            method: self.method.name(),
            total,
            layers,
            uncovered,
            notes,
            calibration: correction,
            zero_shot: None,
            zero_shot_others: Vec::new(),
        })
    }

    /// The totals of [`Estimator::estimate`] (the same numbers) and how many layers no predictor covers, without
    /// the per-layer rows and the notes: what a NAS loop asks of the C ABI thousands of times a second.
    pub fn estimate_totals(&self, net: &Network) -> Result<(Totals, usize)> {
        let Passes { uncovered, latency, energy, memory, .. } = self.passes(net)?;
        let type_of = |i: usize| net.layers[i].op.layer_type();
        let total =
            passes::totals(type_of, &latency, &energy, &memory, self.calibration.as_ref(), self.has_power, |i| {
                net.layers[i].name.clone()
            });
        Ok((total, uncovered.len()))
    }

    /// The plan and the passes over it that every estimate runs.
    fn passes(&self, net: &Network) -> Result<Passes<'_>> {
        let analysis = net.analyze()?;
        let mut plan = self.rules.plan(net, &analysis);
        let (answers, uncovered) = passes::predict(self, net, &analysis, &mut plan)?;
        let correction = self.calibration.as_ref().map(|c| c.correction);
        let layout = match &self.method {
            Method::Learned(store) => store.manifest().reorder_ms_per_mib.map(|rate| (self.rules, rate)),
            _ => None,
        };
        let latency = passes::latency(net, &analysis, &plan, &answers, correction, layout);
        let (energy, missing_power) = if self.has_power {
            passes::energy(&latency, &answers)
        } else {
            (crate::filled::filled(None, latency.len()), 0)
        };
        let memory = passes::memory(net, &analysis, &plan, &answers, self.rules, self.structure.as_ref());
        Ok(Passes { answers, uncovered, latency, energy, missing_power, memory })
    }

    fn notes(&self, uncovered: &[Uncovered], missing_power: usize, missing_memory: usize) -> Vec<String> {
        let mut notes = Vec::new();
        let how = format!("device '{}' (method {})", self.device, self.method.name());
        if !uncovered.is_empty() {
            let share: f64 = uncovered.iter().map(|u| u.flops_share).sum();
            let names: Vec<&str> = uncovered.iter().map(|u| u.name.as_str()).collect();
            notes.push(format!(
                "{} layer(s) have no predictor for {how} and are not counted, so total latency is a lower bound: {} ({:.1}% of the network's FLOPs)",
                uncovered.len(),
                names.join(", "),
                100.0 * share
            ));
        }
        if !self.has_power {
            notes.push(format!("{how} has no power model: power and energy are null"));
        } else if missing_power > 0 {
            notes.push(format!(
                "{missing_power} layer(s) have no power prediction for {how}: their energy is null and the total energy leaves them out"
            ));
        }
        if let Some(note) = &self.calibration_note {
            notes.push(note.clone());
        }
        if let Method::Learned(store) = &self.method {
            let held: Vec<String> = store
                .manifest()
                .models
                .iter()
                .filter(|m| m.held_out.is_some())
                .map(|m| format!("{}/{}", m.layer_type, m.metric))
                .collect();
            if !held.is_empty() {
                notes.push(format!(
                    "{how} has models trained with rows held out (`train --holdout`, an evaluation): {}; retrain \
                     without --holdout for the device's best models",
                    held.join(", ")
                ));
            }
        }
        if let Some(machine) = &self.trained_elsewhere {
            notes.push(format!(
                "device '{}' has models trained on another machine ({machine}); this machine is {}, {}: its cores \
                 may run at another speed and tract picks other kernels or blocks by other caches, so the latency \
                 can be far off ('perfmodel devices' shows which devices were trained here; or collect and train \
                 this machine as a device of its own)",
                self.device,
                crate::engine::packing::host_isa(),
                crate::engine::packing::host_caches()
            ));
        }
        if !self.has_memory {
            notes.push(format!(
                "{how} has no memory model: layer memory and peak memory count tensors and weights only, without workspace"
            ));
        } else if missing_memory > 0 {
            notes.push(format!(
                "{missing_memory} layer(s) have no memory prediction for {how}: their workspace is not counted"
            ));
        }
        notes
    }
}

fn layer_error(net: &Network, i: usize, e: LayerError) -> Error {
    let mut location = Location::file(format!("network '{}'", net.name)).layer(net.layers[i].name.clone(), i);
    if let Some(field) = e.field {
        location = location.field(field);
    }
    Error::spec(location, e.message)
}

fn layer_type_name<S: Serializer>(t: &LayerType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(t.as_str())
}

/// A whole-network estimate (the JSON of `perfmodel estimate --format json` and of the C ABI).
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    pub network: String,
    pub device: String,
    pub batch_size: usize,
    pub method: &'static str,
    pub total: Totals,
    pub layers: Vec<LayerEstimate>,
    pub uncovered: Vec<Uncovered>,
    /// Why some numbers are null or partial.
    pub notes: Vec<String>,
    /// The whole-network calibration applied to the layer latencies and the peak memory, null when none was.
    pub calibration: Option<Correction>,
    /// The speed probes and factors when the latencies were scaled from another machine's models
    /// ([`zero_shot`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_shot: Option<zero_shot::ZeroShot>,
    /// The other source devices' scalings whose estimates were combined with this one's, layer by layer, when
    /// zero-shot on a machine no device was made on; absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zero_shot_others: Vec<zero_shot::ZeroShot>,
}

impl Estimate {
    /// The estimate at another speed of the machine: the latency (and energy) of the layers whose type follows
    /// the speed probe ([`crate::collect::speed::follows_probe`]) multiplied by `ratio` (the probe's time now
    /// over the nominal time the models were trained at), the totals adjusted, and `note` added. Learned
    /// estimates are latencies at nominal speed; this gives the figures of the moment on a machine whose speed
    /// drifts.
    pub fn at_machine_speed(mut self, ratio: f64, note: String) -> Estimate {
        let (mut latency_change, mut energy_change) = (0.0, 0.0);
        for layer in self.layers.iter_mut().filter(|l| crate::collect::speed::follows_probe(l.layer_type)) {
            if let Some(ms) = layer.latency_ms {
                latency_change += ms * (ratio - 1.0);
                layer.latency_ms = Some(ms * ratio);
            }
            if let Some(mj) = layer.energy_mj {
                energy_change += mj * (ratio - 1.0);
                layer.energy_mj = Some(mj * ratio);
            }
        }
        self.total.latency_ms += latency_change;
        if let Some(total) = self.total.energy_mj.as_mut() {
            *total += energy_change;
        }
        self.notes.push(note);
        self
    }

    /// The estimate brought to this machine by `zero_shot`: every layer's latency scaled by the factor of its
    /// class in `classes` (one per layer, [`zero_shot::layer_classes`]), the probes recorded. Power and energy
    /// become null: the power models are the other machine's.
    pub fn scaled_by(mut self, zero_shot: &zero_shot::ZeroShot, classes: &[zero_shot::ProbeClass]) -> Estimate {
        let mut latency_change = 0.0;
        let had_power = self.layers.iter().any(|l| l.power_w.is_some());
        for (layer, class) in self.layers.iter_mut().zip(classes) {
            let f = zero_shot.factor(*class);
            if let Some(ms) = layer.latency_ms {
                latency_change += ms * (f - 1.0);
                layer.latency_ms = Some(ms * f);
            }
            layer.power_w = None;
            layer.energy_mj = None;
        }
        self.total.latency_ms += latency_change;
        self.total.energy_mj = None;
        if had_power {
            self.notes.push(format!(
                "power and energy are null: device '{}''s power models describe its own machine, not this one",
                zero_shot.source_device
            ));
        }
        self.zero_shot = Some(zero_shot.clone());
        self
    }

    /// Each layer's latency combined with the same layer's in `others` (estimates of the same network by other
    /// source devices): the geometric mean of those that have one (the arithmetic mean where one is 0), the total
    /// moved by as much as the layers.
    pub fn combine_latency(&mut self, others: &[Estimate]) {
        let mut latency_change = 0.0;
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let values: Vec<f64> = std::iter::once(layer.latency_ms)
                .chain(others.iter().map(|o| o.layers.get(i).and_then(|l| l.latency_ms)))
                .flatten()
                .filter(|v| v.is_finite())
                .collect();
            let (Some(ms), false) = (layer.latency_ms, values.is_empty()) else { continue };
            let n = values.len() as f64;
            let combined = match values.iter().all(|&v| v > 0.0) {
                true => (values.iter().map(|v| v.ln()).sum::<f64>() / n).exp(),
                false => values.iter().sum::<f64>() / n,
            };
            latency_change += combined - ms;
            layer.latency_ms = Some(combined);
        }
        self.total.latency_ms += latency_change;
    }

    /// Layers that run (neither free views nor fused into their producer) and have a latency: the layers the
    /// calibration's per-layer terms count.
    pub fn executing_layers(&self) -> usize {
        self.executing().count()
    }

    /// The executing layers that are conv2d, depthwise_conv2d or dense (the calibration's weighted layers).
    pub fn weighted_layers(&self) -> usize {
        self.executing().filter(|l| l.layer_type.is_weighted()).count()
    }

    fn executing(&self) -> impl Iterator<Item = &LayerEstimate> {
        self.layers.iter().filter(|l| l.predictor.runs() && l.latency_ms.is_some())
    }
}

/// What [`Estimator::passes`] computes for one network, layer by layer.
struct Passes<'a> {
    answers: Vec<passes::Answer<'a>>,
    uncovered: Vec<Uncovered>,
    latency: Vec<Option<f64>>,
    energy: Vec<Option<f64>>,
    missing_power: usize,
    memory: passes::MemoryPass,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Sum of the layer latencies that are known (a lower bound when layers are uncovered).
    pub latency_ms: f64,
    /// Σ latency × power; null when the device has no power model.
    pub energy_mj: Option<f64>,
    /// From the liveness walk.
    pub peak_memory_mib: f64,
    /// The layer running when memory peaks in the liveness walk (null for a network without executing layers).
    pub peak_memory_layer: Option<String>,
    /// What stays allocated for the whole run (no calibration term applies to it): the engine's weights and plan
    /// tables, its per-layer structure when the device's calibration measured it ([`structure`]; not with
    /// `--uncalibrated`), and the input. `perfmodel bench` measures the same before the first run.
    pub resident_memory_mib: f64,
    /// The paper's rule: sum of the two largest layer memory estimates.
    pub memory_two_largest_mib: f64,
    /// The paper's rule: twice the mean layer memory estimate.
    pub memory_two_mean_mib: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerEstimate {
    pub name: String,
    #[serde(rename = "type", serialize_with = "layer_type_name")]
    pub layer_type: LayerType,
    /// Null when no predictor covers the layer.
    pub latency_ms: Option<f64>,
    pub power_w: Option<f64>,
    pub energy_mj: Option<f64>,
    /// Memory while the layer runs: inputs, output, weights and workspace (0 for layers that do not execute).
    pub memory_mib: f64,
    /// The whole network's memory in use while the layer runs, from the liveness walk before calibration: all
    /// weights, the live tensors and the layer's workspace. Null for layers that do not execute.
    pub in_use_mib: Option<f64>,
    /// What answered: a trained method (`ert`, `knn`, ...), `paleo`, `free`, `fused:<layer>`, `analytic:bandwidth`
    /// or `uncovered`; printed as those strings.
    pub predictor: AnsweredBy,
}

/// A layer nothing could predict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Uncovered {
    pub name: String,
    #[serde(rename = "type", serialize_with = "layer_type_name")]
    pub layer_type: LayerType,
    pub flops: u64,
    /// Fraction (0..1) of the network's FLOPs.
    pub flops_share: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::Op;

    /// conv (same) → batch norm → relu → max pool → flatten → dense → softmax on a 3×8×8 input; shared with the
    /// integration tests.
    const TINY: &str = include_str!("../../tests/data/tiny_net.json");

    fn paleo() -> Estimator {
        Estimator::new("dev", Method::Paleo(Roofline { peak_gflops: 1.0, memory_bandwidth_gbs: 1.0 }))
    }

    #[test]
    fn zero_padding_folds_into_a_convolution_but_not_into_a_pool() {
        let net = Network::from_json_str(
            r#"{"name": "pads", "input_shape": [3, 16, 16], "layers": [
                {"name": "pad1", "type": "zero_padding2d", "padding": [1, 1, 1, 1]},
                {"name": "conv", "type": "conv2d", "filters": 8, "kernel": [3, 3]},
                {"name": "pad2", "type": "zero_padding2d", "padding": [1, 1, 1, 1]},
                {"name": "pool", "type": "max_pool2d", "pool_size": [3, 3]}]}"#,
            "pads.json",
        )
        .unwrap();
        let e = paleo().estimate(&net).unwrap();
        assert_eq!(e.layers[0].predictor, "fused:conv");
        assert_eq!((e.layers[0].latency_ms, e.layers[0].memory_mib), (Some(0.0), 0.0));
        assert_eq!(e.layers[2].predictor, "paleo");
        assert!(e.layers[2].latency_ms.unwrap() > 0.0);
        assert_eq!(e.executing_layers(), 3);
    }

    /// An engine that fuses nothing: every layer but the views runs as a kernel of its own.
    #[derive(Debug)]
    struct Unfused;

    impl EngineRules for Unfused {
        fn name(&self) -> &'static str {
            "unfused"
        }
        fn kernel_takes_epilogue(&self, _: &Op) -> bool {
            false
        }
    }

    #[test]
    fn the_estimate_follows_the_rules_of_the_engine_it_is_given() {
        let net = Network::from_json_str(TINY, "tiny.json").unwrap();
        let generic = paleo().estimate(&net).unwrap();
        let unfused = paleo().with_rules(&Unfused).estimate(&net).unwrap();
        let by_name = |e: &Estimate, n: &str| e.layers.iter().find(|l| l.name == n).unwrap().clone();
        assert_eq!(by_name(&generic, "bn").predictor, "fused:c1");
        for name in ["bn", "r"] {
            let layer = by_name(&unfused, name);
            assert_eq!(layer.predictor, "paleo");
            assert!(layer.latency_ms.unwrap() > 0.0 && layer.memory_mib > 0.0, "{layer:?}");
        }
        assert_eq!(by_name(&unfused, "f").predictor, "free");
        assert_eq!(unfused.executing_layers(), generic.executing_layers() + 2);
        assert!(unfused.total.latency_ms > generic.total.latency_ms);
    }

    #[test]
    fn estimator_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Estimator>();
    }

    #[test]
    fn the_engine_s_structure_is_resident_for_every_layer_that_runs_or_is_fused() {
        let net = Network::from_json_str(TINY, "tiny.json").unwrap();
        let kib = |k: f64| k * 1024.0;
        let table = structure::EngineStructure {
            engine: "test".to_string(),
            bytes_per_layer: [
                ("conv2d:lazy", 16.0),
                (structure::FUSED_BATCH_NORM, 4.0),
                (structure::FUSED, 2.0),
                ("max_pool2d", 1.0),
                ("dense", 8.0),
                ("activation", 0.5),
                ("batch_norm", 100.0),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), kib(v)))
            .collect(),
        };
        let plain = paleo().estimate(&net).unwrap();
        let measured = paleo().with_engine_structure(Some(table)).estimate(&net).unwrap();
        // c1 (a lazy im2col 3×3), its folded batch norm and fused ReLU, the pool, the dense layer and the softmax;
        // the flatten is free, and no batch norm runs on its own.
        let extra = kib(16.0 + 4.0 + 2.0 + 1.0 + 8.0 + 0.5) / MIB;
        let resident = measured.total.resident_memory_mib - plain.total.resident_memory_mib;
        assert!((resident - extra).abs() < 1e-9, "{resident} MiB more resident, expected {extra}");
        // Resident for the whole run: every step holds it, the peak too.
        for (layer, before) in measured.layers.iter().zip(&plain.layers) {
            if let (Some(a), Some(b)) = (layer.in_use_mib, before.in_use_mib) {
                assert!((a - b - extra).abs() < 1e-9, "{}: {a} vs {b}", layer.name);
            }
        }
        assert!((measured.total.peak_memory_mib - plain.total.peak_memory_mib - extra).abs() < 1e-9);
        // Without a structure: the weights of the layers that run (the folded batch norm's are in c1's), the input.
        let costs = net.analyze().unwrap().costs;
        let weights: u64 = [0, 5].iter().map(|&i| costs[i].weight_elems * BYTES_PER_ELEMENT).sum();
        let input = 3 * 8 * 8 * BYTES_PER_ELEMENT;
        assert!((plain.total.resident_memory_mib - (weights + input) as f64 / MIB).abs() < 1e-9, "{plain:?}");
    }

    #[test]
    fn paleo_equals_its_formula_and_rules_apply() {
        let net = Network::from_json_str(TINY, "tiny.json").unwrap();
        let e = paleo().estimate(&net).unwrap();
        let by_name = |n: &str| e.layers.iter().find(|l| l.name == n).unwrap();
        // c1 by hand: output 4x8x8 = 256, weights 3*3*3*4 + 4 = 112, input 192;
        // FLOPs 2*256*27 + 256 = 14080, bytes (192 + 112 + 256) * 4 = 2240; at 1 GFLOP/s and 1 GB/s:
        let c1 = by_name("c1");
        assert!((c1.latency_ms.unwrap() - (14080.0 + 2240.0) / 1e6).abs() < 1e-12, "{c1:?}");
        assert_eq!(c1.predictor, "paleo");
        assert_eq!(by_name("bn").predictor, "fused:c1");
        assert_eq!(by_name("r").predictor, "fused:c1");
        assert_eq!(by_name("f").predictor, "free");
        for l in ["bn", "r", "f"] {
            assert_eq!(by_name(l).latency_ms, Some(0.0));
            assert_eq!(by_name(l).memory_mib, 0.0);
        }
        // p: 64 outputs, 256 FLOPs, (256 + 64) * 4 bytes; d: FLOPs 2*64*10 + 10, (64 + 650 + 10) * 4 bytes;
        // s: 50 FLOPs, 80 bytes.
        let expected = (14080.0 + 2240.0 + 256.0 + 1280.0 + 1290.0 + 2896.0 + 50.0 + 80.0) / 1e6;
        assert!((e.total.latency_ms - expected).abs() < 1e-12, "{} vs {expected}", e.total.latency_ms);
        assert_eq!(e.total.energy_mj, None);
        assert!(e.layers.iter().all(|l| l.power_w.is_none() && l.energy_mj.is_none()));
        assert!(e.notes.iter().any(|n| n.contains("no power model")), "{:?}", e.notes);
        assert!(e.uncovered.is_empty());
    }

    #[test]
    fn fusion_needs_a_single_consumer_and_a_linear_conv() {
        let text = r#"{"name": "branch", "input_shape": [3, 8, 8], "layers": [
            {"name": "c1", "type": "conv2d", "filters": 4, "kernel": [1, 1], "activation": "relu"},
            {"name": "bn", "type": "batch_norm"},
            {"name": "c2", "type": "conv2d", "filters": 4, "kernel": [1, 1]},
            {"name": "r", "type": "activation", "function": "relu"},
            {"name": "sum", "type": "add", "inputs": ["c2", "r"]}]}"#;
        let net = Network::from_json_str(text, "branch.json").unwrap();
        let e = paleo().estimate(&net).unwrap();
        // bn follows a conv with a relu (cannot fold); r reads c2, which also feeds the add (cannot fuse).
        assert_eq!(e.layers[1].predictor, "paleo");
        assert_eq!(e.layers[3].predictor, "paleo");
        assert!(e.layers[3].latency_ms.unwrap() > 0.0);
    }

    #[test]
    fn unsupported_layers_are_uncovered_with_their_share_and_a_note() {
        let net = Network {
            name: "u".into(),
            batch_size: 1,
            input_shape: smallvec::smallvec![3, 8, 8],
            layers: vec![
                crate::network::Layer::new("c", Op::Conv2d(crate::layer::Conv2d::new(4, [3, 3]))),
                crate::network::Layer::new(
                    "odd",
                    Op::Unsupported { op_type: "Odd".into(), output_shape: smallvec::smallvec![4, 6, 6] },
                ),
            ],
        };
        let e = paleo().estimate(&net).unwrap();
        assert_eq!(e.uncovered.len(), 1);
        assert_eq!(e.uncovered[0].name, "odd");
        assert_eq!(e.layers[1].latency_ms, None);
        assert_eq!(e.layers[1].predictor, "uncovered");
        assert!(e.notes[0].contains("lower bound") && e.notes[0].contains("odd"), "{:?}", e.notes);
        assert_eq!(e.total.latency_ms, e.layers[0].latency_ms.unwrap());
    }

    #[test]
    fn json_has_the_contract_keys() {
        let net = Network::from_json_str(TINY, "tiny.json").unwrap();
        let v = serde_json::to_value(paleo().estimate(&net).unwrap()).unwrap();
        for key in ["network", "device", "batch_size", "method", "total", "layers", "uncovered"] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        for key in ["latency_ms", "energy_mj", "peak_memory_mib", "memory_two_largest_mib", "memory_two_mean_mib"] {
            assert!(v["total"].get(key).is_some(), "missing total.{key}");
        }
        for key in ["name", "type", "latency_ms", "power_w", "energy_mj", "memory_mib", "predictor"] {
            assert!(v["layers"][0].get(key).is_some(), "missing layers[].{key}");
        }
        assert_eq!(v["layers"][0]["type"], "conv2d");
        assert!(v["total"]["energy_mj"].is_null());
    }
}
