//! The measurement protocol and the collection loop.
//!
//! A group of configs (the profile's `group_size`) is built and kept in memory, burnt in, then timed in rounds
//! that visit the configs in turn, so a burst of load from another process on this shared machine is spread over
//! the group instead of biasing one sample. Each config then moves on to its next batch size together with its
//! group; a failure (build error, engine panic, run error, timeout) is written as a `failed` row and ends that
//! config's larger batch sizes. Rows are appended durably one by one; a rerun skips every key already written.

use super::alloc;
use super::profile::DeviceProfile;
use super::sensors::{available_power_sensors, MemorySensor, Sensor};
use super::speed::{median_reading, SpeedProbe, PROBE_MAX_AGE};
use crate::data::{self, Sample, SampleWriter, Status};
use crate::engine::{Executor, Workload};
use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use crate::layer::{LayerConfig, LayerType};
use crate::stats::{median, quantile_sorted, spread};
use rand::seq::IndexedRandom;
use rand::SeedableRng;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A deterministic slice of the configs: those whose key (at the smallest batch size, so all batch sizes of a
/// config stay together) hashes to `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// `i/n` with `0 <= i < n`.
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || Error::Invalid(format!("--shard: expected i/n with 0 <= i < n (e.g. 0/4), got '{text}'"));
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) =
            (i.trim().parse::<usize>().map_err(|_| bad())?, n.trim().parse::<usize>().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The slice of a SLURM job array task: `SLURM_ARRAY_TASK_ID` minus `SLURM_ARRAY_TASK_MIN` (0 when unset)
    /// out of `SLURM_ARRAY_TASK_COUNT`. `None` outside a job array.
    pub fn from_slurm(var: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>> {
        let (Some(id), Some(count)) = (var("SLURM_ARRAY_TASK_ID"), var("SLURM_ARRAY_TASK_COUNT")) else {
            return Ok(None);
        };
        let num = |name: &str, v: &str| {
            v.trim().parse::<usize>().map_err(|_| Error::Invalid(format!("{name}: expected an integer, got '{v}'")))
        };
        let min = var("SLURM_ARRAY_TASK_MIN").map(|m| num("SLURM_ARRAY_TASK_MIN", &m)).transpose()?.unwrap_or(0);
        let (id, count) = (num("SLURM_ARRAY_TASK_ID", &id)?, num("SLURM_ARRAY_TASK_COUNT", &count)?);
        let index = id
            .checked_sub(min)
            .ok_or_else(|| Error::Invalid(format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")))?;
        Shard::parse(&format!("{index}/{count}")).map(Some)
    }

    pub fn contains(&self, key: &str) -> bool {
        (key_number(key) % self.count as u64) as usize == self.index
    }

    /// Sub-directory of the device's data directory this shard writes to, so that concurrent shards on a shared
    /// file system never append to the same file (join them with `perfmodel data merge`).
    pub fn dir_name(&self) -> String {
        format!("shard-{}-of-{}", self.index, self.count)
    }
}

/// The 64-bit number behind a hex key (keys are hashes, so this is uniform).
fn key_number(key: &str) -> u64 {
    u64::from_str_radix(key.get(..16).unwrap_or(key), 16).unwrap_or_else(|_| {
        key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    })
}

#[derive(Debug, Clone)]
pub struct CollectOptions {
    /// Root of the data store; rows go to `data_dir/DEVICE/` (or its shard sub-directory).
    pub data_dir: PathBuf,
    /// Only these layer types (all when `None`).
    pub layers: Option<Vec<LayerType>>,
    /// Stop after measuring this many samples in this run.
    pub max_samples: Option<usize>,
    /// Stop starting new measurements after this long.
    pub time_budget: Option<Duration>,
    pub shard: Option<Shard>,
    /// Measure in the order the configs are given (a [`super::quick::quick_order`]), every config's smallest
    /// batch size before any config's larger ones, instead of round-robin over layer types. Either way what is
    /// recorded is skipped, so a quick collection continues into a full one without measuring a row twice.
    pub quick: bool,
}

/// Progress reporting, implemented by the command line (progress bar) or a test.
pub trait Observer {
    /// Something the user must know (repairs, unavailable sensors).
    fn note(&mut self, message: &str);
    /// How many samples this run intends to measure.
    fn planned(&mut self, samples: usize);
    /// One sample was measured and written.
    fn recorded(&mut self, sample: &Sample);
}

#[derive(Debug, Clone, PartialEq)]
pub struct TypeSummary {
    pub layer_type: LayerType,
    pub ok: usize,
    pub unstable: usize,
    pub failed: usize,
    /// Rows in the data file after this run.
    pub rows: usize,
    /// Median latency of this run's measured samples.
    pub median_latency_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub device_dir: PathBuf,
    pub types: Vec<TypeSummary>,
    pub elapsed: Duration,
    /// Samples still to measure (a rerun continues with them).
    pub remaining: usize,
    /// Why the run stopped early, if it did.
    pub stopped_by: Option<String>,
}

/// Measures samples with one executor according to a device profile.
struct Meter<'a> {
    profile: &'a DeviceProfile,
    executor: &'a dyn Executor,
    engine: String,
    memory: bool,
    power: Vec<Box<dyn Sensor>>,
    /// `None` when the profile turns it off or it could not be built or run (`probe_lost` says why).
    probe: Option<SpeedProbe>,
    probe_lost: Option<String>,
}

/// One config of a group being measured.
struct Unit {
    sample: Sample,
    workload: Option<Box<dyn Workload>>,
    /// Runs per timed repetition.
    inner: usize,
    /// Timed repetitions per round.
    repetitions: usize,
    times_ms: Vec<f64>,
    /// The speed-probe reading around each timing (empty without a probe).
    probe_ms: Vec<f64>,
    failure: Option<String>,
}

/// The probe time that a sample's latency corresponds to: its median latency divided by the median of the
/// timings each divided by its own probe reading. Dividing the latency by it gives the median of the
/// speed-normalised timings, so each timing is corrected by the speed of its own moment. `None` unless every
/// timing has a reading.
fn effective_probe_ms(latency_ms: f64, times_ms: &[f64], probe_ms: &[f64]) -> Option<f64> {
    if times_ms.is_empty() || probe_ms.len() != times_ms.len() {
        return None;
    }
    let relative: Vec<f64> = times_ms.iter().zip(probe_ms).map(|(t, p)| t / p).collect();
    let relative = median_reading(&relative)?;
    (relative > 0.0).then(|| latency_ms / relative)
}

use crate::error::panic_text;

/// Run `runs` inferences; the time they took, or why they failed (errors and engine panics alike).
fn run_guarded(workload: &mut dyn Workload, runs: usize) -> std::result::Result<Duration, String> {
    let t = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        for _ in 0..runs {
            workload.run()?;
        }
        Ok::<(), Error>(())
    }));
    match outcome {
        Ok(Ok(())) => Ok(t.elapsed()),
        Ok(Err(e)) => Err(format!("run failed: {e}")),
        Err(p) => Err(format!("the engine panicked while running: {}", panic_text(p.as_ref()))),
    }
}

