//! Features: the numbers a regressor sees for one layer. Each layer type's columns are listed once, as (name, how
//! to read the value) pairs, and both [`LayerType::feature_names`] and [`LayerConfig::features`] walk that one list,
//! so names and values cannot drift apart. The names are stable: trained models record them and refuse to load
//! when they differ, and a collected row's key is a hash of the values.

use super::shape::{image, resolve_axis, spatial_output};
use super::{Activation, LResult, LayerConfig, LayerCost, LayerType, Op, Padding, Shape};

/// A layer's feature values, inline: every query of a network builds one per layer, and the widest layer type
/// has fewer than [`FEATURES_INLINE`] columns.
pub type Features = smallvec::SmallVec<[f64; FEATURES_INLINE]>;

/// Features a row holds inline: at least the most any layer type has.
const FEATURES_INLINE: usize = 48;

/// One feature: its name and how its value is read from a layer.
#[derive(Clone, Copy)]
enum Column {
    /// A number of the layer.
    Number(&'static str, fn(&Layer) -> f64),
    /// 1 when the layer's activation is this one, else 0; named `act_<activation>`.
    Is(Activation),
}

use Column::Number;

impl Column {
    fn name(&self) -> String {
        match self {
            Number(name, _) => name.to_string(),
            Column::Is(a) => format!("act_{}", a.as_str()),
        }
    }

