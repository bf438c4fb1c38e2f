//! Layers: what one operation of a network is, the shape it produces, and the numbers that describe its cost.
//!
//! Everything downstream — sampling, collection, training and estimation — describes a layer by a
//! [`LayerConfig`] (an [`Op`] plus the shapes it consumes and the batch size) and turns it into numbers with one
//! function, [`LayerConfig::features`]. Keeping a single code path is what makes a model trained on collected
//! rows answer correctly for a layer met later in a user's network.
//!
//! Shapes exclude the batch dimension and use channels-first order: `[C, H, W]` for images, `[features]` for
//! vectors. Element counts and FLOPs include the batch; FLOPs count 2 per multiply-accumulate.

use serde_json::{json, Map, Value};
use std::fmt;

/// A tensor shape without the batch dimension (`[C, H, W]` or `[features]`).
pub type Shape = Vec<usize>;

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

    /// Approximate floating point operations per element, for FLOP counts.
    pub fn flops_per_element(self) -> u64 {
        match self {
            Activation::Linear => 0,
            Activation::Relu | Activation::LeakyRelu => 1,
            Activation::Relu6 => 2,
            Activation::HardSigmoid => 3,
            Activation::HardSwish => 4,
            Activation::Elu | Activation::Sigmoid | Activation::Tanh | Activation::Swish => 4,
            Activation::Gelu => 8,
            Activation::Softmax => 5,
        }
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

impl Padding {
    /// Resolve to explicit `[top, bottom, left, right]` for an input of `[h, w]` (TensorFlow's `same` rule:
    /// output = ceil(in / stride), the odd pixel of padding goes to the bottom/right).
    pub fn resolve(
        &self,
        input: [usize; 2],
        kernel: [usize; 2],
        strides: [usize; 2],
        dilation: [usize; 2],
    ) -> [usize; 4] {
        match *self {
            Padding::Valid => [0; 4],
            Padding::Explicit(p) => p,
            Padding::Same => {
                let mut out = [0usize; 4];
                // Saturating: callers validate sizes afterwards, so absurd values must not panic here.
                for axis in 0..2 {
                    let effective = dilation[axis].saturating_mul(kernel[axis].saturating_sub(1)).saturating_add(1);
                    let out_size = input[axis].div_ceil(strides[axis].max(1));
                    let total = out_size
                        .saturating_sub(1)
                        .saturating_mul(strides[axis])
                        .saturating_add(effective)
                        .saturating_sub(input[axis]);
                    out[axis * 2] = total / 2;
                    out[axis * 2 + 1] = total - total / 2;
                }
                out
            }
        }
    }

    fn to_json(self) -> Value {
        match self {
            Padding::Valid => json!("valid"),
            Padding::Same => json!("same"),
            Padding::Explicit(p) => json!(p),
        }
    }
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
}

impl LayerType {
    pub const ALL: [LayerType; 18] = [
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

    /// Feature names, in the order of [`LayerConfig::features`]. Stable: trained models record them and refuse
    /// to load when they differ.
    pub fn feature_names(self) -> Vec<String> {
        let mut names: Vec<String> = vec!["batch".to_string()];
        let push = |names: &mut Vec<String>, list: &[&str]| names.extend(list.iter().map(|s| s.to_string()));
        match self {
            LayerType::Conv2d => push(
                &mut names,
                &[
                    "in_channels",
                    "in_height",
                    "in_width",
                    "filters",
                    "kernel_h",
                    "kernel_w",
                    "stride_h",
                    "stride_w",
                    "dilation_h",
                    "dilation_w",
                    "groups",
                    "pad_top",
                    "pad_bottom",
                    "pad_left",
                    "pad_right",
                    "use_bias",
                    "out_height",
                    "out_width",
                ],
            ),
            LayerType::DepthwiseConv2d => push(
                &mut names,
                &[
                    "in_channels",
                    "in_height",
                    "in_width",
                    "depth_multiplier",
                    "kernel_h",
                    "kernel_w",
                    "stride_h",
                    "stride_w",
                    "dilation_h",
                    "dilation_w",
                    "pad_top",
                    "pad_bottom",
                    "pad_left",
                    "pad_right",
                    "use_bias",
                    "out_height",
                    "out_width",
                ],
            ),
            LayerType::Dense => push(&mut names, &["in_features", "units", "use_bias"]),
            LayerType::MaxPool2d | LayerType::AvgPool2d => push(
                &mut names,
                &[
                    "channels",
                    "in_height",
                    "in_width",
                    "pool_h",
                    "pool_w",
                    "stride_h",
                    "stride_w",
                    "pad_top",
                    "pad_bottom",
                    "pad_left",
                    "pad_right",
                    "out_height",
                    "out_width",
                ],
            ),
            _ => push(&mut names, &["inputs", "in_dim0", "in_dim1", "in_dim2", "out_dim0", "out_dim1", "out_dim2"]),
        }
        if self.has_activation_feature() {
            for a in Activation::ALL {
                names.push(format!("act_{}", a.as_str()));
            }
        }
        push(&mut names, &["input_elems", "weight_elems", "output_elems", "flops"]);
        names
    }

    fn has_activation_feature(self) -> bool {
        matches!(self, LayerType::Conv2d | LayerType::DepthwiseConv2d | LayerType::Dense | LayerType::Activation)
    }
}

impl fmt::Display for LayerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn out_size(input: usize, pad: usize, kernel: usize, stride: usize, dilation: usize) -> Option<usize> {
    let padded = input + pad;
    let effective = dilation * (kernel - 1) + 1;
    if padded < effective {
        None
    } else {
        Some((padded - effective) / stride + 1)
    }
}

fn image(inputs: &[Shape], what: &str) -> LResult<[usize; 3]> {
    match inputs.first() {
        Some(s) if s.len() == 3 => Ok([s[0], s[1], s[2]]),
        Some(s) => {
            Err(LayerError::new(Some("inputs"), format!("{what} needs a [channels, height, width] input, got {s:?}")))
        }
        None => Err(LayerError::new(Some("inputs"), format!("{what} needs one input"))),
    }
}

fn spatial_output(
    c_h_w: [usize; 3],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilation: [usize; 2],
    padding: &Padding,
    kernel_field: &str,
) -> LResult<([usize; 4], [usize; 2])> {
    let [_, h, w] = c_h_w;
    let pads = padding.resolve([h, w], kernel, strides, dilation);
    let oh = out_size(h, pads[0] + pads[1], kernel[0], strides[0], dilation[0]);
    let ow = out_size(w, pads[2] + pads[3], kernel[1], strides[1], dilation[1]);
    match (oh, ow) {
        (Some(oh), Some(ow)) => Ok((pads, [oh, ow])),
        _ => Err(LayerError::at(
            kernel_field,
            format!(
                "{}x{} (dilated {}x{}) is larger than the padded input {}x{}",
                kernel[0],
                kernel[1],
                dilation[0] * (kernel[0] - 1) + 1,
                dilation[1] * (kernel[1] - 1) + 1,
                h + pads[0] + pads[1],
                w + pads[2] + pads[3]
            ),
        )),
    }
}

/// NumPy-style broadcasting of batch-less shapes (for `add` and `multiply`).
fn broadcast(inputs: &[Shape]) -> LResult<Shape> {
    if inputs.len() < 2 {
        return Err(LayerError::at("inputs", format!("needs at least 2 inputs, got {}", inputs.len())));
    }
    let rank = inputs.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in inputs {
        let offset = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[offset + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(LayerError::at(
                    "inputs",
                    format!("shape mismatch: input shapes {inputs:?} do not broadcast together"),
                ));
            }
        }
    }
    Ok(out)
}

/// Product of sizes, `None` on u64 overflow.
fn checked_product(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    values.into_iter().try_fold(1u64, |acc, v| acc.checked_mul(v))
}

/// Elements of `shape` times `batch`, or why the tensor is too large to be real.
pub fn tensor_elements(shape: &[usize], batch: usize) -> std::result::Result<u64, String> {
    checked_product(shape.iter().chain([&batch]).map(|&d| d as u64)).filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| {
        let times_batch = if batch == 1 { String::new() } else { format!(" times batch {batch}") };
        format!("shape {shape:?}{times_batch} has more than 2^40 elements (4 TiB as f32): too large for any device")
    })
}

