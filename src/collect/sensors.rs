//! Sensors: what the collector reads around a workload. One trait for all of them, so that a new meter (a lab
//! power meter, another GPU library) is one more implementation, and so that "not available here" is a normal,
//! explained answer instead of a crash or a column of zeros.
//!
//! Power sensors come in two kinds: energy counters (RAPL, hwmon `energy*_input`, a command printing joules) give
//! exact average power over a window as Δenergy/Δt; instantaneous meters (hwmon `power*_input`, NVML, a command
//! printing watts) are polled between runs and averaged. Both need the workload to keep running for the
//! sensor's window ([`Sensor::min_window`]), so the collector loops the layer until it is covered.

use super::alloc;
use super::profile::SensorSpec;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A sensor's result for one measurement window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub unit: &'static str,
}

pub trait Sensor {
    /// Human-readable identity, e.g. `rapl (/sys/class/powercap: package-0)`.
    fn name(&self) -> String;
    /// `Ok` when the sensor can be read here; otherwise an [`Error::Sensor`] that says why.
    fn check_available(&self) -> Result<()>;
    /// Shortest window over which a reading is meaningful.
    fn min_window(&self) -> Duration {
        Duration::ZERO
    }
    fn start(&mut self) -> Result<()>;
    /// Called between runs inside the window (instantaneous meters sample here).
    fn poll(&mut self) -> Result<()> {
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading>;
}

fn sensor_error(sensor: &str, message: impl Into<String>) -> Error {
    Error::Sensor { sensor: sensor.to_string(), message: message.into() }
}

/// Wall time on the monotonic clock, in milliseconds.
#[derive(Default)]
pub struct LatencySensor {
    started: Option<Instant>,
}

impl Sensor for LatencySensor {
    fn name(&self) -> String {
        "latency (monotonic clock)".into()
    }
    fn check_available(&self) -> Result<()> {
        Ok(())
    }
    fn start(&mut self) -> Result<()> {
        self.started = Some(Instant::now());
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading> {
        let t = self.started.take().ok_or_else(|| sensor_error("latency", "stop without start"))?;
        Ok(Reading { value: t.elapsed().as_secs_f64() * 1e3, unit: "ms" })
    }
}

/// Peak heap growth (bytes) between start and stop, from the counting global allocator.
#[derive(Default)]
pub struct MemorySensor {
    baseline: Option<usize>,
}

impl Sensor for MemorySensor {
    fn name(&self) -> String {
        "memory (counting allocator, peak heap bytes)".into()
    }
    fn check_available(&self) -> Result<()> {
        if alloc::is_installed() {
            Ok(())
        } else {
            Err(sensor_error(
                "memory",
                "the counting allocator is not this program's global allocator (only the perfmodel binary \
                 installs it), so heap use cannot be measured",
            ))
        }
    }
    fn start(&mut self) -> Result<()> {
        self.check_available()?;
        self.baseline = Some(alloc::reset_peak());
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading> {
        let base = self.baseline.take().ok_or_else(|| sensor_error("memory", "stop without start"))?;
        Ok(Reading { value: alloc::peak_bytes().saturating_sub(base) as f64, unit: "B" })
    }
}

fn read_number(path: &Path, sensor: &str) -> Result<f64> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (readable by root only on recent kernels: run as root or grant read access to this file)"
        } else {
            ""
        };
        sensor_error(sensor, format!("cannot read {}: {e}{hint}", path.display()))
    })?;
    text.trim()
        .parse::<f64>()
        .map_err(|_| sensor_error(sensor, format!("{}: expected a number, got '{}'", path.display(), text.trim())))
}

/// An energy counter in µJ that wraps at `max` (0 = never).
#[derive(Debug, Clone)]
struct EnergyCounter {
    path: PathBuf,
    max_uj: f64,
}

/// Δ of a wrapping counter: when the counter went down it wrapped once at `max`.
pub fn counter_delta(start: f64, end: f64, max: f64) -> f64 {
    if end >= start || max <= 0.0 {
        end - start
    } else {
        max - start + end
    }
}

/// Average power from summed energy counters.
struct EnergySensor {
    label: String,
    counters: Vec<EnergyCounter>,
    window: Duration,
    start: Option<(Instant, Vec<f64>)>,
    problem: Option<String>,
}

impl EnergySensor {
    fn read_all(&self) -> Result<Vec<f64>> {
        self.counters.iter().map(|c| read_number(&c.path, &self.label)).collect()
    }
}

