//! Whole-network calibration of a device's learned estimates.
//!
//! The regressors learn layers measured alone: each one looped hot in cache, with the engine's per-run
//! overhead, in a process that holds only that layer. A whole network differs in ways that are systematic for a
//! device and engine: layers start with colder caches, every node adds the plan's bookkeeping, and the engine
//! keeps per-node state resident for the whole run. That state is measured, not fitted: `perfmodel calibrate`
//! builds probe networks with the engine and stores the bytes per layer of each kind with the calibration
//! ([`super::structure`], [`Calibration::engine_structure`]). The other effects are small per layer but add up
//! over hundreds of layers, so they are fitted once per device from real
//! whole-network runs of the zoo's *training* architectures and calibration-only networks (never the holdout
//! networks that `validate` uses) and applied to every learned estimate:
//!
//! - dense layers: `+ dense_weight_ms_per_mib · (W − dense_weight_floor_mib)` for f32 weights of `W` MiB up to
//!   `dense_weight_limit_mib` (never negative); a layer larger than the core's cache (`dense_cache_mib`) only in
//!   networks larger than `dense_network_min_mib` MiB, counted as f32 weights or as weights and the outputs of
//!   the layers that run (`dense_network_basis`, [`fit_dense_gate`]).
//!   Looped alone, a dense layer finds its weights in cache on every run after the first; in a network the other
//!   layers have evicted them, and a dense layer at a small batch does little but stream its weights. Measured
//!   over the zoo on one device (`local`): the 4-8 MiB classifier heads of the ImageNet CNNs took 1.7-2.4x
//!   their predicted (alone) time inside the networks, the layers of 64 MiB and more about 1x (they miss the
//!   cache looped alone as well). It is a hard limit: a layer above it gets no term, and when the largest size
//!   measured took longer, the limit is that size. This term is fitted on the dense layers' own times in the
//!   runs (an unweighted least-squares line of their extra milliseconds, the limit chosen by the mean relative
//!   error, see [`fit_dense_weights`]), so it does not depend on a network total. Which cache a layer's weights
//!   come from alone and in a network decides it: weights that fit the core's own cache (L2) stay there looped
//!   alone and are evicted by any network's other layers; larger ones stream from the shared cache even alone,
//!   and only a network large enough to evict them from that too slows them down. The zoo's calibration-only
//!   networks (`zoo/calibration/`: DQNs, a CIFAR-10 CNN, MNIST MLPs) have such layers in small networks: on
//!   `local` those beyond L2 in networks of 2.6-9.1 MiB took 0.93-1.35x their alone time in the MLPs and
//!   1.1-2.0x behind convolutions (two calibrations), while the 1-2 MiB layers (within L2) of
//!   mnist_mlp, tabular_mlp and Ciresan's MLP took 2.1-3.3x theirs. The network size is
//!   fitted ([`fit_dense_gate`]) when enough layers support it;
//! - residual adds tract computes inside a convolution's matrix product ([`crate::engine::rules::Tract`]):
//!   `+ residual_add_ms_per_mib · A` on that convolution, for an add output of `A` MiB. Looped alone, the
//!   convolution never has such an add; in a network the product reads the other input while it stores, and
//!   that input, made long before, comes from far away. On one x86 machine (device `zen5`) those convolutions of
//!   ResNet-50/101 v1 and v2 and Inception-ResNet v2 took 0.2-0.6 ms per MiB of add output beyond their predicted
//!   time and the add's, 28-69% over the prediction in all, where their other 1×1 convolutions did not (-18% to
//!   +3%). Fitted on those layers' own times in the runs (least squares through the origin of their extra
//!   milliseconds on the add's MiB), with at least [`MIN_RESIDUAL_ADDS`] of them, else 0; layer norms that
//!   compute the add before them (ONNX Runtime's `SkipLayerNormalization`) get a term of their own, fitted alike
//!   (`norm_add_ms_per_mib`);
//! - latency (with `--network-latency` only): each executing layer's prediction `t` (after the dense term)
//!   becomes `max(0, latency_scale · t + latency_per_layer_ms)`;
//! - peak memory: `+ memory_fixed_mib`, or `+ memory_fixed_mib + memory_per_layer_mib · executing layers +
//!   memory_per_weighted_layer_mib · weighted layers` when those terms predict each network better fitted on
//!   the others (leave-one-out median |error|, [`fit_memory`]; the choice is `memory_terms`). Before the engine's
//!   structure was measured they stood in for it: on device `zen5` they left the zoo at 0.68% left out, and
//!   ShuffleNet, whose grouped convolutions hold more per layer than the zoo's, at -1.7%. With the structure
//!   counted (and batch norms run per channel) the constant alone leaves 0.29% (the per-layer terms 0.49%), and
//!   ShuffleNet -0.16%.
//!
//! The network latency and memory terms are weighted least-squares fits of the *relative* error over the
//! networks, so a 1 ms and a 1 s network count alike. The file (`models/<device>/calibration.json`) keeps the networks and their measurements, and the
//! data hash of the models it was fitted for: after a retrain it no longer applies, and estimates say so.

mod run;

pub use run::{calibrate, refit, zoo_networks, CalibrateOptions};

use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use crate::layer::LayerType;
use crate::train::store::Manifest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// File name inside `models/<device>/`.
pub const CALIBRATION_FILE: &str = "calibration.json";

/// Bumped when the file's meaning changes.
pub const CALIBRATION_FORMAT: u32 = 4;

/// The rules the estimate follows for the engine (see [`crate::engine::rules`] and
/// [`super::structure`]), recorded with a calibration: one fitted under other rules still applies, with a note,
/// since its terms were fitted on what those rules counted. 0: before this was recorded; 1: residual adds inside
/// convolutions, depthwise and grouped convolutions without their batch norm and activation; 2: the engine's
/// per-layer structure measured and counted as resident, batch norms holding a scale and a shift with tract; 3:
/// tract's lazy im2col convolutions hold their input through the product and their padded copy twice while it
/// is made (peak memory only); 4: ONNX Runtime's softmax written into its input and GELU into a tensor of its
/// own, and its graph order wherever no layer runs blocked (peak memory only); 5: ONNX Runtime's swish and GELU
/// run on a blocked convolution's output as it is (no conversion back), and a batch norm of its own runs blocked,
/// taking the activation after it, only on a blocked input (ONNX Runtime only: see [`rules_current`]); 6: ONNX
/// Runtime's blocked convolution takes a residual add only when the add's other input is blocked too, a global
/// pooling runs blocked only on a blocked input, a plain tensor is converted once for all its blocked readers,
/// and a blocked output read by a convolution that reads its input plain is converted back (ONNX Runtime only); 7:
/// ONNX Runtime runs identical weightless layers on the same inputs once (its common-subexpression elimination:
/// NASNet's per-branch ReLUs; ONNX Runtime only).
/// (Residual adds inside products with a constant weight came later without a bump: they change no network
/// without such products, i.e. nothing any calibration of rules 2 was fitted on. Nor did ONNX Runtime's add into
/// the plain convolution on the other side when a blocked one cannot take it: no calibration network has one. Nor
/// did tract's padded lazy im2col taking its known scratch instead of its memory model's answer: on `zen5` it
/// moved the calibration networks' peaks by 0.04 percentage points at most.)
pub const ESTIMATOR_RULES: u32 = 7;

/// Whether a calibration fitted under estimator rules `recorded` counted what the current rules count for the
/// engine whose rules are named `rules` ([`crate::engine::rules::EngineRules::name`]): rules 5 to 7 changed ONNX
/// Runtime's estimates alone, so a calibration of rules 4 to 6 is current for any other engine.
pub fn rules_current(recorded: u32, rules: &str) -> bool {
    recorded == ESTIMATOR_RULES || ((4..ESTIMATOR_RULES).contains(&recorded) && rules != "onnxruntime")
}

use crate::units::MIB;

/// Fewest dense layers the dense-weights term is fitted on; with fewer it stays 0.
pub const MIN_DENSE_LAYERS: usize = 4;

/// One dense layer inside a calibration network: predicted alone, measured in the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLayerPoint {
    pub layer: String,
    /// f32 weights and bias, MiB.
    pub weight_mib: f64,
    pub predicted_ms: f64,
    /// Its time in the network's run (brought to nominal speed like the network's total).
    pub measured_ms: f64,
}

impl DenseLayerPoint {
    /// Whether the point can enter a fit: size and both times finite and positive.
    fn is_usable(&self) -> bool {
        [self.weight_mib, self.predicted_ms, self.measured_ms].iter().all(|v| v.is_finite() && *v > 0.0)
    }
}

/// A convolution that reads the network's input (a stem): predicted alone, measured as its node in the run
/// (brought to nominal speed like the network's total).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputConvPoint {
    pub layer: String,
    /// The f32 input it reads, MiB (the network's input, padded when a padding runs inside it).
    pub input_mib: f64,
    pub predicted_ms: f64,
    pub measured_ms: f64,
}

/// Fewest products with a constant weight the matmul-weights term is fitted on; with fewer it stays 0.
pub const MIN_MATMUL_LAYERS: usize = 8;

/// Fewest fused residual adds the residual-add term is fitted on; with fewer it stays 0.
pub const MIN_RESIDUAL_ADDS: usize = 8;

/// A convolution inside a calibration network that computes a residual add in its product: predicted (with the
/// add's own time, uncalibrated), measured in the network (its node's time and the add's, if tract timed one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResidualAddPoint {
    pub layer: String,
    pub add: String,
    /// The add's output (f32), MiB.
    pub add_mib: f64,
    pub predicted_ms: f64,
    /// Brought to nominal speed like the network's total.
    pub measured_ms: f64,
}

impl ResidualAddPoint {
    fn is_usable(&self) -> bool {
        [self.add_mib, self.predicted_ms, self.measured_ms].iter().all(|v| v.is_finite() && *v > 0.0)
    }
}

/// A layer run in ONNX Runtime's blocked layout that the estimate credits with layout conversions it paid alone
/// but not in the network (see `engine::rules::OnnxRuntime`): the credit and the layer's times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutPoint {
    pub layer: String,
    /// The conversions not paid here, MiB of tensor.
    pub saved_mib: f64,
    /// The time taken off the layer for them, at the model store's rate (at most half the layer's).
    pub saved_ms: f64,
    /// Predicted with them taken off.
    pub predicted_ms: f64,
    /// Brought to nominal speed like the network's total.
    pub measured_ms: f64,
}

impl LayoutPoint {
    fn is_usable(&self) -> bool {
        [self.saved_mib, self.saved_ms, self.predicted_ms, self.measured_ms].iter().all(|v| v.is_finite() && *v > 0.0)
    }
}

/// Fewest layout points the layout-credit scale is fitted on.
const MIN_LAYOUT_LAYERS: usize = 8;

/// Most bytes per layer an engine structure may say a kind holds (either way): a plan node is KiB, not MiB.
pub const MAX_STRUCTURE_BYTES: f64 = 16.0 * MIB;

/// Fewest networks a calibration is fitted on (three memory parameters, and one to spare).
pub const MIN_NETWORKS: usize = 4;

/// What a device's calibration file holds ([`Calibration::read`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    Current(Calibration),
    /// Written by another perfmodel, in this format.
    Outdated {
        format: u32,
    },
}

