//! The trained models in the form they are stored and evaluated: flat arrays, no pointers, no library types.
//!
//! Training libraries keep trees as nested structs that serialise to hundreds of megabytes of JSON; estimation
//! needs microsecond queries and a store of a few megabytes. So every fitted model is converted once into one of
//! the plain forms below, and cross-validation scores that same form, so the model that was validated is exactly
//! the model that is shipped.

use serde::{Deserialize, Serialize};

/// Marks a leaf in [`FlatForest::feature`].
pub const LEAF: u16 = u16::MAX;

/// A forest of binary regression trees in contiguous arrays (preorder layout: the left child of node `i` is
/// `i + 1`, the right child is `right[i]`). A node is a leaf when `feature[i] == LEAF`; its value is then
/// `value[i]`. Otherwise a row goes left when `x[feature[i]] <= value[i]`.
/// The prediction is `base + scale * Σ_trees leaf` (mean of the trees for a random forest, shrunken sum for
/// boosting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlatForest {
    pub feature: Vec<u16>,
    pub value: Vec<f64>,
    pub right: Vec<u32>,
    pub roots: Vec<u32>,
    pub base: f64,
    pub scale: f64,
}

impl FlatForest {
    pub fn predict(&self, x: &[f64]) -> f64 {
        // Plain slices, not `Vec`s, in the loop: indexing a slice is a built-in operation even in an unoptimised
        // build, indexing a `Vec` is a call through `Index`.
        let (feature, value, right, roots) = (&self.feature[..], &self.value[..], &self.right[..], &self.roots[..]);
        let mut sum = 0.0;
        let mut t = 0;
        while t < roots.len() {
            let mut i = roots[t] as usize;
            let mut f = feature[i];
            while f != LEAF {
                i = if x[f as usize] <= value[i] { i + 1 } else { right[i] as usize };
                f = feature[i];
            }
            sum += value[i];
            t += 1;
        }
        self.base + self.scale * sum
    }

    pub fn node_count(&self) -> usize {
        self.feature.len()
    }

    /// Deepest root-to-leaf path over all trees (a root alone has depth 0).
    pub fn max_depth(&self) -> usize {
        let mut deepest = 0;
        for &root in &self.roots {
            let mut stack = vec![(root as usize, 0usize)];
            while let Some((i, depth)) = stack.pop() {
                if self.feature[i] == LEAF {
                    deepest = deepest.max(depth);
                } else {
                    stack.push((i + 1, depth + 1));
                    stack.push((self.right[i] as usize, depth + 1));
                }
            }
        }
        deepest
    }
}

/// Per-feature standardisation `(x - mean) / scale`; constant features get scale 1 and contribute nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Standardizer {
    pub fn fit(rows: &[Vec<f64>]) -> Standardizer {
        let d = rows.first().map_or(0, Vec::len);
        let n = rows.len().max(1) as f64;
        let mut mean = vec![0.0; d];
        for r in rows {
            for (m, v) in mean.iter_mut().zip(r) {
                *m += v / n;
            }
        }
        let mut var = vec![0.0; d];
        for r in rows {
            for ((s, v), m) in var.iter_mut().zip(r).zip(&mean) {
                *s += (v - m) * (v - m) / n;
            }
        }
        let scale = var.iter().map(|v| if *v > 0.0 { v.sqrt() } else { 1.0 }).collect();
        Standardizer { mean, scale }
    }

    pub fn apply(&self, x: &[f64]) -> Vec<f64> {
        x.iter().zip(&self.mean).zip(&self.scale).map(|((v, m), s)| (v - m) / s).collect()
    }
}

/// k nearest neighbours on standardised features: the training points (f32, row-major) and their targets.
/// Constant features are dropped (`columns` lists the kept ones) so they cost no time per query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knn {
    pub k: usize,
    pub distance_weighted: bool,
    pub columns: Vec<u16>,
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
    pub points: Vec<f32>,
    pub targets: Vec<f64>,
}

