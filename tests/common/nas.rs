//! The NAS example's kind of candidate as a C caller passes it to `pm_estimate_layers`, and the estimator it asks,
//! shared by the C ABI benchmark (`benches/estimate.rs`), the allocation test (`tests/allocations.rs`) and the
//! instruction count (`examples/nas_calls.rs`), which include this file.

use perfmodel::ffi::{pm_estimator_open_method, PmEstimator, PmLayer};
use perfmodel::layer::{Activation, LayerType};
use std::ffi::CString;

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

/// `device`'s learned estimator through the C ABI, with the models under `models` and the shipped data and
/// profiles; the status code when it does not open.
pub fn open_estimator(models: &str, device: &str) -> Result<*mut PmEstimator, i32> {
    let root = env!("CARGO_MANIFEST_DIR");
    let c = |s: &str| CString::new(s).expect("no NUL in a path or name");
    let (models, data, collectors) = (c(models), c(&format!("{root}/data")), c(&format!("{root}/collectors")));
    let (name, method) = (c(device), c("learned"));
    let mut handle: *mut PmEstimator = std::ptr::null_mut();
    // SAFETY: every argument is a NUL-terminated string that outlives the call; `handle` is written on success.
    let code = unsafe {
        pm_estimator_open_method(
            models.as_ptr(),
            data.as_ptr(),
            collectors.as_ptr(),
            name.as_ptr(),
            method.as_ptr(),
            &mut handle,
        )
    };
    if code == 0 {
        Ok(handle)
    } else {
        Err(code)
    }
}
