//! The passes of an estimate over an engine's [`Plan`]: predict every layer that runs, then latency, energy and
//! memory, each over the whole network.
//!
//! Why passes: the engine decides what runs ([`crate::engine::rules`]), the method decides what a running layer
//! costs ([`super::Method`]), and the three metrics combine those answers in different ways (a sum, a sum of
//! products, a liveness walk). Kept apart, a new engine changes the plan only and a new metric adds a pass.

use super::memory::{self, Step, BYTES_PER_ELEMENT};
use super::structure::EngineStructure;
use super::{layer_error, Calibration, Correction, Estimator, Totals, Uncovered};
use crate::engine::rules::{EngineRules, Fusion, Plan, Role, FUSED, FUSED_BATCH_NORM};
use crate::error::Result;
use crate::filled::filled;
use crate::layer::{Activation, LayerConfig, LayerCost, LayerError, LayerType, Op, Shape};
use crate::network::{Analysis, Network, Source, Sources};
use crate::units::MIB;
use serde::{Serialize, Serializer};
use std::fmt;

/// What answered for one layer: the `predictor` of the estimate's JSON, CSV and C ABI, which prints as before
/// (`ert`, `fused:<layer>`, `ert+add:<layer>`, `free`, `analytic:bandwidth`, `uncovered`).
#[derive(Debug, Clone, PartialEq)]
pub enum AnsweredBy {
    /// A view or an inference no-op: 0 ms, no allocation.
    Free,
    /// Computed inside the kernel of the named layer: its cost is that layer's.
    Fused { into: String },
    /// A named model of the method (a trained regressor's name such as `ert`, `paleo`, `template:<sample>`);
    /// `fused_add` names a residual add this layer's product computes, whose time is included.
    Model { name: String, fused_add: Option<String> },
    /// A cheap memory-bound layer timed at the device's memory bandwidth.
    Analytic,
    /// Nothing could predict it: no number.
    Uncovered,
}

impl AnsweredBy {
    /// Whether the layer runs as a kernel of its own (neither free nor fused).
    pub fn runs(&self) -> bool {
        !matches!(self, AnsweredBy::Free | AnsweredBy::Fused { .. })
    }

    /// The layer whose kernel computes this one.
    pub fn fused_into(&self) -> Option<&str> {
        match self {
            AnsweredBy::Fused { into } => Some(into),
            _ => None,
        }
    }

    /// The residual add whose time this layer's prediction includes.
    pub fn fused_add(&self) -> Option<&str> {
        match self {
            AnsweredBy::Model { fused_add, .. } => fused_add.as_deref(),
            _ => None,
        }
    }
}

impl fmt::Display for AnsweredBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnsweredBy::Free => f.write_str("free"),
            AnsweredBy::Fused { into } => write!(f, "fused:{into}"),
            AnsweredBy::Model { name, fused_add: None } => f.write_str(name),
            AnsweredBy::Model { name, fused_add: Some(add) } => write!(f, "{name}+add:{add}"),
            AnsweredBy::Analytic => f.write_str("analytic:bandwidth"),
            AnsweredBy::Uncovered => f.write_str("uncovered"),
        }
    }
}

impl Serialize for AnsweredBy {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl PartialEq<str> for AnsweredBy {
    /// Whether this prints as `other`.
    fn eq(&self, other: &str) -> bool {
        match self {
            AnsweredBy::Free => other == "free",
            AnsweredBy::Fused { into } => other.strip_prefix("fused:") == Some(into.as_str()),
            AnsweredBy::Model { name, fused_add: None } => other == name,
            AnsweredBy::Model { name, fused_add: Some(add) } => {
                other.strip_prefix(name.as_str()).and_then(|rest| rest.strip_prefix("+add:")) == Some(add.as_str())
            }
            AnsweredBy::Analytic => other == "analytic:bandwidth",
            AnsweredBy::Uncovered => other == "uncovered",
        }
    }
}

impl PartialEq<&str> for AnsweredBy {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

/// What a method says about one layer.
pub(super) struct Prediction<'a> {
    pub latency_ms: f64,
    pub power_w: Option<f64>,
    /// The layer's whole memory while it runs, as the collector measures it (inputs, output, weights, scratch).
    pub memory_mib: Option<f64>,
    /// Bytes the engine keeps for the layer's weights when the memory model knows them (tract's packed
    /// weights), else `None`: the f32 weights count.
    pub weight_bytes: Option<u64>,
    /// The model's name ([`AnsweredBy::Model`]), borrowed from the estimator where it can be.
    pub name: std::borrow::Cow<'a, str>,
}

/// How a layer's predicted memory divides: what stays resident for the whole run and the workspace its step
/// holds beyond its inputs, output and those.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The engine's weights (packed when the memory model knows them, else f32).
    weight_bytes: u64,
    /// Tables the engine's plan keeps for the whole run ([`crate::engine::packing::tract_plan_bytes`]).
    plan_bytes: u64,
    /// `None` without a memory prediction.
    workspace_bytes: Option<u64>,
    /// The memory model counts the engine's packing as this machine's engine packs (the device's machine's
    /// instruction set): what the engine is asked about its copies describes the device.
    packs_here: bool,
}

impl Prediction<'_> {
    fn held(&self, config: &LayerConfig, cost: &LayerCost, rules: &dyn EngineRules) -> Held {
        let (weight_bytes, plan_bytes) = rules.resident_bytes(config, cost, self.weight_bytes);
        let workspace_bytes = self.memory_mib.map(|m| {
            // `as` saturates: an absurd extrapolation stays huge instead of wrapping.
            let predicted = if m.is_finite() && m > 0.0 { (m * MIB) as u64 } else { 0 };
            let io_bytes = (cost.input_elems + cost.output_elems) * BYTES_PER_ELEMENT;
            predicted.saturating_sub(io_bytes.saturating_add(weight_bytes).saturating_add(plan_bytes))
        });
        Held { weight_bytes, plan_bytes, workspace_bytes, packs_here: self.weight_bytes.is_some() }
    }
}

