//! The machine-speed probe: one fixed convolution, timed next to the measurements, so that latencies taken in
//! different minutes can be compared.
//!
//! Why: the speed of a shared machine (a 2-vCPU KVM guest whose cores are shared, say) swings by
//! 1.4x within a minute: the same network measured 278 ms and, a minute later, 201 ms. A dataset collected over
//! an hour mixes such spells into its targets (stored samples re-measured later differ by a median 16.5%), and a
//! validation run lands in one of them. Re-measuring a few stored samples next to the runs helps less than it
//! seems, because each stored time carries its own spell. A fixed workload timed next to every sample gives both
//! sides one yardstick: the collector records it with every row (`speed_ref_ms`), training learns latency at the
//! collection's median probe time (the *nominal* speed), and `validate`/`calibrate` time the same probe between
//! their rounds. A drift experiment on a shared VM found that dividing by an adjacent compute-bound
//! reference halves the noise of compute-bound convolutions (robust CV 14.7% -> 6.3%), which is where networks
//! spend their time; memory-bound layers do not follow it, so the probe is a correction for compute, not a
//! universal clock.

use crate::cpu_clock::time_both;
use crate::engine::{Executor, Workload};
use crate::error::{Error, Result};
use crate::layer::{LayerConfig, LayerType};
use crate::stats::quantile_sorted;
use std::time::{Duration, Instant};

/// The probe: a 3x3 convolution, 128 -> 128 channels on 14x14, batch 1 (58 MFLOP, about 2 ms with tract on one
/// x86 server core). Its weights (576 KiB) fit in L2, so it measures the core's speed rather than
/// a cache regime of the engine.
pub const PROBE_CONFIG: &str = r#"{"activation":"relu","batch_size":1,"dilation":[1,1],"filters":128,"groups":1,"input_shapes":[[128,14,14]],"kernel":[3,3],"padding":"same","strides":[1,1],"type":"conv2d","use_bias":true}"#;

/// How long a speed-probe reading stands for the machine's speed: at most one reading per this interval. It
/// keeps the probe's share of a collection of fast layers to a few percent, and it keeps the probe away from
/// most runs of a small network: run right before them, it slowed mnist_cnn (2 ms) by a fifth, even with an
/// untimed run of the network in between.
pub const PROBE_MAX_AGE: Duration = Duration::from_millis(250);

/// Timed runs per reading; the reading is their median.
const RUNS_PER_READING: usize = 3;

/// The probe's layer config.
pub fn probe_config() -> LayerConfig {
    let json: serde_json::Value = serde_json::from_str(PROBE_CONFIG).expect("PROBE_CONFIG is valid JSON");
    LayerConfig::from_json(&json).expect("PROBE_CONFIG is a valid conv2d config")
}

/// The probe's key ([`LayerConfig::key`]): stored with trained models, so a store and a measurement that used
/// different probes are never compared.
pub fn probe_key() -> String {
    probe_config().key().expect("PROBE_CONFIG has a key")
}

/// The built probe, with its last reading.
pub struct SpeedProbe {
    workload: Box<dyn Workload>,
    /// When the last reading was taken, and its value (ms).
    last: Option<(Instant, f64)>,
    /// The last reading on the calling thread's CPU clock ([`crate::cpu_clock`]), ms.
    last_cpu: Option<f64>,
}

impl SpeedProbe {
    /// Build the probe with `executor` and run it `burn_in` times (at least once).
    pub fn new(executor: &dyn Executor, burn_in: usize) -> Result<SpeedProbe> {
        let own = executor.probe_executor()?;
        let executor = own.as_deref().unwrap_or(executor);
        let mut workload = executor
            .prepare_layer(&probe_config())
            .map_err(|e| Error::Executor(format!("building the speed probe ({PROBE_CONFIG}): {e}")))?;
        for _ in 0..burn_in.max(1) {
            workload.run()?;
        }
        Ok(SpeedProbe { workload, last: None, last_cpu: None })
    }

    /// Time the probe now: the median of a few runs, in ms (wall clock; [`SpeedProbe::last_cpu_ms`] has the
    /// same runs on the CPU clock).
    pub fn measure(&mut self) -> Result<f64> {
        let mut wall = [0.0; RUNS_PER_READING];
        let mut cpu = [0.0; RUNS_PER_READING];
        let mut cpu_readable = true;
        for (w, c) in wall.iter_mut().zip(&mut cpu) {
            let (ran, wall_ms, cpu_ms) = time_both(|| self.workload.run());
            ran?;
            *w = wall_ms;
            match cpu_ms {
                Some(ms) => *c = ms,
                None => cpu_readable = false,
            }
        }
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        let ms = wall[RUNS_PER_READING / 2];
        self.last = Some((Instant::now(), ms));
        self.last_cpu = cpu_readable.then(|| cpu[RUNS_PER_READING / 2]);
        Ok(ms)
    }

