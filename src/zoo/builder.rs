//! A small builder over [`Network`] so architectures read like their Keras definitions: every call appends one
//! layer, consumes the current layer (or explicit inputs) and returns the new layer's name, which branches and
//! residual connections then refer to.

use crate::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, Op, Padding, Pool2d, Shape};
use crate::network::{Layer, Network, INPUT};
use std::collections::HashMap;

/// A `kernel x kernel` convolution with Keras defaults (stride 1, valid padding, bias, linear).
pub fn conv(filters: usize, kernel: usize) -> Conv2d {
    Conv2d::new(filters, [kernel, kernel])
}

/// A `kh x kw` convolution (Inception's factorised 1x7 / 7x1 kernels).
pub fn conv_hw(filters: usize, kh: usize, kw: usize) -> Conv2d {
    Conv2d::new(filters, [kh, kw])
}

/// A `kernel x kernel` depthwise convolution with Keras defaults.
pub fn depthwise(kernel: usize) -> DepthwiseConv2d {
    DepthwiseConv2d::new([kernel, kernel])
}

/// Chainable hyperparameter setters shared by the convolution specs.
pub trait ConvSpec: Sized {
    fn stride(self, s: usize) -> Self;
    fn padding(self, p: Padding) -> Self;
    fn bias(self, use_bias: bool) -> Self;
    fn act(self, a: Activation) -> Self;
    fn same(self) -> Self {
        self.padding(Padding::Same)
    }
    fn no_bias(self) -> Self {
        self.bias(false)
    }
}

/// Both convolution specs have the same field names for these hyperparameters.
macro_rules! impl_conv_spec {
    ($($spec:ty),*) => {$(
        impl ConvSpec for $spec {
            fn stride(mut self, s: usize) -> Self {
                self.strides = [s, s];
                self
            }
            fn padding(mut self, p: Padding) -> Self {
                self.padding = p;
                self
            }
            fn bias(mut self, use_bias: bool) -> Self {
                self.use_bias = use_bias;
                self
            }
            fn act(mut self, a: Activation) -> Self {
                self.activation = a;
                self
            }
        }
    )*};
}

impl_conv_spec!(Conv2d, DepthwiseConv2d);

/// Keras `_make_divisible` / `_depth`: round `v` to a multiple of `divisor`, never dropping more than 10 %.
pub fn make_divisible(v: f64, divisor: usize) -> usize {
    let d = divisor as f64;
    let mut new = (((v + d / 2.0) as usize) / divisor * divisor).max(divisor);
    if (new as f64) < 0.9 * v {
        new += divisor;
    }
    new
}

/// Keras `correct_pad`: the `[top, bottom, left, right]` zero padding placed before a strided "valid" convolution
/// so that it behaves like TensorFlow's "same" padding.
pub fn correct_pad(input_hw: [usize; 2], kernel: usize) -> [usize; 4] {
    let adjust = [1 - input_hw[0] % 2, 1 - input_hw[1] % 2];
    let k = kernel / 2;
    [k - adjust[0], k, k - adjust[1], k]
}

/// Builds a [`Network`] layer by layer, tracking shapes so architectures can size layers from their inputs.
pub struct Builder {
    net: Network,
    current: String,
    shapes: HashMap<String, Shape>,
    auto_names: HashMap<&'static str, usize>,
}

impl Builder {
    pub fn new(name: &str, input_shape: impl Into<Shape>) -> Self {
        let input_shape = input_shape.into();
        let mut shapes = HashMap::new();
        shapes.insert(INPUT.to_string(), input_shape.clone());
        Builder { net: Network::new(name, input_shape), current: INPUT.to_string(), shapes, auto_names: HashMap::new() }
    }

    /// The layer the next call consumes.
    pub fn current(&self) -> String {
        self.current.clone()
    }

    /// Continue from `name` (a branch point).
    pub fn at(&mut self, name: &str) -> &mut Self {
        self.current = name.to_string();
        self
    }

    /// Output shape of a built layer (or of `"input"`).
    pub fn shape(&self, name: &str) -> Shape {
        self.shapes.get(name).cloned().unwrap_or_else(|| panic!("zoo builder: no layer named '{name}'"))
    }

    /// Channels of a built layer's output.
    pub fn channels(&self, name: &str) -> usize {
        self.shape(name)[0]
    }

    /// `[height, width]` of a built layer's output.
    pub fn hw(&self, name: &str) -> [usize; 2] {
        let s = self.shape(name);
        [s[1], s[2]]
    }

    /// A Keras-style automatic name: `prefix`, `prefix_1`, `prefix_2`, ...
    pub fn auto(&mut self, prefix: &'static str) -> String {
        let n = self.auto_names.entry(prefix).or_insert(0);
        let name = if *n == 0 { prefix.to_string() } else { format!("{prefix}_{n}") };
        *n += 1;
        name
    }

    /// Append `op` consuming `inputs`; panics when the architecture code is wrong (the zoo is code, not input).
    pub fn layer_from(&mut self, name: impl Into<String>, op: Op, inputs: &[String]) -> String {
        let name = name.into();
        let previous = self.net.layers.last().map_or(INPUT, |l| l.name.as_str());
        let implicit = inputs.len() == 1 && inputs[0] == previous;
        let input_shapes: Vec<Shape> = inputs.iter().map(|i| self.shape(i)).collect();
        let out = op
            .output_shape(&input_shapes)
            .unwrap_or_else(|e| panic!("zoo network '{}', layer '{name}': {e}", self.net.name));
        let mut layer = Layer::new(name.clone(), op);
        if !implicit {
            layer.inputs = inputs.to_vec();
        }
        assert!(self.shapes.insert(name.clone(), out).is_none(), "zoo builder: duplicate layer name '{name}'");
        self.net.layers.push(layer);
        self.current = name.clone();
        name
    }

