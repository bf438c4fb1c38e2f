//! Shape inference: the output shape of an op for given input shapes, and the checks that reject impossible or
//! absurdly large layers with the field to blame. Every later stage (costs, features, network analysis) starts from
//! a shape this module accepted.

use super::{too_large, LResult, LayerConfig, LayerError, Op, Padding, Shape, MAX_ELEMENTS, MAX_SIZE};

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

pub(super) fn image(inputs: &[Shape], what: &str) -> LResult<[usize; 3]> {
    match inputs.first() {
        Some(s) if s.len() == 3 => Ok([s[0], s[1], s[2]]),
        Some(s) => {
            Err(LayerError::new(Some("inputs"), format!("{what} needs a [channels, height, width] input, got {s:?}")))
        }
        None => Err(LayerError::new(Some("inputs"), format!("{what} needs one input"))),
    }
}

pub(super) fn spatial_output(
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

/// Axis `axis` of a batch-less shape of rank `rank` (negative counts from the end), or the field's error.
pub fn resolve_axis(axis: i64, rank: usize) -> LResult<usize> {
    let resolved = if axis < 0 { axis + rank as i64 } else { axis };
    if (0..rank as i64).contains(&resolved) {
        Ok(resolved as usize)
    } else {
        Err(LayerError::at("axis", format!("axis {axis} is out of range for an input of rank {rank}")))
    }
}

/// NumPy-style broadcasting of batch-less shapes (for `add` and `multiply`).
fn broadcast(inputs: &[Shape]) -> LResult<Shape> {
    if inputs.len() < 2 {
        return Err(LayerError::at("inputs", format!("needs at least 2 inputs, got {}", inputs.len())));
    }
    let rank = inputs.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out: Shape = smallvec::smallvec![1usize; rank];
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
pub(super) fn checked_product(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    values.into_iter().try_fold(1u64, |acc, v| acc.checked_mul(v))
}

/// Elements of `shape` times `batch`, or why the tensor is too large to be real.
pub fn tensor_elements(shape: &[usize], batch: usize) -> std::result::Result<u64, String> {
    checked_product(shape.iter().chain([&batch]).map(|&d| d as u64)).filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| {
        let times_batch = if batch == 1 { String::new() } else { format!(" times batch {batch}") };
        format!("shape {shape:?}{times_batch} has more than 2^40 elements (4 TiB as f32): too large for any device")
    })
}

impl Op {
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
            Op::ChannelShuffle { groups } if *groups == 0 || *groups > MAX_SIZE => {
                return Err(LayerError::at("groups", format!("must be 1 to {MAX_SIZE}, got {groups}")));
            }
            Op::ChannelSlice { start, end } => {
                at_most_max("end", &[*end])?;
                if start >= end {
                    return Err(LayerError::at("end", format!("must be above start ({start}), got {end}")));
                }
            }
            Op::MatMul { units, use_bias } => {
                if let Some(units) = units {
                    positive("units", &[*units])?;
                } else if *use_bias {
                    return Err(LayerError::at(
                        "use_bias",
                        "a bias needs a constant weight: give `units`, or set use_bias to false for a product of two inputs",
                    ));
                }
            }
            Op::LayerNorm { epsilon, .. } => {
                if !(epsilon.is_finite() && *epsilon > 0.0) {
                    return Err(LayerError::at("epsilon", format!("must be a positive number, got {epsilon}")));
                }
            }
            Op::Softmax { .. } => {}
            Op::Elementwise { constant_shape, .. } => at_most_max("constant_shape", constant_shape)?,
            Op::Embedding { vocab, features } => {
                positive("vocab", &[*vocab])?;
                positive("features", &[*features])?;
            }
            Op::Transpose { perm } => {
                let mut seen = vec![false; perm.len()];
                for &p in perm {
                    match seen.get_mut(p) {
                        Some(s) if !*s => *s = true,
                        _ => {
                            return Err(LayerError::at(
                                "perm",
                                format!("{perm:?} is not a permutation of 0..{} (the input's axes)", perm.len()),
                            ))
                        }
                    }
                }
            }
            Op::Dropout { rate } => {
                if !(0.0..1.0).contains(rate) {
                    return Err(LayerError::at("rate", format!("must be in [0, 1), got {rate}")));
                }
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
                smallvec::smallvec![c.filters, oh, ow]
            }
            Op::DepthwiseConv2d(c) => {
                let chw = image(inputs, "depthwise_conv2d")?;
                let (_, [oh, ow]) = spatial_output(chw, c.kernel, c.strides, c.dilation, &c.padding, "kernel")?;
                let channels = chw[0]
                    .checked_mul(c.depth_multiplier)
                    .ok_or_else(|| too_large("depth_multiplier", "output channels"))?;
                smallvec::smallvec![channels, oh, ow]
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
                smallvec::smallvec![d.units]
            }
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let chw = image(inputs, self.layer_type().as_str())?;
                let (_, [oh, ow]) = spatial_output(chw, p.pool_size, p.strides, [1, 1], &p.padding, "pool_size")?;
                smallvec::smallvec![chw[0], oh, ow]
            }
            Op::GlobalAvgPool2d | Op::GlobalMaxPool2d => {
                let chw = image(inputs, self.layer_type().as_str())?;
                smallvec::smallvec![chw[0]]
            }
            Op::Flatten => smallvec::smallvec![inputs[0].iter().product()],
            Op::Reshape { target_shape } => {
                let total: u64 = inputs[0].iter().map(|&d| d as u64).product();
                let known = checked_product(target_shape.iter().filter(|&&d| d > 0).map(|&d| d as u64))
                    .ok_or_else(|| LayerError::at("target_shape", format!("{target_shape:?} is too large")))?;
                let mut out = Shape::with_capacity(target_shape.len());
                for &d in target_shape {
                    if d == -1 {
                        if known == 0 || !total.is_multiple_of(known) {
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
                smallvec::smallvec![c, h + padding[0] + padding[1], w + padding[2] + padding[3]]
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
                smallvec::smallvec![c, h - ch, w - cw]
            }
            Op::Unsupported { output_shape, .. } => output_shape.clone(),
            Op::ChannelShuffle { groups } => {
                let channels = image(inputs, "channel_shuffle")?[0];
                if !channels.is_multiple_of(*groups) {
                    return Err(LayerError::at(
                        "groups",
                        format!("{groups} groups do not divide the input's {channels} channels"),
                    ));
                }
                inputs[0].clone()
            }
            Op::MatMul { units: Some(units), .. } => {
                let mut out = inputs[0].clone();
                *out.last_mut().ok_or_else(|| LayerError::at("inputs", "matmul needs an input of rank 1 or more"))? =
                    *units;
                out
            }
            Op::MatMul { units: None, .. } => {
                let [a, b] = inputs else {
                    return Err(LayerError::at(
                        "inputs",
                        format!("a matmul without units multiplies exactly 2 inputs, got {}", inputs.len()),
                    ));
                };
                if a.len() < 2 || b.len() < 2 {
                    return Err(LayerError::at(
                        "inputs",
                        format!("a matmul of two inputs needs [..., M, K] and [..., K, N], got {a:?} and {b:?}"),
                    ));
                }
                let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
                let (k2, n) = (b[b.len() - 2], b[b.len() - 1]);
                if k != k2 {
                    return Err(LayerError::at(
                        "inputs",
                        format!("inner sizes differ: {a:?} times {b:?} ({k} against {k2})"),
                    ));
                }
                let mut out = broadcast(&[Shape::from_slice(&a[..a.len() - 2]), Shape::from_slice(&b[..b.len() - 2])])
                    .map_err(|e| LayerError::at("inputs", format!("leading axes of {a:?} and {b:?}: {}", e.message)))?;
                out.extend([m, n]);
                out
            }
            Op::LayerNorm { axis, .. } => {
                resolve_axis(*axis, inputs[0].len())?;
                inputs[0].clone()
            }
            Op::Softmax { axis } => {
                resolve_axis(*axis, inputs[0].len())?;
                inputs[0].clone()
            }
            Op::Embedding { features, .. } => {
                let mut out = inputs[0].clone();
                out.push(*features);
                out
            }
            Op::Elementwise { constant_shape, .. } => {
                let input = &inputs[0];
                let together = broadcast(&[input.clone(), constant_shape.clone()]).map_err(|_| {
                    LayerError::at(
                        "constant_shape",
                        format!("{constant_shape:?} does not broadcast over the input {input:?}"),
                    )
                })?;
                if &together != input {
                    return Err(LayerError::at(
                        "constant_shape",
                        format!("{constant_shape:?} would enlarge the input {input:?} to {together:?}"),
                    ));
                }
                input.clone()
            }
            Op::Transpose { perm } => {
                if perm.len() != inputs[0].len() {
                    return Err(LayerError::at(
                        "perm",
                        format!(
                            "{perm:?} orders {} axes, the input {:?} has {}",
                            perm.len(),
                            inputs[0],
                            inputs[0].len()
                        ),
                    ));
                }
                perm.iter().map(|&p| inputs[0][p]).collect()
            }
            Op::ChannelSlice { start, end } => {
                // The first axis (channels of an image, tokens of a sequence).
                let Some(&channels) = inputs[0].first() else {
                    return Err(LayerError::new(Some("inputs"), "channel_slice needs an input of rank 1 or more"));
                };
                if *end > channels {
                    return Err(LayerError::at("end", format!("{end} is beyond the input's {channels} channels")));
                }
                let mut shape = inputs[0].clone();
                shape[0] = end - start;
                shape
            }
        })
    }
}

