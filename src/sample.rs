//! Representative-config sampling: which single-layer configs the collector measures.
//!
//! A regressor can only be as good as the configs it was trained on, and the configs that matter are the ones
//! real networks contain. So the sample is every unique layer config found in the zoo (per layer type, with how
//! often it occurs), plus the paper's augmentations that widen coverage around them: depthwise and dilated
//! variants of the found convolutions, new filter counts, other pool sizes on the found pooling inputs and random
//! dense (features, units) pairs. Holdout networks live in a subdirectory and are never read, so they stay an
//! honest validation set. Everything random is drawn from one seeded ChaCha stream: same seed, same sample.

use crate::error::{Error, Location, Result};
use crate::fsio::write_atomic;
use crate::layer::{Activation, Dense, DepthwiseConv2d, LayerConfig, LayerType, Op, Padding};
use crate::network::{read_json, Network};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One sampled config at batch 1; the collector expands it to every batch size of the set.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledConfig {
    pub config: LayerConfig,
    /// `network/layer` of its first occurrence in the zoo, or `augment:<kind>`.
    pub source: String,
    /// Occurrences across the zoo (0 for augmented configs).
    pub count: usize,
}

impl SampledConfig {
    pub fn to_json(&self) -> Value {
        json!({"config": self.config.to_json(), "source": self.source, "count": self.count})
    }
}

/// The sampler's output file (`configs.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSet {
    pub seed: u64,
    pub batch_sizes: Vec<usize>,
    pub configs: Vec<SampledConfig>,
}

/// How many augmented configs of each kind to add (base configs are drawn at random with the seed).
#[derive(Debug, Clone)]
pub struct AugmentBudget {
    /// Found convolutions turned into a depthwise convolution on the same input.
    pub depthwise: usize,
    /// Found convolutions (kernel > 1) tried with dilation 2, 4 and 8.
    pub dilated: usize,
    /// Found convolutions given a new (log-uniform) filter count.
    pub filters: usize,
    /// Random dense (features, units) pairs.
    pub dense: usize,
    /// Found convolutions split into groups (ResNeXt/ShuffleNet-style group convolutions).
    pub grouped: usize,
    /// Found spatial convolutions (kernel > 1, stride 1) on an input with another channel count, and other
    /// filters.
    pub channels: usize,
    /// Found spatial convolutions (kernel > 1, stride 1) on a small image (at most 28 pixels high) with many
    /// input channels and filters (128-1024 each).
    pub wide: usize,
    /// Found convolutions split into 2, 3, 4 or 8 groups on an input with a new channel count, with new
    /// filters: channel counts found in the zoo rarely split into 3 or 8.
    pub grouped_channels: usize,
    /// Found spatial convolutions made the first layer of a small-image network: 1 or 3 input channels
    /// (grey-scale or colour) on a 16-96 pixel image, with new filters.
    pub first_layer: usize,
    /// Found convolutions on a small image (at most 28 pixels high) with heavy weights: 12-96 MiB of f32, on both
    /// sides of the last-level cache.
    pub heavy: usize,
    /// Found convolutions, poolings, activations and batch norms on a larger image (1.4-3x as high and wide,
    /// at most 640 pixels): detection and segmentation networks run at 300-800 pixels, the zoo at 224-331. An
    /// equal share per layer type.
    pub resolution: usize,
    /// Encoder blocks of random sequence length, heads and head size whose layers join the sample (only when
    /// the zoo has transformers).
    pub transformer: usize,
    /// Found spatial convolutions split into many groups of a common width (10-64 groups of 8-64 channels, as
    /// many filters as channels), on the found input's image.
    pub many_groups: usize,
    /// Square 3x3 convolutions in 2-64 groups of 8-64 channels (as many filters as channels) on 7-112 pixel
    /// images, stride 1 or 2, padded one pixel on every side with a bias, as PyTorch writes them.
    pub grouped_square: usize,
    /// Square 3x3 and 5x5 max and average poolings at stride 1 (half this each), padded to keep the image (one
    /// or two pixels on every side, as PyTorch writes them, or 'same'), over 16-1024 channels of 7-112 pixels.
    pub pool_stride_one: usize,
}

