//! How many bytes tract keeps for a weighted layer's packed weights, asked of tract-linalg's own kernel dispatch.
//!
//! tract packs a matmul's weights (m × k) into panels of the chosen kernel's `mr` rows. Which kernel it picks
//! depends on m, k and n (a 128×1 GEMV kernel for n = 1, an 80×2 or 16×12 tile otherwise on AVX-512), so the
//! resident weights are not the f32 weights: a dense layer of 129 units at batch 1 holds 256 rows of packed
//! weights, twice its f32 size, and 145 rows at batch 8. No regressor on (units, batch) recovers that
//! staircase from a few thousand samples, but the engine answers it exactly and in microseconds.

use crate::layer::{LayerConfig, LayerType, Op};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tract_linalg::mmm::Query;
use tract_linalg::MmmDispatch;
use tract_onnx::prelude::{DatumType, TDim};

/// The instruction set tract-linalg dispatches kernels on here, with the tract version: models that count
/// packed weights record it, because another CPU picks other kernels and packs differently.
pub fn host_isa() -> &'static str {
    static ISA: OnceLock<String> = OnceLock::new();
    ISA.get_or_init(|| format!("tract-linalg 0.23.9 {:?}", tract_linalg::isa::native()))
}

/// Bytes of the weights of an f32 matmul of `m` output rows, reduction `k` and `n` columns once packed for the
/// kernel tract-linalg picks on this machine; `None` if no kernel fits (never for f32 on supported CPUs).
/// Answers are cached: kernel dispatch allocates, and a NAS loop asks the same shapes over and over.
pub fn packed_weight_bytes(m: usize, k: usize, n: usize) -> Option<u64> {
    static CACHE: OnceLock<Mutex<HashMap<(usize, usize, usize), Option<u64>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(&known) = cache.lock().ok()?.get(&(m, k, n)) {
        return known;
    }
    let bytes = dispatch_packed_bytes(m, k, n);
    if let Ok(mut c) = cache.lock() {
        c.insert((m, k, n), bytes);
    }
    bytes
}

fn dispatch_packed_bytes(m: usize, k: usize, n: usize) -> Option<u64> {
    if m == 0 || k == 0 || n == 0 {
        return Some(0);
    }
    let query = Query::plain(DatumType::F32, Some(m), Some(k), Some(n));
    let (kernel, packing, _) = MmmDispatch::native().pick(&query)?;
    let format = &kernel.packings().get(packing)?.0;
    format.mem_size(TDim::from(k), TDim::from(m)).to_i64().ok().and_then(|b| u64::try_from(b).ok())
}

/// Feature `i` of `x` as a count (0 for anything not finite and positive); `None` when `x` is too short.
fn count(x: &[f64], i: u16) -> Option<usize> {
    x.get(i as usize).map(|&v| if v.is_finite() && v > 0.0 { v as usize } else { 0 })
}

/// A dense layer: `units` rows of `k` inputs, `batch` columns, plus the f32 bias.
fn dense_bytes(k: usize, units: usize, batch: usize, bias: bool) -> Option<u64> {
    Some(packed_weight_bytes(units, k, batch)? + if bias { 4 * units as u64 } else { 0 })
}

/// A convolution's sizes as tract's lowering sees them (one batch item's output is `out_h × out_w`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvShape {
    pub batch: usize,
    pub in_channels: usize,
    pub in_width: usize,
    pub filters: usize,
    pub kernel: [usize; 2],
    pub groups: usize,
    pub out: [usize; 2],
    pub use_bias: bool,
}

/// How tract 0.23.9 runs a convolution on this machine, in the order its conv codegen tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvLowering {
    /// 1×1: a matrix product over a packed copy of the (strided) input (`pack_a` / `Im2col`).
    Pointwise,
    /// `DirectSpatialConv`: f32, one group, 2+ taps, at most 576 inputs per output point, rows of 128+.
    DirectSpatial,
    /// `LazyIm2col` + matrix product (batch 1: 6+ taps, a patch matrix of 4 MiB or more, or one row panel).
    Lazy,
    /// `DepthWise`: one filter per channel.
    DepthWise,
    /// An explicit im2col matrix + matrix product.
    Im2col,
}

