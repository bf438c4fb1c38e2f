//! Device profiles (`collectors/NAME.toml`): everything that makes measurements on one device repeatable — the
//! engine and its threads, batch sizes, the measurement protocol, the power sensors — and the hardware/software
//! description that is stored next to the data, so a dataset can always be traced to what produced it.

use crate::device::Fingerprint;
use crate::error::{Error, Result};
use crate::fsio::write_atomic;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Executors the collector can drive.
pub const EXECUTORS: [&str; 2] = ["tract", "onnxruntime"];

/// Executors that run layers on the CPU (whose power a GPU sensor does not measure).
pub const CPU_EXECUTORS: [&str; 2] = ["tract", "onnxruntime"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// File stem of the profile; filled in by [`DeviceProfile::load`].
    #[serde(skip)]
    pub name: String,
    /// The file it was loaded from (empty for a profile parsed from text); filled in by [`DeviceProfile::load`].
    #[serde(skip)]
    pub path: PathBuf,
    pub description: String,
    pub executor: String,
    /// ONNX Runtime's graph-optimisation level (`executor = "onnxruntime"` only; default `all`, ONNX Runtime's
    /// own default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_optimization: Option<crate::engine::GraphOptimization>,
    /// Whether ONNX Runtime's intra-op threads spin after a run waiting for more work (`executor = "onnxruntime"`
    /// only; default true, ONNX Runtime's own default). A device measured with `spinning = false` describes
    /// sessions whose threads sleep between runs, which runs small layers slower.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spinning: Option<bool>,
    /// This profile is the machine perfmodel runs on (its data was measured here): estimates may ask this
    /// machine's engine how it lays out weights (see `engine::packing`).
    #[serde(default)]
    pub host: bool,
    pub threads: usize,
    /// Ascending after loading; every config is measured at each of them.
    pub batch_sizes: Vec<usize>,
    /// Peak FLOP/s of the executor's configuration, in GFLOP/s (roofline / paleo baseline).
    #[serde(default)]
    pub peak_gflops: Option<f64>,
    /// Sustained memory bandwidth in GB/s (roofline / paleo baseline).
    #[serde(default)]
    pub memory_bandwidth_gbs: Option<f64>,
    pub protocol: Protocol,
    #[serde(default)]
    pub power: PowerSettings,
    /// Free-form description of the hardware (CPU, memory, board...).
    #[serde(default)]
    pub hardware: BTreeMap<String, String>,
    /// Free-form description of the software (OS, kernel, engine...).
    #[serde(default)]
    pub software: BTreeMap<String, String>,
    /// The machine the profile measures ([`Fingerprint`]); absent in profiles written before fingerprints,
    /// partial in board profiles written before the board was seen. Commands that measure for the device
    /// compare it with this host ([`DeviceProfile::check_host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

/// How a profile's recorded machine compares with this host, when it does not contradict it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMatch {
    /// Every field this host can read is recorded and equal.
    Recorded,
    /// The recorded fields are equal, but some are missing: the first collection here fills them in.
    Partial,
    /// The profile records no machine: the first collection here records this one.
    Unrecorded,
}

/// How one sample is measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Untimed runs after building a workload (caches, lazy allocations, frequency ramp-up).
    pub burn_in_runs: usize,
    /// Timed repetitions per round.
    pub repetitions: usize,
    /// Rounds; within a round the configs of a group are measured one after another (interleaving), so a noisy
    /// moment of the machine spreads over several configs instead of biasing one.
    pub rounds: usize,
    /// Configs measured together in one interleaved group.
    pub group_size: usize,
    /// A single run slower than this fails the sample ("timeout") and skips the config's larger batch sizes.
    pub per_sample_timeout_s: f64,
    /// Minimum duration of one timed repetition: faster layers run several times per repetition, so clock
    /// resolution and loop overhead stay negligible.
    pub min_window_ms: f64,
    /// Robust coefficient of variation (1.4826 MAD / median) above which a sample is re-measured once, then
    /// marked unstable. Robust because one preempted repetition on a shared machine should not condemn a sample
    /// whose median is solid; the classic CV is still recorded.
    pub max_cv: f64,
    /// Cap on the timed measuring time of one sample: slow layers get fewer repetitions per round (at least 2),
    /// since their long runs already average out short disturbances.
    #[serde(default)]
    pub max_measure_s: Option<f64>,
    /// Time the machine-speed probe (`collect::speed`) next to every sample and record it (`speed_ref_ms`),
    /// so that training can take out the machine's speed drift.
    #[serde(default = "yes")]
    pub speed_probe: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSettings {
    /// Fraction of samples for which power is measured (power models saturate early; power windows are long).
    #[serde(default = "one")]
    pub subset_fraction: f64,
    /// Power sensors, summed (e.g. CPU package + DRAM); empty = no power measurement.
    #[serde(default)]
    pub sensors: Vec<SensorSpec>,
}

