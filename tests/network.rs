//! net.json shape inference, and the error for every class of bad input, through the real binary: exit code 2,
//! no panic, and stderr naming the file, the layer (name and index) and the field.

use perfmodel::Network;

mod common;
use common::perfmodel;

/// Run `perfmodel inspect bad.json` on `text`; return stderr after checking exit code 2 and no panic.
fn inspect_bad(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.json"), text).unwrap();
    let out = perfmodel(dir.path(), &["inspect", "bad.json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "expected exit code 2, stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic on user input: {stderr}");
    assert!(stderr.contains("bad.json"), "stderr does not name the file: {stderr}");
    stderr
}

/// Assert stderr names the layer (name and index) and the field.
fn names(stderr: &str, layer: &str, index: usize, field: &str) {
    let want_layer = format!("layer '{layer}' (#{index})");
    let want_field = format!("field '{field}'");
    assert!(stderr.contains(&want_layer), "stderr does not name {want_layer}: {stderr}");
    assert!(stderr.contains(&want_field), "stderr does not name {want_field}: {stderr}");
}

/// A valid two-layer prefix; `{LAST}` is replaced by the layer under test.
fn net_with(last: &str) -> String {
    format!(
        r#"{{"name": "bad", "input_shape": [3, 32, 32], "layers": [
          {{"name": "c1", "type": "conv2d", "filters": 8, "kernel": 3, "padding": "same"}},
          {{"name": "c2", "type": "conv2d", "filters": 16, "kernel": 3, "strides": 2}},
          {last}]}}"#
    )
}

const RESIDUAL: &str = r#"{"name": "res", "input_shape": [16, 28, 28], "layers": [
  {"name": "a", "type": "conv2d", "filters": 16, "kernel": 3, "padding": "same", "use_bias": false},
  {"name": "a_bn", "type": "batch_norm"},
  {"name": "a_relu", "type": "activation", "function": "relu"},
  {"name": "b", "type": "conv2d", "filters": 16, "kernel": 3, "padding": "same"},
  {"name": "sum", "type": "add", "inputs": ["b", "input"]},
  {"name": "down", "type": "conv2d", "filters": 32, "kernel": 3, "strides": 2, "padding": "same"},
  {"name": "gap", "type": "global_avg_pool2d"},
  {"name": "fc", "type": "dense", "units": 10, "activation": "softmax"}]}"#;

const CONCAT: &str = r#"{"name": "incept", "input_shape": [32, 17, 17], "layers": [
  {"name": "b1", "type": "conv2d", "filters": 64, "kernel": 1},
  {"name": "b3", "type": "conv2d", "filters": 96, "kernel": 3, "padding": "same", "inputs": ["input"]},
  {"name": "b7", "type": "conv2d", "filters": 48, "kernel": [1, 7], "padding": "same", "inputs": "input"},
  {"name": "pool", "type": "max_pool2d", "pool_size": 3, "strides": 1, "padding": "same", "inputs": ["input"]},
  {"name": "mixed", "type": "concat", "inputs": ["b1", "b3", "b7", "pool"]},
  {"name": "reduce", "type": "max_pool2d", "pool_size": 3, "strides": 2},
  {"name": "flat", "type": "flatten"}]}"#;

#[test]
fn residual_network_shapes_and_costs() {
    let net = Network::from_json_str(RESIDUAL, "res.json").unwrap();
    let a = net.analyze().unwrap();
    assert_eq!(a.output_shapes[4][..], [16, 28, 28]);
    assert!(a.input_shapes(4).iter().all(|s| s[..] == [16, 28, 28]) && a.input_shapes(4).len() == 2);
    assert_eq!(a.output_shapes[5][..], [32, 14, 14]);
    assert_eq!(a.output_shapes[7][..], [10]);
    // conv a (no bias) + bn + conv b + down + fc.
    let params = 9 * 16 * 16 + 4 * 16 + (9 * 16 * 16 + 16) + (9 * 16 * 32 + 32) + (32 * 10 + 10);
    assert_eq!(a.total_params(), params);
    assert_eq!(a.costs[4].flops, 16 * 28 * 28);
}

#[test]
fn concat_network_shapes() {
    let net = Network::from_json_str(CONCAT, "incept.json").unwrap();
    let a = net.analyze().unwrap();
    assert_eq!(a.output_shapes[4][..], [64 + 96 + 48 + 32, 17, 17]);
    assert_eq!(a.output_shapes[5][..], [240, 8, 8]);
    assert_eq!(a.output_shapes[6][..], [240 * 64]);
}

