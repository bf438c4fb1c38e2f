//! Validation against real whole-network runs: the estimate of each network next to what `perfmodel bench`
//! measured, with the relative errors and their medians. This is the product's acceptance test on a device (the
//! issue's targets: every network within ±10 % latency, median ≤ 5 %, peak memory within 1 %).

use crate::collect::profile::DeviceProfile;
use crate::collect::speed::{
    follows_probe, median_reading as median_of, network_latency_at_nominal, rounds_near_nominal,
};
use crate::collect::speed::{SpeedProbe, MIN_ROUNDS_NEAR_NOMINAL, PROBE_MAX_AGE};
use crate::device::Fingerprint;
use crate::dirs::Dirs;
use crate::engine::{profile_networks_observed, BenchObserver, BenchStep, NetworkProfile, RoundPlan};
use crate::error::Result;
use crate::estimate::request::{trained_here_note, Opened};
use crate::estimate::{Estimate, Estimator, Method};
use crate::network::Network;
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
    /// What the built network held before its first run (weights, plan, input) and what the estimate counts as
    /// resident: the part of a peak-memory error that is not the liveness walk's. Null when not measured.
    pub measured_resident_memory_mib: Option<f64>,
    pub predicted_resident_memory_mib: f64,
    /// Layers nothing could predict (their time is missing from the prediction).
    pub uncovered_layers: usize,
    /// The measured latency brought to the nominal speed of the device's data (see
    /// [`Validation::with_speed_probe`]); null without a speed probe.
    pub measured_latency_at_nominal_ms: Option<f64>,
    pub latency_error_at_nominal_pct: Option<f64>,
    /// Share of the predicted layer time in layer types that follow the probe ([`follows_probe`]).
    pub probe_following_share: Option<f64>,
    /// Median of the timed rounds on the calling thread's CPU clock (null when not measured, see
    /// [`crate::engine::TotalProfile::round_cpu_ms`]).
    pub measured_cpu_ms: Option<f64>,
    /// The error at nominal speed from the wall-clock rounds and readings, whichever clock
    /// `measured_latency_at_nominal_ms` came from.
    pub latency_error_at_nominal_wall_pct: Option<f64>,
    /// Rounds whose probe readings were near nominal speed ([`crate::collect::speed::rounds_near_nominal`]), on
    /// the clock `measured_latency_at_nominal_ms` came from: with at least
    /// [`crate::collect::speed::MIN_ROUNDS_NEAR_NOMINAL`] of them, only they were used.
    pub rounds_near_nominal: Option<usize>,
    /// Every timed round in the order it ran, with the probe readings right before and after it (empty without
    /// a speed probe): what `measured_latency_at_nominal_ms` was computed from, kept so that it can be checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<RoundRecord>,
}

/// One timed round of a network and the speed-probe readings that bracket it (null where none was taken or the
/// CPU clock could not be read).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundRecord {
    pub latency_ms: f64,
    pub cpu_ms: Option<f64>,
    pub probe_before_ms: Option<f64>,
    pub probe_after_ms: Option<f64>,
    pub probe_before_cpu_ms: Option<f64>,
    pub probe_after_cpu_ms: Option<f64>,
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
            measured_resident_memory_mib: measured.total.resident_memory_mib,
            predicted_resident_memory_mib: estimate.total.resident_memory_mib,
            uncovered_layers: estimate.uncovered.len(),
            measured_latency_at_nominal_ms: None,
            latency_error_at_nominal_pct: None,
            probe_following_share: None,
            measured_cpu_ms: median_of(&measured.total.round_cpu_ms),
            latency_error_at_nominal_wall_pct: None,
            rounds_near_nominal: None,
            rounds: Vec::new(),
        }
    }
}

/// The speed probe's readings taken around a validation's rounds (see [`Validation::with_speed_probe`]): for
/// every round of every network, the reading right before and right after its runs, on the wall clock and on
/// the calling thread's CPU clock (NaN where none was taken).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeReadings {
    wall: Vec<Vec<[f64; 2]>>,
    cpu: Vec<Vec<[f64; 2]>>,
    taken: usize,
    /// Rounds every network runs at least: a network with fewer recorded has no brackets.
    planned: usize,
}

impl ProbeReadings {
    /// No readings yet, for `networks` networks of at least `rounds` rounds (room grows with the readings).
    pub fn new(networks: usize, rounds: usize) -> ProbeReadings {
        let empty = vec![Vec::new(); networks];
        ProbeReadings { wall: empty.clone(), cpu: empty, taken: 0, planned: rounds }
    }