impl Knn {
    pub fn predict(&self, x: &[f64]) -> f64 {
        let (columns, mean, scale) = (&self.columns[..], &self.mean[..], &self.scale[..]);
        let (points, targets) = (&self.points[..], &self.targets[..]);
        let d = columns.len();
        if d == 0 || targets.is_empty() {
            // No feature varied in training: every point is equally near.
            return targets.iter().sum::<f64>() / targets.len().max(1) as f64;
        }
        let mut query = vec![0f32; d];
        let q = &mut query[..];
        let mut j = 0;
        while j < d {
            q[j] = ((x[columns[j] as usize] - mean[j]) / scale[j]) as f32;
            j += 1;
        }
        // The k best (squared distance, row) so far, sorted ascending; k is small.
        let k = self.k.min(targets.len()).max(1);
        let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
        let mut worst = f32::INFINITY;
        let mut row = 0;
        while row < targets.len() {
            let point = &points[row * d..row * d + d];
            let mut dist = 0f32;
            let mut j = 0;
            while j < d && dist < worst {
                let diff = point[j] - q[j];
                dist += diff * diff;
                j += 1;
            }
            if dist < worst || best.len() < k {
                let at = best.partition_point(|(b, _)| *b <= dist);
                best.insert(at, (dist, row));
                best.truncate(k);
                if best.len() == k {
                    worst = best[k - 1].0;
                }
            }
            row += 1;
        }
        if self.distance_weighted {
            if let Some(&(_, exact)) = best.iter().find(|(dist, _)| *dist == 0.0) {
                return targets[exact];
            }
            let (mut num, mut den) = (0.0, 0.0);
            for &(dist, row) in &best {
                let w = 1.0 / (dist as f64).sqrt();
                num += w * targets[row];
                den += w;
            }
            num / den
        } else {
            best.iter().map(|&(_, row)| targets[row]).sum::<f64>() / best.len() as f64
        }
    }
}

/// A linear function of standardised features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    pub standardizer: Standardizer,
    pub coefficients: Vec<f64>,
    pub intercept: f64,
}

impl Linear {
    pub fn predict(&self, x: &[f64]) -> f64 {
        let (mean, scale, coefficients) =
            (&self.standardizer.mean[..], &self.standardizer.scale[..], &self.coefficients[..]);
        let mut y = self.intercept;
        let mut j = 0;
        while j < coefficients.len() {
            y += coefficients[j] * (x[j] - mean[j]) / scale[j];
            j += 1;
        }
        y
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Model {
    Trees(FlatForest),
    Knn(Knn),
    Linear(Linear),
    /// Another device's model of the same triplet with a correction learned on this device's rows
    /// ([`Transfer`]). Last, so stores written before it decode unchanged.
    Transfer(Box<Transfer>),
}

/// How a transferred model uses the source device's prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferMode {
    /// The correction learns the target as a multiple of the source's prediction (a new machine is mostly a
    /// per-layer speed ratio of a known one).
    Ratio,
    /// The source's prediction is one more feature of the correction, which may use or ignore it.
    Feature,
}

impl TransferMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferMode::Ratio => "ratio",
            TransferMode::Feature => "feature",
        }
    }
}

/// `f` of `features` followed by `appended`, built on the stack for the usual feature counts: no allocation per
/// prediction.
fn with_appended<R>(features: &[f64], appended: &[f64], f: impl FnOnce(&mut [f64]) -> R) -> R {
    let width = features.len() + appended.len();
    let mut buffer = [0.0f64; 64];
    let mut heap = Vec::new();
    let input: &mut [f64] = if width <= buffer.len() {
        &mut buffer[..width]
    } else {
        heap.resize(width, 0.0);
        &mut heap
    };
    input[..features.len()].copy_from_slice(features);
    input[features.len()..].copy_from_slice(appended);
    f(input)
}