    fn value(&self, layer: &Layer) -> f64 {
        match self {
            Number(_, read) => read(layer),
            Column::Is(a) => (layer.activation == *a) as u8 as f64,
        }
    }
}

const BATCH: &[Column] = &[Number("batch", |l| l.batch as f64)];
const IN_CHANNELS: &[Column] = &[Number("in_channels", |l| l.input(0))];
const IN_HW: &[Column] = &[Number("in_height", |l| l.input(1)), Number("in_width", |l| l.input(2))];
const KERNEL: &[Column] =
    &[Number("kernel_h", |l| l.window.kernel[0] as f64), Number("kernel_w", |l| l.window.kernel[1] as f64)];
const STRIDES: &[Column] =
    &[Number("stride_h", |l| l.window.strides[0] as f64), Number("stride_w", |l| l.window.strides[1] as f64)];
const DILATION: &[Column] =
    &[Number("dilation_h", |l| l.window.dilation[0] as f64), Number("dilation_w", |l| l.window.dilation[1] as f64)];
const PADS: &[Column] = &[
    Number("pad_top", |l| l.window.pads[0] as f64),
    Number("pad_bottom", |l| l.window.pads[1] as f64),
    Number("pad_left", |l| l.window.pads[2] as f64),
    Number("pad_right", |l| l.window.pads[3] as f64),
];
const USE_BIAS: &[Column] = &[Number("use_bias", |l| l.use_bias as u8 as f64)];
const OUT_HW: &[Column] = &[Number("out_height", |l| l.output(1)), Number("out_width", |l| l.output(2))];
/// Layers without a window: how many inputs, the first input's and the output's first three dimensions (1 where
/// the shape is shorter).
const SHAPES: &[Column] = &[
    Number("inputs", |l| l.inputs.len() as f64),
    Number("in_dim0", |l| l.input(0)),
    Number("in_dim1", |l| l.input(1)),
    Number("in_dim2", |l| l.input(2)),
    Number("out_dim0", |l| l.output(0)),
    Number("out_dim1", |l| l.output(1)),
    Number("out_dim2", |l| l.output(2)),
];
/// One-hot activation, in the order of [`Activation::ALL`].
const ACTIVATIONS: &[Column] = &{
    let mut columns = [Column::Is(Activation::Linear); Activation::ALL.len()];
    let mut i = 0;
    while i < columns.len() {
        columns[i] = Column::Is(Activation::ALL[i]);
        i += 1;
    }
    columns
};
const COST: &[Column] = &[
    Number("input_elems", |l| l.cost.input_elems as f64),
    Number("weight_elems", |l| l.cost.weight_elems as f64),
    Number("output_elems", |l| l.cost.output_elems as f64),
    Number("flops", |l| l.cost.flops as f64),
];

/// The columns of each layer type, in order.
const CONV2D: &[&[Column]] = &[
    BATCH,
    IN_CHANNELS,
    IN_HW,
    &[Number("filters", |l| l.width as f64)],
    KERNEL,
    STRIDES,
    DILATION,
    &[Number("groups", |l| l.groups as f64)],
    PADS,
    USE_BIAS,
    OUT_HW,
    ACTIVATIONS,
    COST,
];
const DEPTHWISE_CONV2D: &[&[Column]] = &[
    BATCH,
    IN_CHANNELS,
    IN_HW,
    &[Number("depth_multiplier", |l| l.width as f64)],
    KERNEL,
    STRIDES,
    DILATION,
    PADS,
    USE_BIAS,
    OUT_HW,
    ACTIVATIONS,
    COST,
];
const DENSE: &[&[Column]] = &[
    BATCH,
    &[Number("in_features", |l| l.input(0)), Number("units", |l| l.width as f64)],
    USE_BIAS,
    ACTIVATIONS,
    COST,
];
const POOL2D: &[&[Column]] = &[
    BATCH,
    &[Number("channels", |l| l.input(0))],
    IN_HW,
    &[Number("pool_h", |l| l.window.kernel[0] as f64), Number("pool_w", |l| l.window.kernel[1] as f64)],
    STRIDES,
    PADS,
    OUT_HW,
    COST,
];
/// A matrix product: the broadcast leading axes (their product), M, K, N, whether the right operand is a
/// constant weight, and its bias.
const MATMUL: &[&[Column]] = &[
    BATCH,
    &[
        Number("leading", |l| l.output[..l.output.len().saturating_sub(2)].iter().product::<usize>() as f64),
        Number("rows", |l| if l.output.len() >= 2 { l.output(l.output.len() - 2) } else { 1.0 }),
        Number("depth", |l| l.inputs.first().and_then(|s| s.last()).copied().unwrap_or(1) as f64),
        Number("cols", |l| l.output.last().copied().unwrap_or(1) as f64),
        Number("constant_weight", |l| (l.width > 0) as u8 as f64),
    ],
    USE_BIAS,
    COST,
];
/// A reduction along `axis` (softmax) or over the axes from it (layer norm): how many independent rows, their
/// length, and the stride between a row's elements.
const ROWS: &[Column] = &[
    Number("rows", |l| l.output[..l.axis].iter().product::<usize>() as f64),
    Number(
        "row_size",
        |l| if l.reduces_to_end { l.output[l.axis..].iter().product::<usize>() } else { l.output[l.axis] } as f64,
    ),
    Number(
        "row_stride",
        |l| if l.reduces_to_end { 1.0 } else { l.output[l.axis + 1..].iter().product::<usize>() as f64 },
    ),
];
const LAYER_NORM: &[&[Column]] = &[BATCH, ROWS, COST];
const SOFTMAX: &[&[Column]] = &[BATCH, ROWS, COST];
/// A transpose: the input's rank and first four dimensions, and the run of elements that stays contiguous
/// (the trailing axes the permutation leaves in place; 1 when the last axis moves).
const TRANSPOSE: &[&[Column]] = &[
    BATCH,
    &[
        Number("rank", |l| l.inputs.first().map_or(0, |s| s.len()) as f64),
        Number("in_dim0", |l| l.input(0)),
        Number("in_dim1", |l| l.input(1)),
        Number("in_dim2", |l| l.input(2)),
        Number("in_dim3", |l| l.input(3)),
        Number("contiguous", |l| l.contiguous as f64),
    ],
    COST,
];
const ACTIVATION: &[&[Column]] = &[BATCH, SHAPES, ACTIVATIONS, COST];
/// A table lookup: how many ids, the table's rows and the row's size (`width`).
const EMBEDDING: &[&[Column]] = &[
    BATCH,
    &[
        Number("ids", |l| l.inputs.first().map_or(0, |s| s.iter().product::<usize>()) as f64),
        Number("vocab", |l| l.groups as f64),
        Number("features", |l| l.width as f64),
    ],
    COST,
];
/// An element-wise operation with a constant: the shapes, the function one-hot (add, sub, mul, div; `width` is
/// its place in [`crate::layer::ElementwiseFn::ALL`] plus one) and how many elements the constant has.
const ELEMENTWISE: &[&[Column]] = &[
    BATCH,
    SHAPES,
    &[
        Number("fn_add", |l| (l.width == 1) as u8 as f64),
        Number("fn_sub", |l| (l.width == 2) as u8 as f64),
        Number("fn_mul", |l| (l.width == 3) as u8 as f64),
        Number("fn_div", |l| (l.width == 4) as u8 as f64),
    ],
    COST,
];
const OTHER: &[&[Column]] = &[BATCH, SHAPES, COST];

/// The columns of a layer type, in parts.
fn columns(ty: LayerType) -> &'static [&'static [Column]] {
    match ty {
        LayerType::Conv2d => CONV2D,
        LayerType::DepthwiseConv2d => DEPTHWISE_CONV2D,
        LayerType::Dense => DENSE,
        LayerType::MaxPool2d | LayerType::AvgPool2d => POOL2D,
        LayerType::Activation => ACTIVATION,
        LayerType::GlobalAvgPool2d
        | LayerType::GlobalMaxPool2d
        | LayerType::Flatten
        | LayerType::Reshape
        | LayerType::Add
        | LayerType::Multiply
        | LayerType::Concat
        | LayerType::BatchNorm
        | LayerType::ZeroPadding2d
        | LayerType::Cropping2d
        | LayerType::Dropout
        | LayerType::Unsupported
        | LayerType::ChannelShuffle
        | LayerType::ChannelSlice => OTHER,
        LayerType::MatMul => MATMUL,
        LayerType::LayerNorm => LAYER_NORM,
        LayerType::Softmax => SOFTMAX,
        LayerType::Transpose => TRANSPOSE,
        LayerType::Elementwise => ELEMENTWISE,
        LayerType::Embedding => EMBEDDING,
    }
}

