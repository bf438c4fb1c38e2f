//! ONNX Runtime's rules (CPU execution provider) at a graph-optimisation level, as its optimiser rewrites the
//! graphs perfmodel exports. Each is checked by a test against the optimised graph ONNX Runtime saves
//! (`optimized_model_filepath`), the layout included:
//!
//! - `basic` folds a batch norm into the linear convolution before it (`ConvBNFusion`) and a zero padding into
//!   the convolution reading it;
//! - `extended` also runs the activation a convolution or dense layer is followed by inside it (`FusedConv`,
//!   `FusedGemm`: ReLU, ReLU6 as `Clip`, leaky ReLU, sigmoid, hard sigmoid, tanh);
//! - `all` adds a residual add into the linear convolution feeding it (its sum input; the add's ReLU with it)
//!   when the add is that convolution's only reader (the first input's when both can; into a blocked one only
//!   from a blocked tensor), and the NCHWc layout on x86 (blocks of 16 channels with AVX-512, 8 with AVX2;
//!   [`OnnxRuntime::converted`] says which layers): blocked convolutions apply hard swish too, and a batch norm
//!   that is not folded runs as a blocked 1x1 depthwise convolution taking the activation after it (DenseNet's
//!   pre-activations).
//!
//! The layout costs time at its borders: a blocked layer measured alone converted its input into the blocked
//! layout and its output back (`ReorderInput`, `ReorderOutput`), which inside a blocked region of a network it
//! does not ([`EngineRules::layout_bytes_saved`]; the estimate takes them off at the rate `train` timed). A
//! second test checks these credits against the reorders in the optimised graph.
//!
//! A transformer's layers (from `extended` on): a multiply or divide by a scalar after a product of two tensors
//! becomes the product's scale (`MatMulScaleFusion`: one `FusedMatMul`), and an add of two sequences (3-D with
//! the batch) whose only reader is a layer norm over the last axis is computed by it (`SkipLayerNormFusion`: BERT's post-norm
//! residuals; a pre-norm residual, which the next residual reads too, stays an `Add`).
//!
//! From `basic` on, identical weightless layers on the same inputs run once (`CommonSubexpressionElimination`:
//! NASNet's per-branch ReLUs of a cell's input; [`EngineRules::merges_duplicates`]).
//!
//! Not followed yet: the two channel slices of ShuffleNet's split, which ONNX Runtime runs as one `Split` at
//! `extended` and above.

use super::{scaled_product, single_readers, EngineRules, Fusion, Plan, Role};
use crate::engine::GraphOptimization;
use crate::filled::filled;
use crate::layer::{Activation, LayerConfig, Op};
use crate::network::{Analysis, Groups, Network, Source};

/// ONNX Runtime at one graph-optimisation level, on a machine with NCHWc blocks of `nchwc_block` channels
/// (0: no blocked layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnnxRuntime {
    pub level: GraphOptimization,
    pub nchwc_block: usize,
}

impl OnnxRuntime {
    /// The NCHWc block ONNX Runtime's kernels use on a machine with these instruction-set features (MLAS: 8
    /// channels on every x86-64 core, 16 with AVX-512F; no blocked layout elsewhere).
    pub fn nchwc_block_of(fingerprint: &crate::device::Fingerprint) -> usize {
        let isa = fingerprint.isa_features.as_deref().unwrap_or(&[]);
        match fingerprint.arch.as_str() {
            "x86_64" if isa.iter().any(|f| f == "avx512f") => 16,
            "x86_64" => 8,
            _ => 0,
        }
    }

    /// The rules on this machine.
    pub fn on_this_machine(level: GraphOptimization) -> OnnxRuntime {
        OnnxRuntime { level, nchwc_block: Self::nchwc_block_of(crate::device::Fingerprint::of_host()) }
    }