    /// The CPU-clock median of the runs of the last reading, ms (`None` before the first reading or when the
    /// CPU clock cannot be read).
    pub fn last_cpu_ms(&self) -> Option<f64> {
        self.last_cpu
    }

    /// The last reading if it is younger than `max_age`, else a new one: keeps the probe's share of a
    /// collection of fast layers small (one reading per `max_age` at most).
    pub fn reading(&mut self, max_age: Duration) -> Result<f64> {
        match self.last {
            Some((at, ms)) if at.elapsed() < max_age => Ok(ms),
            _ => self.measure(),
        }
    }
}

/// The nominal probe time of a dataset: the median of its rows' `speed_ref_ms`, `None` when no row has one.
pub fn nominal_ms(readings: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = readings.into_iter().filter(|x| x.is_finite() && *x > 0.0).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, 0.5))
}

/// Median of the readings taken while something was measured.
pub fn median_reading(readings: &[f64]) -> Option<f64> {
    nominal_ms(readings.iter().copied())
}

/// How far a probe-following layer's time moves with the probe's: a layer runs `(probe / nominal)^e` times its
/// nominal time. Fitted on the 111 stored samples of `local` re-measured with probe readings on both sides
/// (`data/local/repeatability.json`): the slope of log(new / stored time) on log(new /
/// stored probe reading) is 0.65 over all of them and 0.70 for conv2d (72 samples), and the median absolute
/// log difference after the correction is 0.099 at e = 0.7 against 0.116 at e = 1 and 0.177 uncorrected.
/// Layers slow less than the compute-bound probe: part of their time goes to memory traffic and overhead.
pub const PROBE_ELASTICITY: f64 = 0.7;

/// The factor by which a probe-following layer runs slower at probe time `probe_ms` than at `nominal_ms`.
pub fn speed_factor(probe_ms: f64, nominal_ms: f64) -> f64 {
    (probe_ms / nominal_ms).powf(PROBE_ELASTICITY)
}

/// A latency measured at probe time `probe_ms`, brought to the speed at which the probe takes `nominal_ms`.
pub fn at_nominal_speed(latency_ms: f64, probe_ms: f64, nominal_ms: f64) -> f64 {
    latency_ms / speed_factor(probe_ms, nominal_ms)
}

/// Whether a layer type's latency follows the probe, i.e. moves with the machine's speed as the probe does.
/// Only these are brought to nominal speed in training, and only their share of a network's predicted time is
/// corrected when a whole-network run is compared with an estimate. Measured: 159 stored samples of `local`
/// re-measured in a fresh process (`collect --remeasure 160 --seed 11`) differed from
/// their stored time by a median of 27.6% raw and 12.5% divided by their probe readings for conv2d (72
/// samples), 17.1% and 8.9% for avg_pool2d (10), 11.7% and 9.9% for dense (14), 11.2% and 10.2% for depthwise
/// (14). Max pooling is the same sliding-window kernel as average pooling. The cheap element-wise, normalisation
/// and shape layers do not follow it: 120 of their samples re-measured the same way (seed 12)
/// differed by a median 10.8% raw and 15.2% divided by their probe readings.
pub fn follows_probe(layer_type: LayerType) -> bool {
    matches!(
        layer_type,
        LayerType::Conv2d | LayerType::DepthwiseConv2d | LayerType::Dense | LayerType::MaxPool2d | LayerType::AvgPool2d
    )
}

/// Rounds whose probe readings lie within this fraction of the nominal time count as run at nominal speed.
pub const NEAR_NOMINAL: f64 = 0.10;

/// Fewest rounds near nominal speed that [`network_latency_at_nominal`] uses on their own: two turns of
/// `validate`'s default `--block` of 5, half its default 20 rounds. The rounds of a small network share probe
/// readings (one stands for 250 ms), so a single turn can rest on one stray reading: a 2-ms network whose
/// machine ran at 0.67x the nominal probe time had one turn "near nominal" that ran as fast as the rest.
pub const MIN_ROUNDS_NEAR_NOMINAL: usize = 10;

/// Which rounds ran near nominal speed: those whose probe reading is within [`NEAR_NOMINAL`] of it.
pub fn rounds_near_nominal(round_probe_ms: &[f64], nominal_ms: f64) -> Vec<usize> {
    (0..round_probe_ms.len()).filter(|&i| (round_probe_ms[i] / nominal_ms - 1.0).abs() <= NEAR_NOMINAL).collect()
}