/// Smallest source prediction a ratio is taken of (ms, W or MiB): a layer the source predicts at 0 still has
/// a time here.
pub const MIN_PRIOR: f64 = 1e-6;

/// A model of one device built on another's: the source device's predictor, copied so that the store stays
/// self-contained, and the correction trained on this device's rows (see [`TransferMode`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub source_device: String,
    pub mode: TransferMode,
    pub source: Predictor,
    pub correction: Predictor,
}

impl Transfer {
    pub fn predict(&self, features: &[f64]) -> f64 {
        let prior = self.source.predict(features);
        match self.mode {
            TransferMode::Ratio => self.correction.predict(features) * prior.max(MIN_PRIOR),
            TransferMode::Feature => with_appended(features, &[prior], |input| self.correction.predict(input)),
        }
    }
}

impl Model {
    /// How big the stored model is, for reports (tree size is what bounds prediction time).
    pub fn size_summary(&self) -> String {
        match self {
            Model::Trees(f) => {
                format!("{} trees, {} nodes, depth ≤ {}", f.roots.len(), f.node_count(), f.max_depth())
            }
            Model::Knn(k) => format!("{} points × {} features, k = {}", k.targets.len(), k.columns.len(), k.k),
            Model::Linear(l) => {
                format!("{} non-zero coefficients", l.coefficients.iter().filter(|c| **c != 0.0).count())
            }
            Model::Transfer(t) => format!(
                "{}'s model ({}) and a correction ({})",
                t.source_device,
                t.source.model.size_summary(),
                t.correction.model.size_summary()
            ),
        }
    }

    /// The prediction in the space the model was fitted in (log space when the target was log-transformed).
    pub fn predict_raw(&self, x: &[f64]) -> f64 {
        match self {
            Model::Trees(f) => f.predict(x),
            Model::Knn(k) => k.predict(x),
            Model::Linear(l) => l.predict(x),
            // A transfer needs the layer's own features ([`Predictor::predict`] handles it); in the fitted space
            // its correction's model is the one that was fitted.
            Model::Transfer(t) => t.correction.model.predict_raw(x),
        }
    }
}

/// A part of the target that follows from the features and is added to the model's output instead of being
/// learned: the model only learns the rest. A layer's memory is mostly its f32 inputs, weights and outputs,
/// known exactly; learning the whole sum turns a few percent of model error into megabytes on weight-heavy
/// layers, while the part the engine adds (scratch such as im2col buffers, fixed overhead) is small and smooth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnownPart {
    /// Indices of the (raw, untransformed) features that are summed.
    pub features: Vec<u16>,
    /// Multiplier of the sum.
    pub scale: f64,
    /// When set, the weights count as the engine holds them (packed for its kernels) instead of as f32.
    #[serde(default)]
    pub engine_weights: Option<EngineWeights>,
}

/// Weights as tract packs them for this machine's kernels ([`crate::engine::packing`]), replacing the f32
/// `weight_elems` term of a [`KnownPart`], plus the scratch a convolution's lowering needs
/// ([`crate::engine::packing::PackedShape::lowering_workspace_bytes`]). The packing depends on the instruction set tract dispatches on, so
/// it is recorded: on a machine with another one, the f32 weights are used instead (see [`Self::applies`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineWeights {
    /// tract's kernel instruction set where the models were trained (`tract_linalg::isa::native()`).
    pub isa: String,
    /// Index of `weight_elems`, the term replaced.
    pub weight_feature: u16,
    /// The feature indices the packed size is computed from, in [`crate::engine::packing::PackedShape`] order.
    pub shape: crate::engine::packing::PackedShape,
}

impl EngineWeights {
    /// For a dense or conv2d layer; `None` for other types (their weights stay plain f32 in tract).
    pub fn for_layer(layer_type: crate::LayerType, feature_names: &[String]) -> Option<EngineWeights> {
        let weight_feature =
            feature_names.iter().position(|f| f == "weight_elems").and_then(|i| u16::try_from(i).ok())?;
        Some(EngineWeights {
            isa: crate::engine::packing::host_isa().to_string(),
            weight_feature,
            shape: crate::engine::packing::PackedShape::for_layer(layer_type, feature_names)?,
        })
    }

