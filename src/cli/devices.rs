//! `perfmodel devices`: the device profiles, and what of each works on this machine.

use perfmodel::collect::sensors::{nvml_device_memory_used, power_sensor, MemorySensor, Sensor};
use perfmodel::collect::{DeviceProfile, SensorSpec};
use perfmodel::train::ModelStore;
use perfmodel::Dirs;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args, dirs: &Dirs) -> anyhow::Result<()> {
    let (dir, models_dir) = (&dirs.collectors, &dirs.models);
    let profiles = DeviceProfile::list(dir)?;
    anyhow::ensure!(!profiles.is_empty(), "no device profiles (*.toml) in {}", dir.display());
    for p in profiles {
        println!("{}: {}", p.name, p.description);
        let machine = p.machine_status(perfmodel::device::Fingerprint::of_host());
        println!("  machine      {machine}");
        let engine = match perfmodel::engine::executor_for(&p) {
            Ok(e) => format!("{} ({} thread(s)): available", e.describe(), p.threads),
            Err(e) => format!("{} ({} thread(s)): unavailable: {e}", p.executor, p.threads),
        };
        println!("  executor     {engine}");
        println!("  batch sizes  {:?}", p.batch_sizes);
        let roofline = |v: Option<f64>, unit: &str| v.map(|x| format!("{x} {unit}")).unwrap_or_else(|| "-".into());
        println!(
            "  roofline     peak {}, memory bandwidth {}",
            roofline(p.peak_gflops, "GFLOP/s"),
            roofline(p.memory_bandwidth_gbs, "GB/s")
        );
        let models = match ModelStore::open(models_dir, &p.name) {
            Err(_) if matches!(perfmodel::train::store::manifest_path(models_dir, &p.name).try_exists(), Ok(false)) => {
                format!("none (perfmodel collect/train --device {})", p.name)
            }
            Err(e) => format!("unusable: {e}"),
            Ok(store) => {
                let n = store.manifest().models.len();
                match store.trained_elsewhere() {
                    Some(machine) => format!("{n} predictors, trained on another machine ({machine})"),
                    None if store.trained_here() => format!("{n} predictors, trained on this machine"),
                    None => format!("{n} predictors (they record no machine)"),
                }
            }
        };
        println!("  models       {models}");
        println!("  latency      available (monotonic clock)");
        match MemorySensor::default().check_available() {
            Ok(()) => println!("  memory       available (counting allocator)"),
            Err(e) => println!("  memory       unavailable: {e}"),
        }
        if p.power.sensors.is_empty() {
            println!("  power        none configured");
        }
        for spec in &p.power.sensors {
            let s = power_sensor(spec);
            match s.check_available() {
                Ok(()) => println!("  power        {}: available", s.name()),
                Err(e) => println!("  power        unavailable: {e}"),
            }
            if let (SensorSpec::Nvml { index, library }, Ok(())) = (spec, s.check_available()) {
                match nvml_device_memory_used(*index, library.as_deref()) {
                    Ok(bytes) => println!("  gpu memory   {:.0} MiB in use", bytes as f64 / (1024.0 * 1024.0)),
                    Err(e) => println!("  gpu memory   unavailable: {e}"),
                }
            }
        }
    }
    Ok(())
}