    /// Record the reading taken at `step` (ignored if the network is out of range; a round past the planned
    /// ones extends the network's rounds).
    pub fn record(&mut self, step: BenchStep, wall_ms: f64, cpu_ms: Option<f64>) {
        let side = usize::from(step.after);
        for (all, value) in [(&mut self.wall, wall_ms), (&mut self.cpu, cpu_ms.unwrap_or(f64::NAN))] {
            let Some(rounds) = all.get_mut(step.network) else { return };
            if rounds.len() <= step.round {
                rounds.resize(step.round + 1, [f64::NAN; 2]);
            }
            rounds[step.round][side] = value;
        }
        self.taken += 1;
    }

    /// How many of the rounds of `network` recorded so far ran near the nominal speed ([`rounds_near_nominal`]):
    /// on the CPU clock if `cpu` and every such round has CPU-clock readings (as [`Validation::with_speed_probe`]
    /// decides for a one-thread engine), else on the wall clock; a round without both readings does not count.
    pub fn rounds_near_nominal(&self, network: usize, nominal_ms: f64, cpu: bool) -> usize {
        let cpu_means = if cpu { self.means(network, true) } else { Vec::new() };
        let chosen =
            if cpu && cpu_means.iter().all(|m| m.is_finite()) { cpu_means } else { self.means(network, false) };
        let finite: Vec<f64> = chosen.into_iter().filter(|m| m.is_finite()).collect();
        rounds_near_nominal(&finite, nominal_ms).len()
    }

    /// How many readings were recorded.
    pub fn len(&self) -> usize {
        self.taken
    }

    pub fn is_empty(&self) -> bool {
        self.taken == 0
    }

    /// Every recorded wall-clock (or CPU-clock) reading.
    fn values(&self, cpu: bool) -> Vec<f64> {
        let all = if cpu { &self.cpu } else { &self.wall };
        all.iter().flatten().flatten().copied().filter(|x| x.is_finite()).collect()
    }

    /// The readings around round `round` of `network`, wall clock then CPU clock, `[before, after]` (NaN where
    /// none was recorded).
    fn around(&self, network: usize, round: usize) -> ([f64; 2], [f64; 2]) {
        let get = |all: &Vec<Vec<[f64; 2]>>| all.get(network).and_then(|r| r.get(round)).copied();
        (get(&self.wall).unwrap_or([f64::NAN; 2]), get(&self.cpu).unwrap_or([f64::NAN; 2]))
    }

    /// The mean of the two readings around each recorded round of `network` (NaN where one is missing).
    fn means(&self, network: usize, cpu: bool) -> Vec<f64> {
        let all = if cpu { &self.cpu } else { &self.wall };
        all.get(network).map_or(Vec::new(), |r| r.iter().map(|[before, after]| (before + after) / 2.0).collect())
    }

    /// The mean of the two readings around each round of `network`; `None` if one is missing or the network
    /// has fewer than the planned rounds.
    fn brackets(&self, network: usize, cpu: bool) -> Option<Vec<f64>> {
        let means = self.means(network, cpu);
        (means.len() >= self.planned && means.iter().all(|m| m.is_finite())).then_some(means)
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
    /// Median of the readings on the calling thread's CPU clock, when that clock was used (`clock` "cpu").
    pub cpu_median_ms: Option<f64>,
    /// The clock the networks were brought to nominal speed with: "cpu" (rounds and readings on the
    /// calling thread's CPU clock) or "wall".
    pub clock: &'static str,
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
    /// What the reader should know about the figures: the estimates' notes (each once) and why the speed
    /// probe was not compared, if so.
    pub notes: Vec<String>,
    /// Set when the device's profile was made for another machine than the one the networks ran on (both named):
    /// the errors are then the transfer error of that device's models to this machine.
    pub other_machine: Option<String>,
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
            median_abs_latency_error_pct: median(&latency),
            median_abs_memory_error_pct: median(&memory),
            max_abs_latency_error_pct: max(&latency),
            max_abs_memory_error_pct: max(&memory),
            speed_probe: None,
            median_abs_latency_error_at_nominal_pct: None,
            max_abs_latency_error_at_nominal_pct: None,
            notes: Vec::new(),
            other_machine: None,
            networks,
        }
    }

    /// Add `note` unless it is there already.
    pub fn note(&mut self, note: &str) {
        if !self.notes.iter().any(|n| n == note) {
            self.notes.push(note.to_string());
        }
    }
}

