//! What machine this is, as far as a layer's time depends on it: the CPU (architecture, vendor, family, model,
//! model name), the instruction-set features tract's kernels dispatch on, the cache sizes its tile walk is
//! blocked by, and the number of logical CPUs.
//!
//! Why: a device's data and models describe the machine that measured them, and nothing in a timing says which
//! machine that was. A VM that moves between hosts of different makers, or an x86 laptop asked to
//! collect for a Raspberry Pi, would otherwise store one machine's timings under another's name. Every profile
//! records the fingerprint of its machine, and commands that measure for a device compare it with this host's.
//!
//! A profile may record only some fields (a board profile written before the board was seen says
//! `arch = "aarch64"` and the core's name); the fields it records must match, and the first collection on a
//! matching machine fills in the rest.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The instruction-set features tract-linalg 0.23 chooses its kernels by, per architecture (its
/// `is_x86_feature_detected!` / `is_aarch64_feature_detected!` calls).
#[cfg(target_arch = "x86_64")]
const DISPATCH_FEATURES: &[&str] = &["avx", "avx2", "fma", "f16c", "avx512f", "avx512vnni", "avx512fp16"];
#[cfg(target_arch = "aarch64")]
const DISPATCH_FEATURES: &[&str] = &["asimd", "fp16", "dotprod", "i8mm"];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const DISPATCH_FEATURES: &[&str] = &[];

/// A machine's identity for performance purposes. Every field but `arch` may be absent in a profile (see the
/// module docs); [`Fingerprint::of_host`] fills every field it can read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    /// `x86_64`, `aarch64`, ... (Rust's name for the target architecture).
    pub arch: String,
    /// CPU vendor: `GenuineIntel`, `AuthenticAMD`, or the implementer of an Arm core (`ARM`, `NVIDIA`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// x86 `cpu family`; the architecture version on Arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<u32>,
    /// x86 `model`; the `CPU part` number on Arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<u32>,
    /// The CPU's marketing name (`model name`), or the Arm core's name (`Cortex-A72`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Which of the instruction-set features tract dispatches on this CPU has, sorted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa_features: Option<Vec<String>>,
    /// Per-core level-1 data cache, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l1d_bytes: Option<u64>,
    /// Level-2 cache seen by one core, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_bytes: Option<u64>,
    /// Last-level (level-3) cache, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_bytes: Option<u64>,
    /// Logical CPUs the machine has online (not how many this process may use: `taskset` or a cgroup limits
    /// that on the same machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<usize>,
}

/// One field on which two fingerprints disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub field: &'static str,
    pub recorded: String,
    pub here: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} (here {})", self.field, self.recorded, self.here)
    }
}

