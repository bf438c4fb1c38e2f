//! ONNX import through the real binary, on ONNX files the tests build themselves: perfmodel networks exported
//! with `perfmodel::onnx::export_network` and serialised with prost, so the files are exactly what any ONNX
//! writer would produce.

use perfmodel::layer::{Activation, Conv2d, Dense, Op, Padding, Pool2d};
use perfmodel::onnx::export_network;
use perfmodel::{Layer, Network};
use prost::Message;
use std::path::Path;
use std::process::{Command, Output};
use tract_onnx::pb::{attribute_proto::AttributeType, AttributeProto, ModelProto};

fn perfmodel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfmodel")).current_dir(dir).args(args).output().expect("run perfmodel")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn write_model(dir: &Path, name: &str, model: &ModelProto) {
    std::fs::write(dir.join(name), model.encode_to_vec()).unwrap();
}

fn conv(filters: usize, kernel: usize, strides: usize, activation: Activation) -> Op {
    let mut c = Conv2d::new(filters, [kernel, kernel]);
    c.strides = [strides, strides];
    // For a 1x1 stride-1 kernel `same` pads nothing, and an importer cannot tell it from `valid`.
    c.padding = if kernel == 1 { Padding::Valid } else { Padding::Same };
    c.activation = activation;
    Op::Conv2d(c)
}

/// A small ResNet/Inception-like network: a residual block and a concatenating branch.
fn residual_concat() -> Network {
    let mut net = Network::new("resnet_ish", vec![3, 32, 32]);
    net.batch_size = 2;
    net.layers = vec![
        Layer::new("stem", conv(16, 3, 2, Activation::Relu)),
        Layer::new("stem_bn", Op::BatchNorm),
        Layer::new("pool", Op::MaxPool2d(Pool2d { pool_size: [3, 3], strides: [2, 2], padding: Padding::Same })),
        Layer::new("block_a", conv(16, 3, 1, Activation::Relu)),
        Layer::new("block_b", conv(16, 3, 1, Activation::Linear)),
        Layer::new("block_add", Op::Add).with_inputs(&["pool", "block_b"]),
        Layer::new("block_out", Op::Activation(Activation::Relu)),
        Layer::new("branch_1x1", conv(8, 1, 1, Activation::Relu)).with_inputs(&["block_out"]),
        Layer::new("branch_3x3", conv(8, 3, 1, Activation::Relu)).with_inputs(&["block_out"]),
        Layer::new("branch_pool", Op::AvgPool2d(Pool2d { pool_size: [3, 3], strides: [1, 1], padding: Padding::Same }))
            .with_inputs(&["block_out"]),
        Layer::new("mixed", Op::Concat { axis: 0 }).with_inputs(&["branch_1x1", "branch_3x3", "branch_pool"]),
        Layer::new("gap", Op::GlobalAvgPool2d),
        Layer::new("drop", Op::Dropout { rate: 0.5 }),
        Layer::new("logits", Op::Dense(Dense { units: 10, use_bias: true, activation: Activation::Softmax })),
    ];
    net
}

#[test]
fn import_onnx_round_trips_a_residual_concat_network() {
    let dir = tempfile::tempdir().unwrap();
    let net = residual_concat();
    write_model(dir.path(), "model.onnx", &export_network(&net).unwrap().model);
    let out = perfmodel(dir.path(), &["import-onnx", "model.onnx", "-o", "net.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let back = Network::load(dir.path().join("net.json")).unwrap();
    assert_eq!(back.to_json(), net.to_json(), "imported:\n{}", back.to_json_string());
    let (a, b) = (back.analyze().unwrap(), net.analyze().unwrap());
    assert_eq!(a.output_shapes, b.output_shapes);
    assert_eq!(a.total_params(), b.total_params());
    for i in 0..net.layers.len() {
        assert_eq!(a.config(&back, i).features().unwrap(), b.config(&net, i).features().unwrap());
    }

    // Commands taking a network read .onnx directly.
    let direct = Network::load(dir.path().join("model.onnx")).unwrap();
    assert_eq!(direct.to_json(), net.to_json());
}

/// The residual network with its `block_out` activation turned into an op perfmodel has no layer for.
fn with_foreign_op(op_type: &str) -> ModelProto {
    let mut model = export_network(&residual_concat()).unwrap().model;
    let graph = model.graph.as_mut().unwrap();
    let node = graph.node.iter_mut().find(|n| n.name == "block_out").unwrap();
    node.op_type = op_type.into();
    node.attribute =
        vec![AttributeProto { name: "size".into(), r#type: AttributeType::Int as i32, i: 3, ..Default::default() }];
    model
}

#[test]
fn unsupported_ops_are_named_or_kept_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "lrn.onnx", &with_foreign_op("LRN"));

    let out = perfmodel(dir.path(), &["import-onnx", "lrn.onnx", "-o", "net.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("lrn.onnx") && err.contains("'block_out' (LRN)"), "{err}");
    assert!(!dir.path().join("net.json").exists(), "nothing may be written on error");

    let out = perfmodel(dir.path(), &["import-onnx", "lrn.onnx", "-o", "net.json", "--allow-unsupported"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let net = Network::load(dir.path().join("net.json")).unwrap();
    let kept = net.layers.iter().find(|l| l.name == "block_out").expect("the LRN node is kept");
    assert_eq!(kept.op, Op::Unsupported { op_type: "LRN".into(), output_shape: vec![16, 8, 8] });
    assert_eq!(net.layers.len(), residual_concat().layers.len());
}

#[test]
fn unreadable_models_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junk.onnx"), b"this is not a protobuf").unwrap();
    let out = perfmodel(dir.path(), &["import-onnx", "junk.onnx", "-o", "net.json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("junk.onnx") && err.contains("not a readable ONNX model"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let out = perfmodel(dir.path(), &["import-onnx", "missing.onnx", "-o", "net.json"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("missing.onnx"), "{}", stderr(&out));

    // An op tract cannot even infer shapes for cannot be kept either: the error says so.
    write_model(dir.path(), "custom.onnx", &with_foreign_op("MyCustomOp"));
    let out = perfmodel(dir.path(), &["import-onnx", "custom.onnx", "-o", "net.json", "--allow-unsupported"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'block_out' (MyCustomOp)"), "{err}");
}
