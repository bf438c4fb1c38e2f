//! Costs: element counts, weight counts and FLOPs of a layer, the sizes that features, baselines and memory
//! accounting share. Counts are exact below [`MAX_ELEMENTS`]; a count that would overflow is an error naming the
//! field to blame.

use super::shape::checked_product;
use super::{too_large, Activation, LResult, LayerConfig, LayerCost, LayerError, Op, Shape, MAX_ELEMENTS};

impl Activation {
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
}

impl Op {
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
            Op::MatMul { units: Some(units), use_bias } => {
                let k = inputs.first().and_then(|s| s.last()).copied().unwrap_or(0) as u64;
                (plus_bias(k.checked_mul(*units as u64), *use_bias, *units as u64), "units")
            }
            Op::Embedding { vocab, features } => (checked_product([*vocab as u64, *features as u64]), "vocab"),
            // The constant counts as parameters (a position embedding is learned; a scale is one number).
            Op::Elementwise { constant_shape, .. } => {
                (checked_product(constant_shape.iter().map(|&d| d as u64)), "constant_shape")
            }
            Op::LayerNorm { axis, .. } => {
                let input = inputs.first().map_or(&[][..], |s| &s[..]);
                let normalized = super::shape::resolve_axis(*axis, input.len())
                    .ok()
                    .and_then(|a| checked_product(input[a..].iter().map(|&d| d as u64)));
                (normalized.and_then(|n| n.checked_mul(2)), "axis")
            }
            _ => (Some(0), "inputs"),
        };
        count
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| LayerError::at(field, "more than 2^40 weights (4 TiB as f32): too large for any device"))
    }
}

impl LayerConfig {
    /// Element counts and FLOPs. Errors when the config's shapes are impossible or too large to count.
    pub fn cost(&self) -> LResult<LayerCost> {
        self.cost_of_output(&self.output_shape()?)
    }

    /// [`LayerConfig::cost`] given the layer's output shape, already inferred by [`LayerConfig::output_shape`]
    /// (a network's analysis has it: inferring it again is most of a cached estimate's time).
    pub(crate) fn cost_of_output(&self, out: &Shape) -> LResult<LayerCost> {
        // `output_shape` checked that every tensor of the whole batch has at most MAX_ELEMENTS elements.
        let whole_batch = |s: &Shape| s.iter().map(|&d| d as u64).product::<u64>() * self.batch as u64;
        let output_elems = whole_batch(out);
        let input_elems = self.input_shapes.iter().map(whole_batch).sum();
        let weight_elems = self.op.params(&self.input_shapes)?;
        let kernel_field = match self.op {
            Op::MaxPool2d(_) | Op::AvgPool2d(_) => "pool_size",
            Op::Dense(_) | Op::MatMul { .. } => "units",
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
            Op::MatMul { units, use_bias } => {
                // K, the axis the product sums over: the last of the (first) input.
                let k = self.input_shapes.first().and_then(|s| s.last()).copied().unwrap_or(1) as u64;
                let bias = if units.is_some() && *use_bias { output_elems } else { 0 };
                checked_product([2, output_elems, k])?.checked_add(bias)?
            }
            // Mean, variance, normalise, scale and shift: about 8 operations an element.
            Op::LayerNorm { .. } => 8 * output_elems,
            Op::Softmax { .. } => Activation::Softmax.flops_per_element() * output_elems,
            Op::Elementwise { .. } => output_elems,
            // A copy of one row per id: no arithmetic.
            Op::Embedding { .. } => 0,
            Op::Flatten
            | Op::Reshape { .. }
            | Op::Concat { .. }
            | Op::Dropout { .. }
            | Op::ZeroPadding2d { .. }
            | Op::Cropping2d { .. }
            | Op::Unsupported { .. }
            | Op::ChannelShuffle { .. }
            | Op::Transpose { .. }
            | Op::ChannelSlice { .. } => 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::layer::tests::conv;
    use crate::layer::*;

    #[test]
    fn params_and_flops_of_conv_and_dense() {
        let cfg = LayerConfig::new(conv(64, 3, 1, Padding::Same), vec![smallvec::smallvec![32, 10, 10]], 2);
        let cost = cfg.cost().unwrap();
        assert_eq!(cost.weight_elems, 3 * 3 * 32 * 64 + 64);
        assert_eq!(cost.output_elems, 2 * 64 * 10 * 10);
        assert_eq!(cost.flops, 2 * (2 * 64 * 100) * 9 * 32 + 2 * 64 * 100);
        let dense = LayerConfig::new(
            Op::Dense(Dense { units: 10, use_bias: true, activation: Activation::Linear }),
            vec![smallvec::smallvec![100]],
            1,
        );
        assert_eq!(dense.cost().unwrap().weight_elems, 1010);
        assert_eq!(dense.cost().unwrap().flops, 2 * 1000 + 10);
    }
}
