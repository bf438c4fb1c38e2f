//! `perfmodel collect` end to end, with tiny layers and protocols so each test takes seconds.

use perfmodel::data::{self, Status};
use perfmodel::layer::{LayerConfig, LayerType};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// A temp dir with a `tiny` device profile (batch sizes [1, 2], power sensor pointing at a missing tree) and
    /// `configs.json` holding `configs`.
    fn new(configs: &[Value], timeout_s: f64) -> Setup {
        Setup::with_power(configs, timeout_s, "sensors = [{ kind = \"rapl\", root = \"no-powercap\" }]")
    }

    fn with_power(configs: &[Value], timeout_s: f64, power: &str) -> Setup {
        Setup::with_profile(configs, timeout_s, power, 1)
    }

    fn with_profile(configs: &[Value], timeout_s: f64, power: &str, threads: usize) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let collectors = dir.path().join("collectors");
        std::fs::create_dir_all(&collectors).unwrap();
        let profile = format!(
            "description = \"tiny test device\"\nexecutor = \"tract\"\nthreads = {threads}\nbatch_sizes = [2, 1]\n\
             [protocol]\nburn_in_runs = 1\nrepetitions = 2\nrounds = 2\ngroup_size = 2\n\
             per_sample_timeout_s = {timeout_s:e}\nmin_window_ms = 0\nmax_cv = 0.5\n\
             [power]\n{power}\n"
        );
        std::fs::write(collectors.join("tiny.toml"), profile).unwrap();
        let set = json!({
            "seed": 1,
            "batch_sizes": [1, 2],
            "configs": configs.iter().map(|c| json!({"config": c, "source": "test", "count": 1})).collect::<Vec<_>>(),
        });
        std::fs::write(dir.path().join("configs.json"), serde_json::to_string(&set).unwrap()).unwrap();
        Setup { dir }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_perfmodel"));
        c.current_dir(self.dir.path()).arg("collect");
        for (flag, default) in [
            ("--device", "tiny"),
            ("--configs", "configs.json"),
            ("--data-dir", "data"),
            ("--collectors-dir", "collectors"),
        ] {
            if !extra.contains(&flag) {
                c.args([flag, default]);
            }
        }
        c.args(extra).env_remove("SLURM_ARRAY_TASK_ID").env_remove("SLURM_ARRAY_TASK_COUNT");
        c
    }

    fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).output().unwrap()
    }

    fn rows(&self, device_dir: &str) -> BTreeMap<LayerType, Vec<data::Sample>> {
        let dir = self.path(device_dir);
        data::read_device(dir.parent().unwrap(), dir.file_name().unwrap().to_str().unwrap()).unwrap()
    }
}