impl Sensor for EnergySensor {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn check_available(&self) -> Result<()> {
        if let Some(p) = &self.problem {
            return Err(sensor_error(&self.label, p.clone()));
        }
        self.read_all().map(|_| ())
    }
    fn min_window(&self) -> Duration {
        self.window
    }
    fn start(&mut self) -> Result<()> {
        self.check_available()?;
        self.start = Some((Instant::now(), self.read_all()?));
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading> {
        let end = self.read_all()?;
        let (t0, start) = self.start.take().ok_or_else(|| sensor_error(&self.label, "stop without start"))?;
        let secs = t0.elapsed().as_secs_f64();
        let uj: f64 =
            self.counters.iter().zip(start.iter().zip(&end)).map(|(c, (&s, &e))| counter_delta(s, e, c.max_uj)).sum();
        Ok(Reading { value: uj * 1e-6 / secs.max(1e-9), unit: "W" })
    }
}

/// RAPL package domains under a powercap root: `intel-rapl:N` (sub-zones `intel-rapl:N:M` are parts of a
/// package and would be counted twice).
pub fn rapl_sensor(root: &Path) -> Box<dyn Sensor> {
    let label = format!("rapl ({})", root.display());
    let mut counters = Vec::new();
    let mut domains = Vec::new();
    let problem = match std::fs::read_dir(root) {
        Err(e) => Some(format!("{} is missing ({e}): no powercap/RAPL interface on this machine", root.display())),
        Ok(entries) => {
            let mut dirs: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.strip_prefix("intel-rapl:"))
                        .is_some_and(|rest| !rest.contains(':'))
                })
                .collect();
            dirs.sort();
            for d in dirs {
                let max_uj = read_number(&d.join("max_energy_range_uj"), &label).unwrap_or(0.0);
                let name = std::fs::read_to_string(d.join("name")).unwrap_or_default();
                domains.push(name.trim().to_string());
                counters.push(EnergyCounter { path: d.join("energy_uj"), max_uj });
            }
            counters.is_empty().then(|| format!("no intel-rapl:N package domains under {}", root.display()))
        }
    };
    let label = if domains.is_empty() { label } else { format!("rapl ({}: {})", root.display(), domains.join(", ")) };
    Box::new(EnergySensor { label, counters, window: Duration::from_millis(50), start: None, problem })
}

/// Polls instantaneous power readings and averages them over the window.
struct PollingSensor {
    label: String,
    read: Box<dyn FnMut() -> Result<f64>>,
    window: Duration,
    readings: Vec<f64>,
    last_poll: Option<Instant>,
    problem: Option<String>,
}

/// Instantaneous meters are not read more often than this (reads cost time and most meters update slower).
const POLL_INTERVAL: Duration = Duration::from_millis(20);

