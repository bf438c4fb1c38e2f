//! tract's graph rewrites, as the estimate follows them (tract-core 0.23.9).
//!
//! A rule here is decided on the graph, not on the instruction set: the same rewrite happens on every machine
//! tract runs on, so a device's models trained with tract take these rules wherever the estimate runs.

use super::{fuses_into_kernel, is_scalar_scale, scaled_product, single_readers, EngineRules, Fusion};
use crate::engine::packing::{conv_lowering, tract_plan_bytes, ConvLowering};
use crate::estimate::memory::BYTES_PER_ELEMENT;
use crate::filled::filled;
use crate::layer::{Activation, LayerConfig, LayerCost, Op};
use crate::network::{Analysis, Network, Source};

/// tract's rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tract;

/// Whether tract computes `op` as one matrix product: an ungrouped convolution or a dense layer. Only such a
/// product takes in what follows it (a batch norm, an activation, an add); a depthwise or grouped convolution
/// is not one. In whole-network runs the batch norms and activations after depthwise convolutions had nodes of
/// their own in 160 of 199 cases (MobileNets, EfficientNets: 0.8-1.0 ms of MobileNet v1 and v2's 19-21 ms), and
/// so did 31 of the 46 after grouped convolutions (ShuffleNet's: 0.53 of its 12.05 ms), while 1,068 ReLUs after
/// ungrouped convolutions took 10 ms in all.
fn one_product(op: &Op) -> bool {
    match op {
        Op::DepthwiseConv2d(_) => false,
        Op::Conv2d(c) => c.groups == 1,
        _ => true,
    }
}