    /// Whether the packing computed here is the one the models were trained with.
    pub fn applies(&self) -> bool {
        self.isa == crate::engine::packing::host_isa()
    }

    /// Bytes tract holds for the layer's weights and bias, from its features.
    pub fn bytes(&self, x: &[f64]) -> Option<u64> {
        self.shape.packed_bytes(x)
    }
}

/// Features a model sees beyond the layer's own: how the engine runs the layer on this machine, asked of the
/// engine itself ([`crate::engine::packing::ConvShape::engine_features`]: a convolution's lowering, how often a
/// lazy im2col re-gathers its input as tract walks the tiles, the walk's block edge, the kernel tile;
/// [`crate::engine::packing::dense_engine_features`]: a dense layer's kernel tile). The hyperparameters only
/// imply these through tract's decisions and the caches' sizes, as thresholds no few thousand samples pin down:
/// a 3×3 convolution of 256 channels runs at a third of the speed of one with 384.
/// Like [`EngineWeights`], they describe the machine the models were trained on (`isa`, `caches`); elsewhere
/// they are computed with that machine's answers replaced by this one's, which [`Self::applies`] tells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineFeatures {
    /// tract's kernel instruction set where the models were trained.
    pub isa: String,
    /// The cache sizes tract's tile walk was blocked by there ([`crate::engine::packing::host_caches`]).
    pub caches: String,
    /// Where the layer's sizes are in its feature vector.
    pub shape: crate::engine::packing::PackedShape,
    /// Names of the appended features.
    pub names: Vec<String>,
}

impl EngineFeatures {
    /// For conv2d and dense layers; `None` for other types.
    pub fn for_layer(layer_type: crate::LayerType, feature_names: &[String]) -> Option<EngineFeatures> {
        let shape = crate::engine::packing::PackedShape::for_layer(layer_type, feature_names)?;
        Some(EngineFeatures {
            isa: crate::engine::packing::host_isa().to_string(),
            caches: crate::engine::packing::host_caches().to_string(),
            names: shape.engine_feature_names().iter().map(|n| n.to_string()).collect(),
            shape,
        })
    }

    /// Whether the engine answers here as where the models were trained: same kernels, same cache sizes.
    pub fn applies(&self) -> bool {
        self.isa == crate::engine::packing::host_isa() && self.caches == crate::engine::packing::host_caches()
    }

    /// What the models were trained on, as a note says it.
    pub fn machine(&self) -> String {
        format!("{}, {}", self.isa, self.caches)
    }

    /// The appended values (the first `names.len()`); zeros when the features do not describe a valid layer
    /// (never fewer values: the model indexes them).
    pub fn values(&self, x: &[f64]) -> [f64; crate::engine::packing::ENGINE_FEATURES_MAX] {
        self.shape.engine_features(x).unwrap_or([0.0; crate::engine::packing::ENGINE_FEATURES_MAX])
    }

    /// How many values are appended.
    pub fn width(&self) -> usize {
        self.names.len().min(crate::engine::packing::ENGINE_FEATURES_MAX)
    }

    /// `x` followed by the appended values.
    pub fn extend(&self, x: &[f64]) -> Vec<f64> {
        let mut row = x.to_vec();
        row.extend_from_slice(&self.values(x)[..self.width()]);
        row
    }
}

use crate::units::MIB;

impl KnownPart {
    /// The f32 inputs, weights and outputs of a layer in MiB, from the features named `input_elems`,
    /// `weight_elems` and `output_elems` (every layer type has them); `None` when a name is missing.
    pub fn tensor_mib(feature_names: &[String]) -> Option<KnownPart> {
        let features = ["input_elems", "weight_elems", "output_elems"]
            .iter()
            .map(|name| feature_names.iter().position(|f| f == name).and_then(|i| u16::try_from(i).ok()))
            .collect::<Option<Vec<u16>>>()?;
        Some(KnownPart { features, scale: 4.0 / MIB, engine_weights: None })
    }

