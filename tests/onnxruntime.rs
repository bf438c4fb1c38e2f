//! ONNX Runtime as a device's engine, through the real binary: `bench` with per-layer times from ONNX Runtime's
//! own profiler mapped back to layers, memory that includes its C++ heap, `collect` of single layers, and the
//! error when the library is missing. These tests need the library (`pip install onnxruntime`; `.ci/run`
//! installs it).

mod common;
use common::{perfmodel, stderr};
use std::path::Path;
use std::process::{Command, Output};

/// conv + batch norm + residual add + activation + a 4 MiB dense layer.
const NET: &str = r#"{"name": "small", "batch_size": 1, "input_shape": [16, 32, 32],
  "layers": [
    {"name": "c1", "type": "conv2d", "filters": 16, "kernel": [3,3], "padding": "same"},
    {"name": "bn", "type": "batch_norm"},
    {"name": "sum", "type": "add", "inputs": ["input", "bn"]},
    {"name": "act", "type": "activation", "function": "relu"},
    {"name": "p1", "type": "max_pool2d", "pool_size": [2,2]},
    {"name": "flat", "type": "flatten"},
    {"name": "fc", "type": "dense", "units": 256, "activation": "relu"}]}"#;

fn setup(optimization: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("collectors")).unwrap();
    let profile = format!(
        "description = \"ONNX Runtime test device\"\nexecutor = \"onnxruntime\"\ngraph_optimization = \
         \"{optimization}\"\nthreads = 1\nbatch_sizes = [1]\n\
         [protocol]\nburn_in_runs = 1\nrepetitions = 2\nrounds = 2\ngroup_size = 2\n\
         per_sample_timeout_s = 60\nmin_window_ms = 0\nmax_cv = 0.5\n"
    );
    std::fs::write(dir.path().join("collectors/ort.toml"), profile).unwrap();
    std::fs::write(dir.path().join("net.json"), NET).unwrap();
    dir
}