fn too_large(field: &str, what: &str) -> LayerError {
    LayerError::at(field, format!("the layer's {what} overflows a 64-bit count: sizes too large for any device"))
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
        }
    }

    /// Whether this op takes several inputs (all others take exactly one). An unsupported ONNX op keeps all the
    /// inputs it had.
    pub fn is_multi_input(&self) -> bool {
        matches!(self, Op::Add | Op::Multiply | Op::Concat { .. } | Op::Unsupported { .. })
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

    /// Check hyperparameters that do not depend on the input (positive sizes, ranges).
    pub fn validate(&self) -> LResult<()> {
        fn positive(field: &str, values: &[usize]) -> LResult<()> {
            if values.contains(&0) {
                Err(LayerError::at(field, format!("must be positive, got {values:?}")))
            } else {
                at_most_max(field, values)
            }
        }
        fn at_most_max(field: &str, values: &[usize]) -> LResult<()> {
            if let Some(v) = values.iter().find(|&&v| v > MAX_SIZE) {
                Err(LayerError::at(field, format!("{v} is too large (at most {MAX_SIZE})")))
            } else {
                Ok(())
            }
        }
        fn padding(field: &str, padding: &Padding) -> LResult<()> {
            match padding {
                Padding::Explicit(p) => at_most_max(field, p),
                Padding::Valid | Padding::Same => Ok(()),
            }
        }
        match self {
            Op::Conv2d(c) => {
                positive("filters", &[c.filters])?;
                positive("kernel", &c.kernel)?;
                positive("strides", &c.strides)?;
                positive("dilation", &c.dilation)?;
                positive("groups", &[c.groups])?;
                padding("padding", &c.padding)?;
                if c.filters % c.groups != 0 {
                    return Err(LayerError::at(
                        "groups",
                        format!("filters ({}) must be divisible by groups ({})", c.filters, c.groups),
                    ));
                }
            }
            Op::DepthwiseConv2d(c) => {
                positive("depth_multiplier", &[c.depth_multiplier])?;
                positive("kernel", &c.kernel)?;
                positive("strides", &c.strides)?;
                positive("dilation", &c.dilation)?;
                padding("padding", &c.padding)?;
            }
            Op::Dense(d) => positive("units", &[d.units])?,
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                positive("pool_size", &p.pool_size)?;
                positive("strides", &p.strides)?;
                padding("padding", &p.padding)?;
            }
            Op::Reshape { target_shape } => {
                if target_shape.iter().filter(|&&d| d == -1).count() > 1 {
                    return Err(LayerError::at("target_shape", "at most one dimension may be -1"));
                }
                if target_shape.iter().any(|&d| d == 0 || d < -1) {
                    return Err(LayerError::at(
                        "target_shape",
                        format!("dimensions must be positive (or one -1), got {target_shape:?}"),
                    ));
                }
                if target_shape.iter().any(|&d| d > 0 && d as u64 > MAX_ELEMENTS) {
                    return Err(LayerError::at("target_shape", format!("{target_shape:?} is too large")));
                }
            }
            Op::ZeroPadding2d { padding } => at_most_max("padding", padding)?,
            Op::Cropping2d { cropping } => at_most_max("cropping", cropping)?,
            Op::Dropout { rate } if !(0.0..1.0).contains(rate) => {
                return Err(LayerError::at("rate", format!("must be in [0, 1), got {rate}")));
            }
            Op::Unsupported { output_shape, .. } => {
                if output_shape.is_empty() || output_shape.contains(&0) {
                    return Err(LayerError::at(
                        "output_shape",
                        format!("must be a non-empty list of positive sizes, got {output_shape:?}"),
                    ));
                }
                tensor_elements(output_shape, 1).map_err(|e| LayerError::at("output_shape", e))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Output shape for the given input shapes, or the reason these inputs are impossible for this op.
    pub fn output_shape(&self, inputs: &[Shape]) -> LResult<Shape> {
        self.validate()?;
        if inputs.is_empty() {
            return Err(LayerError::at("inputs", format!("{} needs at least one input", self.layer_type())));
        }
        if !self.is_multi_input() && inputs.len() != 1 {
            return Err(LayerError::at(
                "inputs",
                format!("{} takes exactly one input, got {}", self.layer_type(), inputs.len()),
            ));
        }
        if let Some(s) = inputs.iter().find(|s| s.contains(&0)) {
            return Err(LayerError::at("inputs", format!("input shape {s:?} has an empty dimension")));
        }
        for s in inputs {
            tensor_elements(s, 1).map_err(|e| LayerError::at("inputs", e))?;
        }
        let out = self.unchecked_output_shape(inputs)?;
        let field = match self {
            Op::Conv2d(_) => "filters",
            Op::DepthwiseConv2d(_) => "depth_multiplier",
            Op::Dense(_) => "units",
            Op::ZeroPadding2d { .. } => "padding",
            Op::Reshape { .. } => "target_shape",
            _ => "inputs",
        };
        tensor_elements(&out, 1).map_err(|e| LayerError::at(field, format!("output {e}")))?;
        Ok(out)
    }

    /// The output shape of validated hyperparameters and input shapes of at most [`MAX_ELEMENTS`] elements.
    fn unchecked_output_shape(&self, inputs: &[Shape]) -> LResult<Shape> {
        Ok(match self {
            Op::Conv2d(c) => {
                let chw = image(inputs, "conv2d")?;
                if chw[0] % c.groups != 0 {
                    return Err(LayerError::at(
                        "groups",
                        format!("input channels ({}) must be divisible by groups ({})", chw[0], c.groups),
                    ));
                }
                let (_, [oh, ow]) = spatial_output(chw, c.kernel, c.strides, c.dilation, &c.padding, "kernel")?;
                vec![c.filters, oh, ow]
            }
            Op::DepthwiseConv2d(c) => {
                let chw = image(inputs, "depthwise_conv2d")?;
                let (_, [oh, ow]) = spatial_output(chw, c.kernel, c.strides, c.dilation, &c.padding, "kernel")?;
                let channels = chw[0]
                    .checked_mul(c.depth_multiplier)
                    .ok_or_else(|| too_large("depth_multiplier", "output channels"))?;
                vec![channels, oh, ow]
            }
            Op::Dense(d) => {
                let s = &inputs[0];
                if s.len() != 1 {
                    return Err(LayerError::at(
                        "inputs",
                        format!(
                            "dense needs a flat [features] input, got {s:?} (add a flatten or global pooling layer)"
                        ),
                    ));
                }
                vec![d.units]
            }
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let chw = image(inputs, self.layer_type().as_str())?;
                let (_, [oh, ow]) = spatial_output(chw, p.pool_size, p.strides, [1, 1], &p.padding, "pool_size")?;
                vec![chw[0], oh, ow]
            }
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                let chw = image(inputs, self.layer_type().as_str())?;
                vec![chw[0]]
            }
            Op::Flatten => vec![inputs[0].iter().product()],
            Op::Reshape { target_shape } => {
                let total: u64 = inputs[0].iter().map(|&d| d as u64).product();
                let known = checked_product(target_shape.iter().filter(|&&d| d > 0).map(|&d| d as u64))
                    .ok_or_else(|| LayerError::at("target_shape", format!("{target_shape:?} is too large")))?;
                let mut out: Shape = Vec::with_capacity(target_shape.len());
                for &d in target_shape {
                    if d == -1 {
                        if known == 0 || total % known != 0 {
                            return Err(LayerError::at(
                                "target_shape",
                                format!("cannot reshape {:?} ({total} elements) to {target_shape:?}", inputs[0]),
                            ));
                        }
                        out.push((total / known) as usize);
                    } else {
                        out.push(d as usize);
                    }
                }
                if checked_product(out.iter().map(|&d| d as u64)) != Some(total) {
                    return Err(LayerError::at(
                        "target_shape",
                        format!("cannot reshape {:?} ({total} elements) to {target_shape:?}", inputs[0]),
                    ));
                }
                out
            }
            Op::Add | Op::Multiply => broadcast(inputs)?,
            Op::Concat { axis } => {
                if inputs.len() < 2 {
                    return Err(LayerError::at(
                        "inputs",
                        format!("concat needs at least 2 inputs, got {}", inputs.len()),
                    ));
                }
                let rank = inputs[0].len();
                let ax = if *axis < 0 { *axis + rank as i64 } else { *axis };
                if ax < 0 || ax >= rank as i64 {
                    return Err(LayerError::at("axis", format!("axis {axis} is out of range for rank {rank}")));
                }
                let ax = ax as usize;
                let mut out = inputs[0].clone();
                for s in &inputs[1..] {
                    let same_other = s.len() == rank && (0..rank).all(|i| i == ax || s[i] == inputs[0][i]);
                    if !same_other {
                        return Err(LayerError::at(
                            "inputs",
                            format!("shape mismatch: cannot concatenate {inputs:?} along axis {axis}"),
                        ));
                    }
                    out[ax] += s[ax];
                }
                out
            }
            Op::Activation(_) | Op::Dropout { .. } => inputs[0].clone(),
            Op::BatchNorm => {
                if inputs[0].is_empty() {
                    return Err(LayerError::at("inputs", "batch_norm needs at least one dimension"));
                }
                inputs[0].clone()
            }
            Op::ZeroPadding2d { padding } => {
                let [c, h, w] = image(inputs, "zero_padding2d")?;
                vec![c, h + padding[0] + padding[1], w + padding[2] + padding[3]]
            }
            Op::Cropping2d { cropping } => {
                let [c, h, w] = image(inputs, "cropping2d")?;
                let (ch, cw) = (cropping[0] + cropping[1], cropping[2] + cropping[3]);
                if ch >= h || cw >= w {
                    return Err(LayerError::at(
                        "cropping",
                        format!("cropping {cropping:?} removes the whole {h}x{w} input"),
                    ));
                }
                vec![c, h - ch, w - cw]
            }
            Op::Unsupported { output_shape, .. } => output_shape.clone(),
        })
    }

    /// Trainable + non-trainable parameters, counted as Keras counts them (batch norm: 4 per channel). Errors
    /// when the count exceeds [`MAX_ELEMENTS`].
    pub fn params(&self, inputs: &[Shape]) -> LResult<u64> {
        let channels = inputs.first().and_then(|s| s.first()).copied().unwrap_or(0) as u64;
        let plus_bias =
            |weights: Option<u64>, use_bias: bool, biases: u64| weights?.checked_add(if use_bias { biases } else { 0 });
        let (count, field) = match self {
            Op::Conv2d(c) => {
                let per_filter =
                    checked_product([c.kernel[0] as u64, c.kernel[1] as u64, channels]).map(|n| n / c.groups as u64);
                let filters = c.filters as u64;
                (plus_bias(per_filter.and_then(|n| n.checked_mul(filters)), c.use_bias, filters), "filters")
            }
            Op::DepthwiseConv2d(c) => {
                let out_c = channels.checked_mul(c.depth_multiplier as u64);
                let weights = out_c.and_then(|n| checked_product([c.kernel[0] as u64, c.kernel[1] as u64, n]));
                (out_c.and_then(|n| plus_bias(weights, c.use_bias, n)), "depth_multiplier")
            }
            Op::Dense(d) => (plus_bias(channels.checked_mul(d.units as u64), d.use_bias, d.units as u64), "units"),
            Op::BatchNorm => (channels.checked_mul(4), "inputs"),
            _ => (Some(0), "inputs"),
        };
        count
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| LayerError::at(field, "more than 2^40 weights (4 TiB as f32): too large for any device"))
    }

    /// Parse one net.json layer object (without `name` / `inputs`, which the network handles).
    pub fn from_json(obj: &Map<String, Value>) -> LResult<Op> {
        let mut f = Fields::new(obj);
        f.used("name");
        f.used("inputs");
        let ty_name = f.req_str("type")?;
        let ty = LayerType::parse(&ty_name).ok_or_else(|| {
            LayerError::at("type", format!("unknown layer type '{ty_name}' (known: {})", LayerType::names_list()))
        })?;
        let op = match ty {
            LayerType::Conv2d => Op::Conv2d(Conv2d {
                filters: f.req_usize("filters")?,
                kernel: f.req_pair("kernel")?,
                strides: f.opt_pair("strides", [1, 1])?,
                dilation: f.opt_pair("dilation", [1, 1])?,
                groups: f.opt_usize("groups", 1)?,
                padding: f.padding("padding")?,
                use_bias: f.opt_bool("use_bias", true)?,
                activation: f.activation("activation", Activation::Linear)?,
            }),
            LayerType::DepthwiseConv2d => Op::DepthwiseConv2d(DepthwiseConv2d {
                depth_multiplier: f.opt_usize("depth_multiplier", 1)?,
                kernel: f.req_pair("kernel")?,
                strides: f.opt_pair("strides", [1, 1])?,
                dilation: f.opt_pair("dilation", [1, 1])?,
                padding: f.padding("padding")?,
                use_bias: f.opt_bool("use_bias", true)?,
                activation: f.activation("activation", Activation::Linear)?,
            }),
            LayerType::Dense => Op::Dense(Dense {
                units: f.req_usize("units")?,
                use_bias: f.opt_bool("use_bias", true)?,
                activation: f.activation("activation", Activation::Linear)?,
            }),
            LayerType::MaxPool2d | LayerType::AvgPool2d => {
                let pool_size = f.opt_pair("pool_size", [2, 2])?;
                let pool =
                    Pool2d { pool_size, strides: f.opt_pair("strides", pool_size)?, padding: f.padding("padding")? };
                if ty == LayerType::MaxPool2d {
                    Op::MaxPool2d(pool)
                } else {
                    Op::AvgPool2d(pool)
                }
            }
            LayerType::GlobalAvgPool2d => Op::GlobalAvgPool2d,
            LayerType::GlobalMaxPool2d => Op::GlobalMaxPool2d,
            LayerType::Flatten => Op::Flatten,
            LayerType::Reshape => Op::Reshape { target_shape: f.req_i64_list("target_shape")? },
            LayerType::Add => Op::Add,
            LayerType::Multiply => Op::Multiply,
            LayerType::Concat => Op::Concat { axis: f.opt_i64("axis", 0)? },
            LayerType::Activation => {
                if !obj.contains_key("function") {
                    return Err(LayerError::at(
                        "function",
                        format!("missing required field (one of {})", Activation::names_list()),
                    ));
                }
                Op::Activation(f.activation("function", Activation::Linear)?)
            }
            LayerType::BatchNorm => Op::BatchNorm,
            LayerType::ZeroPadding2d => Op::ZeroPadding2d { padding: f.quad("padding", [1, 1, 1, 1])? },
            LayerType::Cropping2d => Op::Cropping2d { cropping: f.quad("cropping", [0, 0, 0, 0])? },
            LayerType::Dropout => Op::Dropout { rate: f.opt_f64("rate", 0.5)? },
            LayerType::Unsupported => {
                Op::Unsupported { op_type: f.req_str("op_type")?, output_shape: f.req_usize_list("output_shape")? }
            }
        };
        f.finish(ty)?;
        op.validate()?;
        Ok(op)
    }

    /// The JSON form of this op: `type` plus every hyperparameter, spelled out.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.layer_type().as_str()));
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        match self {
            Op::Conv2d(c) => {
                put("filters", json!(c.filters));
                put("kernel", json!(c.kernel));
                put("strides", json!(c.strides));
                put("dilation", json!(c.dilation));
                put("groups", json!(c.groups));
                put("padding", c.padding.to_json());
                put("use_bias", json!(c.use_bias));
                put("activation", json!(c.activation.as_str()));
            }
            Op::DepthwiseConv2d(c) => {
                put("depth_multiplier", json!(c.depth_multiplier));
                put("kernel", json!(c.kernel));
                put("strides", json!(c.strides));
                put("dilation", json!(c.dilation));
                put("padding", c.padding.to_json());
                put("use_bias", json!(c.use_bias));
                put("activation", json!(c.activation.as_str()));
            }
            Op::Dense(d) => {
                put("units", json!(d.units));
                put("use_bias", json!(d.use_bias));
                put("activation", json!(d.activation.as_str()));
            }
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                put("pool_size", json!(p.pool_size));
                put("strides", json!(p.strides));
                put("padding", p.padding.to_json());
            }
            Op::Reshape { target_shape } => put("target_shape", json!(target_shape)),
            Op::Concat { axis } => put("axis", json!(axis)),
            Op::Activation(a) => put("function", json!(a.as_str())),
            Op::ZeroPadding2d { padding } => put("padding", json!(padding)),
            Op::Cropping2d { cropping } => put("cropping", json!(cropping)),
            Op::Dropout { rate } => put("rate", json!(rate)),
            Op::Unsupported { op_type, output_shape } => {
                put("op_type", json!(op_type));
                put("output_shape", json!(output_shape));
            }
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d | Op::Flatten | Op::Add | Op::Multiply | Op::BatchNorm => {}
        }
        m
    }
}