impl LayerConfig {
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
}

#[cfg(test)]
mod tests {
    use crate::layer::tests::conv;
    use crate::layer::*;

    #[test]
    fn same_padding_matches_tensorflow() {
        // 224 input, 7x7 stride 2: TF pads 2 top / 3 bottom and gives 112.
        assert_eq!(Padding::Same.resolve([224, 224], [7, 7], [2, 2], [1, 1]), [2, 3, 2, 3]);
        let out = conv(64, 7, 2, Padding::Same).output_shape(&[smallvec::smallvec![3, 224, 224]]).unwrap();
        assert_eq!(out[..], [64, 112, 112]);
        let out = conv(64, 3, 1, Padding::Valid).output_shape(&[smallvec::smallvec![3, 35, 35]]).unwrap();
        assert_eq!(out[..], [64, 33, 33]);
    }

    #[test]
    fn broadcasting_multiply_for_squeeze_excite() {
        assert_eq!(
            Op::Multiply.output_shape(&[smallvec::smallvec![32, 7, 7], smallvec::smallvec![32, 1, 1]]).unwrap()[..],
            [32, 7, 7]
        );
        assert!(Op::Add.output_shape(&[smallvec::smallvec![32, 7, 7], smallvec::smallvec![16, 7, 7]]).is_err());
    }