    /// The rules for models measured with `engine` (an `engine` column, as `Executor::describe` writes it:
    /// `onnxruntime 1.32.0 (optimisation all)`) on a machine with NCHWc blocks of `nchwc_block` channels (as the
    /// manifest records it; this machine's when it records none); `None` for another engine.
    pub fn for_engine(engine: &str, nchwc_block: Option<usize>) -> Option<&'static OnnxRuntime> {
        static RULES: std::sync::OnceLock<Vec<OnnxRuntime>> = std::sync::OnceLock::new();
        let rest = engine.strip_prefix("onnxruntime ")?;
        let level = rest
            .split("(optimisation ")
            .nth(1)
            .and_then(|l| l.strip_suffix(')'))
            .and_then(|l| l.parse::<GraphOptimization>().ok())
            .unwrap_or_default();
        let block = nchwc_block.unwrap_or_else(|| Self::nchwc_block_of(crate::device::Fingerprint::of_host()));
        let rules = RULES.get_or_init(|| {
            let blocks = [0, 8, 16];
            GraphOptimization::ALL
                .iter()
                .flat_map(|&level| blocks.iter().map(move |&nchwc_block| OnnxRuntime { level, nchwc_block }))
                .collect()
        });
        rules.iter().find(|r| r.level == level && r.nchwc_block == block)
    }

    fn at_least(&self, level: GraphOptimization) -> bool {
        let rank = |l: GraphOptimization| GraphOptimization::ALL.iter().position(|&x| x == l).unwrap_or(0);
        rank(self.level) >= rank(level)
    }

    fn nchwc(&self) -> bool {
        self.at_least(GraphOptimization::All) && self.nchwc_block > 0
    }

    /// Whether ONNX Runtime runs layer `i` (a convolution) in the blocked layout ([`conv_layout`]).
    fn conv_blocked(&self, net: &Network, analysis: &Analysis, i: usize) -> bool {
        self.layer_conv_layout(net, analysis, i) != ConvLayout::Plain
    }

    /// Whether a blocked convolution reads its input in the plain layout directly ([`ConvLayout::BlockedPlainInput`]).
    fn reads_plain_input(&self, net: &Network, analysis: &Analysis, i: usize) -> bool {
        self.layer_conv_layout(net, analysis, i) == ConvLayout::BlockedPlainInput
    }

    /// [`conv_layout`] of layer `i` in `net` (plain for a layer that is no convolution).
    fn layer_conv_layout(&self, net: &Network, analysis: &Analysis, i: usize) -> ConvLayout {
        if !self.nchwc() {
            return ConvLayout::Plain;
        }
        let in_c = analysis.input_shapes(i).first().and_then(|s| s.first()).copied().unwrap_or(0);
        let out_c = analysis.output_shapes[i].first().copied().unwrap_or(0);
        match &net.layers[i].op {
            Op::Conv2d(c) => conv_layout(self.nchwc_block, in_c, out_c, c.groups),
            Op::DepthwiseConv2d(_) => conv_layout(self.nchwc_block, in_c, out_c, in_c),
            _ => ConvLayout::Plain,
        }
    }

    /// Back from input `j` of an add, through its folded batch norm or a dropout, each read by the next alone, to
    /// a convolution with no activation of its own: the convolution that can take the add as its sum input (the
    /// blocked kernel's, or the plain `FusedConv`'s), an activation after the add running inside it too.
    fn sum_taking_conv(&self, net: &Network, analysis: &Analysis, consumers_of: &[u32], mut j: usize) -> Option<usize> {
        loop {
            if consumers_of.get(j) != Some(&1) {
                return None;
            }
            match (&net.layers[j].op, analysis.sources[j].as_slice()) {
                (Op::Conv2d(c), _) if c.activation == Activation::Linear => return Some(j),
                (Op::DepthwiseConv2d(c), _) if c.activation == Activation::Linear => return Some(j),
                (Op::BatchNorm, [Source::Layer(p)]) if self.folds_batch_norm() => j = *p,
                (Op::Dropout { .. }, [Source::Layer(p)]) => j = *p,
                _ => return None,
            }
        }
    }

    /// Which layers' outputs are in ONNX Runtime's blocked layout in `net`, in order
    /// ([`EngineRules::output_blocked`] of each).
    /// Planning's answer, worked out again only when a role changed since ([`Plan::blocked_outputs`]).
    fn converted<'p>(&self, net: &Network, analysis: &Analysis, plan: &'p Plan) -> &'p [bool] {
        plan.blocked_outputs(|| {
            let roles = plan.roles();
            let mut converted = Vec::with_capacity(roles.len());
            for i in 0..roles.len().min(net.layers.len()) {
                let blocked = self.output_blocked(net, analysis, roles, &converted, i);
                converted.push(blocked);
            }
            converted
        })
    }

    /// Per layer, the two conversions it ran measured alone that it does not run in `net` (see
    /// [`EngineRules::layout_bytes_saved`]): of its input (the bytes, as it converted them alone), of its output.
    fn conversions_saved(&self, net: &Network, analysis: &Analysis, plan: &Plan) -> Vec<Conversions> {
        let n = net.layers.len();
        let mut saved = filled(Conversions::default(), n);
        if !self.nchwc() {
            return saved;
        }
        let block = self.nchwc_block;
        let in_channels = |i: usize| analysis.input_shapes(i).first().and_then(|s| s.first()).copied().unwrap_or(0);
        let converted = self.converted(net, analysis, plan);
        // The readers of what each running layer's kernel writes (its own output, or that of a layer run inside
        // it), outside that kernel.
        let kernel = |k: usize| kernel_of(plan, k);
        let mut pairs = Vec::with_capacity(analysis.sources.iter().map(|s| s.len()).sum());
        for (c, sources) in analysis.sources.iter().enumerate() {
            let own = kernel(c);
            for (at, s) in sources.iter().enumerate() {
                if let Source::Layer(w) = s {
                    let k = kernel(*w);
                    // Once per reader and kernel: an earlier input of `c` from the same kernel counted it.
                    let counted = sources[..at].iter().any(|e| matches!(e, Source::Layer(v) if kernel(*v) == k));
                    if k != own && !counted {
                        pairs.push((k, c));
                    }
                }
            }
        }
        let readers = Groups::from_pairs(n, &pairs);
        // A reader takes a blocked tensor for good when its kernel converted its own tensors measured alone (a
        // blocked convolution that reads blocked input, even if an activation of its own then runs apart, or a
        // pooling of whole blocks): what happens to its output is its own credit. A reader that passes the
        // blocked layout on without having paid for conversions alone (an add, a ReLU or swish of its own, a
        // blocked batch norm; or a layer run inside one) keeps it only when its own readers all do: otherwise
        // the conversion back happens after it, and the network's output is plain. A blocked convolution that
        // reads its input plain does not keep it.
        let pays = |k: usize| match &net.layers[k].op {
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) => {
                self.conv_blocked(net, analysis, k) && !self.reads_plain_input(net, analysis, k)
            }
            Op::MaxPool2d(_) | Op::AvgPool2d(_) | Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                in_channels(k).is_multiple_of(block)
            }
            _ => false,
        };
        let keeps_alone = |k: usize| {
            if pays(k) {
                Some(true)
            } else if !converted[k] || readers.get(k).is_empty() || self.reads_plain_input(net, analysis, k) {
                Some(false)
            } else {
                None
            }
        };
        // A tensor read as the sum input of a blocked convolution that reads its own input plain (fewer channels
        // than a block) stays blocked: the sum follows the convolution's output layout, not its input's. On an
        // AVX-512 host, NASNet-Mobile's 11-channel reduction branches add into such a convolution and ONNX
        // Runtime writes no reorder for the other branch.
        let sum_into_plain_input = |k: usize, c: usize| match plan.role(c) {
            Role::Inside { owner, via, fusion: Fusion::ResidualAdd } => {
                kernel(via) != k && self.reads_plain_input(net, analysis, owner)
            }
            _ => false,
        };
        let keeps = keeps_blocked_kernels(n, &kernel, &keeps_alone, &sum_into_plain_input, &readers);
        // Plain tensors (the network's input last) a blocked layer has converted for itself so far.
        let mut reordered = vec![false; n + 1];
        for (i, conversions) in saved.iter_mut().enumerate() {
            if !plan.runs(i) {
                continue;
            }
            // What layer i converted when measured alone: a blocked convolution its input (unless it reads it
            // plain) and its output; a max or average pooling of whole blocks both.
            let (paid_in, paid_out) = match &net.layers[i].op {
                Op::Conv2d(_) | Op::DepthwiseConv2d(_) if self.conv_blocked(net, analysis, i) => {
                    // With an activation of its own that runs apart on a plain tensor (ELU, softmax), its output is
                    // converted back in a network too; swish and GELU read it blocked.
                    let op = &net.layers[i].op;
                    let own_apart = self.own_activation_kind(op) == Some("activation")
                        && !op.activation().is_some_and(reads_blocked);
                    (!self.reads_plain_input(net, analysis, i), !own_apart)
                }
                Op::MaxPool2d(_) | Op::AvgPool2d(_) if in_channels(i).is_multiple_of(block) => (true, true),
                Op::GlobalAvgPool2d | Op::GlobalMaxPool2d if in_channels(i).is_multiple_of(block) => {
                    (true, analysis.output_shapes[i].len() == 3)
                }
                _ => continue,
            };
            // Here a blocked producer hands its input over blocked (through a zero padding folded into the
            // convolution, which reads the padding's input).
            // Measured alone with the padding its own, the convolution converted the unpadded input.
            let (mut input, mut input_elems) = (analysis.sources[i].first().copied(), analysis.costs[i].input_elems);
            while let Some(Source::Layer(j)) = input {
                let folded = matches!(plan.role(j), Role::Inside { owner, fusion: Fusion::Padding, .. } if owner == i);
                if !folded {
                    break;
                }
                (input, input_elems) = (analysis.sources[j].first().copied(), analysis.costs[j].input_elems);
            }
            (conversions.input_paid, conversions.output_paid) = (paid_in, paid_out);
            conversions.input = input;
            // A global pooling ONNX Runtime runs blocked only on a blocked input: on a plain one it runs plain,
            // with neither conversion it made alone.
            let global = matches!(net.layers[i].op, Op::GlobalAvgPool2d | Op::GlobalMaxPool2d);
            if global && matches!(input, Some(Source::Layer(j)) if !converted[j]) {
                conversions.input_bytes = input_elems * 4;
                conversions.output = paid_out;
                continue;
            }
            // A plain tensor several blocked layers read is converted once, for the first of them
            // (one `ReorderInput`, shared).
            let plain_tensor = match input {
                Some(Source::Layer(j)) if converted[j] => None,
                Some(Source::Layer(j)) => Some(kernel(j)),
                Some(Source::Input) => Some(n),
                None => None,
            };
            let converted_before = paid_in && plain_tensor.is_some_and(|t| std::mem::replace(&mut reordered[t], true));
            if paid_in && (matches!(input, Some(Source::Layer(j)) if converted[j]) || converted_before) {
                conversions.input_bytes = input_elems * 4;
            }
            // Here its output stays blocked when every reader keeps the blocked layout.
            if paid_out
                && !readers.get(i).is_empty()
                && readers.get(i).iter().all(|&c| sum_into_plain_input(i, c) || keeps[kernel(c)])
            {
                conversions.output = true;
            }
        }
        saved
    }
}

/// The layout conversions a layer ran measured alone that it does not run in a network.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Conversions {
    /// Whether it converted its input measured alone.
    input_paid: bool,
    /// The tensor it reads (through a zero padding folded into it: the padding's input).
    input: Option<Source>,
    /// Bytes of the input conversion saved (0: none, or it still runs).
    input_bytes: u64,
    /// Whether it converted its output back measured alone.
    output_paid: bool,
    /// Whether that conversion is saved: the output stays blocked for every reader.
    output: bool,
}

