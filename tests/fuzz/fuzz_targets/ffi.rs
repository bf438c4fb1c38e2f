//! The C ABI's two entries for user data: net.json text (`pm_estimate_json`) and a layer array
//! (`pm_estimate_layers`, every field taken from the input; the pointer fields point at buffers of the lengths
//! they declare, as the header's contract requires).
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfmodel::ffi::{pm_estimate_json, pm_estimate_layers, PmEstimator, PmLayer, PmResult};
use std::ffi::CString;

/// Reads little-endian values off the input, zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn i64(&mut self) -> i64 {
        // Mostly small values, where shapes are valid; sometimes anything.
        let raw = i64::from_le_bytes(self.take::<8>());
        if raw & 1 == 0 { (raw >> 1) % 600 } else { raw >> 1 }
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take::<4>()) % 24
    }
    fn byte(&mut self) -> u8 {
        self.take::<1>()[0]
    }
}

fn handle() -> *const PmEstimator {
    // The estimator the handle wraps is the shared one; the handle itself lives for the process.
    static HANDLE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *HANDLE.get_or_init(|| {
        let models = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models")).unwrap();
        let device = CString::new(std::env::var("PERFMODEL_FUZZ_DEVICE").unwrap_or_else(|_| "xeon480-ort".into()))
            .unwrap();
        let mut out: *mut PmEstimator = std::ptr::null_mut();
        let code = unsafe { perfmodel::ffi::pm_estimator_open(models.as_ptr(), device.as_ptr(), &mut out) };
        assert_eq!(code, 0, "the shipped models open");
        out as usize
    }) as *const PmEstimator
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let mut result = PmResult::default();
    if selector & 1 == 0 {
        let text: Vec<u8> = rest.iter().copied().filter(|&b| b != 0).collect();
        let text = CString::new(text).unwrap();
        let batch = (selector >> 1) as usize % 4;
        unsafe { pm_estimate_json(handle(), text.as_ptr(), batch, &mut result) };
        return;
    }
    let mut bytes = Bytes(rest);
    let n = bytes.byte() as usize % 12;
    let rank = bytes.byte() as usize % 5;
    let input_shape: Vec<i64> = (0..rank).map(|_| bytes.i64()).collect();
    // Per layer: up to 4 reshape targets and 3 inputs, owned here for the call.
    let mut targets: Vec<Vec<i64>> = Vec::new();
    let mut inputs: Vec<Vec<i64>> = Vec::new();
    let mut fields = Vec::new();
    for _ in 0..n {
        let mut layer = PmLayer::default();
        layer.layer_type = bytes.i32();
        layer.activation = bytes.i32();
        layer.units = bytes.i64();
        layer.kernel = [bytes.i64(), bytes.i64()];
        layer.strides = [bytes.i64(), bytes.i64()];
        layer.dilation = [bytes.i64(), bytes.i64()];
        layer.groups = bytes.i64();
        layer.padding_mode = bytes.i32();
        layer.no_bias = bytes.i32();
        layer.pad = [bytes.i64(), bytes.i64(), bytes.i64(), bytes.i64()];
        layer.axis = bytes.i64();
        layer.rate = f64::from_le_bytes(bytes.take::<8>());
        targets.push((0..bytes.byte() as usize % 5).map(|_| bytes.i64()).collect());
        inputs.push((0..bytes.byte() as usize % 4).map(|_| bytes.i64() % 16).collect());
        fields.push(layer);
    }
    for ((layer, target), input) in fields.iter_mut().zip(&targets).zip(&inputs) {
        layer.target_shape = if target.is_empty() { std::ptr::null() } else { target.as_ptr() };
        layer.target_rank = target.len();
        layer.inputs = if input.is_empty() { std::ptr::null() } else { input.as_ptr() };
        layer.n_inputs = input.len();
    }
    let batch = bytes.byte() as usize % 4;
    let layers = if fields.is_empty() { std::ptr::null() } else { fields.as_ptr() };
    let shape = if input_shape.is_empty() { std::ptr::null() } else { input_shape.as_ptr() };
    unsafe { pm_estimate_layers(handle(), layers, fields.len(), shape, input_shape.len(), batch, &mut result) };
});