fn text(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn dense(features: usize, units: usize) -> Value {
    json!({"type": "dense", "units": units, "input_shapes": [[features]], "batch_size": 1})
}

fn small_mix() -> Vec<Value> {
    vec![
        json!({"type": "conv2d", "filters": 4, "kernel": [3, 3], "padding": "same", "input_shapes": [[3, 8, 8]]}),
        json!({"type": "depthwise_conv2d", "kernel": [3, 3], "input_shapes": [[4, 8, 8]]}),
        dense(16, 8),
        json!({"type": "max_pool2d", "pool_size": [2, 2], "input_shapes": [[4, 8, 8]]}),
    ]
}

/// Keys every config should produce at batch sizes 1 and 2.
fn expected_keys(configs: &[Value]) -> HashSet<String> {
    let mut keys = HashSet::new();
    for c in configs {
        for batch in [1, 2] {
            let mut cfg = LayerConfig::from_json(c).unwrap();
            cfg.batch = batch;
            keys.insert(cfg.key().unwrap());
        }
    }
    keys
}

fn all_keys(rows: &BTreeMap<LayerType, Vec<data::Sample>>) -> Vec<String> {
    rows.values().flatten().map(|s| s.key.clone()).collect()
}

#[test]
fn the_profile_threads_run_the_measurements() {
    let configs = vec![json!({"type": "conv2d", "filters": 32, "kernel": [3, 3], "input_shapes": [[16, 24, 24]]})];
    let s = Setup::with_profile(&configs, 5.0, "sensors = []", 2);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = s.rows("data/tiny");
    let samples: Vec<&data::Sample> = rows.values().flatten().collect();
    assert_eq!(samples.len(), 2, "{}", text(&out));
    for sample in samples {
        assert_ne!(sample.status, Status::Failed, "{sample:?}");
        assert_eq!(sample.threads, 2, "{sample:?}");
    }
}

#[test]
fn small_collection_writes_valid_rows_and_says_power_is_unavailable_once() {
    let configs = small_mix();
    let s = Setup::new(&configs, 5.0);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("power: unavailable on this device (").count(), 1, "{}", text(&out));
    assert!(stderr.contains("no powercap/RAPL interface"), "{}", text(&out));
    let rows = s.rows("data/tiny");
    let keys = all_keys(&rows);
    assert_eq!(keys.iter().cloned().collect::<HashSet<_>>(), expected_keys(&configs));
    assert_eq!(keys.len(), 8);
    for sample in rows.values().flatten() {
        assert_ne!(sample.status, Status::Failed, "{sample:?}");
        assert!(sample.latency_ms.unwrap() > 0.0 && sample.latency_mad_ms.is_some() && sample.latency_cv.is_some());
        assert_eq!((sample.repetitions, sample.rounds), (4, 2));
        assert!(sample.memory_mib.unwrap() > 0.0, "the binary's counting allocator measures memory");
        assert_eq!((sample.power_w, sample.energy_mj), (None, None));
        assert_eq!(sample.features, sample.config.features().unwrap());
        assert!(sample.engine.starts_with("tract ") && sample.threads == 1);
        assert!(sample.output_bytes > 0);
        // The speed probe ran around every config's repetitions (on by default).
        assert!(sample.speed_ref_ms.is_some_and(|ms| ms > 0.0), "{sample:?}");
    }
    let header = std::fs::read_to_string(s.path("data/tiny/dense.csv")).unwrap();
    assert_eq!(header.lines().next().unwrap(), data::header(LayerType::Dense).join(","));
    assert!(s.path("data/tiny/profile.toml").is_file());
    assert!(String::from_utf8_lossy(&out.stdout).contains("complete: every config is measured"), "{}", text(&out));

    // A rerun has nothing left to do.
    let again = s.run(&[]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("0 samples to measure"), "{}", text(&again));
    assert_eq!(all_keys(&s.rows("data/tiny")).len(), 8);

    // Repeatability: re-measure stored samples in a fresh process.
    let re = s.run(&["--remeasure", "3"]);
    assert!(re.status.success(), "{}", text(&re));
    assert!(String::from_utf8_lossy(&re.stdout).contains("re-measured 3 samples"), "{}", text(&re));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("data/tiny/repeatability.json")).unwrap()).unwrap();
    assert_eq!(report["samples"].as_array().unwrap().len(), 3);
    assert_eq!(report["probed_samples"], 3, "{report}");
    assert!(report["median_relative_difference_at_probe_speed"].as_f64().is_some(), "{report}");
    assert!(report["samples"][0]["new_probe_ms"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        report["p90_relative_difference"].as_f64().unwrap() >= report["median_relative_difference"].as_f64().unwrap()
    );
}

#[test]
fn power_from_a_meter_command_covers_the_sensor_window() {
    let power = "sensors = [{ kind = \"command\", command = \"echo 7.5 W\", unit = \"W\", window_ms = 30 }]";
    let s = Setup::with_power(&small_mix()[..2], 5.0, power);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("power: measuring with command `echo 7.5 W`"),
        "{}",
        text(&out)
    );
    for sample in s.rows("data/tiny").into_values().flatten() {
        assert_eq!(sample.power_w, Some(7.5));
        let energy = sample.energy_mj.unwrap();
        assert!((energy - 7.5 * sample.latency_ms.unwrap()).abs() < 1e-9, "{energy}");
    }
    let none = Setup::with_power(&small_mix()[..2], 5.0, &format!("subset_fraction = 0.0\n{power}"));
    // ... and without the speed probe.
    let profile = none.path("collectors/tiny.toml");
    let text =
        std::fs::read_to_string(&profile).unwrap().replace("max_cv = 0.5\n", "max_cv = 0.5\nspeed_probe = false\n");
    std::fs::write(&profile, text).unwrap();
    assert!(none.run(&[]).status.success());
    assert!(none.rows("data/tiny").into_values().flatten().all(|s| s.power_w.is_none() && s.speed_ref_ms.is_none()));
}

