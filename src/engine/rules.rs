//! What an engine does with a network before any layer is predicted: which layers are views, which run inside
//! another layer's kernel, which run as kernels of their own, and what each keeps resident.
//!
//! Why a seam: single-layer models are trained on one engine, and the whole-network figure is only right when the
//! estimate follows the same engine's graph rewrites. tract folds a batch norm into the convolution before it,
//! computes a residual add inside the matrix product feeding it and never builds a concat that only 1×1
//! convolutions read; another engine fuses other patterns. Grouping layers into the engine's kernels first, as
//! nn-Meter's kernel detector does, keeps those rules out of the predictors and out of the sums: an engine's
//! rules build a [`Plan`], and the estimator predicts and sums over the plan. A new engine implements
//! [`EngineRules`]; [`Generic`] is what the estimate assumes when the models describe no engine in particular.

mod onnxruntime;
mod tract;

pub use onnxruntime::{
    conv_engine_features, conv_layout, ConvLayout, OnnxRuntime, CONV_ENGINE_FEATURES as ORT_CONV_ENGINE_FEATURES,
};
pub use tract::{kind_of, Tract};

use crate::filled::filled;
use crate::layer::{Activation, ElementwiseFn, LayerConfig, LayerCost, LayerType, Op};
use crate::network::{Analysis, Network, Source, Sources};

/// The structure kind of an activation or add that the engine fuses into the product before it (a fused op of
/// that product: a few KiB of spec and constants).
pub const FUSED: &str = "fused";

/// The structure kind of a batch norm folded into the convolution before it (its scale goes into the weights,
/// its shift into the bias).
pub const FUSED_BATCH_NORM: &str = "fused-batch-norm";

/// The structure kind of a batch norm or max/min-type activation that follows an element-wise layer only it
/// reads: tract makes the run one node, so the follower adds little.
pub const CHAINED: &str = "elementwise-chained";

/// Why a layer does not run as a kernel of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// A zero padding the convolution reading it takes into its own padding: the padded tensor is never made.
    Padding,
    /// A concat the engine never builds: its readers (1×1 convolutions) compute one part at a time.
    UnbuiltConcat,
    /// An activation or batch norm applied by the kernel that produces its input (or folded into its weights).
    Epilogue,
    /// A residual add computed inside the matrix product of a convolution feeding it.
    ResidualAdd,
    /// A transpose the product reading it (directly or through a reshape) packs from the strided tensor: no
    /// tensor and no node of its own.
    Operand,
    /// An add its only reader computes as it reads (ONNX Runtime's `SkipLayerNormalization` adds the residual
    /// while it normalises): its time goes to the reader, its inputs live until the reader runs.
    IntoReader,
    /// The same operation on the same inputs as the layer `owner` before it, which the engine runs once for both
    /// (ONNX Runtime's common-subexpression elimination): its output is the owner's.
    Duplicate,
}

/// What the engine does with one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A view or an inference no-op (flatten, reshape, dropout): no work, no allocation.
    Free,
    /// Computed by the kernel of layer `owner`: costs nothing of its own. `via` is the input it was reached
    /// through: the owner itself, a layer that runs inside the owner too, or for a residual add the input on
    /// the owner's side (which may run: a ReLU after a dropout).
    Inside { owner: usize, via: usize, fusion: Fusion },
    /// A kernel of its own.
    Runs(Kernel),
}

/// A layer that runs, and what its kernel takes on besides the layer itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kernel {
    /// A residual add this layer's product computes as it stores its output ([`Fusion::ResidualAdd`]).
    pub fused_add: Option<usize>,
    /// The concat this layer reads part by part, one product per part: a concat the engine never builds
    /// ([`Fusion::UnbuiltConcat`]), or one it builds for other readers and this layer reads in slices.
    pub concat_by_part: Option<usize>,
}

/// A network as an engine runs it: one [`Role`] per layer, in the network's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    roles: Vec<Role>,
    /// How many layers read each layer's output.
    consumers: Vec<u32>,
    /// Which layers write their output in the engine's blocked layout: as planning worked it out, layer by
    /// layer (each layer's answer reads only its own role and the layers before), and worked out again after
    /// [`Plan::run_add_alone`] changes a role. Several passes ask, and working it out walks the whole plan.
    blocked: BlockedOutputs,
}

/// [`Plan`]'s remembered blocked outputs: a cache, so not part of what makes two plans equal.
#[derive(Debug, Clone, Default)]
struct BlockedOutputs(std::cell::OnceCell<Vec<bool>>);

impl PartialEq for BlockedOutputs {
    fn eq(&self, _: &BlockedOutputs) -> bool {
        true
    }
}

impl Plan {
    pub fn roles(&self) -> &[Role] {
        &self.roles
    }

    pub fn role(&self, i: usize) -> Role {
        self.roles[i]
    }

    /// Whether layer `i` runs as a kernel of its own.
    pub fn runs(&self, i: usize) -> bool {
        matches!(self.roles[i], Role::Runs(_))
    }

    /// The layer whose kernel computes layer `i`, if any.
    pub fn owner(&self, i: usize) -> Option<usize> {
        match self.roles[i] {
            Role::Inside { owner, .. } => Some(owner),
            _ => None,
        }
    }

