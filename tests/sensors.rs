//! Sensor parsing against fake sysfs trees, and the messages of sensors that are not there.

use perfmodel::collect::sensors::{
    command_sensor, hwmon_sensor, nvml_device_memory_used, nvml_sensor, rapl_sensor, Sensor,
};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Start, let `change` rewrite the counters, stop; returns the reading and the bounds of the window.
fn window(sensor: &mut dyn Sensor, change: impl FnOnce()) -> (f64, f64, f64) {
    let outer = Instant::now();
    sensor.start().unwrap();
    let inner = Instant::now();
    std::thread::sleep(Duration::from_millis(30));
    change();
    let inner_secs = inner.elapsed().as_secs_f64();
    let reading = sensor.stop().unwrap();
    assert_eq!(reading.unit, "W");
    (reading.value, inner_secs, outer.elapsed().as_secs_f64())
}

#[test]
fn rapl_sums_packages_ignores_subzones_and_handles_wraparound() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("intel-rapl:0/name"), "package-0\n");
    write(&root.join("intel-rapl:0/max_energy_range_uj"), "1000000000\n");
    write(&root.join("intel-rapl:0/energy_uj"), "999000000\n");
    write(&root.join("intel-rapl:0:0/name"), "core\n");
    write(&root.join("intel-rapl:0:0/max_energy_range_uj"), "1000000000\n");
    write(&root.join("intel-rapl:0:0/energy_uj"), "5\n");
    write(&root.join("intel-rapl:1/name"), "package-1\n");
    write(&root.join("intel-rapl:1/max_energy_range_uj"), "1000000000\n");
    write(&root.join("intel-rapl:1/energy_uj"), "100\n");
    let mut s = rapl_sensor(root);
    s.check_available().unwrap();
    assert!(s.name().contains("package-0, package-1"), "{}", s.name());
    let (watts, inner, outer) = window(s.as_mut(), || {
        // Package 0 wraps: 999 J -> 1000 J (max) -> 1 J = 2 J; package 1 adds 1 J; the sub-zone must not count.
        write(&root.join("intel-rapl:0/energy_uj"), "1000000\n");
        write(&root.join("intel-rapl:1/energy_uj"), "1000100\n");
        write(&root.join("intel-rapl:0:0/energy_uj"), "900000005\n");
    });
    assert!(watts >= 3.0 / outer && watts <= 3.0 / inner, "{watts} W for 3 J over {inner}..{outer} s");
}

#[test]
fn rapl_missing_or_unreadable_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let err = rapl_sensor(&dir.path().join("absent")).check_available().unwrap_err().to_string();
    assert!(err.contains("no powercap/RAPL interface"), "{err}");
    write(&dir.path().join("intel-rapl:0/energy_uj"), "not a number\n");
    let err = rapl_sensor(dir.path()).check_available().unwrap_err().to_string();
    assert!(err.contains("expected a number") && err.contains("energy_uj"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let err = rapl_sensor(empty.path()).check_available().unwrap_err().to_string();
    assert!(err.contains("no intel-rapl:N package domains"), "{err}");
}

#[test]
fn hwmon_power_inputs_are_averaged_for_the_named_chip() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("hwmon0/name"), "coretemp\n");
    write(&root.join("hwmon0/temp1_input"), "45000\n");
    write(&root.join("hwmon1/name"), "ina260\n");
    write(&root.join("hwmon1/power1_input"), "5000000\n");
    write(&root.join("hwmon1/power1_label"), "VIN\n");
    write(&root.join("hwmon2/name"), "other\n");
    write(&root.join("hwmon2/power1_input"), "99000000\n");
    let mut s = hwmon_sensor(root, Some("ina260"), Duration::from_millis(10));
    s.check_available().unwrap();
    let (watts, _, _) = window(s.as_mut(), || write(&root.join("hwmon1/power1_input"), "7000000\n"));
    assert!((watts - 6.0).abs() < 1e-9, "mean of 5 W and 7 W, got {watts}");
    let err = hwmon_sensor(root, Some("coretemp"), Duration::ZERO).check_available().unwrap_err().to_string();
    assert!(err.contains("no power*_input or energy*_input"), "{err}");
}

#[test]
fn hwmon_energy_counters_give_average_power() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("hwmon3/name"), "ina3221\n");
    write(&root.join("hwmon3/energy1_input"), "1000000\n");
    write(&root.join("hwmon3/power1_input"), "123\n");
    let mut s = hwmon_sensor(root, None, Duration::ZERO);
    let (watts, inner, outer) = window(s.as_mut(), || write(&root.join("hwmon3/energy1_input"), "1500000\n"));
    assert!(watts >= 0.5 / outer && watts <= 0.5 / inner, "{watts} W for 0.5 J over {inner}..{outer} s");
}

#[test]
fn nvml_without_library_is_unavailable_with_a_clear_message() {
    let s = nvml_sensor(0, Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
    let err = s.check_available().unwrap_err().to_string();
    assert!(err.contains("NVML unavailable") && err.contains("libnvidia-ml.so.1"), "{err}");
    let err = nvml_device_memory_used(0, Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err().to_string();
    assert!(err.contains("NVML unavailable"), "{err}");
}

#[test]
fn command_meters_in_watts_and_joules() {
    let mut watts = command_sensor("echo 12.5 W", "W", Duration::ZERO);
    let (w, _, _) = window(watts.as_mut(), || {});
    assert_eq!(w, 12.5);
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("joules");
    write(&counter, "100.0\n");
    let mut joules = command_sensor(&format!("cat {}", counter.display()), "J", Duration::ZERO);
    let (w, inner, outer) = window(joules.as_mut(), || write(&counter, "102.0\n"));
    assert!(w >= 2.0 / outer && w <= 2.0 / inner, "{w} W for 2 J over {inner}..{outer} s");
    let err = command_sensor("echo 3 J", "W", Duration::ZERO).start().unwrap_err().to_string();
    assert!(err.contains("expects W"), "{err}");
    let err = command_sensor("exit 3", "W", Duration::ZERO).start().unwrap_err().to_string();
    assert!(err.contains("exited with"), "{err}");
}

#[test]
fn devices_lists_profiles_and_says_what_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("powercap");
    write(&fake.join("intel-rapl:0/name"), "package-0\n");
    write(&fake.join("intel-rapl:0/energy_uj"), "42\n");
    let profile = |root: &Path| {
        format!(
            "description = \"t\"\nexecutor = \"tract\"\nthreads = 1\nbatch_sizes = [1]\n\
             [protocol]\nburn_in_runs = 1\nrepetitions = 1\nrounds = 1\ngroup_size = 1\nper_sample_timeout_s = 1\n\
             min_window_ms = 0\nmax_cv = 1\n[power]\nsensors = [{{ kind = \"rapl\", root = \"{}\" }}]\n",
            root.display()
        )
    };
    let collectors = dir.path().join("collectors");
    write(&collectors.join("fake.toml"), &profile(&fake));
    write(&collectors.join("missing.toml"), &profile(&dir.path().join("nope")));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_perfmodel"))
        .args(["devices", "--collectors-dir"])
        .arg(&collectors)
        .arg("--models-dir")
        .arg(dir.path().join("models"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("fake: t") && text.contains("missing: t"), "{text}");
    assert!(text.contains("package-0): available"), "{text}");
    assert!(text.contains("unavailable:") && text.contains("no powercap/RAPL interface"), "{text}");
    assert!(text.contains("memory       available (counting allocator)"), "{text}");
    assert!(text.contains("models       none (perfmodel collect/train --device fake)"), "{text}");
}