impl ConvShape {
    fn kernel_volume(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    fn pixels(&self) -> usize {
        self.out[0].saturating_mul(self.out[1])
    }

    /// Rows, reduction and columns of one group's matrix product.
    fn matmul(&self) -> (usize, usize, usize) {
        let groups = self.groups.max(1);
        (self.filters / groups, (self.in_channels / groups).saturating_mul(self.kernel_volume()), self.pixels())
    }

    /// Mirrors tract-core 0.23.9's `Conv::codegen` (`can_direct_spatial`, `should_use_lazy`), asking tract-linalg
    /// the same questions it asks (routines present, the preferred kernel's rows). 1×1 convolutions are turned
    /// into products earlier by tract's declutter, with the input packed.
    pub fn lowering(&self) -> ConvLowering {
        let kernel_volume = self.kernel_volume();
        if kernel_volume == 1 {
            return ConvLowering::Pointwise;
        }
        let depthwise = self.groups > 1 && self.groups == self.in_channels && self.groups == self.filters;
        let direct = self.groups == 1
            && self.in_channels.saturating_mul(kernel_volume) <= 576
            && tract_linalg::routines::conv_w4_f32().is_some()
            && (self.filters % 4 == 0 || tract_linalg::routines::depthwise_w_f32().is_some())
            && self.in_width >= 128
            && self.out[1] >= 128;
        if direct {
            return ConvLowering::DirectSpatial;
        }
        if !depthwise && self.batch == 1 {
            let (m, k, n) = self.matmul();
            let eager_bytes = k.saturating_mul(n).saturating_mul(4);
            let one_panel = || {
                let mr = MmmDispatch::native()
                    .preferred_kernel(DatumType::F32, Some(m.max(1)), Some(k), Some(n))
                    .map_or(1, |kernel| kernel.mr());
                m.max(1) <= mr
            };
            if kernel_volume >= 6 || eager_bytes >= 4 << 20 || one_panel() {
                return ConvLowering::Lazy;
            }
        }
        if depthwise {
            return ConvLowering::DepthWise;
        }
        ConvLowering::Im2col
    }

    /// Bytes of the weights and bias tract holds: packed for the matrix product, plain f32 for the direct and
    /// depthwise kernels.
    pub fn weight_bytes(&self) -> Option<u64> {
        let bias = if self.use_bias { 4 * self.filters as u64 } else { 0 };
        let (m, k, n) = self.matmul();
        let groups = self.groups.max(1) as u64;
        let weights = match self.lowering() {
            ConvLowering::DirectSpatial | ConvLowering::DepthWise => {
                4u64.saturating_mul(groups).saturating_mul(m as u64).saturating_mul(k as u64)
            }
            _ => groups.saturating_mul(packed_weight_bytes(m, k, n)?),
        };
        Some(weights.saturating_add(bias))
    }

    /// The scratch the lowering needs while it runs, beyond inputs, weights and outputs. The collected samples
    /// follow it: beyond those, 1×1 convolutions hold a median 2.0× the input copy, explicit im2col 1.05× the
    /// patch matrix, lazy ones 0.23× of what the patch matrix would be (their offset tables).
    pub fn workspace_bytes(&self) -> u64 {
        let patches = 4u64
            .saturating_mul(self.batch as u64)
            .saturating_mul(self.in_channels as u64)
            .saturating_mul(self.kernel_volume() as u64)
            .saturating_mul(self.pixels() as u64);
        match self.lowering() {
            ConvLowering::Pointwise => patches.saturating_mul(2),
            ConvLowering::Im2col => patches,
            ConvLowering::DirectSpatial | ConvLowering::Lazy | ConvLowering::DepthWise => 0,
        }
    }
}

/// Bytes tract holds for a layer's parameters on this machine: the packed weights of a dense layer or a
/// convolution (plain for the direct and depthwise kernels) plus its f32 bias; `None` for other layers (their
/// parameters stay plain f32) or when a shape does not validate.
pub fn tract_weight_bytes(config: &LayerConfig) -> Option<u64> {
    match &config.op {
        Op::Dense(d) => dense_bytes(*config.input_shapes.first()?.last()?, d.units, config.batch, d.use_bias),
        Op::Conv2d(c) => {
            let input = config.input_shapes.first()?;
            let out = config.output_shape().ok()?;
            ConvShape {
                batch: config.batch,
                in_channels: *input.first()?,
                in_width: *input.get(2)?,
                filters: c.filters,
                kernel: c.kernel,
                groups: c.groups,
                out: [out[1], out[2]],
                use_bias: c.use_bias,
            }
            .weight_bytes()
        }
        _ => None,
    }
}

/// Where, in a layer type's feature vector, the sizes that decide the packing are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PackedShape {
    Dense {
        batch: u16,
        in_features: u16,
        units: u16,
        use_bias: u16,
    },
    Conv2d {
        batch: u16,
        in_channels: u16,
        in_width: u16,
        filters: u16,
        kernel: [u16; 2],
        groups: u16,
        out: [u16; 2],
        use_bias: u16,
    },
}