    /// The kernel of layer `i`, when it runs.
    pub fn kernel(&self, i: usize) -> Option<Kernel> {
        match self.roles[i] {
            Role::Runs(k) => Some(k),
            _ => None,
        }
    }

    /// How many layers read layer `i`'s output.
    pub fn consumers(&self, i: usize) -> u32 {
        self.consumers[i]
    }

    /// Which layers write their output in the engine's blocked layout: planning's answer, or `work_out`'s for
    /// these roles once they have changed since. The answer belongs to the engine whose rules made the plan, for
    /// the network and analysis it was made of: only those rules ask.
    pub(crate) fn blocked_outputs(&self, work_out: impl FnOnce() -> Vec<bool>) -> &[bool] {
        self.blocked.0.get_or_init(work_out)
    }

    /// The residual add `add` runs as a layer of its own after all (its convolution has no prediction to carry
    /// it, or nothing times the add), and so does every epilogue that ran inside its convolution only through
    /// the add (its ReLU, and what follows that).
    pub fn run_add_alone(&mut self, add: usize) {
        let Role::Inside { owner, fusion: Fusion::ResidualAdd, .. } = self.roles[add] else { return };
        self.blocked = BlockedOutputs::default();
        if let Role::Runs(kernel) = &mut self.roles[owner] {
            kernel.fused_add = None;
        }
        self.roles[add] = Role::Runs(Kernel::default());
        for k in add + 1..self.roles.len() {
            if let Role::Inside { owner, via, fusion: Fusion::Epilogue } = self.roles[k] {
                if via != owner && self.runs(via) {
                    self.roles[k] = Role::Runs(Kernel::default());
                }
            }
        }
    }
}

/// The rules of one engine. The defaults are what the estimate assumes of any engine; [`Tract`] adds its own.
pub trait EngineRules: Send + Sync + std::fmt::Debug {
    /// The engine these rules describe (`tract`, `generic`).
    fn name(&self) -> &'static str;