/// What feature values are read from: a valid config and the sizes derived from it, computed once.
struct Layer<'a> {
    batch: usize,
    inputs: &'a [Shape],
    output: &'a [usize],
    cost: LayerCost,
    /// The window of a conv, depthwise conv or pooling layer (the pool size as kernel), zeros for other types.
    window: Window,
    /// Filters (conv2d), depth multiplier (depthwise_conv2d) or units (dense).
    width: usize,
    groups: usize,
    use_bias: bool,
    /// The fused activation or the activation layer's function, linear for other types.
    activation: Activation,
    /// The axis a softmax or layer norm reduces along (0 for other types), and whether the reduction runs over
    /// every axis from it to the last (layer norm) instead of that axis alone.
    axis: usize,
    reduces_to_end: bool,
    /// A transpose's contiguous run: the product of the trailing input axes it leaves in place (1 otherwise).
    contiguous: usize,
}

#[derive(Default)]
struct Window {
    kernel: [usize; 2],
    strides: [usize; 2],
    dilation: [usize; 2],
    /// Resolved `[top, bottom, left, right]` padding.
    pads: [usize; 4],
}

impl Window {
    fn new(
        inputs: &[Shape],
        what: &str,
        (kernel, strides, dilation): ([usize; 2], [usize; 2], [usize; 2]),
        padding: &Padding,
        kernel_field: &str,
    ) -> LResult<Window> {
        let (pads, _) = spatial_output(image(inputs, what)?, kernel, strides, dilation, padding, kernel_field)?;
        Ok(Window { kernel, strides, dilation, pads })
    }
}