    /// Count the weights as tract packs them on this machine (dense and conv2d; no change for other types).
    pub fn with_engine_weights(mut self, layer_type: crate::LayerType, feature_names: &[String]) -> KnownPart {
        self.engine_weights = EngineWeights::for_layer(layer_type, feature_names);
        self
    }

    pub fn value(&self, x: &[f64]) -> f64 {
        let feature = |f: u16| x.get(f as usize).copied().unwrap_or(0.0);
        let plain = || self.scale * self.features.iter().map(|&f| feature(f)).sum::<f64>();
        let Some(engine) = &self.engine_weights else { return plain() };
        // The lowering's scratch was left out of what the model learned: it is added wherever the model is used
        // (on a machine with another instruction set, with this machine's answer to tract's questions).
        let workspace = engine.shape.lowering_workspace_bytes(x).unwrap_or(0) as f64 / MIB;
        match self.engine_weight_bytes(x) {
            Some((replaced, bytes)) => {
                let rest: f64 = self.features.iter().filter(|&&f| f != replaced).map(|&f| feature(f)).sum();
                self.scale * rest + bytes as f64 / MIB + workspace
            }
            None => plain() + workspace,
        }
    }

    /// The replaced feature and the bytes the engine holds for the weights, when engine weights apply here.
    fn engine_weight_bytes(&self, x: &[f64]) -> Option<(u16, u64)> {
        let engine = self.engine_weights.as_ref().filter(|e| e.applies())?;
        Some((engine.weight_feature, engine.bytes(x)?))
    }

    /// Whether the models were trained on tract's packed weights, on any machine: they describe tract as the
    /// executor, whose graph rewrites do not depend on the instruction set (the packing itself applies only on
    /// a machine with the training one's, see [`EngineWeights::applies`]).
    pub fn knows_tract(&self) -> bool {
        self.engine_weights.is_some()
    }

    /// Bytes the engine keeps resident for the layer's weights, when this part knows them (engine weights that
    /// apply on this machine); `None` means: count the f32 weights.
    pub fn resident_weight_bytes(&self, x: &[f64]) -> Option<u64> {
        self.engine_weight_bytes(x).map(|(_, bytes)| bytes)
    }
}

/// One trained predictor: the model, the method that produced it (for reports and estimate output), whether the
/// target was log-transformed and whether the model sees `ln(1 + feature)` instead of the raw features (sizes
/// and FLOPs span many orders of magnitude; on a log scale distances and random thresholds spread evenly, and a
/// linear model becomes a power law).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predictor {
    pub(crate) method: String,
    pub(crate) log_target: bool,
    pub(crate) log_features: bool,
    pub(crate) model: Model,
    /// Added to the model's output (the model learned the target minus this part).
    pub(crate) known: Option<KnownPart>,
    /// Subtracted from the model's output: the rest was shifted to be positive for a log target.
    pub(crate) shift: f64,
    /// Appended to the layer's features before the model sees them.
    pub(crate) engine_features: Option<EngineFeatures>,
    /// The model learned the target per unit of this feature ([`unit_count`]); its output is multiplied back.
    pub(crate) per_unit: Option<u16>,
}

/// Feature `feature` of `row` as a divisor of the target: at least 1 (a layer of 0 FLOPs still takes time).
pub fn unit_count(row: &[f64], feature: u16) -> f64 {
    row.get(feature as usize).copied().filter(|v| v.is_finite()).unwrap_or(0.0).max(1.0)
}

/// The feature transform of log-feature models (features are non-negative counts and sizes).
pub fn log_feature(v: f64) -> f64 {
    v.max(0.0).ln_1p()
}

