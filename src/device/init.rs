//! `perfmodel device init`: a profile for this machine, written from what is measured and probed here.
//!
//! Why: a device used to start as a hand-copied TOML file whose roofline numbers were derived on paper and whose
//! sensor list was a guess, and nothing tied it to the machine it described. Here the fingerprint is read, the
//! roofline is measured with the engine the device will use (peak GFLOP/s from a large matrix product at the
//! profile's thread count; memory bandwidth from a large copy on as many threads), and every power sensor the
//! collector knows is probed, each written with why it is or is not usable.

use super::fingerprint::{human_bytes, Fingerprint};
use crate::collect::profile::{
    fingerprint_table, DeviceProfile, PowerSettings, Protocol, SensorSpec, CPU_EXECUTORS, EXECUTORS,
};
use crate::collect::sensors::power_sensor;
use crate::engine::{Executor, GraphOptimization, OrtExecutor, TractExecutor};
use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use crate::layer::LayerConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `device init` is asked for.
#[derive(Debug, Clone)]
pub struct InitOptions {
    pub threads: usize,
    pub executor: String,
    /// Replace an existing profile of that name.
    pub force: bool,
    pub batch_sizes: Vec<usize>,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions { threads: 1, executor: "tract".into(), force: false, batch_sizes: vec![1, 2, 4, 8] }
    }
}

impl InitOptions {
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
    pub fn with_executor(mut self, executor: impl Into<String>) -> Self {
        self.executor = executor.into();
        self
    }
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }
}

/// Roofline numbers measured here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// Best rate of the engine's f32 matrix product (GFLOP/s) at the profile's threads.
    pub peak_gflops: f64,
    /// Bytes read plus written per second by a large copy (GB/s) on the profile's threads.
    pub memory_bandwidth_gbs: f64,
    /// The product that gave the peak, for the profile's comment.
    pub peak_workload: &'static str,
}

/// A power sensor the collector knows, probed here.
#[derive(Debug, Clone)]
pub struct SensorProbe {
    pub spec: SensorSpec,
    pub name: String,
    /// `Ok` when it can be read and measures the processor the executor runs on; else why not.
    pub usable: std::result::Result<(), String>,
}

/// The dense layer whose matrix product measures the peak: 256 x 1024 by 1024 x 1024 (0.54 GFLOP, 4 MiB of
/// weights), large enough to run at the kernels' best rate and small enough to stay in a second or so.
const PEAK_LAYER: &str =
    r#"{"activation":"linear","batch_size":256,"input_shapes":[[1024]],"type":"dense","units":1024,"use_bias":false}"#;
const PEAK_FLOP: f64 = 2.0 * 256.0 * 1024.0 * 1024.0;

/// Peak GFLOP/s: the fastest of repeated runs of [`PEAK_LAYER`] over about `budget`.
pub fn measure_peak_gflops(executor: &dyn Executor, budget: Duration) -> Result<f64> {
    let json: serde_json::Value = serde_json::from_str(PEAK_LAYER).expect("PEAK_LAYER is valid JSON");
    let config = LayerConfig::from_json(&json).map_err(|e| Error::Invalid(format!("peak layer: {e}")))?;
    let mut workload = executor.prepare_layer(&config)?;
    let times = crate::engine::time_runs(workload.as_mut(), 2, 5, budget, 1000)?;
    let best_ms = times.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(PEAK_FLOP / (best_ms / 1e3) / 1e9)
}

/// Memory bandwidth in GB/s (read plus written bytes): the fastest of repeated copies of a 256 MiB buffer, split
/// over `threads` threads, over about `budget`.
pub fn measure_memory_bandwidth(threads: usize, budget: Duration) -> f64 {
    const BYTES: usize = 256 << 20;
    let threads = threads.max(1);
    let src = vec![1u8; BYTES];
    let mut dst = vec![0u8; BYTES];
    let chunk = BYTES.div_ceil(threads);
    let mut copy = || {
        let t = Instant::now();
        std::thread::scope(|scope| {
            for (d, s) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                scope.spawn(move || d.copy_from_slice(s));
            }
        });
        t.elapsed().as_secs_f64()
    };
    copy();
    let started = Instant::now();
    let mut best = f64::INFINITY;
    let mut runs = 0;
    while runs < 3 || (started.elapsed() < budget && runs < 50) {
        best = best.min(copy());
        runs += 1;
    }
    std::hint::black_box(&dst);
    2.0 * BYTES as f64 / best / 1e9
}