    /// Append `op` consuming the current layer.
    pub fn layer(&mut self, name: impl Into<String>, op: Op) -> String {
        let input = self.current.clone();
        self.layer_from(name, op, &[input])
    }

    pub fn conv(&mut self, name: impl Into<String>, spec: Conv2d) -> String {
        self.layer(name, Op::Conv2d(spec))
    }

    pub fn depthwise(&mut self, name: impl Into<String>, spec: DepthwiseConv2d) -> String {
        self.layer(name, Op::DepthwiseConv2d(spec))
    }

    /// Keras `SeparableConv2D`: a depthwise convolution without bias followed by a 1x1 convolution that carries
    /// the separable layer's bias and activation. Returns the name of the 1x1 layer.
    pub fn separable(&mut self, name: &str, filters: usize, kernel: usize, strides: usize, padding: Padding) -> String {
        self.depthwise(format!("{name}_depthwise"), depthwise(kernel).stride(strides).padding(padding).no_bias());
        self.conv(format!("{name}_pointwise"), conv(filters, 1).no_bias())
    }

    pub fn bn(&mut self, name: impl Into<String>) -> String {
        self.layer(name, Op::BatchNorm)
    }

    pub fn act(&mut self, name: impl Into<String>, a: Activation) -> String {
        self.layer(name, Op::Activation(a))
    }

    pub fn relu(&mut self, name: impl Into<String>) -> String {
        self.act(name, Activation::Relu)
    }

    pub fn add(&mut self, name: impl Into<String>, inputs: &[String]) -> String {
        self.layer_from(name, Op::Add, inputs)
    }

    pub fn multiply(&mut self, name: impl Into<String>, inputs: &[String]) -> String {
        self.layer_from(name, Op::Multiply, inputs)
    }

    /// Concatenate along channels.
    pub fn concat(&mut self, name: impl Into<String>, inputs: &[String]) -> String {
        self.layer_from(name, Op::Concat { axis: 0 }, inputs)
    }

    pub fn max_pool(&mut self, name: impl Into<String>, pool: usize, strides: usize, padding: Padding) -> String {
        self.layer(name, Op::MaxPool2d(Pool2d { pool_size: [pool, pool], strides: [strides, strides], padding }))
    }

    pub fn avg_pool(&mut self, name: impl Into<String>, pool: usize, strides: usize, padding: Padding) -> String {
        self.layer(name, Op::AvgPool2d(Pool2d { pool_size: [pool, pool], strides: [strides, strides], padding }))
    }

    pub fn global_avg_pool(&mut self, name: impl Into<String>) -> String {
        self.layer(name, Op::GlobalAvgPool2d)
    }

    /// Keras `GlobalAveragePooling2D(keepdims=True)`: pooling, then a reshape back to `[C, 1, 1]`.
    pub fn global_avg_pool_keepdims(&mut self, name: &str) -> String {
        let pooled = self.global_avg_pool(name.to_string());
        let c = self.channels(&pooled) as i64;
        self.reshape(format!("{name}_keepdims"), vec![c, 1, 1])
    }

    pub fn dense(&mut self, name: impl Into<String>, units: usize, activation: Activation) -> String {
        self.layer(name, Op::Dense(Dense { units, use_bias: true, activation }))
    }

    pub fn flatten(&mut self, name: impl Into<String>) -> String {
        self.layer(name, Op::Flatten)
    }

    pub fn reshape(&mut self, name: impl Into<String>, target_shape: Vec<i64>) -> String {
        self.layer(name, Op::Reshape { target_shape })
    }

    pub fn dropout(&mut self, name: impl Into<String>, rate: f64) -> String {
        self.layer(name, Op::Dropout { rate })
    }

    /// Zero padding `[top, bottom, left, right]`.
    pub fn zero_pad(&mut self, name: impl Into<String>, padding: [usize; 4]) -> String {
        self.layer(name, Op::ZeroPadding2d { padding })
    }

    /// Cropping `[top, bottom, left, right]`.
    pub fn crop(&mut self, name: impl Into<String>, cropping: [usize; 4]) -> String {
        self.layer(name, Op::Cropping2d { cropping })
    }

    pub fn finish(self) -> Network {
        self.net
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keras_rounding_and_padding_helpers() {
        assert_eq!(make_divisible(4.0, 8), 8);
        assert_eq!(make_divisible(72.0, 8), 72);
        assert_eq!(make_divisible(2.3 * 80.0, 8), 184);
        assert_eq!(make_divisible(35.0, 8), 32);
        assert_eq!(make_divisible(9.0, 8), 16);
        assert_eq!(correct_pad([112, 112], 3), [0, 1, 0, 1]);
        assert_eq!(correct_pad([15, 15], 5), [2, 2, 2, 2]);
    }

    #[test]
    fn builder_tracks_shapes_and_writes_implicit_inputs() {
        let mut b = Builder::new("t", vec![3, 8, 8]);
        let a = b.conv("a", conv(4, 3).same());
        let c = b.conv("c", conv(4, 1));
        b.add("sum", &[a.clone(), c]);
        b.at(&a);
        b.max_pool("p", 2, 2, Padding::Valid);
        assert_eq!(b.shape("p")[..], [4, 4, 4]);
        let net = b.finish();
        assert!(net.layers[0].inputs.is_empty() && net.layers[1].inputs.is_empty());
        assert_eq!(net.layers[2].inputs, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(net.layers[3].inputs, vec!["a".to_string()]);
        assert_eq!(net.analyze().unwrap().output_shapes[3][..], [4, 4, 4]);
    }
}
