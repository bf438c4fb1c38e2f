//! The C ABI as a C or Python program sees it: compile C programs against `include/perfmodel.h`, link them
//! with the cdylib this test build produced (`target/debug/deps/libperfmodel.so`, built with the library
//! target), run them, and compare what they print with the Rust API on the same networks. The Python NAS
//! example runs the same way.
//!
//! The model store is written through the training API (`ModelStore::save`) with linear predictors whose
//! coefficients are chosen here, so the expected totals can be computed by hand from each layer's FLOPs.

use perfmodel::estimate::Estimator;
use perfmodel::layer::LayerType;
use perfmodel::metric::Metric;
use perfmodel::network::Network;
use perfmodel::train::model::{Linear, Model, Standardizer};
use perfmodel::train::store::{model_file_name, Manifest, ModelEntry, ModelFile, FORMAT_VERSION};
use perfmodel::train::{ModelStore, Predictor, Scores};
use perfmodel::Dirs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEVICE: &str = "ffi-test";

/// Per layer type: (ms per FLOP, ms intercept, watts). Global max pooling has no predictor: it must come back
/// as uncovered, not as 0 ms.
const LINEAR_MODELS: [(LayerType, f64, f64, f64); 7] = [
    (LayerType::Conv2d, 2e-7, 0.010, 20.0),
    (LayerType::DepthwiseConv2d, 4e-7, 0.008, 15.0),
    (LayerType::MaxPool2d, 1e-6, 0.002, 5.0),
    (LayerType::AvgPool2d, 1e-6, 0.002, 5.0),
    (LayerType::Add, 1e-6, 0.001, 6.0),
    (LayerType::GlobalAvgPool2d, 1e-6, 0.001, 5.0),
    (LayerType::Dense, 5e-7, 0.003, 10.0),
];

/// A prediction `slope * flops + intercept` (flops is the last feature) in the stored form.
fn linear_in_flops(layer_type: LayerType, slope: f64, intercept: f64) -> Predictor {
    let n = layer_type.feature_names().len();
    assert_eq!(layer_type.feature_names()[n - 1], "flops");
    let mut coefficients = vec![0.0; n];
    coefficients[n - 1] = slope;
    let standardizer = Standardizer { mean: vec![0.0; n], scale: vec![1.0; n] };
    Predictor::new("linear", false, Model::Linear(Linear { standardizer, coefficients, intercept }))
}

fn write_linear_store(models_dir: &Path) {
    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        perfmodel_version: perfmodel::VERSION.to_string(),
        device: DEVICE.to_string(),
        feature_names: BTreeMap::new(),
        data_hash: "hand-written test models".to_string(),
        models: Vec::new(),
        speed_probe: None,
        engine: None,
        reorder_ms_per_mib: None,
        nchwc_block: None,
    };
    let mut files = Vec::new();
    for (layer_type, slope, intercept, watts) in LINEAR_MODELS {
        manifest.feature_names.insert(layer_type.as_str().to_string(), layer_type.feature_names());
        for (metric, predictor) in [
            (Metric::Latency, linear_in_flops(layer_type, slope, intercept)),
            (Metric::Power, linear_in_flops(layer_type, 0.0, watts)),
        ] {
            manifest.models.push(ModelEntry {
                layer_type: layer_type.as_str().to_string(),
                metric: metric.as_str().to_string(),
                file: model_file_name(layer_type, metric),
                file_sha256: String::new(),
                method: "linear".to_string(),
                samples: 0,
                removed_outliers: 0,
                data_hash: String::new(),
                cv: Scores::default(),
                held_out: None,
            });
            files.push(ModelFile::new(layer_type, metric, predictor));
        }
    }
    ModelStore::save(models_dir, &mut manifest, &files).expect("write the test model store");
}

/// `target/debug/deps`, where the test executable lives, and where the library target's compilation writes the
/// cdylib beside the rlib this test links. (`target/debug/libperfmodel.so` is a copy `cargo build` makes; a
/// test build does not refresh it, so it may be stale.)
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().expect("the directory of the test executable").to_path_buf()
}