impl EngineRules for Tract {
    fn name(&self) -> &'static str {
        "tract"
    }

    fn kernel_takes_epilogue(&self, producer: &Op) -> bool {
        one_product(producer)
    }

    /// Concats tract never builds. Its `ConcatThenEinsum` pass turns a product that sums over a concat's axis
    /// into one product per part plus adds: a 1×1 convolution (an einsum after declutter) reading a channel
    /// concat, dropouts between them removed, whatever else reads the concat. When every reader of the concat is
    /// such a convolution, nothing reads the concat any more and it is never computed (SqueezeNet's fire modules:
    /// each concat feeds the next squeeze). Otherwise the concat is built and the convolutions still run one
    /// product per part, on slices of it (GoogLeNet's inception modules, whose concat a max pooling reads too: 12
    /// products where the network has 3; counted as 3, its resident memory came out 0.7 MiB low).
    fn unbuilt_concats(&self, net: &Network, analysis: &Analysis) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
        let n = net.layers.len();
        let (mut read_by, mut reads) = (filled(None, n), filled(None, n));
        // Most networks have no concat: no reader lists for them (this runs in every estimate of a NAS loop).
        if !net.layers.iter().any(|l| matches!(l.op, Op::Concat { .. })) {
            return (read_by, reads);
        }
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, srcs) in analysis.sources.iter().enumerate() {
            for s in srcs {
                if let Source::Layer(j) = s {
                    readers[*j].push(i);
                }
            }
        }
        for (j, layer) in net.layers.iter().enumerate() {
            let Op::Concat { axis } = layer.op else { continue };
            let rank = analysis.config(j).input_shapes.first().map_or(0, |s| s.len()) as i64;
            if rank != 3 || !(axis == 0 || axis == -rank) {
                continue;
            }
            // The concat's readers, looking through dropouts; a reader nobody reads is a network output.
            let (mut convs, mut pending, mut built) = (Vec::new(), readers[j].clone(), readers[j].is_empty());
            while let Some(r) = pending.pop() {
                match &net.layers[r].op {
                    Op::Dropout { .. } if !readers[r].is_empty() => pending.extend(&readers[r]),
                    Op::Conv2d(_) if crate::engine::packing::is_plain_product(analysis.config(r)) => convs.push(r),
                    _ => built = true,
                }
            }
            convs.sort_unstable();
            if !built {
                read_by[j] = convs.first().copied();
            }
            for c in convs {
                reads[c] = Some(j);
            }
        }
        (read_by, reads)
    }

    /// Residual adds tract computes inside a convolution's matrix product: its `OptMatMul` takes a following
    /// `Add` of two same-shaped tensors into the product as `AddUnicast` when the product's output has that add
    /// as its only reader (`ops/matmul/optimized.rs`), after the batch norm and activation it already took in.
    /// The product keeps its output as a matrix (channels × pixels) until a reshape, which tract pushes past the
    /// add only when the add's other input has that form too, i.e. comes from products through element-wise
    /// layers; a k×k convolution (lazy or explicit im2col, direct) ends in a reshape of its own, so neither takes
    /// an add nor gives the other side that form. Which product takes the add follows the add's input order, not
    /// the order of computation: the first input's product when it is one; the second's only when no activation
    /// alone reads the add, for an add followed by an activation whose first input is no product forms an
    /// element-wise chain with it instead.
    /// Traced on tract's plans: Keras's ResNet v1 writes `Add([shortcut, residual])`, so its projection block (a
    /// product on each side, then a ReLU) runs add and ReLU in the shortcut's product, and its identity block
    /// (the shortcut the previous block's output) runs them as one `OptBinChain(Add+Max)` node; PyTorch's
    /// exported ResNets add `(residual, shortcut)`, and both blocks run add and ReLU in the residual branch's
    /// last convolution (a projection block written `(residual, shortcut)` too, though its shortcut is computed
    /// first); ResNet-18's blocks end in 3×3 convolutions and run `Add+Max` chains. Without the ReLU (ResNet v2,
    /// MobileNet v2) the add joins a product on either side; Xception's (the other side a max pooling) and
    /// MobileNetV3's first block (the other side the 3×3 stem) are `OptAddUnicast` nodes. In whole-network runs of
    /// Keras's ResNet-50 v1 the projection shortcut's node (the add's first input) took 2.0 ms and the main path's
    /// identical 1×1 convolution 0.84 ms, the add 0 ms.
    fn residual_adds(&self, net: &Network, analysis: &Analysis, consumers: &[u32]) -> Vec<Option<(usize, usize)>> {
        let n = net.layers.len();
        let mut into = filled(None, n);
        if !net.layers.iter().any(|l| matches!(l.op, Op::Add)) {
            return into;
        }
        let single_reader = single_readers(&analysis.sources, consumers);
        // Only an ungrouped 1×1 convolution is one product whose output is the matrix an add can join; a k×k one
        // ends in a reshape of its own (ResNet-18's 3×3 convolutions: `Add+Max` chains).
        let one_product = |j: usize, c: &crate::layer::Conv2d| {
            c.groups == 1 && conv_lowering(analysis.config(j)) == Some(ConvLowering::Pointwise)
        };
        // Back from an input of the add, through what the product takes in (an activation it applies, a batch
        // norm folded into a linear convolution), each read by the next alone, to an ungrouped convolution.
        let conv_of = |mut j: usize| -> Option<usize> {
            let mut after_bn = false;
            loop {
                if consumers[j] != 1 {
                    return None;
                }
                match (&net.layers[j].op, analysis.sources[j].as_slice()) {
                    (Op::Conv2d(c), _) if one_product(j, c) => {
                        let takes_in =
                            if after_bn { c.activation == Activation::Linear } else { fuses_into_kernel(c.activation) };
                        return takes_in.then_some(j);
                    }
                    (Op::BatchNorm, [Source::Layer(p)]) if !after_bn => {
                        after_bn = true;
                        j = *p;
                    }
                    (Op::Activation(a), [Source::Layer(p)]) if fuses_into_kernel(*a) && !after_bn => j = *p,
                    // Inference drops it (EfficientNet's stochastic depth before its adds); not between a
                    // convolution and its batch norm, which then is not folded.
                    (Op::Dropout { .. }, [Source::Layer(p)]) if !after_bn => j = *p,
                    _ => return None,
                }
            }
        };
        // Whether a tensor comes from ungrouped convolutions through element-wise layers (every input of each).
        let mut from_products: Vec<bool> = filled(false, n);
        for (i, layer) in net.layers.iter().enumerate() {
            let all_from_products = |srcs: &[Source]| {
                !srcs.is_empty() && srcs.iter().all(|s| matches!(s, Source::Layer(j) if from_products[*j]))
            };
            from_products[i] = match &layer.op {
                Op::Conv2d(c) => one_product(i, c),
                Op::Activation(a) => *a != Activation::Softmax && all_from_products(&analysis.sources[i]),
                Op::BatchNorm | Op::Add | Op::Multiply | Op::Dropout { .. } => all_from_products(&analysis.sources[i]),
                _ => false,
            };
        }
        // A product with a constant weight (a transformer's projection or feed-forward) stores its output as the
        // tokens x features matrix it is, so it takes in an add of that shape whatever the other side: ViT's first
        // block adds the network's input (traced: the add's node is the product, the product's own a pack).
        let weighted = |s: &Source| match s {
            Source::Layer(j)
                if consumers[*j] == 1 && matches!(net.layers[*j].op, Op::MatMul { units: Some(_), .. }) =>
            {
                Some(*j)
            }
            _ => None,
        };
        for (i, layer) in net.layers.iter().enumerate() {
            if !matches!(layer.op, Op::Add) {
                continue;
            }
            let shapes = &analysis.config(i).input_shapes;
            if shapes.len() != 2 || shapes[0] != shapes[1] || analysis.sources[i][0] == analysis.sources[i][1] {
                continue;
            }
            let chained =
                single_reader[i].is_some_and(|r| matches!(net.layers[r].op, Op::Activation(f) if fuses_into_kernel(f)));
            // Of two such products, the one computed first.
            let product = (0..2).filter_map(|side| weighted(&analysis.sources[i][side]).map(|j| (j, side))).min();
            if let (Some(product), false) = (product, chained) {
                into[i] = Some(product);
                continue;
            }
            let [Source::Layer(a), Source::Layer(b)] = analysis.sources[i].as_slice() else { continue };
            into[i] = match (conv_of(*a), conv_of(*b)) {
                (Some(x), Some(_)) => Some((x, 0)),
                (Some(x), None) if from_products[*b] => Some((x, 0)),
                (None, Some(y)) if from_products[*a] && !chained => Some((y, 1)),
                _ => None,
            };
        }
        into
    }

    /// What tract does to a transformer's attention (traced on its plans of ViT and BERT blocks): a multiply or
    /// divide by a scalar right after a product of two tensors that only it reads (BERT's scale of the scores)
    /// becomes the product's epilogue (the scale's node is the `OptMatMul`, the product's own only packs); a
    /// transpose whose data reaches a product through layers each read by the next alone (reshapes, other
    /// transposes, scalar scales) or directly has no node at all: the product packs its operand from the strided
    /// tensor; and a slice of a transposed tensor (through reshapes) is done by the transpose's node.
    fn folded_into_products(
        &self,
        net: &Network,
        analysis: &Analysis,
        consumers: &[u32],
    ) -> Vec<Option<(usize, Fusion)>> {
        let n = net.layers.len();
        let mut folded = filled(None, n);
        if !net.layers.iter().any(|l| matches!(l.op, Op::MatMul { .. })) {
            return folded;
        }
        let only_reader = single_readers(&analysis.sources, consumers);
        for (i, layer) in net.layers.iter().enumerate() {
            if let Some(product) = scaled_product(net, analysis, &only_reader, i) {
                folded[i] = Some((product, Fusion::Epilogue));
                continue;
            }
            match &layer.op {
                Op::Transpose { .. } => {
                    // Through reshapes, other transposes and scalar scales (tract moves the axes past them),
                    // each read by the next alone, to the product that packs the operand.
                    let mut r = only_reader[i];
                    while let Some(k) = r {
                        match &net.layers[k].op {
                            Op::Reshape { .. } | Op::Transpose { .. } => r = only_reader[k],
                            op if is_scalar_scale(op) => r = only_reader[k],
                            _ => break,
                        }
                    }
                    folded[i] =
                        r.filter(|&m| matches!(net.layers[m].op, Op::MatMul { .. })).map(|o| (o, Fusion::Operand));
                }
                // A slice of a transposed tensor (the parts of a packed query/key/value projection): tract slices
                // before it moves the axes, so the transpose's node does the slice's work.
                Op::ChannelSlice { .. } => {
                    let mut j = match analysis.sources[i].as_slice() {
                        [Source::Layer(j)] => *j,
                        _ => continue,
                    };
                    while matches!(net.layers[j].op, Op::Reshape { .. }) {
                        match analysis.sources[j].as_slice() {
                            [Source::Layer(p)] => j = *p,
                            _ => break,
                        }
                    }
                    if matches!(net.layers[j].op, Op::Transpose { .. }) && folded[j].is_none() {
                        folded[i] = Some((j, Fusion::Epilogue));
                    }
                }
                _ => {}
            }
        }
        folded
    }

    fn packed_input_bytes(&self, config: &LayerConfig) -> Option<u64> {
        crate::engine::packing::packed_input_bytes(config)
    }

    /// Packed weights (when the memory model knows them) and the tables tract's plan keeps for the whole run;
    /// a batch norm's four vectors (scale, shift, mean, variance) folded into a multiply and an add by one vector
    /// each (`OptBinChain(Mul+Add)`).
    fn resident_bytes(&self, config: &LayerConfig, cost: &LayerCost, packed_weight_bytes: Option<u64>) -> (u64, u64) {
        match packed_weight_bytes {
            // The memory models count every product's weights as its left operand (what they were trained
            // against); a product over at least as many rows as units keeps them as its right one.
            Some(bytes) => {
                (crate::engine::packing::right_operand_weight_bytes(config).unwrap_or(bytes), tract_plan_bytes(config))
            }
            None if matches!(config.op, Op::BatchNorm) => (cost.weight_elems / 2 * BYTES_PER_ELEMENT, 0),
            None => (cost.weight_elems * BYTES_PER_ELEMENT, 0),
        }
    }
}