/// The layer whose kernel runs layer `k`: its owner's (followed while the owner runs inside another), or its own.
fn kernel_of(plan: &Plan, k: usize) -> usize {
    let mut kernel = k;
    for _ in 0..plan.roles().len() {
        match plan.owner(kernel) {
            Some(owner) if owner != kernel => kernel = owner,
            _ => break,
        }
    }
    kernel
}

/// Per kernel, whether it keeps a blocked tensor it reads: `alone(k)` when that settles it, else when every reader
/// of its output (`readers[k]`, layers) does, through their kernels. Walked depth-first with a stack of its own
/// (a chain of thousands of element-wise layers is as deep); a kernel met again on its own path keeps nothing.
/// `kept_by_reader(k, c)`: layer `c` keeps what kernel `k` writes whatever its kernel does with its other inputs.
fn keeps_blocked_kernels(
    n: usize,
    kernel: &dyn Fn(usize) -> usize,
    alone: &dyn Fn(usize) -> Option<bool>,
    kept_by_reader: &dyn Fn(usize, usize) -> bool,
    readers: &Groups,
) -> Vec<bool> {
    let mut known: Vec<Option<bool>> = filled(None, n);
    let mut on_path = filled(false, n);
    let mut stack = Vec::new();
    for root in 0..n {
        if known[root].is_some() || kernel(root) != root {
            continue;
        }
        stack.push((root, 0usize));
        on_path[root] = true;
        while let Some(&(k, next)) = stack.last() {
            let settled = if next == 0 { alone(k) } else { None };
            let answer = match settled {
                Some(answer) => Some(answer),
                None => match readers.get(k).get(next).map(|&c| (c, kernel(c))) {
                    None => Some(true),
                    Some((c, r)) => match known[r] {
                        // This reader keeps it: count the next.
                        kept if kept == Some(true) || kept_by_reader(k, c) => {
                            if let Some(top) = stack.last_mut() {
                                top.1 += 1;
                            }
                            None
                        }
                        // Known not to keep it (a kernel known to keep it was counted above).
                        Some(_) => Some(false),
                        None if on_path[r] => Some(false),
                        None => {
                            // Its answer comes back to `next`, which is still to be counted.
                            on_path[r] = true;
                            stack.push((r, 0));
                            None
                        }
                    },
                },
            };
            if let Some(answer) = answer {
                known[k] = Some(answer);
                on_path[k] = false;
                stack.pop();
            }
        }
    }
    known.into_iter().map(|k| k == Some(true)).collect()
}

/// Whether a layer reading `sources` has every input, and at least one, in the blocked layout.
fn all_inputs_blocked(sources: &[Source], blocked: &[bool]) -> bool {
    !sources.is_empty() && sources.iter().all(|s| matches!(s, Source::Layer(k) if blocked.get(*k) == Some(&true)))
}

impl EngineRules for OnnxRuntime {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn kernel_takes_epilogue(&self, producer: &Op) -> bool {
        self.at_least(GraphOptimization::Basic) && self.runs_as_product(producer)
    }