/// The cdylib built with the library for this test run.
fn cdylib() -> PathBuf {
    let lib = deps_dir().join("libperfmodel.so");
    assert!(lib.exists(), "{} was not built: Cargo.toml [lib] crate-type must include \"cdylib\"", lib.display());
    lib
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Compile `source` with the system C compiler against the header (and the library when `link`).
fn compile_c(dir: &Path, name: &str, source: &str, link: bool) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"]).arg(&exe).arg(&src);
    cc.arg("-I").arg(include_dir());
    if link {
        let lib_dir = deps_dir();
        cc.arg("-L").arg(&lib_dir).arg("-lperfmodel").arg(format!("-Wl,-rpath,{}", lib_dir.display()));
        cdylib();
    }
    let out = cc.output().expect("run cc (a C compiler is needed for the C ABI tests)");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

const LAYOUT_C: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include "perfmodel.h"
#define F(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
int main(void) {
    printf("pm_layer %zu\n", sizeof(pm_layer));
    F(pm_layer, type); F(pm_layer, activation); F(pm_layer, units); F(pm_layer, kernel); F(pm_layer, strides);
    F(pm_layer, dilation); F(pm_layer, groups); F(pm_layer, padding_mode); F(pm_layer, no_bias); F(pm_layer, pad);
    F(pm_layer, axis); F(pm_layer, rate); F(pm_layer, target_shape); F(pm_layer, target_rank); F(pm_layer, inputs);
    F(pm_layer, n_inputs);
    printf("pm_result %zu\n", sizeof(pm_result));
    F(pm_result, latency_ms); F(pm_result, energy_mj); F(pm_result, peak_memory_mib);
    F(pm_result, memory_two_largest_mib); F(pm_result, memory_two_mean_mib); F(pm_result, layers);
    F(pm_result, uncovered);
    printf("enums %d %d %d %d %d\n", PM_ERR_OTHER, PM_DROPOUT, PM_ACT_SOFTMAX, PM_PADDING_EXPLICIT,
           (int)sizeof(pm_status));
    return 0;
}
"#;

#[test]
fn header_layouts_match_the_rust_structs() {
    use perfmodel::ffi::{PmLayer, PmResult};
    use std::mem::{offset_of, size_of};
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "layout", LAYOUT_C, false);
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "pm_layer {}\n{}pm_result {}\n{}enums 8 16 11 2 4\n",
        size_of::<PmLayer>(),
        [
            ("type", offset_of!(PmLayer, layer_type)),
            ("activation", offset_of!(PmLayer, activation)),
            ("units", offset_of!(PmLayer, units)),
            ("kernel", offset_of!(PmLayer, kernel)),
            ("strides", offset_of!(PmLayer, strides)),
            ("dilation", offset_of!(PmLayer, dilation)),
            ("groups", offset_of!(PmLayer, groups)),
            ("padding_mode", offset_of!(PmLayer, padding_mode)),
            ("no_bias", offset_of!(PmLayer, no_bias)),
            ("pad", offset_of!(PmLayer, pad)),
            ("axis", offset_of!(PmLayer, axis)),
            ("rate", offset_of!(PmLayer, rate)),
            ("target_shape", offset_of!(PmLayer, target_shape)),
            ("target_rank", offset_of!(PmLayer, target_rank)),
            ("inputs", offset_of!(PmLayer, inputs)),
            ("n_inputs", offset_of!(PmLayer, n_inputs)),
        ]
        .iter()
        .map(|(f, o)| format!("pm_layer.{f} {o}\n"))
        .collect::<String>(),
        size_of::<PmResult>(),
        [
            ("latency_ms", offset_of!(PmResult, latency_ms)),
            ("energy_mj", offset_of!(PmResult, energy_mj)),
            ("peak_memory_mib", offset_of!(PmResult, peak_memory_mib)),
            ("memory_two_largest_mib", offset_of!(PmResult, memory_two_largest_mib)),
            ("memory_two_mean_mib", offset_of!(PmResult, memory_two_mean_mib)),
            ("layers", offset_of!(PmResult, layers)),
            ("uncovered", offset_of!(PmResult, uncovered)),
        ]
        .iter()
        .map(|(f, o)| format!("pm_result.{f} {o}\n"))
        .collect::<String>(),
    );
    assert_eq!(text, expected);
}

/// A residual CNN: conv → pool → 1x1 conv → add(pool, conv) → depthwise → global max pool (uncovered) → dense.
const NET_JSON: &str = r#"{"name": "ffi_net", "batch_size": 2, "input_shape": [3, 16, 16], "layers": [
  {"name": "c1", "type": "conv2d", "filters": 8, "kernel": [3, 3], "padding": "same", "activation": "relu"},
  {"name": "p1", "type": "max_pool2d", "pool_size": [2, 2]},
  {"name": "c2", "type": "conv2d", "filters": 8, "kernel": [1, 1], "use_bias": false},
  {"name": "sum", "type": "add", "inputs": ["p1", "c2"]},
  {"name": "dw", "type": "depthwise_conv2d", "kernel": [3, 3], "strides": [2, 2], "padding": "same"},
  {"name": "gmp", "type": "global_max_pool2d"},
  {"name": "fc", "type": "dense", "units": 10, "activation": "softmax"}]}"#;