/// The structure kind of a running layer: its type, and for a convolution how tract lowers it (tract's plan
/// differs by lowering: a pointwise one is a pack and a product, a lazy im2col one a pad, an offsets table and a
/// product) and whether it is grouped (one product per group).
pub fn kind_of(config: &LayerConfig) -> &'static str {
    let c = match &config.op {
        Op::Conv2d(c) => c,
        // A product with a constant weight keeps the weight's packing and a bias; one of two tensors neither.
        Op::MatMul { units: Some(_), .. } => return "matmul:weighted",
        Op::MatMul { units: None, .. } => return "matmul:product",
        // GELU is several nodes in tract's plan (the error function and the products around it), a ReLU one.
        Op::Activation(Activation::Gelu) => return "activation:gelu",
        _ => return config.layer_type().as_str(),
    };
    let grouped = c.groups > 1;
    match (conv_lowering(config), grouped) {
        (Some(ConvLowering::Pointwise), false) => "conv2d:pointwise",
        (Some(ConvLowering::Pointwise), true) => "conv2d:pointwise-grouped",
        (Some(ConvLowering::Lazy), false) => "conv2d:lazy",
        (Some(ConvLowering::Lazy), true) => "conv2d:lazy-grouped",
        (Some(ConvLowering::Im2col), false) => "conv2d:im2col",
        (Some(ConvLowering::Im2col), true) => "conv2d:im2col-grouped",
        (Some(ConvLowering::DirectSpatial), _) => "conv2d:direct",
        (Some(ConvLowering::DepthWise), _) => "conv2d:depthwise",
        (None, _) => "conv2d",
    }
}
