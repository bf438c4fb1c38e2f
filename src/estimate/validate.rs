//! Validation against real whole-network runs: the estimate of each network next to what `perfmodel bench`
//! measured, with the relative errors and their medians. This is the product's acceptance test on a device (the
//! issue's targets: every network within ±10 % latency, median ≤ 5 %, peak memory within 1 %).

use crate::collect::speed::{follows_probe, median_reading as median_of, network_latency_at_nominal};
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
    /// The measured latency brought to the nominal speed of the device's data (see
    /// [`Validation::with_speed_probe`]); null without a speed probe.
    pub measured_latency_at_nominal_ms: Option<f64>,
    pub latency_error_at_nominal_pct: Option<f64>,
    /// Share of the predicted layer time in layer types that follow the probe ([`follows_probe`]).
    pub probe_following_share: Option<f64>,
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
            measured_latency_at_nominal_ms: None,
            latency_error_at_nominal_pct: None,
            probe_following_share: None,
        }
    }
}

/// The speed probe during a validation, against the nominal probe time of the models' training data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeSpeed {
    pub nominal_ms: f64,
    /// Median of the readings taken between the rounds.
    pub median_ms: f64,
    /// `median_ms / nominal_ms`: above 1, the machine ran slower than while its data was collected.
    pub ratio: f64,
    pub readings: usize,
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
    /// The machine's speed during the runs by the speed probe (`collect::speed`), null when it was not
    /// measured or the models carry no nominal probe time. This VM's speed switches between states 1.5x apart
    /// within seconds, which no model of the layers can predict; the errors at nominal speed take it out.
    pub speed_probe: Option<ProbeSpeed>,
    pub median_abs_latency_error_at_nominal_pct: Option<f64>,
    pub max_abs_latency_error_at_nominal_pct: Option<f64>,
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
            speed_probe: None,
            median_abs_latency_error_at_nominal_pct: None,
            max_abs_latency_error_at_nominal_pct: None,
            networks,
        }
    }
}

impl Validation {
    /// Bring each network's measured rounds to the nominal speed of the models' data and record the errors
    /// there. `readings` are the probe readings of [`crate::engine::profile_networks_between`]'s steps (before
    /// and right after every round's runs), so the timed run of round `r` of network `n` is bracketed by
    /// readings `2k` and `2k + 1`, `k = r * N + n`; only the share of each network's predicted time in layer
    /// types that follow the probe is corrected ([`network_latency_at_nominal`]).
    pub fn with_speed_probe(
        mut self,
        nominal_ms: f64,
        readings: &[f64],
        estimates: &[Estimate],
        measured: &[NetworkProfile],
    ) -> Validation {
        let count = self.networks.len();
        let mut errors = Vec::new();
        for (i, ((row, estimate), profile)) in self.networks.iter_mut().zip(estimates).zip(measured).enumerate() {
            let rounds = &profile.total.round_latency_ms;
            let bracket: Option<Vec<f64>> = (0..rounds.len())
                .map(|r| {
                    let at = 2 * (r * count + i);
                    Some((readings.get(at)? + readings.get(at + 1)?) / 2.0)
                })
                .collect();
            let share = probe_following_share(estimate);
            let Some(at_nominal) = bracket.and_then(|p| network_latency_at_nominal(rounds, &p, nominal_ms, share))
            else {
                continue;
            };
            let error = 100.0 * (row.predicted_latency_ms - at_nominal) / at_nominal;
            row.measured_latency_at_nominal_ms = Some(at_nominal);
            row.latency_error_at_nominal_pct = Some(error);
            row.probe_following_share = Some(share);
            errors.push(error.abs());
        }
        if let Some(median_ms) = median_of(readings) {
            self.speed_probe =
                Some(ProbeSpeed { nominal_ms, median_ms, ratio: median_ms / nominal_ms, readings: readings.len() });
        }
        if errors.len() == count && count > 0 {
            self.max_abs_latency_error_at_nominal_pct = Some(errors.iter().copied().fold(0.0, f64::max));
            self.median_abs_latency_error_at_nominal_pct = Some(median(errors));
        }
        self
    }
}

/// Share (0..1) of an estimate's predicted layer time in layer types whose latency follows the speed probe.
pub fn probe_following_share(estimate: &Estimate) -> f64 {
    let (mut following, mut all) = (0.0, 0.0);
    for l in &estimate.layers {
        let ms = l.latency_ms.unwrap_or(0.0);
        all += ms;
        if follows_probe(l.layer_type) {
            following += ms;
        }
    }
    if all > 0.0 {
        following / all
    } else {
        0.0
    }
}

/// Median (NaN for no values).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, 0.5)
}
