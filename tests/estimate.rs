//! `perfmodel estimate` end to end: a model store with known predictors is built in a temp dir, so every number
//! the binary prints can be checked against a hand computation.

use perfmodel::data::{file_path, SampleWriter, Status};
use perfmodel::layer::LayerConfig;
use perfmodel::train::model::{FlatForest, Model, Predictor, LEAF};
use perfmodel::train::store::{model_file_name, Manifest, ModelEntry, ModelFile, ModelStore, Scores};
use perfmodel::{LayerType, Metric, Network};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

const MIB: f64 = 1024.0 * 1024.0;

/// A predictor answering `value` for every layer: a forest of one tree that is a single leaf.
fn constant(value: f64) -> Predictor {
    let forest =
        FlatForest { feature: vec![LEAF], value: vec![value], right: vec![0], roots: vec![0], base: 0.0, scale: 1.0 };
    Predictor::new("const", false, Model::Trees(forest))
}

/// Write a model store for `device` with the given predictors, through the model store's own writer.
fn write_store(models_dir: &Path, device: &str, predictors: Vec<(LayerType, Metric, Predictor)>) {
    write_store_of(models_dir, device, None, predictors)
}

/// The same, for models that recorded the engine that measured them (`onnxruntime 1.32.0 (optimisation all)`).
fn write_store_of(
    models_dir: &Path,
    device: &str,
    engine: Option<&str>,
    predictors: Vec<(LayerType, Metric, Predictor)>,
) {
    let mut manifest = Manifest {
        format_version: perfmodel::train::store::FORMAT_VERSION,
        perfmodel_version: perfmodel::VERSION.to_string(),
        device: device.to_string(),
        feature_names: BTreeMap::new(),
        data_hash: String::new(),
        models: Vec::new(),
        speed_probe: None,
        engine: engine.map(str::to_string),
        reorder_ms_per_mib: None,
        nchwc_block: None,
    };
    let mut files = Vec::new();
    for (t, m, p) in predictors {
        manifest.feature_names.insert(t.as_str().to_string(), t.feature_names());
        manifest.models.push(ModelEntry {
            layer_type: t.as_str().to_string(),
            metric: m.as_str().to_string(),
            file: model_file_name(t, m),
            file_sha256: String::new(),
            method: "const".into(),
            samples: 1,
            removed_outliers: 0,
            data_hash: String::new(),
            cv: Scores::default(),
            held_out: None,
        });
        files.push(ModelFile::new(t, m, p));
    }
    ModelStore::save(models_dir, &mut manifest, &files).unwrap();
}

fn perfmodel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfmodel")).current_dir(dir).args(args).output().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// conv (same) → batch norm → relu → max pool → flatten → dense → softmax on a 3×8×8 input; shared with the
/// estimator's unit tests.
const TINY: &str = include_str!("data/tiny_net.json");

/// conv2d: 2 ms, 10 W, 1 MiB; max_pool2d: 0.5 ms, 4 W; dense: 1.29 ms, 8 W; nothing for activations.
fn tiny_store(models: &Path) {
    write_store(
        models,
        "dev",
        vec![
            (LayerType::Conv2d, Metric::Latency, constant(2.0)),
            (LayerType::Conv2d, Metric::Power, constant(10.0)),
            (LayerType::Conv2d, Metric::Memory, constant(1.0)),
            (LayerType::MaxPool2d, Metric::Latency, constant(0.5)),
            (LayerType::MaxPool2d, Metric::Power, constant(4.0)),
            (LayerType::Dense, Metric::Latency, constant(1.29)),
            (LayerType::Dense, Metric::Power, constant(8.0)),
        ],
    );
}

fn setup(net_text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("net.json"), net_text).unwrap();
    std::fs::create_dir(dir.path().join("collectors")).unwrap();
    dir
}

const DIRS: [&str; 6] = ["--models-dir", "models", "--collectors-dir", "collectors", "--data-dir", "data"];

#[test]
fn sums_energy_and_memory_of_a_hand_computed_network() {
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    assert_eq!(v["network"], "tiny");
    assert_eq!(v["device"], "dev");
    assert_eq!(v["batch_size"], 1);
    assert_eq!(v["method"], "learned");
    let layer = |name: &str| v["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    assert!(close(layer("d")["latency_ms"].as_f64().unwrap(), 1.29));
    assert_eq!(layer("c1")["predictor"], "const");
    assert_eq!(layer("bn")["predictor"], "fused:c1");
    assert_eq!(layer("r")["predictor"], "fused:c1");
    assert_eq!(layer("f")["predictor"], "free");
    assert_eq!(layer("s")["predictor"], "uncovered");
    assert!(layer("s")["latency_ms"].is_null());
    let total = &v["total"];
    assert!(close(total["latency_ms"].as_f64().unwrap(), 2.0 + 0.5 + 1.29));
    assert!(close(layer("c1")["energy_mj"].as_f64().unwrap(), 20.0));
    assert!(close(total["energy_mj"].as_f64().unwrap(), 2.0 * 10.0 + 0.5 * 4.0 + 1.29 * 8.0));
    // Memory. c1's model answers 1 MiB, but tract runs that padded 3x3 convolution as a lazy im2col, whose
    // scratch is known: it pads its 3x10x10 input copy (1200 B) twice over while it builds it, 2400 B beside
    // the input less the output not yet made, 1376 B. So c1 holds inputs 768 B + output 1024 B + weights 448 B
    // + 1376 B = 3616 B. Weights resident: c1 448 B + d 2600 B. Live tensors: c1: input 768 + output 1024 +
    // 1376; then the input (its caller holds it) plus p: 1024 + 256; d: 256 + 40; s: 40 + 40. Peak at c1.
    let c1 = 3616.0 / MIB;
    assert!(close(layer("c1")["memory_mib"].as_f64().unwrap(), c1), "{}", layer("c1"));
    let peak = (768.0 + 1024.0 + 1376.0 + 448.0 + 2600.0) / MIB;
    assert!(close(total["peak_memory_mib"].as_f64().unwrap(), peak), "{total}");
    let (p, d, s) = (1280.0 / MIB, 2896.0 / MIB, 80.0 / MIB);
    assert!(close(total["memory_two_largest_mib"].as_f64().unwrap(), c1 + d));
    assert!(close(total["memory_two_mean_mib"].as_f64().unwrap(), 2.0 * (c1 + p + d + s) / 4.0));
    // The uncovered softmax: 5 FLOPs per element of 10, out of 14080 + 512 + 256 + 256 + 1290 + 50 FLOPs.
    let uncovered = v["uncovered"].as_array().unwrap();
    assert_eq!(uncovered.len(), 1);
    assert_eq!(uncovered[0]["name"], "s");
    assert_eq!(uncovered[0]["type"], "activation");
    assert!(close(uncovered[0]["flops_share"].as_f64().unwrap(), 50.0 / 16444.0));
    let notes = v["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("lower bound")), "{notes:?}");
}

#[test]
fn table_warns_about_uncovered_layers_and_csv_leaves_unknowns_empty() {
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--plot", "out.svg"];
    args.extend(DIRS);
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("warning: layer 's' (activation) is uncovered"), "{text}");
    assert!(text.contains("peak memory"), "{text}");
    let svg = std::fs::read_to_string(dir.path().join("out.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("latency (ms)") && svg.contains("energy (mJ)"));
    args = vec!["estimate", "net.json", "--device", "dev", "--format", "csv"];
    args.extend(DIRS);
    let out = perfmodel(dir.path(), &args);
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(csv.starts_with("name,type,latency_ms,power_w,energy_mj,memory_mib,in_use_mib,predictor\n"), "{csv}");
    assert!(csv.contains("\ns,activation,,,,"), "{csv}");
}

/// A residual block: the branch output `a` stays alive across b and c until the add.
const RESIDUAL: &str = r#"{"name": "res", "input_shape": [2, 8, 8], "layers": [
    {"name": "a", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
    {"name": "b", "type": "conv2d", "filters": 8, "kernel": [3, 3], "padding": "same"},
    {"name": "c", "type": "conv2d", "filters": 8, "kernel": [1, 1]},
    {"name": "sum", "type": "add", "inputs": ["a", "c"]}]}"#;

#[test]
fn liveness_memory_of_a_residual_network_and_null_power() {
    let dir = setup(RESIDUAL);
    write_store(
        &dir.path().join("models"),
        "dev",
        vec![(LayerType::Conv2d, Metric::Latency, constant(1.0)), (LayerType::Add, Metric::Latency, constant(0.1))],
    );
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    // Tensors (f32): input 2*64*4 = 512 B, every layer output 8*64*4 = 2048 B. Weights: a 2*8+8 = 24,
    // b 9*8*8+8 = 584, c 8*8+8 = 72 elements = 2720 B, all resident. The input lives throughout (its caller
    // holds it). Steps: a: in + a = 2560; b: in + a + b = 4608; c: in + a + b + c = 6656; sum (in place into a):
    // in + a + c = 4608. No memory model, so no workspace but b's padding: tract runs that 3x3 convolution as a
    // lazy im2col and pads its input first, twice the padded 8x10x10 (3200 B) while it builds it, beside its
    // input: in + a + 6400 = 8960 B at b.
    let peak = (8960.0 + 2720.0) / MIB;
    assert!(close(v["total"]["peak_memory_mib"].as_f64().unwrap(), peak), "{}", v["total"]);
    assert!(close(v["total"]["latency_ms"].as_f64().unwrap(), 3.1));
    // No power model for this device: null, with a note, never 0.
    assert!(v["total"]["energy_mj"].is_null());
    assert!(v["layers"].as_array().unwrap().iter().all(|l| l["power_w"].is_null() && l["energy_mj"].is_null()));
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.iter().any(|n| n.contains("no power model")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("no memory model")), "{notes:?}");
}

/// The estimate of `net` on a device whose conv2d models answer 1 ms and `memory_mib` MiB.
fn estimate_with_conv_memory(net: &str, memory_mib: f64) -> Value {
    let dir = setup(net);
    write_store(
        &dir.path().join("models"),
        "dev",
        vec![
            (LayerType::Conv2d, Metric::Latency, constant(1.0)),
            (LayerType::Conv2d, Metric::Memory, constant(memory_mib)),
        ],
    );
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    json_of(&perfmodel(dir.path(), &args))
}

/// tract pads a lazy im2col convolution's input into a copy first; that copy, known from tract's code, is the
/// layer's scratch whatever its memory model answers (docs/engine-rules.md). Without padding there is no copy,
/// and the model's answer stands.
#[test]
fn a_lazy_convolutions_padded_copy_stands_instead_of_its_memory_model() {
    let peak = |padding: &str, memory_mib: f64| {
        let net = format!(
            r#"{{"name": "lazy", "input_shape": [2, 8, 8], "layers": [
                {{"name": "b", "type": "conv2d", "filters": 8, "kernel": [3, 3], "padding": "{padding}"}}]}}"#
        );
        estimate_with_conv_memory(&net, memory_mib)["total"]["peak_memory_mib"].as_f64().unwrap()
    };
    // A model that answers less than the tensors, and one that answers a whole MiB.
    let (low, high) = (peak("same", 0.001), peak("same", 1.0));
    assert!(close(low, high), "padded: {low} MiB with the low model, {high} MiB with the high one");
    let (low, high) = (peak("valid", 0.001), peak("valid", 1.0));
    assert!(high > low + 0.9, "unpadded: {low} MiB with the low model, {high} MiB with the high one");
    // The layer's own memory is as measured alone, on the caller's input, wherever it runs: after a layer whose
    // output only it reads (freed after the pad in the network), the same as first.
    let alone = |layers: &str| {
        let net = format!(r#"{{"name": "lazy", "input_shape": [4, 8, 8], "layers": [{layers}]}}"#);
        let v = estimate_with_conv_memory(&net, 0.001);
        v["layers"].as_array().unwrap().iter().find(|l| l["name"] == "b").unwrap()["memory_mib"].as_f64().unwrap()
    };
    let b = r#"{"name": "b", "type": "conv2d", "filters": 8, "kernel": [3, 3], "padding": "same"}"#;
    let a = r#"{"name": "a", "type": "conv2d", "filters": 4, "kernel": [1, 1]}"#;
    let (first, after) = (alone(b), alone(&format!("{a}, {b}")));
    assert!(close(first, after), "b alone: {first} MiB as the first layer, {after} MiB after a");
}