#[test]
fn kill_then_rerun_leaves_no_duplicate_and_no_gap_and_repairs_a_torn_line() {
    let configs: Vec<Value> = (0..40).map(|i| dense(64 + 8 * i, 32 + i)).collect();
    let s = Setup::new(&configs, 5.0);
    let mut child =
        s.command(&[]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let csv = s.path("data/tiny/dense.csv");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&csv).map(|t| t.lines().count()).unwrap_or(0) < 6 {
        assert!(std::time::Instant::now() < deadline, "collector wrote nothing");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = data::read_samples(&csv).map(|r| r.len()).unwrap_or_else(|e| panic!("after kill -9: {e}"));
    assert!(before < 80, "the collector finished before it was killed");
    // Simulate a crash in the middle of a write: a torn last line.
    let mut bytes = std::fs::read(&csv).unwrap();
    bytes.extend_from_slice(b"0123456789abcdef,dense,\"{\"\"type\"\":\"\"den");
    std::fs::write(&csv, bytes).unwrap();
    assert!(data::read_samples(&csv).unwrap_err().to_string().contains("incomplete last line"));

    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("repaired: removed the damaged last line"), "{}", text(&out));
    let keys = all_keys(&s.rows("data/tiny"));
    let unique: HashSet<String> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), unique.len(), "duplicate rows");
    assert_eq!(unique, expected_keys(&configs), "missing rows");
}

#[test]
fn shards_are_disjoint_cover_everything_and_merge_without_duplicates() {
    let configs: Vec<Value> = (0..9).map(|i| dense(8 + i, 4)).chain(small_mix()).collect();
    let s = Setup::new(&configs, 5.0);
    let mut seen: Vec<HashSet<String>> = Vec::new();
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = s.run(&["--shard", &shard]);
        assert!(out.status.success(), "{}", text(&out));
        seen.push(all_keys(&s.rows(&format!("data/tiny/shard-{i}-of-3"))).into_iter().collect());
    }
    for a in 0..3 {
        for b in a + 1..3 {
            assert!(seen[a].is_disjoint(&seen[b]), "shards {a} and {b} overlap");
        }
    }
    let union: HashSet<String> = seen.iter().flatten().cloned().collect();
    assert_eq!(union, expected_keys(&configs));

    // SLURM job arrays select the same slice.
    let out = s
        .command(&["--data-dir", "slurm"])
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "3")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let slurm: HashSet<String> = all_keys(&s.rows("slurm/tiny/shard-1-of-3")).into_iter().collect();
    assert_eq!(slurm, seen[1]);

    let mut merge = Command::new(env!("CARGO_BIN_EXE_perfmodel"));
    merge.current_dir(s.dir.path()).args(["data", "merge", "-o", "merged/tiny"]);
    for i in 0..3 {
        merge.arg(format!("data/tiny/shard-{i}-of-3"));
    }
    merge.arg("data/tiny/shard-0-of-3"); // the same shard twice must not duplicate rows
    let out = merge.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let merged = all_keys(&s.rows("merged/tiny"));
    assert_eq!(merged.len(), union.len());
    assert_eq!(merged.into_iter().collect::<HashSet<_>>(), union);
}

#[test]
fn failures_are_recorded_and_skip_larger_batch_sizes() {
    let unsupported = json!({"type": "unsupported", "op_type": "FancyOp", "output_shape": [4], "input_shapes": [[4]]});
    let configs = vec![unsupported.clone(), dense(16, 8)];
    let s = Setup::new(&configs, 5.0);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = s.rows("data/tiny");
    let bad = &rows[&LayerType::Unsupported];
    assert_eq!(bad.len(), 1, "only batch 1 of the failing config is tried: {bad:?}");
    assert_eq!((bad[0].batch, bad[0].status), (1, Status::Failed));
    assert!(bad[0].reason.contains("build failed") && bad[0].reason.contains("FancyOp"), "{}", bad[0].reason);
    assert_eq!(bad[0].latency_ms, None);
    assert_eq!(rows[&LayerType::Dense].len(), 2);
    // A rerun does not retry the skipped batch sizes.
    let again = s.run(&[]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("0 samples to measure"), "{}", text(&again));

    // A per-sample timeout nothing can meet: every config fails at batch 1, none is tried at batch 2.
    let s = Setup::new(&small_mix(), 1e-9);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<data::Sample> = s.rows("data/tiny").into_values().flatten().collect();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert_eq!((r.batch, r.status), (1, Status::Failed));
        assert!(r.reason.starts_with("timeout: one run took"), "{}", r.reason);
    }
}