/// One whole network: what the uncalibrated estimate said and what a real run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    pub network: String,
    /// Layers that execute (neither free nor fused) and have a latency, which the per-layer terms multiply.
    pub executing_layers: usize,
    /// Executing layers that are conv2d, depthwise_conv2d or dense.
    pub weighted_layers: usize,
    pub measured_latency_ms: f64,
    pub predicted_latency_ms: f64,
    pub measured_peak_memory_mib: f64,
    pub predicted_peak_memory_mib: f64,
    /// The network's executing dense layers, for the dense-weights term.
    #[serde(default)]
    pub dense_layers: Vec<DenseLayerPoint>,
    /// The network's convolutions that compute a residual add, for the residual-add term.
    #[serde(default)]
    pub residual_adds: Vec<ResidualAddPoint>,
    /// The network's layer norms that compute the add before them (ONNX Runtime's `SkipLayerNormalization`), for
    /// the norm-add term: predicted as the layer norm and the add, measured as their nodes.
    #[serde(default)]
    pub norm_adds: Vec<ResidualAddPoint>,
    /// The network's executing products with a constant weight (a transformer's projections and feed-forward),
    /// for the matmul-weights term: predicted with a fused add's time, measured as their node and the add's.
    #[serde(default)]
    pub matmul_layers: Vec<DenseLayerPoint>,
    /// The network's convolutions over one pixel (squeeze-excite blocks'), for the one-pixel term: predicted
    /// alone, measured as their node.
    #[serde(default)]
    pub pixel_convs: Vec<DenseLayerPoint>,
    /// The network's convolutions that read its input, for the input term: predicted alone, measured as their
    /// node.
    #[serde(default)]
    pub input_convs: Vec<InputConvPoint>,
    /// The network's layers credited with layout conversions, for the layout-credit scale.
    #[serde(default)]
    pub layout_layers: Vec<LayoutPoint>,
    /// The network's f32 weights and biases, MiB.
    pub weight_mib: f64,
    /// The network's f32 weights and the outputs of the layers that run, MiB ([`NetworkSize`]; 0 in
    /// calibrations that predate it).
    #[serde(default)]
    pub touched_mib: f64,
}

impl CalibrationPoint {
    /// The network's sizes, as the dense term's gate reads them.
    pub fn size(&self) -> NetworkSize {
        NetworkSize { weight_mib: self.weight_mib, touched_mib: self.touched_mib }
    }
}

/// How large a network is, for the dense term's cache gate: what one inference brings through the caches
/// between two runs of one of its layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetworkSize {
    /// Its f32 weights and biases, MiB.
    pub weight_mib: f64,
    /// Its weights and the output tensor of every layer that runs, MiB: all one inference reads as constants
    /// and writes (a layer the engine runs inside another, or a view, writes nothing of its own).
    pub touched_mib: f64,
}

impl NetworkSize {
    /// The sizes of a network with these layer costs, run as `plan` says.
    pub fn of(costs: &[crate::layer::LayerCost], plan: &crate::engine::rules::Plan) -> NetworkSize {
        let weights: u64 = costs.iter().map(|c| c.weight_elems).sum();
        let outputs: u64 = costs.iter().enumerate().filter(|(i, _)| plan.runs(*i)).map(|(_, c)| c.output_elems).sum();
        let mib = |elems: u64| (elems * crate::estimate::memory::BYTES_PER_ELEMENT) as f64 / MIB;
        NetworkSize { weight_mib: mib(weights), touched_mib: mib(weights + outputs) }
    }

    fn on(&self, basis: SizeBasis) -> f64 {
        match basis {
            SizeBasis::Weights => self.weight_mib,
            SizeBasis::Touched => self.touched_mib,
        }
    }
}

/// Which size of a network the dense term's gate compares with `dense_network_min_mib`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeBasis {
    /// Its weights (the only basis before the touched size was recorded).
    #[default]
    Weights,
    /// Its weights and its layers' outputs: a CNN's activations evict a dense head's weights as its weights do.
    Touched,
}

impl SizeBasis {
    fn describe(self) -> &'static str {
        match self {
            SizeBasis::Weights => "of weights",
            SizeBasis::Touched => "of weights and layer outputs",
        }
    }
}

/// The fitted numbers, as applied and reported with an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    pub latency_scale: f64,
    pub latency_per_layer_ms: f64,
    pub memory_fixed_mib: f64,
    pub memory_per_layer_mib: f64,
    /// Added for each weighted executing layer, on top of `memory_per_layer_mib`.
    pub memory_per_weighted_layer_mib: f64,
    /// Added to a dense layer per MiB of its f32 weights above `dense_weight_floor_mib`, when they are at most
    /// `dense_weight_limit_mib`.
    pub dense_weight_ms_per_mib: f64,
    /// Dense weights up to this many MiB stay in cache inside a network too.
    pub dense_weight_floor_mib: f64,
    /// Dense weights above this many MiB missed the cache when measured alone too: no dense term.
    pub dense_weight_limit_mib: f64,
    /// A dense layer with more f32 weights than `dense_cache_mib` gets the term only in a network with more
    /// than this many MiB of f32 weights (0: in every network).
    pub dense_network_min_mib: f64,
    /// What of a network `dense_network_min_mib` measures.
    #[serde(default)]
    pub dense_network_basis: SizeBasis,
    /// The core's own cache (L2) of the machine the calibration ran on, MiB: dense weights up to it stay there
    /// when looped alone.
    pub dense_cache_mib: f64,
    /// Added to a convolution that computes a residual add in its product, per MiB of the add's output.
    #[serde(default)]
    pub residual_add_ms_per_mib: f64,
    /// A product with a constant weight takes this fraction of its prediction more in a network.
    #[serde(default)]
    pub matmul_extra_fraction: f64,
    /// And this much more per MiB of its f32 weights (read from farther than the cache in a network).
    #[serde(default)]
    pub matmul_weight_ms_per_mib: f64,
    /// A convolution over one pixel takes this fraction of its prediction more in a network...
    #[serde(default)]
    pub pixel_conv_extra_fraction: f64,
    /// ... and this much more per MiB of its f32 weights.
    #[serde(default)]
    pub pixel_conv_weight_ms_per_mib: f64,
    /// A convolution that reads the network's input takes this fraction of its prediction more in a network...
    #[serde(default)]
    pub input_conv_extra_fraction: f64,
    /// ... and this much more per MiB of that input.
    #[serde(default)]
    pub input_conv_ms_per_input_mib: f64,
    /// Added to a layer norm that computes the add before it, per MiB of the add's output.
    #[serde(default)]
    pub norm_add_ms_per_mib: f64,
    /// The share of the layout conversions a blocked layer paid alone that a network saves it (ONNX Runtime's
    /// NCHWc layout), on the model store's rate: 1 takes all of them off.
    #[serde(default = "one")]
    pub layout_credit_scale: f64,
}

fn one() -> f64 {
    1.0
}

impl Correction {
    /// No correction: scale 1, every other term 0.
    pub const NONE: Correction = Correction {
        latency_scale: 1.0,
        latency_per_layer_ms: 0.0,
        memory_fixed_mib: 0.0,
        memory_per_layer_mib: 0.0,
        memory_per_weighted_layer_mib: 0.0,
        dense_weight_ms_per_mib: 0.0,
        dense_weight_floor_mib: 0.0,
        dense_weight_limit_mib: 0.0,
        dense_network_min_mib: 0.0,
        dense_network_basis: SizeBasis::Weights,
        dense_cache_mib: 0.0,
        residual_add_ms_per_mib: 0.0,
        matmul_extra_fraction: 0.0,
        matmul_weight_ms_per_mib: 0.0,
        pixel_conv_extra_fraction: 0.0,
        pixel_conv_weight_ms_per_mib: 0.0,
        input_conv_extra_fraction: 0.0,
        input_conv_ms_per_input_mib: 0.0,
        norm_add_ms_per_mib: 0.0,
        layout_credit_scale: 1.0,
    };

    /// The residual-add term of a convolution whose product computes an add of `add_output_bytes`.
    pub fn residual_add_ms(&self, add_output_bytes: u64) -> f64 {
        self.residual_add_ms_per_mib * add_output_bytes as f64 / MIB
    }

    /// The norm-add term of a layer norm that computes an add of `add_output_bytes`.
    pub fn norm_add_ms(&self, add_output_bytes: u64) -> f64 {
        self.norm_add_ms_per_mib * add_output_bytes as f64 / MIB
    }

    /// The dense-weights term of a layer with `weight_bytes` of f32 weights in a network of `network` size
    /// (0 for other types, above the limit, and for a layer larger than the core's cache in a network that
    /// leaves it in the shared cache).
    pub fn dense_weight_ms(&self, layer_type: LayerType, weight_bytes: u64, network: NetworkSize) -> f64 {
        if layer_type != LayerType::Dense {
            return 0.0;
        }
        self.dense_weight_ms_for_mib(weight_bytes as f64 / MIB, network)
    }

    /// The matmul term of a layer predicted at `predicted_ms` with `weight_bytes` of weights: a product with a
    /// constant weight's extra fraction of its prediction plus its weights' term, 0 for other layers.
    pub fn matmul_extra_ms(&self, layer_type: LayerType, weight_bytes: u64, predicted_ms: f64) -> f64 {
        if layer_type == LayerType::MatMul && weight_bytes > 0 {
            self.matmul_extra_for(predicted_ms, weight_bytes as f64 / MIB)
        } else {
            0.0
        }
    }

    /// The one-pixel term of a convolution over one pixel predicted at `predicted_ms` with `weight_bytes` of
    /// weights.
    pub fn pixel_conv_extra_ms(&self, predicted_ms: f64, weight_bytes: u64) -> f64 {
        self.pixel_conv_extra_for(predicted_ms, weight_bytes as f64 / MIB)
    }

    pub fn pixel_conv_extra_for(&self, predicted_ms: f64, weight_mib: f64) -> f64 {
        self.pixel_conv_extra_fraction * predicted_ms + self.pixel_conv_weight_ms_per_mib * weight_mib
    }

    /// The input term of a convolution that reads the network's input, `input_bytes` of it, predicted at
    /// `predicted_ms`.
    pub fn input_conv_extra_ms(&self, predicted_ms: f64, input_bytes: u64) -> f64 {
        self.input_conv_extra_for(predicted_ms, input_bytes as f64 / MIB)
    }

    pub fn input_conv_extra_for(&self, predicted_ms: f64, input_mib: f64) -> f64 {
        self.input_conv_extra_fraction * predicted_ms + self.input_conv_ms_per_input_mib * input_mib
    }

    /// The matmul term of a product with a constant weight of `weight_mib` predicted at `predicted_ms`.
    pub fn matmul_extra_for(&self, predicted_ms: f64, weight_mib: f64) -> f64 {
        self.matmul_extra_fraction * predicted_ms + self.matmul_weight_ms_per_mib * weight_mib
    }

    /// The dense-weights term of a dense layer with `weight_mib` MiB of f32 weights in a network of `network`
    /// size.
    pub fn dense_weight_ms_for_mib(&self, weight_mib: f64, network: NetworkSize) -> f64 {
        if self.dense_gated(weight_mib, network) {
            return 0.0;
        }
        Correction::dense_term(
            self.dense_weight_ms_per_mib,
            self.dense_weight_floor_mib,
            self.dense_weight_limit_mib,
            weight_mib,
        )
    }

    /// The dense term's cache gate in words, to follow a description of the term ("" without a gate).
    pub fn dense_gate_clause(&self) -> String {
        if self.dense_network_min_mib > 0.0 {
            format!(
                " (above the core's {:.1} MiB of cache only in networks above {:.1} MiB {})",
                self.dense_cache_mib,
                self.dense_network_min_mib,
                self.dense_network_basis.describe()
            )
        } else {
            String::new()
        }
    }

    /// Whether a dense layer of `weight_mib` keeps its cache regime in a network of `network` size.
    fn dense_gated(&self, weight_mib: f64, network: NetworkSize) -> bool {
        weight_mib > self.dense_cache_mib && network.on(self.dense_network_basis) <= self.dense_network_min_mib
    }

    fn dense_term(ms_per_mib: f64, floor_mib: f64, limit_mib: f64, weight_mib: f64) -> f64 {
        if weight_mib <= limit_mib {
            ms_per_mib * (weight_mib - floor_mib).max(0.0)
        } else {
            0.0
        }
    }

    /// A calibrated layer latency (never negative), for a layer of `layer_type` with `weight_bytes` of f32
    /// weights in a network of `network` size.
    pub fn layer_latency_ms(
        &self,
        layer_type: LayerType,
        weight_bytes: u64,
        network: NetworkSize,
        predicted_ms: f64,
    ) -> f64 {
        let in_network = predicted_ms
            + self.dense_weight_ms(layer_type, weight_bytes, network)
            + self.matmul_extra_ms(layer_type, weight_bytes, predicted_ms);
        (self.latency_scale * in_network + self.latency_per_layer_ms).max(0.0)
    }