/// Every power sensor kind the collector can read without configuration, probed here: RAPL and hwmon in their
/// sysfs roots, and the first NVIDIA GPU through NVML (never usable with a CPU executor).
pub fn probe_power_sensors(executor: &str) -> Vec<SensorProbe> {
    let specs = [
        SensorSpec::Rapl { root: PathBuf::from("/sys/class/powercap") },
        SensorSpec::Hwmon { root: PathBuf::from("/sys/class/hwmon"), chip: None, window_ms: 200.0 },
        SensorSpec::Nvml { index: 0, library: None },
    ];
    specs
        .into_iter()
        .map(|spec| {
            let sensor = power_sensor(&spec);
            let mut usable = sensor.check_available().map_err(|e| match e {
                Error::Sensor { message, .. } => message,
                other => other.to_string(),
            });
            if usable.is_ok() && matches!(spec, SensorSpec::Nvml { .. }) && CPU_EXECUTORS.contains(&executor) {
                usable =
                    Err(format!("present, but it reads the GPU's power and executor '{executor}' runs on the CPU"));
            }
            SensorProbe { name: sensor.name(), spec, usable }
        })
        .collect()
}

/// The measurement protocol for a new device: the shipped x86 devices' protocol, with a per-sample timeout
/// that grows as the machine is slower (a board's convolutions take seconds where an x86 core's take
/// milliseconds). `one_session` measures one config at a time
/// ([`crate::collect::profile::measures_one_config_at_a_time`]).
fn protocol_for(peak_gflops: f64, one_session: bool) -> Protocol {
    let timeout = (2.0 * 100.0 / peak_gflops.max(1.0)).clamp(2.0, 30.0);
    Protocol {
        burn_in_runs: 2,
        repetitions: 5,
        rounds: 3,
        group_size: if one_session { 1 } else { 4 },
        per_sample_timeout_s: (timeout * 10.0).round() / 10.0,
        min_window_ms: 1.0,
        max_cv: 0.2,
        max_measure_s: Some(1.5),
        speed_probe: true,
    }
}

/// What `init` wrote.
#[derive(Debug)]
pub struct Initialised {
    pub path: PathBuf,
    pub profile: DeviceProfile,
    pub roofline: Roofline,
    pub sensors: Vec<SensorProbe>,
}

/// Write `collectors_dir/NAME.toml` for this machine. An existing profile is kept unless `options.force`.
pub fn init(collectors_dir: &Path, name: &str, options: &InitOptions) -> Result<Initialised> {
    let fail = |message: String| Error::Device { device: name.to_string(), message };
    if !DeviceProfile::valid_name(name) {
        return Err(fail("a device name is letters, digits, '-' and '_'".into()));
    }
    if !EXECUTORS.contains(&options.executor.as_str()) {
        return Err(fail(format!("unknown executor '{}' (known: {})", options.executor, EXECUTORS.join(", "))));
    }
    if options.threads == 0 {
        return Err(fail("--threads must be at least 1".into()));
    }
    let path = collectors_dir.join(format!("{name}.toml"));
    if path.exists() && !options.force {
        return Err(fail(format!("{} exists; pass --force to replace it", path.display())));
    }
    let host = Fingerprint::of_host().clone();
    let executor: Box<dyn Executor> = match options.executor.as_str() {
        "onnxruntime" => Box::new(OrtExecutor::new(options.threads, GraphOptimization::default())?),
        _ => Box::new(TractExecutor::new(options.threads)?),
    };
    let peak_gflops = measure_peak_gflops(executor.as_ref(), Duration::from_millis(1500))?;
    let memory_bandwidth_gbs = measure_memory_bandwidth(options.threads, Duration::from_millis(1500));
    let roofline = Roofline { peak_gflops, memory_bandwidth_gbs, peak_workload: "256x1024 by 1024x1024 f32" };
    let sensors = probe_power_sensors(&options.executor);
    let text = profile_text(name, &host, options, &roofline, &sensors, &executor.describe())?;
    let mut profile = DeviceProfile::parse(&text, name, &path)?;
    profile.path = path.clone();
    write_atomic(&path, text.as_bytes())?;
    Ok(Initialised { path, profile, roofline, sensors })
}