impl Predictor {
    pub fn new(method: impl Into<String>, log_target: bool, model: Model) -> Predictor {
        Predictor {
            method: method.into(),
            log_target,
            log_features: false,
            model,
            known: None,
            shift: 0.0,
            engine_features: None,
            per_unit: None,
        }
    }

    /// The model was fitted on `target - known.value(x) + shift` (in log space when the target is logged).
    pub fn with_known_part(mut self, known: KnownPart, shift: f64) -> Predictor {
        self.known = Some(known);
        self.shift = shift;
        self
    }

    /// The model was fitted on the features followed by `engine`'s.
    pub fn with_engine_features(mut self, engine: Option<EngineFeatures>) -> Predictor {
        self.engine_features = engine;
        self
    }

    /// The model learned the target per unit of feature `feature`.
    pub fn with_per_unit(mut self, feature: Option<u16>) -> Predictor {
        self.per_unit = feature;
        self
    }

    /// The model was fitted on [`log_feature`]-transformed features.
    pub fn with_log_features(mut self, log_features: bool) -> Predictor {
        self.log_features = log_features;
        self
    }

    /// Predicted metric value for one layer's features (in [`crate::LayerType::feature_names`] order). Never
    /// negative: latency, power and memory cannot be.
    pub fn predict(&self, features: &[f64]) -> f64 {
        if let Model::Transfer(t) = &self.model {
            return t.predict(features);
        }
        let extra = self.engine_features.as_ref().map(|e| (e.values(features), e.width()));
        let raw = if self.log_features || extra.is_some() {
            let appended = extra.as_ref().map_or(&[][..], |(values, width)| &values[..*width]);
            with_appended(features, appended, |input| {
                if self.log_features {
                    let mut j = 0;
                    while j < input.len() {
                        input[j] = log_feature(input[j]);
                        j += 1;
                    }
                }
                self.model.predict_raw(input)
            })
        } else {
            self.model.predict_raw(features)
        };
        let mut y = if self.log_target { raw.exp() } else { raw };
        if let Some(feature) = self.per_unit {
            y *= unit_count(features, feature);
        }
        if let Some(known) = &self.known {
            y += known.value(features) - self.shift;
        }
        if y.is_nan() {
            0.0
        } else {
            y.clamp(0.0, f64::MAX)
        }
    }

    /// Short name of the method, e.g. `ert`, `knn`, `xgb`, `tree`, `linear`, with `+logx` for log features and
    /// `+log` for a log target.
    pub fn method(&self) -> &str {
        &self.method
    }

    pub fn log_target(&self) -> bool {
        self.log_target
    }

    pub fn log_features(&self) -> bool {
        self.log_features
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn known_part(&self) -> Option<&KnownPart> {
        match &self.model {
            Model::Transfer(t) => t.correction.known_part(),
            _ => self.known.as_ref(),
        }
    }

    /// The engine features of the model trained on this device's rows (a transfer's correction: its source's
    /// describe the source's machine).
    pub fn engine_features(&self) -> Option<&EngineFeatures> {
        match &self.model {
            Model::Transfer(t) => t.correction.engine_features(),
            _ => self.engine_features.as_ref(),
        }
    }

    /// A model built on `source_device`'s `source` predictor with `correction` trained here.
    pub fn transfer(source_device: &str, mode: TransferMode, source: Predictor, correction: Predictor) -> Predictor {
        let method = format!("transfer:{source_device}:{}:{}", mode.as_str(), correction.method);
        let log_target = correction.log_target;
        let transfer = Transfer { source_device: source_device.to_string(), mode, source, correction };
        Predictor::new(method, log_target, Model::Transfer(Box::new(transfer)))
    }

    /// The source device and mode when this predictor is a transfer.
    pub fn transfer_source(&self) -> Option<(&str, TransferMode)> {
        match &self.model {
            Model::Transfer(t) => Some((t.source_device.as_str(), t.mode)),
            _ => None,
        }
    }
}