impl Validation {
    /// Bring each network's measured rounds to the nominal speed of the models' data and record the errors
    /// there. Each round is bracketed by the probe readings right before and after its runs (`readings`).
    ///
    /// Only the share of each network's predicted time in layer types that follow the probe is corrected
    /// ([`network_latency_at_nominal`]): the others did not follow it while the data was collected. When every
    /// round and reading was also timed on the calling thread's CPU clock, the CPU-clock times are used: they
    /// leave out the stretches the hypervisor took the CPU away, which no probe reading next to a round
    /// catches reliably. The nominal is a wall-clock median of the collection, whose rows carried the stolen
    /// time of their moments; a CPU-clock round over a CPU-clock reading is the same ratio as on the wall clock
    /// when steal slows round and probe alike, so the result is in the models' units. (Correcting the whole of
    /// mnist_cnn instead of its probe-following 85% moved its error at nominal from +0.2% to -6.3%:
    /// the machine's speed states are not all stolen time.)
    pub fn with_speed_probe(
        mut self,
        nominal_ms: f64,
        readings: &ProbeReadings,
        estimates: &[Estimate],
        measured: &[NetworkProfile],
    ) -> Validation {
        let count = self.networks.len();
        let cpu_clock = (0..count).all(|i| {
            readings.brackets(i, true).is_some()
                && measured.get(i).is_some_and(|m| m.total.round_cpu_ms.len() == m.total.round_latency_ms.len())
        }) && count > 0;
        let mut errors = Vec::new();
        for (i, ((row, estimate), profile)) in self.networks.iter_mut().zip(estimates).zip(measured).enumerate() {
            let rounds = &profile.total.round_latency_ms;
            let finite = |x: f64| x.is_finite().then_some(x);
            row.rounds = rounds
                .iter()
                .enumerate()
                .map(|(round, &latency_ms)| {
                    let ([before, after], [before_cpu, after_cpu]) = readings.around(i, round);
                    RoundRecord {
                        latency_ms,
                        cpu_ms: profile.total.round_cpu_ms.get(round).copied(),
                        probe_before_ms: finite(before),
                        probe_after_ms: finite(after),
                        probe_before_cpu_ms: finite(before_cpu),
                        probe_after_cpu_ms: finite(after_cpu),
                    }
                })
                .collect();
            let share = probe_following_share(estimate);
            let error = |at_nominal: f64| 100.0 * (row.predicted_latency_ms - at_nominal) / at_nominal;
            let wall =
                readings.brackets(i, false).and_then(|p| network_latency_at_nominal(rounds, &p, nominal_ms, share));
            row.latency_error_at_nominal_wall_pct = wall.map(error);
            let brackets = readings.brackets(i, cpu_clock);
            row.rounds_near_nominal = brackets.as_ref().map(|p| rounds_near_nominal(p, nominal_ms).len());
            let at_nominal = if cpu_clock {
                brackets.and_then(|p| network_latency_at_nominal(&profile.total.round_cpu_ms, &p, nominal_ms, share))
            } else {
                wall
            };
            let Some(at_nominal) = at_nominal else { continue };
            let error = error(at_nominal);
            row.measured_latency_at_nominal_ms = Some(at_nominal);
            row.latency_error_at_nominal_pct = Some(error);
            row.probe_following_share = Some(share);
            errors.push(error.abs());
        }
        if let Some(median_ms) = median_of(&readings.values(false)) {
            self.speed_probe = Some(ProbeSpeed {
                nominal_ms,
                median_ms,
                ratio: median_ms / nominal_ms,
                readings: readings.len(),
                cpu_median_ms: if cpu_clock { median_of(&readings.values(true)) } else { None },
                clock: if cpu_clock { "cpu" } else { "wall" },
            });
        }
        if errors.len() == count && count > 0 {
            self.max_abs_latency_error_at_nominal_pct = Some(errors.iter().copied().fold(0.0, f64::max));
            self.median_abs_latency_error_at_nominal_pct = Some(median(&errors));
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

/// How `validate` benchmarks each network.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    pub plan: RoundPlan,
    /// Untimed runs per network before its first timed round.
    pub warmup: usize,
    /// Time the speed probe between the rounds, to report the errors at the nominal speed of the models' data.
    pub speed_probe: bool,
}

/// Validate the estimates of an opened request on `nets`: each network estimated as asked (zero-shot included) and run
/// here with the device's engine settings ([`bench_with_speed_probe`]), the errors and their medians, the notes
/// every estimate or only some carry, and whether the device is another machine's. `log` receives progress and
/// notes as they happen.
pub fn validate(
    nets: &[Network],
    opened: &Opened,
    dirs: &Dirs,
    options: BenchOptions,
    log: &mut dyn FnMut(String),
) -> Result<Validation> {
    let estimator = &opened.estimator;
    let device = DeviceProfile::load(&dirs.collectors, &opened.choice.device)?;
    let estimates = nets.iter().map(|n| opened.estimate(n)).collect::<Result<Vec<_>>>()?;
    let nominal = if options.speed_probe { nominal_probe_ms(estimator, log) } else { None };
    let (measured, readings) = bench_with_speed_probe(nets, &device, nominal, options.plan, options.warmup, log)?;
    let rows = estimates.iter().zip(&measured).map(|(e, m)| NetworkError::new(e, m)).collect();
    let mut v = Validation::new(estimator.device(), estimator.method().name(), rows);
    if let Some(nominal) = nominal.filter(|_| !readings.is_empty()) {
        v = v.with_speed_probe(nominal, &readings, &estimates, &measured);
    }
    // A note every network shares once; one that only some networks have, with their names.
    for note in estimates.iter().flat_map(|e| &e.notes) {
        let with: Vec<&str> = estimates.iter().filter(|e| e.notes.contains(note)).map(|e| e.network.as_str()).collect();
        match with.len() == estimates.len() {
            true => v.note(note),
            false => v.note(&format!("{}: {note}", with.join(", "))),
        }
    }
    // The networks ran here whatever the profile says; the table says when that is another machine.
    let host = Fingerprint::of_host();
    if let (Err(_), Some(recorded)) = (device.check_host(host), &device.fingerprint) {
        v.other_machine = Some(format!(
            "device '{}' was made for {}; the networks ran on this host, {}: the errors are its transfer errors",
            device.name,
            recorded.summary(),
            host.summary()
        ));
    }
    if let Some(note) = trained_here_note(estimator, dirs).filter(|_| opened.zero_shot.is_none()) {
        v.note(&note);
    }
    if estimator.trained_elsewhere().is_some() && options.speed_probe {
        v.note(
            "the speed probe was not timed against the models' nominal speed: that is its time on the machine the \
             models were trained on; errors at nominal speed not reported",
        );
    }
    Ok(v)
}

/// The speed probe timed around a bench's rounds, asking for more rounds of a network that has too few near
/// the nominal speed.
struct ProbeObserver<'a> {
    probe: Option<SpeedProbe>,
    readings: ProbeReadings,
    nominal_ms: Option<f64>,
    /// Count rounds near nominal on the CPU clock, as [`Validation::with_speed_probe`] does for a one-thread
    /// engine (a pool computes on other threads, whose time the calling thread's clock does not see).
    cpu_clock: bool,
    log: &'a mut dyn FnMut(String),
}

impl BenchObserver for ProbeObserver<'_> {
    fn step(&mut self, step: BenchStep) -> Result<()> {
        if let Some(p) = self.probe.as_mut() {
            match p.reading(PROBE_MAX_AGE) {
                Ok(ms) => self.readings.record(step, ms, p.last_cpu_ms()),
                Err(e) => {
                    // Later rounds then have no bracket and get no error at nominal speed.
                    (self.log)(format!("note: the speed probe failed ({e}); machine speed not measured from here on"));
                    self.probe = None;
                }
            }
        }
        Ok(())
    }

