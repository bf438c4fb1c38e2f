//! Layers: what one operation of a network is, the shape it produces, and the numbers that describe its cost.
//!
//! Everything downstream — sampling, collection, training and estimation — describes a layer by a
//! [`LayerConfig`] (an [`Op`] plus the shapes it consumes and the batch size) and turns it into numbers with one
//! function, [`LayerConfig::features`]. Keeping a single code path is what makes a model trained on collected
//! rows answer correctly for a layer met later in a user's network.
//!
//! Shapes exclude the batch dimension and use channels-first order: `[C, H, W]` for images, `[features]` for
//! vectors. Element counts and FLOPs include the batch; FLOPs count 2 per multiply-accumulate.
//!
//! This module holds the types; each concern has a file of its own: `shape` (output shapes and the checks that
//! reject impossible layers), `cost` (element, weight and FLOP counts), `features` (the one list of feature
//! names and values) and `json` (the net.json form of a layer, read and written through serde).

mod cost;
mod features;
mod json;
mod shape;

pub use shape::{resolve_axis, tensor_elements};

use std::fmt;

/// A tensor shape without the batch dimension (`[C, H, W]` or `[features]`), its dimensions inline up to four.
pub type Shape = smallvec::SmallVec<[usize; 4]>;

/// The largest value accepted for one hyperparameter (filters, units, kernel, strides, dilation, padding...).
/// Far beyond any real network; the bound keeps derived sizes (dilated kernels, padded inputs) from overflowing.
pub const MAX_SIZE: usize = 1 << 24;

/// The largest tensor (whole batch) or weight count accepted: 2^40 f32 values are 4 TiB, more than any device
/// holds, so a larger count is a typo. Below it, element counts are exact and products of sizes are checked.
pub const MAX_ELEMENTS: u64 = 1 << 40;

/// Why a layer cannot be built or cannot take its inputs: the field to blame and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerError {
    pub field: Option<String>,
    pub message: String,
}

impl LayerError {
    pub fn new(field: Option<&str>, message: impl Into<String>) -> Self {
        LayerError { field: field.map(str::to_string), message: message.into() }
    }
    fn at(field: &str, message: impl Into<String>) -> Self {
        Self::new(Some(field), message)
    }
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "field '{field}': {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

type LResult<T> = std::result::Result<T, LayerError>;

/// A count (FLOPs, output channels...) that overflows u64, blamed on `field`.
fn too_large(field: &str, what: &str) -> LayerError {
    LayerError::at(field, format!("the layer's {what} overflows a 64-bit count: sizes too large for any device"))
}

/// Activation functions, fused into a layer (`activation`) or standalone (`function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Activation {
    Linear,
    Relu,
    Relu6,
    LeakyRelu,
    Elu,
    Gelu,
    Sigmoid,
    HardSigmoid,
    Tanh,
    Swish,
    HardSwish,
    Softmax,
}