    /// A network's calibrated latency from its calibration point (what [`Self::layer_latency_ms`] sums to).
    pub fn network_latency_ms(&self, p: &CalibrationPoint) -> f64 {
        let dense: f64 = p.dense_layers.iter().map(|d| self.dense_weight_ms_for_mib(d.weight_mib, p.size())).sum();
        let residual: f64 = p.residual_adds.iter().map(|r| self.residual_add_ms_per_mib * r.add_mib).sum::<f64>()
            + p.norm_adds.iter().map(|r| self.norm_add_ms_per_mib * r.add_mib).sum::<f64>();
        let matmul: f64 =
            p.matmul_layers.iter().map(|m| self.matmul_extra_for(m.predicted_ms, m.weight_mib)).sum::<f64>()
                + p.pixel_convs.iter().map(|m| self.pixel_conv_extra_for(m.predicted_ms, m.weight_mib)).sum::<f64>()
                + p.input_convs.iter().map(|m| self.input_conv_extra_for(m.predicted_ms, m.input_mib)).sum::<f64>();
        // The points were estimated with the whole layout credit taken off; the estimate takes off this share,
        // before a convolution over one pixel or reading the input takes its fraction more.
        let pixel = |layer: &str| p.pixel_convs.iter().any(|c| c.layer == layer);
        let input = |layer: &str| p.input_convs.iter().any(|c| c.layer == layer);
        let credit: f64 = p
            .layout_layers
            .iter()
            .map(|l| {
                let grown = if pixel(&l.layer) {
                    1.0 + self.pixel_conv_extra_fraction
                } else if input(&l.layer) {
                    1.0 + self.input_conv_extra_fraction
                } else {
                    1.0
                };
                (1.0 - self.layout_credit_scale) * l.saved_ms * grown
            })
            .sum();
        self.latency_scale * (p.predicted_latency_ms + dense + residual + matmul + credit)
            + self.latency_per_layer_ms * p.executing_layers as f64
    }

    /// A calibrated peak memory (never negative).
    pub fn peak_memory_mib(&self, predicted_mib: f64, executing_layers: usize, weighted_layers: usize) -> f64 {
        (predicted_mib
            + self.memory_fixed_mib
            + self.memory_per_layer_mib * executing_layers as f64
            + self.memory_per_weighted_layer_mib * weighted_layers as f64)
            .max(0.0)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub format_version: u32,
    pub device: String,
    /// The estimation method whose predictions were calibrated.
    pub method: String,
    /// [`models_fingerprint`] of the model store the predictions came from.
    pub models_fingerprint: String,
    pub perfmodel_version: String,
    /// UTC, RFC 3339.
    pub created: String,
    /// When the networks were measured, for a calibration refitted later from those measurements with other
    /// models ([`refit`]); `None`: measured when `created`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    pub correction: Correction,
    /// Only the memory correction was fitted (no latency term at all).
    pub memory_only: bool,
    /// The whole-network latency terms (scale, per layer) were fitted; otherwise they are 1 and 0 ms: on a
    /// machine whose speed drifts, a fit of network totals learns the drift.
    pub network_latency: bool,
    /// Why the whole-network latency terms could not be fitted (they are then 1 and 0 ms); not stored.
    #[serde(skip)]
    pub network_latency_error: Option<String>,
    /// The machine's speed during the runs relative to the nominal speed of the models' data: the median speed
    /// probe reading over the nominal one (`collect::speed`); each network's median round was brought to the
    /// nominal speed by the median reading around its rounds. `None`: not measured.
    pub machine_speed_ratio: Option<f64>,
    /// [`ESTIMATOR_RULES`] when fitted (0 in files written before it was recorded).
    #[serde(default)]
    pub estimator_rules: u32,
    /// What the engine keeps per layer besides weights, measured on this machine by probes
    /// ([`super::structure`]); the estimates fitted here counted it as resident, and so do those it applies to.
    /// `None` in files written before it was measured, or when it could not be (no counting allocator).
    #[serde(default)]
    pub engine_structure: Option<super::structure::EngineStructure>,
    /// Which peak-memory terms were fitted: `fixed` (one constant) or `fixed+layers` (plus per executing and
    /// per weighted layer), whichever predicted each network better when fitted on the others; with the
    /// median |error| of each in that leave-one-out, percent. Empty in older files.
    #[serde(default)]
    pub memory_terms: String,
    #[serde(default)]
    pub memory_leave_one_out_pct: Vec<(String, f64)>,
    pub networks: Vec<CalibrationPoint>,
}

impl Calibration {
    /// Fit the correction to `networks` (at least [`MIN_NETWORKS`], each with positive measurements), measured
    /// on a machine whose cores have `core_cache_mib` of their own cache (L2; `None` when unknown: the dense
    /// term then applies in every network, see [`fit_dense_gate`]).
    pub fn fit(
        device: &str,
        method: &str,
        models_fingerprint: &str,
        networks: Vec<CalibrationPoint>,
        core_cache_mib: Option<f64>,
    ) -> Result<Calibration> {
        if networks.len() < MIN_NETWORKS {
            return Err(Error::Invalid(format!(
                "calibration needs at least {MIN_NETWORKS} networks, got {}",
                networks.len()
            )));
        }
        for p in &networks {
            let values = [p.measured_latency_ms, p.predicted_latency_ms, p.measured_peak_memory_mib];
            if values.iter().any(|v| !v.is_finite() || *v <= 0.0)
                || !p.predicted_peak_memory_mib.is_finite()
                || !(p.weight_mib.is_finite() && p.weight_mib >= 0.0)
                || !(p.touched_mib.is_finite() && p.touched_mib >= 0.0)
            {
                return Err(Error::Invalid(format!(
                    "network '{}': calibration needs positive, finite latencies and memory, got {p:?}",
                    p.network
                )));
            }
        }
        let mut dense_only = fit_dense_gate(&networks, core_cache_mib.filter(|c| c.is_finite() && *c > 0.0));
        dense_only.residual_add_ms_per_mib = fit_residual_adds(networks.iter().flat_map(|p| &p.residual_adds));
        dense_only.norm_add_ms_per_mib = fit_residual_adds(networks.iter().flat_map(|p| &p.norm_adds));
        let sized = |m: &DenseLayerPoint| (m.predicted_ms, m.weight_mib, m.measured_ms);
        (dense_only.matmul_extra_fraction, dense_only.matmul_weight_ms_per_mib) =
            fit_product_extra(networks.iter().flat_map(|p| &p.matmul_layers).map(sized));
        (dense_only.pixel_conv_extra_fraction, dense_only.pixel_conv_weight_ms_per_mib) =
            fit_product_extra(networks.iter().flat_map(|p| &p.pixel_convs).map(sized));
        (dense_only.input_conv_extra_fraction, dense_only.input_conv_ms_per_input_mib) = fit_product_extra(
            networks.iter().flat_map(|p| &p.input_convs).map(|m| (m.predicted_ms, m.input_mib, m.measured_ms)),
        );
        // Latency: measured ≈ scale · (predicted + the terms) + per_layer · layers, weights 1 / measured², with the
        // share of the layout credit that fits the networks best.
        let (layout_credit_scale, mut latency_scale, mut latency_per_layer_ms) =
            fit_network_latency(&networks, &dense_only);
        dense_only.layout_credit_scale = layout_credit_scale;
        // Only an error for whoever asks for these terms ([`Calibration::network_latency_error`]).
        let mut network_latency_error = None;
        if !(latency_scale.is_finite() && latency_scale > 0.0 && latency_per_layer_ms.is_finite()) {
            network_latency_error = Some(format!(
                "the whole-network latency fit came out as scale {latency_scale}, {latency_per_layer_ms} ms per \
                 layer: the network totals do not follow the predictions (check the benchmarks and the models)"
            ));
            (latency_scale, latency_per_layer_ms) = (1.0, 0.0);
        }
        let (memory_terms, [memory_fixed_mib, memory_per_layer_mib, memory_per_weighted_layer_mib], loo) =
            fit_memory(&networks);
        Ok(Calibration {
            format_version: CALIBRATION_FORMAT,
            device: device.to_string(),
            method: method.to_string(),
            models_fingerprint: models_fingerprint.to_string(),
            perfmodel_version: crate::VERSION.to_string(),
            created: crate::data::now_rfc3339(),
            measured: None,
            correction: Correction {
                latency_scale,
                latency_per_layer_ms,
                memory_fixed_mib,
                memory_per_layer_mib,
                memory_per_weighted_layer_mib,
                dense_weight_ms_per_mib: dense_only.dense_weight_ms_per_mib,
                dense_weight_floor_mib: dense_only.dense_weight_floor_mib,
                dense_weight_limit_mib: dense_only.dense_weight_limit_mib,
                dense_network_min_mib: dense_only.dense_network_min_mib,
                dense_network_basis: dense_only.dense_network_basis,
                dense_cache_mib: dense_only.dense_cache_mib,
                residual_add_ms_per_mib: dense_only.residual_add_ms_per_mib,
                norm_add_ms_per_mib: dense_only.norm_add_ms_per_mib,
                matmul_extra_fraction: dense_only.matmul_extra_fraction,
                matmul_weight_ms_per_mib: dense_only.matmul_weight_ms_per_mib,
                pixel_conv_extra_fraction: dense_only.pixel_conv_extra_fraction,
                pixel_conv_weight_ms_per_mib: dense_only.pixel_conv_weight_ms_per_mib,
                input_conv_extra_fraction: dense_only.input_conv_extra_fraction,
                input_conv_ms_per_input_mib: dense_only.input_conv_ms_per_input_mib,
                layout_credit_scale: dense_only.layout_credit_scale,
            },
            memory_only: false,
            network_latency: network_latency_error.is_none(),
            network_latency_error,
            machine_speed_ratio: None,
            estimator_rules: ESTIMATOR_RULES,
            engine_structure: None,
            memory_terms: memory_terms.to_string(),
            memory_leave_one_out_pct: loo,
            networks,
        })
    }

    /// Keep only the memory correction: latency is left as the models predict it.
    pub fn memory_only(mut self) -> Calibration {
        self = self.without_network_latency();
        self.correction.dense_weight_ms_per_mib = 0.0;
        self.correction.dense_weight_floor_mib = 0.0;
        self.correction.dense_weight_limit_mib = 0.0;
        self.correction.dense_network_min_mib = 0.0;
        self.correction.residual_add_ms_per_mib = 0.0;
        self.correction.norm_add_ms_per_mib = 0.0;
        self.correction.matmul_extra_fraction = 0.0;
        self.correction.matmul_weight_ms_per_mib = 0.0;
        self.correction.pixel_conv_extra_fraction = 0.0;
        self.correction.pixel_conv_weight_ms_per_mib = 0.0;
        self.correction.input_conv_extra_fraction = 0.0;
        self.correction.input_conv_ms_per_input_mib = 0.0;
        self.correction.layout_credit_scale = 1.0;
        self.memory_only = true;
        self
    }

    /// Drop the whole-network latency terms (scale 1, 0 ms per layer); the dense-weights term stays.
    pub fn without_network_latency(mut self) -> Calibration {
        self.correction.latency_scale = 1.0;
        self.correction.latency_per_layer_ms = 0.0;
        self.network_latency = false;
        self
    }

    pub fn path(models_dir: &Path, device: &str) -> PathBuf {
        models_dir.join(device).join(CALIBRATION_FILE)
    }

    /// The device's calibration, `None` when it has none. A file that exists but cannot be read is an error, and
    /// so is one an older perfmodel wrote (see [`Calibration::read`] to tell that case apart).
    pub fn load(models_dir: &Path, device: &str) -> Result<Option<Calibration>> {
        match Calibration::read(models_dir, device)? {
            None => Ok(None),
            Some(Stored::Current(c)) => Ok(Some(c)),
            Some(Stored::Outdated { format }) => Err(Error::Model {
                path: Calibration::path(models_dir, device),
                message: format!(
                    "calibration format {format}, this build reads {CALIBRATION_FORMAT}; rerun 'perfmodel calibrate \
                     --device {device}'"
                ),
            }),
        }
    }