    /// Whether a layer's activation or batch norm can be applied by the kernel of `producer` (the layer that
    /// produces its input). Any convolution or dense layer by default.
    fn kernel_takes_epilogue(&self, producer: &Op) -> bool {
        matches!(producer, Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_))
    }

    /// Whether the kernel of `producer` (one that takes epilogues) applies activation `a` itself. tract's list
    /// by default ([`fuses_into_kernel`]).
    fn fuses_activation(&self, _producer: &Op, a: Activation) -> bool {
        fuses_into_kernel(a)
    }

    /// Whether `op`, when it runs, is a kernel that can apply the activation after it (see
    /// [`EngineRules::kernel_takes_epilogue`]): convolutions and dense layers by default.
    fn runs_as_product(&self, op: &Op) -> bool {
        matches!(op, Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::Dense(_))
    }

    /// Whether running layer `j` of `net` is a kernel that can apply the activation after it, given which layers
    /// planned before the one asking have their output in the engine's blocked layout
    /// ([`EngineRules::output_blocked`]): [`EngineRules::runs_as_product`] of its op by default. ONNX Runtime's
    /// batch norm of its own is one only when its input arrives blocked.
    fn runs_as_product_in(&self, net: &Network, _analysis: &Analysis, _blocked: &[bool], j: usize) -> bool {
        self.runs_as_product(&net.layers[j].op)
    }

    /// Whether layer `i`'s output is in a blocked memory layout of the engine's (ONNX Runtime's NCHWc), given the
    /// roles of the layers up to `i` and the layouts of those before it: the plan answers it once per layer, in
    /// order. Plain by default.
    fn output_blocked(
        &self,
        _net: &Network,
        _analysis: &Analysis,
        _roles: &[Role],
        _blocked: &[bool],
        _i: usize,
    ) -> bool {
        false
    }

    /// Whether the engine runs a weightless layer (an activation, a pooling, an add, a concat...) once when an
    /// earlier layer does the same on the same inputs ([`Fusion::Duplicate`]). No by default.
    fn merges_duplicates(&self) -> bool {
        false
    }

    /// Whether a batch norm after a linear convolution is folded into its weights.
    fn folds_batch_norm(&self) -> bool {
        true
    }

    /// For every layer, the bytes of tensors that it, running and measured alone, converted between memory
    /// layouts around itself and does not convert inside `net` (ONNX Runtime's NCHWc reorders inside a blocked
    /// region). None by default.
    fn layout_bytes_saved(&self, net: &Network, _analysis: &Analysis, _plan: &Plan) -> Vec<u64> {
        filled(0, net.layers.len())
    }

    /// Whether a zero padding that only a convolution reads becomes that convolution's own padding.
    fn fuses_padding(&self) -> bool {
        true
    }

    /// Layers the engine folds into a transformer's layers: per layer, the layer that runs it (a product, or the
    /// layer norm reading an add), and how ([`Fusion::Epilogue`], [`Fusion::Operand`], [`Fusion::IntoReader`]).
    /// None by default.
    fn folded_into_products(
        &self,
        net: &Network,
        _analysis: &Analysis,
        _consumers: &[u32],
    ) -> Vec<Option<(usize, Fusion)>> {
        filled(None, net.layers.len())
    }

    /// Concats read part by part: per concat the engine never builds, the first of its readers that computes it
    /// part by part; and for each reader that takes a concat part by part (built or not), the concat it reads.
    /// None by default.
    fn unbuilt_concats(&self, net: &Network, _analysis: &Analysis) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
        (filled(None, net.layers.len()), filled(None, net.layers.len()))
    }

    /// Residual adds the engine computes inside a convolution: per add, the convolution and which of the add's
    /// two inputs (0 or 1) leads back to it. None by default.
    fn residual_adds(&self, net: &Network, _analysis: &Analysis, _consumers: &[u32]) -> Vec<Option<(usize, usize)>> {
        filled(None, net.layers.len())
    }

    /// Another convolution that can take residual add `add` when the one [`EngineRules::residual_adds`] named
    /// (on the add's input `side`) does not ([`EngineRules::takes_residual_add`]), and the input leading to it.
    /// None by default.
    fn residual_add_fallback(
        &self,
        _net: &Network,
        _analysis: &Analysis,
        _consumers: &[u32],
        _add: usize,
        _side: usize,
    ) -> Option<(usize, usize)> {
        None
    }

    /// Whether convolution `conv` takes residual add `add` ([`EngineRules::residual_adds`], its input `side`
    /// leading back to it) once the layouts of the layers before the add are known (`blocked`,
    /// [`EngineRules::output_blocked`]). Always by default.
    fn takes_residual_add(
        &self,
        _analysis: &Analysis,
        _blocked: &[bool],
        _add: usize,
        _conv: usize,
        _side: usize,
    ) -> bool {
        true
    }

    /// Bytes the engine keeps for a running layer's weights, and for the tables its plan builds, given the
    /// packed weight bytes the memory model knows (`None`: the f32 weights).
    fn resident_bytes(&self, _config: &LayerConfig, cost: &LayerCost, packed_weight_bytes: Option<u64>) -> (u64, u64) {
        (packed_weight_bytes.unwrap_or(cost.weight_elems * crate::estimate::memory::BYTES_PER_ELEMENT), 0)
    }

    /// The structure kind of a running layer measured alone (see [`crate::estimate::structure`]): named by how
    /// tract lowers it ([`kind_of`]), the engine whose structure perfmodel measures.
    fn structure_kind_of(&self, config: &LayerConfig) -> &'static str {
        kind_of(config)
    }

    /// The structure kind of the activation a convolution or dense layer computes itself: a fused op when the
    /// kernel applies it ([`EngineRules::kernel_takes_epilogue`]), a node of its own otherwise (a softmax, a
    /// swish; with tract, anything after a depthwise or grouped convolution); `None` for a linear one.
    fn own_activation_kind(&self, op: &Op) -> Option<&'static str> {
        let activation = match op {
            Op::Conv2d(c) => c.activation,
            Op::DepthwiseConv2d(d) => d.activation,
            Op::Dense(d) => d.activation,
            _ => return None,
        };
        match activation {
            Activation::Linear => None,
            a if self.kernel_takes_epilogue(op) && self.fuses_activation(op, a) => Some(FUSED),
            _ => Some(LayerType::Activation.as_str()),
        }
    }

    /// Whether a convolution or dense layer whose activation runs as a node of its own
    /// ([`EngineRules::own_activation_kind`] says `activation`) is predicted as those two nodes: the product
    /// without the activation, and the activation on its output. For an engine whose single-layer measurements
    /// of such configs are few (ONNX Runtime runs swish as a node of its own on a blocked convolution's output,
    /// and ELU after converting it back; a zoo's swish convolutions are mostly a squeeze-excite's on one pixel),
    /// each part is then predicted from what is known well. Off by default.
    fn predicts_activation_apart(&self) -> bool {
        false
    }

    /// Element-wise layers computed into an input buffer they own; softmax needs its input while it writes (a
    /// max and a sum first), so it gets a new buffer.
    fn computes_in_place(&self, op: &Op) -> bool {
        match op {
            Op::Activation(a) => *a != Activation::Softmax,
            Op::BatchNorm | Op::Add | Op::Multiply | Op::Elementwise { .. } => true,
            _ => false,
        }
    }

    /// The arena the engine takes a run's tensors from, if it has one ([`crate::estimate::arena`]): the heap a
    /// run needs is then the arena's regions, not the live tensors at the peak. None: tensors come from the
    /// heap as they are needed (tract).
    fn arena(&self) -> Option<crate::estimate::arena::ArenaConfig> {
        None
    }

    /// Whether the engine runs `net` in its graph's own order, a depth-first walk back from the outputs
    /// ([`crate::estimate::passes`]), which the layers' indices stand in for; false: in the network's order, with
    /// the moves [`Self::arena`]'s walk makes for the kernels that compute an add.
    fn runs_in_graph_order(&self, _net: &Network, _analysis: &Analysis, _plan: &Plan) -> bool {
        false
    }

    /// What each layer takes from the engine's arena when it runs ([`Self::arena`]): its output's bytes as the
    /// engine lays it out, and its kernel's scratch. By default the plain f32 output and no scratch.
    fn arena_bytes(&self, _net: &Network, analysis: &Analysis, _plan: &Plan) -> Vec<(u64, u64)> {
        analysis.costs.iter().map(|c| (c.output_elems * crate::estimate::memory::BYTES_PER_ELEMENT, 0)).collect()
    }

    /// What the engine's allocation planner matches a layer's output by when it hands it a buffer a dead tensor
    /// left (ONNX Runtime's `FindReusableTensor`: the same shape and element type), per layer; `None` when the
    /// engine plans no such reuse (every output then comes from the arena or the heap anew).
    fn arena_reuse_shapes(
        &self,
        _net: &Network,
        _analysis: &Analysis,
        _plan: &Plan,
    ) -> Option<Vec<crate::layer::Shape>> {
        None
    }

    /// Convolutions lowered to a matrix product over an explicit packed copy of the input (in tract: `pack_a` of
    /// a 1×1 convolution turned einsum, `Im2col`); the others read their input, or a padded copy of it, until
    /// their product has run. A lazy im2col (any 3×3 convolution tract does not run direct, grouped or not)
    /// gathers from its input as it multiplies; with padding tract first pads it into a new tensor (its `Pad`
    /// builds the padded array, then a tensor of it: twice the padded size while it runs), and the input lives
    /// through that. Counted as freed once packed, RegNetY-400MF's grouped 3×3 convolutions left its peak 5% low.
    fn copies_input_when_packing(&self, config: &LayerConfig) -> bool {
        matches!(
            crate::engine::packing::conv_lowering(config),
            Some(crate::engine::packing::ConvLowering::Pointwise | crate::engine::packing::ConvLowering::Im2col)
        )
    }

    /// Bytes of the packed copy of its input a layer makes while it runs in a network, when the engine's own
    /// answer is known exactly (tract's 1×1 convolutions: [`crate::engine::packing::packed_input_bytes`]); the
    /// layer's workspace when it is the input's only reader. `None`: the memory model's answer stands.
    fn packed_input_bytes(&self, _config: &LayerConfig) -> Option<u64> {
        None
    }

    /// Scratch a layer holds while it runs beyond its input and output, when the engine's code says what it is:
    /// it then stands instead of the layer's memory model (`input_kept`: the input outlives the layer: the
    /// caller's, or one other layers read too); `None`: the model's answer stands. tract pads a lazy im2col
    /// convolution's input into a new tensor first (`Conv::wire_as_lazy_im2col`): its `Pad` builds the padded
    /// array and then a tensor of it, twice the padded size at once beside the input (alone, the layer peaks
    /// there, before its output exists); the padded copy then lives through the product, beside the output, and
    /// the input is freed after the pad unless it is kept. Traced in networks (`bench --memory-trace`): after a
    /// 1×1 convolution, a grouped 3×3 one of 48 channels on 112×112 peaked in its pad at 4.76 MiB over what was
    /// live, twice its 2.38 MiB padded input (its memory model had put the whole layer 0.55 MiB lower);
    /// GoogLeNet's first convolution, on the caller's input, held its 0.6 MiB padded copy beside its output.
    /// Memory models miss it either way, far from their samples (a stem of a width no collected stem has: see
    /// docs/engine-rules.md), so it is not a floor under their answer but the answer.
    fn known_workspace_bytes(&self, config: &LayerConfig, input_kept: bool) -> Option<u64> {
        let Op::Conv2d(c) = &config.op else { return None };
        if crate::engine::packing::conv_lowering(config) != Some(crate::engine::packing::ConvLowering::Lazy) {
            return None;
        }
        let (Some(input @ [channels, h, w]), Some(out)) =
            (config.input_shapes.first().map(|s| s.as_slice()), crate::engine::packing::conv_output_shape(config))
        else {
            return None;
        };
        let pads = c.padding.resolve([*h, *w], c.kernel, c.strides, c.dilation);
        if pads == [0; 4] {
            return None;
        }
        let bytes = |dims: &[usize]| {
            dims.iter().fold(config.batch as u64 * crate::estimate::memory::BYTES_PER_ELEMENT, |a, &d| {
                a.saturating_mul(d as u64)
            })
        };
        let padded = bytes(&[*channels, h.saturating_add(pads[0] + pads[1]), w.saturating_add(pads[2] + pads[3])]);
        let padding = padded.saturating_mul(2).saturating_sub(bytes(&out));
        let product = if input_kept { padded } else { padded.saturating_sub(bytes(input)) };
        Some(padding.max(product))
    }

    /// The network as this engine runs it. Residual adds are planned inside their convolution; the estimator
    /// calls [`Plan::run_add_alone`] for one it cannot time that way.
    fn plan(&self, net: &Network, analysis: &Analysis) -> Plan {
        let duplicate_of = if self.merges_duplicates() { duplicates(net, &analysis.sources) } else { Vec::new() };
        if duplicate_of.iter().any(Option::is_some) {
            // Planned as the engine sees the graph: a duplicate's readers read its first instance, and the
            // duplicate reads nothing (so that the first instance's input has the readers it has in the engine).
            let mut canonical = analysis.clone();
            for (i, sources) in canonical.sources.iter_mut().enumerate() {
                for s in sources.iter_mut() {
                    if let Source::Layer(j) = s {
                        *j = duplicate_of[*j].unwrap_or(*j);
                    }
                }
                if duplicate_of[i].is_some() {
                    sources.clear();
                }
            }
            return self.plan_merged(net, &canonical, &duplicate_of);
        }
        self.plan_merged(net, analysis, &duplicate_of)
    }

    /// [`EngineRules::plan`] of a network whose duplicates (`duplicate_of`, empty for none) are already merged
    /// in `analysis`'s sources.
    fn plan_merged(&self, net: &Network, analysis: &Analysis, duplicate_of: &[Option<usize>]) -> Plan {
        let n = net.layers.len();
        let consumers = consumers(&analysis.sources, n);
        let padding_into =
            if self.fuses_padding() { padding_fused_into(net, &analysis.sources, &consumers) } else { filled(None, n) };
        let (concat_read_by, reads_concat) = self.unbuilt_concats(net, analysis);
        let add_into = self.residual_adds(net, analysis, &consumers);
        let folded = self.folded_into_products(net, analysis, &consumers);
        let mut roles: Vec<Role> = Vec::with_capacity(n);
        let mut blocked: Vec<bool> = Vec::with_capacity(n);
        for (i, layer) in net.layers.iter().enumerate() {
            let inside = |owner: usize, via: usize, fusion: Fusion| Role::Inside { owner, via, fusion };
            let role = if layer.op.layer_type().is_free() {
                Role::Free
            } else if let Some(Some(first)) = duplicate_of.get(i) {
                inside(*first, *first, Fusion::Duplicate)
            } else if let Some(conv) = padding_into[i] {
                inside(conv, conv, Fusion::Padding)
            } else if let Some(conv) = concat_read_by[i] {
                inside(conv, conv, Fusion::UnbuiltConcat)
            } else if let Some((conv, side)) = add_into[i].and_then(|(conv, side)| {
                let takes = |&(conv, side): &(usize, usize)| self.takes_residual_add(analysis, &blocked, i, conv, side);
                Some((conv, side))
                    .filter(takes)
                    .or_else(|| self.residual_add_fallback(net, analysis, &consumers, i, side).filter(takes))
            }) {
                let via = match analysis.sources[i][side] {
                    Source::Layer(j) => j,
                    Source::Input => conv,
                };
                if let Some(Role::Runs(kernel)) = roles.get_mut(conv) {
                    kernel.fused_add = Some(i);
                }
                inside(conv, via, Fusion::ResidualAdd)
            } else if let Some((owner, fusion)) = folded[i] {
                inside(owner, owner, fusion)
            } else if let Some((owner, via)) = self.epilogue_owner(net, analysis, &consumers, &roles, &blocked, i) {
                inside(owner, via, Fusion::Epilogue)
            } else {
                Role::Runs(Kernel { fused_add: None, concat_by_part: reads_concat[i] })
            };
            roles.push(role);
            blocked.push(self.output_blocked(net, analysis, &roles, &blocked, i));
        }
        Plan { roles, consumers, blocked: BlockedOutputs(blocked.into()) }
    }

    /// The layer whose kernel applies layer `i` (an activation the kernel fuses, a batch norm after a linear
    /// convolution) when its producer has no other reader, and the producer it is reached through.
    fn epilogue_owner(
        &self,
        net: &Network,
        analysis: &Analysis,
        consumers: &[u32],
        roles: &[Role],
        blocked: &[bool],
        i: usize,
    ) -> Option<(usize, usize)> {
        let [Source::Layer(j)] = analysis.sources[i].as_slice() else { return None };
        let j = *j;
        if consumers[j] != 1 {
            return None;
        }
        let producer = &net.layers[j].op;
        let kernel = self.runs_as_product_in(net, analysis, blocked, j);
        if kernel && !self.kernel_takes_epilogue(producer) {
            return None;
        }
        let owner_of_j = || match roles[j] {
            Role::Inside { owner, fusion: Fusion::Epilogue | Fusion::ResidualAdd, .. } => Some(owner),
            _ => None,
        };
        let owner = match (&net.layers[i].op, producer) {
            (Op::Activation(a), _) if kernel && self.fuses_activation(producer, *a) => Some(j),
            (Op::Activation(a), _) if fuses_into_kernel(*a) => {
                owner_of_j().filter(|&o| self.fuses_activation(&net.layers[o].op, *a))
            }
            (Op::BatchNorm, Op::Conv2d(c)) if c.activation == Activation::Linear && self.folds_batch_norm() => Some(j),
            (Op::BatchNorm, Op::DepthwiseConv2d(c))
                if c.activation == Activation::Linear && self.folds_batch_norm() =>
            {
                Some(j)
            }
            _ => None,
        };
        owner.map(|o| (o, j))
    }

    /// The structure kind of running layer `i` in the network: `own_kind`, or [`CHAINED`] for a batch norm or
    /// an activation the engine fuses into products whose input is a running element-wise layer that only it
    /// reads: such a run of operations is one node, so only the first of them costs one.
    fn structure_kind(
        &self,
        net: &Network,
        sources: &[Sources],
        plan: &Plan,
        i: usize,
        own_kind: &'static str,
    ) -> &'static str {
        let chains = |op: &Op| match op {
            Op::BatchNorm | Op::Add | Op::Multiply => true,
            Op::Activation(a) => fuses_into_kernel(*a),
            _ => false,
        };
        let unary_follower = matches!(net.layers[i].op, Op::BatchNorm | Op::Activation(_));
        if unary_follower && chains(&net.layers[i].op) {
            if let Some(&Source::Layer(j)) = sources[i].first() {
                if plan.runs(j) && plan.consumers(j) == 1 && chains(&net.layers[j].op) {
                    return CHAINED;
                }
            }
        }
        own_kind
    }
}