/// The same network as a `pm_layer` array, plus every error path a C caller can hit.
const ROUND_TRIP_C: &str = r#"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "perfmodel.h"

static void print_result(const char *what, const pm_result *r) {
    printf("%s %.17g %.17g %.17g %.17g %.17g %llu %llu\n", what, r->latency_ms, r->energy_mj, r->peak_memory_mib,
           r->memory_two_largest_mib, r->memory_two_mean_mib, (unsigned long long)r->layers,
           (unsigned long long)r->uncovered);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    text[got] = '\0';
    fclose(f);
    return text;
}

static const int64_t sum_inputs[] = {1, 2};
static pm_layer net[7];
static const int64_t input_shape[] = {3, 16, 16};

static void build_layers(void) {
    memset(net, 0, sizeof net);
    net[0].type = PM_CONV2D; net[0].units = 8; net[0].kernel[0] = net[0].kernel[1] = 3;
    net[0].padding_mode = PM_PADDING_SAME; net[0].activation = PM_ACT_RELU;
    net[1].type = PM_MAX_POOL2D;  /* zero = the default 2x2 pool, strides = pool size */
    net[2].type = PM_CONV2D; net[2].units = 8; net[2].kernel[0] = net[2].kernel[1] = 1; net[2].no_bias = 1;
    net[3].type = PM_ADD; net[3].inputs = sum_inputs; net[3].n_inputs = 2;
    net[4].type = PM_DEPTHWISE_CONV2D; net[4].kernel[0] = net[4].kernel[1] = 3;
    net[4].strides[0] = net[4].strides[1] = 2; net[4].padding_mode = PM_PADDING_SAME;
    net[5].type = PM_GLOBAL_MAX_POOL2D;
    net[6].type = PM_DENSE; net[6].units = 10; net[6].activation = PM_ACT_SOFTMAX;
}

struct job { const pm_estimator *est; pm_result expected; int mismatches; };