impl Fingerprint {
    /// This machine. Read once per process: the machine does not change under a running program.
    pub fn of_host() -> &'static Fingerprint {
        static HOST: std::sync::OnceLock<Fingerprint> = std::sync::OnceLock::new();
        HOST.get_or_init(|| {
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let online =
                cpuinfo.lines().filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor")).count();
            let cpus = if online > 0 { online } else { host_cpus() };
            Fingerprint::read(&cpuinfo, Path::new("/sys/devices/system/cpu/cpu0/cache"), cpus)
        })
    }

    /// A fingerprint from the text of `/proc/cpuinfo`, a sysfs cache directory (`.../cpu0/cache`) and a CPU
    /// count; the instruction-set features are this process's, so this is for the host (or a test of it).
    pub fn read(cpuinfo: &str, cache_dir: &Path, cpus: usize) -> Fingerprint {
        let field = |key: &str| {
            cpuinfo.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string()).filter(|v| !v.is_empty())
            })
        };
        let number = |key: &str| field(key).and_then(|v| parse_number(&v));
        let arch = std::env::consts::ARCH.to_string();
        let (vendor, family, model, model_name) = if field("CPU implementer").is_some() {
            let implementer = number("CPU implementer");
            let part = number("CPU part");
            // The core's name from its part number where known: some vendor kernels print a generic
            // `model name` ("ARMv8 Processor rev 1 (v8l)").
            let core = arm_core_name(implementer, part);
            let known = !core.starts_with("part ");
            (
                implementer.map(arm_implementer),
                number("CPU architecture"),
                part,
                if known { Some(core) } else { field("model name").or(Some(core)) },
            )
        } else {
            (field("vendor_id"), number("cpu family"), number("model"), field("model name"))
        };
        let (l1d, l2, l3) = sysfs_caches(cache_dir);
        let caches = tract_linalg::cache::cache_info();
        Fingerprint {
            arch,
            vendor,
            family,
            model,
            model_name: model_name.map(|n| n.split_whitespace().collect::<Vec<_>>().join(" ")),
            isa_features: Some(host_isa_features()),
            l1d_bytes: l1d,
            l2_bytes: l2.or((caches.l2 > 0).then_some(caches.l2 as u64)),
            l3_bytes: l3.or_else(|| tract_linalg::cache::last_level_cache().map(|(bytes, _)| bytes as u64)),
            cpus: Some(cpus),
        }
    }

    /// The fields `recorded` (a profile's fingerprint) sets that this fingerprint has otherwise. A field this
    /// machine cannot read is not held against it; a field the profile does not record is not compared.
    pub fn differences(&self, recorded: &Fingerprint) -> Vec<Difference> {
        let mut out = Vec::new();
        let mut check = |field: &'static str, recorded: Option<String>, here: Option<String>| {
            if let (Some(r), Some(h)) = (recorded, here) {
                if r != h {
                    out.push(Difference { field, recorded: r, here: h });
                }
            }
        };
        check("arch", Some(recorded.arch.clone()), Some(self.arch.clone()));
        check("vendor", recorded.vendor.clone(), self.vendor.clone());
        check("family", recorded.family.map(|v| v.to_string()), self.family.map(|v| v.to_string()));
        check("model", recorded.model.map(|v| v.to_string()), self.model.map(|v| v.to_string()));
        check("model_name", recorded.model_name.clone(), self.model_name.clone());
        let features = |f: &Option<Vec<String>>| f.as_ref().map(|f| format!("[{}]", f.join(", ")));
        check("isa_features", features(&recorded.isa_features), features(&self.isa_features));
        let bytes = |b: Option<u64>| b.map(human_bytes);
        check("l1d_bytes", bytes(recorded.l1d_bytes), bytes(self.l1d_bytes));
        check("l2_bytes", bytes(recorded.l2_bytes), bytes(self.l2_bytes));
        check("l3_bytes", bytes(recorded.l3_bytes), bytes(self.l3_bytes));
        // Not `cpus`: how many CPUs a process may use changes with taskset, cgroups or a board's power mode on
        // the same machine; it is recorded and shown, and weighs in `distance`.
        out
    }

    /// Whether every field this machine can read is recorded (nothing left for a first collection to fill in).
    pub fn is_complete_for(&self, host: &Fingerprint) -> bool {
        (self.vendor.is_some() || host.vendor.is_none())
            && (self.family.is_some() || host.family.is_none())
            && (self.model.is_some() || host.model.is_none())
            && (self.model_name.is_some() || host.model_name.is_none())
            && (self.isa_features.is_some() || host.isa_features.is_none())
            && (self.l1d_bytes.is_some() || host.l1d_bytes.is_none())
            && (self.l2_bytes.is_some() || host.l2_bytes.is_none())
            && (self.l3_bytes.is_some() || host.l3_bytes.is_none())
    }

    /// A distance between two machines for choosing the nearest shipped device: architecture and vendor weigh
    /// most, then the instruction-set features tract dispatches on, then family, model and caches. Only fields
    /// both record count; 0 for the same machine.
    pub fn distance(&self, other: &Fingerprint) -> f64 {
        let mut d = 0.0;
        if self.arch != other.arch {
            d += 100.0;
        }
        let mut unequal = |a: Option<String>, b: Option<String>, weight: f64| {
            if let (Some(a), Some(b)) = (a, b) {
                if a != b {
                    d += weight;
                }
            }
        };
        unequal(self.vendor.clone(), other.vendor.clone(), 20.0);
        unequal(self.family.map(|v| v.to_string()), other.family.map(|v| v.to_string()), 4.0);
        unequal(self.model.map(|v| v.to_string()), other.model.map(|v| v.to_string()), 2.0);
        unequal(self.model_name.clone(), other.model_name.clone(), 1.0);
        if let (Some(a), Some(b)) = (&self.isa_features, &other.isa_features) {
            d += 5.0 * a.iter().filter(|f| !b.contains(f)).chain(b.iter().filter(|f| !a.contains(f))).count() as f64;
        }
        for (a, b) in
            [(self.l1d_bytes, other.l1d_bytes), (self.l2_bytes, other.l2_bytes), (self.l3_bytes, other.l3_bytes)]
        {
            if let (Some(a), Some(b)) = (a, b) {
                if a > 0 && b > 0 {
                    d += (a as f64 / b as f64).log2().abs();
                }
            }
        }
        d
    }

    /// One line for messages: `x86_64 GenuineIntel Intel(R) Xeon(R) Processor (family 6, model 167), L2 2 MiB,
    /// 2 CPUs`.
    pub fn summary(&self) -> String {
        let mut s = self.arch.clone();
        if let Some(v) = &self.vendor {
            s.push_str(&format!(" {v}"));
        }
        if let Some(n) = &self.model_name {
            s.push_str(&format!(" {n}"));
        }
        match (self.family, self.model) {
            (Some(f), Some(m)) => s.push_str(&format!(" (family {f}, model {m})")),
            (Some(f), None) => s.push_str(&format!(" (family {f})")),
            (None, Some(m)) => s.push_str(&format!(" (model {m})")),
            (None, None) => {}
        }
        if let Some(l2) = self.l2_bytes {
            s.push_str(&format!(", L2 {}", human_bytes(l2)));
        }
        if let Some(l3) = self.l3_bytes {
            s.push_str(&format!(", L3 {}", human_bytes(l3)));
        }
        if let Some(c) = self.cpus {
            s.push_str(&format!(", {c} CPU{}", if c == 1 { "" } else { "s" }));
        }
        s
    }

    /// Whether this fingerprint describes a different architecture than the host's, i.e. a board or another
    /// kind of computer that perfmodel has to run on itself.
    pub fn is_other_architecture(&self) -> bool {
        self.arch != std::env::consts::ARCH
    }
}