impl Sensor for PollingSensor {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn check_available(&self) -> Result<()> {
        match &self.problem {
            Some(p) => Err(sensor_error(&self.label, p.clone())),
            None => Ok(()),
        }
    }
    fn min_window(&self) -> Duration {
        self.window
    }
    fn start(&mut self) -> Result<()> {
        self.check_available()?;
        self.readings.clear();
        self.readings.push((self.read)()?);
        self.last_poll = Some(Instant::now());
        Ok(())
    }
    fn poll(&mut self) -> Result<()> {
        if self.last_poll.is_some_and(|t| t.elapsed() >= POLL_INTERVAL) {
            self.readings.push((self.read)()?);
            self.last_poll = Some(Instant::now());
        }
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading> {
        if self.last_poll.take().is_none() {
            return Err(sensor_error(&self.label, "stop without start"));
        }
        self.readings.push((self.read)()?);
        Ok(Reading { value: self.readings.iter().sum::<f64>() / self.readings.len() as f64, unit: "W" })
    }
}

/// hwmon chips under `root` (optionally only those whose `name` is `chip`): energy counters when any exist
/// (exact averages), else instantaneous power inputs.
pub fn hwmon_sensor(root: &Path, chip: Option<&str>, window: Duration) -> Box<dyn Sensor> {
    let what = chip.map(|c| format!(" chip '{c}'")).unwrap_or_default();
    let label = format!("hwmon ({}{what})", root.display());
    let mut energy = Vec::new();
    let mut power = Vec::new();
    let problem = match std::fs::read_dir(root) {
        Err(e) => Some(format!("{} is missing ({e}): no hwmon interface on this machine", root.display())),
        Ok(entries) => {
            let mut chips: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            chips.sort();
            for dir in chips {
                let name = std::fs::read_to_string(dir.join("name")).unwrap_or_default();
                if chip.is_some_and(|c| c != name.trim()) {
                    continue;
                }
                let Ok(files) = std::fs::read_dir(&dir) else { continue };
                let mut files: Vec<PathBuf> = files.filter_map(|e| e.ok().map(|e| e.path())).collect();
                files.sort();
                for f in files {
                    let Some(n) = f.file_name().and_then(|n| n.to_str()) else { continue };
                    let numbered = |prefix: &str| {
                        n.strip_prefix(prefix)
                            .and_then(|r| r.strip_suffix("_input"))
                            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
                    };
                    if numbered("energy") {
                        energy.push(EnergyCounter { path: f, max_uj: 0.0 });
                    } else if numbered("power") {
                        power.push(f);
                    }
                }
            }
            (energy.is_empty() && power.is_empty()).then(|| {
                format!("no power*_input or energy*_input files in the hwmon chips under {}{what}", root.display())
            })
        }
    };
    if !energy.is_empty() {
        return Box::new(EnergySensor { label, counters: energy, window, start: None, problem });
    }
    let read_label = label.clone();
    let read = Box::new(move || -> Result<f64> {
        let mut uw = 0.0;
        for p in &power {
            uw += read_number(p, &read_label)?;
        }
        Ok(uw * 1e-6)
    });
    Box::new(PollingSensor { label, read, window, readings: vec![], last_poll: None, problem })
}

/// NVIDIA board power through NVML. A missing `libnvidia-ml` is reported as unavailable, with the loader's error.
pub fn nvml_sensor(index: u32, library: Option<&Path>) -> Box<dyn Sensor> {
    let label = format!("nvml (GPU {index})");
    let mut builder = nvml_wrapper::Nvml::builder();
    if let Some(lib) = library {
        builder.lib_path(lib.as_os_str());
    }
    let (nvml, problem) = match builder.init() {
        Ok(n) => (Some(n), None),
        Err(e) => (
            None,
            Some(format!(
                "NVML unavailable: could not load/initialise {} ({e}); is an NVIDIA driver installed?",
                library.map(|l| l.display().to_string()).unwrap_or_else(|| "libnvidia-ml.so".into())
            )),
        ),
    };
    let problem = problem.or_else(|| {
        let n = nvml.as_ref()?;
        n.device_by_index(index).err().map(|e| format!("NVML has no GPU {index}: {e}"))
    });
    let read_label = label.clone();
    let read = Box::new(move || -> Result<f64> {
        let n = nvml.as_ref().ok_or_else(|| sensor_error(&read_label, "NVML not initialised"))?;
        let mw = n
            .device_by_index(index)
            .and_then(|d| d.power_usage())
            .map_err(|e| sensor_error(&read_label, format!("power reading failed: {e}")))?;
        Ok(mw as f64 * 1e-3)
    });
    // NVML's power reading is averaged by the driver over about 1/6 s.
    Box::new(PollingSensor {
        label,
        read,
        window: Duration::from_millis(200),
        readings: vec![],
        last_poll: None,
        problem,
    })
}

/// NVIDIA device memory in use (bytes) through NVML, for GPU executors and `perfmodel devices`.
pub fn nvml_device_memory_used(index: u32, library: Option<&Path>) -> Result<u64> {
    let mut builder = nvml_wrapper::Nvml::builder();
    if let Some(lib) = library {
        builder.lib_path(lib.as_os_str());
    }
    let nvml = builder.init().map_err(|e| sensor_error("nvml", format!("NVML unavailable: {e}")))?;
    let device = nvml.device_by_index(index).map_err(|e| sensor_error("nvml", format!("no GPU {index}: {e}")))?;
    Ok(device.memory_info().map_err(|e| sensor_error("nvml", e.to_string()))?.used)
}

/// Parse a meter command's output: the first number, with an optional unit (`W`, `mW`, `J`, `mJ`, `uJ`) that
/// must agree with the expected kind; `default_unit` ("W" or "J") applies to a bare number. Returns W or J.
pub fn parse_meter_output(text: &str, default_unit: &str) -> std::result::Result<f64, String> {
    let trimmed = text.trim();
    let end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(trimmed.len());
    let (num, rest) = trimmed.split_at(end);
    let value: f64 = num.parse().map_err(|_| format!("expected a number, got '{trimmed}'"))?;
    let unit = rest.split_whitespace().next().unwrap_or(default_unit);
    let (scale, kind) = match unit {
        "W" => (1.0, "W"),
        "mW" => (1e-3, "W"),
        "uW" | "µW" => (1e-6, "W"),
        "J" => (1.0, "J"),
        "mJ" => (1e-3, "J"),
        "uJ" | "µJ" => (1e-6, "J"),
        other => return Err(format!("unknown unit '{other}' in '{trimmed}' (expected W, mW, uW, J, mJ or uJ)")),
    };
    if kind != default_unit {
        return Err(format!("the profile expects {default_unit} but the command printed {unit}"));
    }
    Ok(value * scale)
}

fn run_meter(command: &str, unit: &str, label: &str) -> Result<f64> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .map_err(|e| sensor_error(label, format!("cannot run: {e}")))?;
    if !out.status.success() {
        return Err(sensor_error(
            label,
            format!("exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        ));
    }
    parse_meter_output(&String::from_utf8_lossy(&out.stdout), unit).map_err(|m| sensor_error(label, m))
}

/// A lab meter behind a user command.
pub fn command_sensor(command: &str, unit: &str, window: Duration) -> Box<dyn Sensor> {
    let label = format!("command `{command}` ({unit})");
    if unit == "J" {
        return Box::new(CommandEnergySensor { label, command: command.to_string(), window, start: None });
    }
    let (read_label, cmd) = (label.clone(), command.to_string());
    let read = Box::new(move || run_meter(&cmd, "W", &read_label));
    let problem = read().err().map(|e| match e {
        Error::Sensor { message, .. } => message,
        other => other.to_string(),
    });
    Box::new(PollingSensor { label, read, window, readings: vec![], last_poll: None, problem })
}

/// A command printing a cumulative energy in joules: average power = ΔJ / Δt.
struct CommandEnergySensor {
    label: String,
    command: String,
    window: Duration,
    start: Option<(Instant, f64)>,
}

impl Sensor for CommandEnergySensor {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn check_available(&self) -> Result<()> {
        run_meter(&self.command, "J", &self.label).map(|_| ())
    }
    fn min_window(&self) -> Duration {
        self.window
    }
    fn start(&mut self) -> Result<()> {
        let j = run_meter(&self.command, "J", &self.label)?;
        self.start = Some((Instant::now(), j));
        Ok(())
    }
    fn stop(&mut self) -> Result<Reading> {
        let j = run_meter(&self.command, "J", &self.label)?;
        let (t0, j0) = self.start.take().ok_or_else(|| sensor_error(&self.label, "stop without start"))?;
        Ok(Reading { value: (j - j0) / t0.elapsed().as_secs_f64().max(1e-9), unit: "W" })
    }
}

/// The sensor a profile entry describes.
pub fn power_sensor(spec: &SensorSpec) -> Box<dyn Sensor> {
    let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
    match spec {
        SensorSpec::Rapl { root } => rapl_sensor(root),
        SensorSpec::Hwmon { root, chip, window_ms } => hwmon_sensor(root, chip.as_deref(), ms(*window_ms)),
        SensorSpec::Nvml { index, library } => nvml_sensor(*index, library.as_deref()),
        SensorSpec::Command { command, unit, window_ms } => command_sensor(command, unit, ms(*window_ms)),
    }
}

/// The power sensors of a profile that work here, or why none does (one line per sensor).
pub fn available_power_sensors(specs: &[SensorSpec]) -> std::result::Result<Vec<Box<dyn Sensor>>, String> {
    if specs.is_empty() {
        return Err("the device profile lists no power sensor".into());
    }
    let mut ok = Vec::new();
    let mut why = Vec::new();
    for spec in specs {
        let s = power_sensor(spec);
        match s.check_available() {
            Ok(()) => ok.push(s),
            Err(e) => why.push(e.to_string()),
        }
    }
    if ok.is_empty() {
        Err(why.join("; "))
    } else {
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_counter() {
        assert_eq!(counter_delta(100.0, 300.0, 1000.0), 200.0);
        assert_eq!(counter_delta(900.0, 100.0, 1000.0), 200.0);
    }

    #[test]
    fn meter_output_units() {
        assert_eq!(parse_meter_output("12.5\n", "W").unwrap(), 12.5);
        assert_eq!(parse_meter_output("1500 mW", "W").unwrap(), 1.5);
        assert_eq!(parse_meter_output("3.0 J", "J").unwrap(), 3.0);
        assert!(parse_meter_output("3.0 J", "W").unwrap_err().contains("expects W"));
        assert!(parse_meter_output("n/a", "W").is_err());
    }
}
