//! `perfmodel train` and `perfmodel import tvm-profiling` through the real binary, on data written with the
//! library's own data writer into temporary directories.

use perfmodel::data::{self, Sample, SampleWriter, Status};
use perfmodel::layer::{Activation, Dense, LayerConfig, LayerType, Op, Padding, Pool2d};
use perfmodel::train::ModelStore;
use perfmodel::Metric;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn perfmodel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfmodel")).args(args).output().expect("run perfmodel")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A dense layer's "measurements": latency proportional to FLOPs, memory to the tensor bytes, no power sensor.
fn synthetic_dense(data_dir: &Path, device: &str, rows: usize) {
    let path = data::file_path(&data_dir.join(device), LayerType::Dense);
    let mut writer = SampleWriter::open(&path).unwrap();
    for i in 0..rows {
        let (features, units, batch) = (16 + 37 * (i % 23), 8 + 53 * (i % 17), [1, 4, 16][i % 3]);
        let op = Op::Dense(Dense { units, use_bias: true, activation: Activation::Linear });
        let config = LayerConfig::new(op, vec![perfmodel::layer::Shape::from_slice(&[features])], batch);
        let mut s = Sample::unmeasured(&config).unwrap();
        let cost = config.cost().unwrap();
        s.latency_ms = Some(0.002 + cost.flops as f64 * 1e-7);
        s.memory_mib = Some(1.0 + (s.input_bytes + s.weight_bytes + s.output_bytes) as f64 / 1048576.0);
        s.status = Status::Ok;
        s.reason.clear();
        writer.append(&s).unwrap();
    }
}

fn train(data: &Path, models: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "train",
        "--device",
        "synth",
        "--data-dir",
        data.to_str().unwrap(),
        "--models-dir",
        models.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    perfmodel(&args)
}