impl<'a> Layer<'a> {
    /// The layer of `config`, whose output shape and cost are `output` and `cost`.
    fn new(config: &'a LayerConfig, output: &'a [usize], cost: LayerCost) -> LResult<Layer<'a>> {
        let inputs = &config.input_shapes[..];
        let (window, width, groups, use_bias) = match &config.op {
            Op::Conv2d(c) => {
                let window = Window::new(inputs, "conv2d", (c.kernel, c.strides, c.dilation), &c.padding, "kernel")?;
                (window, c.filters, c.groups, c.use_bias)
            }
            Op::DepthwiseConv2d(c) => {
                let shape = (c.kernel, c.strides, c.dilation);
                let window = Window::new(inputs, "depthwise_conv2d", shape, &c.padding, "kernel")?;
                (window, c.depth_multiplier, 1, c.use_bias)
            }
            Op::Dense(d) => (Window::default(), d.units, 1, d.use_bias),
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let window = Window::new(inputs, "pool", (p.pool_size, p.strides, [1, 1]), &p.padding, "pool_size")?;
                (window, 0, 1, false)
            }
            Op::MatMul { units, use_bias } => (Window::default(), units.unwrap_or(0), 1, *use_bias),
            Op::Embedding { vocab, features } => (Window::default(), *features, *vocab, false),
            Op::Elementwise { function, .. } => {
                let place = crate::layer::ElementwiseFn::ALL.iter().position(|f| f == function).unwrap_or(0);
                (Window::default(), place + 1, 1, false)
            }
            _ => (Window::default(), 0, 1, false),
        };
        let activation = config.op.activation().unwrap_or(Activation::Linear);
        let (axis, reduces_to_end) = match &config.op {
            Op::Softmax { axis } => (resolve_axis(*axis, output.len())?, false),
            Op::LayerNorm { axis, .. } => (resolve_axis(*axis, output.len())?, true),
            _ => (0, false),
        };
        let contiguous = match (&config.op, inputs.first()) {
            (Op::Transpose { perm }, Some(input)) => {
                let kept = perm.iter().enumerate().rev().take_while(|&(i, &p)| i == p).count();
                input[input.len() - kept..].iter().product()
            }
            _ => 1,
        };
        Ok(Layer {
            batch: config.batch,
            inputs,
            output,
            cost,
            window,
            width,
            groups,
            use_bias,
            activation,
            axis,
            reduces_to_end,
            contiguous,
        })
    }

    /// Dimension `i` of the first input (1 beyond its rank).
    fn input(&self, i: usize) -> f64 {
        self.inputs.first().map_or(1.0, |s| dim(s, i))
    }

    /// Dimension `i` of the output (1 beyond its rank).
    fn output(&self, i: usize) -> f64 {
        dim(self.output, i)
    }
}

fn dim(shape: &[usize], i: usize) -> f64 {
    shape.get(i).copied().unwrap_or(1) as f64
}

impl LayerType {
    /// Feature names, in the order of [`LayerConfig::features`]. Stable: trained models record them and refuse
    /// to load when they differ.
    pub fn feature_names(self) -> Vec<String> {
        columns(self).iter().flat_map(|part| part.iter()).map(Column::name).collect()
    }
}

impl LayerConfig {
    /// The regressors' feature vector, in the order of [`LayerType::feature_names`].
    pub fn features(&self) -> LResult<Vec<f64>> {
        let output = self.output_shape()?;
        let cost = self.cost_of_output(&output)?;
        self.features_of(&output, cost).map(Features::into_vec)
    }

    /// [`LayerConfig::features`] given the layer's output shape and cost as [`LayerConfig::output_shape`] and
    /// [`LayerConfig::cost`] computed them (a network's analysis has both).
    pub(crate) fn features_of(&self, output: &[usize], cost: LayerCost) -> LResult<Features> {
        let layer = Layer::new(self, output, cost)?;
        // Written into the inline buffer, not pushed: `SmallVec::extend` checks its storage on every value, and a
        // NAS loop builds a row for every layer of every candidate (docs/budgets.md). Every type's row fits
        // (`every_feature_row_fits_inline`).
        let mut values = [0.0; FEATURES_INLINE];
        let mut len = 0;
        for column in columns(self.layer_type()).iter().flat_map(|part| part.iter()) {
            values[len] = column.value(&layer);
            len += 1;
        }
        Ok(Features::from_buf_and_len(values, len))
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
}

#[cfg(test)]
mod tests {
    use crate::layer::tests::conv;
    use crate::layer::*;