impl PackedShape {
    /// For dense and conv2d (from their [`LayerType::feature_names`]); `None` for other types.
    pub fn for_layer(layer_type: LayerType, names: &[String]) -> Option<PackedShape> {
        let at = |name: &str| names.iter().position(|f| f == name).and_then(|i| u16::try_from(i).ok());
        match layer_type {
            LayerType::Dense => Some(PackedShape::Dense {
                batch: at("batch")?,
                in_features: at("in_features")?,
                units: at("units")?,
                use_bias: at("use_bias")?,
            }),
            LayerType::Conv2d => Some(PackedShape::Conv2d {
                batch: at("batch")?,
                in_channels: at("in_channels")?,
                in_width: at("in_width")?,
                filters: at("filters")?,
                kernel: [at("kernel_h")?, at("kernel_w")?],
                groups: at("groups")?,
                out: [at("out_height")?, at("out_width")?],
                use_bias: at("use_bias")?,
            }),
            _ => None,
        }
    }

    /// The convolution's sizes from a feature vector (`None` for dense layers or unreadable features).
    fn conv(&self, x: &[f64]) -> Option<ConvShape> {
        let get = |i| count(x, i);
        match *self {
            PackedShape::Dense { .. } => None,
            PackedShape::Conv2d { batch, in_channels, in_width, filters, kernel, groups, out, use_bias } => {
                Some(ConvShape {
                    batch: get(batch)?,
                    in_channels: get(in_channels)?,
                    in_width: get(in_width)?,
                    filters: get(filters)?,
                    kernel: [get(kernel[0])?, get(kernel[1])?],
                    groups: get(groups)?,
                    out: [get(out[0])?, get(out[1])?],
                    use_bias: get(use_bias)? > 0,
                })
            }
        }
    }

    /// The scratch a convolution's lowering needs while it runs ([`ConvShape::workspace_bytes`]); 0 for dense.
    pub fn lowering_workspace_bytes(&self, x: &[f64]) -> Option<u64> {
        match self {
            PackedShape::Dense { .. } => Some(0),
            PackedShape::Conv2d { .. } => self.conv(x).map(|c| c.workspace_bytes()),
        }
    }