    #[test]
    fn transformer_layers_have_the_shapes_pytorch_gives_them() {
        let linear = Op::MatMul { units: Some(768), use_bias: true };
        assert_eq!(linear.output_shape(&[smallvec::smallvec![197, 192]]).unwrap()[..], [197, 768]);
        assert_eq!(linear.output_shape(&[smallvec::smallvec![192]]).unwrap()[..], [768]);
        let product = Op::MatMul { units: None, use_bias: false };
        // Queries [heads, tokens, head size] times keys transposed; leading axes broadcast.
        assert_eq!(
            product.output_shape(&[smallvec::smallvec![3, 197, 64], smallvec::smallvec![3, 64, 197]]).unwrap()[..],
            [3, 197, 197]
        );
        assert_eq!(
            product.output_shape(&[smallvec::smallvec![2, 3, 5, 4], smallvec::smallvec![3, 4, 6]]).unwrap()[..],
            [2, 3, 5, 6]
        );
        assert_eq!(product.output_shape(&[smallvec::smallvec![5, 4], smallvec::smallvec![4, 6]]).unwrap()[..], [5, 6]);
        let norm = Op::LayerNorm { axis: -1, epsilon: 1e-5 };
        assert_eq!(norm.output_shape(&[smallvec::smallvec![197, 192]]).unwrap()[..], [197, 192]);
        assert_eq!(Op::Softmax { axis: 1 }.output_shape(&[smallvec::smallvec![3, 7, 7]]).unwrap()[..], [3, 7, 7]);
        let transpose = Op::Transpose { perm: vec![1, 2, 0] };
        assert_eq!(transpose.output_shape(&[smallvec::smallvec![197, 3, 64]]).unwrap()[..], [3, 64, 197]);
        // A constant broadcast from the right: a scale, a position embedding, a mask over the keys.
        let constant = |shape: Vec<usize>| Op::Elementwise {
            function: super::super::ElementwiseFn::Add,
            constant_shape: shape.into(),
        };
        for shape in [vec![], vec![197, 192], vec![192], vec![1, 192]] {
            assert_eq!(constant(shape).output_shape(&[smallvec::smallvec![197, 192]]).unwrap()[..], [197, 192]);
        }
        assert_eq!(constant(vec![197]).output_shape(&[smallvec::smallvec![12, 128, 197]]).unwrap()[..], [12, 128, 197]);
        // One that does not broadcast, or would enlarge the input, names its field.
        for shape in [vec![196, 192], vec![2, 197, 192]] {
            let err = constant(shape).output_shape(&[smallvec::smallvec![197, 192]]).unwrap_err();
            assert_eq!(err.field, Some("constant_shape".into()), "{err:?}");
        }
    }

