//! The baselines the paper compares learned models with, so their value is visible side by side.
//!
//! - [`Roofline`] (Paleo, Qi et al. 2017): a layer takes the time to do its arithmetic at the device's peak rate
//!   plus the time to move its tensors at the device's memory bandwidth. Needs only two numbers per device, but
//!   ignores everything that makes real kernels slower than peak.

use crate::estimate::memory::BYTES_PER_ELEMENT;
use crate::layer::LayerCost;

/// A device's peak arithmetic rate and memory bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    pub peak_gflops: f64,
    pub memory_bandwidth_gbs: f64,
}

impl Roofline {
    /// Paleo's layer time: FLOPs / peak FLOP/s + bytes moved (inputs, weights, output; f32) / bandwidth.
    pub fn latency_ms(&self, cost: &LayerCost) -> f64 {
        let bytes = (cost.input_elems + cost.weight_elems + cost.output_elems) * BYTES_PER_ELEMENT;
        1e3 * (cost.flops as f64 / (self.peak_gflops * 1e9) + bytes as f64 / (self.memory_bandwidth_gbs * 1e9))
    }
}