/// [`AnsweredBy`] with layers by index and the model's name borrowed: the passes run thousands of times a
/// second in a NAS loop, and only a full estimate reports names ([`By::named`]).
pub(super) enum By<'a> {
    Free,
    Fused { into: usize },
    Model { name: std::borrow::Cow<'a, str>, fused_add: Option<usize> },
    Analytic,
    Uncovered,
}

impl By<'_> {
    /// Whether the layer runs as a kernel of its own (neither free nor fused).
    fn runs(&self) -> bool {
        !matches!(self, By::Free | By::Fused { .. })
    }

    /// The reported form, with the layers of `net` by name.
    pub fn named(self, net: &Network) -> AnsweredBy {
        let name = |i: usize| net.layers[i].name.clone();
        match self {
            By::Free => AnsweredBy::Free,
            By::Fused { into } => AnsweredBy::Fused { into: name(into) },
            By::Model { name: model, fused_add } => {
                AnsweredBy::Model { name: model.into_owned(), fused_add: fused_add.map(name) }
            }
            By::Analytic => AnsweredBy::Analytic,
            By::Uncovered => AnsweredBy::Uncovered,
        }
    }
}

/// The answer for one layer of the plan, before calibration.
pub(super) struct Answer<'a> {
    pub by: By<'a>,
    /// A fused add's time included; `None` when uncovered.
    pub latency_ms: Option<f64>,
    pub power_w: Option<f64>,
    /// For a layer the method predicted: what it keeps resident and its workspace.
    held: Option<Held>,
    /// For a reader of an unbuilt concat: the largest workspace of one part's product plus the partial sum.
    part_workspace: Option<u64>,
}

impl<'a> Answer<'a> {
    fn without_work(by: By<'a>) -> Answer<'a> {
        Answer { by, latency_ms: Some(0.0), power_w: None, held: None, part_workspace: None }
    }
}

/// Pass 1: every running layer predicted by the method. A residual add planned inside a convolution that has no
/// prediction, or that nothing times, runs as itself after all ([`Plan::run_add_alone`]).
pub(super) fn predict<'a>(
    estimator: &'a Estimator,
    net: &Network,
    analysis: &Analysis,
    plan: &mut Plan,
) -> Result<(Vec<Answer<'a>>, Vec<Uncovered>)> {
    let rules = estimator.rules;
    let total_flops = analysis.total_flops();
    let mut answers = Vec::with_capacity(net.layers.len());
    let mut uncovered = Vec::new();
    // The time of the operands a product packs from a strided tensor (a transpose it reads): the packing does
    // the transpose's work, so its product takes that time on (the transpose comes first in the network).
    let mut operand_ms = filled(0.0f64, net.layers.len());
    // The add a layer norm computes (ONNX Runtime's `SkipLayerNormalization`), per layer norm.
    let norm_add = norm_adds(net, plan);
    // A layer whose time no model knows, with its share of the network's work.
    let uncovered_layer = |i: usize| {
        let flops = analysis.costs[i].flops;
        Uncovered {
            name: net.layers[i].name.clone(),
            layer_type: net.layers[i].op.layer_type(),
            flops,
            flops_share: if total_flops > 0 { flops as f64 / total_flops as f64 } else { 0.0 },
        }
    };
    for (i, layer) in net.layers.iter().enumerate() {
        let kernel = match plan.role(i) {
            Role::Free => {
                answers.push(Answer::without_work(By::Free));
                continue;
            }
            Role::Inside { owner, fusion: Fusion::Operand | Fusion::IntoReader, .. } => {
                let (config, cost) = (analysis.config(i), &analysis.costs[i]);
                let prediction =
                    estimator.predict(config, &analysis.output_shapes[i], cost).map_err(|e| layer_error(net, i, e))?;
                match prediction {
                    Some(p) => operand_ms[owner] += p.latency_ms,
                    // Its work is its reader's, but no model knows how long it takes: the estimate says so.
                    None => uncovered.push(uncovered_layer(i)),
                }
                answers.push(Answer::without_work(By::Fused { into: owner }));
                continue;
            }
            Role::Inside { owner, .. } => {
                answers.push(Answer::without_work(By::Fused { into: owner }));
                continue;
            }
            Role::Runs(kernel) => kernel,
        };
        let layer_type = layer.op.layer_type();
        let cost = &analysis.costs[i];
        let config = analysis.config(i);
        let output = &analysis.output_shapes[i];
        let prediction = match activation_apart(rules, config, output) {
            Some((product, activation)) => {
                predict_apart(estimator, &product, &activation, output).map_err(|e| layer_error(net, i, e))?
            }
            None => None,
        };
        let prediction = match prediction {
            Some(p) => Some(p),
            None => estimator.predict(config, output, cost).map_err(|e| layer_error(net, i, e))?,
        };
        let answer = match prediction {
            Some(p) => {
                let held = p.held(config, cost, rules);
                let mut latency_ms = p.latency_ms + operand_ms[i];
                let mut fused_add = norm_add[i];
                if let Some(add) = kernel.fused_add {
                    // The add runs inside this layer's product: its work is part of this layer's time.
                    match add_latency_ms(estimator, net, analysis, add)? {
                        Some(ms) => {
                            latency_ms += ms;
                            fused_add = Some(add);
                        }
                        None => plan.run_add_alone(add),
                    }
                }
                let part_workspace = match (kernel.concat_by_part, held.workspace_bytes) {
                    (Some(concat), Some(_)) => {
                        let parts = &analysis.config(concat).input_shapes;
                        let output_bytes = cost.output_elems * BYTES_PER_ELEMENT;
                        part_workspace(estimator, config, parts, output_bytes).map_err(|e| layer_error(net, i, e))?
                    }
                    _ => None,
                };
                Answer {
                    by: By::Model { name: p.name, fused_add },
                    latency_ms: Some(latency_ms),
                    power_w: p.power_w,
                    held: Some(held),
                    part_workspace,
                }
            }
            None => {
                if let Some(add) = kernel.fused_add {
                    plan.run_add_alone(add);
                }
                let no_model =
                    |by, latency_ms| Answer { by, latency_ms, power_w: None, held: None, part_workspace: None };
                match estimator.memory_bandwidth_gbs {
                    Some(gbs) if is_memory_bound(layer_type) => {
                        let io_bytes = (cost.input_elems + cost.output_elems) * BYTES_PER_ELEMENT;
                        no_model(By::Analytic, Some(1e3 * io_bytes as f64 / (gbs * 1e9)))
                    }
                    _ => {
                        uncovered.push(uncovered_layer(i));
                        no_model(By::Uncovered, None)
                    }
                }
            }
        };
        answers.push(answer);
    }
    Ok((answers, uncovered))
}