impl Activation {
    pub const ALL: [Activation; 12] = [
        Activation::Linear,
        Activation::Relu,
        Activation::Relu6,
        Activation::LeakyRelu,
        Activation::Elu,
        Activation::Gelu,
        Activation::Sigmoid,
        Activation::HardSigmoid,
        Activation::Tanh,
        Activation::Swish,
        Activation::HardSwish,
        Activation::Softmax,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Activation::Linear => "linear",
            Activation::Relu => "relu",
            Activation::Relu6 => "relu6",
            Activation::LeakyRelu => "leaky_relu",
            Activation::Elu => "elu",
            Activation::Gelu => "gelu",
            Activation::Sigmoid => "sigmoid",
            Activation::HardSigmoid => "hard_sigmoid",
            Activation::Tanh => "tanh",
            Activation::Swish => "swish",
            Activation::HardSwish => "hard_swish",
            Activation::Softmax => "softmax",
        }
    }

    pub fn parse(s: &str) -> Option<Activation> {
        let s = s.to_ascii_lowercase();
        let alias = match s.as_str() {
            "none" | "identity" => "linear",
            "silu" => "swish",
            "hardswish" => "hard_swish",
            "hardsigmoid" => "hard_sigmoid",
            "leakyrelu" => "leaky_relu",
            other => other,
        };
        Activation::ALL.iter().copied().find(|a| a.as_str() == alias)
    }

    fn names_list() -> String {
        Activation::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Spatial padding: Keras `valid` / `same`, or explicit `[top, bottom, left, right]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Padding {
    Valid,
    Same,
    Explicit([usize; 4]),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Conv2d {
    pub filters: usize,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub padding: Padding,
    pub use_bias: bool,
    pub activation: Activation,
}

impl Conv2d {
    pub fn new(filters: usize, kernel: [usize; 2]) -> Self {
        Conv2d {
            filters,
            kernel,
            strides: [1, 1],
            dilation: [1, 1],
            groups: 1,
            padding: Padding::Valid,
            use_bias: true,
            activation: Activation::Linear,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DepthwiseConv2d {
    pub depth_multiplier: usize,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilation: [usize; 2],
    pub padding: Padding,
    pub use_bias: bool,
    pub activation: Activation,
}

impl DepthwiseConv2d {
    pub fn new(kernel: [usize; 2]) -> Self {
        DepthwiseConv2d {
            depth_multiplier: 1,
            kernel,
            strides: [1, 1],
            dilation: [1, 1],
            padding: Padding::Valid,
            use_bias: true,
            activation: Activation::Linear,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub units: usize,
    pub use_bias: bool,
    pub activation: Activation,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pool2d {
    pub pool_size: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
}

impl Pool2d {
    /// Keras default: strides equal to the pool size.
    pub fn new(pool_size: [usize; 2]) -> Self {
        Pool2d { pool_size, strides: pool_size, padding: Padding::Valid }
    }
}

/// One operation. The JSON form (net.json layer objects) is produced by [`Op::to_json`] and read by
/// [`Op::from_json`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Conv2d(Conv2d),
    DepthwiseConv2d(DepthwiseConv2d),
    Dense(Dense),
    MaxPool2d(Pool2d),
    AvgPool2d(Pool2d),
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    Flatten,
    /// Target shape without the batch; one entry may be -1.
    Reshape {
        target_shape: Vec<i64>,
    },
    Add,
    Multiply,
    /// Axis in the batch-less shape (0 = channels); negative counts from the end.
    Concat {
        axis: i64,
    },
    Activation(Activation),
    BatchNorm,
    ZeroPadding2d {
        padding: [usize; 4],
    },
    Cropping2d {
        cropping: [usize; 4],
    },
    Dropout {
        rate: f64,
    },
    /// An operation perfmodel cannot model (kept from an ONNX import with `--allow-unsupported`).
    Unsupported {
        op_type: String,
        output_shape: Shape,
    },
    /// ShuffleNet's channel shuffle: channels in `groups` groups, interleaved (channel `g · C/groups + k` moves
    /// to `k · groups + g`); the shape is unchanged.
    ChannelShuffle {
        groups: usize,
    },
    /// Channels `start..end` of the input (ShuffleNet's channel split).
    ChannelSlice {
        start: usize,
        end: usize,
    },
    /// A matrix product over the last two axes (ONNX `MatMul`, PyTorch's `@`, and `nn.Linear` applied to a
    /// sequence). With `units`: one input `[..., K]` times a constant `K × units` weight, plus a bias of `units`
    /// when `use_bias` (a dense layer applied to every row). Without: two inputs `[..., M, K]` and `[..., K, N]`
    /// whose leading axes broadcast, giving `[..., M, N]` (attention's queries times keys, and its weights times
    /// values).
    MatMul {
        units: Option<usize>,
        use_bias: bool,
    },
    /// Normalisation over the axes from `axis` to the last (a transformer's `LayerNorm`: the feature axis, -1),
    /// with a learned scale and bias of that size.
    LayerNorm {
        axis: i64,
        epsilon: f64,
    },
    /// Softmax over one axis (attention weights: the last, -1). The `activation` layer's softmax is this over the
    /// last axis of a classifier's output.
    Softmax {
        axis: i64,
    },
    /// The input's axes (batch excluded) in the order `perm`: output axis `i` is input axis `perm[i]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// `function` of the input and a constant of `constant_shape`, broadcast over the input from the right (as
    /// ONNX and NumPy broadcast; the batch excluded): a transformer's attention scale (a scalar), its position
    /// embedding (`[tokens, features]`), an additive attention mask. The output has the input's shape.
    Elementwise {
        function: ElementwiseFn,
        constant_shape: Shape,
    },
    /// A lookup of `features` values per id in a table of `vocab` rows (a transformer's token embedding): the
    /// input holds ids (any shape), the output one row per id (the input's shape plus `features`).
    Embedding {
        vocab: usize,
        features: usize,
    },
}

