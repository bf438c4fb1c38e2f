//! The NAS example's kind of candidate as a C caller passes it to `pm_estimate_layers`, shared by the C ABI
//! benchmark (`benches/estimate.rs`) and the allocation test (`tests/allocations.rs`), which include this file.

use perfmodel::ffi::PmLayer;
use perfmodel::layer::{Activation, LayerType};

/// Stem, conv and depthwise-separable blocks, poolings, a residual add (reading `residual_inputs`), a dense head;
/// 11 layers.
pub fn nas_candidate(width: i64, kernel: i64, residual_inputs: &[i64; 2]) -> Vec<PmLayer> {
    let index = |t: LayerType| LayerType::ALL.iter().position(|&x| x == t).unwrap() as i32;
    let relu = Activation::ALL.iter().position(|&a| a == Activation::Relu).unwrap() as i32;
    let conv = |units, k, stride| PmLayer {
        layer_type: index(LayerType::Conv2d),
        units,
        kernel: [k, k],
        strides: [stride, stride],
        padding_mode: 1,
        activation: relu,
        ..PmLayer::default()
    };
    vec![
        conv(width, 3, 2),
        conv(width, kernel, 1),
        PmLayer {
            layer_type: index(LayerType::DepthwiseConv2d),
            kernel: [kernel, kernel],
            padding_mode: 1,
            ..PmLayer::default()
        },
        conv(width, 1, 1),
        PmLayer {
            layer_type: index(LayerType::Add),
            inputs: residual_inputs.as_ptr(),
            n_inputs: 2,
            ..PmLayer::default()
        },
        PmLayer { layer_type: index(LayerType::MaxPool2d), ..PmLayer::default() },
        conv(2 * width, kernel, 1),
        PmLayer { layer_type: index(LayerType::MaxPool2d), ..PmLayer::default() },
        conv(2 * width, 3, 1),
        PmLayer { layer_type: index(LayerType::GlobalAvgPool2d), ..PmLayer::default() },
        PmLayer { layer_type: index(LayerType::Dense), units: 10, ..PmLayer::default() },
    ]
}