#[test]
fn bad_inputs_give_clear_errors() {
    let s = Setup::new(&small_mix(), 5.0);
    let out = s.run(&["--device", "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("known devices: tiny"), "{}", text(&out));

    let out = s.run(&["--layers", "conv3d"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown layer type 'conv3d'"), "{}", text(&out));

    // A corrupt row in the middle of a data file stops the collector with the file and line.
    assert!(s.run(&["--layers", "dense"]).status.success());
    let csv = s.path("data/tiny/dense.csv");
    let original = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    let corrupt = format!("{}\n{}\n{}\n", lines[0], lines[1].replacen(",tract ", ",extra,tract ", 1), lines[2]);
    std::fs::write(&csv, &corrupt).unwrap();
    let out = s.run(&["--layers", "dense"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dense.csv: line 2") && stderr.contains("fields"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), corrupt, "nothing may be written to a corrupt file");
}

#[test]
fn missing_configs_file_is_named() {
    let s = Setup::new(&small_mix(), 5.0);
    let out = s.run(&["--configs", "nope.json"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.json"), "{}", text(&out));
    assert!(!Path::new(&s.path("data/tiny/dense.csv")).exists());
}

/// This host's fingerprint as the profiles record it.
fn host() -> &'static perfmodel::device::Fingerprint {
    perfmodel::device::Fingerprint::of_host()
}

#[test]
fn another_machines_profile_is_refused_and_nothing_is_written() {
    let s = Setup::new(&small_mix(), 5.0);
    let profile = s.path("collectors/tiny.toml");
    for (fingerprint, expect) in [
        (
            format!("[fingerprint]\narch = \"{}\"\nmodel_name = \"Fake CPU 9000\"\n", std::env::consts::ARCH),
            "make a device for it with 'perfmodel device init NAME'",
        ),
        ("[fingerprint]\narch = \"sparc-board\"\nmodel_name = \"Board\"\n".to_string(), "cargo build --release"),
    ] {
        let text = format!(
            "{}\n{fingerprint}",
            std::fs::read_to_string(&profile).unwrap().split("[fingerprint]").next().unwrap()
        );
        std::fs::write(&profile, &text).unwrap();
        for command in [&["collect"][..], &["collect", "--quick"], &["collect", "--remeasure", "2"]] {
            let mut c = s.command(&command[1..]);
            let out = c.output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{command:?}: {}", text_of(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("made for another machine") && err.contains(&host().summary()), "{err}");
            assert!(err.contains(expect) && err.contains("Nothing was measured or written"), "{err}");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_perfmodel"))
            .current_dir(s.dir.path())
            .args(["calibrate", "--device", "tiny", "--collectors-dir", "collectors", "--models-dir", "models"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("made for another machine"), "{}", text_of(&out));
        assert!(!s.path("data").exists() && !s.path("models").exists(), "nothing written");
        assert_eq!(std::fs::read_to_string(&profile).unwrap(), text, "the profile is left as it was");
    }
}

fn text_of(out: &Output) -> String {
    text(out)
}

#[test]
fn an_older_profile_records_this_machine_on_its_first_collection() {
    let s = Setup::new(&[dense(16, 8)], 5.0);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("recorded this machine"), "{}", text(&out));
    for path in ["collectors/tiny.toml", "data/tiny/profile.toml"] {
        let written = std::fs::read_to_string(s.path(path)).unwrap();
        let p = perfmodel::collect::DeviceProfile::parse(&written, "tiny", Path::new(path)).unwrap();
        assert_eq!(p.fingerprint.as_ref(), Some(host()), "{path}: {written}");
    }
    // The profile's own comments survive.
    assert!(std::fs::read_to_string(s.path("collectors/tiny.toml"))
        .unwrap()
        .contains("description = \"tiny test device\""));
}

#[test]
fn device_init_writes_a_profile_of_this_host_that_collect_accepts() {
    let s = Setup::new(&[dense(16, 8)], 5.0);
    let init = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_perfmodel"))
            .current_dir(s.dir.path())
            .args([&["device", "init", "mine", "--collectors-dir", "collectors"][..], extra].concat())
            .output()
            .unwrap()
    };
    let out = init(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let written = std::fs::read_to_string(s.path("collectors/mine.toml")).unwrap();
    let p = perfmodel::collect::DeviceProfile::parse(&written, "mine", Path::new("mine.toml")).unwrap();
    assert_eq!(p.fingerprint.as_ref(), Some(host()));
    assert!(p.peak_gflops.is_some_and(|g| g > 0.1) && p.memory_bandwidth_gbs.is_some_and(|b| b > 0.1), "{written}");
    assert!(written.contains("Power sensors probed here"), "{written}");
    // Never overwritten without --force.
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(s.path("collectors/mine.toml")).unwrap(), written);
    assert!(init(&["--force"]).status.success());

    let out = s.run(&["--device", "mine", "--max-samples", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.rows("data/mine").values().flatten().count(), 1, "{}", text(&out));
}

#[test]
fn a_quick_collection_then_a_full_one_measures_every_row_once() {
    let mut configs = small_mix();
    configs.extend([
        dense(32, 16),
        dense(64, 8),
        json!({"type": "activation", "function": "relu", "input_shapes": [[4, 8, 8]]}),
    ]);
    let s = Setup::new(&configs, 5.0);
    let out = s.run(&["--quick", "--max-samples", "4"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("quick collection"), "{}", text(&out));
    let quick: Vec<data::Sample> = s.rows("data/tiny").into_values().flatten().collect();
    assert_eq!(quick.len(), 4, "{}", text(&out));
    assert!(quick.iter().all(|r| r.batch == 1), "batch size 1 first: {quick:?}");
    let types: HashSet<LayerType> = quick.iter().map(|r| r.layer_type).collect();
    assert!(types.len() >= 3, "a cover of the types first: {types:?}");

    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let keys = all_keys(&s.rows("data/tiny"));
    let unique: HashSet<String> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), unique.len(), "no row measured twice");
    assert_eq!(unique, expected_keys(&configs));

    // A config whose first batch size fails is not tried at the larger ones, even with few configs (a config's
    // first and later batch sizes never share a measuring group).
    let s = Setup::new(&small_mix()[..1], 1e-9);
    let out = s.run(&["--quick"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<data::Sample> = s.rows("data/tiny").into_values().flatten().collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].batch, rows[0].status), (1, Status::Failed));
}

#[test]
fn a_second_collection_into_the_same_data_is_refused_while_the_first_runs() {
    let configs = small_mix();
    let s = Setup::new(&configs[..2], 5.0);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let before = std::fs::read(s.path("data/tiny/conv2d.csv")).unwrap();
    // What a running collection holds (the kernel drops it when that process dies).
    let lock = perfmodel::fsio::try_lock(&s.path("data/tiny/.collect.lock"), String::new).unwrap();
    let refused = |out: &Output| {
        assert_eq!(out.status.code(), Some(2), "{}", text(out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("another perfmodel process is collecting into"), "{stderr}");
    };
    std::fs::write(
        s.path("configs.json"),
        serde_json::to_string(&json!({"seed": 1, "batch_sizes": [1, 2], "configs": configs
            .iter()
            .map(|c| json!({"config": c, "source": "test", "count": 1}))
            .collect::<Vec<_>>()}))
        .unwrap(),
    )
    .unwrap();
    refused(&s.run(&[]));
    // So is a re-measurement of the device's stored samples.
    refused(&s.run(&["--remeasure", "2"]));
    assert_eq!(std::fs::read(s.path("data/tiny/conv2d.csv")).unwrap(), before, "nothing is written while refused");
    drop(lock);
    let out = s.run(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(all_keys(&s.rows("data/tiny")).len(), 8);
}

#[test]
fn a_layer_larger_than_the_process_may_allocate_is_a_failed_sample_with_the_sizes() {
    if std::fs::read_to_string("/proc/self/status").is_err() {
        eprintln!("SKIPPED: no /proc on this system");
        return;
    }
    // 3 + 16 channels of 8000x8000: 4.5 GiB, more than a 3 GiB address space; the dense layer still runs.
    let huge = json!({"type": "conv2d", "filters": 16, "kernel": [1, 1], "input_shapes": [[3, 8000, 8000]],
                      "batch_size": 1});
    let s = Setup::new(&[huge, dense(8, 4)], 5.0);
    let out = Command::new("sh")
        .current_dir(s.dir.path())
        .args([
            "-c",
            "ulimit -v 3145728 && exec \"$0\" collect --device tiny --configs configs.json --data-dir data \
                      --collectors-dir collectors",
        ])
        .arg(env!("CARGO_BIN_EXE_perfmodel"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows = s.rows("data/tiny");
    let conv = &rows[&LayerType::Conv2d];
    assert!(conv.iter().all(|r| r.status == Status::Failed && r.reason.contains("GiB")), "{conv:?}");
    assert!(rows[&LayerType::Dense].iter().all(|r| r.status == Status::Ok), "{rows:?}");
}