impl<'a> Meter<'a> {
    fn new(profile: &'a DeviceProfile, executor: &'a dyn Executor, observer: &mut dyn Observer) -> Meter<'a> {
        let memory = MemorySensor::default().check_available().and_then(|()| {
            if executor.allocates_outside_rust() && !crate::collect::alloc::counts_foreign_heap() {
                return Err(crate::Error::Sensor {
                    sensor: "memory".into(),
                    message: format!(
                        "{} allocates on the C heap, which this process does not count (only the perfmodel binary \
                         on glibc Linux does)",
                        executor.describe()
                    ),
                });
            }
            Ok(())
        });
        if let Err(e) = &memory {
            observer.note(&format!("memory: unavailable ({e}); memory_mib stays empty"));
        }
        let power = match available_power_sensors(&profile.power.sensors) {
            Ok(sensors) => {
                let names: Vec<String> = sensors.iter().map(|s| s.name()).collect();
                observer.note(&format!(
                    "power: measuring with {} on {:.0}% of the samples",
                    names.join(" + "),
                    profile.power.subset_fraction * 100.0
                ));
                sensors
            }
            Err(why) => {
                observer
                    .note(&format!("power: unavailable on this device ({why}); collecting latency and memory only"));
                Vec::new()
            }
        };
        let probe = if profile.protocol.speed_probe {
            match SpeedProbe::new(executor, profile.protocol.burn_in_runs) {
                Ok(p) => Some(p),
                Err(e) => {
                    observer.note(&format!("speed probe: unavailable ({e}); speed_ref_ms stays empty"));
                    None
                }
            }
        } else {
            None
        };
        Meter { profile, executor, engine: executor.describe(), memory: memory.is_ok(), power, probe, probe_lost: None }
    }

    /// A speed-probe reading (reused when younger than [`PROBE_MAX_AGE`]); `None` without a probe. A probe that
    /// fails is dropped, and the collection goes on without it.
    fn probe_reading(&mut self) -> Option<f64> {
        let probe = self.probe.as_mut()?;
        match probe.reading(PROBE_MAX_AGE) {
            Ok(ms) => Some(ms),
            Err(e) => {
                self.probe = None;
                self.probe_lost = Some(format!("speed probe: failed ({e}); later rows have no speed_ref_ms"));
                None
            }
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.profile.protocol.per_sample_timeout_s)
    }

    /// Build, measure memory of, and burn in one config.
    fn prepare(&self, mut sample: Sample) -> Unit {
        sample.engine = self.engine.clone();
        sample.threads = self.profile.threads;
        let mut unit = Unit {
            sample,
            workload: None,
            inner: 1,
            repetitions: 0,
            times_ms: Vec::new(),
            probe_ms: Vec::new(),
            failure: None,
        };
        let mut memory = MemorySensor::default();
        if self.memory && memory.start().is_err() {
            unit.failure = Some("memory sensor failed to start".into());
            return unit;
        }
        let built = catch_unwind(AssertUnwindSafe(|| self.executor.prepare_layer(&unit.sample.config)));
        let mut workload = match built {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => {
                unit.failure = Some(format!("build failed: {e}"));
                return unit;
            }
            Err(p) => {
                unit.failure = Some(format!("the engine panicked while building: {}", panic_text(p.as_ref())));
                return unit;
            }
        };
        // Graph optimisation allocates transiently; what the layer needs is what stays plus what a run adds.
        alloc::reset_peak();
        let first = match run_guarded(workload.as_mut(), 1) {
            Ok(t) => t,
            Err(why) => {
                unit.failure = Some(why);
                return unit;
            }
        };
        if self.memory {
            if let Ok(r) = memory.stop() {
                unit.sample.memory_mib = Some(r.value / (1024.0 * 1024.0));
            }
        }
        let mut fastest = first;
        for _ in 1..self.profile.protocol.burn_in_runs.max(1) {
            if fastest > self.timeout() {
                break;
            }
            match run_guarded(workload.as_mut(), 1) {
                Ok(t) => fastest = fastest.min(t),
                Err(why) => {
                    unit.failure = Some(why);
                    return unit;
                }
            }
        }
        if fastest > self.timeout() {
            unit.failure = Some(format!(
                "timeout: one run took {:.3} s, over the per-sample limit of {} s",
                fastest.as_secs_f64(),
                self.profile.protocol.per_sample_timeout_s
            ));
            return unit;
        }
        let p = &self.profile.protocol;
        let run_s = fastest.as_secs_f64().max(1e-9);
        unit.inner = ((p.min_window_ms / 1e3 / run_s).ceil() as usize).clamp(1, 100_000);
        unit.repetitions = match p.max_measure_s {
            Some(cap) => {
                ((cap / (p.rounds as f64 * run_s * unit.inner as f64)) as usize).clamp(2, p.repetitions.max(2))
            }
            None => p.repetitions,
        };
        unit.workload = Some(workload);
        unit
    }

    /// Timed rounds over the given units, interleaved: round by round, config by config. With the speed probe,
    /// each config's repetitions of a round are bracketed by probe readings (a reading younger than
    /// [`PROBE_MAX_AGE`] is reused, so fast configs share them), and each timing is paired with their mean
    /// (`Unit::probe_ms`): on a shared VM the speed switches within a second, so a reading per group would describe
    /// other moments than most of its timings.
    fn timed_rounds(&mut self, units: &mut [Unit], which: &[usize]) {
        let rounds = self.profile.protocol.rounds;
        for _round in 0..rounds {
            for &i in which {
                if units[i].workload.is_none() {
                    continue;
                }
                let before = self.probe_reading();
                let unit = &mut units[i];
                let Some(workload) = unit.workload.as_mut() else { continue };
                let mut times = Vec::with_capacity(unit.repetitions);
                for _ in 0..unit.repetitions {
                    match run_guarded(workload.as_mut(), unit.inner) {
                        Ok(t) => times.push(t.as_secs_f64() * 1e3 / unit.inner as f64),
                        Err(why) => {
                            unit.failure = Some(why);
                            unit.workload = None;
                            break;
                        }
                    }
                }
                let after = self.probe_reading();
                let unit = &mut units[i];
                if let (Some(b), Some(a)) = (before, after) {
                    unit.probe_ms.extend(std::iter::repeat_n((a + b) / 2.0, times.len()));
                }
                unit.times_ms.extend(times);
            }
        }
    }

    /// Average power while looping the workload over the sensors' window.
    fn measure_power(&mut self, workload: &mut dyn Workload) -> std::result::Result<f64, String> {
        let window = self.power.iter().map(|s| s.min_window()).max().unwrap_or_default();
        for s in self.power.iter_mut() {
            s.start().map_err(|e| e.to_string())?;
        }
        let t = Instant::now();
        let mut runs = 0usize;
        while runs == 0 || t.elapsed() < window {
            run_guarded(workload, 1)?;
            runs += 1;
            for s in self.power.iter_mut() {
                s.poll().map_err(|e| e.to_string())?;
            }
        }
        let mut watts = 0.0;
        for s in self.power.iter_mut() {
            watts += s.stop().map_err(|e| e.to_string())?.value;
        }
        Ok(watts)
    }

    fn wants_power(&self, key: &str) -> bool {
        !self.power.is_empty() && (key_number(key) % 10_000) as f64 / 10_000.0 < self.profile.power.subset_fraction
    }

    /// Measure a group of samples together; returns them completed (ok, unstable or failed).
    fn measure_group(&mut self, samples: Vec<Sample>) -> Vec<Sample> {
        let mut units: Vec<Unit> = samples.into_iter().map(|s| self.prepare(s)).collect();
        let all: Vec<usize> = (0..units.len()).collect();
        self.timed_rounds(&mut units, &all);
        let max_cv = self.profile.protocol.max_cv;
        let noisy: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| units[i].failure.is_none() && spread(&units[i].times_ms).is_some_and(|s| s.robust_cv > max_cv))
            .collect();
        for &i in &noisy {
            units[i].times_ms.clear();
            units[i].probe_ms.clear();
        }
        self.timed_rounds(&mut units, &noisy);
        let mut out = Vec::with_capacity(units.len());
        for mut unit in units {
            let mut s = unit.sample;
            s.timestamp = data::now_rfc3339();
            let measured = if unit.failure.is_none() { spread(&unit.times_ms) } else { None };
            let Some(sp) = measured else {
                s.status = Status::Failed;
                s.reason = unit.failure.unwrap_or_else(|| "no timed repetition completed".into());
                s.memory_mib = None;
                s.speed_ref_ms = None;
                out.push(s);
                continue;
            };
            s.latency_ms = Some(sp.median);
            s.speed_ref_ms = effective_probe_ms(sp.median, &unit.times_ms, &unit.probe_ms);
            s.latency_mad_ms = Some(sp.mad);
            s.latency_cv = Some(sp.cv);
            s.repetitions = sp.count as u64;
            s.rounds = self.profile.protocol.rounds as u64;
            s.tukey_outliers = sp.tukey_outliers;
            (s.status, s.reason) = if sp.robust_cv > max_cv {
                let why = format!(
                    "robust CV (1.4826 MAD/median) {:.3} above {max_cv} after one re-measurement",
                    sp.robust_cv
                );
                (Status::Unstable, why)
            } else {
                (Status::Ok, String::new())
            };
            if let (true, Some(w)) = (self.wants_power(&s.key), unit.workload.as_mut()) {
                match self.measure_power(w.as_mut()) {
                    Ok(watts) => {
                        s.power_w = Some(watts);
                        s.energy_mj = Some(watts * sp.median);
                    }
                    Err(why) => {
                        s.reason = [s.reason.as_str(), &format!("power not measured: {why}")]
                            .iter()
                            .filter(|x| !x.is_empty())
                            .copied()
                            .collect::<Vec<_>>()
                            .join("; ")
                    }
                }
            }
            out.push(s);
        }
        out
    }
}