    fn runs_as_product(&self, op: &Op) -> bool {
        match op {
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_) => true,
            // A batch norm of its own may run as a blocked 1x1 depthwise convolution (`runs_as_product_in`).
            Op::BatchNorm => self.nchwc(),
            _ => false,
        }
    }

    /// A batch norm of its own runs as a blocked 1x1 depthwise convolution, which applies the activation after
    /// it, only when its input arrives blocked; on a plain one (the network's input, an ELU's output) it stays a
    /// `BatchNormalization` node and the activation a node of its own.
    fn runs_as_product_in(&self, net: &Network, analysis: &Analysis, blocked: &[bool], j: usize) -> bool {
        match &net.layers[j].op {
            Op::BatchNorm => self.nchwc() && all_inputs_blocked(&analysis.sources[j], blocked),
            op => self.runs_as_product(op),
        }
    }

    /// Blocked: convolutions ONNX Runtime runs in the layout (unless an activation of their own runs apart on a
    /// plain tensor), max and average poolings of whole blocks of channels (whatever their input), a global
    /// pooling of whole blocks (unless flattened) on a blocked input or the network's, and, when every input is
    /// blocked, a batch norm (a 1x1 depthwise convolution then), an add or
    /// multiply of equal shapes, a channel concat of whole blocks, a ReLU, sigmoid, tanh, swish or GELU; a
    /// dropout (removed) passes its input's layout on. A layer run inside another has its owner's layout.
    fn output_blocked(&self, net: &Network, analysis: &Analysis, roles: &[Role], blocked: &[bool], i: usize) -> bool {
        if !self.nchwc() {
            return false;
        }
        let block = self.nchwc_block;
        let layer = &net.layers[i];
        let inputs_blocked = all_inputs_blocked(&analysis.sources[i], blocked);
        let channels = analysis.input_shapes(i).first().and_then(|s| s.first()).copied().unwrap_or(0);
        let same_shapes = analysis.input_shapes(i).windows(2).all(|w| w[0] == w[1]);
        (match &layer.op {
            // An activation of its own that the blocked kernel does not apply runs as a node of its own: on the
            // blocked output for swish and GELU (`QuickGelu`, `Gelu`), on the plain output after a conversion
            // back for the others (ELU, softmax).
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) => {
                self.conv_blocked(net, analysis, i)
                    && (self.own_activation_kind(&layer.op) != Some("activation")
                        || layer.op.activation().is_some_and(reads_blocked))
            }
            Op::MaxPool2d(_) | Op::AvgPool2d(_) => channels.is_multiple_of(block),
            // Only on a blocked input (or the network's, which it converts), unlike the other poolings
            // (`NchwcTransformer`); a flattened output is plain again.
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                channels.is_multiple_of(block)
                    && analysis.output_shapes[i].len() == 3
                    && (inputs_blocked || analysis.sources[i].as_slice() == [Source::Input])
            }
            Op::BatchNorm | Op::Dropout { .. } => inputs_blocked,
            Op::Add | Op::Multiply => inputs_blocked && same_shapes,
            Op::Concat { axis } => {
                inputs_blocked
                    && matches!(axis, 0 | -3)
                    && analysis.input_shapes(i).iter().all(|s| s.first().is_some_and(|c| c.is_multiple_of(block)))
            }
            Op::Activation(a) => inputs_blocked && reads_blocked(*a),
            _ => false,
        }) || matches!(roles.get(i), Some(Role::Inside { owner, .. }) if *owner < i && blocked.get(*owner) == Some(&true))
    }

    /// A blocked convolution takes the add only when the add's other input is blocked too: the `NchwcTransformer`
    /// fuses an add into a convolution only when every input of the add is in the layout (Xception's middle
    /// flow, whose residual runs plain from a pooling of 728 channels, keeps its adds).
    fn takes_residual_add(&self, analysis: &Analysis, blocked: &[bool], add: usize, conv: usize, side: usize) -> bool {
        if !blocked.get(conv).copied().unwrap_or(false) {
            return true;
        }
        matches!(analysis.sources[add].get(side ^ 1), Some(Source::Layer(other)) if blocked.get(*other) == Some(&true))
    }

    fn fuses_activation(&self, producer: &Op, a: Activation) -> bool {
        if !self.at_least(GraphOptimization::Extended) {
            return a == Activation::Linear;
        }
        let fused = matches!(
            a,
            Activation::Linear
                | Activation::Relu
                | Activation::Relu6
                | Activation::LeakyRelu
                | Activation::Sigmoid
                | Activation::HardSigmoid
                | Activation::Tanh
        );
        // Hard swish only in the blocked kernels.
        fused || (a == Activation::HardSwish && self.nchwc() && blocked_kind(producer))
    }

    fn folds_batch_norm(&self) -> bool {
        self.at_least(GraphOptimization::Basic)
    }

    /// `CommonSubexpressionElimination`, from `basic` on: NASNet's cells apply a ReLU to the same tensor once
    /// per branch, and ONNX Runtime runs one.
    fn merges_duplicates(&self) -> bool {
        self.at_least(GraphOptimization::Basic)
    }

    /// No padded copy: MLAS pads while it unfolds (and the arena walk takes the kernels' scratch from the rules).
    fn known_workspace_bytes(&self, _config: &LayerConfig, _input_kept: bool) -> Option<u64> {
        None
    }

    fn arena(&self) -> Option<crate::estimate::arena::ArenaConfig> {
        Some(crate::estimate::arena::ArenaConfig::ONNXRUNTIME)
    }

    /// ONNX Runtime runs its optimised graph depth-first back from the outputs (`GraphViewer`). The layers'
    /// indices stand in for its nodes' where the optimiser kept the graph's nodes and added few: not where the
    /// NCHWc layout replaced a network's convolutions and put reorders between them (walked by layer indices,
    /// Keras NASNet-Mobile's arena came to 16 MiB of regions where ONNX Runtime's took 8).
    fn runs_in_graph_order(&self, net: &Network, analysis: &Analysis, plan: &Plan) -> bool {
        !self.converted(net, analysis, plan).contains(&true)
    }

    /// A blocked tensor has its channels padded to whole blocks. A swish is a `Sigmoid` and a `Mul`: the sigmoid
    /// writes a tensor of its own while its input lives on for the multiply (which then overwrites one of
    /// them). A convolution in the plain layout other than a 1x1 one of stride 1 unpadded unfolds its input
    /// (`im2col`, MLAS's `MlasConvPrepare`): each group's whole unfolding (input channels per group x window x
    /// output pixels) when it has several groups or images or more filters than output pixels, else slices of
    /// at most [`IM2COL_SLICE_BYTES`].
    fn arena_bytes(&self, net: &Network, analysis: &Analysis, plan: &Plan) -> Vec<(u64, u64)> {
        use crate::estimate::memory::BYTES_PER_ELEMENT;
        let converted = self.converted(net, analysis, plan);
        let block = self.nchwc_block.max(1);
        analysis
            .costs
            .iter()
            .enumerate()
            .map(|(i, cost)| {
                let shape = &analysis.output_shapes[i];
                let mut output = cost.output_elems * BYTES_PER_ELEMENT;
                if converted[i] {
                    if let Some(&c) = shape.first().filter(|c| **c > 0) {
                        output = output / c as u64 * c.next_multiple_of(block) as u64;
                    }
                }
                let mut scratch = if net.layers[i].op.activation() == Some(Activation::Swish) { output } else { 0 };
                if let Op::Conv2d(c) = &net.layers[i].op {
                    let unpadded = !matches!(c.padding, crate::layer::Padding::Explicit(p) if p != [0; 4]);
                    let plain_1x1 = c.kernel == [1, 1] && c.strides == [1, 1] && unpadded;
                    if !self.conv_blocked(net, analysis, i) && !plain_1x1 {
                        let in_c = analysis.input_shapes(i).first().and_then(|s| s.first()).copied().unwrap_or(0);
                        let pixels: usize = shape.iter().skip(1).product();
                        let per_group = ((in_c / c.groups.max(1)) * c.kernel[0] * c.kernel[1] * pixels) as u64;
                        let whole = c.groups > 1 || net.batch_size > 1 || c.filters > pixels;
                        let bytes = per_group * BYTES_PER_ELEMENT;
                        scratch += if whole { bytes } else { bytes.min(IM2COL_SLICE_BYTES) };
                    }
                }
                (output, scratch)
            })
            .collect()
    }

    fn predicts_activation_apart(&self) -> bool {
        true
    }

    /// ONNX Runtime's kernels that may write into their input when they are its last reader (`MayInplace` in
    /// its source: ReLU, sigmoid, tanh, leaky ReLU, hard sigmoid, ELU, and softmax in `float`); every other layer
    /// writes a new tensor, GELU included (its kernel reads the input after writing the output). Checked on the
    /// arena's growth: BERT-base's regions are added while the same nodes run as in a replay with these rules.
    fn computes_in_place(&self, op: &Op) -> bool {
        matches!(
            op,
            Op::Softmax { .. }
                | Op::Activation(
                    Activation::Relu
                        | Activation::Softmax
                        | Activation::Sigmoid
                        | Activation::Tanh
                        | Activation::LeakyRelu
                        | Activation::HardSigmoid
                        | Activation::Elu
                )
        )
    }

    /// The shapes ONNX Runtime's tensors have: the batch first; a blocked tensor's channels padded to whole
    /// blocks; a product with a constant weight and a bias over a sequence two-dimensional (`MatMulAddFusion`
    /// runs it as a `Gemm` between two reshapes).
    fn arena_reuse_shapes(&self, net: &Network, analysis: &Analysis, plan: &Plan) -> Option<Vec<crate::layer::Shape>> {
        let converted = self.converted(net, analysis, plan);
        let block = self.nchwc_block.max(1);
        let shapes = (0..net.layers.len())
            .map(|i| {
                let shape = &analysis.output_shapes[i];
                match &net.layers[i].op {
                    Op::MatMul { units: Some(units), use_bias: true } if shape.len() >= 2 => {
                        let rows: usize = shape[..shape.len() - 1].iter().product();
                        smallvec::smallvec![net.batch_size * rows, *units]
                    }
                    _ => {
                        let mut dims = crate::layer::Shape::with_capacity(shape.len() + 1);
                        dims.push(net.batch_size);
                        dims.extend_from_slice(shape);
                        if converted[i] && dims.len() > 1 {
                            dims[1] = dims[1].next_multiple_of(block);
                        }
                        dims
                    }
                }
            })
            .collect();
        Some(shapes)
    }

    fn fuses_padding(&self) -> bool {
        self.at_least(GraphOptimization::Basic)
    }

    fn layout_bytes_saved(&self, net: &Network, analysis: &Analysis, plan: &Plan) -> Vec<u64> {
        self.conversions_saved(net, analysis, plan)
            .iter()
            .zip(&analysis.costs)
            .map(|(c, cost)| c.input_bytes + if c.output { cost.output_elems * 4 } else { 0 })
            .collect()
    }

    fn folded_into_products(
        &self,
        net: &Network,
        analysis: &Analysis,
        consumers: &[u32],
    ) -> Vec<Option<(usize, Fusion)>> {
        let n = net.layers.len();
        let mut folded = filled(None, n);
        if !self.at_least(GraphOptimization::Extended) || !net.layers.iter().any(|l| transformer_op(&l.op)) {
            return folded;
        }
        let only_reader = single_readers(&analysis.sources, consumers);
        for (i, layer) in net.layers.iter().enumerate() {
            if let Some(product) = scaled_product(net, analysis, &only_reader, i) {
                folded[i] = Some((product, Fusion::Epilogue));
                continue;
            }
            match (&layer.op, analysis.sources[i].as_slice()) {
                (Op::Add, [a, b]) if a != b => {
                    let shapes = analysis.input_shapes(i);
                    let Some(r) = only_reader[i] else { continue };
                    let normalises_last_axis = match net.layers[r].op {
                        Op::LayerNorm { axis, .. } => {
                            // Axes count without the batch, as in net.json.
                            let rank = analysis.output_shapes[i].len() as i64;
                            axis == -1 || axis == rank - 1
                        }
                        _ => false,
                    };
                    // `SkipLayerNormFusion` takes two 3-D inputs of one shape (`[batch, tokens, features]`).
                    let sequences = analysis.output_shapes[i].len() == 2;
                    if normalises_last_axis && sequences && shapes.len() == 2 && shapes[0] == shapes[1] {
                        folded[i] = Some((r, Fusion::IntoReader));
                    }
                }
                _ => {}
            }
        }
        folded
    }

    /// The add's other input's convolution, when the one [`EngineRules::residual_adds`] named (on input `side`)
    /// cannot take it: after the `NchwcTransformer` left the add plain (a blocked convolution with a plain other
    /// input), ONNX Runtime fuses it into a plain convolution on the other side (`FusedConv` with the sum input).
    fn residual_add_fallback(
        &self,
        net: &Network,
        analysis: &Analysis,
        consumers_of: &[u32],
        add: usize,
        side: usize,
    ) -> Option<(usize, usize)> {
        if !self.at_least(GraphOptimization::All) {
            return None;
        }
        match analysis.sources[add].get(side ^ 1) {
            Some(Source::Layer(j)) => {
                self.sum_taking_conv(net, analysis, consumers_of, *j).map(|conv| (conv, side ^ 1))
            }
            _ => None,
        }
    }

    fn residual_adds(&self, net: &Network, analysis: &Analysis, consumers_of: &[u32]) -> Vec<Option<(usize, usize)>> {
        let n = net.layers.len();
        let mut into = filled(None, n);
        if !self.at_least(GraphOptimization::All) {
            return into;
        }
        let blocked_conv = |j: usize| self.sum_taking_conv(net, analysis, consumers_of, j);
        for (i, layer) in net.layers.iter().enumerate() {
            if !matches!(layer.op, Op::Add) {
                continue;
            }
            let [a, b] = analysis.sources[i].as_slice() else { continue };
            let shapes = &analysis.input_shapes(i);
            if shapes.len() != 2 || shapes[0] != shapes[1] || a == b {
                continue;
            }
            // The first input's convolution when it can take the add, else the second's (the `NchwcTransformer`
            // tries the add's inputs in order; its profile shows torchvision's ResNet-18 adding the shortcut in
            // `conv2`, its first input, and RegNetX's main branch in the projection, its first input). ONNX
            // Runtime then runs the other input's branch first.
            into[i] = [a, b].iter().enumerate().find_map(|(side, s)| match s {
                Source::Layer(j) => blocked_conv(*j).map(|conv| (conv, side)),
                Source::Input => None,
            });
        }
        into
    }
}