    /// The device's calibration file, read once: `None` when there is none, [`Stored::Outdated`] when an older
    /// perfmodel wrote it (an estimator skips it with a note instead of refusing to estimate). A file that exists
    /// but cannot be read is an error.
    pub fn read(models_dir: &Path, device: &str) -> Result<Option<Stored>> {
        let path = Calibration::path(models_dir, device);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let bad = |message: String| Error::Model { path: path.clone(), message };
        let not_calibration = |e: serde_json::Error| {
            bad(format!("not a calibration file ({e}); rerun 'perfmodel calibrate --device {device}'"))
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(not_calibration)?;
        let format = value.get("format_version").and_then(|v| v.as_u64()).and_then(|v| u32::try_from(v).ok());
        if let Some(format) = format.filter(|&f| f != CALIBRATION_FORMAT) {
            return Ok(Some(Stored::Outdated { format }));
        }
        let calibration: Calibration = serde_json::from_value(value).map_err(not_calibration)?;
        if calibration.device != device {
            return Err(bad(format!("calibration of device '{}', expected '{device}'", calibration.device)));
        }
        let c = calibration.correction;
        let numbers = [
            c.latency_scale,
            c.latency_per_layer_ms,
            c.memory_fixed_mib,
            c.memory_per_layer_mib,
            c.memory_per_weighted_layer_mib,
            c.dense_weight_ms_per_mib,
            c.dense_weight_floor_mib,
            c.dense_weight_limit_mib,
            c.dense_network_min_mib,
            c.dense_cache_mib,
            c.residual_add_ms_per_mib,
        ];
        if numbers.iter().any(|v| !v.is_finite()) || c.latency_scale <= 0.0 {
            return Err(bad(format!("invalid correction {c:?}")));
        }
        if let Some(s) = &calibration.engine_structure {
            let implausible = s.bytes_per_layer.iter().find(|(_, b)| !b.is_finite() || b.abs() > MAX_STRUCTURE_BYTES);
            if let Some((kind, bytes)) = implausible {
                return Err(bad(format!(
                    "engine structure of '{kind}': {bytes} bytes per layer (at most {MAX_STRUCTURE_BYTES} either \
                     way); rerun 'perfmodel calibrate --device {device}'"
                )));
            }
        }
        let dense = [
            c.dense_weight_ms_per_mib,
            c.dense_weight_floor_mib,
            c.dense_weight_limit_mib,
            c.dense_network_min_mib,
            c.dense_cache_mib,
        ];
        if dense.iter().any(|v| *v < 0.0) || c.dense_weight_floor_mib > c.dense_weight_limit_mib.max(0.0) {
            return Err(bad(format!(
                "invalid dense-weights term: {} ms per MiB above {} MiB up to {} MiB, for layers above {} MiB in \
                 networks above {} MiB (none may be negative, and the floor is at most the limit)",
                c.dense_weight_ms_per_mib,
                c.dense_weight_floor_mib,
                c.dense_weight_limit_mib,
                c.dense_cache_mib,
                c.dense_network_min_mib
            )));
        }
        if !(0.0..=1.0).contains(&c.layout_credit_scale) {
            return Err(bad(format!("invalid layout-credit scale {} (between 0 and 1)", c.layout_credit_scale)));
        }
        if c.residual_add_ms_per_mib < 0.0 {
            return Err(bad(format!(
                "invalid residual-add term: {} ms per MiB (it may not be negative)",
                c.residual_add_ms_per_mib
            )));
        }
        if !(c.norm_add_ms_per_mib >= 0.0) {
            return Err(bad(format!(
                "invalid norm-add term: {} ms per MiB (it may not be negative)",
                c.norm_add_ms_per_mib
            )));
        }
        Ok(Some(Stored::Current(calibration)))
    }

    pub fn save(&self, models_dir: &Path) -> Result<PathBuf> {
        let path = Calibration::path(models_dir, &self.device);
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::Invalid(format!("{e}")))?;
        write_atomic(&path, format!("{text}\n").as_bytes())?;
        Ok(path)
    }
}

/// Identifies the exact models of a store: a hash over every entry's (layer type, metric, method, file hash).
/// Retraining changes it even on the same data, so a calibration never outlives the models it was fitted for.
pub fn models_fingerprint(manifest: &Manifest) -> String {
    let mut h = Sha256::new();
    for m in &manifest.models {
        for part in [&m.layer_type, &m.metric, &m.method, &m.file_sha256] {
            h.update(part.as_bytes());
            h.update([0u8]);
        }
    }
    // What else shapes an estimate: the engine whose rules it follows and their layout terms. Only when recorded,
    // so that calibrations of stores that record none stay valid.
    if let Some(engine) = &manifest.engine {
        h.update(format!("engine={engine};").as_bytes());
    }
    if let Some(rate) = manifest.reorder_ms_per_mib {
        h.update(format!("reorder={rate};").as_bytes());
    }
    if let Some(block) = manifest.nchwc_block {
        h.update(format!("nchwc_block={block};").as_bytes());
    }
    crate::train::store::hex(&h.finalize())
}

/// The matmul terms, (fraction, ms per MiB of weights): what a product with a constant weight takes more in a
/// network than its prediction (measured alone), `f · predicted + a · weight MiB`, fitted by least squares of
/// the relative errors `1 - ((1 + f) · predicted + a · weight) / measured`, with at least [`MIN_MATMUL_LAYERS`] of
/// them, else (0, 0). The per-MiB term alone when it comes out negative is dropped (the fraction alone is fitted).
///
/// Why both: looped alone, a product finds its weights in cache; in a transformer, whose weights exceed the
/// cache, they come from memory, once per product, whatever its rows. On one Zen 4 machine (ONNX Runtime) the
/// products of ViT and BERT encoders with 128 rows or more took 0-6% less in the networks than predicted, those
/// of a BERT encoder at 64 tokens 5-11% more: with a fraction alone the 64-token encoder's products came out 8%
/// low, with the fraction (-6.6%) and 0.041 ms per MiB of weights (25 GB/s) every encoder's were within 4%.
///
/// The same form, with the same fit, serves the convolutions over one pixel (per MiB of weights) and those that
/// read the network's input (per MiB of that input): each point is (predicted ms, size MiB, measured ms).
fn fit_product_extra(points: impl Iterator<Item = (f64, f64, f64)>) -> (f64, f64) {
    let layers: Vec<(f64, f64, f64)> =
        points.filter(|&(p, w, m)| [p, w, m].iter().all(|v| v.is_finite() && *v > 0.0)).collect();
    if layers.len() < MIN_MATMUL_LAYERS {
        return (0.0, 0.0);
    }
    let fraction_only = || {
        let ratios: Vec<f64> = layers.iter().map(|&(p, _, m)| p / m).collect();
        let scale = ratios.iter().sum::<f64>() / ratios.iter().map(|r| r * r).sum::<f64>();
        if scale.is_finite() && scale > 0.5 {
            (scale - 1.0, 0.0)
        } else {
            (0.0, 0.0)
        }
    };
    // Relative least squares of measured ≈ s · predicted + a · weight: minimise Σ (s·x + a·w - 1)² with
    // x = predicted / measured and w = weight MiB / measured.
    let (mut sxx, mut sxw, mut sww, mut sx, mut sw) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(predicted, size, measured) in &layers {
        let (x, w) = (predicted / measured, size / measured);
        (sxx, sxw, sww, sx, sw) = (sxx + x * x, sxw + x * w, sww + w * w, sx + x, sw + w);
    }
    let det = sxx * sww - sxw * sxw;
    let scale = (sx * sww - sw * sxw) / det;
    let per_mib = (sxx * sw - sxw * sx) / det;
    if det.abs() > f64::EPSILON * sxx * sww && scale.is_finite() && scale > 0.5 && per_mib.is_finite() && per_mib >= 0.0
    {
        (scale - 1.0, per_mib)
    } else {
        fraction_only()
    }
}

/// Steps of the layout-credit share's grid between 0 and 1.
const LAYOUT_SHARE_STEPS: usize = 100;

/// The whole-network latency terms, (layout-credit share, scale, per-layer ms): the share first
/// ([`fit_layout_credit`]), then measured ≈ scale · (predicted + the terms of `terms` with that share) + per_layer ·
/// executing layers, fitted by relative least squares (scale alone when the two-parameter fit gives no positive
/// scale). The scale and per-layer terms apply only when asked for (`calibrate --network-latency`); the share
/// always does, so it is fitted without them.
fn fit_network_latency(networks: &[CalibrationPoint], terms: &Correction) -> (f64, f64, f64) {
    let share = fit_layout_credit(networks, terms);
    let terms = Correction { layout_credit_scale: share, ..*terms };
    let latency: Vec<(f64, f64, f64)> = networks
        .iter()
        .map(|p| (terms.network_latency_ms(p), p.executing_layers as f64, p.measured_latency_ms))
        .collect();
    let (mut scale, mut per_layer) = relative_least_squares(&latency);
    if scale <= 0.0 {
        // Few networks can make the two-parameter fit trade the scale for the per-layer term: scale only.
        let scale_only: Vec<(f64, f64, f64)> = latency.iter().map(|&(x, _, y)| (x, 0.0, y)).collect();
        (scale, per_layer) = relative_least_squares(&scale_only);
    }
    (share, scale, per_layer)
}

/// The layout-credit share: how much of the conversions the estimate takes off blocked layers a network really
/// saves them. Fitted on the networks' totals (the other terms of `terms` added, no whole-network scale): of a
/// grid of [`LAYOUT_SHARE_STEPS`] steps from 0 to 1, the share that leaves the smallest sum of squared relative
/// errors of the credited networks (the largest on a tie); 1 (the store's rate as it is) with fewer than
/// [`MIN_LAYOUT_LAYERS`] credited layers.
///
/// Why on the totals and not layer by layer: on one Zen 4 machine the blocked layers of ONNX Runtime networks did
/// save conversions (a least-squares fit layer by layer took off 58% of the credit), but the large activations of
/// MobileNets' early layers cost as much in a network as alone with their conversions, and with that share the
/// zoo's MobileNets came out 12-18% low (32 of the 44 calibration networks within ±10%, 38 with none of the
/// credit).
fn fit_layout_credit(networks: &[CalibrationPoint], terms: &Correction) -> f64 {
    let usable = |p: &CalibrationPoint| p.layout_layers.iter().filter(|l| l.is_usable()).count();
    if networks.iter().map(usable).sum::<usize>() < MIN_LAYOUT_LAYERS {
        return 1.0;
    }
    let credited: Vec<&CalibrationPoint> = networks.iter().filter(|p| usable(p) > 0).collect();
    let sse = |share: f64| {
        let terms = Correction { layout_credit_scale: share, latency_scale: 1.0, latency_per_layer_ms: 0.0, ..*terms };
        credited.iter().map(|p| (terms.network_latency_ms(p) / p.measured_latency_ms - 1.0).powi(2)).sum::<f64>()
    };
    let mut best = (1.0, sse(1.0));
    for k in (0..LAYOUT_SHARE_STEPS).rev() {
        let share = k as f64 / LAYOUT_SHARE_STEPS as f64;
        let e = sse(share);
        if e < best.1 {
            best = (share, e);
        }
    }
    best.0
}

/// The residual-add term (ms per MiB of add output): the least-squares slope through the origin of the fused
/// convolutions' extra time (measured - predicted) on their add's MiB, over every usable point; 0 with fewer than
/// [`MIN_RESIDUAL_ADDS`] points or when the slope is not positive (such adds then cost what the models say). The
/// norm-add term is fitted the same way on layer norms computing an add: on one Zen 4 machine ONNX Runtime's
/// `SkipLayerNormalization` took 5 ns per element where its layer norm and add measured alone took 0.8, at
/// 64 to 256 tokens of 512 and 768 features alike.
fn fit_residual_adds<'a>(points: impl Iterator<Item = &'a ResidualAddPoint>) -> f64 {
    let points: Vec<&ResidualAddPoint> = points.filter(|r| r.is_usable()).collect();
    if points.len() < MIN_RESIDUAL_ADDS {
        return 0.0;
    }
    let sxy: f64 = points.iter().map(|r| r.add_mib * (r.measured_ms - r.predicted_ms)).sum();
    let sxx: f64 = points.iter().map(|r| r.add_mib * r.add_mib).sum();
    let k = sxy / sxx;
    if k.is_finite() && k > 0.0 {
        k
    } else {
        0.0
    }
}