/// A whole-network latency at nominal speed from its timed rounds: the median round divided by the machine's
/// speed during them (the median of the probe readings around the rounds over the nominal time), applied to the
/// share of the network's time that follows the probe (`following_share`, 0..1). When at least
/// [`MIN_ROUNDS_NEAR_NOMINAL`] rounds ran near nominal speed ([`rounds_near_nominal`]), only those count: the
/// machine was then measured at the speed the estimate is for, and the correction is small. Far from nominal
/// one elasticity does not describe every network: in runs at 0.66-0.71x the nominal probe time the convolution
/// networks came out 18-26% faster than it predicts, at 1.07-1.15x within 7%. Medians rather than each round
/// divided by its own readings: a round of a large network (yolo: 0.3 s) spans several of a shared VM's speed
/// switches, which a probe reading of 6 ms next to it does not see, so round-by-round division added noise (at
/// a median probe of 0.98x nominal, a yolo whose median round was 271 ms came out at 312 ms). `None` without
/// rounds or readings.
pub fn network_latency_at_nominal(
    round_ms: &[f64],
    round_probe_ms: &[f64],
    nominal_ms: f64,
    following_share: f64,
) -> Option<f64> {
    if round_ms.is_empty() || round_ms.len() != round_probe_ms.len() || !(nominal_ms > 0.0) {
        return None;
    }
    let near = rounds_near_nominal(round_probe_ms, nominal_ms);
    let (round_ms, round_probe_ms): (Vec<f64>, Vec<f64>) = if near.len() >= MIN_ROUNDS_NEAR_NOMINAL {
        near.iter().map(|&i| (round_ms[i], round_probe_ms[i])).unzip()
    } else {
        (round_ms.to_vec(), round_probe_ms.to_vec())
    };
    let share = following_share.clamp(0.0, 1.0);
    let (latency, probe) = (median_reading(&round_ms)?, median_reading(&round_probe_ms)?);
    Some(latency / (share * speed_factor(probe, nominal_ms) + 1.0 - share))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_config_is_a_plain_conv() {
        let c = probe_config();
        assert_eq!(c.layer_type(), crate::layer::LayerType::Conv2d);
        assert_eq!(c.batch, 1);
        assert_eq!(probe_key(), probe_key());
    }

    #[test]
    fn nominal_is_the_median_of_finite_positive_readings() {
        assert_eq!(nominal_ms([3.0, 1.0, 2.0, f64::NAN, 0.0]), Some(2.0));
        assert_eq!(nominal_ms([]), None);
        assert!((at_nominal_speed(10.0, 2.5, 2.0) - 10.0 / 1.25f64.powf(PROBE_ELASTICITY)).abs() < 1e-12);
        assert_eq!(at_nominal_speed(10.0, 2.0, 2.0), 10.0);
    }

    #[test]
    fn network_rounds_are_corrected_by_the_probe_readings_around_them() {
        // Rounds at the nominal speed and twice at a 1.5x slower probe, where a following layer runs
        // 1.5^e times slower: fully following, all come back to 10.
        let slow = 1.5f64.powf(PROBE_ELASTICITY);
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        let rounds = [10.0, 10.0 * slow, 10.0 * slow];
        let probe = [2.0, 3.0, 3.0];
        assert!(close(network_latency_at_nominal(&rounds, &probe, 2.0, 1.0), 10.0));
        // Half the time follows: that half is 1.5^e slower.
        let half = 10.0 * (0.5 * slow + 0.5);
        let rounds = [10.0, half, half];
        assert!(close(network_latency_at_nominal(&rounds, &probe, 2.0, 0.5), 10.0));
        // Nothing follows: the plain median.
        assert_eq!(network_latency_at_nominal(&rounds, &probe, 2.0, 0.0), Some(half));
        assert_eq!(network_latency_at_nominal(&rounds, &probe[..2], 2.0, 1.0), None);
        assert_eq!(network_latency_at_nominal(&[], &[], 2.0, 1.0), None);
    }

    #[test]
    fn rounds_near_nominal_speed_are_used_alone_when_there_are_enough() {
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // Ten rounds at 1.05x the nominal probe, eleven in a fast state that the elasticity does not describe
        // (the network ran 40% faster at a 30% faster probe).
        let near = 10.0 * 1.05f64.powf(PROBE_ELASTICITY);
        let mut rounds = vec![near; 10];
        let mut probe = vec![2.1; 10];
        rounds.extend([6.0; 11]);
        probe.extend([1.4; 11]);
        assert_eq!(rounds_near_nominal(&probe, 2.0), (0..10).collect::<Vec<_>>());
        assert!(close(network_latency_at_nominal(&rounds, &probe, 2.0, 1.0), 10.0));
        // Nine near rounds are too few: all rounds count, as before.
        let all = network_latency_at_nominal(&rounds[1..], &probe[1..], 2.0, 1.0).unwrap();
        let fast = 6.0 / 0.7f64.powf(PROBE_ELASTICITY);
        assert!((all - fast).abs() < 1e-9, "{all} vs {fast}");
        // Up to 10% off either way counts as near.
        assert_eq!(rounds_near_nominal(&[2.19, 1.81, 2.21, 1.79], 2.0), vec![0, 1]);
    }
}