#[test]
fn train_writes_models_report_and_plots_that_load_and_predict() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 90);
    let out = train(&data, &models, &["--methods", "ert,tree,linear"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("dense") && log.contains("latency") && log.contains("memory"), "{log}");
    assert!(log.contains("power") && log.contains("not trained"), "power has no measurements: {log}");
    let dir = models.join("synth");
    for f in
        ["manifest.json", "report.md", "plots/dense_latency.png", "plots/dense_latency.svg", "plots/dense_memory.png"]
    {
        assert!(dir.join(f).is_file(), "missing {f}: {log}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("µs CPU") && report.contains("CV MAPE"), "{report}");
    let store = ModelStore::open(&models, "synth").unwrap();
    // Model files are named after their content (the manifest, written last, commits a save).
    for entry in &store.manifest().models {
        assert!(
            entry.file.starts_with(&format!("dense/{}.", entry.metric)) && entry.file.ends_with(".bin"),
            "{}",
            entry.file
        );
        assert!(dir.join(&entry.file).is_file(), "missing {}", entry.file);
    }
    assert_eq!(store.layer_types(), vec![LayerType::Dense]);
    assert!(store.predictor(LayerType::Dense, Metric::Power).is_none());
    // The chosen latency model answers within 25 % for a layer inside the training range.
    let op = Op::Dense(Dense { units: 300, use_bias: true, activation: Activation::Linear });
    let config = LayerConfig::new(op, vec![perfmodel::layer::Shape::from_slice(&[400])], 4);
    let expected = 0.002 + config.cost().unwrap().flops as f64 * 1e-7;
    let predicted = store.predictor(LayerType::Dense, Metric::Latency).unwrap().predict(&config.features().unwrap());
    assert!((predicted - expected).abs() < 0.25 * expected, "predicted {predicted}, expected {expected}");
}

#[test]
fn holdout_keeps_rows_out_of_training_and_reports_their_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 90);
    let out = train(&data, &models, &["--methods", "ert,linear", "--holdout", "0.2", "--contamination", "0"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("held-out rows"), "{log}");
    let dir = models.join("synth");
    let csv = std::fs::read_to_string(dir.join("holdout.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let latency: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == "latency").collect();
    assert_eq!(latency.len(), 18, "{csv}");
    assert_eq!(rows.iter().filter(|r| r[1] == "memory").count(), 18, "{csv}");
    // The store's models saw only the other 72 rows.
    let store = ModelStore::open(&models, "synth").unwrap();
    assert!(store.manifest().models.iter().all(|e| e.samples == 72), "{:?}", store.manifest().models);
    // The predictions written are the store's own predictions for those rows, and close on this clean data.
    let samples = data::read_samples(&data::file_path(&data.join("synth"), LayerType::Dense)).unwrap();
    let predictor = store.predictor(LayerType::Dense, Metric::Latency).unwrap();
    for r in &latency {
        let s = samples.iter().find(|s| s.key == r[2]).expect("held-out key is a row of the data");
        let (measured, predicted): (f64, f64) = (r[3].parse().unwrap(), r[4].parse().unwrap());
        assert_eq!(measured, s.latency_ms.unwrap());
        assert!((predictor.predict(&s.config.features().unwrap()) - predicted).abs() <= 1e-12 * predicted.abs());
        assert!((predicted - measured).abs() < 0.5 * measured, "{r:?}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Held-out rows"), "{report}");
    // The store says so, and an estimate with it warns.
    assert!(store.manifest().models.iter().all(|e| e.held_out == Some(18)), "{:?}", store.manifest().models);
    let net = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny_net.json");
    let out = perfmodel(&[
        "estimate",
        net.to_str().unwrap(),
        "--device",
        "synth",
        "--models-dir",
        models.to_str().unwrap(),
        "--uncalibrated",
    ]);
    assert!(text(&out).contains("trained with rows held out"), "{}", text(&out));
    // A run without --holdout describes other models: the file goes.
    let out = train(&data, &models, &["--methods", "linear"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!dir.join("holdout.csv").exists());
    let out = train(&data, &models, &["--holdout", "0.7"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--holdout"), "{}", text(&out));
}

#[test]
fn same_seed_gives_identical_models() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    synthetic_dense(&data, "synth", 60);
    let runs: Vec<PathBuf> = (0..2).map(|i| tmp.path().join(format!("models{i}"))).collect();
    for m in &runs {
        let out = train(&data, m, &["--methods", "ert,knn", "--metrics", "latency", "--seed", "5", "--folds", "3"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let read = |m: &PathBuf, f: &str| std::fs::read(m.join("synth").join(f)).unwrap();
    // Same content, same content-named file; same manifest.
    assert_eq!(read(&runs[0], "manifest.json"), read(&runs[1], "manifest.json"));
    let store = ModelStore::open(&runs[0], "synth").unwrap();
    let latency = &store.manifest().models.iter().find(|e| e.metric == "latency").unwrap().file;
    assert_eq!(read(&runs[0], latency), read(&runs[1], latency));
}

#[test]
fn learning_curve_has_fifteen_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 80);
    let out = train(&data, &models, &["--methods", "tree,linear", "--metrics", "latency", "--learning-curve"]);
    assert!(out.status.success(), "{}", text(&out));
    let report = std::fs::read_to_string(models.join("synth/report.md")).unwrap();
    let header = report.lines().skip_while(|l| !l.starts_with("Learning curve")).nth(2).expect("learning-curve table");
    assert_eq!(header.matches('|').count(), 15 + 2, "{header}");
    assert!(report.lines().any(|l| l.starts_with("| tree(")), "{report}");
}

#[test]
fn bad_arguments_and_missing_data_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    let out = train(&data, &models, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no collected data") && text(&out).contains("synth"), "{}", text(&out));
    synthetic_dense(&data, "synth", 20);
    for (args, needle) in [
        (&["--layers", "conv3d"][..], "unknown layer type 'conv3d'"),
        (&["--metrics", "speed"][..], "unknown metric 'speed'"),
        (&["--methods", "svm"][..], "unknown method 'svm'"),
        (&["--select-by", "rmse"][..], "--select-by"),
    ] {
        let out = train(&data, &models, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
    // Too few rows for any triplet: an error, and no empty store.
    let out = train(&data, &models, &["--folds", "25"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nothing to train") && text(&out).contains("at least 25 needed"), "{}", text(&out));
    assert!(!models.exists(), "nothing may be written on bad input");
}

fn tvm_dataset() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/tvm-980ti"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {} is absent (the published GTX 980 Ti sample is not part of the repository)",
            dir.display()
        );
        None
    }
}

#[test]
fn tvm_import_then_train_gives_all_three_metrics_for_both_layer_types() {
    let Some(dataset) = tvm_dataset() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    let (d, m) = (data.to_str().unwrap(), models.to_str().unwrap());
    let out =
        perfmodel(&["import", "tvm-profiling", dataset.to_str().unwrap(), "--device", "gtx980ti", "--data-dir", d]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = data::read_device(&data, "gtx980ti").unwrap();
    assert_eq!(rows[&LayerType::Conv2d].len() + rows[&LayerType::Dense].len(), 310, "{}", text(&out));
    // Importing again adds nothing: every config is already there.
    let again =
        perfmodel(&["import", "tvm-profiling", dataset.to_str().unwrap(), "--device", "gtx980ti", "--data-dir", d]);
    assert!(again.status.success() && text(&again).contains("310 files skipped"), "{}", text(&again));
    let out =
        perfmodel(&["train", "--device", "gtx980ti", "--data-dir", d, "--models-dir", m, "--methods", "ert,linear"]);
    assert!(out.status.success(), "{}", text(&out));
    let store = ModelStore::open(&models, "gtx980ti").unwrap();
    for t in [LayerType::Conv2d, LayerType::Dense] {
        for metric in Metric::ALL {
            assert!(store.predictor(t, metric).is_some(), "{t}/{metric} missing: {}", text(&out));
        }
    }
}

#[test]
fn tvm_import_of_a_bad_file_names_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("dataset/dense");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("random_dense_1_1.json"),
        r#"{"units": 4, "features": 8, "input shape": [null, 8], "output shape": [null, 4], "workload": "dense", "batch_size": 1, "time": 0.1, "power": 50.0, "memory": 0.1}"#,
    )
    .unwrap();
    std::fs::write(src.join("random_dense_2_1.json"), r#"{"workload": "dense", "batch_size": 1, "input shape": [null, 8], "output shape": [null, 4], "time": "fast"}"#).unwrap();
    let data = tmp.path().join("data");
    let out = perfmodel(&[
        "import",
        "tvm-profiling",
        tmp.path().join("dataset").to_str().unwrap(),
        "--device",
        "d",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("random_dense_2_1.json") && text(&out).contains("'time'"), "{}", text(&out));
    assert!(!data.join("d/dense.csv").exists(), "nothing may be written when a file is bad");
}

#[test]
fn training_a_subset_keeps_the_other_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 40);
    for metric in ["latency", "memory"] {
        let out = train(&data, &models, &["--methods", "linear", "--metrics", metric]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let store = ModelStore::open(&models, "synth").unwrap();
    assert!(store.predictor(LayerType::Dense, Metric::Latency).is_some(), "the latency model was dropped");
    assert!(store.predictor(LayerType::Dense, Metric::Memory).is_some());
}

/// Max pooling "measurements", latency proportional to the input, rows `first..first + rows`, each with a speed
/// probe reading of `probe_ms`.
fn probed_pools(data_dir: &Path, device: &str, first: usize, rows: usize, probe_ms: f64) {
    let path = data::file_path(&data_dir.join(device), LayerType::MaxPool2d);
    let mut writer = SampleWriter::open(&path).unwrap();
    for i in first..first + rows {
        let (channels, side) = (8 + 13 * (i % 29), 8 + 3 * (i % 31));
        let op = Op::MaxPool2d(Pool2d { pool_size: [2, 2], strides: [2, 2], padding: Padding::Valid });
        let config = LayerConfig::new(op, vec![perfmodel::layer::Shape::from_slice(&[channels, side, side])], 1);
        let mut s = Sample::unmeasured(&config).unwrap();
        s.latency_ms = Some(0.001 + (channels * side * side) as f64 * 3e-6);
        s.memory_mib = Some(1.0 + (s.input_bytes + s.output_bytes) as f64 / 1048576.0);
        s.speed_ref_ms = Some(probe_ms);
        s.status = Status::Ok;
        s.reason.clear();
        writer.append(&s).unwrap();
    }
}

#[test]
fn retraining_one_layer_type_after_new_rows_keeps_the_other_latency_models() {
    // Rows added since the last training move the data's median probe reading: retraining one type must not
    // leave the others' latency models behind (trained at another nominal speed, they used to be dropped).
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 40);
    probed_pools(&data, "synth", 0, 40, 0.80);
    let out = train(&data, &models, &["--methods", "linear", "--metrics", "latency"]);
    assert!(out.status.success(), "{}", text(&out));
    let nominal = |models: &Path| ModelStore::open(models, "synth").unwrap().manifest().speed_probe.clone().unwrap();
    let before = nominal(&models);
    assert!((before.nominal_ms - 0.80).abs() < 1e-9, "{before:?}");
    // Many more pooling rows at another probe reading: the data's median is now theirs.
    probed_pools(&data, "synth", 40, 120, 0.90);
    let out = train(&data, &models, &["--methods", "linear", "--metrics", "latency", "--layers", "max_pool2d"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("a probe of 0.8000 ms (the rows' median is now 0.9000 ms"), "{}", text(&out));
    let store = ModelStore::open(&models, "synth").unwrap();
    assert!(store.predictor(LayerType::Dense, Metric::Latency).is_some(), "the dense latency model was dropped");
    assert!(store.predictor(LayerType::MaxPool2d, Metric::Latency).is_some());
    assert_eq!(nominal(&models), before, "a partial retrain keeps the stored models' nominal speed");
    // A full retrain takes the data's own.
    let out = train(&data, &models, &["--methods", "linear", "--metrics", "latency"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!((nominal(&models).nominal_ms - 0.90).abs() < 1e-9, "{:?}", nominal(&models));
}

/// Dense "measurements" of a machine `speed` times slower than a reference, with a latency no few rows describe
/// (a wave in the input width on top of the FLOPs), rows `first..first + rows` of one deterministic sequence.
fn wavy_dense(data_dir: &Path, device: &str, first: usize, rows: usize, speed: f64) {
    let path = data::file_path(&data_dir.join(device), LayerType::Dense);
    let mut writer = SampleWriter::open(&path).unwrap();
    for i in first..first + rows {
        let (features, units) = (16 + 29 * (i % 41), 8 + 53 * (i % 19));
        let op = Op::Dense(Dense { units, use_bias: true, activation: Activation::Linear });
        let config = LayerConfig::new(op, vec![perfmodel::layer::Shape::from_slice(&[features])], 1);
        let mut s = Sample::unmeasured(&config).unwrap();
        let flops = config.cost().unwrap().flops as f64;
        let wave = 1.0 + 0.6 * (features as f64 / 37.0).sin();
        s.latency_ms = Some(speed * (0.002 + flops * 1e-7) * wave);
        s.memory_mib = Some(1.0 + (s.input_bytes + s.weight_bytes + s.output_bytes) as f64 / 1048576.0);
        s.status = Status::Ok;
        s.reason.clear();
        writer.append(&s).unwrap();
    }
}

#[test]
fn transfer_wins_cross_validation_when_the_target_is_a_known_machine_at_another_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    wavy_dense(&data, "source", 0, 400, 1.0);
    let args = |device: &'static str| {
        vec![
            "train",
            "--device",
            device,
            "--data-dir",
            data.to_str().unwrap(),
            "--models-dir",
            models.to_str().unwrap(),
        ]
    };
    let out = perfmodel(&[&args("source")[..], &["--methods", "ert,knn,linear", "--metrics", "latency"]].concat());
    assert!(out.status.success(), "{}", text(&out));
    // The target: a few rows of other layers, 2.5x slower.
    wavy_dense(&data, "synth", 1000, 24, 2.5);
    let out = perfmodel(
        &[&args("synth")[..], &["--methods", "ert,knn,linear", "--metrics", "latency", "--transfer-from", "source"]]
            .concat(),
    );
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("transfer wins by"), "{log}");
    let store = ModelStore::open(&models, "synth").unwrap();
    let predictor = store.predictor(LayerType::Dense, Metric::Latency).unwrap();
    assert_eq!(predictor.transfer_source().map(|(d, _)| d), Some("source"), "{}", predictor.method());
    // The transferred model stands alone (the source's model is copied in) and predicts the slower machine.
    std::fs::remove_dir_all(models.join("source")).unwrap();
    let store = ModelStore::open(&models, "synth").unwrap();
    let op = Op::Dense(Dense { units: 300, use_bias: true, activation: Activation::Linear });
    let config = LayerConfig::new(op, vec![perfmodel::layer::Shape::from_slice(&[400])], 1);
    let flops = config.cost().unwrap().flops as f64;
    let truth = 2.5 * (0.002 + flops * 1e-7) * (1.0 + 0.6 * (400.0f64 / 37.0).sin());
    let predicted = store.predictor(LayerType::Dense, Metric::Latency).unwrap().predict(&config.features().unwrap());
    assert!((predicted / truth - 1.0).abs() < 0.15, "predicted {predicted}, truth {truth}");

    // A missing source is a clear error.
    let out = perfmodel(&[&args("synth")[..], &["--transfer-from", "nosuch"]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nosuch"), "{}", text(&out));
}

/// `kill -9` at any moment of a real `perfmodel train` (issue: crash safety): afterwards the store opens, every
/// file its manifest names is there with the hash the manifest records (`ModelStore::open` checks), and it is
/// either the previous training's store or a complete new one, never a mix; a rerun finishes and leaves no model
/// file that its manifest does not name.
#[test]
fn a_train_killed_at_any_moment_leaves_a_store_that_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models) = (tmp.path().join("data"), tmp.path().join("models"));
    synthetic_dense(&data, "synth", 200);
    let args = |seed: &'static str| {
        vec![
            "train",
            "--device",
            "synth",
            "--data-dir",
            data.to_str().unwrap().to_string().leak(),
            "--models-dir",
            models.to_str().unwrap().to_string().leak(),
            "--methods",
            "ert,tree,linear",
            "--seed",
            seed,
        ]
    };
    let manifest = || std::fs::read(models.join("synth/manifest.json")).unwrap();
    // The store to keep, then the length of a complete run of another training (another seed, other models).
    let out = perfmodel(&args("1"));
    assert!(out.status.success(), "{}", text(&out));
    let first = manifest();
    let started = std::time::Instant::now();
    let out = perfmodel(&args("2"));
    assert!(out.status.success(), "{}", text(&out));
    let full = started.elapsed();
    let second = manifest();
    assert_ne!(first, second, "the two trainings must differ for the check to mean anything");
    // Back to the first store, then kill the second training at points all along its run, the save included.
    let out = perfmodel(&args("1"));
    assert!(out.status.success(), "{}", text(&out));
    for fraction in [0.1, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.96, 0.98, 0.99, 1.0] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_perfmodel"))
            .args(args("2"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(fraction));
        let _ = child.kill(); // SIGKILL on Unix
        let _ = child.wait();
        let store = ModelStore::open(&models, "synth");
        assert!(store.is_ok(), "after a kill at {fraction} of a run: {:?}", store.err());
        let now = manifest();
        assert!(now == first || now == second, "after a kill at {fraction} of a run the manifest is neither store's");
        assert!(store.unwrap().predictor(LayerType::Dense, Metric::Latency).is_some());
        // Start every kill from the first store again.
        if now == second {
            let out = perfmodel(&args("1"));
            assert!(out.status.success(), "{}", text(&out));
        }
    }
    // A rerun completes and leaves only the files its manifest names.
    let out = perfmodel(&args("2"));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(manifest(), second);
    let store = ModelStore::open(&models, "synth").unwrap();
    let named: Vec<String> = store.manifest().models.iter().map(|m| m.file.clone()).collect();
    for entry in std::fs::read_dir(models.join("synth/dense")).unwrap() {
        let name = format!("dense/{}", entry.unwrap().file_name().to_string_lossy());
        assert!(named.contains(&name), "{name} is named by no manifest");
    }
}

/// Data of another machine is trained with tract's engine features only when the device's current models show
/// that tract answers here as it did there (the same kernels and caches): a retrain of the shipped rows, say in a
/// newer store format. Otherwise the models are trained without them.
#[test]
fn another_machines_rows_get_engine_features_only_where_tract_answers_as_there() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, models, collectors) =
        (tmp.path().join("data"), tmp.path().join("models"), tmp.path().join("collectors"));
    synthetic_dense(&data, "synth", 90);
    std::fs::create_dir_all(&collectors).unwrap();
    let profile = "description = \"t\"\nexecutor = \"tract\"\nhost = true\nthreads = 1\nbatch_sizes = [1]\n\
                   [protocol]\nburn_in_runs = 1\nrepetitions = 2\nrounds = 2\ngroup_size = 2\n\
                   per_sample_timeout_s = 5.0\nmin_window_ms = 0\nmax_cv = 0.5\n[power]\n";
    std::fs::write(collectors.join("synth.toml"), profile).unwrap();
    let run = || {
        let out = train(&data, &models, &["--methods", "ert,linear", "--collectors-dir", collectors.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
        (text(&out), ModelStore::open(&models, "synth").unwrap().engine_answers_here().is_some())
    };
    // Measured here: the memory models count the weights as tract packs them here.
    let (log, recorded) = run();
    assert!(log.contains("as tract lays them out on this machine") && recorded, "{log}");
    // The same rows, now said to be another machine's, whose models record this machine's tract.
    let foreign =
        format!("{profile}[fingerprint]\narch = \"{}\"\nmodel_name = \"Fake CPU 9000\"\n", std::env::consts::ARCH);
    std::fs::write(collectors.join("synth.toml"), foreign).unwrap();
    let (log, recorded) = run();
    assert!(log.contains("record the same tract answers as this one gives") && recorded, "{log}");
    // Without such models nothing says how tract ran there.
    std::fs::remove_dir_all(&models).unwrap();
    let (log, recorded) = run();
    assert!(log.contains("trained without this machine's engine features") && !recorded, "{log}");
}