/// The dense-weights term with the network size that layers larger than the core's cache (`cache_mib`) need
/// for it, as a correction with nothing else. The size is measured one of two ways ([`SizeBasis`]): the
/// network's weights, or its weights and layer outputs (when every network with dense layers has that recorded).
/// Candidate sizes on each: 0 (every network) and halfway (geometrically) between each two consecutive sizes of
/// the networks with dense layers. For each, the term is fitted ([`fit_dense_weights`]) on the layers that get it
/// and judged, like the term itself, by the mean absolute relative error over every dense layer (those kept from
/// it included); the smallest size wins a tie, and the touched basis a tie between bases. A size must keep at
/// least [`MIN_DENSE_LAYERS`] layers from the term, as the term needs that many to be fitted at all: one layer
/// is not evidence of a cache regime. Without a known cache size there is no gate.
///
/// Why the touched size: on one machine with ONNX Runtime every ImageNet CNN's 4-8 MiB classifier head took
/// 3.4-5.1x its time alone, the MLPs' 1-6 MiB layers 1.1-2.6x. The zoo's CNNs with dense heads all have more
/// weights than its MLPs, so both bases separate them alike; torchvision's MobileNetV3-small, with 10 MiB of
/// weights, fewer than some MLPs, brings 15 MiB through the caches per inference with the outputs of its
/// running layers (the MLPs at most 9), and its 2-4 MiB head took 4-5x its time alone.
fn fit_dense_gate(networks: &[CalibrationPoint], cache_mib: Option<f64>) -> Correction {
    let with_dense: Vec<&CalibrationPoint> = networks.iter().filter(|p| !p.dense_layers.is_empty()).collect();
    // The first basis wins a tie: what evicts a dense layer's weights is everything the network brings through.
    let mut bases = vec![SizeBasis::Weights];
    if with_dense.iter().all(|p| p.touched_mib > 0.0) {
        bases.insert(0, SizeBasis::Touched);
    }
    let mut best: Option<(f64, Correction)> = None;
    for basis in bases {
        let mut sizes: Vec<f64> =
            with_dense.iter().map(|p| p.size().on(basis)).filter(|w| w.is_finite() && *w > 0.0).collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        let gates: Vec<f64> = match cache_mib {
            Some(_) => std::iter::once(0.0).chain(sizes.windows(2).map(|w| (w[0] * w[1]).sqrt())).collect(),
            None => vec![0.0],
        };
        for min in gates {
            let gate = Correction {
                dense_network_min_mib: min,
                dense_network_basis: basis,
                dense_cache_mib: cache_mib.unwrap_or(0.0),
                ..Correction::NONE
            };
            let (kept, gated): (Vec<(&DenseLayerPoint, bool)>, Vec<(&DenseLayerPoint, bool)>) = with_dense
                .iter()
                .flat_map(|p| {
                    p.dense_layers
                        .iter()
                        .filter(|d| d.is_usable())
                        .map(|d| (d, gate.dense_gated(d.weight_mib, p.size())))
                })
                .partition(|(_, gated)| !gated);
            if min > 0.0 && gated.len() < MIN_DENSE_LAYERS {
                continue;
            }
            let layers: Vec<&DenseLayerPoint> = kept.iter().map(|(d, _)| *d).collect();
            let (k, floor, limit) = fit_dense_weights(&layers);
            let gated_at = if k > 0.0 { min } else { 0.0 };
            let c = Correction {
                dense_weight_ms_per_mib: k,
                dense_weight_floor_mib: floor,
                dense_weight_limit_mib: limit,
                dense_network_min_mib: gated_at,
                dense_network_basis: if gated_at > 0.0 { basis } else { SizeBasis::Weights },
                ..gate
            };
            let (mut total, mut count) = (0.0, 0usize);
            for p in &with_dense {
                for d in p.dense_layers.iter().filter(|d| d.is_usable()) {
                    let predicted = d.predicted_ms + c.dense_weight_ms_for_mib(d.weight_mib, p.size());
                    total += ((predicted - d.measured_ms) / d.measured_ms).abs();
                    count += 1;
                }
            }
            let error = if count > 0 { total / count as f64 } else { 0.0 };
            if best.as_ref().is_none_or(|(b, _)| error < *b) {
                best = Some((error, c));
            }
        }
    }
    best.map_or(Correction { dense_cache_mib: cache_mib.unwrap_or(0.0), ..Correction::NONE }, |(_, c)| c)
}

/// The size of the largest level-2 data or unified cache of the first CPU, MiB, from the kernel's cache
/// description under `cpu_dir` (normally `/sys/devices/system/cpu/cpu0/cache`: `index*/level`, `type` and
/// `size` such as `2048K`); `None` when it cannot be read.
pub fn read_core_cache_mib(cpu_dir: &Path) -> Option<f64> {
    let mut largest: Option<f64> = None;
    for entry in std::fs::read_dir(cpu_dir).ok()?.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok().map(|s| s.trim().to_string());
        if read("level").as_deref() != Some("2") || read("type").as_deref() == Some("Instruction") {
            continue;
        }
        let Some(size) = read("size") else { continue };
        let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit()).unwrap_or(size.len()));
        let Ok(n) = digits.parse::<f64>() else { continue };
        let mib = match unit {
            "" => n / MIB,
            "K" => n / 1024.0,
            "M" => n,
            "G" => n * 1024.0,
            _ => continue,
        };
        largest = Some(largest.map_or(mib, |l: f64| l.max(mib)));
    }
    largest
}

/// The dense-weights term from dense layers measured inside networks: `(ms per MiB, floor MiB, limit MiB)`.
/// For each candidate limit (every observed weight size), a least-squares line of the extra time
/// (measured − predicted) on the weights of the layers up to it, `k · (W − floor)`: a small layer's weights
/// partly stay in cache inside a network too (through the origin when the line's intercept is positive). The
/// candidate with the smallest mean absolute relative error over all the layers wins (the smaller limit on a tie), if
/// it beats no term at all. The limit is then placed halfway (geometrically) to the next larger observed size,
/// as nothing between them was measured. All 0 with fewer than [`MIN_DENSE_LAYERS`] usable layers.
fn fit_dense_weights(layers: &[&DenseLayerPoint]) -> (f64, f64, f64) {
    let usable: Vec<&DenseLayerPoint> = layers.iter().copied().filter(|d| d.is_usable()).collect();
    if usable.len() < MIN_DENSE_LAYERS {
        return (0.0, 0.0, 0.0);
    }
    let term =
        |d: &DenseLayerPoint, (k, floor, limit): (f64, f64, f64)| Correction::dense_term(k, floor, limit, d.weight_mib);
    let mean_error = |fit: (f64, f64, f64)| {
        let total: f64 =
            usable.iter().map(|d| ((d.predicted_ms + term(d, fit) - d.measured_ms) / d.measured_ms).abs()).sum();
        total / usable.len() as f64
    };
    let mut sizes: Vec<f64> = usable.iter().map(|d| d.weight_mib).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    let mut best = (mean_error((0.0, 0.0, 0.0)), (0.0, 0.0, 0.0));
    for (i, &limit) in sizes.iter().enumerate() {
        let below: Vec<(f64, f64)> = usable
            .iter()
            .filter(|d| d.weight_mib <= limit)
            .map(|d| (d.weight_mib, d.measured_ms - d.predicted_ms))
            .collect();
        let n = below.len() as f64;
        let (sx, sy) = below.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (sxx, sxy) = below.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x * x, b + x * y));
        let det = n * sxx - sx * sx;
        let line = (det > 1e-12 * n * sxx).then(|| ((n * sxy - sx * sy) / det, (sy * sxx - sx * sxy) / det));
        let (k, floor) = match line {
            Some((k, intercept)) if k > 0.0 && intercept < 0.0 => (k, -intercept / k),
            _ => (sxy / sxx, 0.0),
        };
        if !(k.is_finite() && k > 0.0 && floor.is_finite()) {
            continue;
        }
        let error = mean_error((k, floor, limit));
        if error < best.0 {
            let placed = sizes.get(i + 1).map_or(limit, |next| (limit * next).sqrt());
            best = (error, (k, floor, placed));
        }
    }
    best.1
}

/// Memory: measured - predicted ≈ fixed (+ per_layer · layers + per_weighted · weighted layers), weights
/// 1 / measured². Both forms are fitted; the one whose leave-one-out median |error| is lower is kept (the
/// constant on a tie): per-layer terms stand in for per-layer bytes the estimate does not count, and once the
/// engine's structure is counted ([`super::structure`]) they mostly fit noise. Returns the choice, its
/// coefficients and each form's leave-one-out median |error| in percent.
fn fit_memory(networks: &[CalibrationPoint]) -> (&'static str, [f64; 3], Vec<(String, f64)>) {
    let rows: Vec<([f64; 3], f64, f64)> = networks
        .iter()
        .map(|p| {
            let x = [1.0, p.executing_layers as f64, p.weighted_layers as f64];
            (x, p.measured_peak_memory_mib - p.predicted_peak_memory_mib, p.measured_peak_memory_mib)
        })
        .collect();
    let fixed = |rows: &[([f64; 3], f64, f64)]| {
        let (mut sw, mut swy) = (0.0, 0.0);
        for (_, y, s) in rows {
            sw += 1.0 / (s * s);
            swy += y / (s * s);
        }
        [if sw > 0.0 { swy / sw } else { 0.0 }, 0.0, 0.0]
    };
    let with_layers = |rows: &[([f64; 3], f64, f64)]| match solve_weighted(rows) {
        Some(b) => b,
        // With the columns (nearly) dependent (e.g. every layer weighted), the weighted term is 0.
        None => {
            let two: Vec<(f64, f64, f64)> = rows.iter().map(|(x, y, _)| (x[0], x[1], *y)).collect();
            let scales: Vec<f64> = rows.iter().map(|r| r.2).collect();
            let (fixed, per_layer) = weighted_least_squares(&two, &scales);
            [fixed, per_layer, 0.0]
        }
    };
    let leave_one_out = |fit: &dyn Fn(&[([f64; 3], f64, f64)]) -> [f64; 3]| {
        let mut errors: Vec<f64> = (0..rows.len())
            .map(|out| {
                let others: Vec<([f64; 3], f64, f64)> =
                    rows.iter().enumerate().filter(|&(i, _)| i != out).map(|(_, r)| *r).collect();
                let b = fit(&others);
                let (x, y, measured) = rows[out];
                let predicted_gap = b[0] * x[0] + b[1] * x[1] + b[2] * x[2];
                100.0 * (predicted_gap - y).abs() / measured
            })
            .collect();
        errors.sort_by(f64::total_cmp);
        errors.get(errors.len() / 2).copied().unwrap_or(f64::INFINITY)
    };
    let (loo_fixed, loo_layers) = (leave_one_out(&fixed), leave_one_out(&with_layers));
    // Only finite figures are kept (the file is JSON); a form that could not be scored loses.
    let loo = [("fixed", loo_fixed), ("fixed+layers", loo_layers)]
        .into_iter()
        .filter(|(_, pct)| pct.is_finite())
        .map(|(terms, pct)| (terms.to_string(), pct))
        .collect();
    if loo_layers < loo_fixed {
        ("fixed+layers", with_layers(&rows), loo)
    } else {
        ("fixed", fixed(&rows), loo)
    }
}