/// How ONNX Runtime lays out a convolution's tensors at the `all` level (its `NchwcTransformer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLayout {
    /// The plain layout: MLAS's convolution (an `im2col` and a product per group, or the product alone for a
    /// 1x1 convolution of stride 1 unpadded).
    Plain,
    /// Blocked output from a plain input (`NchwcConv` reading `NCHW`: fewer input channels than a block).
    BlockedPlainInput,
    /// Blocked input and output.
    Blocked,
}

/// How ONNX Runtime lays out a convolution of `in_c` input and `out_c` output channels in `groups` groups on a
/// machine with NCHWc blocks of `block` channels (0: no blocked layout): an ungrouped convolution is blocked when
/// its input has fewer channels than a block (read plain) or a multiple of 4; a depthwise one when its channels
/// are a multiple of 4; another grouped one when its input channels and each group's output channels fill whole
/// blocks. Output channels are padded to whole blocks.
pub fn conv_layout(block: usize, in_c: usize, out_c: usize, groups: usize) -> ConvLayout {
    if block == 0 {
        return ConvLayout::Plain;
    }
    let blocked = if groups <= 1 {
        if in_c < block {
            return ConvLayout::BlockedPlainInput;
        }
        in_c.is_multiple_of(4)
    } else if in_c == groups && out_c == groups {
        out_c.is_multiple_of(4)
    } else {
        out_c.is_multiple_of(4)
            && in_c.is_multiple_of(block)
            && out_c.is_multiple_of(groups)
            && (out_c / groups).is_multiple_of(block)
    };
    if blocked {
        ConvLayout::Blocked
    } else {
        ConvLayout::Plain
    }
}

/// Names of [`conv_engine_features`], in order.
pub const CONV_ENGINE_FEATURES: [&str; 6] = [
    "engine_layout",
    "engine_group_in",
    "engine_group_out",
    "engine_group_depth",
    "engine_channel_fill",
    "engine_unfolds",
];

/// How ONNX Runtime runs a convolution (`groups` groups, `kernel`, `strides`, any padding), as numbers a latency
/// model can split on ([`CONV_ENGINE_FEATURES`]): the layout ([`conv_layout`]: 0 plain, 1 blocked from a plain
/// input, 2 blocked), each group's input and output channels and its product's depth (input channels per group
/// x window), the share of the padded output channels a blocked layout fills (1 plain), and whether the plain
/// kernel unfolds its input (`im2col`). The hyperparameters hold all of it, but only as divisibility and ratio
/// thresholds: measured alone on one AVX-512 machine, grouped 3x3 convolutions ran at a median 96 GFLOP/s
/// blocked (groups of 16 channels or more) and 40 GFLOP/s plain (groups of 8).
pub fn conv_engine_features(
    block: usize,
    in_c: usize,
    out_c: usize,
    groups: usize,
    kernel: [usize; 2],
    strides: [usize; 2],
    padded: bool,
) -> [f64; 6] {
    let groups = groups.max(1);
    let layout = conv_layout(block, in_c, out_c, groups);
    let code = match layout {
        ConvLayout::Plain => 0.0,
        ConvLayout::BlockedPlainInput => 1.0,
        ConvLayout::Blocked => 2.0,
    };
    let fill = match layout {
        ConvLayout::Plain => 1.0,
        _ if out_c == 0 => 0.0,
        _ => out_c as f64 / out_c.next_multiple_of(block) as f64,
    };
    let unfolds = layout == ConvLayout::Plain && (kernel != [1, 1] || strides != [1, 1] || padded);
    let (group_in, group_out) = (in_c / groups, out_c / groups);
    [
        code,
        group_in as f64,
        group_out as f64,
        (group_in * kernel[0] * kernel[1]) as f64,
        fill,
        f64::from(u8::from(unfolds)),
    ]
}

/// The most MLAS unfolds of a plain convolution's input at a time when it need not unfold it whole.
const IM2COL_SLICE_BYTES: u64 = 64 << 10;

/// A layer only transformers have: the transformer rules look no further in a network without one.
fn transformer_op(op: &Op) -> bool {
    matches!(op, Op::MatMul { .. } | Op::LayerNorm { .. })
}

/// Activations ONNX Runtime runs on a blocked tensor as it is, keeping the layout: ReLU, sigmoid and tanh, and
/// swish and GELU as the `QuickGelu` and `Gelu` its optimiser fuses them into (after a blocked convolution, no
/// conversion back comes between; an ELU or a softmax gets one).
fn reads_blocked(a: Activation) -> bool {
    matches!(a, Activation::Relu | Activation::Sigmoid | Activation::Tanh | Activation::Swish | Activation::Gelu)
}