/// The rules the estimate assumes when the models describe no engine in particular (the roofline and nearest-
/// sample baselines): activations and batch norms applied by the kernel producing their input, paddings taken
/// into the convolution; no engine-specific rewrite.
#[derive(Debug, Clone, Copy, Default)]
pub struct Generic;

impl EngineRules for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }
}

/// Activation functions an engine applies inside the convolution / matrix-product kernel.
pub fn fuses_into_kernel(a: Activation) -> bool {
    matches!(a, Activation::Linear | Activation::Relu | Activation::Relu6 | Activation::LeakyRelu)
}

/// The product of two tensors that layer `i` multiplies or divides by a scalar, when `i` is its only reader
/// (attention's scale of the scores, which tract and ONNX Runtime both apply in the product).
pub fn scaled_product(net: &Network, analysis: &Analysis, only_reader: &[Option<usize>], i: usize) -> Option<usize> {
    if !is_scalar_scale(&net.layers[i].op) {
        return None;
    }
    let [Source::Layer(j)] = analysis.sources[i].as_slice() else { return None };
    let product = matches!(net.layers[*j].op, Op::MatMul { units: None, .. });
    (product && only_reader[*j] == Some(i)).then_some(*j)
}

/// A multiply or divide by one constant value (an attention scale).
pub fn is_scalar_scale(op: &Op) -> bool {
    matches!(op, Op::Elementwise { function: ElementwiseFn::Mul | ElementwiseFn::Div, constant_shape }
        if constant_shape.iter().product::<usize>() == 1)
}