fn one() -> f64 {
    1.0
}

impl Default for PowerSettings {
    fn default() -> Self {
        PowerSettings { subset_fraction: 1.0, sensors: Vec::new() }
    }
}

/// A power sensor. Sysfs roots are configurable so a profile (or a test) can point at another tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SensorSpec {
    /// Linux powercap / Intel RAPL package energy counters (`intel-rapl:N/energy_uj`).
    Rapl {
        #[serde(default = "default_powercap")]
        root: PathBuf,
    },
    /// Linux hwmon `power*_input` (µW) or `energy*_input` (µJ), optionally only chips with this `name`.
    Hwmon {
        #[serde(default = "default_hwmon")]
        root: PathBuf,
        #[serde(default)]
        chip: Option<String>,
        #[serde(default = "default_window_ms")]
        window_ms: f64,
    },
    /// NVIDIA GPU through NVML (`libnvidia-ml`): board power.
    Nvml {
        #[serde(default)]
        index: u32,
        /// Path of `libnvidia-ml.so` when not on the loader path.
        #[serde(default)]
        library: Option<PathBuf>,
    },
    /// A lab meter read by a command that prints a number in watts (`unit = "W"`, instantaneous) or joules
    /// (`unit = "J"`, a cumulative counter).
    Command {
        command: String,
        unit: String,
        #[serde(default = "default_command_window_ms")]
        window_ms: f64,
    },
}

fn default_powercap() -> PathBuf {
    PathBuf::from("/sys/class/powercap")
}
fn default_hwmon() -> PathBuf {
    PathBuf::from("/sys/class/hwmon")
}
fn default_window_ms() -> f64 {
    200.0
}
fn default_command_window_ms() -> f64 {
    1000.0
}