    #[test]
    fn features_match_names_for_every_type() {
        let configs = vec![
            LayerConfig::new(conv(8, 3, 1, Padding::Same), vec![smallvec::smallvec![4, 9, 9]], 1),
            LayerConfig::new(Op::DepthwiseConv2d(DepthwiseConv2d::new([3, 3])), vec![smallvec::smallvec![4, 9, 9]], 1),
            LayerConfig::new(
                Op::Dense(Dense { units: 3, use_bias: false, activation: Activation::Relu }),
                vec![smallvec::smallvec![7]],
                4,
            ),
            LayerConfig::new(Op::MaxPool2d(Pool2d::new([2, 2])), vec![smallvec::smallvec![4, 9, 9]], 1),
            LayerConfig::new(Op::Add, vec![smallvec::smallvec![4, 9, 9], smallvec::smallvec![4, 9, 9]], 1),
            LayerConfig::new(Op::Activation(Activation::Softmax), vec![smallvec::smallvec![10]], 1),
            LayerConfig::new(Op::MatMul { units: Some(8), use_bias: true }, vec![smallvec::smallvec![5, 4]], 2),
            LayerConfig::new(
                Op::MatMul { units: None, use_bias: false },
                vec![smallvec::smallvec![3, 5, 4], smallvec::smallvec![3, 4, 5]],
                1,
            ),
            LayerConfig::new(Op::LayerNorm { axis: -1, epsilon: 1e-5 }, vec![smallvec::smallvec![5, 4]], 1),
            LayerConfig::new(Op::Softmax { axis: -1 }, vec![smallvec::smallvec![3, 5, 5]], 1),
            LayerConfig::new(Op::Transpose { perm: vec![1, 0, 2] }, vec![smallvec::smallvec![5, 3, 4]], 1),
        ];
        for c in configs {
            assert_eq!(c.features().unwrap().len(), c.layer_type().feature_names().len(), "{:?}", c.op);
        }
    }

    /// A query's feature row stays inline ([`Features`]) for every layer type.
    #[test]
    fn every_feature_row_fits_inline() {
        for t in LayerType::ALL {
            assert!(t.feature_names().len() <= super::Features::new().inline_size(), "{t}: {:?}", t.feature_names());
        }
    }

    /// The names trained models and collected data files record (the header of the shipped data).
    #[test]
    fn feature_names_are_stable() {
        let act = "act_linear,act_relu,act_relu6,act_leaky_relu,act_elu,act_gelu,act_sigmoid,act_hard_sigmoid,\
                   act_tanh,act_swish,act_hard_swish,act_softmax";
        let cost = "input_elems,weight_elems,output_elems,flops";
        let pads = "pad_top,pad_bottom,pad_left,pad_right";
        let window = "kernel_h,kernel_w,stride_h,stride_w,dilation_h,dilation_w";
        let image = "batch,in_channels,in_height,in_width";
        let out = "out_height,out_width";
        let shapes = "batch,inputs,in_dim0,in_dim1,in_dim2,out_dim0,out_dim1,out_dim2";
        let expected = [
            (LayerType::Conv2d, format!("{image},filters,{window},groups,{pads},use_bias,{out},{act},{cost}")),
            (
                LayerType::DepthwiseConv2d,
                format!("{image},depth_multiplier,{window},{pads},use_bias,{out},{act},{cost}"),
            ),
            (LayerType::Dense, format!("batch,in_features,units,use_bias,{act},{cost}")),
            (
                LayerType::AvgPool2d,
                format!("batch,channels,in_height,in_width,pool_h,pool_w,stride_h,stride_w,{pads},{out},{cost}"),
            ),
            (LayerType::Activation, format!("{shapes},{act},{cost}")),
            (LayerType::Concat, format!("{shapes},{cost}")),
        ];
        for (ty, names) in expected {
            assert_eq!(ty.feature_names().join(","), names, "{ty}");
        }
        assert_eq!(LayerType::MaxPool2d.feature_names(), LayerType::AvgPool2d.feature_names());
    }