/// A convolution or dense layer as the two nodes its engine runs ([`EngineRules::predicts_activation_apart`]):
/// the product without its activation, and the activation on the product's output. `None` when the engine
/// runs the activation inside, or predicts the layer whole.
fn activation_apart(
    rules: &dyn EngineRules,
    config: &LayerConfig,
    output: &Shape,
) -> Option<(LayerConfig, LayerConfig)> {
    if !rules.predicts_activation_apart()
        || rules.own_activation_kind(&config.op) != Some(LayerType::Activation.as_str())
    {
        return None;
    }
    let mut product = config.clone();
    let activation = match &mut product.op {
        Op::Conv2d(c) => std::mem::replace(&mut c.activation, Activation::Linear),
        Op::DepthwiseConv2d(d) => std::mem::replace(&mut d.activation, Activation::Linear),
        Op::Dense(d) => std::mem::replace(&mut d.activation, Activation::Linear),
        _ => return None,
    };
    let activation = LayerConfig {
        op: Op::Activation(activation),
        input_shapes: smallvec::smallvec![output.clone()],
        batch: config.batch,
    };
    Some((product, activation))
}

/// The product's prediction with the activation's time added (its memory is the product's: the activation
/// runs in place). `None` when either has no model.
fn predict_apart<'a>(
    estimator: &'a Estimator,
    product: &LayerConfig,
    activation: &LayerConfig,
    output: &Shape,
) -> std::result::Result<Option<Prediction<'a>>, LayerError> {
    // The product's own cost (without the activation's operations).
    let product_cost = product.cost_of_output(output)?;
    let Some(mut p) = estimator.predict(product, output, &product_cost)? else { return Ok(None) };
    let activation_cost = activation.cost_of_output(output)?;
    let Some(a) = estimator.predict(activation, output, &activation_cost)? else { return Ok(None) };
    p.latency_ms += a.latency_ms;
    Ok(Some(p))
}

/// The time of a residual add computed inside a convolution: its own prediction, else its memory traffic at the
/// device's bandwidth; `None` when neither is known.
fn add_latency_ms(estimator: &Estimator, net: &Network, analysis: &Analysis, add: usize) -> Result<Option<f64>> {
    let add_config = analysis.config(add);
    let add_cost = &analysis.costs[add];
    let add_output = &analysis.output_shapes[add];
    Ok(match estimator.predict(add_config, add_output, add_cost).map_err(|e| layer_error(net, add, e))? {
        Some(p) => Some(p.latency_ms),
        None => estimator.memory_bandwidth_gbs.map(|gbs| {
            let bytes = (add_cost.input_elems + add_cost.output_elems) * BYTES_PER_ELEMENT;
            1e3 * bytes as f64 / (gbs * 1e9)
        }),
    })
}

/// Workspace of a 1×1 convolution that reads a concat part by part (one the engine never builds, or builds for
/// other readers and slices): it computes one product per part, so the largest of the workspaces predicted for
/// each part alone, plus the partial sum the next part adds to.
/// `None` when a part has no memory prediction.
fn part_workspace(
    estimator: &Estimator,
    config: &LayerConfig,
    parts: &[Shape],
    output_bytes: u64,
) -> std::result::Result<Option<u64>, LayerError> {
    let mut largest = 0u64;
    for part in parts {
        let part_config = LayerConfig { input_shapes: smallvec::smallvec![part.clone()], ..config.clone() };
        let output = part_config.output_shape()?;
        let cost = part_config.cost_of_output(&output)?;
        let Some(p) = estimator.predict(&part_config, &output, &cost)? else { return Ok(None) };
        let Some(workspace) = p.held(&part_config, &cost, estimator.rules).workspace_bytes else { return Ok(None) };
        largest = largest.max(workspace);
    }
    Ok(Some(largest.saturating_add(output_bytes)))
}

/// Layer types cheap enough to cost their memory traffic when no predictor knows them.
fn is_memory_bound(t: LayerType) -> bool {
    matches!(
        t,
        LayerType::Activation
            | LayerType::BatchNorm
            | LayerType::Add
            | LayerType::Multiply
            | LayerType::Concat
            | LayerType::ZeroPadding2d
            | LayerType::Cropping2d
            | LayerType::GlobalAvgPool2d
            | LayerType::GlobalMaxPool2d
            | LayerType::ChannelShuffle
            | LayerType::ChannelSlice
            | LayerType::Transpose
            | LayerType::Elementwise
            | LayerType::Embedding
            | LayerType::Softmax
            | LayerType::LayerNorm
    )
}

