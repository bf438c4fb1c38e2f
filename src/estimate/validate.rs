//! Validation against real whole-network runs: the estimate of each network next to what `perfmodel bench`
//! measured, with the relative errors and their medians. This is the product's acceptance test on a device (the
//! issue's targets: every network within ±10 % latency, median ≤ 5 %, peak memory within 1 %).

use crate::collect::stats::quantile_sorted;
use crate::engine::NetworkProfile;
use crate::estimate::Estimate;
use serde::Serialize;

/// One network, predicted against measured. Errors are signed, in percent of the measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkError {
    pub network: String,
    pub measured_latency_ms: f64,
    pub predicted_latency_ms: f64,
    pub latency_error_pct: f64,
    pub measured_peak_memory_mib: f64,
    pub predicted_peak_memory_mib: f64,
    pub memory_error_pct: f64,
    /// Layers nothing could predict (their time is missing from the prediction).
    pub uncovered_layers: usize,
}

impl NetworkError {
    pub fn new(estimate: &Estimate, measured: &NetworkProfile) -> NetworkError {
        let pct = |predicted: f64, measured: f64| 100.0 * (predicted - measured) / measured;
        NetworkError {
            network: estimate.network.clone(),
            measured_latency_ms: measured.total.latency_ms,
            predicted_latency_ms: estimate.total.latency_ms,
            latency_error_pct: pct(estimate.total.latency_ms, measured.total.latency_ms),
            measured_peak_memory_mib: measured.total.peak_memory_mib,
            predicted_peak_memory_mib: estimate.total.peak_memory_mib,
            memory_error_pct: pct(estimate.total.peak_memory_mib, measured.total.peak_memory_mib),
            uncovered_layers: estimate.uncovered.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub device: String,
    pub method: String,
    pub networks: Vec<NetworkError>,
    /// Median of the absolute errors, percent.
    pub median_abs_latency_error_pct: f64,
    pub median_abs_memory_error_pct: f64,
    pub max_abs_latency_error_pct: f64,
    pub max_abs_memory_error_pct: f64,
    /// How fast the machine ran during this validation relative to when its data was collected: the median
    /// new/stored latency ratio of stored single-layer samples re-measured before and after the benchmarks
    /// (`None` when not measured). A shared VM drifts by ±25% over minutes, which no model can predict.
    pub machine_speed_ratio: Option<f64>,
    /// The latency errors with the prediction scaled by `machine_speed_ratio`: the model's own error under the
    /// machine's state of the moment.
    pub latency_error_at_machine_speed_pct: Option<Vec<f64>>,
    pub median_abs_latency_error_at_machine_speed_pct: Option<f64>,
}

impl Validation {
    pub fn new(device: &str, method: &str, networks: Vec<NetworkError>) -> Validation {
        let abs = |f: fn(&NetworkError) -> f64| -> Vec<f64> { networks.iter().map(|n| f(n).abs()).collect() };
        let latency = abs(|n| n.latency_error_pct);
        let memory = abs(|n| n.memory_error_pct);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        Validation {
            device: device.to_string(),
            method: method.to_string(),
            median_abs_latency_error_pct: median(latency.clone()),
            median_abs_memory_error_pct: median(memory.clone()),
            max_abs_latency_error_pct: max(&latency),
            max_abs_memory_error_pct: max(&memory),
            machine_speed_ratio: None,
            latency_error_at_machine_speed_pct: None,
            median_abs_latency_error_at_machine_speed_pct: None,
            networks,
        }
    }
}

impl Validation {
    /// Record the machine's speed ratio of the moment and the latency errors at that speed.
    pub fn with_machine_speed(mut self, ratio: f64) -> Validation {
        let at_speed: Vec<f64> = self
            .networks
            .iter()
            .map(|n| 100.0 * (n.predicted_latency_ms * ratio - n.measured_latency_ms) / n.measured_latency_ms)
            .collect();
        self.median_abs_latency_error_at_machine_speed_pct = Some(median(at_speed.iter().map(|e| e.abs()).collect()));
        self.latency_error_at_machine_speed_pct = Some(at_speed);
        self.machine_speed_ratio = Some(ratio);
        self
    }
}

/// Median (NaN for no values).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, 0.5)
}