impl Default for AugmentBudget {
    fn default() -> Self {
        AugmentBudget {
            depthwise: 150,
            dilated: 80,
            filters: 200,
            dense: 250,
            grouped: 150,
            channels: 100,
            wide: 50,
            grouped_channels: 400,
            first_layer: 100,
            heavy: 60,
            resolution: 240,
            transformer: 60,
            many_groups: 120,
            grouped_square: 150,
            pool_stride_one: 120,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SampleOptions {
    pub seed: u64,
    pub batch_sizes: Vec<usize>,
    /// Only these layer types in the output (all but `unsupported` when `None`).
    pub layer_types: Option<Vec<LayerType>>,
    pub budget: AugmentBudget,
}

/// Per-type counts for the summary table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeCounts {
    pub layer_type: LayerType,
    /// Layers of this type across the zoo.
    pub found: usize,
    /// Unique configs among them.
    pub unique: usize,
    /// Configs added by augmentation.
    pub augmented: usize,
}

impl TypeCounts {
    pub fn total(&self) -> usize {
        self.unique + self.augmented
    }
}

/// Group counts tried on found convolutions: the common ones of grouped architectures (ShuffleNet 2-8,
/// ResNeXt 32), where they divide both the input channels and the filters.
const GROUPS: [usize; 6] = [2, 3, 4, 8, 16, 32];
/// Dilation rates tried on found convolutions.
const DILATIONS: [usize; 3] = [2, 4, 8];
/// Pool sizes tried on found pooling inputs.
const POOL_SIZES: [usize; 4] = [2, 3, 5, 7];
/// Ranges of the random dense pairs (log-uniform).
const DENSE_FEATURES: (f64, f64) = (16.0, 25_000.0);
const DENSE_UNITS: (f64, f64) = (8.0, 5_000.0);
/// Range of new filter counts (log-uniform, rounded to a multiple of 8).
const NEW_FILTERS: (f64, f64) = (8.0, 2_048.0);
/// Range of the input channel counts of channel variants (log-uniform, multiples of 8).
const NEW_CHANNELS: (f64, f64) = (16.0, 768.0);
/// Range of the input channels and filters of wide variants (log-uniform, multiples of 32), and the largest
/// image they are put on.
const WIDE_CHANNELS: (f64, f64) = (128.0, 1_024.0);
const WIDE_MAX_HEIGHT: usize = 28;
/// Group counts of the grouped channel variants, and the range of their channels and filters per group
/// (log-uniform).
const GROUPS_SMALL: [usize; 4] = [2, 3, 4, 8];
const PER_GROUP_CHANNELS: (f64, f64) = (4.0, 128.0);
const PER_GROUP_FILTERS: (f64, f64) = (4.0, 256.0);
/// Input channels, square image sizes and filter range (log-uniform, multiples of 8) of the first-layer
/// variants: the grey-scale and colour inputs and the image sizes of small-image datasets (CIFAR and SVHN 32,
/// Tiny ImageNet 64, STL-10 96).
const FIRST_LAYER_CHANNELS: [usize; 2] = [1, 3];
const FIRST_LAYER_SIZES: [usize; 6] = [16, 24, 32, 48, 64, 96];
const FIRST_LAYER_FILTERS: (f64, f64) = (8.0, 128.0);
/// Range of the f32 weight size of heavy variants (log-uniform, MiB), of their input channels (log-uniform,
/// multiples of 32), and of the filter counts that size and those channels may give.
const HEAVY_WEIGHT_MIB: (f64, f64) = (12.0, 96.0);
const HEAVY_CHANNELS: (f64, f64) = (256.0, 2_048.0);
const HEAVY_FILTERS: (usize, usize) = (64, 4_096);
/// Range of the image scale of resolution variants (log-uniform), and the largest image height or width.
const RESOLUTION_SCALE: (f64, f64) = (1.4, 3.0);
const RESOLUTION_MAX_SIZE: usize = 640;
/// The layer types resolution variants are drawn from: the ones whose cost grows with the image.
const RESOLUTION_TYPES: [LayerType; 6] = [
    LayerType::Conv2d,
    LayerType::DepthwiseConv2d,
    LayerType::MaxPool2d,
    LayerType::AvgPool2d,
    LayerType::Activation,
    LayerType::BatchNorm,
];

/// The networks sampling reads: every `*.json` directly in `zoo_dir` (not its `holdout/` subdirectory), sorted
/// by file name. Config sets written by the sampler into the same directory are skipped.
pub fn load_zoo_dir(zoo_dir: &Path) -> Result<Vec<Network>> {
    let paths = crate::fsio::json_files(zoo_dir)?;
    let mut nets = Vec::with_capacity(paths.len());
    for path in paths {
        let value = read_json(&path)?;
        if value.get("configs").is_some() {
            continue;
        }
        nets.push(Network::from_json(&value, &path.display().to_string())?);
    }
    if nets.is_empty() {
        return Err(Error::spec(
            Location::file(zoo_dir.display().to_string()),
            "no networks (*.json) found; run `perfmodel zoo export` first",
        ));
    }
    Ok(nets)
}

/// Sample representative configs from `networks`; returns the set and per-type counts (in [`LayerType::ALL`]
/// order, only types that have configs).
pub fn sample(networks: &[Network], options: &SampleOptions) -> Result<(ConfigSet, Vec<TypeCounts>)> {
    if options.batch_sizes.is_empty() || options.batch_sizes.contains(&0) {
        return Err(Error::Invalid(format!(
            "batch sizes must be positive and non-empty, got {:?}",
            options.batch_sizes
        )));
    }
    let mut pool = Pool::default();
    // Architectures the zoo gained after devices were collected join after the augmentations, which draw from
    // the others: every earlier config, and so every device's rows of them, stays.
    let (late, early): (Vec<&Network>, Vec<&Network>) =
        networks.iter().partition(|n| crate::zoo::ADDED_AFTER_AUGMENTATION.contains(&n.name.as_str()));
    for net in early {
        pool.found_in(net)?;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    augment(&mut pool, &options.budget, &mut rng);
    for net in late {
        pool.found_in(net)?;
    }
    // Found: configs some network has (an augmented one a later architecture has too counts as found).
    let found_counts: BTreeMap<LayerType, (usize, usize)> = pool
        .by_type
        .iter()
        .map(|(t, list)| (*t, (list.iter().map(|c| c.count).sum(), list.iter().filter(|c| c.count > 0).count())))
        .collect();

    let wanted = |t: LayerType| match &options.layer_types {
        Some(list) => list.contains(&t),
        None => t != LayerType::Unsupported,
    };
    let mut configs = Vec::new();
    let mut counts = Vec::new();
    for t in LayerType::ALL {
        let Some(list) = pool.by_type.remove(&t) else { continue };
        if !wanted(t) {
            continue;
        }
        let (found, unique) = found_counts.get(&t).copied().unwrap_or((0, 0));
        counts.push(TypeCounts { layer_type: t, found, unique, augmented: list.len() - unique });
        configs.extend(list);
    }
    check_batch_sizes(&configs, &options.batch_sizes).map_err(Error::Invalid)?;
    Ok((ConfigSet { seed: options.seed, batch_sizes: options.batch_sizes.clone(), configs }, counts))
}

/// Every config must be possible at the largest batch size, or the collector would fail on each one.
fn check_batch_sizes(configs: &[SampledConfig], batch_sizes: &[usize]) -> std::result::Result<(), String> {
    let largest = batch_sizes.iter().copied().max().unwrap_or(1);
    for c in configs {
        LayerConfig { batch: largest, ..c.config.clone() }
            .cost()
            .map_err(|e| format!("batch size {largest} is impossible for config {}: {e}", c.source))?;
    }
    Ok(())
}

/// Unique configs per type, in insertion order, deduplicated by [`LayerConfig::key`].
#[derive(Default)]
struct Pool {
    by_type: BTreeMap<LayerType, Vec<SampledConfig>>,
    index: HashMap<String, (LayerType, usize)>,
}

impl Pool {
    /// Every layer config of `net` at batch size 1.
    fn found_in(&mut self, net: &Network) -> Result<()> {
        let mut net = net.clone();
        net.batch_size = 1;
        let analysis = net.analyze()?;
        for (i, layer) in net.layers.iter().enumerate() {
            if layer.op.layer_type() == LayerType::Unsupported {
                continue;
            }
            let config = analysis.config(i).clone();
            let key = config.key().map_err(|e| Error::Invalid(format!("{}/{}: {e}", net.name, layer.name)))?;
            self.found(key, config, format!("{}/{}", net.name, layer.name));
        }
        Ok(())
    }

    fn found(&mut self, key: String, config: LayerConfig, source: String) {
        if let Some(&(t, i)) = self.index.get(&key) {
            if let Some(c) = self.by_type.get_mut(&t).and_then(|l| l.get_mut(i)) {
                c.count += 1;
            }
            return;
        }
        let t = config.layer_type();
        let list = self.by_type.entry(t).or_default();
        self.index.insert(key, (t, list.len()));
        list.push(SampledConfig { config, source, count: 1 });
    }

    /// Add an augmented config if it is valid and new; returns whether it was added.
    fn augmented(&mut self, config: LayerConfig, kind: &str) -> bool {
        let Ok(key) = config.key() else { return false };
        if self.index.contains_key(&key) {
            return false;
        }
        let t = config.layer_type();
        let list = self.by_type.entry(t).or_default();
        self.index.insert(key, (t, list.len()));
        list.push(SampledConfig { config, source: format!("augment:{kind}"), count: 0 });
        true
    }

    /// Found configs of one type (cloned, so augmentation can add to the pool while iterating).
    fn found_of(&self, t: LayerType) -> Vec<LayerConfig> {
        self.by_type
            .get(&t)
            .map_or_else(Vec::new, |l| l.iter().filter(|c| c.count > 0).map(|c| c.config.clone()).collect())
    }
}

fn log_uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    (rng.random_range(lo.ln()..hi.ln())).exp()
}

/// A log-uniform draw from `range` rounded to a multiple of `step` (at least `step`).
fn log_uniform_multiple(rng: &mut ChaCha8Rng, range: (f64, f64), step: usize) -> usize {
    ((log_uniform(rng, range) / step as f64).round() as usize).max(1) * step
}

fn augment(pool: &mut Pool, budget: &AugmentBudget, rng: &mut ChaCha8Rng) {
    let convs: Vec<_> = pool
        .found_of(LayerType::Conv2d)
        .into_iter()
        .filter_map(|c| match &c.op {
            Op::Conv2d(op) if op.groups == 1 => Some((op.clone(), c.input_shapes.clone())),
            _ => None,
        })
        .collect();

    // Depthwise variants: the found convolution's window on the same input, one filter per channel.
    let mut order: Vec<usize> = (0..convs.len()).collect();
    order.shuffle(rng);
    let mut added = 0;
    for &i in &order {
        if added == budget.depthwise {
            break;
        }
        let (c, inputs) = &convs[i];
        let dw = DepthwiseConv2d {
            depth_multiplier: 1,
            kernel: c.kernel,
            strides: c.strides,
            dilation: c.dilation,
            padding: c.padding,
            use_bias: c.use_bias,
            activation: c.activation,
        };
        added += pool.augmented(LayerConfig::new(Op::DepthwiseConv2d(dw), inputs.clone(), 1), "depthwise") as usize;
    }

    // Dilated variants of spatial convolutions, where the dilated kernel still fits the padded input.
    order.shuffle(rng);
    let mut bases = 0;
    for &i in &order {
        if bases == budget.dilated {
            break;
        }
        let (c, inputs) = &convs[i];
        if c.kernel[0] == 1 && c.kernel[1] == 1 {
            continue;
        }
        bases += 1;
        for d in DILATIONS {
            let mut dilated = c.clone();
            dilated.dilation = [if c.kernel[0] > 1 { d } else { 1 }, if c.kernel[1] > 1 { d } else { 1 }];
            pool.augmented(LayerConfig::new(Op::Conv2d(dilated), inputs.clone(), 1), "dilated");
        }
    }

    // New filter counts on found convolution inputs.
    order.shuffle(rng);
    let mut added = 0;
    for &i in &order {
        if added == budget.filters {
            break;
        }
        let (c, inputs) = &convs[i];
        let filters = ((log_uniform(rng, NEW_FILTERS) / 8.0).round() as usize).max(1) * 8;
        let mut wider = c.clone();
        wider.filters = filters;
        added += pool.augmented(LayerConfig::new(Op::Conv2d(wider), inputs.clone(), 1), "filters") as usize;
    }

    // Other pool sizes on the found pooling inputs (same strides and padding).
    for t in [LayerType::MaxPool2d, LayerType::AvgPool2d] {
        for base in pool.found_of(t) {
            let (Op::MaxPool2d(p) | Op::AvgPool2d(p)) = &base.op else { continue };
            for size in POOL_SIZES {
                if p.pool_size == [size, size] {
                    continue;
                }
                let mut other = p.clone();
                other.pool_size = [size, size];
                let op = if t == LayerType::MaxPool2d { Op::MaxPool2d(other) } else { Op::AvgPool2d(other) };
                pool.augmented(LayerConfig::new(op, base.input_shapes.clone(), 1), "pool_size");
            }
        }
    }

    // Random dense (features, units) pairs.
    let activations = [Activation::Linear, Activation::Relu, Activation::Softmax];
    let mut added = 0;
    let mut attempts = 0;
    while added < budget.dense && attempts < budget.dense * 10 {
        attempts += 1;
        let features = log_uniform(rng, DENSE_FEATURES).round() as usize;
        let units = log_uniform(rng, DENSE_UNITS).round() as usize;
        let activation = activations[rng.random_range(0..activations.len())];
        let op = Op::Dense(Dense { units, use_bias: true, activation });
        added += pool.augmented(LayerConfig::new(op, vec![smallvec::smallvec![features]], 1), "dense") as usize;
    }

    // Grouped variants, drawn last so that adding them left every earlier draw (and config) unchanged. The
    // engine runs a grouped convolution as one small product per group, so its cost per FLOP is not that of
    // the ungrouped layer: without such samples a grouped network is badly underestimated.
    order.shuffle(rng);
    let mut added = 0;
    for &i in &order {
        if added == budget.grouped {
            break;
        }
        let (c, inputs) = &convs[i];
        let channels = inputs.first().and_then(|shape| shape.first()).copied().unwrap_or(0);
        let fitting: Vec<usize> =
            GROUPS.iter().copied().filter(|&g| channels % g == 0 && channels / g >= 2 && c.filters % g == 0).collect();
        if fitting.is_empty() {
            continue;
        }
        let mut grouped = c.clone();
        grouped.groups = fitting[rng.random_range(0..fitting.len())];
        added += pool.augmented(LayerConfig::new(Op::Conv2d(grouped), inputs.clone(), 1), "grouped") as usize;
    }

    // Channel variants of the commonest convolutions (spatial kernel, stride 1), drawn after the grouped ones
    // for the same reason. tract's cost per FLOP for them moves by 3x with the channel count at the same
    // image size (a 3x3 conv on 13x13: 256 -> 256 channels runs at 15 GFLOP/s, 384 -> 384 at 46), and the zoo
    // alone offers a few dozen of them at batch 1.
    // Up to three passes: the zoo has only a few dozen such convolutions.
    order.shuffle(rng);
    let mut added = 0;
    for &i in order.iter().cycle().take(3 * order.len()) {
        if added == budget.channels {
            break;
        }
        let (c, inputs) = &convs[i];
        if c.kernel[0] * c.kernel[1] == 1 || c.strides != [1, 1] {
            continue;
        }
        let Some([_, h, w]) = inputs.first().and_then(|s| <[usize; 3]>::try_from(s.as_slice()).ok()) else { continue };
        let channels = log_uniform_multiple(rng, NEW_CHANNELS, 8);
        let mut other = c.clone();
        other.filters = log_uniform_multiple(rng, NEW_CHANNELS, 8);
        added += pool
            .augmented(LayerConfig::new(Op::Conv2d(other), vec![smallvec::smallvec![channels, h, w]], 1), "channels")
            as usize;
    }

    // Wide variants, drawn after the channel variants for the same reason: detection backbones and VGG-style
    // heads run 3x3 convolutions of 512-1024 channels on 13-28 pixels, where tract's cost per FLOP turns on
    // whether the packed weights fit L2 and the last-level cache (`engine::packing::TileWalk`); the zoo has a
    // handful of them and the channel variants stop at 768.
    order.shuffle(rng);
    let mut added = 0;
    for &i in order.iter().cycle().take(3 * order.len()) {
        if added == budget.wide {
            break;
        }
        let (c, inputs) = &convs[i];
        if c.kernel[0] * c.kernel[1] == 1 || c.strides != [1, 1] {
            continue;
        }
        let Some([_, h, w]) = inputs.first().and_then(|s| <[usize; 3]>::try_from(s.as_slice()).ok()) else { continue };
        if h > WIDE_MAX_HEIGHT {
            continue;
        }
        let channels = log_uniform_multiple(rng, WIDE_CHANNELS, 32);
        let mut wide = c.clone();
        wide.filters = log_uniform_multiple(rng, WIDE_CHANNELS, 32);
        added += pool
            .augmented(LayerConfig::new(Op::Conv2d(wide), vec![smallvec::smallvec![channels, h, w]], 1), "wide")
            as usize;
    }

    // Grouped variants on new channel counts, drawn last: the grouped variants above split found channel
    // counts, which rarely divide by 3 or 8, so they are mostly 2-way and 4-way. The engine's cost per FLOP of
    // one group's small product depends on its own rows, reduction and columns (a 1x1 convolution on 14x14 in
    // 3 groups runs at 2-16 GFLOP/s by those alone).
    order.shuffle(rng);
    let mut added = 0;
    for &i in order.iter().cycle().take(3 * order.len()) {
        if added == budget.grouped_channels {
            break;
        }
        let (c, inputs) = &convs[i];
        let Some([_, h, w]) = inputs.first().and_then(|s| <[usize; 3]>::try_from(s.as_slice()).ok()) else { continue };
        let groups = GROUPS_SMALL[rng.random_range(0..GROUPS_SMALL.len())];
        let per_group = |rng: &mut ChaCha8Rng, range| (log_uniform(rng, range).round() as usize).max(1);
        let channels = groups * per_group(rng, PER_GROUP_CHANNELS);
        let mut grouped = c.clone();
        grouped.groups = groups;
        grouped.filters = groups * per_group(rng, PER_GROUP_FILTERS);
        added += pool.augmented(
            LayerConfig::new(Op::Conv2d(grouped), vec![smallvec::smallvec![channels, h, w]], 1),
            "grouped_channels",
        ) as usize;
    }

    // First-layer variants, drawn last: the zoo's networks all start on a 3-channel image of 224-331 pixels, so
    // its few-channel convolutions are large. On a few channels tract's convolution is dominated by its
    // per-output work rather than its multiply-adds, and a model that only saw 224-pixel stems put a
    // grey-scale 3x3 stem on a small image at 0.4x its measured time.
    order.shuffle(rng);
    let mut added = 0;
    for &i in order.iter().cycle().take(3 * order.len()) {
        if added == budget.first_layer {
            break;
        }
        let (c, _) = &convs[i];
        if c.kernel[0] * c.kernel[1] == 1 {
            continue;
        }
        let channels = FIRST_LAYER_CHANNELS[rng.random_range(0..FIRST_LAYER_CHANNELS.len())];
        let size = FIRST_LAYER_SIZES[rng.random_range(0..FIRST_LAYER_SIZES.len())];
        let mut first = c.clone();
        first.filters = log_uniform_multiple(rng, FIRST_LAYER_FILTERS, 8);
        let config = LayerConfig::new(Op::Conv2d(first), vec![smallvec::smallvec![channels, size, size]], 1);
        if config.cost().is_err() {
            continue;
        }
        added += pool.augmented(config, "first_layer") as usize;
    }

    // Heavy variants, drawn after the first-layer ones for the same reason: the wide variants rarely draw both
    // channel counts high enough for weights beyond 16 MiB, and the zoo has none, while detection backbones
    // run 3x3 convolutions of 512-1024 channels (18-36 MiB). Around the last-level cache tract's cost per FLOP
    // falls off a cliff: on one x86 machine a 3x3 convolution on 13x13 ran at 172 GFLOP/s with 448 -> 1024
    // channels (15.8 MiB) and at 110 with 512 -> 1024 (18 MiB), where a model trained without such samples
    // predicted 8.2 ms for the latter against 14.5 measured.
    order.shuffle(rng);
    let mut added = 0;
    for &i in order.iter().cycle().take(3 * order.len()) {
        if added == budget.heavy {
            break;
        }
        let (c, inputs) = &convs[i];
        let Some([_, h, w]) = inputs.first().and_then(|s| <[usize; 3]>::try_from(s.as_slice()).ok()) else { continue };
        if h > WIDE_MAX_HEIGHT {
            continue;
        }
        let weight_bytes = log_uniform(rng, HEAVY_WEIGHT_MIB) * 1024.0 * 1024.0;
        let channels = log_uniform_multiple(rng, HEAVY_CHANNELS, 32);
        let per_filter = (channels * c.kernel[0] * c.kernel[1] * 4) as f64;
        let filters = ((weight_bytes / per_filter / 32.0).round() as usize) * 32;
        if !(HEAVY_FILTERS.0..=HEAVY_FILTERS.1).contains(&filters) {
            continue;
        }
        let mut heavy = c.clone();
        heavy.filters = filters;
        let config = LayerConfig::new(Op::Conv2d(heavy), vec![smallvec::smallvec![channels, h, w]], 1);
        if config.cost().is_err() {
            continue;
        }
        added += pool.augmented(config, "heavy") as usize;
    }

    // Resolution variants, drawn last: every found network runs at 224-331 pixels, so a model has never seen a
    // 16-channel map of 416x416. Memory-bound layers there are not a scaled-up version of the found ones (a
    // 2x2 max pooling of 16x416x416 was predicted at 1.25x its measured time).
    // An equal share per type, so the few found poolings get as many variants as the many convolutions.
    let share = budget.resolution / RESOLUTION_TYPES.len();
    for t in RESOLUTION_TYPES {
        let mut bases: Vec<LayerConfig> = pool.found_of(t);
        bases.retain(|c| c.input_shapes.len() == 1 && c.input_shapes[0].len() == 3);
        bases.shuffle(rng);
        let mut added = 0;
        for base in bases.iter().cycle().take(4 * bases.len()) {
            if added == share {
                break;
            }
            let [c, h, w] = <[usize; 3]>::try_from(base.input_shapes[0].as_slice()).expect("retained 3-d inputs");
            let scale = log_uniform(rng, RESOLUTION_SCALE);
            let (h, w) = ((h as f64 * scale).round() as usize, (w as f64 * scale).round() as usize);
            if h.max(w) > RESOLUTION_MAX_SIZE {
                continue;
            }
            let config = LayerConfig::new(base.op.clone(), vec![smallvec::smallvec![c, h, w]], 1);
            if config.cost().is_err() {
                continue;
            }
            added += pool.augmented(config, "resolution") as usize;
        }
    }

    // Padding variants of the found poolings and their other pool sizes, drawn after everything else so that
    // every earlier config stays as it was: each with 'same' padding if it pads nothing and without if it pads.
    // The zoo's strided average poolings are all unpadded, and ShuffleNet's 3x3 stride-2 'same' ones were
    // predicted at 5.8 ns per input element where the unpadded ones run at a median 3.25.
    for t in [LayerType::MaxPool2d, LayerType::AvgPool2d] {
        let bases: Vec<LayerConfig> = pool.by_type.get(&t).map_or_else(Vec::new, |list| {
            list.iter().filter(|c| c.count > 0 || c.source == "augment:pool_size").map(|c| c.config.clone()).collect()
        });
        for base in bases {
            let (Op::MaxPool2d(p) | Op::AvgPool2d(p)) = &base.op else { continue };
            let mut other = p.clone();
            other.padding = match p.padding {
                Padding::Valid => Padding::Same,
                Padding::Same | Padding::Explicit(_) => Padding::Valid,
            };
            let op = if t == LayerType::MaxPool2d { Op::MaxPool2d(other) } else { Op::AvgPool2d(other) };
            let config = LayerConfig::new(op, base.input_shapes.clone(), 1);
            if pads(&config) != pads(&base) && config.cost().is_ok() {
                pool.augmented(config, "pool_padding");
            }
        }
    }

    // Encoder blocks of other shapes, last so that every earlier config stays as it was, and only when the zoo
    // has transformers: sequence lengths, head counts and head sizes around the zoo's (ViT's 197 tokens, BERT's
    // 64-512; 3-16 heads of 32-128 features), normalising before or after, each block's layers added.
    if !pool.found_of(LayerType::MatMul).is_empty() {
        for _ in 0..budget.transformer {
            let tokens = log_uniform(rng, (8.0, 1024.0)).round() as usize;
            let heads = [1, 2, 3, 4, 6, 8, 12, 16][rng.random_range(0..8)];
            let head_size = [16, 32, 48, 64, 80, 96, 128][rng.random_range(0..7)];
            let pre_norm = rng.random_bool(0.5);
            let block = crate::zoo::encoder_block(tokens, heads * head_size, heads, pre_norm);
            let Ok(analysis) = block.analyze() else { continue };
            for i in 0..block.layers.len() {
                pool.augmented(analysis.config(i).clone(), "transformer");
            }
        }
    }

    // Symmetric-padding variants, the way PyTorch writes a convolution (`padding=k//2` on every side, with a
    // bias), of the found spatial convolutions and depthwise convolutions (and the depthwise variants above) that
    // do not already resolve to that: the zoo pads Keras's way, 'same' putting the odd pixel after a strided
    // window and 'valid' after an explicit zero-padding layer, so a stride-2 window padded one pixel on top and
    // left was never measured, and one device's depthwise model put PyTorch's 96-channel one on 112x112 at 3.4x
    // its time. Each on the base's input, then on the input PyTorch gives it (stride x the base's output: 112
    // where Keras pads 112 to 113 for a 'valid' window), where tract's work and memory differ again (a model
    // that had only the first kind put MobileNet v2's stride-2 depthwise layers at twice their memory). Drawn
    // after everything else (and without the random generator), so every earlier config stays.
    for at_pytorch_input in [false, true] {
        for t in [LayerType::Conv2d, LayerType::DepthwiseConv2d] {
            let bases: Vec<LayerConfig> = pool.by_type.get(&t).map_or_else(Vec::new, |list| {
                list.iter()
                    .filter(|c| c.count > 0 || c.source == "augment:depthwise")
                    .map(|c| c.config.clone())
                    .collect()
            });
            for base in bases {
                if let Some(config) = symmetric_padding_variant(&base, at_pytorch_input) {
                    pool.augmented(config, "symmetric_padding");
                }
            }
        }
    }

    // Many groups of a common width, after everything else so every earlier config stays: the zoo's grouped
    // convolutions are ResNeXt's 32 narrow groups and the variants above mostly 2-8 groups, while RegNet-style
    // networks split a 3x3 convolution into 10-64 groups of 8-64 channels, as many filters as channels (one
    // tract predicted RegNetX-400MF's 25 groups of 16 at half their time). Each on a found spatial convolution's
    // image (at most 56 pixels high: such networks split deep layers), stride 1 or 2 as found.
    let spatial: Vec<(crate::layer::Conv2d, [usize; 3])> = convs
        .iter()
        .filter(|(c, _)| c.kernel[0] > 1 && c.dilation == [1, 1])
        .filter_map(|(c, inputs)| Some((c.clone(), <[usize; 3]>::try_from(inputs.first()?.as_slice()).ok()?)))
        .filter(|(_, [_, h, _])| *h <= 56)
        .collect();
    let mut added = 0;
    for _ in 0..4 * budget.many_groups {
        if added == budget.many_groups || spatial.is_empty() {
            break;
        }
        let (c, [_, h, w]) = &spatial[rng.random_range(0..spatial.len())];
        let groups = log_uniform(rng, (10.0, 64.0)).round() as usize;
        let width = [8, 16, 24, 32, 48, 64][rng.random_range(0..6)];
        let mut grouped = c.clone();
        grouped.groups = groups;
        grouped.filters = groups * width;
        let config = LayerConfig::new(Op::Conv2d(grouped), vec![smallvec::smallvec![groups * width, *h, *w]], 1);
        if config.cost().is_ok() {
            added += pool.augmented(config, "many_groups") as usize;
        }
    }

    // Grouped 3x3 convolutions drawn from the whole space such networks use, after everything else: the many
    // groups above take a found convolution's window and image (few zoo convolutions work on 7x7 or 112x112,
    // none padded PyTorch's way with groups), and both engines put RegNet's groups of 8 on 7x7 and on 112x112
    // at about half their time alone (ONNX Runtime: 55 groups of 8 on 7x7 predicted 0.091 ms, measured 0.175;
    // 6 groups of 8 on 112x112 at stride 2, 0.557 against 0.900). At most 1024 channels and 4 Mi input values.
    let mut added = 0;
    for _ in 0..4 * budget.grouped_square {
        if added == budget.grouped_square {
            break;
        }
        let groups = log_uniform(rng, (2.0, 64.0)).round() as usize;
        let width = [8, 16, 24, 32, 48, 64][rng.random_range(0..6)];
        let side = log_uniform(rng, (7.0, 112.0)).round() as usize;
        let stride = rng.random_range(1..=2);
        let channels = groups * width;
        if channels > 1024 || channels * side * side > 4 << 20 {
            continue;
        }
        let activation = if rng.random_bool(0.5) { Activation::Relu } else { Activation::Linear };
        let conv = crate::layer::Conv2d {
            filters: channels,
            strides: [stride, stride],
            groups,
            padding: Padding::Explicit([1, 1, 1, 1]),
            use_bias: true,
            activation,
            ..crate::layer::Conv2d::new(channels, [3, 3])
        };
        let config = LayerConfig::new(Op::Conv2d(conv), vec![smallvec::smallvec![channels, side, side]], 1);
        if config.cost().is_ok() {
            added += pool.augmented(config, "grouped_square") as usize;
        }
    }

    // Poolings at stride 1 that keep the image, after everything else: the zoo's max poolings all stride (the
    // only stride-1 windows are Inception v3's 3x3 average poolings on 35, 17 and 8 pixels), while GoogLeNet's
    // inception blocks and YOLO's spatial pyramids pool at stride 1 on 7-28 pixels. One tract device, whose
    // models had seen none, put GoogLeNet's 3x3 max pooling of 512x14x14 at 0.27 ms; alone it took 0.71-0.82 ms.
    for t in [LayerType::MaxPool2d, LayerType::AvgPool2d] {
        let mut added = 0;
        for _ in 0..4 * budget.pool_stride_one {
            if added == budget.pool_stride_one / 2 {
                break;
            }
            let size = if rng.random_bool(0.75) { 3 } else { 5 };
            let channels = log_uniform(rng, (16.0, 1024.0)).round() as usize;
            let side = log_uniform(rng, (7.0, 112.0)).round() as usize;
            if channels * side * side > 4 << 20 {
                continue;
            }
            let half = size / 2;
            let padding =
                if rng.random_bool(0.5) { Padding::Explicit([half, half, half, half]) } else { Padding::Same };
            let window = crate::layer::Pool2d { pool_size: [size, size], strides: [1, 1], padding };
            let op = if t == LayerType::MaxPool2d { Op::MaxPool2d(window) } else { Op::AvgPool2d(window) };
            let config = LayerConfig::new(op, vec![smallvec::smallvec![channels, side, side]], 1);
            if config.cost().is_ok() {
                added += pool.augmented(config, "pool_stride_one") as usize;
            }
        }
    }
}

/// `config`, a convolution or depthwise convolution with a spatial window, padded `(window - 1) / 2` on every
/// side instead (PyTorch's `padding=k//2`), on its own input or, with `at_pytorch_input`, on the input PyTorch
/// gives such a layer (stride x the config's output, height and width), when that pads or biases otherwise
/// than `config` (a base padded symmetrically already, without a bias, gets its biased twin) and still gives an
/// output. With a bias, as every exported PyTorch convolution has one (its batch norm folded
/// in): the zoo's depthwise layers rarely do, and a depthwise model that had seen PyTorch's windows only without
/// one put MobileNet v2's stride-2 depthwise layer at 15.6 ms with a bias against 3.0 ms without (measured: 3.0).
fn symmetric_padding_variant(config: &LayerConfig, at_pytorch_input: bool) -> Option<LayerConfig> {
    let (kernel, strides, dilation) = match &config.op {
        Op::Conv2d(c) => (c.kernel, c.strides, c.dilation),
        Op::DepthwiseConv2d(c) => (c.kernel, c.strides, c.dilation),
        _ => return None,
    };
    if kernel[0] * kernel[1] <= 1 {
        return None;
    }
    let [ph, pw] = [0, 1].map(|i| (dilation[i] * (kernel[i] - 1)) / 2);
    let symmetric = Padding::Explicit([ph, ph, pw, pw]);
    let mut op = config.op.clone();
    match &mut op {
        Op::Conv2d(c) => (c.padding, c.use_bias) = (symmetric, true),
        Op::DepthwiseConv2d(c) => (c.padding, c.use_bias) = (symmetric, true),
        _ => return None,
    }
    let mut inputs = config.input_shapes.clone();
    if at_pytorch_input {
        let out = config.output_shape().ok()?;
        let (input, [oh, ow]) = (inputs.first_mut()?, [*out.get(1)?, *out.get(2)?]);
        let pytorch = [strides[0] * oh, strides[1] * ow];
        if input.len() != 3 || input[1..] == pytorch {
            return None;
        }
        input[1] = pytorch[0];
        input[2] = pytorch[1];
    }
    let variant = LayerConfig::new(op, inputs, 1);
    let resolved = |c: &LayerConfig| c.features().ok();
    (variant.cost().is_ok() && resolved(&variant).is_some() && resolved(&variant) != resolved(config))
        .then_some(variant)
}

/// Whether a pooling config pads its input at all.
fn pads(config: &LayerConfig) -> bool {
    let (Op::MaxPool2d(p) | Op::AvgPool2d(p)) = &config.op else { return false };
    let Some(shape) = config.input_shapes.first() else { return false };
    let (Some(&h), Some(&w)) = (shape.get(1), shape.get(2)) else { return false };
    p.padding.resolve([h, w], p.pool_size, p.strides, [1, 1]).iter().any(|&x| x > 0)
}

impl ConfigSet {
    pub fn to_json(&self) -> Value {
        let configs: Vec<Value> = self.configs.iter().map(SampledConfig::to_json).collect();
        json!({"seed": self.seed, "batch_sizes": self.batch_sizes, "configs": configs})
    }

    /// Write atomically, one config per line (compact, and diffs stay readable).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut text =
            format!("{{\"seed\": {}, \"batch_sizes\": {}, \"configs\": [\n", self.seed, json!(self.batch_sizes));
        for (i, c) in self.configs.iter().enumerate() {
            text.push_str(&c.to_json().to_string());
            text.push_str(if i + 1 < self.configs.len() { ",\n" } else { "\n" });
        }
        text.push_str("]}\n");
        write_atomic(path, text.as_bytes())
    }

    /// Read a config set; errors name the file, the config (`configs[i]` and its source) and the field.
    pub fn load(path: impl AsRef<Path>) -> Result<ConfigSet> {
        let path = path.as_ref();
        Self::from_json(&read_json(path)?, &path.display().to_string())
    }

    pub fn from_json(value: &Value, file: &str) -> Result<ConfigSet> {
        let at = |field: &str| Location::file(file).field(field);
        let seed = value
            .get("seed")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::spec(at("seed"), "missing or not a non-negative integer"))?;
        let batch_sizes: Vec<usize> = match value.get("batch_sizes").and_then(Value::as_array) {
            Some(list) => list
                .iter()
                .map(|b| match b.as_u64() {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(Error::spec(at("batch_sizes"), format!("expected positive integers, got {b}"))),
                })
                .collect::<Result<_>>()?,
            None => return Err(Error::spec(at("batch_sizes"), "missing or not a list")),
        };
        let list = value
            .get("configs")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::spec(at("configs"), "missing or not a list"))?;
        let mut configs = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let source = item.get("source").and_then(Value::as_str).unwrap_or("").to_string();
            let loc = || Location::file(file).layer(format!("configs[{i}] {source}"), i);
            let config_value = item.get("config").ok_or_else(|| Error::spec(loc().field("config"), "missing"))?;
            let config = LayerConfig::from_json(config_value).map_err(|e| {
                let loc = match &e.field {
                    Some(f) => loc().field(format!("config.{f}")),
                    None => loc().field("config"),
                };
                Error::spec(loc, e.message)
            })?;
            let count = match item.get("count") {
                None => 0,
                Some(v) => v.as_u64().ok_or_else(|| {
                    Error::spec(loc().field("count"), format!("expected a non-negative integer, got {v}"))
                })? as usize,
            };
            configs.push(SampledConfig { config, source, count });
        }
        check_batch_sizes(&configs, &batch_sizes).map_err(|e| Error::spec(at("batch_sizes"), e))?;
        Ok(ConfigSet { seed, batch_sizes, configs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Architectures the zoo gained after devices were collected leave every earlier config as it was: with
    /// them, the sample is the one without them plus their new configs, each type's after the others of it.
    #[test]
    fn architectures_added_later_keep_every_earlier_config() {
        let early = vec![(crate::zoo::architectures()[0].build)(), (crate::zoo::architectures()[8].build)()];
        let late: Vec<Network> = crate::zoo::architectures()
            .into_iter()
            .filter(|e| crate::zoo::ADDED_AFTER_AUGMENTATION.contains(&e.name))
            .map(|e| (e.build)())
            .collect();
        assert_eq!(late.len(), crate::zoo::ADDED_AFTER_AUGMENTATION.len(), "every late architecture is in the zoo");
        let opts = SampleOptions { seed: 3, batch_sizes: vec![1], layer_types: None, budget: AugmentBudget::default() };
        let (before, _) = sample(&early, &opts).unwrap();
        // The late ones first in the list: their place among the networks does not matter.
        let all: Vec<Network> = late.iter().cloned().chain(early.iter().cloned()).collect();
        let (after, _) = sample(&all, &opts).unwrap();
        let key = |c: &SampledConfig| c.config.key().unwrap();
        let earlier: std::collections::HashSet<String> = before.configs.iter().map(key).collect();
        let kept: Vec<String> = after.configs.iter().map(key).filter(|k| earlier.contains(k)).collect();
        assert_eq!(kept, before.configs.iter().map(key).collect::<Vec<_>>(), "same configs, same order");
        let added: Vec<&SampledConfig> = after.configs.iter().filter(|c| !earlier.contains(&key(c))).collect();
        assert!(added.len() > 50, "{}", added.len());
        assert!(added.iter().all(|c| c.source.starts_with("regnet_")), "only the late architectures' own configs");
        // RegNetX-800MF's 42 groups of 16 channels on 7x7.
        assert!(added.iter().any(|c| matches!(&c.config.op, Op::Conv2d(op) if op.groups == 42)
            && c.config.input_shapes[0][..] == [672, 7, 7]));
    }

    #[test]
    fn same_seed_same_sample_and_round_trip() {
        let nets = vec![(crate::zoo::architectures()[0].build)()];
        let opts =
            SampleOptions { seed: 7, batch_sizes: vec![1, 2], layer_types: None, budget: AugmentBudget::default() };
        let (a, counts) = sample(&nets, &opts).unwrap();
        let (b, _) = sample(&nets, &opts).unwrap();
        assert_eq!(a, b);
        let back = ConfigSet::from_json(&a.to_json(), "x").unwrap();
        assert_eq!(back, a);
        let conv = counts.iter().find(|c| c.layer_type == LayerType::Conv2d).unwrap();
        assert!(conv.unique > 0 && conv.augmented > 0 && conv.found >= conv.unique);
        // Grouped variants: valid group counts that split both channels and filters, and nothing else changed.
        let grouped: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:grouped").collect();
        assert!(!grouped.is_empty());
        for c in grouped {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let channels = c.config.input_shapes[0][0];
            assert!(op.groups > 1 && channels % op.groups == 0 && op.filters % op.groups == 0, "{c:?}");
            assert!(c.config.cost().is_ok());
        }
        // Drawn last: without them, every other config is the same as before.
        let budget = AugmentBudget {
            grouped: 0,
            channels: 0,
            wide: 0,
            grouped_channels: 0,
            first_layer: 0,
            heavy: 0,
            resolution: 0,
            many_groups: 0,
            grouped_square: 0,
            pool_stride_one: 0,
            ..AugmentBudget::default()
        };
        let (without, _) = sample(&nets, &SampleOptions { budget, ..opts.clone() }).unwrap();
        let later = |c: &&SampledConfig| {
            ![
                "augment:grouped",
                "augment:channels",
                "augment:wide",
                "augment:grouped_channels",
                "augment:first_layer",
                "augment:heavy",
                "augment:resolution",
                "augment:many_groups",
                "augment:grouped_square",
                "augment:pool_stride_one",
            ]
            .contains(&c.source.as_str())
        };
        let rest: Vec<&SampledConfig> = a.configs.iter().filter(later).collect();
        assert_eq!(without.configs.iter().collect::<Vec<_>>(), rest);
        // Channel variants: spatial, stride-1 convolutions on a new channel count, also drawn after the rest.
        let channels: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:channels").collect();
        assert!(!channels.is_empty());
        for c in &channels {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            assert!(op.kernel[0] * op.kernel[1] > 1 && op.strides == [1, 1] && op.groups == 1, "{c:?}");
            assert_eq!(c.config.input_shapes[0][0] % 8, 0);
        }
        // Each later kind is drawn after the earlier ones: dropping it (and the kinds after it) leaves the rest.
        let later_kinds = [
            "channels",
            "wide",
            "grouped_channels",
            "first_layer",
            "heavy",
            "resolution",
            "many_groups",
            "grouped_square",
            "pool_stride_one",
        ];
        for (k, kind) in later_kinds.iter().enumerate() {
            let mut budget = AugmentBudget::default();
            for dropped in &later_kinds[k..] {
                match *dropped {
                    "channels" => budget.channels = 0,
                    "wide" => budget.wide = 0,
                    "grouped_channels" => budget.grouped_channels = 0,
                    "first_layer" => budget.first_layer = 0,
                    "heavy" => budget.heavy = 0,
                    "resolution" => budget.resolution = 0,
                    "many_groups" => budget.many_groups = 0,
                    "grouped_square" => budget.grouped_square = 0,
                    _ => budget.pool_stride_one = 0,
                }
            }
            let (without, _) = sample(&nets, &SampleOptions { budget, ..opts.clone() }).unwrap();
            let dropped: Vec<String> = later_kinds[k..].iter().map(|d| format!("augment:{d}")).collect();
            let rest: Vec<&SampledConfig> = a.configs.iter().filter(|c| !dropped.contains(&c.source)).collect();
            assert_eq!(without.configs.iter().collect::<Vec<_>>(), rest, "without {kind} and later");
        }
        // Stride-1 poolings: 3x3 or 5x5 windows that keep the image, half of them max and half average.
        let stride_one: Vec<&SampledConfig> =
            a.configs.iter().filter(|c| c.source == "augment:pool_stride_one").collect();
        let budget = AugmentBudget::default().pool_stride_one;
        assert_eq!(stride_one.len(), budget, "{stride_one:?}");
        for c in &stride_one {
            let (Op::MaxPool2d(p) | Op::AvgPool2d(p)) = &c.config.op else { panic!("{c:?}") };
            let input = &c.config.input_shapes[0];
            assert!(p.strides == [1, 1] && [[3, 3], [5, 5]].contains(&p.pool_size), "{c:?}");
            assert!((16..=1024).contains(&input[0]) && (7..=112).contains(&input[1]), "{c:?}");
            assert_eq!(c.config.output_shape().unwrap(), *input, "{c:?}");
        }
        assert_eq!(stride_one.iter().filter(|c| matches!(c.config.op, Op::MaxPool2d(_))).count(), budget / 2);
        // Wide variants: spatial, stride 1, at most 28 pixels high, 128-1024 channels and filters.
        let wide: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:wide").collect();
        assert!(!wide.is_empty());
        for c in &wide {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let input = &c.config.input_shapes[0];
            assert!(op.kernel[0] * op.kernel[1] > 1 && op.strides == [1, 1] && input[1] <= 28, "{c:?}");
            assert!((128..=1024).contains(&input[0]) && (128..=1024).contains(&op.filters), "{c:?}");
            assert!(c.config.cost().is_ok());
        }
        // Grouped channel variants: 2-8 groups that split both the new channels and the filters.
        let grouped: Vec<&SampledConfig> =
            a.configs.iter().filter(|c| c.source == "augment:grouped_channels").collect();
        assert!(!grouped.is_empty());
        for c in &grouped {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let channels = c.config.input_shapes[0][0];
            assert!([2, 3, 4, 8].contains(&op.groups), "{c:?}");
            assert!(channels % op.groups == 0 && op.filters % op.groups == 0, "{c:?}");
            assert!(c.config.cost().is_ok());
        }
        // Many groups: 10-64 groups of 8-64 channels, as many filters as channels, on at most 56 pixels.
        let many: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:many_groups").collect();
        assert!(!many.is_empty());
        for c in &many {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let input = &c.config.input_shapes[0];
            assert!((10..=64).contains(&op.groups) && op.filters == input[0], "{c:?}");
            assert!([8, 16, 24, 32, 48, 64].contains(&(input[0] / op.groups)) && input[0] % op.groups == 0, "{c:?}");
            assert!(op.kernel[0] > 1 && input[1] <= 56 && c.config.cost().is_ok(), "{c:?}");
        }
        // Grouped squares: 3x3 in 2-64 groups of 8-64 channels on 7-112 pixels, padded 1, with a bias.
        let square: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:grouped_square").collect();
        assert!(square.len() > 100, "{}", square.len());
        for c in &square {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let input = &c.config.input_shapes[0];
            assert!((2..=64).contains(&op.groups) && op.filters == input[0] && input[0] <= 1024, "{c:?}");
            assert!([8, 16, 24, 32, 48, 64].contains(&(input[0] / op.groups)) && input[0] % op.groups == 0, "{c:?}");
            assert!(op.kernel == [3, 3] && (7..=112).contains(&input[1]) && input[1] == input[2], "{c:?}");
            assert!(op.padding == Padding::Explicit([1, 1, 1, 1]) && op.use_bias && c.config.cost().is_ok(), "{c:?}");
        }
        // First-layer variants: a spatial convolution on a 1- or 3-channel square image of 16-96 pixels.
        let first: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:first_layer").collect();
        assert!(!first.is_empty());
        for c in &first {
            let Op::Conv2d(op) = &c.config.op else { panic!("{c:?}") };
            let input = &c.config.input_shapes[0];
            assert!(op.kernel[0] * op.kernel[1] > 1 && [1, 3].contains(&input[0]), "{c:?}");
            assert!(FIRST_LAYER_SIZES.contains(&input[1]) && input[1] == input[2], "{c:?}");
            assert!((8..=128).contains(&op.filters) && c.config.cost().is_ok(), "{c:?}");
        }
        // Heavy variants: a convolution on at most 28 pixels with 12-96 MiB of f32 weights (filters rounded to
        // 32, so a little beyond either end).
        let heavy: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:heavy").collect();
        assert!(!heavy.is_empty());
        for c in &heavy {
            let Op::Conv2d(_) = &c.config.op else { panic!("{c:?}") };
            let cost = c.config.cost().unwrap();
            let mib = (cost.weight_elems * 4) as f64 / (1024.0 * 1024.0);
            assert!((11.0..=100.0).contains(&mib) && c.config.input_shapes[0][1] <= 28, "{mib} MiB: {c:?}");
        }
        // Resolution variants: a found layer of a type whose cost grows with the image, on a larger image (the
        // same channels) of at most 640 pixels.
        let found: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.count > 0).collect();
        let resolution: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:resolution").collect();
        assert!(!resolution.is_empty());
        for c in &resolution {
            assert!(RESOLUTION_TYPES.contains(&c.config.layer_type()), "{c:?}");
            let [ch, h, w] = <[usize; 3]>::try_from(c.config.input_shapes[0].as_slice()).unwrap();
            assert!(h.max(w) <= 640 && c.config.cost().is_ok(), "{c:?}");
            let base = found.iter().find(|f| {
                let fs = &f.config.input_shapes[0];
                f.config.op == c.config.op
                    && fs[0] == ch
                    && fs.len() == 3
                    && fs[1] * 13 <= h * 10
                    && fs[2] * 13 <= w * 10
            });
            assert!(base.is_some(), "no found layer at 1/1.4 of its size or less: {c:?}");
        }
        // Padding variants: a found pooling, or one of its other pool sizes, on the same input with the other
        // padding, which pads where the base does not or the other way round.
        let padded: Vec<&SampledConfig> = a.configs.iter().filter(|c| c.source == "augment:pool_padding").collect();
        let pool_of = |c: &LayerConfig| match &c.op {
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => Some(p.clone()),
            _ => None,
        };
        assert!(!padded.is_empty());
        for c in &padded {
            let p = pool_of(&c.config).unwrap_or_else(|| panic!("not a pooling: {c:?}"));
            let base = a.configs.iter().filter(|b| b.count > 0 || b.source == "augment:pool_size").find(|b| {
                b.config.input_shapes == c.config.input_shapes
                    && b.config.layer_type() == c.config.layer_type()
                    && pool_of(&b.config).is_some_and(|q| q.pool_size == p.pool_size && q.strides == p.strides)
            });
            let base = base.unwrap_or_else(|| panic!("no base pooling: {c:?}"));
            assert_ne!(pads(&base.config), pads(&c.config), "{c:?} pads as {base:?}");
        }
    }

    #[test]
    fn symmetric_padding_variants_pad_strided_windows_the_pytorch_way() {
        let nets: Vec<Network> = crate::zoo::architectures()
            .into_iter()
            .filter(|e| ["mobilenetv2", "resnet50"].contains(&e.name))
            .map(|e| (e.build)())
            .collect();
        assert_eq!(nets.len(), 2);
        let opts =
            SampleOptions { seed: 7, batch_sizes: vec![1, 2], layer_types: None, budget: AugmentBudget::default() };
        let (a, _) = sample(&nets, &opts).unwrap();
        // Symmetric-padding variants: a found (or depthwise-variant) spatial window on the same input, padded
        // (window - 1) / 2 on every side with a bias, where the base resolves to another padding or has none;
        // stride-2 ones among them.
        let symmetric: Vec<&SampledConfig> =
            a.configs.iter().filter(|c| c.source == "augment:symmetric_padding").collect();
        assert!(symmetric.iter().any(|c| matches!(&c.config.op, Op::DepthwiseConv2d(d) if d.strides == [2, 2])));
        assert!(symmetric.iter().any(|c| matches!(&c.config.op, Op::Conv2d(d) if d.strides == [2, 2])));
        // MobileNet v2's stride-2 depthwise convolution as PyTorch writes it: 112x112, padded 1 on every side.
        assert!(symmetric.iter().any(|c| matches!(&c.config.op, Op::DepthwiseConv2d(d) if d.strides == [2, 2])
            && c.config.input_shapes[0][1..] == [112, 112]));
        let unpadded = |op: &Op| {
            let mut op = op.clone();
            match &mut op {
                Op::Conv2d(c) => (c.padding, c.use_bias) = (Padding::Valid, true),
                Op::DepthwiseConv2d(c) => (c.padding, c.use_bias) = (Padding::Valid, true),
                _ => panic!("not a convolution: {op:?}"),
            }
            op
        };
        for c in &symmetric {
            let (kernel, dilation, padding, use_bias) = match &c.config.op {
                Op::Conv2d(d) => (d.kernel, d.dilation, d.padding, d.use_bias),
                Op::DepthwiseConv2d(d) => (d.kernel, d.dilation, d.padding, d.use_bias),
                op => panic!("not a convolution: {op:?}"),
            };
            let [ph, pw] = [0, 1].map(|i| dilation[i] * (kernel[i] - 1) / 2);
            assert_eq!(padding, Padding::Explicit([ph, ph, pw, pw]), "{c:?}");
            // With a bias, as PyTorch's exports have (batch norm folded in).
            assert!(use_bias, "{c:?}");
            // On the base's input, or on stride x the base's output.
            let pytorch_input = |b: &LayerConfig| {
                let (input, out) = (&b.input_shapes[0].clone(), b.output_shape().unwrap());
                let strides = match &b.op {
                    Op::Conv2d(d) => d.strides,
                    Op::DepthwiseConv2d(d) => d.strides,
                    _ => unreachable!(),
                };
                vec![input[0], strides[0] * out[1], strides[1] * out[2]]
            };
            let base = a.configs.iter().filter(|b| b.count > 0 || b.source == "augment:depthwise").find(|b| {
                unpadded(&b.config.op) == unpadded(&c.config.op)
                    && (b.config.input_shapes == c.config.input_shapes
                        || [crate::layer::Shape::from_vec(pytorch_input(&b.config))] == c.config.input_shapes[..])
            });
            let base = base.unwrap_or_else(|| panic!("no base convolution: {c:?}"));
            assert_ne!(base.config.features().unwrap(), c.config.features().unwrap(), "{c:?}");
        }
    }
}