/// Pass 2: each layer's latency, the whole-network calibration's per-layer terms applied to the layers that
/// run (a fused add's own term on its convolution).
pub(super) fn latency(
    net: &Network,
    analysis: &Analysis,
    plan: &Plan,
    answers: &[Answer],
    correction: Option<Correction>,
    layout: Option<(&dyn EngineRules, f64)>,
) -> Vec<Option<f64>> {
    let network = crate::estimate::calibration::NetworkSize::of(&analysis.costs, plan);
    let norm_add = norm_adds(net, plan);
    // Which layers read the network's input, only when the calibration has a term for them (every estimate of a
    // NAS loop passes here).
    let input_conv = correction
        .filter(|c| c.input_conv_extra_fraction != 0.0 || c.input_conv_ms_per_input_mib != 0.0)
        .map(|_| input_convolutions(net, analysis, plan));
    let mut own: Vec<Option<f64>> = answers.iter().map(|a| a.latency_ms).collect();
    if let Some((rules, ms_per_mib)) = layout {
        // The calibration's share of the credit (fitted on estimates with all of it).
        let scale = correction.map_or(1.0, |c| c.layout_credit_scale);
        layout_conversions(net, analysis, plan, rules, ms_per_mib, scale, &mut own);
    }
    own.iter()
        .enumerate()
        .map(|(i, &own_ms)| {
            let (Some(c), Some(t), Some(kernel)) = (correction, own_ms, plan.kernel(i)) else {
                return own_ms;
            };
            // The residual-add term is a convolution's (a product with a constant weight has its weights' term);
            // a layer norm computing an add has a term of its own.
            let t = match kernel.fused_add {
                Some(add) if matches!(net.layers[i].op, Op::Conv2d(_)) => {
                    t + c.residual_add_ms(analysis.costs[add].output_elems * BYTES_PER_ELEMENT)
                }
                _ => t,
            };
            let t = match norm_add[i] {
                Some(add) => t + c.norm_add_ms(analysis.costs[add].output_elems * BYTES_PER_ELEMENT),
                None => t,
            };
            let weight_bytes = analysis.costs[i].weight_elems * BYTES_PER_ELEMENT;
            let t = if analysis.is_pixel_convolution(i) { t + c.pixel_conv_extra_ms(t, weight_bytes) } else { t };
            let t = match &input_conv {
                Some(reads) if reads[i] => t + c.input_conv_extra_ms(t, input_bytes(analysis, i)),
                _ => t,
            };
            Some(c.layer_latency_ms(net.layers[i].op.layer_type(), weight_bytes, network, t))
        })
        .collect()
}

/// The f32 bytes layer `i` reads (all its inputs, whole batch).
pub(crate) fn input_bytes(analysis: &Analysis, i: usize) -> u64 {
    analysis.costs[i].input_elems * BYTES_PER_ELEMENT
}

/// Per layer, whether it is a convolution that reads the network's input: directly, or through layers that do
/// not run of their own (a zero padding the engine folds into it). Such a layer reads an input the caller wrote
/// before the run and writes into a buffer the previous run last used; looped alone it finds both in its caches.
/// On the `zen4` host ONNX Runtime's 3x3 stride-2 stems of 224x224 images to 16-32 channels took 2-3x their time
/// alone in their networks, and tract's too, which the calibration's input term counts. A convolution over one
/// pixel has a term of its own and is not one of these.
pub(crate) fn input_convolutions(net: &Network, analysis: &Analysis, plan: &Plan) -> Vec<bool> {
    let n = net.layers.len();
    // Whether layer j's output is the network input passed through layers that do not run.
    let mut carries_input = filled(false, n);
    let mut reads_input = filled(false, n);
    for j in 0..n {
        let from_input = analysis.sources[j].iter().any(|s| match *s {
            Source::Input => true,
            Source::Layer(k) => carries_input[k],
        });
        reads_input[j] = from_input;
        carries_input[j] = from_input && !plan.runs(j);
    }
    (0..n)
        .map(|i| {
            reads_input[i]
                && plan.runs(i)
                && matches!(net.layers[i].op, Op::Conv2d(_))
                && analysis.costs[i].weight_elems > 0
                && !analysis.is_pixel_convolution(i)
        })
        .collect()
}

/// Per layer, the add it computes when it is a layer norm that computes its input's add
/// ([`Fusion::IntoReader`]: ONNX Runtime's `SkipLayerNormalization`).
pub(super) fn norm_adds(net: &Network, plan: &Plan) -> Vec<Option<usize>> {
    let mut add_of = filled(None, net.layers.len());
    for (j, role) in plan.roles().iter().enumerate() {
        if let Role::Inside { owner, fusion: Fusion::IntoReader, .. } = *role {
            if matches!(net.layers[j].op, Op::Add)
                && matches!(net.layers.get(owner).map(|l| &l.op), Some(Op::LayerNorm { .. }))
            {
                add_of[owner] = Some(j);
            }
        }
    }
    add_of
}

/// Part of pass 2, before the calibration's terms (which were fitted on estimates with it): take off a running
/// layer's latency the layout conversions it paid when measured alone and does not
/// pay in this network ([`EngineRules::layout_bytes_saved`], at `ms_per_mib`), at most half of its latency (a
/// conversion costs less than the layer it surrounds), and of that credit the calibration's share `scale`.
fn layout_conversions(
    net: &Network,
    analysis: &Analysis,
    plan: &Plan,
    rules: &dyn EngineRules,
    ms_per_mib: f64,
    scale: f64,
    latency: &mut [Option<f64>],
) {
    let saved_bytes = rules.layout_bytes_saved(net, analysis, plan);
    for (t, &saved) in latency.iter_mut().zip(&saved_bytes) {
        let Some(ms) = t.as_mut() else { continue };
        if saved > 0 {
            *ms -= layout_credit_ms(saved, ms_per_mib, *ms) * scale;
        }
    }
}

/// The conversions a layer predicted at `own_ms` does not pay in a network, `saved_bytes` of them at
/// `ms_per_mib`: at most half its time.
pub(super) fn layout_credit_ms(saved_bytes: u64, ms_per_mib: f64, own_ms: f64) -> f64 {
    (saved_bytes as f64 / crate::units::MIB * ms_per_mib).min(own_ms / 2.0)
}

/// Pass 3: each layer's energy, latency × power (ms × W = mJ); 0 for a layer that does not run. Returns the
/// energies and how many running layers have no power prediction.
pub(super) fn energy(latency: &[Option<f64>], answers: &[Answer]) -> (Vec<Option<f64>>, usize) {
    let mut missing = 0;
    let energy = latency
        .iter()
        .zip(answers)
        .map(|(t, a)| match (t, a.power_w) {
            (Some(t), Some(p)) => Some(t * p),
            (Some(_), None) if !a.by.runs() => Some(0.0),
            _ => {
                missing += 1;
                None
            }
        })
        .collect();
    (energy, missing)
}