    fn wants_more(&self, network: usize, _rounds: usize) -> bool {
        match (&self.probe, self.nominal_ms) {
            (Some(_), Some(nominal)) => {
                self.readings.rounds_near_nominal(network, nominal, self.cpu_clock) < MIN_ROUNDS_NEAR_NOMINAL
            }
            _ => false,
        }
    }
}

/// Profile `nets` in turns of `block` rounds ([`profile_networks_observed`]), with the speed probe
/// ([`crate::collect::speed`]) timed before and right after every round (a reading is reused for
/// [`PROBE_MAX_AGE`], so a small network's rounds mostly run back to back). After `rounds`, a network with fewer
/// than [`MIN_ROUNDS_NEAR_NOMINAL`] rounds near `nominal_ms` runs more turns, up to `max_rounds`: a shared VM can
/// spend a whole minute in a fast state (probe at 0.66-0.69x nominal), where one elasticity does not describe
/// every network (yolo_tiny came out +26-27% at nominal from 5-6 rounds near it). Returns the profiles and the
/// probe readings (empty when `nominal_ms` is `None` or the probe could not be built; `log` says why).
pub fn bench_with_speed_probe(
    nets: &[Network],
    device: &DeviceProfile,
    nominal_ms: Option<f64>,
    plan: RoundPlan,
    warmup: usize,
    log: &mut dyn FnMut(String),
) -> Result<(Vec<NetworkProfile>, ProbeReadings)> {
    // The probe runs with the device's engine, as it did next to every collected row.
    let executor = crate::engine::executor_for(device)?;
    let probe = match nominal_ms.map(|_| SpeedProbe::new(executor.as_ref(), device.protocol.burn_in_runs)) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            log(format!("note: machine speed not measured: {e}"));
            None
        }
        None => None,
    };
    let readings = ProbeReadings::new(nets.len(), plan.rounds);
    let mut observer = ProbeObserver { probe, readings, nominal_ms, cpu_clock: executor.threads() == 1, log };
    let measured = profile_networks_observed(nets, executor.as_ref(), plan, warmup, &mut observer)?;
    Ok((measured, observer.readings))
}