/// The arithmetic of an [`Op::Elementwise`] layer: input `function` constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElementwiseFn {
    Add,
    Sub,
    Mul,
    Div,
}

impl ElementwiseFn {
    pub const ALL: [ElementwiseFn; 4] =
        [ElementwiseFn::Add, ElementwiseFn::Sub, ElementwiseFn::Mul, ElementwiseFn::Div];

    pub fn as_str(self) -> &'static str {
        match self {
            ElementwiseFn::Add => "add",
            ElementwiseFn::Sub => "sub",
            ElementwiseFn::Mul => "mul",
            ElementwiseFn::Div => "div",
        }
    }

    pub fn parse(s: &str) -> Option<ElementwiseFn> {
        ElementwiseFn::ALL.iter().copied().find(|f| f.as_str() == s.to_ascii_lowercase())
    }

    /// The ONNX operator.
    pub fn onnx_op(self) -> &'static str {
        match self {
            ElementwiseFn::Add => "Add",
            ElementwiseFn::Sub => "Sub",
            ElementwiseFn::Mul => "Mul",
            ElementwiseFn::Div => "Div",
        }
    }
}

/// The kind of an [`Op`], without hyperparameters: the key of data files and trained models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerType {
    Conv2d,
    DepthwiseConv2d,
    Dense,
    MaxPool2d,
    AvgPool2d,
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    Flatten,
    Reshape,
    Add,
    Multiply,
    Concat,
    Activation,
    BatchNorm,
    ZeroPadding2d,
    Cropping2d,
    Dropout,
    Unsupported,
    ChannelShuffle,
    ChannelSlice,
    MatMul,
    LayerNorm,
    Softmax,
    Transpose,
    Elementwise,
    Embedding,
}

impl LayerType {
    pub const ALL: [LayerType; 26] = [
        LayerType::Conv2d,
        LayerType::DepthwiseConv2d,
        LayerType::Dense,
        LayerType::MaxPool2d,
        LayerType::AvgPool2d,
        LayerType::GlobalAvgPool2d,
        LayerType::GlobalMaxPool2d,
        LayerType::Flatten,
        LayerType::Reshape,
        LayerType::Add,
        LayerType::Multiply,
        LayerType::Concat,
        LayerType::Activation,
        LayerType::BatchNorm,
        LayerType::ZeroPadding2d,
        LayerType::Cropping2d,
        LayerType::Dropout,
        LayerType::Unsupported,
        // After `Unsupported`: the C ABI numbers layer types by their place here.
        LayerType::ChannelShuffle,
        LayerType::ChannelSlice,
        LayerType::MatMul,
        LayerType::LayerNorm,
        LayerType::Softmax,
        LayerType::Transpose,
        LayerType::Elementwise,
        LayerType::Embedding,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LayerType::Conv2d => "conv2d",
            LayerType::DepthwiseConv2d => "depthwise_conv2d",
            LayerType::Dense => "dense",
            LayerType::MaxPool2d => "max_pool2d",
            LayerType::AvgPool2d => "avg_pool2d",
            LayerType::GlobalAvgPool2d => "global_avg_pool2d",
            LayerType::GlobalMaxPool2d => "global_max_pool2d",
            LayerType::Flatten => "flatten",
            LayerType::Reshape => "reshape",
            LayerType::Add => "add",
            LayerType::Multiply => "multiply",
            LayerType::Concat => "concat",
            LayerType::Activation => "activation",
            LayerType::BatchNorm => "batch_norm",
            LayerType::ZeroPadding2d => "zero_padding2d",
            LayerType::Cropping2d => "cropping2d",
            LayerType::Dropout => "dropout",
            LayerType::Unsupported => "unsupported",
            LayerType::ChannelShuffle => "channel_shuffle",
            LayerType::ChannelSlice => "channel_slice",
            LayerType::MatMul => "matmul",
            LayerType::LayerNorm => "layer_norm",
            LayerType::Softmax => "softmax",
            LayerType::Transpose => "transpose",
            LayerType::Elementwise => "elementwise",
            LayerType::Embedding => "embedding",
        }
    }

    pub fn parse(s: &str) -> Option<LayerType> {
        LayerType::ALL.iter().copied().find(|t| t.as_str() == s)
    }

    pub fn names_list() -> String {
        LayerType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Layers that do no arithmetic at inference (views, copies, no-ops).
    pub fn is_free(self) -> bool {
        matches!(self, LayerType::Flatten | LayerType::Reshape | LayerType::Dropout)
    }

    /// Layers with learned weights that engines lower into a matrix product or a dedicated kernel: conv2d,
    /// depthwise_conv2d, dense.
    pub fn is_weighted(self) -> bool {
        matches!(self, LayerType::Conv2d | LayerType::DepthwiseConv2d | LayerType::Dense)
    }
}