/// The one layer reading each layer's output, `None` for a layer read by none or by several.
pub fn single_readers(sources: &[Sources], consumers: &[u32]) -> Vec<Option<usize>> {
    let mut reader = filled(None, consumers.len());
    for (i, srcs) in sources.iter().enumerate() {
        for s in srcs {
            if let Source::Layer(j) = s {
                reader[*j] = (consumers[*j] == 1).then_some(i);
            }
        }
    }
    reader
}

/// How many layers read each layer's output.
/// Per layer, the earlier layer it duplicates: a weightless layer (activation, softmax, pooling, add, multiply,
/// concat, cropping, shuffle, slice, transpose) doing the same operation on the same inputs (through duplicates
/// already found) as a layer before it; `None` for the first of each. Not a zero padding: ONNX Runtime folds each
/// into the convolution reading it first (NASNet's paddings of one ReLU's output stay two, one per convolution).
/// Without a tensor that several layers read there are none, and a chain costs a count.
pub fn duplicates(net: &Network, sources: &[Sources]) -> Vec<Option<usize>> {
    let n = net.layers.len();
    let mut of: Vec<Option<usize>> = filled(None, n);
    let readers = consumers(sources, n);
    let input_readers = sources.iter().flatten().filter(|s| **s == Source::Input).count();
    if input_readers < 2 && readers.iter().all(|&r| r < 2) {
        return of;
    }
    // Sized for every layer up front: grown a key at a time, the table was reallocated as it grew.
    let mut firsts: rustc_hash::FxHashMap<Sources, smallvec::SmallVec<[usize; 2]>> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(n, Default::default());
    for (i, layer) in net.layers.iter().enumerate() {
        let weightless = matches!(
            layer.op,
            Op::Activation(_)
                | Op::Softmax { .. }
                | Op::MaxPool2d(_)
                | Op::AvgPool2d(_)
                | Op::GlobalAvgPool2d
                | Op::GlobalMaxPool2d
                | Op::Add
                | Op::Multiply
                | Op::Concat { .. }
                | Op::Cropping2d { .. }
                | Op::ChannelShuffle { .. }
                | Op::ChannelSlice { .. }
                | Op::Transpose { .. }
        );
        if !weightless || sources[i].is_empty() {
            continue;
        }
        let canonical: Sources = sources[i]
            .iter()
            .map(|s| match *s {
                Source::Layer(j) => Source::Layer(of[j].unwrap_or(j)),
                s => s,
            })
            .collect();
        let same = firsts.entry(canonical).or_default();
        match same.iter().find(|&&first| net.layers[first].op == layer.op) {
            Some(&first) => of[i] = Some(first),
            None => same.push(i),
        }
    }
    of
}