const PROFILE: &str = r#"description = "test device"
executor = "tract"
threads = 1
batch_sizes = [1]
peak_gflops = 2.0
memory_bandwidth_gbs = 4.0
[protocol]
burn_in_runs = 1
repetitions = 1
rounds = 1
group_size = 1
per_sample_timeout_s = 1.0
min_window_ms = 0.0
max_cv = 0.5
"#;

#[test]
fn paleo_equals_its_formula_and_bandwidth_prices_cheap_layers() {
    let dir = setup(TINY);
    std::fs::write(dir.path().join("collectors/dev.toml"), PROFILE).unwrap();
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--method", "paleo", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    assert_eq!(v["method"], "paleo");
    let net = Network::from_json_str(TINY, "tiny.json").unwrap();
    let analysis = net.analyze().unwrap();
    let mut expected = 0.0;
    for (i, layer) in v["layers"].as_array().unwrap().iter().enumerate() {
        let c = analysis.costs[i];
        let formula =
            1e3 * (c.flops as f64 / 2e9 + 4.0 * (c.input_elems + c.weight_elems + c.output_elems) as f64 / 4e9);
        let executes = layer["predictor"] == "paleo";
        let got = layer["latency_ms"].as_f64().unwrap();
        assert!(close(got, if executes { formula } else { 0.0 }), "{layer}");
        expected += got;
    }
    assert!(close(v["total"]["latency_ms"].as_f64().unwrap(), expected));
    assert!(v["uncovered"].as_array().unwrap().is_empty());

    // With the profile's bandwidth, the learned method prices the softmax it has no model for by bytes moved.
    tiny_store(&dir.path().join("models"));
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    let s = &v["layers"][6];
    assert_eq!(s["predictor"], "analytic:bandwidth");
    assert!(close(s["latency_ms"].as_f64().unwrap(), 1e3 * 80.0 / 4e9));
    assert!(v["uncovered"].as_array().unwrap().is_empty());
}

#[test]
fn template_answers_with_the_nearest_measured_sample() {
    let dir = setup(RESIDUAL);
    let data_dir = dir.path().join("data/dev");
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut writer = SampleWriter::open(&file_path(&data_dir, LayerType::Conv2d)).unwrap();
    // Measured 1x1 convs with 8 and 64 filters, and a 3x3 one: the net's 1x1/8 convs must get 0.25 ms, its 3x3
    // conv 0.75 ms.
    let conv = |filters: usize, k: usize, channels: usize, ms: f64| {
        let mut op = serde_json::json!({"type": "conv2d", "filters": filters, "kernel": [k, k], "padding": "same"});
        op["input_shapes"] = serde_json::json!([[channels, 8, 8]]);
        let config = LayerConfig::from_json(&op).unwrap();
        let mut s = perfmodel::data::Sample::unmeasured(&config).unwrap();
        s.latency_ms = Some(ms);
        // 1 MiB of workspace on top of the sample's own tensors and weights.
        s.memory_mib = Some(1.0 + (s.input_bytes + s.weight_bytes + s.output_bytes) as f64 / MIB);
        s.status = Status::Ok;
        s.reason.clear();
        s
    };
    for s in [conv(8, 1, 2, 0.25), conv(64, 1, 2, 9.0), conv(8, 3, 8, 0.75)] {
        writer.append(&s).unwrap();
    }
    drop(writer);
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--method", "template", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    let lat: Vec<Option<f64>> = v["layers"].as_array().unwrap().iter().map(|l| l["latency_ms"].as_f64()).collect();
    assert_eq!(lat, vec![Some(0.25), Some(0.75), Some(0.25), None]);
    assert!(v["layers"][0]["predictor"].as_str().unwrap().starts_with("template:"));
    assert_eq!(v["uncovered"][0]["name"], "sum");
    // The workspace carries over, the tensors are the layer's own: c reads 8x8x8, writes 8x8x8, has 72 weights.
    assert!(close(v["layers"][2]["memory_mib"].as_f64().unwrap(), 1.0 + (512.0 + 512.0 + 72.0) * 4.0 / MIB));
}