fn blocked_kind(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::BatchNorm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::onnxruntime::optimized_nodes_per_layer;
    use crate::engine::rules::Role;
    use crate::engine::OrtExecutor;

    /// The plan of `rules` against the graph ONNX Runtime optimises at the same level: a layer runs in the plan
    /// exactly when ONNX Runtime keeps a node of its own for it (views left out: ONNX Runtime keeps a Flatten).
    /// [`plan_matches_onnxruntime`] at every optimisation level.
    fn plan_mismatches_at_every_level(net: &Network) -> Vec<String> {
        GraphOptimization::ALL.into_iter().flat_map(|level| plan_matches_onnxruntime(net, level)).collect()
    }

    fn plan_matches_onnxruntime(net: &Network, level: GraphOptimization) -> Vec<String> {
        let executor = OrtExecutor::new(1, level).unwrap_or_else(|e| panic!("these tests need ONNX Runtime: {e}"));
        let nodes = optimized_nodes_per_layer(&executor, net).unwrap();
        let rules = OnnxRuntime::on_this_machine(level);
        let analysis = net.analyze().unwrap();
        let plan = rules.plan(net, &analysis);
        let converted = rules.converted(net, &analysis, &plan);
        let mut wrong = Vec::new();
        // Of a layer and its duplicates ONNX Runtime keeps one node, not always the first's: one of them must have
        // nodes, in the first's layout.
        let duplicate_of = |i: usize| match plan.role(i) {
            Role::Inside { owner, fusion: Fusion::Duplicate, .. } => Some(owner),
            _ => None,
        };
        let mut nodes = nodes;
        for i in 0..net.layers.len() {
            if let Some(first) = duplicate_of(i) {
                if nodes[first].is_empty() && !nodes[i].is_empty() {
                    nodes.swap(first, i);
                } else if !nodes[i].is_empty() {
                    wrong.push(format!(
                        "{} '{}' ({level:?}): a duplicate with nodes {:?}",
                        net.name, net.layers[i].name, nodes[i]
                    ));
                }
            }
        }
        for (i, layer) in net.layers.iter().enumerate() {
            if matches!(plan.role(i), Role::Free) || duplicate_of(i).is_some() {
                continue;
            }
            // The layout too: a running layer's output is blocked exactly when ONNX Runtime's last node for it
            // writes a blocked tensor.
            let blocked = nodes[i].last().is_some_and(|op| op.starts_with("nchwc."));
            if plan.runs(i) && converted[i] != blocked {
                wrong.push(format!(
                    "{} '{}' ({level:?}): blocked layout {}, ONNX Runtime nodes {:?}",
                    net.name, layer.name, converted[i], nodes[i]
                ));
            }
            let runs = plan.runs(i);
            let has_nodes = !nodes[i].is_empty();
            if runs != has_nodes {
                wrong.push(format!(
                    "{} '{}' ({:?}): plan {:?}, ONNX Runtime nodes {:?}",
                    net.name,
                    layer.name,
                    level,
                    plan.role(i),
                    nodes[i]
                ));
            }
        }
        wrong
    }

    /// The convolutional networks whose plan, layout and layout credits are checked against ONNX Runtime's
    /// optimised graph: the zoo's, torchvision's and Keras's as the zoo writes them, and the holdout's.
    const CNNS_CHECKED: [&str; 19] = [
        "mobilenetv2.json",
        "torchvision/resnet18.json",
        "torchvision/mobilenet_v3_small.json",
        "torchvision/regnet_x_400mf.json",
        "torchvision/efficientnet_b0.json",
        "torchvision/densenet121.json",
        "inceptionv3.json",
        "holdout/shufflenet_like.json",
        "holdout/yolo_tiny_backbone.json",
        "torchvision/googlenet.json",
        "torchvision/mnasnet1_0.json",
        "torchvision/squeezenet1_0.json",
        "torchvision/regnet_y_400mf.json",
        "xception.json",
        "nasnetmobile.json",
        "efficientnetb0.json",
        "densenet121.json",
        "resnet50v2.json",
        "mobilenetv3small.json",
    ];

    fn zoo(name: &str) -> Network {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("zoo").join(name);
        Network::load(&path).unwrap()
    }

    #[test]
    fn the_arena_gets_blocked_tensors_padded_a_swish_s_sigmoid_and_a_plain_convolution_s_unfolding() {
        let net = Network::from_json_str(
            r#"{"name": "arena", "input_shape": [24, 16, 16], "layers": [
              {"name": "blocked", "type": "conv2d", "filters": 24, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "swish", "type": "activation", "function": "swish"},
              {"name": "grouped", "type": "conv2d", "filters": 24, "kernel": [3, 3], "groups": 3, "padding": "same"},
              {"name": "pointwise", "type": "conv2d", "filters": 24, "kernel": [1, 1], "groups": 3}]}"#,
            "arena.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let plan = rules.plan(&net, &analysis);
        let bytes = rules.arena_bytes(&net, &analysis, &plan);
        let plain = 24 * 16 * 16 * 4;
        // Blocked: 24 channels padded to 32.
        assert_eq!(bytes[0], (32 * 16 * 16 * 4, 0));
        // The swish runs on the blocked tensor as it is (`QuickGelu`): padded too, its sigmoid's tensor beside.
        assert_eq!(bytes[1], (32 * 16 * 16 * 4, 32 * 16 * 16 * 4));
        // Groups of 8 channels are not blocked: each group's input unfolded, 8 channels x 9 x 256 pixels.
        assert_eq!(bytes[2], (plain, 8 * 9 * 256 * 4));
        // An unpadded 1x1 convolution of stride 1 reads its input as it is.
        assert_eq!(bytes[3], (plain, 0));
        // tract has no arena.
        assert!(crate::engine::rules::Tract.arena().is_none());
        assert!(rules.arena().is_some());
    }

    #[test]
    fn layout_conversions_are_saved_only_inside_blocked_regions() {
        let net = Network::from_json_str(
            r#"{"name": "chain", "input_shape": [3, 32, 32], "layers": [
              {"name": "first", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "middle", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "last", "type": "conv2d", "filters": 32, "kernel": [1, 1], "activation": "swish"},
              {"name": "pool", "type": "global_avg_pool2d"},
              {"name": "fc", "type": "dense", "units": 10}]}"#,
            "chain.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let plan = rules.plan(&net, &analysis);
        let all = rules.layout_bytes_saved(&net, &analysis, &plan);
        let saved = |i: usize| all[i];
        let tensor = 32 * 32 * 32 * 4;
        // Reads the 3-channel image directly; its output stays blocked for `middle`.
        assert_eq!(saved(0), tensor);
        // Blocked in and out.
        assert_eq!(saved(1), 2 * tensor);
        // Its swish runs apart, on the blocked output (`QuickGelu`), which the pooling reads blocked too.
        assert_eq!(saved(2), 2 * tensor);
        // Nothing is saved below `all`, or without a blocked layout.
        let extended = OnnxRuntime { level: GraphOptimization::Extended, nchwc_block: 16 };
        assert_eq!(extended.layout_bytes_saved(&net, &analysis, &extended.plan(&net, &analysis))[1], 0);
        let plain = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 0 };
        assert_eq!(plain.layout_bytes_saved(&net, &analysis, &plain.plan(&net, &analysis))[1], 0);

        // A zero padding folded into the convolution after it: the convolution reads the blocked tensor before
        // the padding, as it converted it (unpadded) measured alone.
        let net = Network::from_json_str(
            r#"{"name": "padded", "input_shape": [32, 32, 32], "layers": [
              {"name": "first", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "pad", "type": "zero_padding2d", "padding": [1, 1]},
              {"name": "down", "type": "conv2d", "filters": 32, "kernel": [3, 3], "strides": [2, 2], "activation": "relu"},
              {"name": "next", "type": "conv2d", "filters": 32, "kernel": [1, 1], "activation": "relu"},
              {"name": "pool", "type": "global_avg_pool2d"},
              {"name": "fc", "type": "dense", "units": 10}]}"#,
            "padded.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let plan = rules.plan(&net, &analysis);
        assert!(matches!(plan.role(1), Role::Inside { owner: 2, fusion: Fusion::Padding, .. }), "{:?}", plan.roles());
        let saved = rules.layout_bytes_saved(&net, &analysis, &plan);
        assert_eq!(saved[2], tensor + 32 * 16 * 16 * 4, "the unpadded input and the output");
    }

    /// The engine features of a convolution alone: their layout is the one ONNX Runtime picks for it here (its
    /// optimised graph), and RegNet's groups of 8 and 16 channels differ in it.
    #[test]
    fn conv_engine_features_follow_the_layout_onnxruntime_picks() {
        let executor = OrtExecutor::new(1, GraphOptimization::All)
            .unwrap_or_else(|e| panic!("these tests need ONNX Runtime: {e}"));
        let block = OnnxRuntime::on_this_machine(GraphOptimization::All).nchwc_block;
        // (input channels, filters, groups, kernel, stride, padding)
        let cases = [
            (3, 32, 1, 3, 2, "same"),
            (64, 64, 1, 3, 1, "same"),
            (30, 64, 1, 1, 1, "valid"),
            (64, 64, 8, 3, 1, "same"),
            (64, 64, 4, 3, 2, "same"),
            (128, 128, 16, 3, 1, "same"),
            (48, 48, 3, 1, 1, "valid"),
            (96, 96, 6, 3, 1, "same"),
        ];
        let mut wrong = Vec::new();
        for (in_c, filters, groups, k, stride, padding) in cases {
            let net = Network::from_json_str(
                &format!(
                    r#"{{"name": "one", "input_shape": [{in_c}, 14, 14], "layers": [
                      {{"name": "conv", "type": "conv2d", "filters": {filters}, "kernel": [{k}, {k}], "strides": [{stride}, {stride}], "groups": {groups}, "padding": "{padding}"}}]}}"#
                ),
                "one.json",
            )
            .unwrap();
            let nodes = optimized_nodes_per_layer(&executor, &net).unwrap();
            let picked = nodes[0].iter().any(|op| op.starts_with("nchwc."));
            let features =
                conv_engine_features(block, in_c, filters, groups, [k, k], [stride, stride], padding == "same");
            if (features[0] > 0.0) != picked {
                wrong.push(format!(
                    "{in_c}->{filters} in {groups} groups {k}x{k}/{stride}: {features:?}, ONNX Runtime {:?}",
                    nodes[0]
                ));
            }
        }
        // Depthwise convolutions (ShuffleNet v2's 58 channels plain, its 116 blocked), through the features a
        // depthwise latency model reads.
        let names = crate::layer::LayerType::DepthwiseConv2d.feature_names();
        let shape = crate::engine::packing::PackedShape::for_onnxruntime(
            crate::layer::LayerType::DepthwiseConv2d,
            &names,
            block,
        )
        .unwrap();
        for (channels, stride) in [(58, 1), (58, 2), (116, 1), (24, 2), (30, 1)] {
            let net = Network::from_json_str(
                &format!(
                    r#"{{"name": "one", "input_shape": [{channels}, 14, 14], "layers": [
                      {{"name": "dw", "type": "depthwise_conv2d", "kernel": [3, 3], "strides": [{stride}, {stride}], "padding": "same"}}]}}"#
                ),
                "one.json",
            )
            .unwrap();
            let nodes = optimized_nodes_per_layer(&executor, &net).unwrap();
            let picked = nodes[0].iter().any(|op| op.starts_with("nchwc."));
            let x = net.analyze().unwrap().config(0).features().unwrap();
            let features = shape.engine_features(&x).unwrap();
            if (features[0] > 0.0) != picked {
                wrong.push(format!("depthwise {channels}/{stride}: {features:?}, ONNX Runtime {:?}", nodes[0]));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // RegNetX-400MF's groups of 16 channels run blocked, groups of 8 plain, unfolded.
        let sixteen = conv_engine_features(16, 64, 64, 4, [3, 3], [1, 1], true);
        assert_eq!(sixteen, [2.0, 16.0, 16.0, 144.0, 1.0, 0.0]);
        let eight = conv_engine_features(16, 64, 64, 8, [3, 3], [1, 1], true);
        assert_eq!(eight, [0.0, 8.0, 8.0, 72.0, 1.0, 1.0]);
        // A blocked output of 24 channels fills 24 of 32; no blocked layout without a block.
        assert_eq!(conv_engine_features(16, 32, 24, 1, [1, 1], [1, 1], false)[4], 0.75);
        assert_eq!(conv_engine_features(0, 64, 64, 1, [1, 1], [1, 1], false), [0.0, 64.0, 64.0, 64.0, 1.0, 0.0]);
    }

    #[test]
    fn rules_are_chosen_by_the_engine_that_measured_the_models() {
        let rules = OnnxRuntime::for_engine("onnxruntime 1.32.0 (optimisation extended)", Some(8)).unwrap();
        assert_eq!((rules.level, rules.nchwc_block), (GraphOptimization::Extended, 8));
        assert_eq!(OnnxRuntime::for_engine("onnxruntime 1.20.1", Some(16)).unwrap().level, GraphOptimization::All);
        assert!(OnnxRuntime::for_engine("tract 0.23.9", Some(16)).is_none());
        // The block is the device's, not the estimating machine's.
        let mut fingerprint = crate::device::Fingerprint::of_host().clone();
        fingerprint.arch = "x86_64".into();
        fingerprint.isa_features = Some(vec!["avx2".into(), "fma".into()]);
        assert_eq!(OnnxRuntime::nchwc_block_of(&fingerprint), 8);
        fingerprint.isa_features = Some(vec![]);
        assert_eq!(OnnxRuntime::nchwc_block_of(&fingerprint), 8, "MLAS blocks by 8 on every x86-64 core");
        fingerprint.arch = "aarch64".into();
        assert_eq!(OnnxRuntime::nchwc_block_of(&fingerprint), 0);
    }

    /// A batch norm of its own runs as a blocked 1x1 depthwise convolution, taking the activation after it, only
    /// when its input is blocked; on a plain input (the network's, an ELU's after a blocked convolution) it stays a
    /// `BatchNormalization` node with the activation a node of its own. A swish after a blocked convolution keeps
    /// the blocked layout (`QuickGelu`), so the batch norm after it runs blocked.
    #[test]
    fn a_batch_norm_of_its_own_runs_blocked_only_on_a_blocked_input() {
        let net = Network::from_json_str(
            r#"{"name": "norms", "input_shape": [32, 16, 16], "layers": [
              {"name": "bn_input", "type": "batch_norm"},
              {"name": "relu_input", "type": "activation", "function": "relu"},
              {"name": "conv", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "bn_blocked", "type": "batch_norm"},
              {"name": "relu_blocked", "type": "activation", "function": "relu"},
              {"name": "conv_swish", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "swish"},
              {"name": "bn_after_swish", "type": "batch_norm"},
              {"name": "relu_after_swish", "type": "activation", "function": "relu"},
              {"name": "conv_elu", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "elu"},
              {"name": "bn_after_elu", "type": "batch_norm"},
              {"name": "relu_after_elu", "type": "activation", "function": "relu"},
              {"name": "head", "type": "conv2d", "filters": 16, "kernel": [1, 1]}]}"#,
            "norms.json",
        )
        .unwrap();
        let wrong = plan_mismatches_at_every_level(&net);
        assert!(wrong.is_empty(), "{} layers differ:\n{}", wrong.len(), wrong.join("\n"));
    }

    /// The layout conversions the rules credit against the reorders in ONNX Runtime's optimised graph. Inputs:
    /// of the layers that converted the same tensor measured alone, as many are not credited as `ReorderInput`s
    /// feed them in the network (one, shared, converts a plain tensor for all its blocked readers). Outputs: a
    /// layer that converted its output back alone is credited exactly when no `ReorderOutput` reads it, nor the
    /// output of a layer passing the blocked layout on from it (an add, a ReLU or swish of its own: the
    /// conversion back then happens after that layer).
    fn conversions_match_onnxruntime(net: &Network) -> Vec<String> {
        let level = GraphOptimization::All;
        let executor = OrtExecutor::new(1, level).unwrap_or_else(|e| panic!("these tests need ONNX Runtime: {e}"));
        let mut reorders = crate::engine::onnxruntime::reorders_per_layer(&executor, net).unwrap();
        let rules = OnnxRuntime::on_this_machine(level);
        let analysis = net.analyze().unwrap();
        let plan = rules.plan(net, &analysis);
        let converted = rules.converted(net, &analysis, &plan);
        let conversions = rules.conversions_saved(net, &analysis, &plan);
        // ONNX Runtime keeps one of a layer and its duplicates, not always the first: their reorders are the first's.
        for i in 0..net.layers.len() {
            if let Role::Inside { owner, fusion: Fusion::Duplicate, .. } = plan.role(i) {
                let (input, output) = std::mem::take(&mut reorders[i]);
                reorders[owner].0 |= input;
                reorders[owner].1 |= output;
            }
        }
        let mut wrong = Vec::new();
        let mut by_tensor: std::collections::BTreeMap<String, (usize, usize, Vec<&str>)> = Default::default();
        for (i, c) in conversions.iter().enumerate() {
            if c.input_paid {
                // One tensor, whichever of a layer and its duplicates (or the layers inside a kernel) names it.
                let tensor = match c.input {
                    Some(Source::Layer(j)) => Some(Source::Layer(kernel_of(&plan, j))),
                    other => other,
                };
                let entry = by_tensor.entry(format!("{tensor:?}")).or_default();
                entry.0 += usize::from(c.input_bytes == 0);
                entry.1 += usize::from(reorders[i].0);
                entry.2.push(&net.layers[i].name);
            }
        }
        for (tensor, (uncredited, reordered, readers)) in by_tensor {
            if uncredited != reordered {
                wrong.push(format!(
                    "{} {tensor}: {uncredited} of {readers:?} not credited their input conversion, {reordered} ReorderInput",
                    net.name
                ));
            }
        }
        let n = net.layers.len();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (r, sources) in analysis.sources.iter().enumerate() {
            for s in sources {
                if let Source::Layer(w) = s {
                    readers[*w].push(r);
                }
            }
        }
        // Whether the blocked tensor layer `i` writes is converted back at it or after a layer passing it on: one
        // run in the same kernel, or one running as a kernel of its own that did not convert its input. A reader
        // run inside another kernel (an add another convolution computes) consumes the tensor there: what that
        // kernel writes is that convolution's.
        let mut reordered_after = filled(false, n);
        for i in (0..n).rev() {
            reordered_after[i] = reorders[i].1
                || readers[i].iter().any(|&r| {
                    let kernel = kernel_of(&plan, r);
                    let same_kernel = kernel == kernel_of(&plan, i);
                    let passes_on = kernel == r && converted[r] && !conversions[r].input_paid;
                    (same_kernel || passes_on) && reordered_after[r]
                });
        }
        for (i, c) in conversions.iter().enumerate() {
            if c.output_paid && c.output == reordered_after[i] {
                wrong.push(format!(
                    "{} '{}': output conversion credited {}, ReorderOutput at it or after {}",
                    net.name, net.layers[i].name, c.output, reordered_after[i]
                ));
            }
        }
        wrong
    }

    #[test]
    fn an_add_a_blocked_convolution_cannot_take_goes_into_the_plain_one_on_the_other_side() {
        // `a` is blocked, `b` (groups of 4 channels) plain: the first side cannot take the add (its other input is
        // plain), so `b` does, with the ReLU. `c` plain and first: it takes the second add itself.
        let net = Network::from_json_str(
            r#"{"name": "sides", "input_shape": [32, 16, 16], "layers": [
              {"name": "a", "type": "conv2d", "filters": 32, "kernel": [1, 1], "inputs": ["input"]},
              {"name": "b", "type": "conv2d", "filters": 32, "kernel": [3, 3], "groups": 8, "padding": "same", "inputs": ["input"]},
              {"name": "add", "type": "add", "inputs": ["a", "b"]},
              {"name": "relu", "type": "activation", "function": "relu"},
              {"name": "c", "type": "conv2d", "filters": 32, "kernel": [3, 3], "groups": 8, "padding": "same", "inputs": ["input"]},
              {"name": "d", "type": "conv2d", "filters": 32, "kernel": [1, 1], "inputs": ["input"]},
              {"name": "add2", "type": "add", "inputs": ["c", "d"]},
              {"name": "cat", "type": "concat", "axis": 0, "inputs": ["relu", "add2"]}]}"#,
            "sides.json",
        )
        .unwrap();
        let wrong = plan_mismatches_at_every_level(&net);
        assert!(wrong.is_empty(), "{} layers differ:\n{}", wrong.len(), wrong.join("\n"));
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let analysis = net.analyze().unwrap();
        let plan = rules.plan(&net, &analysis);
        assert_eq!(plan.role(2), Role::Inside { owner: 1, via: 1, fusion: Fusion::ResidualAdd });
        assert_eq!(plan.kernel(1).and_then(|k| k.fused_add), Some(2));
    }

    #[test]
    fn a_long_run_of_layers_passing_the_layout_on_is_walked_without_recursion() {
        // A blocked convolution, then 50,000 GELUs, each a node of its own passing the blocked layout on, then a
        // pooling keeping it: the convolution's output conversion is saved, found through the whole run.
        let mut layers = vec![
            r#"{"name": "conv", "type": "conv2d", "filters": 16, "kernel": [3, 3], "padding": "same"}"#.to_string(),
        ];
        layers
            .extend((0..50_000).map(|k| format!(r#"{{"name": "gelu{k}", "type": "activation", "function": "gelu"}}"#)));
        layers.push(r#"{"name": "pool", "type": "max_pool2d", "pool_size": [2, 2], "strides": [2, 2]}"#.to_string());
        let json = format!(r#"{{"name": "run", "input_shape": [16, 8, 8], "layers": [{}]}}"#, layers.join(","));
        let net = Network::from_json_str(&json, "run.json").unwrap();
        let analysis = net.analyze().unwrap();
        let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
        let plan = rules.plan(&net, &analysis);
        let conversions = rules.conversions_saved(&net, &analysis, &plan);
        assert!((1..=50_000).all(|i| plan.runs(i)), "every GELU runs as a node of its own");
        assert!(conversions[0].output_paid && conversions[0].output);
    }

    #[test]
    fn layout_credits_follow_the_reorders_of_the_optimised_graph() {
        let narrow = Network::from_json_str(
            r#"{"name": "narrow", "input_shape": [16, 16, 16], "layers": [
              {"name": "wide", "type": "conv2d", "filters": 16, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "project", "type": "conv2d", "filters": 4, "kernel": [1, 1]},
              {"name": "expand", "type": "conv2d", "filters": 32, "kernel": [3, 3], "padding": "same", "activation": "relu"},
              {"name": "gelu", "type": "activation", "function": "gelu"},
              {"name": "pool", "type": "max_pool2d", "pool_size": [2, 2], "strides": [2, 2]}]}"#,
            "narrow.json",
        )
        .unwrap();
        let mut wrong = conversions_match_onnxruntime(&narrow);
        // And ShuffleNet v2, whose split the plan does not follow yet (one `Split` for two slices), but whose
        // conversions it does.
        for name in CNNS_CHECKED.iter().chain(&["torchvision/shufflenet_v2_x1_0.json"]) {
            wrong.extend(conversions_match_onnxruntime(&zoo(name)));
        }
        assert!(wrong.is_empty(), "{} conversions differ:\n{}", wrong.len(), wrong.join("\n"));
    }

    #[test]
    fn the_plan_follows_the_optimised_graph_at_every_level() {
        // And pre-norm (ViT) and post-norm (BERT) encoder blocks: the scores' scale, the residuals.
        let transformers = ["transformers/vit_ti16_encoder.json", "transformers/bert_small_encoder_s64.json"];
        let nets = CNNS_CHECKED.iter().chain(&transformers);
        let wrong: Vec<String> = nets.flat_map(|name| plan_mismatches_at_every_level(&zoo(name))).collect();
        assert!(wrong.is_empty(), "{} layers differ:\n{}", wrong.len(), wrong.join("\n"));
    }
}