impl DeviceProfile {
    /// Load `collectors_dir/NAME.toml`. An unknown name lists the known ones.
    pub fn load(collectors_dir: &Path, name: &str) -> Result<DeviceProfile> {
        let path = collectors_dir.join(format!("{name}.toml"));
        if !Self::valid_name(name) || !path.is_file() {
            let known = Self::names(collectors_dir)?;
            return Err(Error::Device {
                device: name.to_string(),
                message: format!(
                    "no profile {} (known devices: {})",
                    path.display(),
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let mut profile = Self::parse(&text, name, &path)?;
        profile.path = path;
        Ok(profile)
    }

    /// Whether `name` can name a device (and its profile, data and model files): letters, digits, '-', '_'.
    pub fn valid_name(name: &str) -> bool {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }

    /// What this profile's recorded machine is to `host`, in words (for `devices` and `device fingerprint`).
    pub fn machine_status(&self, host: &Fingerprint) -> String {
        let recorded = || self.fingerprint.as_ref().map(|f| f.summary()).unwrap_or_default();
        match self.check_host(host) {
            Err(_) => format!("another machine: {} (collect and calibrate refuse it here)", recorded()),
            Ok(HostMatch::Recorded) => "this machine".to_string(),
            Ok(HostMatch::Partial) => {
                format!(
                    "{} (partly recorded, matches this machine; its first collection here completes it)",
                    recorded()
                )
            }
            Ok(HostMatch::Unrecorded) => "not recorded (its first collection records the machine it runs on)".into(),
        }
    }

    /// Parse profile text; `path` is only for messages.
    pub fn parse(text: &str, name: &str, path: &Path) -> Result<DeviceProfile> {
        let fail = |message: String| Error::Device { device: name.to_string(), message };
        let mut p: DeviceProfile = toml::from_str(text).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        p.name = name.to_string();
        let bad = |field: &str, why: &str| fail(format!("{}: field '{field}': {why}", path.display()));
        if !EXECUTORS.contains(&p.executor.as_str()) {
            return Err(bad(
                "executor",
                &format!("unknown executor '{}' (known: {})", p.executor, EXECUTORS.join(", ")),
            ));
        }
        if p.threads == 0 {
            return Err(bad("threads", "must be at least 1"));
        }
        if p.graph_optimization.is_some() && p.executor != "onnxruntime" {
            return Err(bad(
                "graph_optimization",
                &format!("is ONNX Runtime's setting; executor '{}' has none", p.executor),
            ));
        }
        if p.spinning.is_some() && p.executor != "onnxruntime" {
            return Err(bad("spinning", &format!("is ONNX Runtime's setting; executor '{}' has none", p.executor)));
        }
        p.batch_sizes.sort_unstable();
        p.batch_sizes.dedup();
        if p.batch_sizes.is_empty() || p.batch_sizes[0] == 0 {
            return Err(bad("batch_sizes", "needs at least one positive batch size"));
        }
        let pr = &p.protocol;
        for (field, v) in [("protocol.repetitions", pr.repetitions), ("protocol.rounds", pr.rounds)] {
            if v == 0 {
                return Err(bad(field, "must be at least 1"));
            }
        }
        if pr.group_size == 0 {
            return Err(bad("protocol.group_size", "must be at least 1"));
        }
        if measures_one_config_at_a_time(&p.executor, p.threads) && pr.group_size > 1 {
            return Err(bad(
                "protocol.group_size",
                "must be 1 for ONNX Runtime on more than one thread: each session keeps intra-op threads of its own, \
                 which spin after a run, so sessions measured in turn take each other's cores (on a 2-vCPU host \
                 with 2 threads, groups of 4 left 28% of the samples unstable, groups of 1 0.3%)",
            ));
        }
        for (field, v) in [("protocol.per_sample_timeout_s", pr.per_sample_timeout_s), ("protocol.max_cv", pr.max_cv)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(field, "must be a positive number"));
            }
        }
        if pr.max_measure_s.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            return Err(bad("protocol.max_measure_s", "must be a positive number"));
        }
        if !(pr.min_window_ms.is_finite() && pr.min_window_ms >= 0.0) {
            return Err(bad("protocol.min_window_ms", "must be zero or a positive number"));
        }
        if !(0.0..=1.0).contains(&p.power.subset_fraction) {
            return Err(bad("power.subset_fraction", "must be between 0 and 1"));
        }
        for (field, v) in [("peak_gflops", p.peak_gflops), ("memory_bandwidth_gbs", p.memory_bandwidth_gbs)] {
            if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(bad(field, "must be a positive number"));
            }
        }
        for s in &p.power.sensors {
            if let SensorSpec::Command { unit, .. } = s {
                if !["W", "J"].contains(&unit.as_str()) {
                    return Err(bad("power.sensors.unit", &format!("expected \"W\" or \"J\", got \"{unit}\"")));
                }
            }
            if matches!(s, SensorSpec::Nvml { .. }) && CPU_EXECUTORS.contains(&p.executor.as_str()) {
                return Err(bad(
                    "power.sensors",
                    &format!(
                        "an NVML sensor reads an NVIDIA GPU's power, but executor '{}' runs the layers on the CPU: \
                         a profile may not time one processor and read another's power (a GPU device needs a GPU \
                         executor; see the README)",
                        p.executor
                    ),
                ));
            }
        }
        if let Some(f) = &p.fingerprint {
            if f.arch.trim().is_empty() {
                return Err(bad("fingerprint.arch", "must name the architecture (x86_64, aarch64, ...)"));
            }
        }
        Ok(p)
    }