    /// Weight and bias bytes as tract holds them, from a feature vector.
    pub fn packed_bytes(&self, x: &[f64]) -> Option<u64> {
        let get = |i| count(x, i);
        match *self {
            PackedShape::Dense { batch, in_features, units, use_bias } => {
                dense_bytes(get(in_features)?, get(units)?, get(batch)?, get(use_bias)? > 0)
            }
            PackedShape::Conv2d { .. } => self.conv(x)?.weight_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::{Activation, Conv2d, Dense, Padding};

    #[test]
    fn packed_weights_cover_at_least_the_f32_weights() {
        for (m, k, n) in [(10, 1000, 1), (129, 4000, 1), (129, 4000, 2), (129, 4000, 8), (1822, 2054, 1)] {
            let bytes = packed_weight_bytes(m, k, n).unwrap();
            assert!(bytes >= (m * k * 4) as u64, "{m}x{k}x{n}: {bytes}");
            // Panels pad m to the kernel's rows, at most doubling a 129-row matrix.
            assert!(bytes <= (2 * m.next_multiple_of(128) * k * 4) as u64, "{m}x{k}x{n}: {bytes}");
            assert_eq!(packed_weight_bytes(m, k, n), Some(bytes), "cached answer");
        }
        assert_eq!(packed_weight_bytes(0, 10, 1), Some(0));
    }

    #[test]
    fn features_and_configs_give_the_same_packed_size() {
        let dense = LayerConfig::new(
            Op::Dense(Dense { units: 129, use_bias: true, activation: Activation::Relu }),
            vec![vec![300]],
            2,
        );
        let mut grouped = Conv2d::new(60, [3, 3]);
        grouped.groups = 3;
        grouped.padding = Padding::Same;
        let conv = LayerConfig::new(Op::Conv2d(grouped), vec![vec![24, 14, 14]], 1);
        for config in [dense, conv] {
            let layer_type = config.layer_type();
            let shape = PackedShape::for_layer(layer_type, &layer_type.feature_names()).unwrap();
            let from_features = shape.packed_bytes(&config.features().unwrap()).unwrap();
            assert_eq!(Some(from_features), tract_weight_bytes(&config), "{layer_type:?}");
            assert!(from_features >= config.cost().unwrap().weight_elems * 4);
        }
        assert!(PackedShape::for_layer(LayerType::MaxPool2d, &LayerType::MaxPool2d.feature_names()).is_none());
    }

    #[test]
    fn convolutions_are_lowered_in_tracts_order() {
        let conv = |batch, in_channels, width, filters, k: usize, groups| ConvShape {
            batch,
            in_channels,
            in_width: width,
            filters,
            kernel: [k, k],
            groups,
            out: [width, width],
            use_bias: false,
        };
        assert_eq!(conv(1, 64, 56, 256, 1, 1).lowering(), ConvLowering::Pointwise);
        // 3x3 on 13x13: lazy gathering at batch 1, an explicit patch matrix at batch 2 (lazy needs one item).
        assert_eq!(conv(1, 256, 13, 256, 3, 1).lowering(), ConvLowering::Lazy);
        let batch2 = conv(2, 256, 13, 256, 3, 1);
        assert_eq!(batch2.lowering(), ConvLowering::Im2col);
        assert_eq!(batch2.workspace_bytes(), 4 * 2 * 256 * 9 * 13 * 13);
        // A depthwise convolution written as conv2d: plain weights, no patch matrix.
        let depthwise = conv(2, 32, 28, 32, 3, 32);
        assert_eq!(depthwise.lowering(), ConvLowering::DepthWise);
        assert_eq!(depthwise.weight_bytes(), Some(4 * 32 * 9));
        assert_eq!(depthwise.workspace_bytes(), 0);
        // VGG's second convolution (64 -> 64 on 224x224) runs direct where tract has the kernels for it.
        if tract_linalg::routines::conv_w4_f32().is_some() {
            let direct = conv(8, 64, 224, 64, 3, 1);
            assert_eq!(direct.lowering(), ConvLowering::DirectSpatial);
            assert_eq!(direct.workspace_bytes(), 0);
            assert_eq!(direct.weight_bytes(), Some(4 * 64 * 64 * 9));
        }
    }
}
