//! Features: the numbers a regressor sees for one layer. Each layer type's columns are listed once, as (name, how
//! to read the value) pairs, and both [`LayerType::feature_names`] and [`LayerConfig::features`] walk that one list,
//! so names and values cannot drift apart. The names are stable: trained models record them and refuse to load
//! when they differ, and a collected row's key is a hash of the values.

use super::shape::{image, spatial_output};
use super::{Activation, LResult, LayerConfig, LayerCost, LayerType, Op, Padding, Shape};

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
const ACTIVATION: &[&[Column]] = &[BATCH, SHAPES, ACTIVATIONS, COST];
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
    }
}

/// What feature values are read from: a valid config and the sizes derived from it, computed once.
struct Layer<'a> {
    batch: usize,
    inputs: &'a [Shape],
    output: Shape,
    cost: LayerCost,
    /// The window of a conv, depthwise conv or pooling layer (the pool size as kernel), zeros for other types.
    window: Window,
    /// Filters (conv2d), depth multiplier (depthwise_conv2d) or units (dense).
    width: usize,
    groups: usize,
    use_bias: bool,
    /// The fused activation or the activation layer's function, linear for other types.
    activation: Activation,
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
    fn new(config: &'a LayerConfig, output: Shape, cost: LayerCost) -> LResult<Layer<'a>> {
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
            _ => (Window::default(), 0, 1, false),
        };
        let activation = config.op.activation().unwrap_or(Activation::Linear);
        Ok(Layer { batch: config.batch, inputs, output, cost, window, width, groups, use_bias, activation })
    }

    /// Dimension `i` of the first input (1 beyond its rank).
    fn input(&self, i: usize) -> f64 {
        self.inputs.first().map_or(1.0, |s| dim(s, i))
    }

    /// Dimension `i` of the output (1 beyond its rank).
    fn output(&self, i: usize) -> f64 {
        dim(&self.output, i)
    }
}

fn dim(shape: &Shape, i: usize) -> f64 {
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
        self.features_of(output, cost)
    }

    /// [`LayerConfig::features`] given the layer's output shape and cost as [`LayerConfig::output_shape`] and
    /// [`LayerConfig::cost`] computed them (a network's analysis has both).
    pub(crate) fn features_of(&self, output: Shape, cost: LayerCost) -> LResult<Vec<f64>> {
        let layer = Layer::new(self, output, cost)?;
        let mut values = Vec::with_capacity(48);
        for part in columns(self.layer_type()) {
            values.extend(part.iter().map(|c| c.value(&layer)));
        }
        Ok(values)
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
        let config = LayerConfig::new(Op::Conv2d(c), vec![vec![3, 9, 8]], 2);
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
}