/// Up to `take` groups from the front of a quick queue, each of another config (a config's first batch size and
/// the rest of it are never measured side by side, so a failure of the first still ends the rest), dropping the
/// groups of configs whose first sample failed.
fn draw_quick(queue: &mut VecDeque<VecDeque<Sample>>, take: usize, failed: &HashSet<String>) -> Vec<VecDeque<Sample>> {
    let mut window = Vec::with_capacity(take);
    let mut drawn: Vec<String> = Vec::with_capacity(take);
    let mut deferred = Vec::new();
    while window.len() < take {
        let Some(group) = queue.pop_front() else { break };
        let Some(first) = group.front() else { continue };
        let identity = config_identity(first);
        if failed.contains(&identity) {
            continue;
        }
        if drawn.contains(&identity) {
            deferred.push(group);
        } else {
            drawn.push(identity);
            window.push(group);
        }
    }
    for group in deferred.into_iter().rev() {
        queue.push_front(group);
    }
    window
}

/// A sample's config without its batch size (the same for every batch size of one config).
fn config_identity(sample: &Sample) -> String {
    let mut config = sample.config.clone();
    config.batch = 1;
    config.to_json().to_string()
}

/// Order groups round-robin across layer types, so a time budget yields samples of every type; within a type by
/// key, a deterministic shuffle, so a budget-limited run is a random subsample rather than the first networks'.
fn round_robin(groups: Vec<VecDeque<Sample>>) -> VecDeque<VecDeque<Sample>> {
    let mut by_type: BTreeMap<LayerType, VecDeque<VecDeque<Sample>>> = BTreeMap::new();
    let mut groups = groups;
    groups.sort_by(|a, b| a.front().map(|s| &s.key).cmp(&b.front().map(|s| &s.key)));
    for g in groups {
        if let Some(first) = g.front() {
            by_type.entry(first.layer_type).or_default().push_back(g);
        }
    }
    let mut out = VecDeque::new();
    while by_type.values().any(|q| !q.is_empty()) {
        for q in by_type.values_mut() {
            if let Some(g) = q.pop_front() {
                out.push_back(g);
            }
        }
    }
    out
}