    #[test]
    fn values_are_read_from_the_config() {
        let mut c = Conv2d::new(6, [3, 5]);
        c.strides = [2, 1];
        c.groups = 3;
        c.padding = Padding::Same;
        c.activation = Activation::Relu6;
        let config = LayerConfig::new(Op::Conv2d(c), vec![smallvec::smallvec![3, 9, 8]], 2);
        let names = LayerType::Conv2d.feature_names();
        let features = config.features().unwrap();
        let value = |name: &str| features[names.iter().position(|n| n == name).unwrap()];
        assert_eq!((value("batch"), value("in_channels"), value("in_height"), value("in_width")), (2.0, 3.0, 9.0, 8.0));
        assert_eq!((value("filters"), value("kernel_h"), value("kernel_w"), value("groups")), (6.0, 3.0, 5.0, 3.0));
        assert_eq!((value("stride_h"), value("stride_w"), value("dilation_h")), (2.0, 1.0, 1.0));
        assert_eq!(
            [value("pad_top"), value("pad_bottom"), value("pad_left"), value("pad_right")],
            [1.0, 1.0, 2.0, 2.0]
        );
        assert_eq!((value("use_bias"), value("out_height"), value("out_width")), (1.0, 5.0, 8.0));
        assert_eq!((value("act_relu6"), value("act_linear")), (1.0, 0.0));
        let cost = config.cost().unwrap();
        assert_eq!(value("flops"), cost.flops as f64);
        assert_eq!(value("weight_elems"), cost.weight_elems as f64);
    }

    #[test]
    fn transformer_features_are_read_from_the_config() {
        let values = |config: &LayerConfig| -> Vec<(String, f64)> {
            config.layer_type().feature_names().into_iter().zip(config.features().unwrap()).collect()
        };
        let get = |v: &[(String, f64)], name: &str| v.iter().find(|(n, _)| n == name).unwrap().1;
        // Attention weights times values: 3 heads of [197, 197] by [197, 64].
        let product = LayerConfig::new(
            Op::MatMul { units: None, use_bias: false },
            vec![smallvec::smallvec![3, 197, 197], smallvec::smallvec![3, 197, 64]],
            1,
        );
        let v = values(&product);
        let read: Vec<f64> = ["leading", "rows", "depth", "cols", "constant_weight", "use_bias", "weight_elems"]
            .iter()
            .map(|n| get(&v, n))
            .collect();
        assert_eq!(read, [3.0, 197.0, 197.0, 64.0, 0.0, 0.0, 0.0]);
        assert_eq!(get(&v, "flops"), 2.0 * 3.0 * 197.0 * 197.0 * 64.0);
        let linear =
            LayerConfig::new(Op::MatMul { units: Some(768), use_bias: true }, vec![smallvec::smallvec![197, 192]], 1);
        let v = values(&linear);
        assert_eq!(
            (get(&v, "leading"), get(&v, "rows"), get(&v, "depth"), get(&v, "cols")),
            (1.0, 197.0, 192.0, 768.0)
        );
        assert_eq!((get(&v, "constant_weight"), get(&v, "weight_elems")), (1.0, 192.0 * 768.0 + 768.0));
        // Softmax over the middle axis of [3, 5, 7]: 3 rows of 5 elements, 7 apart.
        let v = values(&LayerConfig::new(Op::Softmax { axis: 1 }, vec![smallvec::smallvec![3, 5, 7]], 1));
        assert_eq!((get(&v, "rows"), get(&v, "row_size"), get(&v, "row_stride")), (3.0, 5.0, 7.0));
        // Layer norm from axis 1 of [3, 5, 7]: 3 rows of 35 contiguous elements, a scale and a bias of 35.
        let v =
            values(&LayerConfig::new(Op::LayerNorm { axis: 1, epsilon: 1e-5 }, vec![smallvec::smallvec![3, 5, 7]], 1));
        assert_eq!((get(&v, "rows"), get(&v, "row_size"), get(&v, "row_stride")), (3.0, 35.0, 1.0));
        assert_eq!(get(&v, "weight_elems"), 70.0);
        // Heads to the front of [197, 3, 64]: rows of 64 stay contiguous; moving the last axis leaves runs of 1.
        let v =
            values(&LayerConfig::new(Op::Transpose { perm: vec![1, 0, 2] }, vec![smallvec::smallvec![197, 3, 64]], 1));
        assert_eq!((get(&v, "rank"), get(&v, "contiguous")), (3.0, 64.0));
        let v =
            values(&LayerConfig::new(Op::Transpose { perm: vec![1, 2, 0] }, vec![smallvec::smallvec![197, 3, 64]], 1));
        assert_eq!(get(&v, "contiguous"), 1.0);
    }
}
