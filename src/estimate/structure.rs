//! What the engine keeps for every layer of a network besides its weights: the nodes of its optimised plan.
//!
//! Why this exists: a network's peak memory is what stays resident for the whole run (weights, plan tables,
//! the input) plus the tensors alive at the worst step. The weights and tables are counted exactly
//! ([`crate::engine::packing`]), but tract also keeps, for every node of the optimised plan, its operator (a
//! matrix product carries its fused-op specs and geometry), its output facts and its run state. That is a few
//! KiB to tens of KiB per layer, independent of the tensor sizes: chains of 1 and 4 identical 3×3 convolutions
//! differ by 18.5 KiB per convolution at every size from 16×7×7 to 256×56×56. Measured alone, a layer's memory
//! contains it (the per-layer memory models learn it as workspace, held only while the layer runs); in a
//! network it is held by every layer at once. Uncounted, ShuffleNet's 194 nodes (0.72 MiB) put its peak 6% low,
//! and NASNet-Mobile's 1,073 nodes (6.5 MiB) 19.5% low: a whole-network calibration by layer counts cannot
//! follow that, because the bytes per layer differ by kind (on one x86 machine a grouped 1×1 convolution 17 KiB,
//! a depthwise one 9.6, a ReLU of its own 2.5, a ReLU that tract chains after a batch norm 0.7).
//!
//! So the bytes per layer are measured on the device, by kind ([`kind_of`]: how tract lowers the layer), with
//! probe networks: a chain of [`PROBE_UNITS`] units each holding one probed layer, against the same chain
//! without it ([`probes`]). What the estimator counts for the probed layers (their weights and tables) is taken
//! off, so what remains is what the estimator misses. `perfmodel calibrate` measures them ([`measure`]) and
//! keeps them in the calibration file; the estimator then counts them as resident.

use super::Estimator;
use crate::engine::TractExecutor;
use crate::error::{Error, Result};
use crate::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, Op, Padding, Pool2d};
use crate::network::{Layer, Network, INPUT};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::engine::rules::{kind_of, CHAINED, FUSED, FUSED_BATCH_NORM};

/// Units of the probed layer in a probe network (more averages the allocator's rounding out).
pub const PROBE_UNITS: usize = 4;

/// Bytes the engine keeps per layer of each kind, as measured on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineStructure {
    /// The engine measured (e.g. `tract 0.23.9`).
    pub engine: String,
    /// Bytes per layer by [`kind_of`] (and [`FUSED`], [`FUSED_BATCH_NORM`], [`CHAINED`]): the median over the
    /// probe sizes. Can be negative where the engine holds less than the estimator counts for a layer.
    pub bytes_per_layer: BTreeMap<String, f64>,
}

impl EngineStructure {
    /// Bytes per layer of `kind`; 0 for a kind that was not measured.
    pub fn bytes(&self, kind: &str) -> f64 {
        self.bytes_per_layer.get(kind).copied().filter(|b| b.is_finite()).unwrap_or(0.0)
    }
}

/// One probe: `with` holds [`PROBE_UNITS`] · `per_unit` layers of `kind` that `without` lacks; everything else is
/// the same.
#[derive(Debug, Clone)]
pub struct Probe {
    pub kind: &'static str,
    pub with: Network,
    pub without: Network,
    pub per_unit: usize,
}

fn conv(filters: usize, kernel: [usize; 2], groups: usize) -> Op {
    Op::Conv2d(Conv2d { groups, padding: Padding::Same, use_bias: false, ..Conv2d::new(filters, kernel) })
}

fn depthwise() -> Op {
    Op::DepthwiseConv2d(DepthwiseConv2d { padding: Padding::Same, use_bias: false, ..DepthwiseConv2d::new([3, 3]) })
}

fn same_pool(pool: fn(Pool2d) -> Op) -> Op {
    pool(Pool2d { pool_size: [3, 3], strides: [1, 1], padding: Padding::Same })
}