    #[test]
    fn impossible_transformer_layers_name_their_field() {
        let product = Op::MatMul { units: None, use_bias: false };
        let field = |op: &Op, inputs: &[Shape]| op.output_shape(inputs).unwrap_err().field;
        assert_eq!(
            field(&product, &[smallvec::smallvec![3, 5, 4], smallvec::smallvec![3, 5, 6]]),
            Some("inputs".into()),
            "inner sizes differ"
        );
        assert_eq!(
            field(&product, &[smallvec::smallvec![2, 5, 4], smallvec::smallvec![3, 4, 6]]),
            Some("inputs".into()),
            "leading axes"
        );
        assert_eq!(field(&product, &[smallvec::smallvec![5, 4]]), Some("inputs".into()), "one input");
        assert_eq!(
            field(&product, &[smallvec::smallvec![4], smallvec::smallvec![4, 6]]),
            Some("inputs".into()),
            "a vector"
        );
        let biased = Op::MatMul { units: None, use_bias: true };
        assert_eq!(field(&biased, &[smallvec::smallvec![5, 4], smallvec::smallvec![4, 6]]), Some("use_bias".into()));
        let no_units = Op::MatMul { units: Some(0), use_bias: false };
        assert_eq!(field(&no_units, &[smallvec::smallvec![5, 4]]), Some("units".into()));
        let norm = Op::LayerNorm { axis: 2, epsilon: 1e-5 };
        assert_eq!(field(&norm, &[smallvec::smallvec![5, 4]]), Some("axis".into()));
        let norm = Op::LayerNorm { axis: -1, epsilon: 0.0 };
        assert_eq!(field(&norm, &[smallvec::smallvec![5, 4]]), Some("epsilon".into()));
        assert_eq!(field(&Op::Softmax { axis: -3 }, &[smallvec::smallvec![5, 4]]), Some("axis".into()));
        assert_eq!(field(&Op::Transpose { perm: vec![0, 0] }, &[smallvec::smallvec![5, 4]]), Some("perm".into()));
        assert_eq!(field(&Op::Transpose { perm: vec![1, 0] }, &[smallvec::smallvec![5, 4, 3]]), Some("perm".into()));
        assert_eq!(field(&Op::Transpose { perm: vec![2, 0] }, &[smallvec::smallvec![5, 4]]), Some("perm".into()));
    }
}