/// The profile's TOML: the settings, then the fingerprint, with comments saying where each number came from.
pub fn profile_text(
    name: &str,
    host: &Fingerprint,
    options: &InitOptions,
    roofline: &Roofline,
    sensors: &[SensorProbe],
    engine: &str,
) -> Result<String> {
    let cpu = host.model_name.clone().unwrap_or_else(|| host.arch.clone());
    let threads = options.threads;
    let plural = if threads == 1 { "" } else { "s" };
    let mut hardware = BTreeMap::new();
    hardware.insert("cpu".to_string(), host.summary());
    let caches: Vec<String> = [("L1d", host.l1d_bytes), ("L2", host.l2_bytes), ("L3", host.l3_bytes)]
        .iter()
        .filter_map(|(n, b)| b.map(|b| format!("{n} {}", human_bytes(b))))
        .collect();
    if !caches.is_empty() {
        hardware.insert("caches".to_string(), caches.join(", "));
    }
    if let Some(mhz) = cpu_mhz() {
        hardware.insert("frequency".to_string(), format!("{mhz:.0} MHz (as /proc/cpuinfo reports it)"));
    }
    if let Some(mem) = total_memory() {
        hardware.insert("memory".to_string(), human_bytes(mem));
    }
    let mut software = BTreeMap::new();
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        software.insert("os".to_string(), format!("{} {}", std::env::consts::OS, release.trim()));
    }
    software.insert("engine".to_string(), format!("{engine}, {threads} thread{plural}"));
    let usable: Vec<SensorSpec> = sensors.iter().filter(|s| s.usable.is_ok()).map(|s| s.spec.clone()).collect();
    let profile = DeviceProfile {
        name: name.to_string(),
        path: PathBuf::new(),
        description: format!("{} {cpu}, {} on {threads} CPU thread{plural}", host.arch, options.executor),
        executor: options.executor.clone(),
        graph_optimization: (options.executor == "onnxruntime").then(GraphOptimization::default),
        // Said explicitly where it matters, ONNX Runtime's default: a pool's threads spin after a run.
        spinning: (options.executor == "onnxruntime" && threads > 1).then_some(true),
        host: true,
        threads,
        batch_sizes: options.batch_sizes.clone(),
        peak_gflops: Some((roofline.peak_gflops * 10.0).round() / 10.0),
        memory_bandwidth_gbs: Some((roofline.memory_bandwidth_gbs * 10.0).round() / 10.0),
        protocol: protocol_for(
            roofline.peak_gflops,
            crate::collect::profile::measures_one_config_at_a_time(&options.executor, threads),
        ),
        power: PowerSettings { subset_fraction: 1.0, sensors: usable },
        hardware,
        software,
        fingerprint: None,
    };
    let body =
        toml::to_string(&profile).map_err(|e| Error::Device { device: name.to_string(), message: e.to_string() })?;
    let mut doc: toml_edit::DocumentMut =
        body.parse().map_err(|e| Error::Device { device: name.to_string(), message: format!("profile: {e}") })?;
    doc.insert("fingerprint", toml_edit::Item::Table(fingerprint_table(host, name)?));
    let mut out = format!(
        "# Device '{name}', written by 'perfmodel device init' on this machine: {}.\n\
         # peak_gflops: the fastest run of a {} matrix product with {engine} on {threads} thread{plural};\n\
         # memory_bandwidth_gbs: bytes read plus written by the fastest copy of 256 MiB on {threads} thread{plural}.\n\
         # Power sensors probed here:\n",
        host.summary(),
        roofline.peak_workload
    );
    for s in sensors {
        match &s.usable {
            Ok(()) => out.push_str(&format!("#   {}: usable\n", s.name)),
            Err(why) => out.push_str(&format!("#   {}: not usable: {}\n", s.name, one_line(why))),
        }
    }
    if usable_count(sensors) == 0 {
        out.push_str("# No power sensor is usable here: power and energy are not collected for this device.\n");
    }
    out.push_str(&doc.to_string());
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

fn usable_count(sensors: &[SensorProbe]) -> usize {
    sensors.iter().filter(|s| s.usable.is_ok()).count()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `cpu MHz` of `/proc/cpuinfo`.
fn cpu_mhz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu MHz"))?;
    line.split_once(':')?.1.trim().parse().ok()
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn total_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_text_is_a_profile_of_this_host_that_collect_accepts() {
        let roofline = Roofline { peak_gflops: 123.4, memory_bandwidth_gbs: 20.0, peak_workload: "test" };
        let sensors = vec![SensorProbe {
            spec: SensorSpec::Rapl { root: PathBuf::from("/nonexistent") },
            name: "rapl".into(),
            usable: Err("no powercap\nhere".into()),
        }];
        let host = Fingerprint::of_host();
        let text = profile_text("new", host, &InitOptions::default(), &roofline, &sensors, "tract").unwrap();
        assert!(text.contains("rapl: not usable: no powercap here"), "{text}");
        let p = DeviceProfile::parse(&text, "new", Path::new("new.toml")).unwrap();
        assert_eq!(p.fingerprint.as_ref(), Some(host));
        assert_eq!(p.check_host(host).unwrap(), crate::collect::profile::HostMatch::Recorded);
        assert_eq!(p.peak_gflops, Some(123.4));
        assert!(p.power.sensors.is_empty());
        assert!(p.host && p.threads == 1);
    }

    #[test]
    fn slower_machines_get_longer_timeouts() {
        assert_eq!(protocol_for(150.0, false).per_sample_timeout_s, 2.0);
        assert_eq!(protocol_for(10.0, false).per_sample_timeout_s, 20.0);
        assert_eq!(protocol_for(1.0, false).per_sample_timeout_s, 30.0);
        assert_eq!(protocol_for(150.0, false).group_size, 4);
        assert_eq!(protocol_for(150.0, true).group_size, 1);
    }
}