/// An engine as its rows' `engine` column names it, without its version: its name and, for ONNX Runtime, the
/// optimisation level (`onnxruntime 1.32.0 (optimisation all)` is `onnxruntime`, `all`).
fn engine_kind(engine: &str) -> (&str, Option<&str>) {
    let name = engine.split_whitespace().next().unwrap_or("");
    let level = engine.split_once("(optimisation ").and_then(|(_, rest)| rest.split(')').next());
    (name, level)
}

/// Refuse to add rows of `engine` to a device directory whose files hold rows of another engine or optimisation
/// level: one device's models learn one engine's times (a new version of the same engine is fine, as a
/// re-collection would measure it).
fn check_same_engine(device_dir: &Path, engine: &str) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(device_dir) else { return Ok(()) };
    let mut files: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "csv")).collect();
    files.sort();
    for path in files {
        let Ok(samples) = data::read_samples(&path) else { continue };
        if let Some(other) =
            samples.iter().map(|s| s.engine.as_str()).find(|e| !e.is_empty() && engine_kind(e) != engine_kind(engine))
        {
            return Err(Error::Invalid(format!(
                "{}: its rows were measured with '{other}', this collection measures with '{engine}': a device's rows \
                 come from one engine at one optimisation level; make a device of its own for this engine \
                 ('perfmodel device init NAME --executor ...') or collect into another --data-dir",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Measure `configs` (each expanded to the profile's batch sizes, ascending) on this device and append the rows
/// to `options.data_dir/DEVICE/<layer_type>.csv`, skipping what is already there.
pub fn collect(
    profile: &DeviceProfile,
    executor: &dyn Executor,
    configs: &[LayerConfig],
    options: &CollectOptions,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let started = Instant::now();
    // Another machine's profile would store this machine's timings under its name.
    profile.check_host(crate::device::Fingerprint::of_host())?;
    let mut device_dir = options.data_dir.join(&profile.name);
    if let Some(shard) = options.shard {
        device_dir = device_dir.join(shard.dir_name());
    }
    // Two collections into the same files would measure the same configs and interleave their rows.
    let _lock = collection_lock(&device_dir)?;
    check_same_engine(&device_dir, &executor.describe())?;
    write_atomic(device_dir.join("profile.toml"), profile.to_toml()?.as_bytes())?;

    let mut seen = HashSet::new();
    let mut groups: Vec<Vec<Sample>> = Vec::new();
    for config in configs {
        if options.layers.as_ref().is_some_and(|l| !l.contains(&config.layer_type())) {
            continue;
        }
        let group = profile
            .batch_sizes
            .iter()
            .map(|&batch| Sample::unmeasured(&LayerConfig { batch, ..config.clone() }))
            .collect::<Result<Vec<_>>>()?;
        if options.shard.is_some_and(|s| !s.contains(&group[0].key)) || !seen.insert(group[0].key.clone()) {
            continue;
        }
        groups.push(group);
    }

    let mut writers: BTreeMap<LayerType, SampleWriter> = BTreeMap::new();
    for g in &groups {
        if let std::collections::btree_map::Entry::Vacant(slot) = writers.entry(g[0].layer_type) {
            let w = SampleWriter::open(&data::file_path(&device_dir, g[0].layer_type))?;
            if let Some(note) = w.repair_note() {
                observer.note(note);
            }
            slot.insert(w);
        }
    }
    // Drop what is recorded; a recorded failure ends its config's batch sizes.
    let pending: Vec<VecDeque<Sample>> = groups
        .into_iter()
        .map(|g| {
            let w = &writers[&g[0].layer_type];
            let mut left = VecDeque::new();
            for s in g {
                match w.status(&s.key) {
                    Some(Status::Failed) => return VecDeque::new(),
                    Some(_) => {}
                    None => left.push_back(s),
                }
            }
            left
        })
        .filter(|g| !g.is_empty())
        .collect();
    // Quick: every config's first pending batch size, in the given order, then the rest of each config. The
    // rest of a config whose first sample fails is dropped, as a failure ends its batch sizes.
    let mut queue = if options.quick {
        let (mut firsts, mut rests) = (VecDeque::new(), VecDeque::new());
        for mut g in pending {
            let first = g.pop_front().expect("pending groups are not empty");
            firsts.push_back(VecDeque::from([first]));
            rests.push_back(g);
        }
        let rests = rests.into_iter().filter(|g: &VecDeque<Sample>| !g.is_empty());
        firsts.into_iter().chain(rests).collect()
    } else {
        round_robin(pending)
    };
    observer.planned(queue.iter().map(|g| g.len()).sum());
    let mut failed_configs: HashSet<String> = HashSet::new();

    let mut meter = Meter::new(profile, executor, observer);
    let mut measured: BTreeMap<LayerType, Vec<Sample>> = BTreeMap::new();
    let mut count = 0usize;
    let mut stopped_by = None;
    while !queue.is_empty() {
        if let Some(budget) = options.time_budget {
            if started.elapsed() >= budget {
                stopped_by = Some(format!("time budget of {} s reached", budget.as_secs()));
                break;
            }
        }
        let allowance = match options.max_samples {
            Some(max) if count >= max => {
                stopped_by = Some(format!("--max-samples {max} reached"));
                break;
            }
            Some(max) => max - count,
            None => usize::MAX,
        };
        let take = profile.protocol.group_size.min(allowance).min(queue.len());
        let mut window: Vec<VecDeque<Sample>> =
            if options.quick { draw_quick(&mut queue, take, &failed_configs) } else { queue.drain(..take).collect() };
        if window.is_empty() {
            continue;
        }
        let batch: Vec<Sample> = window.iter_mut().filter_map(|g| g.pop_front()).collect();
        let results = meter.measure_group(batch);
        if let Some(lost) = meter.probe_lost.take() {
            observer.note(&lost);
        }
        for (group, sample) in window.iter_mut().zip(&results) {
            writers
                .get_mut(&sample.layer_type)
                .ok_or_else(|| Error::Invalid(format!("no data file open for {}", sample.layer_type)))?
                .append(sample)?;
            observer.recorded(sample);
            count += 1;
            if sample.status == Status::Failed {
                group.clear();
                if options.quick {
                    // The rest of the config's batch sizes is queued behind every config's first.
                    failed_configs.insert(config_identity(sample));
                }
            }
        }
        for (group, sample) in window.into_iter().zip(results).rev() {
            measured.entry(sample.layer_type).or_default().push(sample);
            if !group.is_empty() {
                queue.push_front(group);
            }
        }
    }

    let types = writers
        .iter()
        .map(|(&t, w)| {
            let run = measured.get(&t).map(Vec::as_slice).unwrap_or(&[]);
            let by = |st: Status| run.iter().filter(|s| s.status == st).count();
            let mut lat: Vec<f64> = run.iter().filter_map(|s| s.latency_ms).collect();
            lat.sort_by(f64::total_cmp);
            TypeSummary {
                layer_type: t,
                ok: by(Status::Ok),
                unstable: by(Status::Unstable),
                failed: by(Status::Failed),
                rows: w.len(),
                median_latency_ms: (!lat.is_empty()).then(|| quantile_sorted(&lat, 0.5)),
            }
        })
        .collect();
    Ok(Summary {
        device_dir,
        types,
        elapsed: started.elapsed(),
        remaining: queue.iter().map(|g| g.len()).sum(),
        stopped_by,
    })
}

/// One stored sample measured again.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Remeasured {
    pub key: String,
    pub layer_type: String,
    pub stored_ms: f64,
    pub new_ms: f64,
    /// |new - stored| / stored.
    pub relative_difference: f64,
    /// The speed-probe reading of each measurement (`speed_ref_ms`), when there was one.
    pub stored_probe_ms: Option<f64>,
    pub new_probe_ms: Option<f64>,
}

/// Repeatability check: stored samples measured again in this (fresh) process.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Remeasurement {
    pub device: String,
    pub timestamp: String,
    pub samples: Vec<Remeasured>,
    pub median_relative_difference: f64,
    pub p90_relative_difference: f64,
    /// Median of new / stored latency: far from 1 means the machine's load changed, not noise within a run.
    pub median_ratio: f64,
    /// The same two figures with each latency divided by the speed-probe reading taken with it, over the samples
    /// of layer types that follow the probe (`speed::follows_probe`) whose stored row has a reading: what is
    /// left once the machine's speed drift is taken out, as training does. `None` without such rows.
    pub median_relative_difference_at_probe_speed: Option<f64>,
    pub median_ratio_at_probe_speed: Option<f64>,
    /// How many samples the two figures above are over.
    pub probed_samples: usize,
    /// `/proc/loadavg` before and after the re-measurement (other processes compete for this machine's cores).
    pub load_average: (Option<String>, Option<String>),
}

/// The lock a collection (or a re-measurement) holds on a device's data directory while it runs.
fn collection_lock(device_dir: &Path) -> Result<crate::fsio::Lock> {
    let path = device_dir.join(".collect.lock");
    crate::fsio::try_lock(&path, || {
        format!(
            "another perfmodel process is collecting into {} (it holds {}); wait for it to finish (a collection is \
             split across machines with --shard, not across processes on one)",
            device_dir.display(),
            path.display()
        )
    })
}

fn load_average() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string())
}

/// Measure `count` random stored `ok` samples of the device again (same protocol, interleaved groups) and compare
/// the medians. The samples are chosen with `seed`.
pub fn remeasure(
    profile: &DeviceProfile,
    executor: &dyn Executor,
    data_dir: &Path,
    count: usize,
    seed: u64,
    observer: &mut dyn Observer,
) -> Result<Remeasurement> {
    profile.check_host(crate::device::Fingerprint::of_host())?;
    let stored = data::read_device(data_dir, &profile.name)?;
    let _lock = collection_lock(&data_dir.join(&profile.name))?;
    let stored: Vec<Sample> = stored.into_values().flatten().filter(|s| s.status == Status::Ok).collect();
    if stored.is_empty() {
        return Err(Error::Device {
            device: profile.name.clone(),
            message: format!("no ok samples in {} to re-measure", data_dir.join(&profile.name).display()),
        });
    }
    let load_before = load_average();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let chosen: Vec<Sample> = stored.choose_multiple(&mut rng, count).cloned().collect();
    observer.planned(chosen.len());
    let mut meter = Meter::new(profile, executor, observer);
    let mut samples = Vec::new();
    let mut probed: Vec<(f64, f64)> = Vec::new();
    for group in chosen.chunks(profile.protocol.group_size) {
        let fresh: Vec<Sample> = group.iter().map(|s| Sample::unmeasured(&s.config)).collect::<Result<_>>()?;
        for (old, new) in group.iter().zip(meter.measure_group(fresh)) {
            observer.recorded(&new);
            if let (Some(a), Some(b)) = (old.latency_ms, new.latency_ms) {
                samples.push(Remeasured {
                    key: old.key.clone(),
                    layer_type: old.layer_type.to_string(),
                    stored_ms: a,
                    new_ms: b,
                    relative_difference: (b - a).abs() / a,
                    stored_probe_ms: old.speed_ref_ms,
                    new_probe_ms: new.speed_ref_ms,
                });
                if let (Some(ra), Some(rb), true) =
                    (old.speed_ref_ms, new.speed_ref_ms, super::speed::follows_probe(old.layer_type))
                {
                    probed.push((a / super::speed::speed_factor(ra, 1.0), b / super::speed::speed_factor(rb, 1.0)));
                }
            }
        }
    }
    let mut rel: Vec<f64> = samples.iter().map(|s| s.relative_difference).collect();
    rel.sort_by(f64::total_cmp);
    let mut ratios: Vec<f64> = samples.iter().map(|s| s.new_ms / s.stored_ms).collect();
    ratios.sort_by(f64::total_cmp);
    Ok(Remeasurement {
        device: profile.name.clone(),
        timestamp: data::now_rfc3339(),
        samples,
        median_relative_difference: quantile_sorted(&rel, 0.5),
        p90_relative_difference: quantile_sorted(&rel, 0.9),
        median_ratio: quantile_sorted(&ratios, 0.5),
        median_relative_difference_at_probe_speed: median(
            &probed.iter().map(|(a, b)| (b - a).abs() / a).collect::<Vec<_>>(),
        ),
        median_ratio_at_probe_speed: median(&probed.iter().map(|(a, b)| b / a).collect::<Vec<_>>()),
        probed_samples: probed.len(),
        load_average: (load_before, load_average()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_another_engine_or_optimisation_level_are_refused() {
        assert_eq!(engine_kind("onnxruntime 1.32.0 (optimisation all)"), ("onnxruntime", Some("all")));
        assert_eq!(engine_kind("tract 0.23.9"), ("tract", None));
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("dev");
        // No directory, or no rows yet: anything goes.
        check_same_engine(&device, "tract 0.23.9").unwrap();
        let cfg = LayerConfig::new(
            crate::layer::Op::Conv2d(crate::layer::Conv2d::new(8, [3, 3])),
            vec![smallvec::smallvec![3, 8, 8]],
            1,
        );
        let mut sample = Sample::unmeasured(&cfg).unwrap();
        sample.engine = "onnxruntime 1.32.0 (optimisation all)".into();
        let path = data::file_path(&device, LayerType::Conv2d);
        SampleWriter::open(&path).unwrap().append(&sample).unwrap();
        // Another version of the same engine and level is the same device.
        check_same_engine(&device, "onnxruntime 1.33.1 (optimisation all)").unwrap();
        for other in ["onnxruntime 1.32.0 (optimisation basic)", "tract 0.23.9"] {
            let e = check_same_engine(&device, other).unwrap_err().to_string();
            assert!(e.contains("conv2d.csv") && e.contains("optimisation all") && e.contains(other), "{e}");
            assert!(!e.contains("  "), "{e}");
        }
    }

    #[test]
    fn shard_parsing_and_slurm() {
        assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
        assert!(Shard::parse("4/4").is_err() && Shard::parse("x").is_err() && Shard::parse("0/0").is_err());
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(Shard::from_slurm(env(&[])).unwrap(), None);
        let s = Shard::from_slurm(env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ]));
        assert_eq!(s.unwrap(), Some(Shard { index: 2, count: 3 }));
        let keys: Vec<String> =
            (0..200u64).map(|i| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect();
        let shards: Vec<Shard> = (0..3).map(|i| Shard { index: i, count: 3 }).collect();
        for k in &keys {
            assert_eq!(shards.iter().filter(|s| s.contains(k)).count(), 1);
        }
    }
}