/// Minimise Σ ((b·x − y) / s)² over b for rows (x, y, s) by the normal equations; `None` when they are
/// (nearly) singular.
fn solve_weighted(rows: &[([f64; 3], f64, f64)]) -> Option<[f64; 3]> {
    let mut a = [[0.0f64; 4]; 3];
    for (x, y, s) in rows {
        let w = 1.0 / (s * s);
        for i in 0..3 {
            for j in 0..3 {
                a[i][j] += w * x[i] * x[j];
            }
            a[i][3] += w * x[i] * y;
        }
    }
    let scale: f64 = (0..3).map(|i| a[i][i].abs()).fold(0.0, f64::max);
    for col in 0..3 {
        let pivot = (col..3).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() <= 1e-12 * scale.max(f64::MIN_POSITIVE) {
            return None;
        }
        a.swap(col, pivot);
        for row in 0..3 {
            if row != col {
                let f = a[row][col] / a[col][col];
                for k in col..4 {
                    a[row][k] -= f * a[col][k];
                }
            }
        }
    }
    let b = [a[0][3] / a[0][0], a[1][3] / a[1][1], a[2][3] / a[2][2]];
    b.iter().all(|v| v.is_finite()).then_some(b)
}

/// Minimise Σ ((a·x + b·n − y) / y)² over (a, b) for rows (x, n, y).
fn relative_least_squares(rows: &[(f64, f64, f64)]) -> (f64, f64) {
    let weights: Vec<f64> = rows.iter().map(|r| r.2).collect();
    weighted_least_squares(rows, &weights)
}