static void *worker(void *arg) {
    struct job *job = arg;
    for (int i = 0; i < 200; i++) {
        pm_result r;
        if (pm_estimate_layers(job->est, net, 7, input_shape, 3, 2, &r) != PM_OK ||
            r.latency_ms != job->expected.latency_ms || r.energy_mj != job->expected.energy_mj)
            job->mismatches++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MODELS_DIR DEVICE NET_JSON COLLECTORS_DIR\n", argv[0]); return 2; }
    printf("version %s\n", pm_version());
    pm_estimator *est = NULL;
    int rc = pm_estimator_open(argv[1], argv[2], &est);
    if (rc != PM_OK) { printf("open_failed %d %s\n", rc, pm_last_error()); return 1; }
    printf("open %d [%s]\n", rc, pm_last_error());

    char *json = read_file(argv[3]);
    if (!json) { printf("cannot read %s\n", argv[3]); return 1; }
    pm_result r;
    rc = pm_estimate_json(est, json, 0, &r);
    printf("json_rc %d [%s]\n", rc, pm_last_error());
    print_result("json", &r);

    char *full = NULL;
    rc = pm_estimate_json_full(est, json, 0, &full);
    printf("full_rc %d\n", rc);
    printf("full_begin\n%s\nfull_end\n", full);
    pm_string_free(full);
    pm_string_free(NULL);

    build_layers();
    pm_result l;
    rc = pm_estimate_layers(est, net, 7, input_shape, 3, 2, &l);
    printf("layers_rc %d [%s]\n", rc, pm_last_error());
    print_result("layers", &l);

    /* Several threads share the handle. */
    pthread_t threads[4];
    struct job jobs[4];
    for (int t = 0; t < 4; t++) {
        jobs[t].est = est; jobs[t].expected = l; jobs[t].mismatches = 0;
        pthread_create(&threads[t], NULL, worker, &jobs[t]);
    }
    int mismatches = 0;
    for (int t = 0; t < 4; t++) { pthread_join(threads[t], NULL); mismatches += jobs[t].mismatches; }
    printf("threads_mismatches %d\n", mismatches);

    /* Errors: each returns its code and leaves a message; outputs stay untouched. */
    pm_result untouched = {0};
    untouched.latency_ms = -1.0;
    rc = pm_estimate_json(est, "{\"input_shape\": [3, 8, 8], \"layers\": [{\"name\": \"c\", \"type\": \"conv3d\"}]}",
                          0, &untouched);
    printf("unknown_type %d %g [%s]\n", rc, untouched.latency_ms, pm_last_error());
    rc = pm_estimate_json(est, "{\"input_shape\": [3, 8, 8], \"layers\": [", 0, &untouched);
    printf("malformed %d [%s]\n", rc, pm_last_error());
    net[4].kernel[0] = net[4].kernel[1] = 9;
    net[4].padding_mode = PM_PADDING_VALID;
    rc = pm_estimate_layers(est, net, 7, input_shape, 3, 2, &untouched);
    printf("big_kernel %d %g [%s]\n", rc, untouched.latency_ms, pm_last_error());
    build_layers();
    net[2].units = -3;
    rc = pm_estimate_layers(est, net, 7, input_shape, 3, 2, &untouched);
    printf("negative %d [%s]\n", rc, pm_last_error());
    build_layers();
    rc = pm_estimate_layers(est, net, 7, input_shape, 3, 0, &untouched);
    printf("batch0 %d [%s]\n", rc, pm_last_error());
    rc = pm_estimate_json(est, NULL, 0, &untouched);
    printf("null_json %d [%s]\n", rc, pm_last_error());
    rc = pm_estimate_json(est, json, 0, NULL);
    printf("null_out %d [%s]\n", rc, pm_last_error());
    rc = pm_estimate_layers(NULL, net, 7, input_shape, 3, 2, &untouched);
    printf("null_handle %d [%s]\n", rc, pm_last_error());
    pm_estimator *missing = NULL;
    rc = pm_estimator_open(argv[1], "no-such-device", &missing);
    printf("missing_device %d %d [%s]\n", rc, missing == NULL, pm_last_error());

    /* The command line's construction: the paleo baseline from the shipped profile of this machine. */
    pm_estimator *paleo = NULL;
    rc = pm_estimator_open_method(argv[1], argv[1], argv[4], "local", "paleo", &paleo);
    printf("paleo_open %d [%s]\n", rc, pm_last_error());
    rc = pm_estimate_json(paleo, json, 0, &r);
    print_result("paleo", &r);
    pm_estimator_close(paleo);
    rc = pm_estimator_open_method(argv[1], argv[1], argv[4], "local", "magic", &missing);
    printf("bad_method %d [%s]\n", rc, pm_last_error());

    free(json);
    pm_estimator_close(est);
    pm_estimator_close(NULL);
    printf("done\n");
    return 0;
}
"#;

/// The value after `key ` on its own line of the program output.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no '{key}' line in:\n{out}"))
}

fn numbers(text: &str) -> Vec<f64> {
    text.split_whitespace().map(|x| x.parse().unwrap_or_else(|_| panic!("not a number: {x}"))).collect()
}