/// Reads fields of one JSON layer object, remembering which keys were used so unknown keys can be reported.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn new(obj: &'a Map<String, Value>) -> Self {
        Fields { obj, used: Vec::new() }
    }
    fn used(&mut self, key: &'static str) {
        self.used.push(key);
    }
    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.push(key);
        self.obj.get(key).filter(|v| !v.is_null())
    }
    fn missing(key: &str) -> LayerError {
        LayerError::at(key, "missing required field")
    }
    fn as_usize(key: &str, v: &Value) -> LResult<usize> {
        match v.as_u64() {
            Some(n) => Ok(n as usize),
            None => Err(LayerError::at(key, format!("expected a non-negative integer, got {v}"))),
        }
    }
    fn req_str(&mut self, key: &'static str) -> LResult<String> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(LayerError::at(key, format!("expected a string, got {v}"))),
            None => Err(Self::missing(key)),
        }
    }
    fn req_usize(&mut self, key: &'static str) -> LResult<usize> {
        let v = self.get(key).ok_or_else(|| Self::missing(key))?;
        Self::as_usize(key, v)
    }
    fn opt_usize(&mut self, key: &'static str, default: usize) -> LResult<usize> {
        self.get(key).map_or(Ok(default), |v| Self::as_usize(key, v))
    }
    fn opt_i64(&mut self, key: &'static str, default: i64) -> LResult<i64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_i64().ok_or_else(|| LayerError::at(key, format!("expected an integer, got {v}"))),
        }
    }
    fn opt_f64(&mut self, key: &'static str, default: f64) -> LResult<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| LayerError::at(key, format!("expected a number, got {v}"))),
        }
    }
    fn opt_bool(&mut self, key: &'static str, default: bool) -> LResult<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| LayerError::at(key, format!("expected true or false, got {v}"))),
        }
    }
    fn pair_of(key: &str, v: &Value) -> LResult<[usize; 2]> {
        match v {
            Value::Number(_) => {
                let n = Self::as_usize(key, v)?;
                Ok([n, n])
            }
            Value::Array(a) if a.len() == 2 => Ok([Self::as_usize(key, &a[0])?, Self::as_usize(key, &a[1])?]),
            _ => Err(LayerError::at(key, format!("expected an integer or [height, width], got {v}"))),
        }
    }
    fn req_pair(&mut self, key: &'static str) -> LResult<[usize; 2]> {
        let v = self.get(key).ok_or_else(|| Self::missing(key))?;
        Self::pair_of(key, v)
    }
    fn opt_pair(&mut self, key: &'static str, default: [usize; 2]) -> LResult<[usize; 2]> {
        self.get(key).map_or(Ok(default), |v| Self::pair_of(key, v))
    }
    /// `n`, `[h, w]` (symmetric) or `[top, bottom, left, right]`.
    fn quad_of(key: &str, v: &Value) -> LResult<[usize; 4]> {
        match v {
            Value::Array(a) if a.len() == 4 => {
                let mut out = [0; 4];
                for (o, x) in out.iter_mut().zip(a) {
                    *o = Self::as_usize(key, x)?;
                }
                Ok(out)
            }
            Value::Array(a) if a.len() == 2 => {
                let (h, w) = (Self::as_usize(key, &a[0])?, Self::as_usize(key, &a[1])?);
                Ok([h, h, w, w])
            }
            Value::Number(_) => {
                let n = Self::as_usize(key, v)?;
                Ok([n; 4])
            }
            _ => Err(LayerError::at(key, format!("expected n, [h, w] or [top, bottom, left, right], got {v}"))),
        }
    }
    fn quad(&mut self, key: &'static str, default: [usize; 4]) -> LResult<[usize; 4]> {
        self.get(key).map_or(Ok(default), |v| Self::quad_of(key, v))
    }
    fn padding(&mut self, key: &'static str) -> LResult<Padding> {
        match self.get(key) {
            None => Ok(Padding::Valid),
            Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "valid" => Ok(Padding::Valid),
                "same" => Ok(Padding::Same),
                _ => Err(LayerError::at(key, format!("expected \"valid\", \"same\" or [t, b, l, r], got \"{s}\""))),
            },
            Some(v @ (Value::Array(_) | Value::Number(_))) => Self::quad_of(key, v).map(Padding::Explicit),
            Some(v) => Err(LayerError::at(key, format!("expected \"valid\", \"same\" or [t, b, l, r], got {v}"))),
        }
    }
    fn activation(&mut self, key: &'static str, default: Activation) -> LResult<Activation> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::String(s)) => Activation::parse(s).ok_or_else(|| {
                LayerError::at(key, format!("unknown activation '{s}' (known: {})", Activation::names_list()))
            }),
            Some(v) => Err(LayerError::at(key, format!("expected an activation name, got {v}"))),
        }
    }
    fn req_i64_list(&mut self, key: &'static str) -> LResult<Vec<i64>> {
        match self.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_i64().ok_or_else(|| LayerError::at(key, format!("expected integers, got {x}"))))
                .collect(),
            Some(v) => Err(LayerError::at(key, format!("expected a list of integers, got {v}"))),
            None => Err(Self::missing(key)),
        }
    }
    fn req_usize_list(&mut self, key: &'static str) -> LResult<Vec<usize>> {
        match self.get(key) {
            Some(Value::Array(a)) => a.iter().map(|x| Self::as_usize(key, x)).collect(),
            Some(v) => Err(LayerError::at(key, format!("expected a list of integers, got {v}"))),
            None => Err(Self::missing(key)),
        }
    }
    fn finish(self, ty: LayerType) -> LResult<()> {
        for key in self.obj.keys() {
            if !self.used.contains(&key.as_str()) {
                let mut known: Vec<&str> = self.used.iter().copied().filter(|k| *k != "type").collect();
                known.sort();
                known.dedup();
                return Err(LayerError::new(
                    Some(key),
                    format!("unknown key for a {ty} layer (known: {})", known.join(", ")),
                ));
            }
        }
        Ok(())
    }
}