    /// Names of the profiles in a directory, sorted.
    pub fn names(collectors_dir: &Path) -> Result<Vec<String>> {
        let entries = match std::fs::read_dir(collectors_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(collectors_dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| Error::io(collectors_dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("toml") {
                if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                    names.push(stem.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Every profile in a directory; the first invalid one is an error.
    pub fn list(collectors_dir: &Path) -> Result<Vec<DeviceProfile>> {
        Self::names(collectors_dir)?.iter().map(|n| Self::load(collectors_dir, n)).collect()
    }

    /// Whether this profile may measure on the machine `host`: an error naming both machines when the recorded
    /// fingerprint contradicts it (with how to run on a board when the profile is for another architecture),
    /// else how complete the record is.
    pub fn check_host(&self, host: &Fingerprint) -> Result<HostMatch> {
        let Some(recorded) = &self.fingerprint else { return Ok(HostMatch::Unrecorded) };
        let differences = host.differences(recorded);
        if differences.is_empty() {
            return Ok(if recorded.is_complete_for(host) { HostMatch::Recorded } else { HostMatch::Partial });
        }
        let file = if self.path.as_os_str().is_empty() {
            format!("{}.toml", self.name)
        } else {
            self.path.display().to_string()
        };
        let how = if recorded.arch != host.arch {
            format!(
                "'{name}' is a profile for an {arch} machine: run perfmodel on that machine itself (install Rust with \
                 rustup there, copy this repository over, build it with 'cargo build --release' and run \
                 'target/release/perfmodel collect --device {name}'); to measure this host, make a device for it \
                 with 'perfmodel device init NAME'",
                name = self.name,
                arch = recorded.arch
            )
        } else {
            "this host is another machine: make a device for it with 'perfmodel device init NAME', then \
             'perfmodel collect --device NAME'"
                .to_string()
        };
        Err(Error::Device {
            device: self.name.clone(),
            message: format!(
                "{file} was made for another machine: {} (this host: {}; differs in {}). Nothing was measured or \
                 written. {how}",
                recorded.summary(),
                host.summary(),
                differences.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
            ),
        })
    }

    /// Record `host` as this profile's machine in its file (keeping the file's comments and layout), after
    /// [`Self::check_host`] found no contradiction. A no-op when the record is already complete.
    pub fn record_host(&mut self, host: &Fingerprint) -> Result<bool> {
        if self.check_host(host)? == HostMatch::Recorded {
            return Ok(false);
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| Error::Device {
            device: self.name.clone(),
            message: format!("{}: {e}", self.path.display()),
        })?;
        // This host's fields, and what the profile records that this host cannot read.
        let mut merged = host.clone();
        if let Some(r) = &self.fingerprint {
            merged.vendor = merged.vendor.or_else(|| r.vendor.clone());
            merged.family = merged.family.or(r.family);
            merged.model = merged.model.or(r.model);
            merged.model_name = merged.model_name.or_else(|| r.model_name.clone());
            merged.isa_features = merged.isa_features.or_else(|| r.isa_features.clone());
            merged.l1d_bytes = merged.l1d_bytes.or(r.l1d_bytes);
            merged.l2_bytes = merged.l2_bytes.or(r.l2_bytes);
            merged.l3_bytes = merged.l3_bytes.or(r.l3_bytes);
            // The recorded count stands: a collection pinned to fewer CPUs runs on the same machine.
            merged.cpus = r.cpus.or(merged.cpus);
        }
        let table = fingerprint_table(&merged, &self.name)?;
        doc.insert("fingerprint", toml_edit::Item::Table(table));
        let updated = doc.to_string();
        // What is written must still be this profile, with the host recorded.
        let mut reread = Self::parse(&updated, &self.name, &self.path)?;
        reread.path = self.path.clone();
        write_atomic(&self.path, updated.as_bytes())?;
        *self = reread;
        Ok(true)
    }

    /// The profile as TOML, stored beside the collected data.
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::Device { device: self.name.clone(), message: e.to_string() })
    }
}

/// Whether a device of this engine and thread count must measure one config at a time (`protocol.group_size =
/// 1`): ONNX Runtime on several threads, whose sessions each keep intra-op threads that would take the cores of
/// the session being timed.
pub fn measures_one_config_at_a_time(executor: &str, threads: usize) -> bool {
    executor == "onnxruntime" && threads > 1
}

/// `[fingerprint]` as a TOML table, with a comment saying what it is.
pub fn fingerprint_table(host: &Fingerprint, device: &str) -> Result<toml_edit::Table> {
    let text =
        toml::to_string(host).map_err(|e| Error::Device { device: device.to_string(), message: e.to_string() })?;
    let doc: toml_edit::DocumentMut =
        text.parse().map_err(|e| Error::Device { device: device.to_string(), message: format!("fingerprint: {e}") })?;
    let mut table = doc.as_table().clone();
    table.decor_mut().set_prefix(
        "\n# The machine this device measures (perfmodel device fingerprint): collect and calibrate refuse any other.\n",
    );
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
description = "test"
executor = "tract"
threads = 1
batch_sizes = [4, 1, 2]
[protocol]
burn_in_runs = 1
repetitions = 3
rounds = 2
group_size = 2
per_sample_timeout_s = 5
min_window_ms = 1
max_cv = 0.2
"#;

    #[test]
    fn parses_and_sorts_batch_sizes() {
        let p = DeviceProfile::parse(MINIMAL, "t", Path::new("t.toml")).unwrap();
        assert_eq!(p.batch_sizes, vec![1, 2, 4]);
        assert!(p.power.sensors.is_empty());
        let again = DeviceProfile::parse(&p.to_toml().unwrap(), "t", Path::new("t.toml")).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn rejects_bad_fields_and_unknown_devices() {
        let err = DeviceProfile::parse(&MINIMAL.replace("threads = 1", "threads = 0"), "t", Path::new("t.toml"));
        assert!(err.unwrap_err().to_string().contains("'threads'"));
        let err = DeviceProfile::parse(&MINIMAL.replace("\"tract\"", "\"tvm\""), "t", Path::new("t.toml"));
        assert!(err.unwrap_err().to_string().contains("unknown executor 'tvm' (known: tract, onnxruntime)"));
        let ort = MINIMAL.replace("\"tract\"", "\"onnxruntime\"\ngraph_optimization = \"extended\"");
        let p = DeviceProfile::parse(&ort, "t", Path::new("t.toml")).unwrap();
        assert_eq!(p.graph_optimization, Some(crate::engine::GraphOptimization::Extended));
        let err = DeviceProfile::parse(&ort.replace("extended", "fast"), "t", Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("graph_optimization"), "{err}");
        let tract = MINIMAL.replace("\"tract\"", "\"tract\"\ngraph_optimization = \"all\"");
        let err = DeviceProfile::parse(&tract, "t", Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("field 'graph_optimization': is ONNX Runtime's setting"), "{err}");
        let sleeping = DeviceProfile::parse(
            &ort.replace("threads = 1", "threads = 1\nspinning = false"),
            "t",
            Path::new("t.toml"),
        );
        assert_eq!(sleeping.unwrap().spinning, Some(false));
        let tract = MINIMAL.replace("threads = 1", "threads = 1\nspinning = true");
        let err = DeviceProfile::parse(&tract, "t", Path::new("t.toml")).unwrap_err();
        assert!(err.to_string().contains("field 'spinning': is ONNX Runtime's setting"), "{err}");
        // ONNX Runtime on several threads measures one session at a time; tract, or one thread, may group.
        let threaded = ort.replace("threads = 1", "threads = 2");
        let err = DeviceProfile::parse(&threaded, "t", Path::new("t.toml")).unwrap_err().to_string();
        assert!(
            err.contains("field 'protocol.group_size': must be 1 for ONNX Runtime on more than one thread"),
            "{err}"
        );
        assert!(DeviceProfile::parse(&threaded.replace("group_size = 2", "group_size = 1"), "t", Path::new("t.toml"))
            .is_ok());
        assert!(DeviceProfile::parse(&MINIMAL.replace("threads = 1", "threads = 2"), "t", Path::new("t.toml")).is_ok());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.toml"), MINIMAL).unwrap();
        std::fs::write(dir.path().join("b.toml"), MINIMAL).unwrap();
        let err = DeviceProfile::load(dir.path(), "c").unwrap_err().to_string();
        assert!(err.contains("known devices: a, b"), "{err}");
        assert_eq!(DeviceProfile::list(dir.path()).unwrap().len(), 2);
    }

    fn fake_machine() -> Fingerprint {
        Fingerprint {
            arch: std::env::consts::ARCH.into(),
            vendor: Some("NoSuchVendor".into()),
            model_name: Some("Fake CPU 9000".into()),
            ..Default::default()
        }
    }

    #[test]
    fn another_machines_profile_is_refused_naming_both_machines() {
        let host = Fingerprint::of_host();
        let mut p = DeviceProfile::parse(MINIMAL, "t", Path::new("t.toml")).unwrap();
        assert_eq!(p.check_host(host).unwrap(), HostMatch::Unrecorded);
        p.fingerprint = Some(fake_machine());
        let err = p.check_host(host).unwrap_err().to_string();
        assert!(err.contains("Fake CPU 9000") && err.contains(&host.summary()), "{err}");
        assert!(err.contains("device init"), "{err}");
        p.fingerprint = Some(Fingerprint { arch: "riscv-board".into(), ..Default::default() });
        let err = p.check_host(host).unwrap_err().to_string();
        assert!(err.contains("run perfmodel on that machine") && err.contains("cargo build --release"), "{err}");
        p.fingerprint = Some(Fingerprint { arch: host.arch.clone(), ..Default::default() });
        assert_eq!(p.check_host(host).unwrap(), HostMatch::Partial);
        p.fingerprint = Some(host.clone());
        assert_eq!(p.check_host(host).unwrap(), HostMatch::Recorded);
    }

    #[test]
    fn the_host_is_recorded_in_the_file_keeping_its_comments_and_a_foreign_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("# keep me\n{MINIMAL}");
        std::fs::write(dir.path().join("t.toml"), &text).unwrap();
        let mut p = DeviceProfile::load(dir.path(), "t").unwrap();
        assert!(p.record_host(Fingerprint::of_host()).unwrap());
        let written = std::fs::read_to_string(dir.path().join("t.toml")).unwrap();
        assert!(written.starts_with("# keep me") && written.contains("[fingerprint]"), "{written}");
        let again = DeviceProfile::load(dir.path(), "t").unwrap();
        assert_eq!(again.fingerprint.as_ref(), Some(Fingerprint::of_host()));
        assert_eq!(again, p);
        assert!(!p.record_host(Fingerprint::of_host()).unwrap(), "already recorded");

        let mut foreign = p.clone();
        foreign.fingerprint = Some(fake_machine());
        let before = std::fs::read_to_string(dir.path().join("t.toml")).unwrap();
        assert!(foreign.record_host(Fingerprint::of_host()).is_err());
        assert_eq!(std::fs::read_to_string(dir.path().join("t.toml")).unwrap(), before);
    }

    #[test]
    fn filling_in_the_host_from_a_pinned_process_keeps_the_recorded_cpu_count() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.toml"), MINIMAL).unwrap();
        let mut p = DeviceProfile::load(dir.path(), "t").unwrap();
        let host = Fingerprint::of_host();
        // Recorded by hand from the machine's description: the family and 4 CPUs, no caches.
        p.fingerprint =
            Some(Fingerprint { arch: host.arch.clone(), family: host.family, cpus: Some(4), ..Default::default() });
        // A collection under `taskset -c 0` sees one CPU of the same machine.
        let pinned = Fingerprint { cpus: Some(1), ..host.clone() };
        assert!(p.record_host(&pinned).unwrap());
        let again = DeviceProfile::load(dir.path(), "t").unwrap();
        let recorded = again.fingerprint.unwrap();
        assert_eq!(recorded.cpus, Some(4));
        assert_eq!(recorded.l2_bytes, host.l2_bytes);
    }

    #[test]
    fn a_gpu_power_sensor_on_a_cpu_engine_is_refused() {
        let text = format!("{MINIMAL}\n[power]\nsensors = [{{ kind = \"nvml\" }}]\n");
        let err = DeviceProfile::parse(&text, "t", Path::new("t.toml")).unwrap_err().to_string();
        assert!(err.contains("power.sensors") && err.contains("another's power"), "{err}");
    }
}