#[test]
fn c_program_round_trip_and_error_codes() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    write_linear_store(&models);
    let net_file = dir.path().join("net.json");
    std::fs::write(&net_file, NET_JSON).unwrap();
    let exe = compile_c(dir.path(), "round_trip", ROUND_TRIP_C, true);
    let collectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("collectors");
    // cargo's LD_LIBRARY_PATH lists target/debug, whose copy of the library may be stale: load this build's.
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", deps_dir())
        .arg(&models)
        .arg(DEVICE)
        .arg(&net_file)
        .arg(&collectors)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "C program failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(line(&stdout, "version"), perfmodel::VERSION);
    assert_eq!(line(&stdout, "open"), "0 []");
    assert_eq!(line(&stdout, "json_rc"), "0 []");

    // By hand: every predicted layer costs slope * FLOPs + intercept; energy is latency x power per layer.
    let net = Network::from_json_str(NET_JSON, "net.json").unwrap();
    let analysis = net.analyze().unwrap();
    let (mut latency, mut energy) = (0.0, 0.0);
    for (layer, cost) in net.layers.iter().zip(&analysis.costs) {
        if let Some((_, slope, intercept, watts)) = LINEAR_MODELS.iter().find(|(t, ..)| *t == layer.op.layer_type()) {
            let ms = slope * cost.flops as f64 + intercept;
            latency += ms;
            energy += ms * watts;
        }
    }
    let json = numbers(line(&stdout, "json"));
    assert!((json[0] - latency).abs() < 1e-9 * latency, "latency {} != {latency} by hand", json[0]);
    assert!((json[1] - energy).abs() < 1e-9 * energy, "energy {} != {energy} by hand", json[1]);
    assert_eq!(&json[5..], &[7.0, 1.0], "7 layers, global max pooling uncovered");

    // Exactly what the Rust API says, for JSON text and for the layer array.
    let estimate = Estimator::open(&models, DEVICE).unwrap().estimate(&net).unwrap();
    let t = estimate.total.clone();
    let rust = [t.latency_ms, t.energy_mj.unwrap(), t.peak_memory_mib, t.memory_two_largest_mib, t.memory_two_mean_mib];
    assert_eq!(&json[..5], &rust);
    assert_eq!(line(&stdout, "layers_rc"), "0 []");
    assert_eq!(numbers(line(&stdout, "layers"))[..5], rust, "layer array differs from the JSON network");
    assert_eq!(line(&stdout, "threads_mismatches"), "0");

    let full = stdout.split("full_begin\n").nth(1).and_then(|s| s.split("\nfull_end").next()).unwrap();
    assert_eq!(line(&stdout, "full_rc"), "0");
    assert_eq!(full, serde_json::to_string_pretty(&estimate).unwrap());
    let full: serde_json::Value = serde_json::from_str(full).unwrap();
    assert_eq!(full["uncovered"][0]["name"], "gmp");

    let unknown = line(&stdout, "unknown_type");
    assert!(unknown.starts_with("3 -1 ["), "code 3 (invalid network), output untouched: {unknown}");
    assert!(unknown.contains("layer 'c' (#0), field 'type'") && unknown.contains("conv3d"), "{unknown}");
    assert!(line(&stdout, "malformed").starts_with("3 [<json text>: invalid JSON"), "{stdout}");
    let big = line(&stdout, "big_kernel");
    assert!(
        big.starts_with("3 -1 [") && big.contains("[network 'pm_layers': layer 'layer4' (#4), field 'kernel'"),
        "{big}"
    );
    let negative = line(&stdout, "negative");
    assert!(
        negative.starts_with("3 [") && negative.contains("[network 'pm_layers': layer 'layer2' (#2), field 'units'"),
        "{negative}"
    );
    assert!(line(&stdout, "batch0").starts_with("2 [argument 'batch' must be positive"), "{stdout}");
    assert_eq!(line(&stdout, "null_json"), "1 [argument 'json' is NULL]");
    assert_eq!(line(&stdout, "null_out"), "1 [argument 'out' is NULL]");
    assert_eq!(line(&stdout, "null_handle"), "1 [argument 'estimator' is NULL]");
    assert_eq!(line(&stdout, "paleo_open"), "0 []");
    let dirs = Dirs::default().with_models(&models).with_data(&models).with_collectors(&collectors);
    let paleo = Estimator::open_method("paleo", "local", &dirs).unwrap().estimate(&net).unwrap().total;
    let paleo_c = numbers(line(&stdout, "paleo"));
    assert_eq!(paleo_c[0], paleo.latency_ms);
    assert!(paleo_c[1].is_nan(), "paleo has no power model: energy must be NaN, got {}", paleo_c[1]);
    let bad_method = line(&stdout, "bad_method");
    assert!(bad_method.starts_with("2 [unknown estimation method 'magic'"), "{bad_method}");
    let missing = line(&stdout, "missing_device");
    assert!(missing.starts_with("4 1 [") && missing.contains("no-such-device"), "{missing}");
    assert!(stdout.ends_with("done\n"), "{stdout}");
}

/// The shipped models of this machine when they exist, else the hand-written linear store (same layer types
/// as the NAS example's search space).
fn nas_models(scratch: &Path) -> (PathBuf, String) {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    if shipped.join("local").join("manifest.json").exists() {
        return (shipped, "local".to_string());
    }
    let models = scratch.join("models");
    write_linear_store(&models);
    (models, DEVICE.to_string())
}

#[test]
fn python_nas_example_runs() {
    if Command::new("python3").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("SKIPPED python_nas_example_runs: python3 is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (models, device) = nas_models(dir.path());
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/nas_loop.py");
    let run = |models: &Path| {
        Command::new("python3")
            .arg(&example)
            .arg("--lib")
            .arg(cdylib())
            .arg("--models")
            .arg(models)
            .args(["--device", &device, "--iterations", "300", "--seed", "7", "--budget-ms", "5"])
            .output()
            .unwrap()
    };
    let out = run(&models);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "nas_loop.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("estimated 300 networks"), "{stdout}");
    assert!(stdout.contains("networks/s"), "{stdout}");
    let best = line(&stdout, "best:");
    assert!(best.contains("ms") && best.contains("conv"), "{stdout}");

    // A missing model store: the library's error code and message reach the Python caller.
    let out = run(&dir.path().join("nowhere"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(stderr.contains("PM_ERR_MODEL") && stderr.contains("no trained models"), "{stderr}");
}
