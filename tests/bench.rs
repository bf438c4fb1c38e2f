//! `perfmodel bench` through the real binary on a tiny network: real tract runs, JSON with per-layer times.

mod common;
use common::perfmodel;

const TINY: &str = r#"{"name": "tiny", "batch_size": 2, "input_shape": [3, 32, 32],
  "layers": [
    {"name": "c1", "type": "conv2d", "filters": 16, "kernel": [3,3], "strides": [2,2], "padding": "same", "activation": "relu"},
    {"name": "p1", "type": "max_pool2d", "pool_size": [2,2]},
    {"name": "c2", "type": "conv2d", "filters": 16, "kernel": [1,1]},
    {"name": "bn", "type": "batch_norm"},
    {"name": "sum", "type": "add", "inputs": ["p1", "bn"]},
    {"name": "act", "type": "activation", "function": "swish"},
    {"name": "gap", "type": "global_avg_pool2d"},
    {"name": "fc", "type": "dense", "units": 10, "activation": "softmax"}]}"#;

#[test]
fn bench_json_names_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.json"), TINY).unwrap();
    let out = perfmodel(dir.path(), &["bench", "tiny.json", "--rounds", "3", "--warmup", "1", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench prints JSON");
    assert_eq!(json["network"], "tiny");
    let total = json["total"]["latency_ms"].as_f64().unwrap();
    assert!(total > 0.0, "{json}");
    assert!(json["total"]["peak_memory_mib"].as_f64().unwrap() > 0.0, "{json}");
    let names: Vec<&str> = json["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c1", "p1", "c2", "bn", "sum", "act", "gap", "fc"]);
    for layer in json["layers"].as_array().unwrap() {
        assert!(layer["latency_ms"].as_f64().unwrap() >= 0.0, "{layer}");
    }
    // The weighted layers always do work that tract cannot fold away.
    for name in ["c1", "fc"] {
        let layer = json["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap();
        assert!(layer["latency_ms"].as_f64().unwrap() > 0.0, "{name}: {json}");
    }
}

/// A ViT-Ti encoder block written with the transformer layer types (the guide's example) runs with tract: every
/// layer named, the products and the feed-forward taking time.
#[test]
fn a_transformer_block_runs_with_every_layer_named() {
    let dir = tempfile::tempdir().unwrap();
    let block = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vit_ti_block.json");
    let out = perfmodel(dir.path(), &["bench", block, "--rounds", "3", "--warmup", "1", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench prints JSON");
    let layers = json["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 22, "{json}");
    let time = |name: &str| layers.iter().find(|l| l["name"] == name).unwrap()["latency_ms"].as_f64().unwrap();
    // Where tract fuses a bias or residual add into the product, the time lands on the add: the pair has time.
    for (a, b) in [("q", "q"), ("scores", "scores"), ("attn", "attn"), ("fc1", "fc1"), ("fc2", "res2")] {
        assert!(time(a) + time(b) > 0.0, "{a}: {json}");
    }
    // Estimating it names what no model covers instead of failing.
    let root = env!("CARGO_MANIFEST_DIR");
    let (models, collectors) = (format!("{root}/models"), format!("{root}/collectors"));
    let args = ["estimate", block, "--device", "xeon480", "--format", "json"];
    let dirs = ["--models-dir", &models, "--collectors-dir", &collectors];
    let out = perfmodel(dir.path(), &[&args[..], &dirs[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("estimate prints JSON");
    let fc1 = json["layers"].as_array().unwrap().iter().find(|l| l["name"] == "fc1").unwrap();
    assert_eq!((&fc1["type"], &fc1["predictor"]), (&serde_json::json!("matmul"), &serde_json::json!("uncovered")));
}

/// tract runs a transformer's residual adds inside the products with a constant weight that feed them, whatever
/// the other side (here the network's input), a scale of the scores inside their product, and the heads'
/// transposes inside the products that read them: the estimate plans them there (with `zen4`'s models, which
/// know the transformer layer types), and tract's own trace of the same block agrees.
#[test]
fn a_transformer_s_residual_adds_run_inside_the_products_where_tract_puts_them() {
    let dir = tempfile::tempdir().unwrap();
    // The guide's ViT-Ti block with BERT's scale of the scores after the scores' product.
    let mut net: serde_json::Value =
        serde_json::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vit_ti_block.json")))
            .unwrap();
    let layers = net["layers"].as_array_mut().unwrap();
    let at = layers.iter().position(|l| l["name"] == "scores").unwrap() + 1;
    let scale = serde_json::json!({"name": "scale", "type": "elementwise", "function": "mul", "constant_shape": []});
    layers.insert(at, scale);
    std::fs::write(dir.path().join("block.json"), net.to_string()).unwrap();
    let block = dir.path().join("block.json");
    let block = block.to_str().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let (models, collectors) = (format!("{root}/models"), format!("{root}/collectors"));
    let dirs = ["--models-dir", &models, "--collectors-dir", &collectors];
    let args = ["estimate", block, "--device", "zen4", "--uncalibrated", "--format", "json"];
    let out = perfmodel(dir.path(), &[&args[..], &dirs[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("estimate prints JSON");
    let layer = |name: &str| json["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    for (product, add) in [("proj", "res1"), ("fc2", "res2")] {
        assert_eq!(layer(add)["predictor"], format!("fused:{product}"), "{json}");
        assert!(layer(product)["predictor"].as_str().unwrap().ends_with(&format!("+add:{add}")), "{json}");
    }
    // The products read by anything else run as themselves.
    for product in ["q", "k", "v", "fc1"] {
        assert!(!layer(product)["predictor"].as_str().unwrap().contains("+add"), "{json}");
    }
    // The scale is the scores' epilogue; the heads' transposes are packed by the products reading them.
    for (layer_name, owner) in
        [("scale", "scores"), ("q_t", "scores"), ("k_t", "scores"), ("v_t", "ctx"), ("ctx_t", "proj")]
    {
        assert_eq!(layer(layer_name)["predictor"], format!("fused:{owner}"), "{json}");
    }
    let args = ["bench", block, "--rounds", "1", "--warmup", "0", "--memory-trace", "trace.csv"];
    assert!(perfmodel(dir.path(), &args).status.success());
    let trace = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let ops_of = |layer: &str| -> Vec<String> {
        let cells = |l: &str| l.split(',').map(str::to_string).collect::<Vec<_>>();
        trace.lines().map(cells).filter(|c| c[2] == layer).map(|c| c[1].clone()).collect()
    };
    for (product, add) in [("proj", "res1"), ("fc2", "res2")] {
        assert_eq!(ops_of(add), ["OptMatMul"], "{trace}");
        assert!(!ops_of(product).iter().any(|op| op == "OptMatMul"), "{trace}");
    }
    assert!(ops_of("fc1").iter().any(|op| op == "OptMatMul"), "{trace}");
    // As tract runs them: the scale's node is the scores' product, and the transposes have no node.
    assert_eq!(ops_of("scale"), ["OptMatMul"], "{trace}");
    assert!(!ops_of("scores").iter().any(|op| op == "OptMatMul"), "{trace}");
    for transpose in ["q_t", "k_t", "v_t", "ctx_t"] {
        assert!(ops_of(transpose).is_empty(), "{transpose}: {trace}");
    }
}

#[test]
fn bench_rejects_what_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let unsupported = TINY.replace(
        r#"{"name": "gap", "type": "global_avg_pool2d"}"#,
        r#"{"name": "gap", "type": "unsupported", "op_type": "LRN", "output_shape": [16]}"#,
    );
    std::fs::write(dir.path().join("u.json"), unsupported).unwrap();
    let out = perfmodel(dir.path(), &["bench", "u.json", "--rounds", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("layer 'gap'") && err.contains("'LRN'"), "{err}");

    std::fs::write(dir.path().join("tiny.json"), TINY).unwrap();
    let out = perfmodel(dir.path(), &["bench", "tiny.json", "--device", "no-such-device"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no-such-device") && err.contains("local"), "{err}");
}

/// A valid network far larger than any machine's memory is refused with a clear message before anything is
/// allocated (found in QA: it would abort on allocation failure or wake the OOM killer).
#[test]
fn bench_refuses_a_network_larger_than_memory() {
    if std::fs::read_to_string("/proc/meminfo").is_err() {
        eprintln!("SKIPPED bench_refuses_a_network_larger_than_memory: no /proc/meminfo on this system");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let giant = r#"{"name": "giant", "input_shape": [64, 50000, 50000],
      "layers": [{"name": "c", "type": "conv2d", "filters": 1, "kernel": 1}]}"#;
    std::fs::write(dir.path().join("giant.json"), giant).unwrap();
    let out = perfmodel(dir.path(), &["bench", "giant.json", "--rounds", "1"]);
    assert_refused_for_memory(&out, "giant");
}

/// `bench` refused network `name` up front for its size (exit 1, the sizes named), not inside the allocator;
/// returns the error text.
fn assert_refused_for_memory(out: &std::process::Output, name: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(name) && err.contains("GiB") && err.contains("available"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{err}");
    err
}

#[test]
fn bench_refuses_a_network_larger_than_its_address_space_limit() {
    if std::fs::read_to_string("/proc/self/status").is_err() {
        eprintln!("SKIPPED bench_refuses_a_network_larger_than_its_address_space_limit: no /proc on this system");
        return;
    }
    // 3 + 16 channels of 8000x8000: 4.5 GiB of tensors, more than a 3 GiB address space, less than this machine.
    let dir = tempfile::tempdir().unwrap();
    let big = r#"{"name": "big", "input_shape": [3, 8000, 8000],
      "layers": [{"name": "c", "type": "conv2d", "filters": 16, "kernel": 1}]}"#;
    std::fs::write(dir.path().join("big.json"), big).unwrap();
    let out = std::process::Command::new("sh")
        .current_dir(dir.path())
        .args(["-c", "ulimit -v 3145728 && exec \"$0\" bench big.json --rounds 1", env!("CARGO_BIN_EXE_perfmodel")])
        .output()
        .unwrap();
    let err = assert_refused_for_memory(&out, "big");
    // What is available is the address space left, not the machine's memory.
    let available: f64 = err.split("only ").nth(1).and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
    assert!(available <= 3.0, "{err}");
}

/// The built model holds the weights as tract packs them for this machine's kernels (what the memory models
/// count, `engine::packing`), the input and a small plan, and the node trace accounts for the run's peak.
#[test]
fn resident_memory_is_the_packed_weights_and_the_trace_finds_the_peak() {
    let dir = tempfile::tempdir().unwrap();
    let net = r#"{"name": "fc", "batch_size": 1, "input_shape": [4000],
      "layers": [{"name": "fc", "type": "dense", "units": 129, "use_bias": false}]}"#;
    std::fs::write(dir.path().join("fc.json"), net).unwrap();
    let args = ["bench", "fc.json", "--rounds", "1", "--warmup", "0", "--format", "json", "--memory-trace", "t.csv"];
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    const MIB: f64 = 1024.0 * 1024.0;
    let config = perfmodel::LayerConfig::new(
        perfmodel::layer::Op::Dense(perfmodel::layer::Dense {
            units: 129,
            use_bias: false,
            activation: perfmodel::layer::Activation::Linear,
        }),
        vec![perfmodel::layer::Shape::from_slice(&[4000])],
        1,
    );
    let packed = perfmodel::engine::packing::tract_weight_bytes(&config).unwrap() as f64 / MIB;
    let input = 4000.0 * 4.0 / MIB;
    let resident = json["total"]["resident_memory_mib"].as_f64().unwrap();
    let plan = resident - input - packed;
    assert!((0.0..0.1).contains(&plan), "resident {resident} MiB, packed weights {packed} MiB, input {input} MiB");
    let peak = json["total"]["peak_memory_mib"].as_f64().unwrap();
    assert_eq!(json["layers"][0]["peak_memory_mib"].as_f64(), Some(peak), "{json}");
    let trace = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    assert!(trace.starts_with("node,op,layer,before_mib,peak_mib,after_mib,id,inputs\n"), "{trace}");
    let highest =
        trace.lines().skip(1).map(|l| l.split(',').nth(4).unwrap().parse::<f64>().unwrap()).fold(0.0, f64::max);
    assert!((highest - peak).abs() < 1e-9, "trace peak {highest}, bench peak {peak}\n{trace}");
}

#[test]
fn a_lazy_im2col_keeps_its_offset_tables_resident_as_the_estimate_counts_them() {
    // A 3x3 convolution on a tall narrow image: too narrow for tract's direct kernel, so a lazy im2col whose
    // tables (one isize per output pixel and per input tap) are ~1 MiB, built with the plan.
    let dir = tempfile::tempdir().unwrap();
    let net = r#"{"name": "lazy", "batch_size": 1, "input_shape": [3, 2048, 64],
      "layers": [{"name": "stem", "type": "conv2d", "filters": 8, "kernel": [3,3], "use_bias": false}]}"#;
    std::fs::write(dir.path().join("lazy.json"), net).unwrap();
    let out = perfmodel(dir.path(), &["bench", "lazy.json", "--rounds", "1", "--warmup", "0", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    const MIB: f64 = 1024.0 * 1024.0;
    let network = perfmodel::Network::from_json_str(net, "lazy.json").unwrap();
    let config = network.analyze().unwrap().config(0).clone();
    let plan = perfmodel::engine::packing::tract_plan_bytes(&config);
    assert_eq!(plan, 8 * (2046 * 62 + 3 * 9), "one isize per output pixel and per input channel and tap");
    let packed = perfmodel::engine::packing::tract_weight_bytes(&config).unwrap() as f64 / MIB;
    let input = 3.0 * 2048.0 * 64.0 * 4.0 / MIB;
    let resident = json["total"]["resident_memory_mib"].as_f64().unwrap();
    let rest = resident - input - packed - plan as f64 / MIB;
    assert!(
        (0.0..0.05).contains(&rest),
        "resident {resident} MiB: input {input}, packed weights {packed}, plan tables {} MiB",
        plan as f64 / MIB
    );
}

#[test]
fn a_one_by_one_convolution_packs_its_input_as_the_estimate_counts_it() {
    // Two 1x1 convolutions on the output of a 3x3 one, each its input's only reader: over more pixels than
    // filters tract packs the input as the product's left operand (row panels aligned to the kernel's needs),
    // over fewer as its right one. The trace's packing node holds exactly that copy beside what was live.
    let dir = tempfile::tempdir().unwrap();
    let net = r#"{"name": "packs", "batch_size": 1, "input_shape": [8, 56, 56],
      "layers": [
        {"name": "c3", "type": "conv2d", "filters": 72, "kernel": [3,3], "padding": "same"},
        {"name": "few_filters", "type": "conv2d", "filters": 24, "kernel": [1,1]},
        {"name": "pool", "type": "max_pool2d", "pool_size": [8,8]},
        {"name": "many_filters", "type": "conv2d", "filters": 480, "kernel": [1,1]}]}"#;
    std::fs::write(dir.path().join("packs.json"), net).unwrap();
    let args = ["bench", "packs.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "t.csv"];
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    let network = perfmodel::Network::from_json_str(net, "packs.json").unwrap();
    let analysis = network.analyze().unwrap();
    for (i, layer, operand) in [(1, "few_filters", "pack_a"), (3, "many_filters", "pack_b")] {
        let packed = perfmodel::engine::packing::packed_input_bytes(analysis.config(i)).unwrap();
        let input = analysis.costs[i].input_elems * 4;
        assert!(packed > input, "{layer}: the packed copy {packed} B pads the {input} B input");
        let node = trace
            .lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|c| c[2] == layer && c[1] == "OptMatMulPack")
            .unwrap_or_else(|| panic!("no packing node for {layer}:\n{trace}"));
        assert!(node[0].ends_with(operand), "{layer}: {node:?}");
        let held = (node[4].parse::<f64>().unwrap() - node[3].parse::<f64>().unwrap()) * 1024.0 * 1024.0;
        // Beside the copy, the packed value's own bookkeeping: a few hundred bytes.
        assert!((held - packed as f64).abs() < 1024.0, "{layer}: the packing node held {held} B, counted {packed} B");
    }
}

/// A product with a constant weight over more rows than units keeps its weights as tract's right operand
/// (`EinSumMatMul` swaps only when the left operand has fewer rows than the right has columns), packed in the
/// right operand's column panels: the estimate's resident weights count that packing, not the left operand's.
#[test]
fn a_product_over_more_rows_than_units_keeps_its_weights_as_the_right_operand() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, k, units) = (2000usize, 3000usize, 17usize);
    let net = format!(
        r#"{{"name": "mm", "batch_size": 1, "input_shape": [{rows}, {k}],
          "layers": [{{"name": "mm", "type": "matmul", "units": {units}, "use_bias": true}}]}}"#
    );
    std::fs::write(dir.path().join("mm.json"), net).unwrap();
    let out = perfmodel(dir.path(), &["bench", "mm.json", "--rounds", "1", "--warmup", "0", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    const MIB: f64 = 1024.0 * 1024.0;
    let config = perfmodel::LayerConfig::new(
        perfmodel::layer::Op::MatMul { units: Some(units), use_bias: true },
        vec![perfmodel::layer::Shape::from_slice(&[rows, k])],
        1,
    );
    let right = perfmodel::engine::packing::right_operand_weight_bytes(&config).unwrap() as f64 / MIB;
    let left = perfmodel::engine::packing::tract_weight_bytes(&config).unwrap() as f64 / MIB;
    let input = (rows * k * 4) as f64 / MIB;
    let resident = json["total"]["resident_memory_mib"].as_f64().unwrap();
    let plan = resident - input - right;
    assert!(
        (0.0..0.03).contains(&plan),
        "resident {resident} MiB, right-operand weights {right} MiB, input {input} MiB"
    );
    // Counted as the left operand, the weights would be more than the plan holds besides them.
    assert!(left - right > 0.05, "left {left} MiB, right {right} MiB: the shapes do not tell the two apart");
    // A product over fewer rows than units is swapped: its weights are the left operand, counted as such.
    let swapped = perfmodel::LayerConfig::new(
        perfmodel::layer::Op::MatMul { units: Some(units), use_bias: true },
        vec![perfmodel::layer::Shape::from_slice(&[units - 1, k])],
        1,
    );
    assert_eq!(perfmodel::engine::packing::right_operand_weight_bytes(&swapped), None);
}

/// tract 0.23.9 runs its plan's nodes in `eval_order_opt_ram` order (tract-core `plan.rs`, `model/order.rs`):
/// from the inputs, always the ready node of the lowest id; a node that reads constants (weights) is ready only
/// once they are taken up, which happens when no other node is ready, for the waiting node with the fewest
/// constants still to take, the lowest id first. The trace's ids and inputs are enough to recompute that order,
/// and it is the trace's own. On a cell of two branches, tract packs the first branch's 1x1 convolution's input
/// as soon as it exists, runs the whole other branch (its product needs fewer constants), and only then the first
/// product: the packed copy lives through the other branch. Taken in the order of their ids alone, with the
/// constants counted as there from the start, the first product would run before the other branch.
#[test]
fn tract_runs_its_nodes_in_the_order_its_memory_saving_planner_picks() {
    let dir = tempfile::tempdir().unwrap();
    let net = r#"{"name": "cell", "batch_size": 1, "input_shape": [8, 16, 16],
      "layers": [
        {"name": "stem", "type": "conv2d", "filters": 16, "kernel": [3,3], "padding": "same", "activation": "relu"},
        {"name": "left", "type": "conv2d", "filters": 32, "kernel": [1,1], "activation": "relu", "inputs": ["stem"]},
        {"name": "pool", "type": "max_pool2d", "pool_size": [3,3], "strides": [1,1], "padding": "same", "inputs": ["stem"]},
        {"name": "right", "type": "conv2d", "filters": 32, "kernel": [1,1], "inputs": ["pool"]},
        {"name": "cat", "type": "concat", "inputs": ["left", "right"]}]}"#;
    std::fs::write(dir.path().join("cell.json"), net).unwrap();
    let args = ["bench", "cell.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "t.csv"];
    let out = perfmodel(dir.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    // id -> the ids it reads; nodes the trace does not list (constants) read nothing.
    let mut ups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    let mut traced = Vec::new();
    for line in trace.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let id: usize = cells[6].parse().unwrap();
        let inputs: Vec<usize> = cells[7].split_whitespace().map(|i| i.parse().unwrap()).collect();
        for &i in &inputs {
            ups.entry(i).or_default();
        }
        ups.insert(id, inputs);
        traced.push(id);
    }
    let mut downs: std::collections::BTreeMap<usize, Vec<usize>> = ups.keys().map(|&n| (n, Vec::new())).collect();
    for (&n, inputs) in &ups {
        for i in inputs {
            downs.get_mut(i).unwrap().push(n);
        }
    }
    let outputs: Vec<usize> = downs.iter().filter(|(_, d)| d.is_empty()).map(|(&n, _)| n).collect();
    let mut done = std::collections::BTreeSet::new();
    let mut candidates = std::collections::BTreeSet::new();
    let mut order = Vec::new();
    let mut follow =
        |n: usize, done: &mut std::collections::BTreeSet<usize>, candidates: &mut std::collections::BTreeSet<usize>| {
            order.push(n);
            done.insert(n);
            candidates.remove(&n);
            candidates.extend(downs[&n].iter().copied());
        };
    follow(traced[0], &mut done, &mut candidates);
    while !outputs.iter().all(|o| done.contains(o)) {
        let ready = candidates.iter().copied().find(|c| ups[c].iter().all(|u| done.contains(u)));
        let next = ready.unwrap_or_else(|| {
            // The constants each waiting node still needs, reached through nodes not yet run.
            let sources = |from: usize| {
                let (mut found, mut seen, mut todo) = (std::collections::BTreeSet::new(), done.clone(), vec![from]);
                seen.insert(from);
                while let Some(n) = todo.pop() {
                    if ups[&n].is_empty() {
                        found.insert(n);
                    }
                    todo.extend(ups[&n].iter().copied().filter(|u| seen.insert(*u)));
                }
                found
            };
            let fewest = candidates.iter().map(|&c| sources(c)).min_by_key(|s| s.len()).unwrap();
            *fewest.iter().next().unwrap()
        });
        follow(next, &mut done, &mut candidates);
    }
    let recomputed: Vec<usize> = order.into_iter().filter(|n| traced.contains(n)).collect();
    assert_eq!(recomputed, traced, "{trace}");
    // The left convolution's packing runs before the right branch, its product after.
    let at = |layer: &str, op: &str| {
        trace.lines().position(|l| {
            let c: Vec<&str> = l.split(',').collect();
            c[2] == layer && c[1] == op
        })
    };
    let (pack, pool, product) = (at("left", "OptMatMulPack"), at("pool", "OptMaxPool"), at("left", "OptMatMul"));
    assert!(pack < pool && pool < product, "pack {pack:?}, pool {pool:?}, product {product:?}\n{trace}");
}