/// Logical CPUs this process may use.
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The dispatch features this CPU has, as the same runtime checks tract makes.
pub fn host_isa_features() -> Vec<String> {
    let mut out: Vec<String> = DISPATCH_FEATURES.iter().filter(|f| has_feature(f)).map(|f| f.to_string()).collect();
    out.sort();
    out
}

#[cfg(target_arch = "x86_64")]
fn has_feature(name: &str) -> bool {
    match name {
        "avx" => std::arch::is_x86_feature_detected!("avx"),
        "avx2" => std::arch::is_x86_feature_detected!("avx2"),
        "fma" => std::arch::is_x86_feature_detected!("fma"),
        "f16c" => std::arch::is_x86_feature_detected!("f16c"),
        "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
        "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
        "avx512fp16" => std::arch::is_x86_feature_detected!("avx512fp16"),
        _ => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn has_feature(name: &str) -> bool {
    match name {
        "asimd" => std::arch::is_aarch64_feature_detected!("neon"),
        "fp16" => std::arch::is_aarch64_feature_detected!("fp16"),
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
        _ => false,
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn has_feature(_name: &str) -> bool {
    false
}

/// `6`, `0x41`, `0xd08`.
fn parse_number(text: &str) -> Option<u32> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The Arm implementer codes of the boards perfmodel has profiles for.
fn arm_implementer(code: u32) -> String {
    match code {
        0x41 => "ARM".to_string(),
        0x4e => "NVIDIA".to_string(),
        0x51 => "Qualcomm".to_string(),
        0x61 => "Apple".to_string(),
        other => format!("implementer 0x{other:x}"),
    }
}

/// Names of Arm's own cores by `CPU part` (the table `lscpu` uses).
fn arm_core_name(implementer: Option<u32>, part: Option<u32>) -> String {
    let name = match (implementer, part) {
        (Some(0x41), Some(0xd03)) => "Cortex-A53",
        (Some(0x41), Some(0xd04)) => "Cortex-A35",
        (Some(0x41), Some(0xd05)) => "Cortex-A55",
        (Some(0x41), Some(0xd07)) => "Cortex-A57",
        (Some(0x41), Some(0xd08)) => "Cortex-A72",
        (Some(0x41), Some(0xd09)) => "Cortex-A73",
        (Some(0x41), Some(0xd0a)) => "Cortex-A75",
        (Some(0x41), Some(0xd0b)) => "Cortex-A76",
        (Some(0x41), Some(0xd0c)) => "Neoverse-N1",
        (Some(0x41), Some(0xd40)) => "Neoverse-V1",
        (Some(0x41), Some(0xd41)) => "Cortex-A78",
        (Some(0x41), Some(0xd4f)) => "Neoverse-V2",
        _ => return format!("part 0x{:x}", part.unwrap_or(0)),
    };
    name.to_string()
}

/// (L1d, L2, L3) bytes from `cpuN/cache/index*/{level,type,size}`.
fn sysfs_caches(cache_dir: &Path) -> (Option<u64>, Option<u64>, Option<u64>) {
    let (mut l1d, mut l2, mut l3) = (None, None, None);
    let Ok(entries) = std::fs::read_dir(cache_dir) else { return (None, None, None) };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("index")) {
            continue;
        }
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_string());
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size")) else { continue };
        let Some(bytes) = parse_cache_size(&size) else { continue };
        match (level.as_str(), kind.as_str()) {
            ("1", "Data") => l1d = Some(bytes),
            ("2", _) => l2 = Some(bytes),
            ("3", _) => l3 = Some(bytes),
            _ => {}
        }
    }
    (l1d, l2, l3)
}

/// `48K`, `2048K`, `32M`, `1024` (bytes).
fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&t[..i], t[i..].trim()),
        None => (t, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" | "B" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// `48 KiB`, `2 MiB`, `105 MiB`, `1.5 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if v.fract() == 0.0 { format!("{v:.0} {unit}") } else { format!("{v:.1} {unit}") };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTEL: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\n\
                         model name\t: Intel(R) Xeon(R)   Processor\nflags\t\t: fpu avx2\n";
    const PI4: &str = "processor\t: 0\nmodel name\t: ARMv8 Processor rev 3 (v8l)\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n\
                       CPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n";

    fn caches(dir: &Path, entries: &[(&str, &str, &str)]) {
        for (i, (level, kind, size)) in entries.iter().enumerate() {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), level).unwrap();
            std::fs::write(d.join("type"), kind).unwrap();
            std::fs::write(d.join("size"), size).unwrap();
        }
    }

    #[test]
    fn reads_x86_and_arm_cpuinfo_and_sysfs_caches() {
        let dir = tempfile::tempdir().unwrap();
        caches(
            dir.path(),
            &[("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "105M")],
        );
        let f = Fingerprint::read(INTEL, dir.path(), 2);
        assert_eq!(f.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!((f.family, f.model), (Some(6), Some(167)));
        assert_eq!(f.model_name.as_deref(), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!((f.l1d_bytes, f.l2_bytes, f.l3_bytes), (Some(48 << 10), Some(2 << 20), Some(105 << 20)));
        assert_eq!(f.cpus, Some(2));
        assert!(f.summary().contains("family 6, model 167"), "{}", f.summary());

        let pi = Fingerprint::read(PI4, Path::new("/nonexistent"), 4);
        assert_eq!(pi.vendor.as_deref(), Some("ARM"));
        assert_eq!(pi.model_name.as_deref(), Some("Cortex-A72"));
        assert_eq!((pi.family, pi.model), (Some(8), Some(0xd08)));
    }

    #[test]
    fn only_recorded_fields_are_compared() {
        let host = Fingerprint::read(INTEL, Path::new("/nonexistent"), 2);
        let partial = Fingerprint { arch: host.arch.clone(), family: Some(6), ..Default::default() };
        assert!(host.differences(&partial).is_empty());
        assert!(!partial.is_complete_for(&host));
        assert!(host.is_complete_for(&host));

        let board = Fingerprint { arch: "aarch64".into(), model_name: Some("Cortex-A72".into()), ..Default::default() };
        let diff = host.differences(&board);
        let fields: Vec<_> = diff.iter().map(|d| d.field).collect();
        if host.arch != "aarch64" {
            assert_eq!(fields, ["arch", "model_name"]);
        }
        let other = Fingerprint { model: Some(17), family: Some(25), ..host.clone() };
        let fields: Vec<_> = host.differences(&other).iter().map(|d| d.field).collect();
        assert_eq!(fields, ["family", "model"]);
        assert!(host.distance(&other) > 0.0 && host.distance(&host) == 0.0);
        if host.arch != "aarch64" {
            assert!(host.distance(&board) > host.distance(&other));
        }
        // Fewer usable CPUs (taskset, cgroups) is the same machine.
        let fewer = Fingerprint { cpus: Some(1), ..host.clone() };
        assert!(host.differences(&fewer).is_empty());
    }

    #[test]
    fn cache_sizes_and_numbers_parse() {
        assert_eq!(parse_cache_size("48K"), Some(48 << 10));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(parse_number("0xd08"), Some(0xd08));
        assert_eq!(human_bytes(1536 << 10), "1.5 MiB");
    }
}