/// Minimise Σ ((a·x + b·n − y) / s)² over (a, b) for rows (x, n, y) and scales s; when the two columns are
/// (nearly) proportional, b = 0 and only a is fitted.
fn weighted_least_squares(rows: &[(f64, f64, f64)], scales: &[f64]) -> (f64, f64) {
    let (mut sxx, mut sxn, mut snn, mut sxy, mut sny) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (&(x, n, y), s) in rows.iter().zip(scales) {
        let w = 1.0 / (s * s);
        sxx += w * x * x;
        sxn += w * x * n;
        snn += w * n * n;
        sxy += w * x * y;
        sny += w * n * y;
    }
    let det = sxx * snn - sxn * sxn;
    if det.abs() <= 1e-9 * sxx * snn || snn == 0.0 {
        return (if sxx > 0.0 { sxy / sxx } else { 0.0 }, 0.0);
    }
    ((sxy * snn - sny * sxn) / det, (sxx * sny - sxn * sxy) / det)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(name: &str, layers: usize, predicted_ms: f64, predicted_mib: f64) -> CalibrationPoint {
        // The "device": 1.1 × predicted + 0.02 ms per layer; memory + 0.5 MiB + 0.01 MiB per layer + 0.03 MiB
        // per weighted layer (a third of them, at least 1).
        let weighted = (layers / 3).max(1);
        CalibrationPoint {
            network: name.into(),
            executing_layers: layers,
            weighted_layers: weighted,
            measured_latency_ms: 1.1 * predicted_ms + 0.02 * layers as f64,
            predicted_latency_ms: predicted_ms,
            measured_peak_memory_mib: predicted_mib + 0.5 + 0.01 * layers as f64 + 0.03 * weighted as f64,
            predicted_peak_memory_mib: predicted_mib,
            dense_layers: vec![],
            residual_adds: vec![],
            norm_adds: vec![],
            matmul_layers: vec![],
            pixel_convs: vec![],
            input_convs: vec![],
            layout_layers: vec![],
            weight_mib: 10.0 * layers as f64,
            touched_mib: 0.0,
        }
    }

    /// A network with `mib` MiB of weights and nothing else.
    fn net(mib: f64) -> NetworkSize {
        NetworkSize { weight_mib: mib, touched_mib: mib }
    }

    #[test]
    fn a_calibration_of_older_rules_is_current_only_for_engines_whose_estimates_they_did_not_change() {
        assert!(rules_current(ESTIMATOR_RULES, "onnxruntime") && rules_current(ESTIMATOR_RULES, "tract"));
        // Rules 5 to 7 changed ONNX Runtime's estimates alone.
        assert!(!rules_current(4, "onnxruntime") && !rules_current(6, "onnxruntime"));
        assert!(rules_current(4, "tract") && rules_current(4, "generic") && rules_current(5, "tract"));
        assert!(!rules_current(3, "tract") && !rules_current(0, "tract"));
    }

    #[test]
    fn the_layout_credit_share_is_what_the_networks_really_saved() {
        // Networks whose blocked layers saved half the conversions the store's rate credits them with: predicted
        // with the whole credit off, measured with half of it taken off.
        let layer = |k: usize| {
            let saved_ms = 0.1 + 0.05 * k as f64;
            LayoutPoint { layer: format!("c{k}"), saved_mib: 2.0, saved_ms, predicted_ms: 1.0, measured_ms: 1.2 }
        };
        let with_saved = |nets: &mut Vec<CalibrationPoint>, taken_back: f64| {
            for (k, p) in nets.iter_mut().enumerate() {
                p.layout_layers = (0..3 + 2 * k).map(layer).collect();
                let saved: f64 = p.layout_layers.iter().map(|l| l.saved_ms).sum();
                p.measured_latency_ms = p.predicted_latency_ms + taken_back * saved;
            }
        };
        let mut nets: Vec<CalibrationPoint> =
            (0..5).map(|k| point(&format!("n{k}"), 10 + 7 * k, 10.0 + 3.0 * k as f64, 5.0)).collect();
        with_saved(&mut nets, 0.5);
        let fitted = Calibration::fit("d", "learned", "fp", nets.clone(), None).unwrap();
        let k = fitted.correction;
        assert!((k.layout_credit_scale - 0.5).abs() < 1e-9, "{k:?}");
        assert!((k.latency_scale - 1.0).abs() < 1e-6 && k.latency_per_layer_ms.abs() < 1e-6, "{k:?}");
        for p in &fitted.networks {
            assert!((k.network_latency_ms(p) / p.measured_latency_ms - 1.0).abs() < 1e-6, "{p:?}");
        }
        // Measured slower than with no credit at all: none of it (never below 0); too few layers: all of it.
        with_saved(&mut nets, 2.0);
        let none = Calibration::fit("d", "learned", "fp", nets.clone(), None).unwrap();
        assert_eq!(none.correction.layout_credit_scale, 0.0);
        for p in &mut nets {
            p.layout_layers.clear();
        }
        nets[0].layout_layers = (0..MIN_LAYOUT_LAYERS - 1).map(layer).collect();
        assert_eq!(Calibration::fit("d", "learned", "fp", nets, None).unwrap().correction.layout_credit_scale, 1.0);
    }

    #[test]
    fn per_layer_memory_terms_are_kept_only_when_they_predict_networks_left_out_better() {
        // Per-layer bytes the estimate misses: the per-layer terms recover them, and predict each network from
        // the others exactly (the constant alone cannot).
        let counted: Vec<CalibrationPoint> = [(10, 5.0), (40, 20.0), (80, 60.0), (150, 90.0), (300, 200.0)]
            .iter()
            .enumerate()
            .map(|(i, &(layers, mib))| point(&format!("n{i}"), layers, 1.0, mib))
            .collect();
        let fitted = Calibration::fit("dev", "learned", "fp", counted, None).unwrap();
        assert_eq!(fitted.memory_terms, "fixed+layers", "{fitted:?}");
        assert!(fitted.memory_leave_one_out_pct.iter().any(|(t, pct)| t == "fixed+layers" && *pct < 1e-6));
        // Once the estimate counts them, what is left is a constant and noise that has nothing to do with the
        // layer counts: per-layer terms would fit the noise, and lose in the leave-one-out.
        let noise = [0.02, -0.03, 0.01, 0.04, -0.02, 0.03, -0.01];
        let left: Vec<CalibrationPoint> =
            [(10, 5.0), (40, 20.0), (80, 60.0), (150, 90.0), (300, 200.0), (60, 30.0), (20, 8.0)]
                .iter()
                .zip(noise)
                .enumerate()
                .map(|(i, (&(layers, mib), e))| CalibrationPoint {
                    measured_peak_memory_mib: mib + 0.25 + e,
                    ..point(&format!("n{i}"), layers, 1.0, mib)
                })
                .collect();
        let fitted = Calibration::fit("dev", "learned", "fp", left, None).unwrap();
        assert_eq!(fitted.memory_terms, "fixed", "{fitted:?}");
        let c = fitted.correction;
        assert_eq!((c.memory_per_layer_mib, c.memory_per_weighted_layer_mib), (0.0, 0.0));
        assert!((c.memory_fixed_mib - 0.25).abs() < 0.03, "{c:?}");
    }

    #[test]
    fn an_exact_linear_relation_is_recovered() {
        let points = vec![
            point("a", 10, 5.0, 20.0),
            point("b", 200, 80.0, 150.0),
            point("c", 50, 3.0, 4.0),
            CalibrationPoint {
                weighted_layers: 40,
                measured_peak_memory_mib: 30.0 + 0.5 + 0.6 + 1.2,
                ..point("d", 60, 7.0, 30.0)
            },
        ];
        let c = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap().correction;
        assert!((c.latency_scale - 1.1).abs() < 1e-9, "{c:?}");
        assert!((c.latency_per_layer_ms - 0.02).abs() < 1e-9, "{c:?}");
        assert!((c.memory_fixed_mib - 0.5).abs() < 1e-9, "{c:?}");
        assert!((c.memory_per_layer_mib - 0.01).abs() < 1e-9, "{c:?}");
        assert!((c.memory_per_weighted_layer_mib - 0.03).abs() < 1e-9, "{c:?}");
        for p in &points {
            let calibrated = c.peak_memory_mib(p.predicted_peak_memory_mib, p.executing_layers, p.weighted_layers);
            assert!((calibrated - p.measured_peak_memory_mib).abs() < 1e-9, "{p:?}");
        }
        // Every layer weighted: the columns are dependent, and the weighted term stays 0.
        let all: Vec<CalibrationPoint> = points
            .iter()
            .map(|p| CalibrationPoint {
                weighted_layers: p.executing_layers,
                measured_peak_memory_mib: p.predicted_peak_memory_mib + 0.5 + 0.04 * p.executing_layers as f64,
                ..p.clone()
            })
            .collect();
        let c = Calibration::fit("dev", "learned", "h", all, Some(2.0)).unwrap().correction;
        assert_eq!(c.memory_per_weighted_layer_mib, 0.0, "{c:?}");
        assert!((c.memory_per_layer_mib - 0.04).abs() < 1e-9, "{c:?}");
        assert!((c.layer_latency_ms(LayerType::Conv2d, 1 << 20, net(1024.0), 2.0) - (1.1 * 2.0 + 0.02)).abs() < 1e-9);
        // No dense layers in the points: no dense term.
        assert_eq!((c.dense_weight_ms_per_mib, c.dense_weight_limit_mib), (0.0, 0.0));
        assert!((c.layer_latency_ms(LayerType::Dense, 1 << 20, net(1024.0), 2.0) - (1.1 * 2.0 + 0.02)).abs() < 1e-9);
        // A negative per-layer term never makes a layer negative.
        let shrink = Correction { latency_per_layer_ms: -1.0, ..c };
        assert_eq!(shrink.layer_latency_ms(LayerType::Conv2d, 0, net(0.0), 0.1), 0.0);
    }

    #[test]
    fn fused_residual_adds_fit_their_term_through_the_origin() {
        let adds = |n: usize, ms_per_mib: f64| -> Vec<ResidualAddPoint> {
            (0..n)
                .map(|i| {
                    let add_mib = 0.25 * (1 + i % 4) as f64;
                    ResidualAddPoint {
                        layer: format!("c{i}"),
                        add: format!("a{i}"),
                        add_mib,
                        predicted_ms: 1.0,
                        measured_ms: 1.0 + ms_per_mib * add_mib,
                    }
                })
                .collect()
        };
        let mut points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0)];
        points.push(CalibrationPoint { residual_adds: adds(5, 0.4), ..point("d", 60, 7.0, 30.0) });
        points[0].residual_adds = adds(5, 0.4);
        let c = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap();
        assert!((c.correction.residual_add_ms_per_mib - 0.4).abs() < 1e-9, "{:?}", c.correction);
        assert!((c.correction.residual_add_ms(3 << 20) - 1.2).abs() < 1e-9);
        // The network total carries it: 5 adds of 0.25-1.25 MiB on "d".
        let d = &c.networks[3];
        let k = Correction { residual_add_ms_per_mib: 0.4, ..Correction::NONE };
        let sum_mib: f64 = d.residual_adds.iter().map(|r| r.add_mib).sum();
        assert!((k.network_latency_ms(d) - (d.predicted_latency_ms + 0.4 * sum_mib)).abs() < 1e-9);
        assert_eq!(c.clone().memory_only().correction.residual_add_ms_per_mib, 0.0);
        assert!(c.clone().without_network_latency().correction.residual_add_ms_per_mib > 0.0);
        // Too few adds, or adds that ran faster than predicted: no term.
        points[0].residual_adds.clear();
        let few = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap();
        assert_eq!(few.correction.residual_add_ms_per_mib, 0.0);
        points[0].residual_adds = adds(5, -0.1);
        points[3].residual_adds = adds(5, -0.1);
        let faster = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap();
        assert_eq!(faster.correction.residual_add_ms_per_mib, 0.0);
        // Layer norms computing an add have a term of their own, fitted alike and carried by the totals.
        points[0].residual_adds.clear();
        points[3].residual_adds.clear();
        points[3].norm_adds = adds(12, 1.2);
        let c = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        assert!((c.correction.norm_add_ms_per_mib - 1.2).abs() < 1e-9, "{:?}", c.correction);
        assert_eq!(c.correction.residual_add_ms_per_mib, 0.0);
        let d = &c.networks[3];
        let k = Correction { norm_add_ms_per_mib: 1.2, ..Correction::NONE };
        let sum_mib: f64 = d.norm_adds.iter().map(|r| r.add_mib).sum();
        assert!((k.network_latency_ms(d) - (d.predicted_latency_ms + 1.2 * sum_mib)).abs() < 1e-9);
        assert_eq!(c.clone().memory_only().correction.norm_add_ms_per_mib, 0.0);
    }

    #[test]
    fn products_with_a_constant_weight_fit_the_fraction_they_take_more_in_a_network() {
        let products = |n: usize, extra: f64| -> Vec<DenseLayerPoint> {
            (0..n)
                .map(|i| {
                    let predicted_ms = 0.5 * (1 + i % 3) as f64;
                    DenseLayerPoint {
                        layer: format!("m{i}"),
                        weight_mib: 2.25,
                        predicted_ms,
                        measured_ms: (1.0 + extra) * predicted_ms,
                    }
                })
                .collect()
        };
        let mut points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0)];
        points.push(CalibrationPoint { matmul_layers: products(12, 0.06), ..point("d", 60, 7.0, 30.0) });
        let c = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap();
        assert!((c.correction.matmul_extra_fraction - 0.06).abs() < 1e-9, "{:?}", c.correction);
        // On a product with weights only, and in the network's total.
        let k = Correction { matmul_extra_fraction: 0.06, ..Correction::NONE };
        assert!((k.layer_latency_ms(LayerType::MatMul, 1 << 20, net(1024.0), 2.0) - 2.12).abs() < 1e-9);
        assert_eq!(k.layer_latency_ms(LayerType::MatMul, 0, net(1024.0), 2.0), 2.0, "a product of two tensors");
        assert_eq!(k.layer_latency_ms(LayerType::Dense, 1 << 20, net(1024.0), 2.0), 2.0);
        let d = &c.networks[3];
        let sum: f64 = d.matmul_layers.iter().map(|m| m.predicted_ms).sum();
        assert!((k.network_latency_ms(d) - (d.predicted_latency_ms + 0.06 * sum)).abs() < 1e-9);
        assert_eq!(c.memory_only().correction.matmul_extra_fraction, 0.0);
        // Too few of them: no term.
        points[3].matmul_layers.truncate(MIN_MATMUL_LAYERS - 1);
        let few = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        assert_eq!(few.correction.matmul_extra_fraction, 0.0);
    }

    /// Convolutions over one pixel have a term of their own, fitted on them alone: the products' term is not
    /// moved by them, nor theirs by the products.
    #[test]
    fn convolutions_over_one_pixel_fit_their_own_term() {
        let layers = |extra_fraction: f64, per_mib: f64| -> Vec<DenseLayerPoint> {
            (0..24)
                .map(|i| {
                    let weight_mib = [0.02, 0.08, 0.3, 0.6][i % 4];
                    let predicted_ms = [0.003, 0.005, 0.007][i % 3];
                    DenseLayerPoint {
                        layer: format!("p{i}"),
                        weight_mib,
                        predicted_ms,
                        measured_ms: (1.0 + extra_fraction) * predicted_ms + per_mib * weight_mib,
                    }
                })
                .collect()
        };
        let mut points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0)];
        points.push(CalibrationPoint {
            pixel_convs: layers(0.5, 0.04),
            matmul_layers: layers(-0.05, 0.01),
            ..point("d", 60, 7.0, 30.0)
        });
        let c = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        let k = &c.correction;
        assert!((k.pixel_conv_extra_fraction - 0.5).abs() < 1e-9, "{k:?}");
        assert!((k.pixel_conv_weight_ms_per_mib - 0.04).abs() < 1e-9, "{k:?}");
        assert!((k.matmul_extra_fraction + 0.05).abs() < 1e-9 && (k.matmul_weight_ms_per_mib - 0.01).abs() < 1e-9);
        assert!((k.pixel_conv_extra_ms(0.004, 1 << 20) - (0.5 * 0.004 + 0.04)).abs() < 1e-12);
        let memory = c.memory_only().correction;
        assert_eq!((memory.pixel_conv_extra_fraction, memory.pixel_conv_weight_ms_per_mib), (0.0, 0.0));
    }

    /// Convolutions that read the network's input fit a fraction and a term per MiB of that input, on their own
    /// times; the one-pixel term is not moved by them, and a network's calibrated total counts them.
    #[test]
    fn convolutions_reading_the_input_fit_their_own_term() {
        let stems: Vec<InputConvPoint> = (0..12)
            .map(|i| {
                let input_mib = [0.01, 0.29, 0.57, 1.02][i % 4];
                let predicted_ms = [0.08, 0.2, 2.1][i % 3];
                InputConvPoint {
                    layer: format!("s{i}"),
                    input_mib,
                    predicted_ms,
                    measured_ms: 1.1 * predicted_ms + 0.25 * input_mib,
                }
            })
            .collect();
        let mut points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0)];
        points.push(CalibrationPoint { input_convs: stems.clone(), ..point("d", 60, 7.0, 30.0) });
        let c = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        let k = c.correction;
        assert!((k.input_conv_extra_fraction - 0.1).abs() < 1e-9, "{k:?}");
        assert!((k.input_conv_ms_per_input_mib - 0.25).abs() < 1e-9, "{k:?}");
        assert_eq!((k.pixel_conv_extra_fraction, k.pixel_conv_weight_ms_per_mib), (0.0, 0.0));
        assert!((k.input_conv_extra_ms(0.2, 1 << 20) - (0.1 * 0.2 + 0.25)).abs() < 1e-12);
        // The network's total grows by its stems' terms (then scaled like every layer).
        let d = &c.networks[3];
        let without = Correction { input_conv_extra_fraction: 0.0, input_conv_ms_per_input_mib: 0.0, ..k };
        let extra: f64 = stems.iter().map(|m| 0.1 * m.predicted_ms + 0.25 * m.input_mib).sum();
        let grown = k.network_latency_ms(d) - without.network_latency_ms(d);
        assert!((grown - k.latency_scale * extra).abs() < 1e-9, "{grown} vs {extra}");
        // Too few stems: no term.
        let few = CalibrationPoint { input_convs: stems[..3].to_vec(), ..point("d", 60, 7.0, 30.0) };
        let points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0), few];
        let k = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap().correction;
        assert_eq!((k.input_conv_extra_fraction, k.input_conv_ms_per_input_mib), (0.0, 0.0));
        let memory = c.memory_only().correction;
        assert_eq!((memory.input_conv_extra_fraction, memory.input_conv_ms_per_input_mib), (0.0, 0.0));
    }

    #[test]
    fn products_that_read_their_weights_from_memory_fit_a_term_per_mib_of_them() {
        // 5% faster than predicted, plus 0.04 ms per MiB of weights: the few-row products of a short sequence
        // take relatively more.
        let products: Vec<DenseLayerPoint> = (0..16)
            .map(|i| {
                let weight_mib = [0.5, 1.0, 2.25, 9.0][i % 4];
                let rows = [64.0, 128.0, 512.0][i % 3];
                let predicted_ms = 0.002 * rows * weight_mib;
                DenseLayerPoint {
                    layer: format!("m{i}"),
                    weight_mib,
                    predicted_ms,
                    measured_ms: 0.95 * predicted_ms + 0.04 * weight_mib,
                }
            })
            .collect();
        let mut points = vec![point("a", 10, 5.0, 20.0), point("b", 200, 80.0, 150.0), point("c", 50, 3.0, 4.0)];
        points.push(CalibrationPoint { matmul_layers: products, ..point("d", 60, 7.0, 30.0) });
        let c = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        let k = &c.correction;
        assert!(
            (k.matmul_extra_fraction + 0.05).abs() < 1e-9 && (k.matmul_weight_ms_per_mib - 0.04).abs() < 1e-9,
            "{k:?}"
        );
        let k = Correction {
            matmul_extra_fraction: k.matmul_extra_fraction,
            matmul_weight_ms_per_mib: k.matmul_weight_ms_per_mib,
            ..Correction::NONE
        };
        let one_mib = k.layer_latency_ms(LayerType::MatMul, 1 << 20, net(1024.0), 2.0);
        assert!((one_mib - (0.95 * 2.0 + 0.04)).abs() < 1e-9, "{one_mib}");
        assert_eq!(c.memory_only().correction.matmul_weight_ms_per_mib, 0.0);
    }

    /// Dense layers that take 0.05 ms more per MiB of weights above 0.25 MiB, up to 16 MiB, inside the networks,
    /// and what they took alone above it (their weights missed the cache alone too).
    fn with_dense_layers(mut points: Vec<CalibrationPoint>) -> Vec<CalibrationPoint> {
        let sizes = [0.5, 1.0, 4.0, 8.0, 16.0, 64.0, 400.0];
        for (i, p) in points.iter_mut().enumerate() {
            for (j, &mib) in sizes.iter().enumerate().skip(i % 2).step_by(2) {
                let predicted_ms = 0.06 * mib;
                let extra = if mib <= 16.0 { 0.05 * (mib - 0.25) } else { 0.0 };
                p.dense_layers.push(DenseLayerPoint {
                    layer: format!("fc{j}"),
                    weight_mib: mib,
                    predicted_ms,
                    measured_ms: predicted_ms + extra,
                });
                p.predicted_latency_ms += predicted_ms;
                p.measured_latency_ms += 1.1 * (predicted_ms + extra);
            }
        }
        points
    }

    #[test]
    fn dense_layers_fit_their_weights_term_up_to_a_limit() {
        let points = with_dense_layers(vec![
            point("a", 10, 5.0, 20.0),
            point("b", 200, 80.0, 150.0),
            point("c", 50, 3.0, 4.0),
            point("d", 60, 7.0, 30.0),
        ]);
        let fitted = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap();
        let c = fitted.correction;
        assert!((c.dense_weight_ms_per_mib - 0.05).abs() < 1e-9, "{c:?}");
        assert!((c.dense_weight_floor_mib - 0.25).abs() < 1e-9, "{c:?}");
        // Halfway (geometrically) between the largest size that gets the term and the next one measured.
        assert!((c.dense_weight_limit_mib - 32.0).abs() < 1e-9, "{c:?}");
        assert!((c.dense_weight_ms(LayerType::Dense, 8 << 20, net(1024.0)) - 0.05 * 7.75).abs() < 1e-9);
        assert_eq!(c.dense_weight_ms(LayerType::Dense, 1 << 16, net(1024.0)), 0.0, "below the floor");
        assert_eq!(c.dense_weight_ms(LayerType::Dense, 64 << 20, net(1024.0)), 0.0);
        assert_eq!(c.dense_weight_ms(LayerType::Conv2d, 8 << 20, net(1024.0)), 0.0);
        // The network terms are fitted on top of the dense term: the same 1.1 x + 0.02 ms per layer as before.
        assert!((c.latency_scale - 1.1).abs() < 1e-9 && (c.latency_per_layer_ms - 0.02).abs() < 1e-9, "{c:?}");
        for p in &points {
            assert!((c.network_latency_ms(p) - p.measured_latency_ms).abs() < 1e-9, "{p:?}");
        }
        let layers_only = fitted.clone().without_network_latency();
        assert!(!layers_only.network_latency && !layers_only.memory_only);
        assert_eq!((layers_only.correction.latency_scale, layers_only.correction.latency_per_layer_ms), (1.0, 0.0));
        assert_eq!(layers_only.correction.dense_weight_ms_per_mib, c.dense_weight_ms_per_mib);
        let memory = fitted.memory_only();
        assert!(memory.memory_only && memory.correction.dense_weight_ms_per_mib == 0.0);
        assert_eq!(memory.correction.layer_latency_ms(LayerType::Dense, 8 << 20, net(1024.0), 1.0), 1.0);
        // Too few dense layers: no term.
        let mut few = points.clone();
        for p in &mut few {
            p.dense_layers.truncate(if p.network == "a" { 3 } else { 0 });
        }
        let c = Calibration::fit("dev", "learned", "h", few, Some(2.0)).unwrap().correction;
        assert_eq!((c.dense_weight_ms_per_mib, c.dense_weight_limit_mib), (0.0, 0.0));
        // Layers that take no longer in the networks: no term either.
        let mut same = points;
        for d in same.iter_mut().flat_map(|p| &mut p.dense_layers) {
            d.measured_ms = d.predicted_ms;
        }
        let c = Calibration::fit("dev", "learned", "h", same, Some(2.0)).unwrap().correction;
        assert_eq!((c.dense_weight_ms_per_mib, c.dense_weight_limit_mib), (0.0, 0.0));
    }

    #[test]
    fn the_gate_counts_a_network_s_activations_when_they_decide_the_cache_regime() {
        // Four CNNs of 6-12 MiB of weights and 30-200 MiB with their outputs, whose 3-8 MiB heads take 0.05 ms
        // more per MiB above 0.25 MiB; three MLPs of 9-16 MiB of weights (and hardly any outputs) whose 3-6 MiB
        // layers take what they took alone. By weights, an MLP is larger than every CNN: no gate on weights
        // keeps the MLPs' layers from the term and the CNNs' heads in it.
        let mut points = Vec::new();
        for (i, (weights, touched)) in [(6.0, 30.0), (8.0, 60.0), (10.0, 120.0), (12.0, 200.0)].into_iter().enumerate()
        {
            let mut p = point(&format!("cnn{i}"), 50, 5.0, 20.0);
            (p.weight_mib, p.touched_mib) = (weights, touched);
            for (j, mib) in [3.0, 5.0, 8.0].into_iter().enumerate() {
                let ms = 0.02 * mib;
                p.dense_layers.push(DenseLayerPoint {
                    layer: format!("fc{j}"),
                    weight_mib: mib,
                    predicted_ms: ms,
                    measured_ms: ms + 0.05 * (mib - 0.25),
                });
            }
            points.push(p);
        }
        for (i, weights) in [9.0, 13.0, 16.0].into_iter().enumerate() {
            let mut p = point(&format!("mlp{i}"), 3, 0.1, 3.0);
            (p.weight_mib, p.touched_mib) = (weights, weights + 0.1);
            for (j, mib) in [3.0, 4.0, 6.0].into_iter().enumerate() {
                p.dense_layers.push(DenseLayerPoint {
                    layer: format!("fc{j}"),
                    weight_mib: mib,
                    predicted_ms: 0.02 * mib,
                    measured_ms: 0.02 * mib,
                });
            }
            points.push(p);
        }
        let c = Calibration::fit("dev", "learned", "h", points.clone(), Some(1.0)).unwrap().correction;
        assert_eq!(c.dense_network_basis, SizeBasis::Touched, "{c:?}");
        assert!((c.dense_network_min_mib - (16.1f64 * 30.0).sqrt()).abs() < 1e-9, "{c:?}");
        assert!((c.dense_weight_ms_per_mib - 0.05).abs() < 1e-9, "{c:?}");
        let cnn = NetworkSize { weight_mib: 7.0, touched_mib: 29.0 };
        let mlp = NetworkSize { weight_mib: 20.0, touched_mib: 20.1 };
        assert!((c.dense_weight_ms(LayerType::Dense, 4 << 20, cnn) - 0.05 * 3.75).abs() < 1e-9);
        assert_eq!(c.dense_weight_ms(LayerType::Dense, 4 << 20, mlp), 0.0);
        assert!(c.dense_gate_clause().contains("weights and layer outputs"), "{}", c.dense_gate_clause());
        // A calibration that predates the touched size (0 recorded) is gated on weights.
        for p in &mut points {
            p.touched_mib = 0.0;
        }
        let c = Calibration::fit("dev", "learned", "h", points, Some(1.0)).unwrap().correction;
        assert_eq!(c.dense_network_basis, SizeBasis::Weights, "{c:?}");
    }

    #[test]
    fn layers_beyond_the_core_cache_get_no_term_in_small_networks() {
        // Four large networks (100-2000 MiB of weights) whose dense layers take 0.05 ms more per MiB above
        // 0.25 MiB (up to 16 MiB); two small ones (10 and 16 MiB) where only the layers within the core's 2 MiB
        // of cache do, and the 3- and 4-MiB ones take what they took alone.
        let mut points = with_dense_layers(vec![
            point("a", 10, 5.0, 20.0),
            point("b", 200, 80.0, 150.0),
            point("c", 50, 3.0, 4.0),
            point("d", 60, 7.0, 30.0),
        ]);
        for (name, weight_mib) in [("mlp", 10.0), ("mlp2", 16.0)] {
            let mut p = point(name, 5, 0.1, 3.0);
            p.weight_mib = weight_mib;
            for (j, mib) in [0.5, 1.0, 1.5, 3.0, 4.0].into_iter().enumerate() {
                let ms = 0.06 * mib;
                let extra = if mib <= 2.0 { 0.05 * (mib - 0.25) } else { 0.0 };
                p.dense_layers.push(DenseLayerPoint {
                    layer: format!("fc{j}"),
                    weight_mib: mib,
                    predicted_ms: ms,
                    measured_ms: ms + extra,
                });
            }
            points.push(p);
        }
        let c = Calibration::fit("dev", "learned", "h", points.clone(), Some(2.0)).unwrap().correction;
        // Halfway (geometrically) between the largest small network and the smallest large one (100 MiB).
        assert!((c.dense_network_min_mib - (16.0f64 * 100.0).sqrt()).abs() < 1e-9, "{c:?}");
        assert!((c.dense_weight_ms_per_mib - 0.05).abs() < 1e-9 && c.dense_cache_mib == 2.0, "{c:?}");
        assert_eq!(c.dense_weight_ms(LayerType::Dense, 4 << 20, net(16.0)), 0.0);
        assert!((c.dense_weight_ms(LayerType::Dense, 4 << 20, net(100.0)) - 0.05 * 3.75).abs() < 1e-9);
        assert!((c.dense_weight_ms(LayerType::Dense, 1 << 20, net(16.0)) - 0.05 * 0.75).abs() < 1e-9);
        assert!((c.dense_weight_ms_for_mib(4.0, net(40.5)) - 0.05 * 3.75).abs() < 1e-9);
        // Without the small networks, every network gets the term. With only the smaller one, whose two
        // layers beyond the cache alone would call for the gate just above it, that gate is not tried: two
        // layers are too few to show a cache regime.
        let c = Calibration::fit("dev", "learned", "h", points[..4].to_vec(), Some(2.0)).unwrap().correction;
        assert_eq!(c.dense_network_min_mib, 0.0, "{c:?}");
        let c = Calibration::fit("dev", "learned", "h", points[..5].to_vec(), Some(2.0)).unwrap().correction;
        assert_ne!(c.dense_network_min_mib, (10.0f64 * 100.0).sqrt(), "{c:?}");
        let c = Calibration::fit("dev", "learned", "h", points.clone(), None).unwrap().correction;
        assert!(c.dense_cache_mib == 0.0 && c.dense_network_min_mib == 0.0 && c.dense_weight_ms_per_mib > 0.0, "{c:?}");
        // A network size that is not a finite, non-negative number is refused.
        let mut bad = points.clone();
        bad[0].weight_mib = f64::NAN;
        let err = Calibration::fit("dev", "learned", "h", bad, Some(2.0)).unwrap_err().to_string();
        assert!(err.contains("network 'a'"), "{err}");
        // A negative cache size in a file is refused.
        let dir = tempfile::tempdir().unwrap();
        let path = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap().save(dir.path()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let negative = text.replace("\"dense_cache_mib\": 2.0", "\"dense_cache_mib\": -2.0");
        assert_ne!(negative, text);
        std::fs::write(&path, negative).unwrap();
        let err = Calibration::load(dir.path(), "dev").unwrap_err().to_string();
        assert!(err.contains("dense-weights term"), "{err}");
    }

    #[test]
    fn the_core_cache_is_read_from_the_kernels_description() {
        let dir = tempfile::tempdir().unwrap();
        let index = |i: usize, level: &str, kind: &str, size: &str| {
            let d = dir.path().join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            for (name, text) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(name), format!("{text}\n")).unwrap();
            }
        };
        assert_eq!(read_core_cache_mib(&dir.path().join("missing")), None);
        index(0, "1", "Data", "48K");
        index(1, "1", "Instruction", "32K");
        assert_eq!(read_core_cache_mib(dir.path()), None);
        index(2, "2", "Unified", "2048K");
        index(3, "3", "Unified", "107520K");
        assert_eq!(read_core_cache_mib(dir.path()), Some(2.0));
        index(4, "2", "Instruction", "4M");
        index(5, "2", "Data", "garbage");
        assert_eq!(read_core_cache_mib(dir.path()), Some(2.0));
    }

    #[test]
    fn too_few_or_unmeasured_networks_are_refused() {
        let three = vec![point("a", 10, 5.0, 20.0), point("b", 20, 8.0, 15.0), point("c", 5, 1.0, 1.0)];
        assert!(Calibration::fit("dev", "learned", "h", three, Some(2.0))
            .unwrap_err()
            .to_string()
            .contains("at least 4"));
        let mut bad = vec![
            point("a", 10, 5.0, 20.0),
            point("b", 20, 8.0, 15.0),
            point("c", 5, 1.0, 1.0),
            point("d", 40, 9.0, 2.0),
        ];
        bad[2].measured_latency_ms = 0.0;
        let err = Calibration::fit("dev", "learned", "h", bad, Some(2.0)).unwrap_err().to_string();
        assert!(err.contains("network 'c'"), "{err}");
    }

    #[test]
    fn save_load_round_trip_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Calibration::load(dir.path(), "dev").unwrap(), None);
        let points = vec![
            point("a", 10, 5.0, 20.0),
            point("b", 200, 80.0, 150.0),
            point("c", 50, 3.0, 4.0),
            point("d", 60, 7.0, 30.0),
        ];
        let c = Calibration::fit("dev", "learned", "h", points, Some(2.0)).unwrap();
        let path = c.save(dir.path()).unwrap();
        assert_eq!(Calibration::load(dir.path(), "dev").unwrap(), Some(c));
        let text = std::fs::read_to_string(&path).unwrap();
        let negative = text.replace("\"dense_weight_ms_per_mib\": 0.0", "\"dense_weight_ms_per_mib\": -0.5");
        assert_ne!(negative, text);
        std::fs::write(&path, negative).unwrap();
        let err = Calibration::load(dir.path(), "dev").unwrap_err().to_string();
        assert!(err.contains("calibration.json") && err.contains("dense-weights term"), "{err}");
        std::fs::write(&path, "{ not json").unwrap();
        let err = Calibration::load(dir.path(), "dev").unwrap_err().to_string();
        assert!(err.contains("calibration.json") && err.contains("perfmodel calibrate"), "{err}");
    }
}