/// The nominal probe time the estimator's latency models were trained at, with a note to `log` when there is
/// none; `None` too for models trained on another machine, whose nominal time is that machine's probe time.
pub fn nominal_probe_ms(estimator: &Estimator, log: &mut dyn FnMut(String)) -> Option<f64> {
    let Method::Learned(store) = estimator.method() else { return None };
    if estimator.trained_elsewhere().is_some() {
        return None;
    }
    match store.manifest().nominal_probe_ms() {
        Ok(nominal) => Some(nominal),
        Err(why) => {
            log(format!("note: the models {why}; errors at nominal speed not reported"));
            None
        }
    }
}

/// Median (NaN for no values).
fn median(values: &[f64]) -> f64 {
    crate::stats::median(values).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_is_bracketed_by_its_own_readings() {
        // Two networks of two rounds, recorded in turns as the bench takes them.
        let mut r = ProbeReadings::new(2, 2);
        let mut at = |network, round, after, wall: f64, cpu| r.record(BenchStep { network, round, after }, wall, cpu);
        at(0, 0, false, 1.0, Some(0.5));
        at(0, 0, true, 3.0, Some(1.5));
        at(1, 0, false, 5.0, Some(2.5));
        at(1, 0, true, 7.0, None);
        at(0, 1, false, 2.0, Some(1.0));
        at(0, 1, true, 2.0, Some(1.0));
        at(1, 1, false, 4.0, Some(2.0));
        at(9, 0, false, 4.0, Some(2.0)); // no such network: ignored
        assert_eq!(r.len(), 7);
        assert_eq!(r.brackets(0, false), Some(vec![2.0, 2.0]));
        assert_eq!(r.brackets(0, true), Some(vec![1.0, 1.0]));
        // Network 1's second round has no reading after it, and its first none on the CPU clock.
        assert_eq!(r.brackets(1, false), None);
        assert_eq!(r.brackets(1, true), None);
        r.record(BenchStep { network: 1, round: 1, after: true }, 6.0, Some(3.0));
        assert_eq!(r.brackets(1, false), Some(vec![6.0, 5.0]));
        assert_eq!(r.brackets(1, true), None);
        assert_eq!(r.values(false).len(), 8);
        assert_eq!(r.values(true).len(), 7);
        let (wall, cpu) = r.around(1, 0);
        assert_eq!(wall, [5.0, 7.0]);
        assert!(cpu[0] == 2.5 && cpu[1].is_nan());
        assert!(r.around(5, 0).0.iter().all(|x| x.is_nan()));
        // Near nominal (2.0 +- 10%): network 0's rounds at 2.0 and 2.0 on the wall clock, 1.0 and 1.0 on the CPU
        // clock (used, as every round has one).
        assert_eq!(r.rounds_near_nominal(0, 2.0, true), 0);
        assert_eq!(r.rounds_near_nominal(0, 1.0, true), 2);
        assert_eq!(r.rounds_near_nominal(0, 2.0, false), 2);
        // A round past the planned two extends the network's rounds; until its second reading it has no bracket.
        r.record(BenchStep { network: 0, round: 2, after: false }, 2.0, None);
        assert_eq!(r.brackets(0, false), None);
        // Round 2 has no CPU-clock reading, so the wall clock counts, without the round lacking its second one.
        assert_eq!(r.rounds_near_nominal(0, 2.0, true), 2);
        assert_eq!(r.rounds_near_nominal(0, 1.0, true), 0);
        r.record(BenchStep { network: 0, round: 2, after: true }, 2.1, None);
        assert_eq!(r.brackets(0, false), Some(vec![2.0, 2.0, 2.05]));
        assert_eq!(r.brackets(0, true), None);
        assert_eq!(r.rounds_near_nominal(0, 2.0, true), 3);
    }
}