/// What the memory pass gives: each layer's memory while it runs and the network's memory in use at each step,
/// what stays resident, and how many running layers have no memory prediction.
pub(super) struct MemoryPass {
    pub layer_mib: Vec<f64>,
    pub in_use_bytes: Vec<Option<u64>>,
    pub steps: Vec<Step>,
    pub resident_bytes: u64,
    pub input_bytes: u64,
    pub missing: usize,
}

/// Pass 4: memory. Every running layer's memory as measured alone (inputs, output, weights, tables, workspace,
/// its engine structure), what stays resident (weights, tables, the engine's structure per layer), and the
/// liveness walk ([`memory`]) over the plan.
pub(super) fn memory(
    net: &Network,
    analysis: &Analysis,
    plan: &Plan,
    answers: &[Answer],
    rules: &dyn EngineRules,
    structure: Option<&EngineStructure>,
) -> MemoryPass {
    let n = net.layers.len();
    let (mut layer_mib, mut steps) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut all_weight_bytes, mut missing) = (0u64, 0usize);
    // What the engine keeps per layer besides weights and tables ([`super::structure`]); signed (see there).
    let mut structure_bytes = 0.0f64;
    for (i, (layer, answer)) in net.layers.iter().zip(answers).enumerate() {
        let cost = &analysis.costs[i];
        let output_bytes = cost.output_elems * BYTES_PER_ELEMENT;
        let kernel = match plan.role(i) {
            Role::Runs(kernel) => kernel,
            role => {
                let fusion = match role {
                    Role::Inside { fusion, .. } => Some(fusion),
                    _ => None,
                };
                if let (Some(Fusion::Epilogue | Fusion::ResidualAdd), Some(s)) = (fusion, structure) {
                    // A batch norm folded into the product before it, or an activation or add it computes.
                    let kind = if matches!(layer.op, Op::BatchNorm) { FUSED_BATCH_NORM } else { FUSED };
                    structure_bytes += s.bytes(kind);
                }
                layer_mib.push(0.0);
                steps.push(Step {
                    output_bytes,
                    workspace_bytes: 0,
                    executes: false,
                    in_place: false,
                    packs_input: false,
                    // Both an unbuilt concat's parts and an add computed by its reader are read by the layer after.
                    keeps_inputs: matches!(fusion, Some(Fusion::UnbuiltConcat | Fusion::IntoReader)),
                    adds_into_first: false,
                });
                continue;
            }
        };
        // The layer's part of the engine's plan: measured alone, its memory includes it (`alone`, taken out of
        // the workspace below); in the network it is resident (`in_network`: a chained follower adds less, a
        // product over a concat read part by part is one product per part, and an activation the layer computes
        // is a fused op or a node of its own).
        let alone_bytes = match structure {
            Some(s) => {
                let own_kind = rules.structure_kind_of(analysis.config(i));
                let kind = rules.structure_kind(net, &analysis.sources, plan, i, own_kind);
                let products = kernel.concat_by_part.map_or(1, |concat| analysis.sources[concat].len().max(1));
                let activation = rules.own_activation_kind(&layer.op).map_or(0.0, |k| s.bytes(k));
                structure_bytes += s.bytes(kind) * products as f64 + activation;
                s.bytes(own_kind).max(0.0) as u64
            }
            None => 0,
        };
        let (weight_bytes, plan_bytes, workspace_bytes, alone_workspace_bytes) = match answer.held {
            Some(held) => {
                let workspace = match (held.workspace_bytes, answer.part_workspace) {
                    (Some(_), Some(parts)) => Some(parts.saturating_sub(alone_bytes)),
                    (Some(bytes), None) => Some(bytes.saturating_sub(alone_bytes)),
                    (None, _) => None,
                };
                // Through the layers that do not run (views, layers fused into their producer) to the tensor
                // the layer reads: kept when the caller owns it or another layer reads it too.
                let input_kept = {
                    let mut source = analysis.sources[i].first().copied();
                    loop {
                        match source {
                            Some(Source::Layer(j)) if plan.consumers(j) > 1 => break true,
                            Some(Source::Layer(j)) if plan.runs(j) => break false,
                            // A residual add computed inside a product is that product's output buffer.
                            Some(Source::Layer(j)) => {
                                source = match plan.role(j) {
                                    Role::Inside { fusion: Fusion::ResidualAdd, via, .. } => Some(Source::Layer(via)),
                                    // A duplicate's output is its first instance's.
                                    Role::Inside { fusion: Fusion::Duplicate, owner, .. } => Some(Source::Layer(owner)),
                                    _ => analysis.sources[j].first().copied(),
                                }
                            }
                            _ => break true,
                        }
                    }
                };
                // Where the engine's scratch is known from its code, it stands instead of the memory model's: in
                // the network as the input's readers leave it, alone with the input the caller's.
                let config = analysis.config(i);
                let known_alone = rules.known_workspace_bytes(config, true);
                let known_here = if input_kept { known_alone } else { rules.known_workspace_bytes(config, false) };
                let (alone_workspace, workspace) = (known_alone.or(workspace), known_here.or(workspace));
                if workspace.is_none() {
                    missing += 1;
                }
                let (workspace, alone_workspace) = (workspace.unwrap_or(0), alone_workspace.unwrap_or(0));
                // Alone, the input is the caller's and the engine may copy it before packing; in the network a
                // packing layer that is its input's only reader holds the packed copy alone.
                let packed = if input_kept || kernel.concat_by_part.is_some() || !held.packs_here {
                    None
                } else {
                    rules.packed_input_bytes(config)
                };
                (held.weight_bytes, held.plan_bytes, packed.unwrap_or(workspace), alone_workspace)
            }
            None => (cost.weight_elems * BYTES_PER_ELEMENT, 0, 0, 0),
        };
        let io_bytes = (cost.input_elems + cost.output_elems) * BYTES_PER_ELEMENT;
        // The layer's whole memory while it runs, as measured alone (its structure back in; its workspace with the
        // input the caller's: the engine's known scratch or the memory model's answer, not the network's packed
        // copy).
        let alone = io_bytes + weight_bytes + plan_bytes + alone_workspace_bytes + alone_bytes;
        layer_mib.push(alone as f64 / MIB);
        all_weight_bytes += weight_bytes + plan_bytes;
        steps.push(Step {
            output_bytes,
            workspace_bytes,
            executes: true,
            in_place: rules.computes_in_place(&layer.op),
            packs_input: rules.copies_input_when_packing(analysis.config(i)) && kernel.concat_by_part.is_none(),
            keeps_inputs: false,
            adds_into_first: false,
        });
    }
    let input_bytes = net.input_shape.iter().product::<usize>() as u64 * net.batch_size as u64 * BYTES_PER_ELEMENT;
    // A fused add's output is the convolution's output (the product adds the other input as it stores): the
    // memory walk aliases a layer that does not run to its first input, so that side goes first. A duplicate's
    // output is its first instance's: it reads that.
    let reordered;
    let rewritten = |r: &Role| matches!(r, Role::Inside { fusion: Fusion::ResidualAdd | Fusion::Duplicate, .. });
    let sources = if plan.roles().iter().any(rewritten) {
        let mut s = analysis.sources.clone();
        for (i, role) in plan.roles().iter().enumerate() {
            match *role {
                Role::Inside { via, fusion: Fusion::ResidualAdd, .. } if s[i].get(1) == Some(&Source::Layer(via)) => {
                    s[i].swap(0, 1);
                }
                Role::Inside { owner, fusion: Fusion::Duplicate, .. } => {
                    s[i] = smallvec::smallvec![Source::Layer(owner)]
                }
                _ => {}
            }
        }
        reordered = s;
        &reordered
    } else {
        &analysis.sources
    };
    let resident_bytes = (all_weight_bytes as f64 + structure_bytes).max(0.0) as u64;
    let in_use_bytes = match rules.arena() {
        Some(arena) => {
            let arena_bytes = rules.arena_bytes(net, analysis, plan);
            let reuse = rules.arena_reuse_shapes(net, analysis, plan);
            let graph_order = rules.runs_in_graph_order(net, analysis, plan);
            let tensors = ArenaTensors { bytes: &arena_bytes, reuse_shapes: reuse.as_deref(), graph_order };
            arena_in_use(plan, sources, &steps, input_bytes, resident_bytes, tensors, arena)
        }
        None => memory::in_use_bytes(sources, &steps, input_bytes, resident_bytes),
    };
    MemoryPass { layer_mib, in_use_bytes, steps, resident_bytes, input_bytes, missing }
}