#[test]
fn bad_network_names_layer_and_field_with_exit_2() {
    let dir = setup(
        r#"{"name": "bad", "input_shape": [3, 4, 4], "layers": [
            {"name": "ok", "type": "conv2d", "filters": 4, "kernel": [1, 1]},
            {"name": "huge", "type": "conv2d", "filters": 4, "kernel": [9, 9]}]}"#,
    );
    tiny_store(&dir.path().join("models"));
    let mut args = vec!["estimate", "net.json", "--device", "dev"];
    args.extend(DIRS);
    let out = perfmodel(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("net.json") && err.contains("'huge'") && err.contains("'kernel'"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_models_are_a_clear_error() {
    let dir = setup(TINY);
    let mut args = vec!["estimate", "net.json", "--device", "dev"];
    args.extend(DIRS);
    let out = perfmodel(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no trained models for device 'dev'") && err.contains("perfmodel train"), "{err}");
}

#[test]
fn the_directories_are_the_same_before_or_after_the_command() {
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    let after = {
        let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
        args.extend(DIRS);
        json_of(&perfmodel(dir.path(), &args))
    };
    let mut args = DIRS.to_vec();
    args.extend(["estimate", "net.json", "--device", "dev", "--format", "json"]);
    let before = json_of(&perfmodel(dir.path(), &args));
    assert_eq!(before, after);
    assert_eq!(before["layers"][0]["predictor"], "const");
    // Every command takes them, and a directory named wrong is the one the error names.
    let out = perfmodel(dir.path(), &["--models-dir", "elsewhere", "estimate", "net.json", "--device", "dev"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("elsewhere"), "{out:?}");
}

#[test]
fn outliers_from_a_measured_file_are_ranked_by_saving() {
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    // Predictions: c1 2 ms, p 0.5 ms, d 1.29 ms. p measured 4x, d 3x: d saves 2.58 ms, p 1.5 ms.
    let measured = r#"{"tool": "other", "layers": [
        {"name": "c1", "latency_ms": 2.1}, {"name": "p", "latency_ms": 2.0}, {"name": "d", "latency_ms": 3.87},
        {"name": "f", "latency_ms": 0.0}]}"#;
    std::fs::write(dir.path().join("m.json"), measured).unwrap();
    let mut args = vec!["outliers", "net.json", "--device", "dev", "--measured", "m.json", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    let names: Vec<&str> = v["outliers"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["d", "p"], "{v}");
    assert!(close(v["outliers"][0]["saving_ms"].as_f64().unwrap(), 3.87 - 1.29));
    assert!(close(v["outliers"][1]["ratio"].as_f64().unwrap(), 4.0));
    let notes = v["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("no measurement for")), "{notes:?}");

    std::fs::write(dir.path().join("bad.json"), r#"{"layers": [{"name": "zz", "latency_ms": 1}]}"#).unwrap();
    let mut args = vec!["outliers", "net.json", "--device", "dev", "--measured", "bad.json"];
    args.extend(DIRS);
    let out = perfmodel(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'zz'"));
}

#[test]
fn validate_and_outliers_benchmark_the_network_for_real() {
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    std::fs::write(dir.path().join("collectors/dev.toml"), PROFILE).unwrap();
    let mut args = vec!["validate", "net.json", "--device", "dev", "--rounds", "2", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    let n = &v["networks"][0];
    assert_eq!(n["network"], "tiny");
    let (measured, predicted) =
        (n["measured_latency_ms"].as_f64().unwrap(), n["predicted_latency_ms"].as_f64().unwrap());
    assert!(measured > 0.0);
    assert!(close(predicted, 2.0 + 0.5 + 1.29 + 1e3 * 80.0 / 4e9));
    assert!(close(n["latency_error_pct"].as_f64().unwrap(), 100.0 * (predicted - measured) / measured));
    assert!(close(v["median_abs_latency_error_pct"].as_f64().unwrap(), n["latency_error_pct"].as_f64().unwrap().abs()));
    assert!(n["measured_peak_memory_mib"].as_f64().unwrap() > 0.0);
    // The resident part on both sides: tract holds at least the input (3×8×8 f32) and the estimate counts the
    // input and the f32 weights of c1 and d (4×3×3×3 + 4 and 64×10 + 10) of the test store's models.
    let input_mib = (3 * 8 * 8 * 4) as f64 / (1024.0 * 1024.0);
    let weights_mib = ((4 * 27 + 4 + 64 * 10 + 10) * 4) as f64 / (1024.0 * 1024.0);
    assert!(n["measured_resident_memory_mib"].as_f64().unwrap() > input_mib, "{v}");
    assert!(close(n["predicted_resident_memory_mib"].as_f64().unwrap(), input_mib + weights_mib), "{v}");
    // The models carry no nominal speed-probe time: no errors at nominal speed, said on stderr, not an error.
    assert!(v["speed_probe"].is_null() && n["latency_error_at_nominal_pct"].is_null(), "{v}");
    // Each network's memory is measured as in a fresh process: a bigger network run first in the same process
    // (growing tract's per-thread scratch) does not make the tiny one look smaller than `bench` alone finds it.
    std::fs::write(dir.path().join("big.json"), RESIDUAL.replace("[2, 8, 8]", "[2, 64, 64]")).unwrap();
    // This time the models say their latencies hold at a probe time of 2 ms: the probe runs between the rounds
    // and each network's rounds are brought to that speed.
    let manifest_path = dir.path().join("models/dev/manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    manifest["speed_probe"] = serde_json::json!({
        "probe_key": perfmodel::collect::speed::probe_key(), "nominal_ms": 2.0, "probed_rows": 1, "rows": 1,
        "elasticity": perfmodel::collect::speed::PROBE_ELASTICITY
    });
    std::fs::write(&manifest_path, serde_json::to_string(&manifest).unwrap()).unwrap();
    let mut args = vec!["validate", "big.json", "net.json", "--device", "dev", "--rounds", "1", "--format", "json"];
    args.extend(DIRS);
    let mut one_round = args.clone();
    one_round.extend(["--max-rounds", "1"]);
    let both = json_of(&perfmodel(dir.path(), &one_round));
    let probe = &both["speed_probe"];
    assert_eq!(probe["readings"], 4, "before and after each network's round: {both}");
    // Every round is kept with its readings.
    let round = &both["networks"][1]["rounds"][0];
    assert!(round["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{both}");
    assert!(round["probe_before_ms"].as_f64().is_some() && round["probe_after_ms"].as_f64().is_some(), "{both}");
    assert!(close(probe["ratio"].as_f64().unwrap(), probe["median_ms"].as_f64().unwrap() / 2.0), "{both}");
    let tiny = &both["networks"][1];
    // conv2d, max_pool2d and dense follow the probe, the bandwidth-priced cheap layers do not.
    let following = (2.0 + 0.5 + 1.29) / tiny["predicted_latency_ms"].as_f64().unwrap();
    assert!(close(tiny["probe_following_share"].as_f64().unwrap(), following), "{tiny}");
    let at_nominal = tiny["measured_latency_at_nominal_ms"].as_f64().unwrap();
    let predicted = tiny["predicted_latency_ms"].as_f64().unwrap();
    assert!(close(
        tiny["latency_error_at_nominal_pct"].as_f64().unwrap(),
        100.0 * (predicted - at_nominal) / at_nominal
    ));
    assert!(both["median_abs_latency_error_at_nominal_pct"].as_f64().is_some(), "{both}");
    // On one engine thread the rounds and readings are also timed on the thread's CPU clock, which brings
    // the networks to nominal speed; the wall-clock figure is kept next to it.
    assert_eq!(probe["clock"], "cpu", "{both}");
    assert!(probe["cpu_median_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{both}");
    assert!(tiny["measured_cpu_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{tiny}");
    assert!(tiny["latency_error_at_nominal_wall_pct"].as_f64().is_some(), "{tiny}");
    let bench =
        json_of(&perfmodel(dir.path(), &["bench", "net.json", "--rounds", "1", "--device", "dev", "--format", "json"]));
    assert_eq!(both["networks"][1]["network"], "tiny");
    assert_eq!(both["networks"][1]["measured_peak_memory_mib"], bench["total"]["peak_memory_mib"], "{both}\n{bench}");
    // Without --max-rounds, a network with fewer than 10 rounds near nominal runs more turns, up to 3x --rounds
    // (near or not: 3 rounds are too few either way), each with its readings.
    let extended = json_of(&perfmodel(dir.path(), &args));
    for n in extended["networks"].as_array().unwrap() {
        assert_eq!(n["rounds"].as_array().unwrap().len(), 3, "{extended}");
    }
    assert_eq!(extended["speed_probe"]["readings"], 12, "{extended}");

    // A turn of no rounds is a usage error, before anything runs.
    let out = perfmodel(dir.path(), &["validate", "net.json", "--device", "dev", "--block", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--block"));

    let mut args = vec!["outliers", "net.json", "--device", "dev", "--rounds", "2", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    assert_eq!(v["layers"].as_array().unwrap().len(), 7, "{v}");
}

#[test]
fn onnx_networks_are_estimated_like_their_net_json() {
    use prost::Message;
    let dir = setup(TINY);
    tiny_store(&dir.path().join("models"));
    let net = Network::from_json_str(TINY, "tiny.json").unwrap();
    let model = perfmodel::onnx::export_network(&net).unwrap().model;
    std::fs::write(dir.path().join("tiny.onnx"), model.encode_to_vec()).unwrap();
    let run = |file: &str| {
        let mut args = vec!["estimate", file, "--device", "dev", "--format", "json", "--batch", "2"];
        args.extend(DIRS);
        json_of(&perfmodel(dir.path(), &args))
    };
    let (from_json, from_onnx) = (run("net.json"), run("tiny.onnx"));
    assert_eq!(from_onnx["batch_size"], 2);
    for key in ["latency_ms", "energy_mj", "peak_memory_mib"] {
        assert_eq!(from_onnx["total"][key], from_json["total"][key], "{key}");
    }
    // The importer folds the trailing Softmax into the dense layer (Gemm + Softmax = dense with a softmax
    // activation); every other layer comes back as it was exported.
    let (onnx_layers, json_layers) = (from_onnx["layers"].as_array().unwrap(), from_json["layers"].as_array().unwrap());
    assert_eq!(onnx_layers.len(), 6);
    assert_eq!(onnx_layers[..], json_layers[..6]);
}

#[test]
fn a_calibration_fitted_for_these_models_is_applied_and_a_stale_one_is_not() {
    use perfmodel::estimate::calibration::{models_fingerprint, Calibration, CalibrationPoint};
    let dir = setup(TINY);
    // The profile's bandwidth prices the softmax, so every executing layer has a latency.
    std::fs::write(dir.path().join("collectors/dev.toml"), PROFILE).unwrap();
    let models = dir.path().join("models");
    tiny_store(&models);
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    let raw = json_of(&perfmodel(dir.path(), &args));
    assert!(raw["calibration"].is_null(), "{raw}");

    // A calibration of 1.5 x + 0.1 ms per executing layer, +2 MiB + 0.25 MiB per executing layer + 0.5 MiB per
    // weighted one (half of them).
    let point = |name: &str, layers: usize, ms: f64, mib: f64| CalibrationPoint {
        network: name.into(),
        executing_layers: layers,
        weighted_layers: layers / 2,
        measured_latency_ms: 1.5 * ms + 0.1 * layers as f64,
        predicted_latency_ms: ms,
        measured_peak_memory_mib: mib + 2.0 + 0.25 * layers as f64 + 0.5 * (layers / 2) as f64,
        predicted_peak_memory_mib: mib,
        dense_layers: vec![],
        residual_adds: vec![],
        norm_adds: vec![],
        matmul_layers: vec![],
        pixel_convs: vec![],
        input_convs: vec![],
        layout_layers: vec![],
        weight_mib: 100.0,
        touched_mib: 150.0,
    };
    let hash = models_fingerprint(ModelStore::open(&models, "dev").unwrap().manifest());
    let points =
        vec![point("a", 3, 2.0, 1.0), point("b", 30, 50.0, 9.0), point("c", 12, 4.0, 30.0), point("d", 7, 9.0, 5.0)];
    Calibration::fit("dev", "learned", &hash, points, Some(2.0)).unwrap().save(&models).unwrap();
    let v = json_of(&perfmodel(dir.path(), &args));
    let c = &v["calibration"];
    assert!(
        close(c["latency_scale"].as_f64().unwrap(), 1.5) && close(c["latency_per_layer_ms"].as_f64().unwrap(), 0.1)
    );
    let rules_note = format!("older estimator rules (0 of {}", perfmodel::estimate::calibration::ESTIMATOR_RULES);
    assert!(!v["notes"].to_string().contains(&rules_note), "{v}");
    // A calibration written before the estimate's fusion rules were recorded still applies, with a note.
    let path = models.join("dev/calibration.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut old: Value = serde_json::from_str(&text).unwrap();
    old.as_object_mut().unwrap().remove("estimator_rules").unwrap();
    std::fs::write(&path, old.to_string()).unwrap();
    let before_rules = json_of(&perfmodel(dir.path(), &args));
    assert!(before_rules["notes"].to_string().contains(&rules_note), "{before_rules}");
    assert_eq!(before_rules["total"], v["total"]);
    std::fs::write(&path, text).unwrap();
    let executing = ["c1", "p", "d", "s"];
    let (mut total, mut raw_total) = (0.0, 0.0);
    for (layer, before) in v["layers"].as_array().unwrap().iter().zip(raw["layers"].as_array().unwrap()) {
        let (t, t0) = (layer["latency_ms"].as_f64().unwrap(), before["latency_ms"].as_f64().unwrap());
        let name = layer["name"].as_str().unwrap();
        let want = if executing.contains(&name) { 1.5 * t0 + 0.1 } else { t0 };
        assert!(close(t, want), "{name}: {t} vs {want}");
        total += t;
        raw_total += t0;
    }
    assert!(close(v["total"]["latency_ms"].as_f64().unwrap(), total));
    assert!(close(raw["total"]["latency_ms"].as_f64().unwrap(), raw_total));
    let peak = |e: &Value| e["total"]["peak_memory_mib"].as_f64().unwrap();
    // Four executing layers, two of them weighted (c1, d).
    assert!((peak(&v) - (peak(&raw) + 2.0 + 0.25 * 4.0 + 0.5 * 2.0)).abs() < 1e-6, "{} vs {}", peak(&v), peak(&raw));

    // The dense-weights term: the dense layer 'd' also gets 2 ms per MiB of its f32 weights (under the limit),
    // before the scale; with a limit below its weights, nothing, and when its weights exceed the core's cache,
    // nothing in a network of at most `dense_network_min_mib`.
    let inspect = json_of(&perfmodel(dir.path(), &["inspect", "net.json", "--format", "json"]));
    let layer_mib = |l: &Value| l["weight_elems"].as_f64().unwrap() * 4.0 / 1048576.0;
    let network_mib: f64 = inspect["layers"].as_array().unwrap().iter().map(layer_mib).sum();
    let d = inspect["layers"].as_array().unwrap().iter().find(|l| l["name"] == "d").unwrap();
    let d_mib = d["weight_elems"].as_f64().unwrap() * 4.0 / 1048576.0;
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(models.join("dev/calibration.json")).unwrap()).unwrap();
    let d_latency = |limit: f64, cache: f64, network_min: f64| {
        let mut dense = written.clone();
        dense["correction"]["dense_weight_ms_per_mib"] = Value::from(2.0);
        dense["correction"]["dense_weight_limit_mib"] = Value::from(limit);
        dense["correction"]["dense_cache_mib"] = Value::from(cache);
        dense["correction"]["dense_network_min_mib"] = Value::from(network_min);
        std::fs::write(models.join("dev/calibration.json"), dense.to_string()).unwrap();
        let v = json_of(&perfmodel(dir.path(), &args));
        let layers = v["layers"].as_array().unwrap();
        layers.iter().find(|l| l["name"] == "d").unwrap()["latency_ms"].as_f64().unwrap()
    };
    let d_raw = raw["layers"].as_array().unwrap().iter().find(|l| l["name"] == "d").unwrap()["latency_ms"].as_f64();
    let d_raw = d_raw.unwrap();
    let with_term = 1.5 * (d_raw + 2.0 * d_mib) + 0.1;
    assert!(close(d_latency(2.0 * d_mib, 0.0, 0.0), with_term));
    assert!(close(d_latency(2.0 * d_mib, 0.0, 0.9 * network_mib), with_term));
    assert!(close(d_latency(2.0 * d_mib, 0.0, network_mib), 1.5 * d_raw + 0.1));
    assert!(close(d_latency(2.0 * d_mib, d_mib, network_mib), with_term), "within the core's cache");
    assert!(close(d_latency(0.5 * d_mib, 0.0, 0.0), 1.5 * d_raw + 0.1));

    // The input term: the convolution fed by the network's input (c1, 3x8x8 f32) gets +50% of its prediction and
    // 3 ms per MiB of that input, before the scale; no other layer moves.
    let mut input = written.clone();
    input["correction"]["input_conv_extra_fraction"] = Value::from(0.5);
    input["correction"]["input_conv_ms_per_input_mib"] = Value::from(3.0);
    std::fs::write(models.join("dev/calibration.json"), input.to_string()).unwrap();
    let with_input = json_of(&perfmodel(dir.path(), &args));
    let input_mib = (3 * 8 * 8 * 4) as f64 / 1048576.0;
    for (layer, before) in with_input["layers"].as_array().unwrap().iter().zip(v["layers"].as_array().unwrap()) {
        let (t, t0) = (layer["latency_ms"].as_f64().unwrap(), before["latency_ms"].as_f64().unwrap());
        let raw_c1 = raw["layers"][0]["latency_ms"].as_f64().unwrap();
        let want = if layer["name"] == "c1" { 1.5 * (1.5 * raw_c1 + 3.0 * input_mib) + 0.1 } else { t0 };
        assert!(close(t, want), "{}: {t} vs {want}", layer["name"]);
    }
    std::fs::write(models.join("dev/calibration.json"), written.to_string()).unwrap();

    // --uncalibrated gives the raw sums back.
    let mut uncalibrated = args.clone();
    uncalibrated.push("--uncalibrated");
    let u = json_of(&perfmodel(dir.path(), &uncalibrated));
    assert!(u["calibration"].is_null() && close(u["total"]["latency_ms"].as_f64().unwrap(), raw_total));

    // Retrained models (another data hash): the calibration is not applied, and a note says why.
    let mut stale: Value =
        serde_json::from_str(&std::fs::read_to_string(models.join("dev/calibration.json")).unwrap()).unwrap();
    stale["models_fingerprint"] = Value::from("something else");
    std::fs::write(models.join("dev/calibration.json"), stale.to_string()).unwrap();
    let s = json_of(&perfmodel(dir.path(), &args));
    assert!(s["calibration"].is_null() && close(s["total"]["latency_ms"].as_f64().unwrap(), raw_total));
    let notes = s["notes"].to_string();
    assert!(notes.contains("calibration.json") && notes.contains("perfmodel calibrate"), "{notes}");

    // A calibration an older perfmodel wrote (another format): not applied, a note says so, and calibrate can
    // replace it.
    let mut old: Value =
        serde_json::from_str(&std::fs::read_to_string(models.join("dev/calibration.json")).unwrap()).unwrap();
    old["format_version"] = Value::from(1);
    std::fs::write(models.join("dev/calibration.json"), old.to_string()).unwrap();
    let o = json_of(&perfmodel(dir.path(), &args));
    assert!(o["calibration"].is_null() && close(o["total"]["latency_ms"].as_f64().unwrap(), raw_total));
    assert!(o["notes"].to_string().contains("format 1"), "{}", o["notes"]);

    // A corrupt calibration file is an error naming it, not a silently uncalibrated answer.
    std::fs::write(models.join("dev/calibration.json"), "{").unwrap();
    let out = perfmodel(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("calibration.json"));
}

/// `dir/collectors/DEVICE.toml`: the shipped profile without its machine's fingerprint, so that a test of what
/// calibrate computes runs on any machine (collecting and calibrating refuse a profile of another machine).
fn profile_for_any_machine(dir: &Path, device: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut profile = perfmodel::collect::DeviceProfile::load(&root.join("collectors"), device).unwrap();
    profile.fingerprint = None;
    std::fs::create_dir_all(dir.join("collectors")).unwrap();
    std::fs::write(dir.join("collectors").join(format!("{device}.toml")), profile.to_toml().unwrap()).unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// A temporary directory where `calibrate` can run: the shipped models of a device measured on this machine if
/// there is one (else `local`'s), copied without their calibration (calibrate writes next to them), a profile
/// any machine may use, and four of the zoo's training architectures (the holdout is for validation).
struct CalibrateSetup {
    dir: tempfile::TempDir,
    device: String,
    trained_here: bool,
    models: std::path::PathBuf,
    nets: Vec<String>,
}

impl CalibrateSetup {
    fn new() -> CalibrateSetup {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        // Only tract's stores record a machine: the engine structure checked below is measured with tract.
        let trained_here = perfmodel::train::store::devices_trained_here(&root.join("models"));
        let device = trained_here.first().map_or("local", String::as_str).to_string();
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models").join(&device);
        copy_tree(&root.join("models").join(&device), &models);
        let _ = std::fs::remove_file(models.join("calibration.json"));
        let nets: Vec<String> =
            ["zoo/mnist_mlp.json", "zoo/tabular_mlp.json", "zoo/squeezenet.json", "zoo/mobilenetv3small.json"]
                .iter()
                .map(|n| root.join(n).to_string_lossy().into_owned())
                .collect();
        profile_for_any_machine(dir.path(), &device);
        CalibrateSetup { dir, device, trained_here: !trained_here.is_empty(), models, nets }
    }

    /// `calibrate` of the four networks, one round each without warm-up.
    fn args(&self) -> Vec<&str> {
        let mut args = vec![
            "calibrate",
            "--device",
            &self.device,
            "--models-dir",
            "models",
            "--collectors-dir",
            "collectors",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ];
        if !self.trained_here {
            args.push("--allow-other-machine");
        }
        args.extend(self.nets.iter().map(String::as_str));
        args
    }
}

/// With ONNX Runtime's rules a convolution whose activation the engine runs as a node of its own (swish after a
/// blocked convolution) is predicted as those two nodes: the same time as the convolution without it followed
/// by the activation as a layer; a convolution whose activation ONNX Runtime fuses (ReLU) is predicted whole.
#[test]
fn onnxruntime_estimates_an_activation_it_runs_apart_as_its_own_node() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let net = |layers: &str| format!(r#"{{"name": "n", "input_shape": [32, 56, 56], "layers": [{layers}]}}"#);
    let conv = |activation: &str| {
        format!(r#"{{"name": "c", "type": "conv2d", "filters": 64, "kernel": [1, 1], "activation": "{activation}"}}"#)
    };
    std::fs::write(dir.path().join("fused.json"), net(&conv("swish"))).unwrap();
    let apart = format!(r#"{}, {{"name": "s", "type": "activation", "function": "swish"}}"#, conv("linear"));
    std::fs::write(dir.path().join("apart.json"), net(&apart)).unwrap();
    std::fs::write(dir.path().join("relu.json"), net(&conv("relu"))).unwrap();
    let total = |file: &str| {
        let models = root.join("models");
        let args = ["estimate", file, "--device", "zen4-ort", "--uncalibrated", "--format", "json", "--models-dir"];
        let v = json_of(&perfmodel(dir.path(), &[&args[..], &[models.to_str().unwrap()]].concat()));
        v["total"]["latency_ms"].as_f64().unwrap()
    };
    let (fused, apart) = (total("fused.json"), total("apart.json"));
    assert!(close(fused, apart), "{fused} against {apart}");
    // A ReLU runs inside the convolution: the configuration is predicted whole, not as the sum of two nodes.
    let linear = net(&conv("linear"));
    std::fs::write(dir.path().join("linear.json"), linear).unwrap();
    // The ReLU on the convolution's output, [64, 56, 56].
    let relu_alone =
        net(r#"{"name": "r", "type": "activation", "function": "relu"}"#).replace("[32, 56, 56]", "[64, 56, 56]");
    std::fs::write(dir.path().join("relu_alone.json"), relu_alone).unwrap();
    let sum = total("linear.json") + total("relu_alone.json");
    assert!(!close(total("relu.json"), sum), "{sum}");
}

/// `calibrate --refit` runs nothing: it estimates the recorded networks anew with the device's models and fits
/// the recorded measurements, which it keeps (same models, same machine: the same fit). A calibration it cannot
/// refit (none, a network the zoo does not have, models describing another machine's engine without
/// --allow-other-machine) is refused with exit code 2 and left as it was.
#[test]
fn calibrate_refit_fits_the_recorded_measurements_without_running_anything() {
    let setup = CalibrateSetup::new();
    let (dir, device, models) = (&setup.dir, setup.device.as_str(), &setup.models);
    let mut args = setup.args();
    args.extend(["--format", "json"]);
    let calibrated = json_of(&perfmodel(dir.path(), &args));
    let mut refit_args =
        vec!["calibrate", "--refit", "--device", device, "--models-dir", "models", "--collectors-dir", "collectors"];
    if !setup.trained_here {
        refit_args.push("--allow-other-machine");
    }
    refit_args.extend(["--format", "json"]);
    let refit = || perfmodel(dir.path(), &refit_args);
    let first = json_of(&refit());
    assert_eq!(first["measured"], calibrated["created"], "{first}");
    for field in ["correction", "networks", "models_fingerprint", "engine_structure", "machine_speed_ratio"] {
        assert_eq!(first[field], calibrated[field], "{field}");
    }
    // The fit follows the recorded measurements: a MiB more measured in every network, a larger memory term.
    let mut more = first.clone();
    for n in more["networks"].as_array_mut().unwrap() {
        n["measured_peak_memory_mib"] = (n["measured_peak_memory_mib"].as_f64().unwrap() + 1.0).into();
    }
    std::fs::write(models.join("calibration.json"), serde_json::to_vec_pretty(&more).unwrap()).unwrap();
    let second = json_of(&refit());
    let fixed = |v: &Value| v["correction"]["memory_fixed_mib"].as_f64().unwrap();
    assert!(fixed(&second) > fixed(&first) + 0.5, "{} then {}", fixed(&first), fixed(&second));
    assert_eq!(second["measured"], calibrated["created"], "still dated by the runs");
    // A network the zoo does not have: refused by name, the file untouched.
    let mut foreign = second.clone();
    foreign["networks"][0]["network"] = "not_in_the_zoo".into();
    let text = serde_json::to_vec_pretty(&foreign).unwrap();
    std::fs::write(models.join("calibration.json"), &text).unwrap();
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = refit();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'not_in_the_zoo'"), "{}", stderr(&out));
    assert_eq!(std::fs::read(models.join("calibration.json")).unwrap(), text);
    // No calibration at all.
    std::fs::remove_file(models.join("calibration.json")).unwrap();
    let out = refit();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no calibration"), "{}", stderr(&out));
    // Models describing the engine of a machine that is not this one (xeon480's or zen4's; their caches differ).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let here = perfmodel::train::store::devices_trained_here(&root.join("models"));
    let other = ["xeon480", "zen4"].into_iter().find(|d| !here.iter().any(|h| h == d)).unwrap();
    let other_models = dir.path().join("models").join(other);
    copy_tree(&root.join("models").join(other), &other_models);
    let before = std::fs::read(other_models.join("calibration.json")).unwrap();
    let out = perfmodel(dir.path(), &["calibrate", "--refit", "--device", other, "--models-dir", "models"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--allow-other-machine"), "{}", stderr(&out));
    assert_eq!(std::fs::read(other_models.join("calibration.json")).unwrap(), before);
}

#[test]
fn calibrate_runs_the_networks_and_fits_the_shipped_models() {
    let setup = CalibrateSetup::new();
    let (dir, device, models, nets) = (&setup.dir, setup.device.as_str(), &setup.models, &setup.nets);
    let trained_here = setup.trained_here;
    let mut args = setup.args();
    args.extend(["--format", "json"]);
    let v = json_of(&perfmodel(dir.path(), &args));
    let networks = v["networks"].as_array().unwrap();
    assert_eq!(networks.len(), 4);
    for n in networks {
        assert!(n["measured_latency_ms"].as_f64().unwrap() > 0.0 && n["executing_layers"].as_u64().unwrap() > 0);
    }
    // By default no whole-network latency terms (they would learn the machine's drift); the dense layers' own
    // times are kept for the dense-weights term (mnist_mlp has three, tabular_mlp five).
    assert_eq!(v["network_latency"], false, "{v}");
    assert_eq!(
        (v["correction"]["latency_scale"].as_f64(), v["correction"]["latency_per_layer_ms"].as_f64()),
        (Some(1.0), Some(0.0))
    );
    let dense: Vec<&Value> = networks.iter().flat_map(|n| n["dense_layers"].as_array().unwrap()).collect();
    assert_eq!(dense.len(), 8, "{v}");
    for d in &dense {
        assert!(d["measured_ms"].as_f64().unwrap() > 0.0 && d["weight_mib"].as_f64().unwrap() > 0.0, "{d}");
    }
    let fields =
        ["dense_weight_ms_per_mib", "dense_weight_floor_mib", "dense_weight_limit_mib", "dense_network_min_mib"];
    for field in fields.into_iter().chain(["dense_cache_mib"]) {
        assert!(v["correction"][field].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0), "{field}: {v}");
    }
    // The shipped models carry the nominal speed-probe time of their data: the probe ran between the rounds,
    // unless that time is another machine's.
    match trained_here {
        true => assert!(v["machine_speed_ratio"].as_f64().unwrap() > 0.0, "{v}"),
        false => assert!(v["machine_speed_ratio"].is_null(), "{v}"),
    }
    assert!(models.join("calibration.json").is_file());
    let estimate = json_of(&perfmodel(
        dir.path(),
        &["estimate", &nets[0], "--device", device, "--models-dir", "models", "--format", "json"],
    ));
    assert_eq!(estimate["calibration"], v["correction"]);
    // For models of this machine the engine's per-layer structure is measured (probe networks built with
    // tract), kept in the calibration and counted as resident by the estimates it applies to.
    if !trained_here {
        assert!(v["engine_structure"].is_null(), "{v}");
    } else {
        let kinds = v["engine_structure"]["bytes_per_layer"].as_object().unwrap();
        for kind in ["conv2d:lazy", "conv2d:pointwise-grouped", "depthwise_conv2d", "dense"] {
            let bytes = kinds.get(kind).and_then(Value::as_f64).unwrap_or_else(|| panic!("no {kind} in {kinds:?}"));
            assert!((2048.0..65536.0).contains(&bytes), "{kind}: {bytes} bytes per layer: {v}");
        }
        let raw = json_of(&perfmodel(
            dir.path(),
            &["estimate", &nets[0], "--device", device, "--models-dir", "models", "--uncalibrated", "--format", "json"],
        ));
        let resident = |e: &Value| e["total"]["resident_memory_mib"].as_f64().unwrap();
        // mnist_mlp: three dense layers, two computing a ReLU (fused into their product) and the last a softmax
        // (a node of its own); the dropouts are free. Resident memory is whole bytes.
        let kind = |k: &str| kinds[k].as_f64().unwrap() / (1024.0 * 1024.0);
        let structure_mib = 3.0 * kind("dense") + 2.0 * kind("fused") + kind("activation");
        let byte = 1.0 / (1024.0 * 1024.0);
        assert!((resident(&estimate) - resident(&raw) - structure_mib).abs() <= byte, "{estimate} vs {raw}");
    }

    // Fewer than four networks cannot be fitted: a clear error, and nothing written over the existing file.
    let before = std::fs::read_to_string(models.join("calibration.json")).unwrap();
    let out = perfmodel(dir.path(), &["calibrate", "--device", device, "--models-dir", "models", &nets[0]]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 4 networks"));
    assert_eq!(std::fs::read_to_string(models.join("calibration.json")).unwrap(), before);
}

/// `kill -9` at points all along a `calibrate` run, the save included: the calibration file is every time either
/// the one before the run or a complete new one that `estimate` applies, never a torn or half-written file.
#[test]
fn a_calibrate_killed_at_any_moment_leaves_the_previous_calibration_or_a_complete_new_one() {
    let setup = CalibrateSetup::new();
    let (dir, device, models, nets) = (&setup.dir, setup.device.as_str(), &setup.models, &setup.nets);
    let args = setup.args();
    let calibration = || std::fs::read(models.join("calibration.json")).unwrap();
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut previous = calibration();
    // The shortest of two complete runs: a run killed at a tenth of it is surely still measuring.
    let mut full = std::time::Duration::MAX;
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let out = perfmodel(dir.path(), &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        full = full.min(started.elapsed());
    }
    assert_ne!(calibration(), previous, "two calibrations differ (their times at least)");
    previous = calibration();
    let applied = |bytes: &[u8]| {
        let written: Value = serde_json::from_slice(bytes).expect("the calibration file is whole JSON");
        let estimate = json_of(&perfmodel(
            dir.path(),
            &["estimate", &nets[0], "--device", device, "--models-dir", "models", "--format", "json"],
        ));
        assert_eq!(estimate["calibration"], written["correction"], "the estimate applies the calibration file");
    };
    for fraction in [0.1, 0.3, 0.5, 0.7, 0.85, 0.9, 0.95, 0.98, 1.0, 1.05] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_perfmodel"))
            .current_dir(dir.path())
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(fraction));
        let running = child.try_wait().unwrap().is_none();
        let _ = child.kill(); // SIGKILL on Unix
        let _ = child.wait();
        let now = calibration();
        // Either untouched, or the killed run had renamed its complete file into place; early in a run (long
        // before its save) untouched.
        applied(&now);
        if fraction <= 0.1 {
            assert!(running, "a calibrate was done at {fraction} of the shortest run");
            assert!(now == previous, "a calibrate killed at {fraction} of its run changed the calibration");
        }
        previous = now;
    }
}

#[test]
fn calibrate_by_default_runs_the_zoo_and_its_calibration_networks_never_the_holdout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&root.join("models/local"), &dir.path().join("models/local"));
    let zoo = dir.path().join("zoo");
    for (from, to) in [
        ("zoo/mnist_mlp.json", "mnist_mlp.json"),
        ("zoo/tabular_mlp.json", "tabular_mlp.json"),
        ("zoo/calibration/mlp_800.json", "calibration/mlp_800.json"),
        ("zoo/calibration/dqn_2013.json", "calibration/dqn_2013.json"),
        ("zoo/holdout/mnist_cnn.json", "holdout/mnist_cnn.json"),
    ] {
        std::fs::create_dir_all(zoo.join(to).parent().unwrap()).unwrap();
        std::fs::copy(root.join(from), zoo.join(to)).unwrap();
    }
    // The sampled configs sit beside the architectures and are not a network.
    std::fs::write(zoo.join("configs.json"), "{\"configs\": []}").unwrap();
    profile_for_any_machine(dir.path(), "local");
    let mut args = vec![
        "calibrate",
        "--device",
        "local",
        "--models-dir",
        "models",
        "--collectors-dir",
        "collectors",
        "--zoo-dir",
        "zoo",
        "--memory-only",
    ];
    // On a machine other than the one `local` was trained on, calibrating it is refused unless asked for, and
    // nothing is written.
    let models = dir.path().join("models");
    if perfmodel::train::ModelStore::open(&models, "local").unwrap().trained_elsewhere().is_some() {
        let before = std::fs::read(models.join("local/calibration.json")).unwrap();
        let out = perfmodel(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("trained on another machine") && err.contains("--allow-other-machine"), "{err}");
        assert_eq!(std::fs::read(models.join("local/calibration.json")).unwrap(), before);
        args.push("--allow-other-machine");
    }
    let v = json_of(&perfmodel(dir.path(), &[&args[..], &["--format", "json"]].concat()));
    let mut ran: Vec<&str> = v["networks"].as_array().unwrap().iter().map(|n| n["network"].as_str().unwrap()).collect();
    ran.sort();
    assert_eq!(ran, ["dqn_2013", "mlp_800", "mnist_mlp", "tabular_mlp"], "{v}");
}

#[test]
fn a_concat_only_one_by_one_convolutions_read_is_never_built_with_the_shipped_tract_models() {
    // A fire module twice: the first concat feeds only a 1x1 convolution (through a dropout), which tract splits
    // into one product per part, so the concat is never computed; the second also feeds a pool and is built.
    let net = r#"{"name": "fire", "batch_size": 1, "input_shape": [64, 55, 55], "layers": [
      {"name": "e1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu"},
      {"name": "e3", "type": "conv2d", "filters": 64, "kernel": [3,3], "padding": "same", "activation": "relu",
       "inputs": ["input"]},
      {"name": "cat", "type": "concat", "axis": 0, "inputs": ["e1", "e3"]},
      {"name": "drop", "type": "dropout", "rate": 0.5},
      {"name": "squeeze", "type": "conv2d", "filters": 16, "kernel": [1,1], "activation": "relu"},
      {"name": "f1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu"},
      {"name": "f3", "type": "conv2d", "filters": 64, "kernel": [3,3], "padding": "same", "activation": "relu",
       "inputs": ["squeeze"]},
      {"name": "cat2", "type": "concat", "axis": 0, "inputs": ["f1", "f3"]},
      {"name": "pool", "type": "max_pool2d", "pool_size": [2,2]},
      {"name": "squeeze2", "type": "conv2d", "filters": 16, "kernel": [1,1], "inputs": ["cat2"]},
      {"name": "sum", "type": "add", "inputs": ["squeeze2", "squeeze2"]}]}"#;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fire.json"), net).unwrap();
    let models = root.join("models").to_string_lossy().into_owned();
    let args = ["estimate", "fire.json", "--device", "local", "--models-dir", &models, "--uncalibrated"];
    let v = json_of(&perfmodel(dir.path(), &[&args[..], &["--format", "json"]].concat()));
    let layer = |name: &str| v["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    assert_eq!(layer("cat")["predictor"], "fused:squeeze", "{v}");
    assert_eq!((layer("cat")["latency_ms"].as_f64(), layer("cat")["in_use_mib"].clone()), (Some(0.0), Value::Null));
    assert_ne!(layer("cat2")["predictor"], "fused:squeeze2", "a pool reads cat2: {v}");
    assert!(layer("cat2")["latency_ms"].as_f64().unwrap() > 0.0);
    // Both parts of the unbuilt concat (0.74 MiB each) are alive while the squeeze runs.
    let part_mib = 64.0 * 55.0 * 55.0 * 4.0 / (1024.0 * 1024.0);
    let squeeze = layer("squeeze")["in_use_mib"].as_f64().unwrap();
    assert!(squeeze > 2.0 * part_mib, "{squeeze} MiB in use at the squeeze: {v}");
    // As tract runs it: no node computes cat, a Concat node computes cat2.
    let bench = ["bench", "fire.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "trace.csv"];
    assert!(perfmodel(dir.path(), &bench).status.success());
    let trace = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let ops_of = |layer: &str| -> Vec<String> {
        let cells = |l: &str| l.split(',').map(str::to_string).collect::<Vec<_>>();
        trace.lines().map(cells).filter(|c| c[2] == layer).map(|c| c[1].clone()).collect()
    };
    assert!(ops_of("cat").is_empty() && ops_of("cat2") == ["Concat"], "{trace}");
    // Both squeezes run one product per part of their concat, built or not, as the estimate counts them.
    for squeeze in ["squeeze", "squeeze2"] {
        let products = ops_of(squeeze).iter().filter(|op| *op == "OptMatMul").count();
        assert_eq!(products, 2, "{squeeze}: {trace}");
    }
    // The paleo baseline models no engine: there the concat runs.
    let paleo = json_of(&perfmodel(
        dir.path(),
        &[
            "estimate",
            "fire.json",
            "--device",
            "local",
            "--models-dir",
            &models,
            "--method",
            "paleo",
            "--format",
            "json",
        ],
    ));
    let cat = paleo["layers"].as_array().unwrap().iter().find(|l| l["name"] == "cat").unwrap();
    assert_ne!(cat["predictor"], "fused:squeeze", "{paleo}");
}

#[test]
fn a_residual_add_runs_inside_a_convolution_where_tract_puts_it_with_the_shipped_tract_models() {
    // ResNet v1 blocks of 1x1 convolutions. a_: a projection block (a convolution and its batch norm on each side
    // of the add, then a ReLU): tract takes the add and the ReLU into the product of the one computed first. b_
    // and d_: identity blocks (the other side is the previous block's output) with a ReLU after the add, which
    // tract runs as one element-wise chain. c_: an identity block without that ReLU (as in ResNet v2): the add
    // joins the product of its convolution. e_: the other side is a max pooling, whose output is no product's.
    let proj = |p: &str, src: &str, groups: usize| {
        format!(
            r#"{{"name": "{p}c0", "type": "conv2d", "filters": 256, "kernel": [1,1], "groups": {groups}, "inputs": ["{src}"]}},
              {{"name": "{p}bn0", "type": "batch_norm"}},
              {{"name": "{p}c1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu", "inputs": ["{src}"]}},
              {{"name": "{p}c3", "type": "conv2d", "filters": 256, "kernel": [1,1], "groups": {groups}}},
              {{"name": "{p}bn3", "type": "batch_norm"}},
              {{"name": "{p}add", "type": "add", "inputs": ["{p}bn0", "{p}bn3"]}},
              {{"name": "{p}out", "type": "activation", "function": "relu"}}"#
        )
    };
    let ident = |p: &str, src: &str, relu: bool| {
        let out = if relu {
            format!(r#", {{"name": "{p}out", "type": "activation", "function": "relu"}}"#)
        } else {
            String::new()
        };
        format!(
            r#"{{"name": "{p}c1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu", "inputs": ["{src}"]}},
              {{"name": "{p}c3", "type": "conv2d", "filters": 256, "kernel": [1,1]}},
              {{"name": "{p}bn3", "type": "batch_norm"}},
              {{"name": "{p}add", "type": "add", "inputs": ["{src}", "{p}bn3"]}}{out}"#
        )
    };
    let pooled = r#"{"name": "e_pool", "type": "max_pool2d", "pool_size": [3,3], "strides": [1,1], "padding": "same", "inputs": ["d_out"]},
              {"name": "e_c3", "type": "conv2d", "filters": 256, "kernel": [1,1], "inputs": ["d_out"]},
              {"name": "e_bn3", "type": "batch_norm"},
              {"name": "e_add", "type": "add", "inputs": ["e_pool", "e_bn3"]},
              {"name": "e_c", "type": "conv2d", "filters": 64, "kernel": [1,1]}"#;
    // As PyTorch exports ResNet v1 (batch norms folded, the add written (residual, shortcut)): f_, an identity
    // block, and g_, a projection block, both with a ReLU after the add. tract takes the add and the ReLU into
    // the product of the add's first input: f_c3, and g_c3 although g_c0 is computed first.
    let torch = r#"{"name": "f_c1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu", "inputs": ["d_out"]},
              {"name": "f_c3", "type": "conv2d", "filters": 256, "kernel": [1,1]},
              {"name": "f_add", "type": "add", "inputs": ["f_c3", "d_out"]},
              {"name": "f_out", "type": "activation", "function": "relu"},
              {"name": "g_c0", "type": "conv2d", "filters": 256, "kernel": [1,1], "inputs": ["f_out"]},
              {"name": "g_c1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu", "inputs": ["f_out"]},
              {"name": "g_c3", "type": "conv2d", "filters": 256, "kernel": [1,1]},
              {"name": "g_add", "type": "add", "inputs": ["g_c3", "g_c0"]},
              {"name": "g_out", "type": "activation", "function": "relu"},
              {"name": "g_c", "type": "conv2d", "filters": 64, "kernel": [1,1]}"#;
    // A k×k convolution ends in a reshape of its own: h_, ResNet-18's block (a 3x3 convolution first), runs add
    // and ReLU as a chain; i_, a 1x1 convolution's add of a 3x3 convolution's output, a node of its own.
    let spatial = r#"{"name": "h_c1", "type": "conv2d", "filters": 64, "kernel": [1,1], "activation": "relu", "inputs": ["g_out"]},
              {"name": "h_c3", "type": "conv2d", "filters": 256, "kernel": [3,3], "padding": "same"},
              {"name": "h_add", "type": "add", "inputs": ["h_c3", "g_out"]},
              {"name": "h_out", "type": "activation", "function": "relu"},
              {"name": "i_s", "type": "conv2d", "filters": 256, "kernel": [3,3], "padding": "same"},
              {"name": "i_p", "type": "conv2d", "filters": 256, "kernel": [1,1]},
              {"name": "i_add", "type": "add", "inputs": ["i_p", "i_s"]},
              {"name": "i_c", "type": "conv2d", "filters": 64, "kernel": [1,1]}"#;
    let net = |groups: usize| {
        format!(
            r#"{{"name": "res", "batch_size": 1, "input_shape": [64, 28, 28], "layers": [{}, {}, {}, {}, {}, {}, {}]}}"#,
            proj("a_", "input", groups),
            ident("b_", "a_out", true),
            ident("c_", "b_out", false),
            ident("d_", "c_add", true),
            pooled,
            torch,
            spatial
        )
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("res.json"), net(1)).unwrap();
    std::fs::write(dir.path().join("grouped.json"), net(2)).unwrap();
    let models = root.join("models").to_string_lossy().into_owned();
    let estimate = |net: &str| {
        let args =
            ["estimate", net, "--device", "local", "--models-dir", &models, "--uncalibrated", "--format", "json"];
        json_of(&perfmodel(dir.path(), &args))
    };
    let layer =
        |v: &Value, name: &str| v["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    let predictor = |v: &Value, name: &str| layer(v, name)["predictor"].as_str().unwrap().to_string();
    let ms = |v: &Value, name: &str| layer(v, name)["latency_ms"].as_f64().unwrap();
    let (res, grouped) = (estimate("res.json"), estimate("grouped.json"));
    assert_eq!(
        (predictor(&res, "a_add"), predictor(&res, "c_add")),
        ("fused:a_c0".into(), "fused:c_c3".into()),
        "{res}"
    );
    assert!(predictor(&res, "a_c0").ends_with("+add:a_add") && predictor(&res, "c_c3").ends_with("+add:c_add"));
    for add in ["b_add", "d_add", "e_add"] {
        assert!(!predictor(&res, add).starts_with("fused") && ms(&res, add) > 0.0, "{add}: {res}");
    }
    // The ReLU that reads a_add alone runs in a_c0's product as well (tract's trace below); b_out does not.
    assert_eq!(predictor(&res, "a_out"), "fused:a_c0", "{res}");
    assert!(!predictor(&res, "b_out").starts_with("fused"), "{res}");
    // The add's prediction moves into a_c0, whose product is otherwise a_c3's (the same convolution); b_add has
    // the same two inputs.
    assert!((ms(&res, "a_c0") - ms(&res, "a_c3") - ms(&res, "b_add")).abs() < 1e-9, "{res}");
    // A grouped convolution is not one product.
    assert!(!predictor(&grouped, "a_add").starts_with("fused"), "{grouped}");
    // As tract runs it: no node of the fused adds' own, and a_add's ReLU is in a_c0's product too; b_add runs
    // in b_out's element-wise chain, e_add in a node of its own.
    let bench = ["bench", "res.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "trace.csv"];
    assert!(perfmodel(dir.path(), &bench).status.success());
    let trace = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let nodes = |layer: &str| -> Vec<(String, String)> {
        trace
            .lines()
            .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
            .filter(|c| c[2] == layer)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect()
    };
    assert!(nodes("a_add").is_empty() && nodes("a_out").is_empty() && nodes("c_add").is_empty(), "{trace}");
    assert!(nodes("a_c0").iter().any(|(name, op)| name.starts_with("a_out") && op == "OptMatMul"), "{trace}");
    assert!(nodes("c_c3").iter().any(|(name, op)| name.starts_with("c_add") && op == "OptMatMul"), "{trace}");
    assert!(nodes("b_out").iter().any(|(_, op)| op.contains("BinChain")), "{trace}");
    assert!(!nodes("e_add").is_empty(), "{trace}");
    // PyTorch's order: the add and its ReLU in the first input's product, in the trace and in the estimate.
    for (block, conv) in [("f_", "f_c3"), ("g_", "g_c3")] {
        let (add, out) = (format!("{block}add"), format!("{block}out"));
        assert!(nodes(&add).is_empty() && nodes(&out).is_empty(), "{trace}");
        assert!(nodes(conv).iter().any(|(name, op)| name.starts_with(&out) && op == "OptMatMul"), "{trace}");
        assert_eq!((predictor(&res, &add), predictor(&res, &out)), (format!("fused:{conv}"), format!("fused:{conv}")));
        assert!(predictor(&res, conv).ends_with(&format!("+add:{add}")), "{res}");
    }
    assert!(nodes("h_out").iter().any(|(_, op)| op.contains("BinChain")), "{trace}");
    assert!(nodes("i_add").iter().any(|(_, op)| op == "OptAddUnicast"), "{trace}");
    assert!(!nodes("i_p").iter().any(|(name, _)| name.starts_with("i_add")), "{trace}");
    for layer in ["h_add", "h_out", "i_add"] {
        assert!(!predictor(&res, layer).starts_with("fused"), "{layer}: {res}");
    }
}

#[test]
fn only_an_ungrouped_product_takes_in_the_batch_norm_and_activation_after_it_with_the_shipped_tract_models() {
    // tract folds a batch norm and an activation into one matrix product's output; a depthwise or grouped
    // convolution is not one product, and there they run as nodes of their own.
    let net = r#"{"name": "mobile", "batch_size": 1, "input_shape": [32, 28, 28], "layers": [
      {"name": "dw", "type": "depthwise_conv2d", "kernel": [3,3], "padding": "same", "use_bias": false},
      {"name": "dw_bn", "type": "batch_norm"},
      {"name": "dw_relu", "type": "activation", "function": "relu6"},
      {"name": "pw", "type": "conv2d", "filters": 64, "kernel": [1,1], "use_bias": false},
      {"name": "pw_bn", "type": "batch_norm"},
      {"name": "pw_relu", "type": "activation", "function": "relu6"},
      {"name": "g", "type": "conv2d", "filters": 64, "kernel": [1,1], "groups": 4, "use_bias": false},
      {"name": "g_bn", "type": "batch_norm"},
      {"name": "g_relu", "type": "activation", "function": "relu"}]}"#;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mobile.json"), net).unwrap();
    let models = root.join("models").to_string_lossy().into_owned();
    let estimate = |method: &str| {
        let args = [
            "estimate",
            "mobile.json",
            "--device",
            "local",
            "--models-dir",
            &models,
            "--method",
            method,
            "--format",
            "json",
        ];
        json_of(&perfmodel(dir.path(), &args))
    };
    let predictor = |v: &Value, name: &str| {
        v["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap()["predictor"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let learned = estimate("learned");
    assert_eq!((predictor(&learned, "pw_bn"), predictor(&learned, "pw_relu")), ("fused:pw".into(), "fused:pw".into()));
    for name in ["dw_bn", "dw_relu", "g_bn", "g_relu"] {
        assert!(!predictor(&learned, name).starts_with("fused"), "{name}: {learned}");
    }
    // The paleo baseline models no engine: every kernel takes in what follows it.
    let paleo = estimate("paleo");
    assert_eq!(predictor(&paleo, "dw_relu"), "fused:dw");
    assert_eq!(predictor(&paleo, "g_relu"), "fused:g");
    // As tract runs it: the depthwise and grouped convolutions' batch norms and activations have nodes.
    let bench = ["bench", "mobile.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "trace.csv"];
    assert!(perfmodel(dir.path(), &bench).status.success());
    let trace = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let has_node = |layer: &str| trace.lines().any(|l| l.split(',').nth(2) == Some(layer));
    assert!(has_node("dw_relu") && has_node("g_relu"), "{trace}");
    assert!(!has_node("pw_bn") && !has_node("pw_relu"), "{trace}");
}

#[test]
fn models_that_asked_another_machines_engine_say_so() {
    use perfmodel::train::model::EngineFeatures;
    let names = LayerType::Conv2d.feature_names();
    let here = EngineFeatures::for_layer(LayerType::Conv2d, &names).unwrap();
    let elsewhere = EngineFeatures { isa: "tract-linalg 0.23.9 OtherCpu".into(), ..here.clone() };
    let other_caches = EngineFeatures { caches: "L2 1048576 B (shared by 1), last level none".into(), ..here.clone() };
    assert!(here.applies() && !elsewhere.applies() && !other_caches.applies());
    let store = |engine: EngineFeatures| {
        vec![
            (LayerType::Conv2d, Metric::Latency, constant(2.0).with_engine_features(Some(engine))),
            (LayerType::MaxPool2d, Metric::Latency, constant(0.5)),
            (LayerType::Dense, Metric::Latency, constant(1.29)),
        ]
    };
    // With `mine` beside `dev`: a device whose models were trained here.
    let estimate_with = |engine: EngineFeatures, mine: bool| {
        let dir = setup(TINY);
        write_store(&dir.path().join("models"), "dev", store(engine));
        if mine {
            write_store(&dir.path().join("models"), "mine", store(here.clone()));
        }
        let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
        args.extend(DIRS);
        json_of(&perfmodel(dir.path(), &args))
    };
    let estimate = |engine: EngineFeatures| estimate_with(engine, false);
    let notes = |v: &Value| -> Vec<String> {
        v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
    };
    let other = estimate(elsewhere.clone());
    let other_machine = "device 'dev' has models trained on another machine (tract-linalg 0.23.9 OtherCpu, L2";
    assert!(notes(&other).iter().any(|n| n.contains(other_machine)), "{other}");
    // No device under the models directory was trained here: the note says how to make one.
    assert!(notes(&other).iter().any(|n| n.contains("'perfmodel collect --device NAME'")), "{other}");
    assert!(notes(&other).iter().any(|n| n.contains("'perfmodel devices' shows which devices")), "{other}");
    // With one, the note names it instead.
    let with_mine = estimate_with(elsewhere.clone(), true);
    let hint = "models trained on this machine: 'mine' (--device mine)";
    assert!(notes(&with_mine).iter().any(|n| n.contains(hint)), "{with_mine}");
    let smaller_l2 = estimate(other_caches);
    assert!(notes(&smaller_l2).iter().any(|n| n.contains("L2 1048576 B")), "{smaller_l2}");
    // The constant model ignores the appended features: the estimate itself is unchanged.
    let same = estimate(here.clone());
    assert!(!notes(&same).iter().any(|n| n.contains("trained on")), "{same}");
    assert_eq!(other["total"]["latency_ms"], same["total"]["latency_ms"]);
}

#[test]
fn at_current_speed_scales_the_probe_following_layers_of_the_shipped_models() {
    // The shipped models (trained at a nominal speed-probe time) of a device measured on this machine. The
    // nominal time of a device measured on another machine is that machine's: it is refused.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let net = root.join("zoo/holdout/alexnet.json").to_string_lossy().into_owned();
    let (models, collectors) = (root.join("models"), root.join("collectors"));
    let trained_here = perfmodel::train::store::devices_trained_here(&models);
    let (models, collectors) = (models.to_str().unwrap(), collectors.to_str().unwrap());
    let args_for = |device: &'static str| {
        let mut args =
            vec!["estimate", &net, "--device", device, "--models-dir", models, "--collectors-dir", collectors];
        args.extend(["--format", "json", "--at-current-speed"]);
        args
    };
    // Only learned models have a speed to scale by (checked first: it holds on every machine).
    let mut paleo = args_for("local");
    paleo.extend(["--method", "paleo"]);
    let out = perfmodel(dir.path(), &paleo);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--at-current-speed: needs --method learned"));
    // A duration that is not one is a usage error, before anything runs.
    for bad in ["0", "-1", "soon", "1e9"] {
        let out = perfmodel(dir.path(), &["speed", &format!("--seconds={bad}")]);
        assert_eq!(out.status.code(), Some(2), "--seconds {bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--seconds"), "--seconds {bad}");
    }
    let mut checked_elsewhere = 0;
    for device in ["local", "zen5"].into_iter().filter(|d| !trained_here.iter().any(|h| h == d)) {
        let out = perfmodel(dir.path(), &args_for(device));
        assert_eq!(out.status.code(), Some(2), "{device}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("device '{device}' were trained on another machine")), "{err}");
        checked_elsewhere += 1;
    }
    let device = match ["local", "zen5"].into_iter().find(|d| trained_here.iter().any(|h| h == d)) {
        Some(device) => device,
        None => {
            assert_eq!(checked_elsewhere, 2);
            eprintln!("no shipped device was measured on this machine: scaling to its speed is not checked here");
            return;
        }
    };
    let mut args = args_for(device);
    args.pop();
    let nominal = json_of(&perfmodel(dir.path(), &args));
    args.push("--at-current-speed");
    let now = json_of(&perfmodel(dir.path(), &args));
    let note = now["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).find(|n| n.contains("speed now"));
    assert!(note.is_some(), "{now}");
    let (layers, base) = (now["layers"].as_array().unwrap(), nominal["layers"].as_array().unwrap());
    let mut ratio = None;
    let mut sum = 0.0;
    for (l, b) in layers.iter().zip(base) {
        let (ms, base_ms) = (l["latency_ms"].as_f64().unwrap(), b["latency_ms"].as_f64().unwrap());
        sum += ms;
        let follows = ["conv2d", "dense", "max_pool2d"].contains(&l["type"].as_str().unwrap());
        if follows && base_ms > 0.0 {
            let r = ms / base_ms;
            assert!(r > 0.0 && ratio.is_none_or(|x: f64| (x - r).abs() < 1e-9 * r), "{l} vs {b}");
            ratio = Some(r);
        } else {
            assert_eq!(ms, base_ms, "{l}");
        }
    }
    assert!(ratio.is_some(), "alexnet has convolutions");
    assert!((now["total"]["latency_ms"].as_f64().unwrap() - sum).abs() < 1e-9 * sum);
}

/// Under `dir`: `a`, the tiny store, and `b`, a store of device `dev` with only latency models: constant conv2d,
/// max_pool2d and dense answers `[conv, pool, dense]`.
fn two_latency_stores(dir: &Path, [conv, pool, dense]: [f64; 3]) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    tiny_store(&a);
    write_store(
        &b,
        "dev",
        vec![
            (LayerType::Conv2d, Metric::Latency, constant(conv)),
            (LayerType::MaxPool2d, Metric::Latency, constant(pool)),
            (LayerType::Dense, Metric::Latency, constant(dense)),
        ],
    );
    (a, b)
}

#[test]
fn the_layer_cache_answers_what_the_models_answer_and_keeps_stores_apart() {
    // Two stores with different answers, asked in turn on this one thread about the same layers.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_latency_stores(dir.path(), [7.0, 0.25, 3.0]);
    let net = Network::from_json_str(TINY, "tiny_net.json").unwrap();
    let cached_a = perfmodel::estimate::Estimator::open(&a, "dev").unwrap();
    let cached_b = perfmodel::estimate::Estimator::open(&b, "dev").unwrap();
    let fresh_a = perfmodel::estimate::Estimator::open(&a, "dev").unwrap().with_layer_cache(false);
    for _ in 0..3 {
        let (ea, eb, fa) =
            (cached_a.estimate(&net).unwrap(), cached_b.estimate(&net).unwrap(), fresh_a.estimate(&net).unwrap());
        let json = |e: &perfmodel::estimate::Estimate| serde_json::to_string(e).unwrap();
        assert_eq!(json(&ea), json(&fa), "the cache changes nothing");
        // Store b's answers, not a's remembered ones.
        let conv = |e: &perfmodel::estimate::Estimate| {
            e.layers.iter().find(|l| l.layer_type == LayerType::Conv2d).unwrap().latency_ms
        };
        assert_eq!((conv(&ea), conv(&eb)), (Some(2.0), Some(7.0)));
        // The same files opened again (another store id) answer the same.
        let again = perfmodel::estimate::Estimator::open(&a, "dev").unwrap().estimate(&net).unwrap();
        assert_eq!(json(&again), json(&ea));
    }
}

#[test]
fn on_a_machine_without_a_device_the_estimate_is_zero_shot_from_the_nearest_and_names_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // One device with models, made on another machine of this architecture.
    copy_tree(&root.join("models/zen5"), &dir.path().join("models/elsewhere"));
    let manifest = dir.path().join("models/elsewhere/manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("\"device\": \"zen5\"", "\"device\": \"elsewhere\"");
    std::fs::write(&manifest, text).unwrap();
    std::fs::remove_file(dir.path().join("models/elsewhere/calibration.json")).unwrap();
    let mut profile = perfmodel::collect::DeviceProfile::load(&root.join("collectors"), "zen5").unwrap();
    profile.fingerprint = Some(perfmodel::device::Fingerprint {
        arch: std::env::consts::ARCH.into(),
        model_name: Some("Fake CPU 9000".into()),
        ..Default::default()
    });
    std::fs::create_dir_all(dir.path().join("collectors")).unwrap();
    std::fs::write(dir.path().join("collectors/elsewhere.toml"), profile.to_toml().unwrap()).unwrap();
    std::fs::write(dir.path().join("net.json"), TINY).unwrap();
    let args = ["estimate", "net.json", "--models-dir", "models", "--collectors-dir", "collectors", "--format", "json"];
    let zero_shot = json_of(&perfmodel(dir.path(), &args));
    let notes: Vec<&str> = zero_shot["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let line = notes.iter().find(|n| n.starts_with("zero-shot")).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(line.contains("'elsewhere'") && line.contains("Fake CPU 9000") && line.contains("conv x"), "{line}");
    assert!(!notes.iter().any(|n| n.contains("trained on another machine")), "one line, not several: {notes:?}");
    // Named explicitly, the device is estimated for as it is (its own machine's figures).
    let named = json_of(&perfmodel(dir.path(), &[&args[..], &["--device", "elsewhere"]].concat()));
    assert!(!named["notes"].to_string().contains("zero-shot"), "{named}");
    assert!(named["total"]["latency_ms"].as_f64().unwrap() > 0.0);
    assert_ne!(named["total"]["latency_ms"], zero_shot["total"]["latency_ms"]);
}

#[test]
fn zero_shot_scales_each_layer_by_its_class_and_combines_sources_by_geometric_mean() {
    use perfmodel::estimate::zero_shot::{layer_classes, ProbeClass, ZeroShot};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_latency_stores(dir.path(), [8.0, 0.125, 1.29]);
    let net = Network::from_json_str(TINY, "tiny_net.json").unwrap();
    let classes = layer_classes(&net, &net.analyze().unwrap());
    let type_of = |t: LayerType| net.layers.iter().position(|l| l.op.layer_type() == t).unwrap();
    let (conv, pool, dense) = (type_of(LayerType::Conv2d), type_of(LayerType::MaxPool2d), type_of(LayerType::Dense));
    assert_eq!((classes[conv], classes[pool], classes[dense]), (ProbeClass::Conv, ProbeClass::Pool, ProbeClass::Dense));
    let scaling = |device: &str, conv: f64, pool: f64| ZeroShot {
        source_device: device.to_string(),
        probes: Vec::new(),
        factors: ProbeClass::ALL
            .into_iter()
            .map(|c| {
                (
                    c,
                    match c {
                        ProbeClass::Conv => conv,
                        ProbeClass::Pool => pool,
                        _ => 1.0,
                    },
                )
            })
            .collect(),
        seconds: 0.0,
    };
    let ea = perfmodel::estimate::Estimator::open(&a, "dev").unwrap().estimate(&net).unwrap();
    let eb = perfmodel::estimate::Estimator::open(&b, "dev").unwrap().estimate(&net).unwrap();
    let sa = ea.clone().scaled_by(&scaling("a", 3.0, 0.5), &classes);
    let sb = eb.clone().scaled_by(&scaling("b", 0.75, 8.0), &classes);
    let ms = |e: &perfmodel::estimate::Estimate, i: usize| e.layers[i].latency_ms.unwrap();
    // Scaled per class: conv 2 ms x3, pool 0.5 ms x0.5, dense as it was; power gone with the other machine.
    assert!(close(ms(&sa, conv), 6.0) && close(ms(&sa, pool), 0.25) && close(ms(&sa, dense), ms(&ea, dense)));
    assert!(sa.layers.iter().all(|l| l.power_w.is_none() && l.energy_mj.is_none()) && sa.total.energy_mj.is_none());
    assert!(close(sa.total.latency_ms - ea.total.latency_ms, 4.0 - 0.25));
    // Combined: conv sqrt(6 x 6) = 6, pool sqrt(0.25 x 1) = 0.5, and the total moves by as much.
    let mut combined = sa.clone();
    combined.combine_latency(std::slice::from_ref(&sb));
    assert!(close(ms(&combined, conv), 6.0) && close(ms(&combined, pool), 0.5), "{combined:?}");
    assert!(close(combined.total.latency_ms - sa.total.latency_ms, 0.25));
    // Fused layers (0 ms in every source) stay 0.
    for (i, l) in combined.layers.iter().enumerate() {
        if sa.layers[i].latency_ms == Some(0.0) {
            assert_eq!(l.latency_ms, Some(0.0), "{}", l.name);
        }
    }
}

#[test]
fn on_a_machine_without_a_device_zero_shot_combines_every_shipped_device_of_the_engine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("collectors")).unwrap();
    // Two devices with models, made on two other machines of this architecture; the nearer one is chosen (by its
    // vendor and last-level cache, else by its name).
    let host = perfmodel::device::Fingerprint::of_host();
    for (device, source, model_name, vendor, l3) in [
        ("a_near", "zen5", "Fake CPU 9000", host.vendor.clone(), host.l3_bytes),
        ("b_far", "xeon480", "Fake CPU 1", Some("NoSuchVendor".to_string()), Some(1)),
    ] {
        copy_tree(&root.join("models").join(source), &dir.path().join("models").join(device));
        let manifest = dir.path().join("models").join(device).join("manifest.json");
        let text = std::fs::read_to_string(&manifest)
            .unwrap()
            .replace(&format!("\"device\": \"{source}\""), &format!("\"device\": \"{device}\""));
        std::fs::write(&manifest, text).unwrap();
        std::fs::remove_file(dir.path().join("models").join(device).join("calibration.json")).unwrap();
        let mut profile = perfmodel::collect::DeviceProfile::load(&root.join("collectors"), source).unwrap();
        profile.fingerprint = Some(perfmodel::device::Fingerprint {
            arch: std::env::consts::ARCH.into(),
            model_name: Some(model_name.into()),
            vendor,
            l3_bytes: l3,
            ..Default::default()
        });
        std::fs::write(dir.path().join(format!("collectors/{device}.toml")), profile.to_toml().unwrap()).unwrap();
    }
    std::fs::write(dir.path().join("net.json"), TINY).unwrap();
    let args = ["estimate", "net.json", "--models-dir", "models", "--collectors-dir", "collectors", "--format", "json"];
    let combined = json_of(&perfmodel(dir.path(), &args));
    let notes: Vec<&str> = combined["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let line = notes.iter().find(|n| n.starts_with("zero-shot")).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(line.contains("'a_near' and of 'b_far'") && line.contains("geometric mean"), "{line}");
    assert!(line.contains("Fake CPU 9000") && line.contains("memory from 'a_near'"), "{line}");
    assert_eq!(combined["zero_shot"]["source_device"], "a_near");
    let others = combined["zero_shot_others"].as_array().unwrap();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0]["source_device"], "b_far");
    // Named with --zero-shot, a device is scaled alone.
    let alone = json_of(&perfmodel(dir.path(), &[&args[..], &["--device", "a_near", "--zero-shot"]].concat()));
    assert!(alone.get("zero_shot_others").is_none(), "{alone}");
    assert!(alone["notes"].to_string().contains("'a_near''s latency models scaled"), "{alone}");
}

#[test]
fn a_layer_run_inside_another_without_a_model_of_its_own_is_uncovered_not_free() {
    // ONNX Runtime computes a residual add read only by a layer norm inside it (`SkipLayerNormalization`): the
    // add's time is the layer norm's, from the add's own model. Without one, the estimate lists the add as
    // uncovered instead of counting it as free.
    let net = r#"{"name": "skip", "input_shape": [8, 16], "layers": [
      {"name": "p", "type": "matmul", "units": 16, "use_bias": true},
      {"name": "r", "type": "add", "inputs": ["input", "p"]},
      {"name": "ln", "type": "layer_norm", "axis": -1}]}"#;
    let dir = setup(net);
    let models = dir.path().join("models");
    let engine = Some("onnxruntime 1.32.0 (optimisation all)");
    let without_add = vec![
        (LayerType::MatMul, Metric::Latency, constant(0.5)),
        (LayerType::LayerNorm, Metric::Latency, constant(0.25)),
    ];
    write_store_of(&models, "dev", engine, without_add.clone());
    let mut args = vec!["estimate", "net.json", "--device", "dev", "--format", "json"];
    args.extend(DIRS);
    let v = json_of(&perfmodel(dir.path(), &args));
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers[1]["predictor"], "fused:ln", "{v}");
    let uncovered: Vec<&str> = v["uncovered"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(uncovered, ["r"], "{v}");
    // With a model of its own, it is timed inside the layer norm.
    let mut with_add = without_add;
    with_add.push((LayerType::Add, Metric::Latency, constant(0.125)));
    write_store_of(&models, "dev", engine, with_add);
    let v = json_of(&perfmodel(dir.path(), &args));
    assert!(v["uncovered"].as_array().unwrap().is_empty(), "{v}");
    assert!(close(v["total"]["latency_ms"].as_f64().unwrap(), 0.875), "{v}");
}

/// An ONNX Runtime store records no machine (its features follow from the shapes and the device's NCHWc block), so
/// it is never listed as trained on this one: on an AVX-512 host every shipped ONNX Runtime device was, the AVX2
/// host's `zen3-ort` first.
#[test]
fn onnx_runtime_stores_are_not_counted_as_trained_on_this_machine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let collectors = root.join("collectors");
    let here = perfmodel::train::store::devices_trained_here(&root.join("models"));
    let ort: Vec<&String> = here
        .iter()
        .filter(|d| perfmodel::collect::DeviceProfile::load(&collectors, d).is_ok_and(|p| p.executor == "onnxruntime"))
        .collect();
    assert!(ort.is_empty(), "counted as trained here: {ort:?}");
    let store = perfmodel::train::store::ModelStore::open(&root.join("models"), "zen4-ort").unwrap();
    assert!(!store.trained_here() && store.trained_elsewhere().is_none());
}