/// How a probed layer sits in its chain.
#[derive(Clone, Copy)]
enum Place {
    /// After the separator, feeding the next unit.
    InChain,
    /// Reading the separator's output and the unit's input (add, multiply), feeding the next unit.
    Merge,
    /// Reading the separator's output (and, for a concat, the unit's input) as an output of its own: the chain
    /// goes on from the separator.
    Branch,
}

/// A chain on `input` of [`PROBE_UNITS`] units: `separator`, then `probed` (absent from `without`).
fn chain(name: &str, input: Vec<usize>, separator: &Op, probed: &[Op], place: Place) -> (Network, Network) {
    let build = |with: bool| {
        let mut net = Network::new(format!("structure-probe-{name}"), input.clone());
        let mut previous = INPUT.to_string();
        for unit in 0..PROBE_UNITS {
            let sep = format!("u{unit}_separator");
            net.layers.push(Layer::new(&sep, separator.clone()).with_inputs(&[&previous]));
            let mut last = sep.clone();
            if with {
                for (j, op) in probed.iter().enumerate() {
                    let layer = format!("u{unit}_probed{j}");
                    let inputs: Vec<&str> = match (place, op) {
                        (Place::Merge, _) | (Place::Branch, Op::Concat { .. }) => vec![last.as_str(), &previous],
                        _ => vec![last.as_str()],
                    };
                    net.layers.push(Layer::new(&layer, op.clone()).with_inputs(&inputs));
                    last = layer;
                }
            }
            previous = match place {
                Place::Branch => sep,
                Place::InChain | Place::Merge => last,
            };
        }
        net
    };
    (build(true), build(false))
}