/// What each layer takes from an engine's arena ([`EngineRules::arena_bytes`]) and the shapes its planner
/// matches dead tensors' buffers by ([`EngineRules::arena_reuse_shapes`]), in the network's order.
#[derive(Clone, Copy)]
struct ArenaTensors<'a> {
    bytes: &'a [(u64, u64)],
    reuse_shapes: Option<&'a [Shape]>,
    /// Run in the graph's own order ([`graph_order`]) rather than [`engine_order`]'s.
    graph_order: bool,
}

/// [`memory::arena_in_use_bytes`] in the engine's order ([`engine_order`]), with each convolution that computes a
/// residual add reading the add's other input first; per layer in the network's order.
fn arena_in_use(
    plan: &Plan,
    sources: &[Sources],
    steps: &[Step],
    input_bytes: u64,
    resident_bytes: u64,
    tensors: ArenaTensors,
    arena: crate::estimate::arena::ArenaConfig,
) -> Vec<Option<u64>> {
    // A convolution computing an add reads the add's other input first and writes its sum there when
    // that is its last reader; the add itself reads only the convolution's side.
    let original = sources;
    // Copied only when changed: a NAS loop estimates thousands of small networks a second.
    let mut sources = std::borrow::Cow::Borrowed(sources);
    let mut steps = std::borrow::Cow::Borrowed(steps);
    for (conv, kernel) in (0..sources.len()).filter_map(|i| Some((i, plan.kernel(i)?))) {
        let Some(add) = kernel.fused_add else { continue };
        if let [own, other] = sources[add][..] {
            let s = sources.to_mut();
            s[conv].insert(0, other);
            s[add] = smallvec::smallvec![own];
            steps.to_mut()[conv].adds_into_first = true;
        }
    }
    // In the engine's order: a convolution computing a residual add reads the add's other input, so it
    // runs when the add would (ONNX Runtime runs a projection block's main branch, then the
    // projection with the add).
    let order = if tensors.graph_order { graph_order(&sources) } else { engine_order(plan, original) };
    if order.iter().enumerate().all(|(p, &i)| p == i) {
        // The network's own order: nothing to renumber.
        return memory::arena_in_use_bytes(
            &sources,
            &steps,
            input_bytes,
            resident_bytes,
            tensors.bytes,
            tensors.reuse_shapes,
            arena,
        );
    }
    let mut position = filled(0, order.len());
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    let at = |s: &Source| match *s {
        Source::Layer(j) => Source::Layer(position[j]),
        Source::Input => Source::Input,
    };
    let sources: Vec<Sources> = order.iter().map(|&i| sources[i].iter().map(at).collect()).collect();
    debug_assert!(
        sources.iter().enumerate().all(|(p, s)| s.iter().all(|s| !matches!(s, Source::Layer(l) if *l >= p))),
        "the engine's order runs a layer before one it reads"
    );
    let steps: Vec<Step> = order.iter().map(|&i| steps[i]).collect();
    let arena_bytes: Vec<(u64, u64)> = order.iter().map(|&i| tensors.bytes[i]).collect();
    let reuse_shapes: Option<Vec<Shape>> =
        tensors.reuse_shapes.map(|shapes| order.iter().map(|&i| shapes[i].clone()).collect());
    let ordered = memory::arena_in_use_bytes(
        &sources,
        &steps,
        input_bytes,
        resident_bytes,
        &arena_bytes,
        reuse_shapes.as_deref(),
        arena,
    );
    let mut in_use = filled(None, order.len());
    for (p, &i) in order.iter().enumerate() {
        in_use[i] = ordered[p];
    }
    in_use
}

