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
pub fn host_isa() -> String {
    static ISA: OnceLock<String> = OnceLock::new();
    ISA.get_or_init(|| format!("tract-linalg 0.23.9 {:?}", tract_linalg::isa::native())).clone()
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

/// A dense layer: `units` rows of `k` inputs, `batch` columns, plus the f32 bias.
fn dense_bytes(k: usize, units: usize, batch: usize, bias: bool) -> Option<u64> {
    Some(packed_weight_bytes(units, k, batch)? + if bias { 4 * units as u64 } else { 0 })
}

/// A (grouped) convolution lowered to one matmul per group: `filters / groups` rows, `cin / groups × kh × kw`
/// reduction, one column per output pixel; plus the f32 bias.
#[allow(clippy::too_many_arguments)]
fn conv_bytes(
    cin: usize,
    filters: usize,
    kh: usize,
    kw: usize,
    groups: usize,
    pixels: usize,
    bias: bool,
) -> Option<u64> {
    let groups = groups.max(1);
    let packed = packed_weight_bytes(filters / groups, cin / groups * kh * kw, pixels)?;
    Some(groups as u64 * packed + if bias { 4 * filters as u64 } else { 0 })
}

/// Bytes tract holds for a layer's parameters on this machine: the packed weights of a dense layer or a
/// (grouped) convolution plus its f32 bias; `None` for other layers (their parameters stay plain f32) or when
/// a shape does not validate.
pub fn tract_weight_bytes(config: &LayerConfig) -> Option<u64> {
    match &config.op {
        Op::Dense(d) => dense_bytes(*config.input_shapes.first()?.last()?, d.units, config.batch, d.use_bias),
        Op::Conv2d(c) => {
            let cin = *config.input_shapes.first()?.first()?;
            let out = config.output_shape().ok()?;
            conv_bytes(cin, c.filters, c.kernel[0], c.kernel[1], c.groups, out[1] * out[2], c.use_bias)
        }
        _ => None,
    }
}

/// Where, in a layer type's feature vector, the sizes that decide the packing are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PackedShape {
    Dense { batch: u16, in_features: u16, units: u16, use_bias: u16 },
    Conv2d { batch: u16, in_channels: u16, filters: u16, kernel: [u16; 2], groups: u16, out: [u16; 2], use_bias: u16 },
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
                filters: at("filters")?,
                kernel: [at("kernel_h")?, at("kernel_w")?],
                groups: at("groups")?,
                out: [at("out_height")?, at("out_width")?],
                use_bias: at("use_bias")?,
            }),
            _ => None,
        }
    }

    /// The scratch a convolution's lowering needs while it runs, from a feature vector (0 for dense layers):
    /// - kernel volume ≥ 6 at batch 1: tract gathers lazily from the input (`LazyIm2col`), nothing the size of
    ///   the patches;
    /// - 1×1: the input (strided if need be) is packed for the product, and that takes twice its size while
    ///   packing (`pack_a` / `Im2col`);
    /// - otherwise: an explicit im2col matrix of batch × channels × kernel volume × output pixels.
    ///
    /// The rule is tract 0.23's (`should_use_lazy` in tract-core's conv.rs), and the collected samples follow
    /// it: beyond inputs, weights and outputs, 1×1 convolutions hold a median 2.0× this copy, explicit ones
    /// 1.05× their im2col matrix, lazy ones 0.23× of it (their offset tables).
    pub fn lowering_workspace_bytes(&self, x: &[f64]) -> Option<u64> {
        let get = |i: u16| x.get(i as usize).map(|&v| if v.is_finite() && v > 0.0 { v as u64 } else { 0 });
        match *self {
            PackedShape::Dense { .. } => Some(0),
            PackedShape::Conv2d { batch, in_channels, kernel, out, .. } => {
                let (batch, kernel_volume) = (get(batch)?, get(kernel[0])? * get(kernel[1])?);
                let im2col = 4 * batch * get(in_channels)? * kernel_volume * get(out[0])? * get(out[1])?;
                Some(match kernel_volume {
                    1 => 2 * im2col,
                    v if v >= 6 && batch == 1 => 0,
                    _ => im2col,
                })
            }
        }
    }

    /// Packed weight and bias bytes from a feature vector.
    pub fn packed_bytes(&self, x: &[f64]) -> Option<u64> {
        let get = |i: u16| x.get(i as usize).map(|&v| if v.is_finite() && v > 0.0 { v as usize } else { 0 });
        match *self {
            PackedShape::Dense { batch, in_features, units, use_bias } => {
                dense_bytes(get(in_features)?, get(units)?, get(batch)?, get(use_bias)? > 0)
            }
            PackedShape::Conv2d { in_channels, filters, kernel, groups, out, use_bias, .. } => conv_bytes(
                get(in_channels)?,
                get(filters)?,
                get(kernel[0])?,
                get(kernel[1])?,
                get(groups)?,
                get(out[0])? * get(out[1])?,
                get(use_bias)? > 0,
            ),
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
}