fn bench(dir: &Path) -> serde_json::Value {
    let args = ["--collectors-dir", "collectors", "bench", "net.json", "--device", "ort", "--rounds", "5"];
    let out = perfmodel(dir, &[&args[..], &["--warmup", "1", "--format", "json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("bench prints JSON")
}

fn layer_ms(json: &serde_json::Value, name: &str) -> f64 {
    let layers = json["layers"].as_array().unwrap();
    layers.iter().find(|l| l["name"] == name).unwrap()["latency_ms"].as_f64().unwrap()
}

#[test]
fn bench_times_layers_with_onnxruntime_and_counts_its_heap() {
    let dir = setup("all");
    let json = bench(dir.path());
    assert!(json["engine"].as_str().unwrap().starts_with("onnxruntime 1."), "{json}");
    let names: Vec<&str> = json["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c1", "bn", "sum", "act", "p1", "flat", "fc"]);
    for name in ["c1", "p1", "fc"] {
        assert!(layer_ms(&json, name) > 0.0, "{name} ran no node: {json}");
    }
    // Every node of the optimised graph belongs to a layer, the layout reorders ONNX Runtime inserts included.
    let attributed: f64 = json["layers"].as_array().unwrap().iter().map(|l| l["latency_ms"].as_f64().unwrap()).sum();
    let unattributed = json["unattributed_ms"].as_f64().unwrap();
    assert!(unattributed <= 0.05 * attributed, "unattributed {unattributed} ms of {attributed} ms: {json}");
    // The batch norm is folded into the convolution: no node of its own, its work is the convolution's.
    assert_eq!(layer_ms(&json, "bn"), 0.0, "{json}");
    // The dense layer's 4 MiB of weights live in ONNX Runtime's C++ heap: counted.
    let total = &json["total"];
    assert!(total["memory_source"].as_str().unwrap().contains("C/C++"), "{total}");
    let peak = total["peak_memory_mib"].as_f64().unwrap();
    assert!((4.0..64.0).contains(&peak), "peak {peak} MiB: {total}");
    assert!(total["resident_memory_mib"].as_f64().unwrap() >= 4.0, "{total}");
}

#[test]
fn on_spinning_threads_the_layers_share_the_plain_runs_time() {
    // Two spinning threads: one session alive at a time, and the profiled runs (slower than plain ones on a
    // pool) scaled to the plain runs' time, the nodes' shares kept.
    let dir = setup("all");
    let profile = dir.path().join("collectors/ort.toml");
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(&profile, text.replace("threads = 1", "threads = 2").replace("group_size = 2", "group_size = 1"))
        .unwrap();
    let json = bench(dir.path());
    assert_eq!(json["threads"], 2, "{json}");
    for name in ["c1", "p1", "fc"] {
        assert!(layer_ms(&json, name) > 0.0, "{name} ran no node: {json}");
    }
    let layers: f64 = json["layers"].as_array().unwrap().iter().map(|l| l["latency_ms"].as_f64().unwrap()).sum();
    let shared = layers + json["unattributed_ms"].as_f64().unwrap();
    let total = json["total"]["latency_ms"].as_f64().unwrap();
    assert!((shared / total - 1.0).abs() < 0.15, "layers {shared} ms against {total} ms plain: {json}");
}

#[test]
fn without_graph_optimisation_every_layer_runs_its_own_nodes() {
    let dir = setup("disable");
    let json = bench(dir.path());
    assert!(json["engine"].as_str().unwrap().ends_with("(optimisation disable)"), "{json}");
    for name in ["c1", "bn", "sum", "act", "p1", "fc"] {
        assert!(layer_ms(&json, name) > 0.0, "{name}: {json}");
    }
    assert_eq!(json["unattributed_ms"].as_f64().unwrap(), 0.0, "{json}");
}

#[test]
fn collect_measures_layers_with_onnxruntime() {
    let dir = setup("all");
    let configs = serde_json::json!({
        "seed": 1,
        "batch_sizes": [1],
        "configs": [
            {"config": {"type": "conv2d", "filters": 8, "kernel": [3, 3], "input_shapes": [[8, 16, 16]]},
             "source": "test", "count": 1},
            {"config": {"type": "dense", "units": 512, "input_shapes": [[1024]]}, "source": "test", "count": 1},
        ],
    });
    std::fs::write(dir.path().join("configs.json"), configs.to_string()).unwrap();
    let args = ["--collectors-dir", "collectors", "--data-dir", "data", "collect", "--device", "ort"];
    let out = perfmodel(dir.path(), &[&args[..], &["--configs", "configs.json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let dense = std::fs::read_to_string(dir.path().join("data/ort/dense.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(dense.as_bytes());
    let header = rows.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    let row = rows.records().next().expect("a dense row").unwrap();
    let latency: f64 = row[column("latency_ms")].parse().unwrap();
    let memory: f64 = row[column("memory_mib")].parse().expect("memory measured");
    assert!(latency > 0.0, "{dense}");
    assert!(row[column("engine")].starts_with("onnxruntime 1."), "{dense}");
    // 2 MiB of weights, in ONNX Runtime's heap.
    assert!(memory >= 2.0, "{dense}");
    assert!(dir.path().join("data/ort/conv2d.csv").is_file());
}

fn bench_without_library(dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_perfmodel"));
    command.current_dir(dir).args(["--collectors-dir", "collectors", "bench", "net.json", "--device", "ort"]);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

#[test]
fn a_missing_library_is_a_clear_error_that_says_how_to_install_it() {
    let dir = setup("all");
    let out = bench_without_library(dir.path(), &[("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/libonnxruntime.so") && err.contains("pip install onnxruntime"), "{err}");
    // No ORT_DYLIB_PATH and no Python to find the package with.
    let empty = tempfile::tempdir().unwrap();
    let out = bench_without_library(dir.path(), &[("ORT_DYLIB_PATH", ""), ("PATH", empty.path().to_str().unwrap())]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not installed") && err.contains("pip install onnxruntime"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// An encoder block at 64 tokens (512 features, 8 heads, 2,048 hidden) after an embedding's add and norm.
const ENCODER_BLOCK: &str = r#"{"name": "block", "batch_size": 1, "input_shape": [64, 512], "layers": [
  {"name": "emb_add", "type": "elementwise", "function": "add", "constant_shape": [64, 512]},
  {"name": "emb_ln", "type": "layer_norm", "axis": -1, "epsilon": 1e-12},
  {"name": "q", "type": "matmul", "units": 512, "use_bias": true},
  {"name": "q_heads", "type": "reshape", "target_shape": [64, 8, 64]},
  {"name": "q_t", "type": "transpose", "perm": [1, 0, 2]},
  {"inputs": ["emb_ln"], "name": "k", "type": "matmul", "units": 512, "use_bias": true},
  {"name": "k_heads", "type": "reshape", "target_shape": [64, 8, 64]},
  {"name": "k_t", "type": "transpose", "perm": [1, 2, 0]},
  {"inputs": ["emb_ln"], "name": "v", "type": "matmul", "units": 512, "use_bias": true},
  {"name": "v_heads", "type": "reshape", "target_shape": [64, 8, 64]},
  {"name": "v_t", "type": "transpose", "perm": [1, 0, 2]},
  {"inputs": ["q_t", "k_t"], "name": "scores", "type": "matmul", "units": null, "use_bias": false},
  {"name": "scale", "type": "elementwise", "function": "mul", "constant_shape": []},
  {"name": "softmax", "type": "softmax", "axis": -1},
  {"inputs": ["softmax", "v_t"], "name": "context", "type": "matmul", "units": null, "use_bias": false},
  {"name": "context_t", "type": "transpose", "perm": [1, 0, 2]},
  {"name": "context_flat", "type": "reshape", "target_shape": [64, 512]},
  {"name": "proj", "type": "matmul", "units": 512, "use_bias": true},
  {"inputs": ["emb_ln", "proj"], "name": "res1", "type": "add"},
  {"name": "ln1", "type": "layer_norm", "axis": -1, "epsilon": 1e-12},
  {"name": "fc1", "type": "matmul", "units": 2048, "use_bias": true},
  {"name": "gelu", "type": "activation", "function": "gelu"},
  {"name": "fc2", "type": "matmul", "units": 512, "use_bias": true},
  {"inputs": ["ln1", "fc2"], "name": "res2", "type": "add"},
  {"name": "ln2", "type": "layer_norm", "axis": -1, "epsilon": 1e-12}]}"#;

/// The arena regions ONNX Runtime adds during a first run (its peak above what the built session holds) are
/// those of the estimate's walk: its planner's reuse, softmax writing into its input, GELU into a tensor of its
/// own, the graph's own order. Here GELU's new 512 KiB tensor beside its input is what takes the arena past its
/// first region (1 MiB): a walk with GELU in place keeps one region, ONNX Runtime takes a second of 2 MiB.
#[test]
fn the_arena_onnxruntime_grows_is_the_estimated_one() {
    let dir = setup("all");
    std::fs::write(dir.path().join("net.json"), ENCODER_BLOCK).unwrap();
    let json = bench(dir.path());
    let arena = |total: &serde_json::Value| {
        total["peak_memory_mib"].as_f64().unwrap() - total["resident_memory_mib"].as_f64().unwrap()
    };
    let measured = arena(&json["total"]);
    // The shipped ONNX Runtime device's rules, its layers' memory as planned (no calibration).
    let args = ["estimate", "net.json", "--device", "zen4-ort", "--uncalibrated", "--format", "json"];
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let estimate: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let estimated = arena(&estimate["total"]);
    assert!(measured > 2.0 && (measured - estimated).abs() < 0.5, "measured {measured} MiB, estimated {estimated} MiB");
}