/// The layers in the order ONNX Runtime runs its graph (`GraphViewer`: `ReverseDFSFrom` the nodes no node reads,
/// with `NodeCompare`): depth first back from each layer no layer reads, the last first, a layer placed after
/// everything it reads; of a layer's inputs, the one of the highest index is walked first. In attention that
/// runs the scores and their softmax before the values' projection, as ONNX Runtime's profile shows.
fn graph_order(sources: &[Sources]) -> Vec<usize> {
    let n = sources.len();
    let mut read = filled(false, n);
    for s in sources.iter().flatten() {
        if let Source::Layer(l) = *s {
            if l < n {
                read[l] = true;
            }
        }
    }
    // (layer, leaving): a layer is placed when it is left, after the layers it reads.
    let mut stack: Vec<(usize, bool)> = (0..n).filter(|&i| !read[i]).map(|i| (i, false)).collect();
    let mut visited = filled(false, n);
    let mut order = Vec::with_capacity(n);
    while let Some((i, leaving)) = stack.pop() {
        if leaving {
            order.push(i);
            continue;
        }
        if visited[i] {
            continue;
        }
        visited[i] = true;
        stack.push((i, true));
        let mut inputs: Vec<usize> = sources[i]
            .iter()
            .filter_map(|s| match *s {
                Source::Layer(l) if l < n && !visited[l] => Some(l),
                _ => None,
            })
            .collect();
        inputs.sort_unstable();
        inputs.dedup();
        stack.extend(inputs.into_iter().map(|l| (l, false)));
    }
    order
}

/// The layers in the order the engine runs them: the network's, but a layer whose kernel computes a residual add
/// runs just before that add (after the add's other input), and with it every layer between them that it
/// computes or that reads one moved (a batch norm folded into it, a dropout on the way to the add), so that a
/// layer still comes after the layers it reads.
///
/// For an engine that runs its graph's own order this serves only where the layers' indices cannot stand in for
/// its nodes' ([`EngineRules::runs_in_graph_order`], [`graph_order`]): ONNX Runtime's NCHWc layout replaces a
/// CNN's convolutions and puts reorders between them, and walked by the layers' indices, Keras NASNet-Mobile's
/// arena came to 16 MiB of regions where ONNX Runtime's took 8 (the torchvision CNNs estimated the same in
/// either order).
fn engine_order(plan: &Plan, sources: &[Sources]) -> Vec<usize> {
    let n = plan.roles().len();
    let mut deferred: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut moved = filled(false, n);
    for i in 0..n {
        if let Some(add) = plan.kernel(i).and_then(|k| k.fused_add).filter(|&a| a > i && a < n && !moved[i]) {
            let mut group = vec![i];
            for j in i + 1..add {
                let reads_moved = sources[j].iter().any(|s| matches!(s, Source::Layer(l) if group.contains(l)));
                if !moved[j] && (plan.owner(j) == Some(i) || reads_moved) {
                    group.push(j);
                }
            }
            for &j in &group {
                moved[j] = true;
            }
            deferred[add].extend(group);
        }
    }
    let mut order = Vec::with_capacity(n);
    for i in 0..n {
        order.append(&mut deferred[i]);
        if !moved[i] {
            order.push(i);
        }
    }
    order
}