impl fmt::Display for LayerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Op {
    pub fn layer_type(&self) -> LayerType {
        match self {
            Op::Conv2d(_) => LayerType::Conv2d,
            Op::DepthwiseConv2d(_) => LayerType::DepthwiseConv2d,
            Op::Dense(_) => LayerType::Dense,
            Op::MaxPool2d(_) => LayerType::MaxPool2d,
            Op::AvgPool2d(_) => LayerType::AvgPool2d,
            Op::GlobalAvgPool2d => LayerType::GlobalAvgPool2d,
            Op::GlobalMaxPool2d => LayerType::GlobalMaxPool2d,
            Op::Flatten => LayerType::Flatten,
            Op::Reshape { .. } => LayerType::Reshape,
            Op::Add => LayerType::Add,
            Op::Multiply => LayerType::Multiply,
            Op::Concat { .. } => LayerType::Concat,
            Op::Activation(_) => LayerType::Activation,
            Op::BatchNorm => LayerType::BatchNorm,
            Op::ZeroPadding2d { .. } => LayerType::ZeroPadding2d,
            Op::Cropping2d { .. } => LayerType::Cropping2d,
            Op::Dropout { .. } => LayerType::Dropout,
            Op::Unsupported { .. } => LayerType::Unsupported,
            Op::ChannelShuffle { .. } => LayerType::ChannelShuffle,
            Op::ChannelSlice { .. } => LayerType::ChannelSlice,
            Op::MatMul { .. } => LayerType::MatMul,
            Op::LayerNorm { .. } => LayerType::LayerNorm,
            Op::Softmax { .. } => LayerType::Softmax,
            Op::Transpose { .. } => LayerType::Transpose,
            Op::Elementwise { .. } => LayerType::Elementwise,
            Op::Embedding { .. } => LayerType::Embedding,
        }
    }

    /// Whether this op takes several inputs (all others take exactly one). An unsupported ONNX op keeps all the
    /// inputs it had.
    pub fn is_multi_input(&self) -> bool {
        matches!(
            self,
            Op::Add | Op::Multiply | Op::Concat { .. } | Op::Unsupported { .. } | Op::MatMul { units: None, .. }
        )
    }

    /// The activation fused into this op, if any (conv, depthwise, dense) or the op's function (activation).
    pub fn activation(&self) -> Option<Activation> {
        match self {
            Op::Conv2d(c) => Some(c.activation),
            Op::DepthwiseConv2d(c) => Some(c.activation),
            Op::Dense(d) => Some(d.activation),
            Op::Activation(a) => Some(*a),
            _ => None,
        }
    }
}

/// One layer in isolation: the unit that is sampled, measured, learned and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerConfig {
    pub op: Op,
    pub input_shapes: InputShapes,
    pub batch: usize,
}

/// The shapes a layer reads, inline up to two (most layers read one, an add two).
pub type InputShapes = smallvec::SmallVec<[Shape; 2]>;

/// Sizes derived from a config, shared by features, baselines and memory accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerCost {
    /// Elements of all inputs, whole batch.
    pub input_elems: u64,
    /// Parameters (weights + biases + statistics).
    pub weight_elems: u64,
    /// Elements of the output, whole batch.
    pub output_elems: u64,
    /// Floating point operations, whole batch (2 per multiply-accumulate).
    pub flops: u64,
}

impl LayerConfig {
    pub fn new(op: Op, input_shapes: impl Into<InputShapes>, batch: usize) -> Self {
        LayerConfig { op, input_shapes: input_shapes.into(), batch }
    }

    pub fn layer_type(&self) -> LayerType {
        self.op.layer_type()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn conv(filters: usize, k: usize, s: usize, padding: Padding) -> Op {
        let mut c = Conv2d::new(filters, [k, k]);
        c.strides = [s, s];
        c.padding = padding;
        Op::Conv2d(c)
    }
}