/// One layer in isolation: the unit that is sampled, measured, learned and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerConfig {
    pub op: Op,
    pub input_shapes: Vec<Shape>,
    pub batch: usize,
}

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
    pub fn new(op: Op, input_shapes: Vec<Shape>, batch: usize) -> Self {
        LayerConfig { op, input_shapes, batch }
    }

    pub fn layer_type(&self) -> LayerType {
        self.op.layer_type()
    }

    pub fn output_shape(&self) -> LResult<Shape> {
        if self.batch == 0 {
            return Err(LayerError::at("batch_size", "must be positive"));
        }
        let out = self.op.output_shape(&self.input_shapes)?;
        for s in self.input_shapes.iter().chain([&out]) {
            tensor_elements(s, self.batch).map_err(|e| LayerError::at("batch_size", e))?;
        }
        Ok(out)
    }

    /// Element counts and FLOPs. Errors when the config's shapes are impossible or too large to count.
    pub fn cost(&self) -> LResult<LayerCost> {
        let out = self.output_shape()?;
        // `output_shape` checked that every tensor of the whole batch has at most MAX_ELEMENTS elements.
        let whole_batch = |s: &Shape| s.iter().map(|&d| d as u64).product::<u64>() * self.batch as u64;
        let output_elems = whole_batch(&out);
        let input_elems = self.input_shapes.iter().map(whole_batch).sum();
        let weight_elems = self.op.params(&self.input_shapes)?;
        let kernel_field = match self.op {
            Op::MaxPool2d(_) | Op::AvgPool2d(_) => "pool_size",
            Op::Dense(_) => "units",
            _ => "kernel",
        };
        let flops = self.flops(input_elems, output_elems).ok_or_else(|| too_large(kernel_field, "FLOP count"))?;
        Ok(LayerCost { input_elems, weight_elems, output_elems, flops })
    }

    /// FLOPs of the whole batch (2 per multiply-accumulate), `None` when the count overflows u64.
    fn flops(&self, input_elems: u64, output_elems: u64) -> Option<u64> {
        let in_c = self.input_shapes.first().and_then(|s| s.first()).copied().unwrap_or(1) as u64;
        let extra = |use_bias: bool, activation: Activation| {
            activation.flops_per_element() * output_elems + if use_bias { output_elems } else { 0 }
        };
        let [kh, kw] = match &self.op {
            Op::Conv2d(c) => c.kernel,
            Op::DepthwiseConv2d(c) => c.kernel,
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => p.pool_size,
            _ => [1, 1],
        }
        .map(|k| k as u64);
        Some(match &self.op {
            Op::Conv2d(c) => {
                let macs = checked_product([output_elems, kh, kw, in_c])? / c.groups as u64;
                macs.checked_mul(2)?.checked_add(extra(c.use_bias, c.activation))?
            }
            Op::DepthwiseConv2d(c) => {
                checked_product([2, output_elems, kh, kw])?.checked_add(extra(c.use_bias, c.activation))?
            }
            Op::Dense(d) => checked_product([2, output_elems, in_c])?.checked_add(extra(d.use_bias, d.activation))?,
            Op::MaxPool2d(_) | Op::AvgPool2d(_) => checked_product([output_elems, kh, kw])?,
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => input_elems,
            Op::Add | Op::Multiply => output_elems * (self.input_shapes.len() as u64).saturating_sub(1),
            Op::Activation(a) => a.flops_per_element() * output_elems,
            Op::BatchNorm => 2 * output_elems,
            Op::Flatten
            | Op::Reshape { .. }
            | Op::Concat { .. }
            | Op::Dropout { .. }
            | Op::ZeroPadding2d { .. }
            | Op::Cropping2d { .. }
            | Op::Unsupported { .. } => 0,
        })
    }

    /// The regressors' feature vector, in the order of [`LayerType::feature_names`].
    pub fn features(&self) -> LResult<Vec<f64>> {
        let cost = self.cost()?;
        let out = self.output_shape()?;
        let mut v: Vec<f64> = Vec::with_capacity(48);
        v.push(self.batch as f64);
        let input = &self.input_shapes[0];
        let dim = |s: &Shape, i: usize| s.get(i).copied().unwrap_or(1) as f64;
        let pair = |v: &mut Vec<f64>, p: [usize; 2]| v.extend([p[0] as f64, p[1] as f64]);
        match &self.op {
            Op::Conv2d(c) => {
                let chw = image(&self.input_shapes, "conv2d")?;
                let (pads, _) = spatial_output(chw, c.kernel, c.strides, c.dilation, &c.padding, "kernel")?;
                v.extend([chw[0] as f64, chw[1] as f64, chw[2] as f64, c.filters as f64]);
                pair(&mut v, c.kernel);
                pair(&mut v, c.strides);
                pair(&mut v, c.dilation);
                v.push(c.groups as f64);
                v.extend(pads.iter().map(|&p| p as f64));
                v.extend([c.use_bias as u8 as f64, out[1] as f64, out[2] as f64]);
            }
            Op::DepthwiseConv2d(c) => {
                let chw = image(&self.input_shapes, "depthwise_conv2d")?;
                let (pads, _) = spatial_output(chw, c.kernel, c.strides, c.dilation, &c.padding, "kernel")?;
                v.extend([chw[0] as f64, chw[1] as f64, chw[2] as f64, c.depth_multiplier as f64]);
                pair(&mut v, c.kernel);
                pair(&mut v, c.strides);
                pair(&mut v, c.dilation);
                v.extend(pads.iter().map(|&p| p as f64));
                v.extend([c.use_bias as u8 as f64, out[1] as f64, out[2] as f64]);
            }
            Op::Dense(d) => v.extend([input[0] as f64, d.units as f64, d.use_bias as u8 as f64]),
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let chw = image(&self.input_shapes, "pool")?;
                let (pads, _) = spatial_output(chw, p.pool_size, p.strides, [1, 1], &p.padding, "pool_size")?;
                v.extend([chw[0] as f64, chw[1] as f64, chw[2] as f64]);
                pair(&mut v, p.pool_size);
                pair(&mut v, p.strides);
                v.extend(pads.iter().map(|&p| p as f64));
                v.extend([out[1] as f64, out[2] as f64]);
            }
            _ => {
                v.push(self.input_shapes.len() as f64);
                v.extend([dim(input, 0), dim(input, 1), dim(input, 2)]);
                v.extend([dim(&out, 0), dim(&out, 1), dim(&out, 2)]);
            }
        }
        if self.layer_type().has_activation_feature() {
            let a = self.op.activation().unwrap_or(Activation::Linear);
            v.extend(Activation::ALL.iter().map(|&x| (x == a) as u8 as f64));
        }
        v.extend([cost.input_elems as f64, cost.weight_elems as f64, cost.output_elems as f64, cost.flops as f64]);
        Ok(v)
    }

    /// A stable identity for this config: a hash of its feature values (the resume key of collected data).
    pub fn key(&self) -> LResult<String> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.layer_type().as_str().as_bytes());
        for x in self.features()? {
            h.update(x.to_le_bytes());
        }
        let digest = h.finalize();
        Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
    }

    /// JSON form: the op's fields plus `input_shapes` and `batch_size`.
    pub fn to_json(&self) -> Value {
        let mut m = self.op.to_json();
        m.insert("input_shapes".into(), json!(self.input_shapes));
        m.insert("batch_size".into(), json!(self.batch));
        Value::Object(m)
    }

    pub fn from_json(v: &Value) -> LResult<LayerConfig> {
        let obj = v.as_object().ok_or_else(|| LayerError::new(None, format!("expected a JSON object, got {v}")))?;
        let mut op_obj = obj.clone();
        let shapes = op_obj.remove("input_shapes").ok_or_else(|| Fields::missing("input_shapes"))?;
        let batch = op_obj.remove("batch_size").unwrap_or(json!(1));
        let input_shapes: Vec<Shape> = serde_json::from_value(shapes)
            .map_err(|e| LayerError::at("input_shapes", format!("expected a list of shapes: {e}")))?;
        let batch = batch
            .as_u64()
            .filter(|&b| b > 0)
            .ok_or_else(|| LayerError::at("batch_size", format!("expected a positive integer, got {batch}")))?
            as usize;
        let op = Op::from_json(&op_obj)?;
        let config = LayerConfig { op, input_shapes, batch };
        config.cost()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(filters: usize, k: usize, s: usize, padding: Padding) -> Op {
        let mut c = Conv2d::new(filters, [k, k]);
        c.strides = [s, s];
        c.padding = padding;
        Op::Conv2d(c)
    }

    #[test]
    fn same_padding_matches_tensorflow() {
        // 224 input, 7x7 stride 2: TF pads 2 top / 3 bottom and gives 112.
        assert_eq!(Padding::Same.resolve([224, 224], [7, 7], [2, 2], [1, 1]), [2, 3, 2, 3]);
        let out = conv(64, 7, 2, Padding::Same).output_shape(&[vec![3, 224, 224]]).unwrap();
        assert_eq!(out, vec![64, 112, 112]);
        let out = conv(64, 3, 1, Padding::Valid).output_shape(&[vec![3, 35, 35]]).unwrap();
        assert_eq!(out, vec![64, 33, 33]);
    }

    #[test]
    fn params_and_flops_of_conv_and_dense() {
        let cfg = LayerConfig::new(conv(64, 3, 1, Padding::Same), vec![vec![32, 10, 10]], 2);
        let cost = cfg.cost().unwrap();
        assert_eq!(cost.weight_elems, 3 * 3 * 32 * 64 + 64);
        assert_eq!(cost.output_elems, 2 * 64 * 10 * 10);
        assert_eq!(cost.flops, 2 * (2 * 64 * 100) * 9 * 32 + 2 * 64 * 100);
        let dense = LayerConfig::new(
            Op::Dense(Dense { units: 10, use_bias: true, activation: Activation::Linear }),
            vec![vec![100]],
            1,
        );
        assert_eq!(dense.cost().unwrap().weight_elems, 1010);
        assert_eq!(dense.cost().unwrap().flops, 2 * 1000 + 10);
    }

    #[test]
    fn features_match_names_for_every_type() {
        let configs = vec![
            LayerConfig::new(conv(8, 3, 1, Padding::Same), vec![vec![4, 9, 9]], 1),
            LayerConfig::new(Op::DepthwiseConv2d(DepthwiseConv2d::new([3, 3])), vec![vec![4, 9, 9]], 1),
            LayerConfig::new(
                Op::Dense(Dense { units: 3, use_bias: false, activation: Activation::Relu }),
                vec![vec![7]],
                4,
            ),
            LayerConfig::new(Op::MaxPool2d(Pool2d::new([2, 2])), vec![vec![4, 9, 9]], 1),
            LayerConfig::new(Op::Add, vec![vec![4, 9, 9], vec![4, 9, 9]], 1),
            LayerConfig::new(Op::Activation(Activation::Softmax), vec![vec![10]], 1),
        ];
        for c in configs {
            assert_eq!(c.features().unwrap().len(), c.layer_type().feature_names().len(), "{:?}", c.op);
        }
    }

    #[test]
    fn json_round_trip_and_precise_errors() {
        let op = conv(16, 3, 2, Padding::Explicit([1, 0, 1, 0]));
        let back = Op::from_json(&op.to_json()).unwrap();
        assert_eq!(op, back);
        let bad: Map<String, Value> = serde_json::from_str(r#"{"type":"conv2d","filters":8,"kernal":[3,3]}"#).unwrap();
        let err = Op::from_json(&bad).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("kernel"));
        let bad: Map<String, Value> =
            serde_json::from_str(r#"{"type":"conv2d","filters":8,"kernel":[3,3],"kernal":1}"#).unwrap();
        assert_eq!(Op::from_json(&bad).unwrap_err().field.as_deref(), Some("kernal"));
        let err = conv(8, 7, 1, Padding::Valid).output_shape(&[vec![3, 5, 5]]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("kernel"));
        assert!(err.message.contains("larger than the padded input"), "{err}");
    }

    #[test]
    fn broadcasting_multiply_for_squeeze_excite() {
        assert_eq!(Op::Multiply.output_shape(&[vec![32, 7, 7], vec![32, 1, 1]]).unwrap(), vec![32, 7, 7]);
        assert!(Op::Add.output_shape(&[vec![32, 7, 7], vec![16, 7, 7]]).is_err());
    }
}