/// The totals of an estimate from its rows and the memory pass: the peak of the liveness walk (calibrated when
/// the device has a calibration), the paper's two cruder memory rules beside it.
pub(super) fn totals(
    type_of: impl Fn(usize) -> LayerType,
    latency: &[Option<f64>],
    energy: &[Option<f64>],
    memory: &MemoryPass,
    calibration: Option<&Calibration>,
    has_power: bool,
    name_of: impl Fn(usize) -> String,
) -> Totals {
    let mut peak: Option<(usize, u64)> = None;
    for (i, bytes) in memory.in_use_bytes.iter().enumerate() {
        if let Some(b) = *bytes {
            if peak.is_none_or(|(_, p)| b > p) {
                peak = Some((i, b));
            }
        }
    }
    let mut peak_memory_mib = peak.map_or(memory.resident_bytes, |(_, b)| b) as f64 / MIB;
    if let Some(c) = calibration.map(|c| c.correction) {
        let timed = || (0..memory.steps.len()).filter(|&i| memory.steps[i].executes && latency[i].is_some());
        let weighted = timed().filter(|&i| type_of(i).is_weighted()).count();
        peak_memory_mib = c.peak_memory_mib(peak_memory_mib, timed().count(), weighted);
    }
    // Summed largest first, as always (the same bits); inline for the small networks a NAS loop asks about.
    let mut executed: smallvec::SmallVec<[f64; 32]> =
        memory.layer_mib.iter().zip(&memory.steps).filter(|(_, s)| s.executes).map(|(&m, _)| m).collect();
    executed.sort_by(|a, b| b.total_cmp(a));
    Totals {
        latency_ms: latency.iter().flatten().sum(),
        energy_mj: has_power.then(|| energy.iter().flatten().sum()),
        peak_memory_mib,
        peak_memory_layer: peak.map(|(i, _)| name_of(i)),
        resident_memory_mib: memory.resident_bytes.saturating_add(memory.input_bytes) as f64 / MIB,
        memory_two_largest_mib: executed.iter().take(2).sum(),
        memory_two_mean_mib: if executed.is_empty() {
            0.0
        } else {
            2.0 * executed.iter().sum::<f64>() / executed.len() as f64
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rules::{OnnxRuntime, Tract};
    use crate::engine::GraphOptimization;

    /// The convolutions that read the network's input: the stem behind a padding folded into it and a second
    /// branch on the input; not a convolution after the stem, nor a dense layer, nor a pooling.
    #[test]
    fn input_convolutions_are_the_convolutions_fed_by_the_network_input() {
        let net = Network::from_json_str(
            r#"{"name": "stems", "batch_size": 2, "input_shape": [3, 16, 16], "layers": [
              {"name": "pad", "type": "zero_padding2d", "padding": [1, 1, 1, 1]},
              {"name": "stem", "type": "conv2d", "filters": 8, "kernel": [3,3], "strides": [2,2]},
              {"name": "bn", "type": "batch_norm"},
              {"name": "c2", "type": "conv2d", "filters": 8, "kernel": [1,1]},
              {"name": "side", "type": "conv2d", "filters": 8, "kernel": [2,2], "strides": [2,2], "inputs": ["input"]},
              {"name": "pool", "type": "max_pool2d", "pool_size": [2,2], "inputs": ["input"]},
              {"name": "sum", "type": "add", "inputs": ["c2", "side"]}]}"#,
            "stems.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        for rules in [&Tract as &dyn EngineRules, &OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 }] {
            let plan = rules.plan(&net, &analysis);
            let flagged = input_convolutions(&net, &analysis, &plan);
            let names: Vec<&str> =
                (0..net.layers.len()).filter(|&i| flagged[i]).map(|i| net.layers[i].name.as_str()).collect();
            assert_eq!(names, ["stem", "side"], "{}", rules.name());
        }
        // The stem reads the padded input, both images.
        assert_eq!(input_bytes(&analysis, 1), 2 * 3 * 18 * 18 * 4);
    }

    /// ONNX Runtime's walk of an attention block: the key's projection before the query's, the scores and their
    /// softmax before the values' projection (its profile's order for a BERT encoder).
    #[test]
    fn the_graph_order_runs_the_scores_and_softmax_before_the_values() {
        let l = Source::Layer;
        // q, k, v (of the input), scores(q, k), softmax, context(softmax, v), output projection.
        let input = || Sources::from_slice(&[Source::Input]);
        let sources =
            [input(), input(), input(), [l(0), l(1)].into(), [l(3)][..].into(), [l(4), l(2)].into(), [l(5)][..].into()];
        assert_eq!(graph_order(&sources), vec![1, 0, 3, 4, 2, 5, 6]);
        // Two layers nobody reads: the last one's branch first.
        assert_eq!(graph_order(&[input(), input()]), vec![1, 0]);
    }

    /// A convolution computing an add runs after the add's other branch, with its batch norm and the dropout
    /// after it, so that every layer still comes after what it reads (as ONNX Runtime runs an EfficientNet block).
    #[test]
    fn the_engine_order_moves_an_add_s_convolution_and_what_reads_it_after_the_other_branch() {
        let net = Network::from_json_str(
            r#"{"name": "block", "input_shape": [16, 8, 8], "layers": [
              {"name": "project", "type": "conv2d", "filters": 16, "kernel": [1, 1]},
              {"name": "bn", "type": "batch_norm"},
              {"name": "drop", "type": "dropout", "rate": 0.2},
              {"name": "other", "type": "conv2d", "filters": 16, "kernel": [3, 3], "padding": "same", "activation": "relu",
               "inputs": ["input"]},
              {"name": "add", "type": "add", "inputs": ["drop", "other"]}]}"#,
            "block.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let plan = rules.plan(&net, &analysis);
        assert_eq!(plan.kernel(0).and_then(|k| k.fused_add), Some(4), "{:?}", plan.roles());
        assert_eq!(engine_order(&plan, &analysis.sources), [3, 0, 1, 2, 4]);
        // Without the add inside a convolution, the network's order (see `engine_order` on ONNX Runtime's own).
        let extended = OnnxRuntime { level: GraphOptimization::Extended, nchwc_block: 16 };
        assert_eq!(engine_order(&extended.plan(&net, &analysis), &analysis.sources), [0, 1, 2, 3, 4]);
    }

    /// The calibration's share applies to the credit as capped (at most half the layer's time), as it was fitted.
    #[test]
    fn the_layout_credit_share_applies_to_the_capped_credit() {
        let net = Network::from_json_str(
            r#"{"name": "chain", "input_shape": [32, 32, 32], "layers": [
              {"name": "a", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same"},
              {"name": "b", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same"},
              {"name": "c", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same"}]}"#,
            "chain.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let plan = rules.plan(&net, &analysis);
        // `b` is blocked in and out inside the chain: 2 x 128 KiB of conversions it does not pay.
        let saved = rules.layout_bytes_saved(&net, &analysis, &plan);
        assert_eq!(saved[1], 2 * 32 * 32 * 32 * 4);
        let run = |rate: f64, scale: f64| {
            let mut latency = vec![Some(1.0); 3];
            layout_conversions(&net, &analysis, &plan, &rules, rate, scale, &mut latency);
            latency[1].unwrap()
        };
        // Uncapped: 0.25 MiB at 1 ms per MiB, a 0.4 share of it.
        assert!((run(1.0, 0.4) - (1.0 - 0.4 * 0.25)).abs() < 1e-12);
        // Capped at half of 1 ms whatever the rate; the share of the half.
        assert!((run(100.0, 1.0) - 0.5).abs() < 1e-12);
        assert!((run(100.0, 0.4) - (1.0 - 0.4 * 0.5)).abs() < 1e-12);
    }

    #[test]
    fn what_answered_prints_and_compares_as_the_strings_of_the_estimate_s_json() {
        let model = |name: &str, add: Option<&str>| AnsweredBy::Model {
            name: name.to_string(),
            fused_add: add.map(str::to_string),
        };
        let cases = [
            (AnsweredBy::Free, "free"),
            (AnsweredBy::Fused { into: "c1".into() }, "fused:c1"),
            (model("ert+log", None), "ert+log"),
            (model("ert", Some("a_add")), "ert+add:a_add"),
            (AnsweredBy::Analytic, "analytic:bandwidth"),
            (AnsweredBy::Uncovered, "uncovered"),
        ];
        for (by, text) in &cases {
            assert_eq!(by.to_string(), *text);
            assert_eq!(serde_json::to_value(by).unwrap(), serde_json::json!(text));
            for (_, other) in &cases {
                assert_eq!(by == *other, text == other, "{by:?} against {other}");
            }
        }
        assert!(model("ert", Some("a")) != "ert+add:b" && model("ert", Some("a")) != "ert");
        assert_eq!(model("ert", Some("a_add")).fused_add(), Some("a_add"));
        assert_eq!(AnsweredBy::Fused { into: "c1".into() }.fused_into(), Some("c1"));
        assert!(!AnsweredBy::Free.runs() && AnsweredBy::Uncovered.runs());
    }
}