/// The probe networks: every kind at three sizes (channels × side: 48 × 56, 96 × 28, 384 × 14; a direct
/// convolution needs 128 pixels a row, so 16, 32 and 64 channels on 128 × 128; dense layers of 256, 1,024 and
/// 4,096 units). Channel counts are multiples of 3 for the grouped kinds (3 groups).
pub fn probes() -> Vec<Probe> {
    let mut probes = Vec::new();
    let mut add = |kind: &'static str, (with, without): (Network, Network), per_unit: usize| {
        probes.push(Probe { kind, with, without, per_unit });
    };
    let relu = Op::Activation(Activation::Relu);
    for (c, side) in [(48, 56), (96, 28), (384, 14)] {
        let image = vec![c, side, side];
        let dw = depthwise();
        let max_pool = same_pool(Op::MaxPool2d);
        let kinds: [(&'static str, Op); 6] = [
            ("conv2d:pointwise", conv(c, [1, 1], 1)),
            ("conv2d:pointwise-grouped", conv(c, [1, 1], 3)),
            ("conv2d:lazy", conv(c, [3, 3], 1)),
            ("conv2d:lazy-grouped", conv(c, [3, 3], 3)),
            ("conv2d:im2col", conv(c, [1, 3], 1)),
            ("conv2d:im2col-grouped", conv(c, [1, 3], 3)),
        ];
        for (kind, op) in kinds {
            add(kind, chain(kind, image.clone(), &dw, &[op], Place::InChain), 1);
        }
        add(
            "conv2d:depthwise",
            chain("conv-depthwise", image.clone(), &max_pool, &[conv(c, [3, 3], c)], Place::InChain),
            1,
        );
        add("depthwise_conv2d", chain("depthwise", image.clone(), &max_pool, &[dw.clone()], Place::InChain), 1);
        // A 1×1 convolution with and without the batch norm it folds in, and with and without the ReLU after.
        let pointwise = conv(c, [1, 1], 1);
        let with_bn = [pointwise.clone(), Op::BatchNorm];
        let (with, _) = chain("fused-bn", image.clone(), &dw, &with_bn, Place::InChain);
        let (without, _) = chain("fused-bn", image.clone(), &dw, &[pointwise], Place::InChain);
        add(FUSED_BATCH_NORM, (with.clone(), without), 1);
        let (with_relu, _) =
            chain("fused", image.clone(), &dw, &[with_bn[0].clone(), Op::BatchNorm, relu.clone()], Place::InChain);
        add(FUSED, (with_relu, with), 1);
        // A ReLU after a batch norm (one `OptBinChain` node with it), against the batch norm alone.
        let (with, _) = chain("chained", image.clone(), &dw, &[Op::BatchNorm, relu.clone()], Place::InChain);
        let (without, _) = chain("chained", image.clone(), &dw, &[Op::BatchNorm], Place::InChain);
        add(CHAINED, (with, without), 1);
        let in_chain: [(&'static str, Op); 4] = [
            ("batch_norm", Op::BatchNorm),
            ("activation", relu.clone()),
            ("max_pool2d", max_pool.clone()),
            ("avg_pool2d", same_pool(Op::AvgPool2d)),
        ];
        for (kind, op) in in_chain {
            add(kind, chain(kind, image.clone(), &dw, &[op], Place::InChain), 1);
        }
        // ShuffleNet's channel shuffle (a reshape, a transpose and a reshape in tract's plan) and its halves.
        let shuffle = Op::ChannelShuffle { groups: 2 };
        add("channel_shuffle", chain("channel-shuffle", image.clone(), &dw, &[shuffle], Place::InChain), 1);
        let half = Op::ChannelSlice { start: 0, end: c / 2 };
        add("channel_slice", chain("channel-slice", image.clone(), &dw, &[half], Place::Branch), 1);
        add("add", chain("add", image.clone(), &dw, &[Op::Add], Place::Merge), 1);
        add("multiply", chain("multiply", image.clone(), &dw, &[Op::Multiply], Place::Merge), 1);
        let branches: [(&'static str, Op); 5] = [
            ("concat", Op::Concat { axis: 0 }),
            ("global_avg_pool2d", Op::GlobalAvgPool2d),
            ("global_max_pool2d", Op::GlobalMaxPool2d),
            ("zero_padding2d", Op::ZeroPadding2d { padding: [1, 1, 1, 1] }),
            ("cropping2d", Op::Cropping2d { cropping: [1, 1, 1, 1] }),
        ];
        for (kind, op) in branches {
            add(kind, chain(kind, image.clone(), &dw, &[op], Place::Branch), 1);
        }
    }
    for c in [16, 32, 64] {
        let max_pool = same_pool(Op::MaxPool2d);
        add("conv2d:direct", chain("direct", vec![c, 128, 128], &max_pool, &[conv(c, [3, 3], 1)], Place::InChain), 1);
    }
    for units in [256, 1024, 4096] {
        let dense = Op::Dense(Dense { units, use_bias: true, activation: Activation::Linear });
        let sigmoid = Op::Activation(Activation::Sigmoid);
        add("dense", chain("dense", vec![units], &sigmoid, &[dense], Place::InChain), 1);
    }
    // Transformer layers on a sequence of tokens, at a small, a ViT-Ti and a BERT-base size (tokens x features,
    // heads of 64): products with a constant weight, products of two tensors (a head's scores by its values,
    // square so that a product of a unit's input and its separator's output chains), normalisation, softmax,
    // GELU, a transpose of the heads to the front, and the scale of the scores. (A reshape does not run: the
    // estimate aliases it.)
    let sigmoid = Op::Activation(Activation::Sigmoid);
    for (tokens, features) in [(64, 128), (197, 192), (128, 768)] {
        let (sequence, heads) = (vec![tokens, features], features / 64);
        let weighted = Op::MatMul { units: Some(features), use_bias: true };
        add("matmul:weighted", chain("matmul-weighted", sequence.clone(), &sigmoid, &[weighted], Place::InChain), 1);
        let product = Op::MatMul { units: None, use_bias: false };
        let scores = vec![heads, tokens, tokens];
        add("matmul:product", chain("matmul-product", scores.clone(), &sigmoid, &[product], Place::Merge), 1);
        let scale =
            Op::Elementwise { function: crate::layer::ElementwiseFn::Mul, constant_shape: smallvec::smallvec![] };
        add("elementwise", chain("elementwise", scores.clone(), &sigmoid, &[scale], Place::InChain), 1);
        add("softmax", chain("softmax", scores, &sigmoid, &[Op::Softmax { axis: -1 }], Place::InChain), 1);
        let norm = Op::LayerNorm { axis: -1, epsilon: 1e-6 };
        add("layer_norm", chain("layer-norm", sequence.clone(), &sigmoid, &[norm], Place::InChain), 1);
        let gelu = Op::Activation(Activation::Gelu);
        add("activation:gelu", chain("gelu", sequence.clone(), &sigmoid, &[gelu], Place::InChain), 1);
        let transpose = Op::Transpose { perm: vec![1, 0, 2] };
        add("transpose", chain("transpose", vec![tokens, heads, 64], &sigmoid, &[transpose], Place::InChain), 1);
    }
    // How tract lowers a convolution depends on its size (a grouped 1×3 one whose groups fit one kernel panel
    // goes lazy): a probe whose convolution is lowered otherwise at its size measures another kind, and is left
    // out.
    probes.retain(|p| !p.kind.starts_with("conv2d:") || probed_kind(&p.with).is_some_and(|k| k == p.kind));
    probes
}

/// The kind of the first probed layer of a probe network.
fn probed_kind(net: &Network) -> Option<&'static str> {
    let analysis = net.analyze().ok()?;
    let i = net.layers.iter().position(|l| l.name == "u0_probed0")?;
    Some(kind_of(analysis.config(i)))
}

/// Measure every kind's bytes per layer on this machine from `probes` ([`probes`]): build each probe network with
/// `executor` (tract) and take off what `estimator` (the device's learned models, without an engine structure)
/// counts as resident for the same networks. `None` when the counting allocator is not installed (the library
/// inside another program).
pub fn measure(probes: &[Probe], executor: &TractExecutor, estimator: &Estimator) -> Result<Option<EngineStructure>> {
    let mut samples: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for probe in probes {
        let resident = |net: &Network| executor.resident_bytes(net).map_err(|e| probe_error(probe, e));
        let (Some(with), Some(without)) = (resident(&probe.with)?, resident(&probe.without)?) else {
            return Ok(None);
        };
        let counted = |net: &Network| -> Result<f64> {
            Ok(estimator.estimate(net).map_err(|e| probe_error(probe, e))?.total.resident_memory_mib)
        };
        let counted_mib = counted(&probe.with)? - counted(&probe.without)?;
        let layers = (PROBE_UNITS * probe.per_unit) as f64;
        let engine_bytes = with as f64 - without as f64;
        samples.entry(probe.kind).or_default().push((engine_bytes - counted_mib * crate::units::MIB) / layers);
    }
    let bytes_per_layer = samples
        .into_iter()
        .map(|(kind, mut v)| {
            v.sort_by(f64::total_cmp);
            (kind.to_string(), v[v.len() / 2])
        })
        .collect();
    Ok(Some(EngineStructure { engine: format!("tract {}", crate::engine::TRACT_VERSION), bytes_per_layer }))
}

/// The error for a probe network the engine or the estimator refused (a bug in the probes, not user input).
fn probe_error(probe: &Probe, e: Error) -> Error {
    Error::Executor(format!("engine structure probe '{}': {e}", probe.kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{LayerConfig, Shape};
    use std::path::Path;

    fn config(op: Op, input: Shape) -> LayerConfig {
        LayerConfig::new(op, vec![input], 1)
    }

    #[test]
    fn a_convolution_s_kind_is_its_lowering_and_grouping() {
        let image: Shape = smallvec::smallvec![96, 28, 28];
        let kind = |op: Op| kind_of(&config(op, image.clone()));
        assert_eq!(kind(conv(96, [1, 1], 1)), "conv2d:pointwise");
        assert_eq!(kind(conv(96, [1, 1], 3)), "conv2d:pointwise-grouped");
        assert_eq!(kind(conv(96, [3, 3], 1)), "conv2d:lazy");
        assert_eq!(kind(conv(96, [3, 3], 96)), "conv2d:depthwise");
        // Which of these tract picks depends on the CPU's kernels (direct spatial needs its routine, and a
        // group that fits one kernel panel goes lazy); the kind follows the lowering and says the grouping.
        assert!(["conv2d:im2col-grouped", "conv2d:lazy-grouped"].contains(&kind(conv(96, [1, 3], 3))));
        assert!(["conv2d:direct", "conv2d:lazy"]
            .contains(&kind_of(&config(conv(16, [3, 3], 1), smallvec::smallvec![16, 128, 128]))));
        assert_eq!(kind(depthwise()), "depthwise_conv2d");
        assert_eq!(kind(Op::BatchNorm), "batch_norm");
        assert_eq!(kind(Op::GlobalAvgPool2d), "global_avg_pool2d");
    }

    #[test]
    fn every_probe_adds_exactly_its_layers_of_its_kind_to_what_the_estimator_counts() {
        // A distinct number of bytes per kind: the estimate of a probe's two networks then differs, beyond what
        // it counts without any structure (weights, tables), by exactly units × the probed kind's bytes, which
        // holds only if the estimator sees the probed layers as that kind and nothing else changes between the
        // two networks. With tract's shipped models (their fusion rules are tract's).
        let probes = probes();
        let mut kinds: Vec<&str> = probes.iter().map(|p| p.kind).collect();
        kinds.sort();
        kinds.dedup();
        // Every kind the estimator can name is probed, but a convolution lowering this CPU never picks at the
        // probe sizes (a probe lowered otherwise is left out).
        let always = [
            "activation",
            "activation:gelu",
            "add",
            "avg_pool2d",
            "batch_norm",
            "concat",
            "conv2d:depthwise",
            "conv2d:lazy",
            "conv2d:lazy-grouped",
            "conv2d:pointwise",
            "conv2d:pointwise-grouped",
            "cropping2d",
            "dense",
            "elementwise",
            "depthwise_conv2d",
            CHAINED,
            FUSED,
            FUSED_BATCH_NORM,
            "global_avg_pool2d",
            "global_max_pool2d",
            "layer_norm",
            "matmul:product",
            "matmul:weighted",
            "max_pool2d",
            "multiply",
            "softmax",
            "transpose",
            "zero_padding2d",
        ];
        for kind in always {
            assert!(kinds.contains(&kind), "{kind}: {kinds:?}");
        }
        let table = EngineStructure {
            engine: "test".to_string(),
            bytes_per_layer: kinds.iter().enumerate().map(|(i, k)| (k.to_string(), 1024.0 * (i + 1) as f64)).collect(),
        };
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let plain = Estimator::open(&models, "local").unwrap().without_calibration();
        assert!(plain.models_tract());
        let measured =
            Estimator::open(&models, "local").unwrap().without_calibration().with_engine_structure(Some(table.clone()));
        let resident = |e: &Estimator, net: &Network| e.estimate(net).unwrap().total.resident_memory_mib;
        for probe in &probes {
            assert!(
                probe.with.layers.len() == probe.without.layers.len() + PROBE_UNITS * probe.per_unit,
                "{}",
                probe.kind
            );
            let counted = resident(&plain, &probe.with) - resident(&plain, &probe.without);
            let with_structure = resident(&measured, &probe.with) - resident(&measured, &probe.without);
            let layers = (PROBE_UNITS * probe.per_unit) as f64;
            let per_layer = (with_structure - counted) * crate::units::MIB / layers;
            assert!((per_layer - table.bytes(probe.kind)).abs() < 1.0, "{}: {per_layer} bytes per layer", probe.kind);
        }
    }

    #[test]
    fn over_an_unbuilt_concat_a_product_per_part_is_resident_and_its_step_holds_one_less_alone() {
        // A fire module (the concat is read only by the 1×1 squeeze: tract never builds it and runs the squeeze
        // as one product per part), then a depthwise convolution with a batch norm and a ReLU of their own (the
        // ReLU chained after the batch norm), with tract's shipped models.
        let net = Network::from_json_str(
            r#"{"name": "fire", "batch_size": 1, "input_shape": [64, 28, 28], "layers": [
              {"name": "e1", "type": "conv2d", "filters": 64, "kernel": [1,1]},
              {"name": "e3", "type": "conv2d", "filters": 64, "kernel": [3,3], "padding": "same", "inputs": ["input"]},
              {"name": "cat", "type": "concat", "axis": 0, "inputs": ["e1", "e3"]},
              {"name": "squeeze", "type": "conv2d", "filters": 32, "kernel": [1,1], "use_bias": false},
              {"name": "squeeze_bn", "type": "batch_norm"},
              {"name": "squeeze_relu", "type": "activation", "function": "relu"},
              {"name": "dw", "type": "depthwise_conv2d", "kernel": [3,3], "padding": "same"},
              {"name": "dw_bn", "type": "batch_norm"},
              {"name": "dw_relu", "type": "activation", "function": "relu"}]}"#,
            "fire.json",
        )
        .unwrap();
        let kib = |k: f64| k * 1024.0;
        let table = EngineStructure {
            engine: "test".to_string(),
            bytes_per_layer: [
                ("conv2d:pointwise", 1.0),
                ("conv2d:lazy", 2.0),
                (FUSED_BATCH_NORM, 4.0),
                (FUSED, 8.0),
                ("depthwise_conv2d", 16.0),
                ("batch_norm", 32.0),
                (CHAINED, 64.0),
                ("activation", 128.0),
                ("concat", 256.0),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), kib(v)))
            .collect(),
        };
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let plain = Estimator::open(&models, "local").unwrap().without_calibration();
        let measured =
            Estimator::open(&models, "local").unwrap().without_calibration().with_engine_structure(Some(table));
        let (a, b) = (measured.estimate(&net).unwrap(), plain.estimate(&net).unwrap());
        let layer =
            |e: &crate::estimate::Estimate, name: &str| e.layers.iter().find(|l| l.name == name).unwrap().clone();
        assert!(layer(&b, "cat").predictor.to_string().starts_with("fused:"), "{b:?}");
        // e1, e3, the squeeze twice (two parts), its folded batch norm and fused ReLU, the depthwise, its batch
        // norm, the ReLU chained after it; no concat.
        let extra = kib(1.0 + 2.0 + 2.0 * 1.0 + 4.0 + 8.0 + 16.0 + 32.0 + 64.0) / crate::units::MIB;
        let resident = a.total.resident_memory_mib - b.total.resident_memory_mib;
        assert!((resident - extra).abs() < 1e-9, "{resident} MiB more resident, expected {extra}");
        // While the squeeze runs, its own structure (what it held measured alone) is no longer workspace.
        let squeeze = layer(&a, "squeeze").in_use_mib.unwrap() - layer(&b, "squeeze").in_use_mib.unwrap();
        let alone = kib(1.0) / crate::units::MIB;
        assert!((squeeze - (extra - alone)).abs() < 1e-9, "{squeeze} MiB more at the squeeze");
        // The layer's own memory is what it holds alone, structure included, as before.
        assert!((layer(&a, "squeeze").memory_mib - layer(&b, "squeeze").memory_mib).abs() < 1e-9);
    }
}