pub fn consumers(sources: &[Sources], n: usize) -> Vec<u32> {
    let mut consumers = filled(0u32, n);
    for srcs in sources {
        for s in srcs {
            if let Source::Layer(j) = s {
                consumers[*j] += 1;
            }
        }
    }
    consumers
}

/// For every zero padding whose only reader is a convolution (regular or depthwise): that convolution, which
/// absorbs the padding (tract does; measured 0 ms in whole-network runs).
fn padding_fused_into(net: &Network, sources: &[Sources], consumers: &[u32]) -> Vec<Option<usize>> {
    let mut into = filled(None, net.layers.len());
    for (reader, srcs) in sources.iter().enumerate() {
        let [Source::Layer(pad)] = srcs.as_slice() else { continue };
        let is_conv = matches!(net.layers[reader].op, Op::Conv2d(_) | Op::DepthwiseConv2d(_));
        if is_conv && consumers[*pad] == 1 && matches!(net.layers[*pad].op, Op::ZeroPadding2d { .. }) {
            into[*pad] = Some(reader);
        }
    }
    into
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(rules: &dyn EngineRules, text: &str) -> (Network, Plan) {
        let net = Network::from_json_str(text, "plan.json").unwrap();
        let analysis = net.analyze().unwrap();
        let plan = rules.plan(&net, &analysis);
        (net, plan)
    }

    fn index(net: &Network, name: &str) -> usize {
        net.layers.iter().position(|l| l.name == name).unwrap()
    }

    #[test]
    fn identical_weightless_layers_on_the_same_inputs_run_once_where_the_engine_merges_them() {
        let net = Network::from_json_str(
            r#"{"name": "twins", "input_shape": [16, 8, 8], "layers": [
              {"name": "conv", "type": "conv2d", "filters": 16, "kernel": [1, 1]},
              {"name": "relu_a", "type": "activation", "function": "relu"},
              {"name": "relu_b", "type": "activation", "function": "relu", "inputs": ["conv"]},
              {"name": "relu6", "type": "activation", "function": "relu6", "inputs": ["conv"]},
              {"name": "pool_a", "type": "max_pool2d", "pool_size": [2, 2], "strides": [2, 2], "inputs": ["relu_a"]},
              {"name": "pool_b", "type": "max_pool2d", "pool_size": [2, 2], "strides": [2, 2], "inputs": ["relu_b"]},
              {"name": "pool_c", "type": "max_pool2d", "pool_size": [3, 3], "strides": [2, 2], "inputs": ["relu_b"]},
              {"name": "sum", "type": "add", "inputs": ["pool_a", "pool_b"]}]}"#,
            "twins.json",
        )
        .unwrap();
        let analysis = net.analyze().unwrap();
        let of = duplicates(&net, &analysis.sources);
        let at = |name: &str| of[index(&net, name)];
        // The second ReLU is the first; a ReLU6 is not; a pooling of the duplicate is one of the first ReLU's
        // (found through it); a pooling of another size is not.
        assert_eq!(at("relu_b"), Some(index(&net, "relu_a")));
        assert_eq!(at("relu6"), None);
        assert_eq!(at("pool_b"), Some(index(&net, "pool_a")));
        assert_eq!(at("pool_c"), None);
        assert!(at("relu_a").is_none() && at("sum").is_none());
        // ONNX Runtime merges them (from `basic` on), tract runs each.
        let ort = OnnxRuntime { level: crate::engine::GraphOptimization::Basic, nchwc_block: 0 };
        let plan = ort.plan(&net, &analysis);
        let relu_a = index(&net, "relu_a");
        assert_eq!(
            plan.role(index(&net, "relu_b")),
            Role::Inside { owner: relu_a, via: relu_a, fusion: Fusion::Duplicate }
        );
        assert!(plan.runs(relu_a) && plan.runs(index(&net, "relu6")));
        let tract = Tract.plan(&net, &analysis);
        assert!(tract.runs(index(&net, "pool_b")));
    }

    /// ResNet v1's projection block: a product on each side, the add and its ReLU.
    const PROJECTION: &str = r#"{"name": "proj", "input_shape": [8, 8, 8], "layers": [
        {"name": "stem", "type": "conv2d", "filters": 8, "kernel": [3, 3], "padding": "same", "activation": "relu"},
        {"name": "short", "type": "conv2d", "filters": 16, "kernel": [1, 1], "inputs": ["stem"]},
        {"name": "short_bn", "type": "batch_norm"},
        {"name": "main", "type": "conv2d", "filters": 16, "kernel": [1, 1], "inputs": ["stem"]},
        {"name": "main_bn", "type": "batch_norm"},
        {"name": "add", "type": "add", "inputs": ["short_bn", "main_bn"]},
        {"name": "out", "type": "activation", "function": "relu"},
        {"name": "flat", "type": "flatten"}]}"#;

    #[test]
    fn tract_runs_a_projection_block_s_add_and_relu_inside_the_first_product() {
        let (net, plan) = plan_of(&Tract, PROJECTION);
        let [short, short_bn, main, add, out] = ["short", "short_bn", "main", "add", "out"].map(|n| index(&net, n));
        assert_eq!(plan.kernel(short), Some(Kernel { fused_add: Some(add), concat_by_part: None }));
        assert_eq!(plan.role(short_bn), Role::Inside { owner: short, via: short, fusion: Fusion::Epilogue });
        assert_eq!(plan.kernel(main), Some(Kernel::default()));
        assert_eq!(plan.role(add), Role::Inside { owner: short, via: short_bn, fusion: Fusion::ResidualAdd });
        assert_eq!(plan.role(out), Role::Inside { owner: short, via: add, fusion: Fusion::Epilogue });
        assert_eq!(plan.role(index(&net, "flat")), Role::Free);
        // Without the add's rewrite (the generic rules) the add and its ReLU run.
        let (_, generic) = plan_of(&Generic, PROJECTION);
        assert!(generic.runs(add) && generic.runs(out), "{generic:?}");
        assert_eq!(generic.owner(short_bn), Some(short));
    }

    #[test]
    fn an_add_run_alone_takes_what_ran_inside_through_it_along() {
        let (net, mut plan) = plan_of(&Tract, PROJECTION);
        let [short, short_bn, add, out] = ["short", "short_bn", "add", "out"].map(|n| index(&net, n));
        plan.run_add_alone(add);
        assert_eq!(plan.kernel(short), Some(Kernel::default()));
        assert!(plan.runs(add) && plan.runs(out), "{plan:?}");
        // What the convolution applies itself stays inside it.
        assert_eq!(plan.owner(short_bn), Some(short));
        // A layer that is not a planned residual add is left alone.
        let before = plan.clone();
        plan.run_add_alone(short_bn);
        assert_eq!(plan, before);
    }

    #[test]
    fn an_add_run_alone_leaves_another_convolution_s_add_inside_it() {
        // a1 runs inside p; a2 inside q, reached through a ReLU that runs (a dropout stands between it and q). s is
        // 1x1: a k×k convolution's output is no product's matrix, and an add of it runs alone.
        let text = r#"{"name": "two_adds", "input_shape": [8, 8, 8], "layers": [
            {"name": "s", "type": "conv2d", "filters": 8, "kernel": [1, 1], "activation": "relu"},
            {"name": "p", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
            {"name": "a1", "type": "add", "inputs": ["s", "p"]},
            {"name": "q", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
            {"name": "d", "type": "dropout", "rate": 0.1},
            {"name": "r", "type": "activation", "function": "relu"},
            {"name": "a2", "type": "add", "inputs": ["r", "a1"]}]}"#;
        let (net, mut plan) = plan_of(&Tract, text);
        let [p, a1, q, r, a2] = ["p", "a1", "q", "r", "a2"].map(|n| index(&net, n));
        assert_eq!(plan.role(a1), Role::Inside { owner: p, via: p, fusion: Fusion::ResidualAdd });
        assert_eq!(plan.role(a2), Role::Inside { owner: q, via: r, fusion: Fusion::ResidualAdd });
        assert!(plan.runs(r));
        plan.run_add_alone(a1);
        assert!(plan.runs(a1));
        assert_eq!(plan.role(a2), Role::Inside { owner: q, via: r, fusion: Fusion::ResidualAdd });
        assert_eq!(plan.kernel(q), Some(Kernel { fused_add: Some(a2), concat_by_part: None }));
    }

    #[test]
    fn only_tract_keeps_a_depthwise_convolution_s_batch_norm_and_relu_apart_and_leaves_concats_unbuilt() {
        let text = r#"{"name": "dw", "input_shape": [8, 8, 8], "layers": [
            {"name": "pad", "type": "zero_padding2d", "padding": [1, 1, 1, 1]},
            {"name": "dw", "type": "depthwise_conv2d", "kernel": [3, 3]},
            {"name": "bn", "type": "batch_norm"},
            {"name": "relu", "type": "activation", "function": "relu"},
            {"name": "cat", "type": "concat", "inputs": ["relu", "input"]},
            {"name": "pw", "type": "conv2d", "filters": 4, "kernel": [1, 1]}]}"#;
        let (net, tract) = plan_of(&Tract, text);
        let [pad, dw, bn, relu, cat, pw] = ["pad", "dw", "bn", "relu", "cat", "pw"].map(|n| index(&net, n));
        let (_, generic) = plan_of(&Generic, text);
        for plan in [&tract, &generic] {
            assert_eq!(plan.role(pad), Role::Inside { owner: dw, via: dw, fusion: Fusion::Padding });
        }
        assert!(tract.runs(bn) && tract.runs(relu), "{tract:?}");
        assert_eq!((generic.owner(bn), generic.owner(relu)), (Some(dw), Some(dw)));
        assert_eq!(tract.role(cat), Role::Inside { owner: pw, via: pw, fusion: Fusion::UnbuiltConcat });
        assert_eq!(tract.kernel(pw), Some(Kernel { fused_add: None, concat_by_part: Some(cat) }));
        assert!(generic.runs(cat) && generic.kernel(pw) == Some(Kernel::default()));
    }

    #[test]
    fn a_concat_a_pool_reads_too_is_built_and_its_one_by_one_readers_still_take_it_part_by_part() {
        // GoogLeNet's inception output: a max pooling and 1×1 convolutions read it.
        let text = r#"{"name": "inception", "input_shape": [8, 8, 8], "layers": [
            {"name": "a", "type": "conv2d", "filters": 4, "kernel": [3, 3], "padding": "same"},
            {"name": "cat", "type": "concat", "inputs": ["a", "input"]},
            {"name": "pool", "type": "max_pool2d", "pool_size": [3, 3], "strides": [1, 1], "padding": "same"},
            {"name": "pw", "type": "conv2d", "filters": 4, "kernel": [1, 1], "inputs": ["cat"]},
            {"name": "three", "type": "conv2d", "filters": 4, "kernel": [3, 3], "padding": "same", "inputs": ["cat"]},
            {"name": "out", "type": "concat", "inputs": ["pool", "pw", "three"]}]}"#;
        let (net, tract) = plan_of(&Tract, text);
        let [cat, pw, three] = ["cat", "pw", "three"].map(|n| index(&net, n));
        assert!(tract.runs(cat), "{tract:?}");
        assert_eq!(tract.kernel(pw), Some(Kernel { fused_add: None, concat_by_part: Some(cat) }));
        assert_eq!(tract.kernel(three), Some(Kernel::default()), "a 3×3 convolution reads the built concat");
    }
}