#[test]
fn inspect_reports_per_layer_rows_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("res.json"), RESIDUAL).unwrap();
    let out = perfmodel(dir.path(), &["inspect", "res.json", "--format", "json", "--batch", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["batch_size"], 4);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 8);
    assert_eq!(layers[4]["name"], "sum");
    assert_eq!(layers[4]["type"], "add");
    assert_eq!(layers[4]["output_shape"], serde_json::json!([16, 28, 28]));
    assert_eq!(layers[4]["input_elems"], 4 * 2 * 16 * 28 * 28);
    assert_eq!(layers[5]["output_elems"], 4 * 32 * 14 * 14);
    let net = Network::from_json_str(RESIDUAL, "res.json").unwrap();
    assert_eq!(v["total"]["params"], net.analyze().unwrap().total_params());
    let table = perfmodel(dir.path(), &["inspect", "res.json"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success() && text.contains("sum") && text.contains("total: 8 layers"), "{text}");
}

#[test]
fn unknown_layer_type() {
    let err = inspect_bad(&net_with(r#"{"name": "x", "type": "conv3d", "filters": 4}"#));
    names(&err, "x", 2, "type");
    assert!(err.contains("conv3d"), "{err}");
}

#[test]
fn unknown_key() {
    let err = inspect_bad(&net_with(r#"{"name": "x", "type": "conv2d", "filters": 4, "kernel": 3, "kernal": 3}"#));
    names(&err, "x", 2, "kernal");
}

#[test]
fn missing_field() {
    let err = inspect_bad(&net_with(r#"{"name": "x", "type": "conv2d", "kernel": 3}"#));
    names(&err, "x", 2, "filters");
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn shape_mismatch_at_add() {
    let err = inspect_bad(&net_with(r#"{"name": "sum", "type": "add", "inputs": ["c1", "c2"]}"#));
    names(&err, "sum", 2, "inputs");
    assert!(err.contains("shape mismatch") && err.contains("[8, 32, 32]") && err.contains("[16, 15, 15]"), "{err}");
}

#[test]
fn shape_mismatch_at_concat() {
    let err = inspect_bad(&net_with(r#"{"name": "cat", "type": "concat", "inputs": ["c1", "c2"]}"#));
    names(&err, "cat", 2, "inputs");
    assert!(err.contains("shape mismatch"), "{err}");
}

#[test]
fn kernel_larger_than_padded_input() {
    let err = inspect_bad(&net_with(r#"{"name": "big", "type": "conv2d", "filters": 4, "kernel": 17}"#));
    names(&err, "big", 2, "kernel");
    assert!(err.contains("larger than the padded input 15x15"), "{err}");
}

#[test]
fn reference_to_a_later_layer_is_a_cycle() {
    let text = r#"{"input_shape": [3, 8, 8], "layers": [
      {"name": "a", "type": "conv2d", "filters": 3, "kernel": 1, "inputs": ["b"]},
      {"name": "b", "type": "conv2d", "filters": 3, "kernel": 1, "inputs": ["a"]}]}"#;
    let err = inspect_bad(text);
    names(&err, "a", 0, "inputs");
    assert!(err.contains("'b' is layer #1"), "{err}");
}

#[test]
fn layer_consuming_itself() {
    let err = inspect_bad(&net_with(r#"{"name": "me", "type": "add", "inputs": ["c2", "me"]}"#));
    names(&err, "me", 2, "inputs");
    assert!(err.contains("cycle"), "{err}");
}

#[test]
fn reference_to_an_unknown_layer() {
    let err = inspect_bad(&net_with(r#"{"name": "sum", "type": "add", "inputs": ["c2", "c9"]}"#));
    names(&err, "sum", 2, "inputs");
    assert!(err.contains("unknown layer 'c9'"), "{err}");
}

#[test]
fn non_positive_sizes() {
    let err = inspect_bad(&net_with(r#"{"name": "zero", "type": "conv2d", "filters": 0, "kernel": 3}"#));
    names(&err, "zero", 2, "filters");
    assert!(err.contains("positive"), "{err}");
    let err = inspect_bad(&net_with(r#"{"name": "neg", "type": "dense", "units": -5}"#));
    names(&err, "neg", 2, "units");
    let err = inspect_bad(r#"{"input_shape": [3, 0, 8], "layers": [{"name": "a", "type": "flatten"}]}"#);
    assert!(err.contains("field 'input_shape'") && err.contains("positive"), "{err}");
}

#[test]
fn duplicate_names() {
    let err = inspect_bad(&net_with(r#"{"name": "c1", "type": "batch_norm"}"#));
    names(&err, "c1", 2, "name");
    assert!(err.contains("duplicate") && err.contains("#0"), "{err}");
}

#[test]
fn malformed_json() {
    let err = inspect_bad("{\"input_shape\": [3, 8, 8],\n \"layers\": [{\"name\": \"a\", \"type\": \"flatten\"},]}");
    assert!(err.contains("invalid JSON") && err.contains("line 2"), "{err}");
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = perfmodel(dir.path(), &["inspect", "nope.json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("nope.json") && !stderr.contains("panicked"), "{stderr}");
}

/// Sizes far beyond any device (each taken from a crash found in QA: u64 products of shapes overflowed) are
/// clear errors naming the field, never a panic or a wrapped count.
#[test]
fn absurd_sizes_are_errors_not_overflows() {
    const MAX: &str = "18446744073709551615"; // 2^64 - 1
    let net = |input_shape: &str, layer: &str| {
        format!(r#"{{"input_shape": {input_shape}, "layers": [{{"name": "x", {layer}}}]}}"#)
    };
    for input_shape in ["[100000, 100000, 100000]", "[9223372036854775808, 3, 3]"] {
        let err = inspect_bad(&net(input_shape, r#""type": "flatten""#));
        assert!(err.contains("field 'input_shape'") && err.contains("2^40 elements"), "{err}");
    }
    let err = inspect_bad(&format!(
        r#"{{"batch_size": {MAX}, "input_shape": [3, 8, 8], "layers": [{{"type": "conv2d", "filters": 8, "kernel": 3}}]}}"#
    ));
    assert!(err.contains("field 'batch_size'") && err.contains("2^40 elements"), "{err}");
    let cases = [
        ("[3, 8, 8]", format!(r#""type": "conv2d", "filters": {MAX}, "kernel": 3"#), "filters", "too large"),
        (
            "[3, 8, 8]",
            format!(r#""type": "conv2d", "filters": 2, "kernel": 3, "dilation": {MAX}"#),
            "dilation",
            "too large",
        ),
        (
            "[3, 8, 8]",
            format!(r#""type": "conv2d", "filters": 2, "kernel": 3, "padding": [{MAX}, 1, 1, 1]"#),
            "padding",
            "too large",
        ),
        ("[3, 8, 8]", format!(r#""type": "zero_padding2d", "padding": {MAX}"#), "padding", "too large"),
        ("[3, 8, 8]", format!(r#""type": "cropping2d", "cropping": [{MAX}, {MAX}, 0, 0]"#), "cropping", "too large"),
        (
            "[3, 8, 8]",
            r#""type": "reshape", "target_shape": [4294967296, 4294967296]"#.into(),
            "target_shape",
            "too large",
        ),
        (
            "[3, 8, 8]",
            format!(r#""type": "unsupported", "op_type": "X", "output_shape": [{MAX}, {MAX}]"#),
            "output_shape",
            "2^40",
        ),
        // Each size is allowed, their products are not.
        ("[16777216]", r#""type": "dense", "units": 16777216"#.into(), "units", "2^40 weights"),
        (
            "[1, 1048576, 1048576]",
            r#""type": "depthwise_conv2d", "kernel": 1048576, "depth_multiplier": 16777216"#.into(),
            "depth_multiplier",
            "2^40 weights",
        ),
        (
            "[1, 1048576, 1048576]",
            r#""type": "max_pool2d", "pool_size": 16777216, "strides": 1, "padding": "same""#.into(),
            "pool_size",
            "FLOP count",
        ),
        (
            "[1, 1048576, 1048576]",
            r#""type": "zero_padding2d", "padding": 16777216"#.into(),
            "padding",
            "2^40 elements",
        ),
    ];
    for (input_shape, layer, field, message) in cases {
        let err = inspect_bad(&net(input_shape, &layer));
        names(&err, "x", 0, field);
        assert!(err.contains(message), "{layer}: {err}");
    }
}

#[test]
fn batch_override_too_large_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("res.json"), RESIDUAL).unwrap();
    let out = perfmodel(dir.path(), &["inspect", "res.json", "--batch", "99999999999999999"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("res.json") && err.contains("field 'batch_size'") && !err.contains("panicked"), "{err}");
}

#[test]
fn binary_garbage_is_bad_input() {
    let err = inspect_bad("{\"name\": \"\u{0}\u{1}\", \"layers\": [".to_string().as_str());
    assert!(err.contains("invalid JSON"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.json"), b"{\"name\": \"\xff\xfe\"}").unwrap();
    let out = perfmodel(dir.path(), &["inspect", "bad.json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.json") && err.contains("not UTF-8"), "{err}");
}

#[test]
fn concat_axis_reshape_and_dense_on_an_image() {
    let err = inspect_bad(&net_with(r#"{"name": "cat", "type": "concat", "axis": 3, "inputs": ["c2", "c2"]}"#));
    names(&err, "cat", 2, "axis");
    assert!(err.contains("out of range for rank 3"), "{err}");
    let err = inspect_bad(&net_with(r#"{"name": "r", "type": "reshape", "target_shape": [7, -1]}"#));
    names(&err, "r", 2, "target_shape");
    assert!(err.contains("cannot reshape [16, 15, 15] (3600 elements)"), "{err}");
    let err = inspect_bad(&net_with(r#"{"name": "fc", "type": "dense", "units": 10}"#));
    names(&err, "fc", 2, "inputs");
    assert!(err.contains("flat [features] input") && err.contains("flatten"), "{err}");
    let err = inspect_bad(r#"{"input_shape": [3, 8, 8], "layers": []}"#);
    assert!(err.contains("field 'layers'") && err.contains("at least one layer"), "{err}");
}
