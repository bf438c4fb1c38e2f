//! ONNX import through the real binary, on ONNX files the tests build themselves: perfmodel networks exported
//! with `perfmodel::onnx::export_network` and serialised with prost, so the files are exactly what any ONNX
//! writer would produce.

use perfmodel::layer::{Activation, Conv2d, Dense, Op, Padding, Pool2d};
use perfmodel::onnx::export_network;
use perfmodel::{Layer, Network};
use prost::Message;
use std::path::Path;
use tract_onnx::pb::{
    attribute_proto::AttributeType, AttributeProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};

mod common;
use common::{perfmodel, stderr};

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
        assert_eq!(a.config(i).features().unwrap(), b.config(i).features().unwrap());
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
    assert_eq!(
        kept.op,
        Op::Unsupported { op_type: "LRN".into(), output_shape: perfmodel::layer::Shape::from_slice(&[16, 8, 8]) }
    );
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

/// Inputs the fuzzer (tests/fuzz, docs/fuzzing.md) found panicking (inside tract; in the importer, on a scalar
/// output): each is now an error naming the file, with exit code 2 and nothing written.
#[test]
fn models_that_make_tract_panic_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    for (name, why) in [
        ("onnx_gather_panic.onnx", "tract failed while analysing"),
        ("onnx_scalar_output.onnx", "scalar (rank-0) output"),
    ] {
        std::fs::copy(fixtures.join(name), dir.path().join(name)).unwrap();
        let out = perfmodel(dir.path(), &["import-onnx", name, "-o", "net.json", "--allow-unsupported"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(name) && err.contains(why), "{name}: {err}");
        assert!(!err.contains("panicked at"), "{name}: {err}");
        assert!(!dir.path().join("net.json").exists(), "{name}: nothing may be written");
    }
}

/// A graph written the way PyTorch exports it: unnamed nodes, a symbolic batch, Clip with bound inputs, a
/// `Shape → Gather → Unsqueeze → Concat → Reshape` flatten and `MatMul + Add`.
fn pytorch_style() -> ModelProto {
    use tract_onnx::pb::tensor_proto::DataType;
    use tract_onnx::pb::tensor_shape_proto::{dimension::Value as Dim, Dimension};
    use tract_onnx::pb::{
        type_proto, GraphProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let node = |op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>| NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    };
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    };
    let int = |name: &str, i: i64| AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i,
        ..Default::default()
    };
    let floats = |name: &str, dims: &[i64]| TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        float_data: vec![0.01; dims.iter().product::<i64>() as usize],
        ..Default::default()
    };
    let int64s = |name: &str, dims: &[i64], v: &[i64]| TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Int64 as i32,
        int64_data: v.to_vec(),
        ..Default::default()
    };
    let scalar = |name: &str, v: f32| TensorProto {
        name: name.into(),
        data_type: DataType::Float as i32,
        float_data: vec![v],
        ..Default::default()
    };
    let dim = |d: Dim| Dimension { denotation: String::new(), value: Some(d) };
    let input = ValueInfoProto {
        name: "x".into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto {
                    dim: vec![
                        dim(Dim::DimParam("batch".into())),
                        dim(Dim::DimValue(3)),
                        dim(Dim::DimValue(8)),
                        dim(Dim::DimValue(8)),
                    ],
                }),
            })),
        }),
        doc_string: String::new(),
    };
    let output = ValueInfoProto { name: "probs".into(), ..Default::default() };
    let graph = GraphProto {
        name: "torch_jit".into(),
        node: vec![
            node(
                "Conv",
                &["x", "conv.weight", "conv.bias"],
                "t1",
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])],
            ),
            node("Clip", &["t1", "zero", "six"], "t2", vec![]),
            node("GlobalAveragePool", &["t2"], "t3", vec![]),
            node("Shape", &["t3"], "t4", vec![]),
            node("Gather", &["t4", "index0"], "t5", vec![int("axis", 0)]),
            node("Unsqueeze", &["t5", "axes0"], "t6", vec![]),
            node("Concat", &["t6", "minus_one"], "t7", vec![int("axis", 0)]),
            node("Reshape", &["t3", "t7"], "t8", vec![]),
            node("MatMul", &["t8", "fc.weight"], "t9", vec![]),
            node("Add", &["t9", "fc.bias"], "t10", vec![]),
            node("Softmax", &["t10"], "probs", vec![int("axis", 1)]),
        ],
        initializer: vec![
            floats("conv.weight", &[16, 3, 3, 3]),
            floats("conv.bias", &[16]),
            scalar("zero", 0.0),
            scalar("six", 6.0),
            int64s("index0", &[], &[0]),
            int64s("axes0", &[1], &[0]),
            int64s("minus_one", &[1], &[-1]),
            floats("fc.weight", &[16, 5]),
            floats("fc.bias", &[5]),
        ],
        input: vec![input],
        output: vec![output],
        ..Default::default()
    };
    ModelProto {
        ir_version: 7,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 13 }],
        graph: Some(graph),
        ..Default::default()
    }
}

#[test]
fn pytorch_style_graphs_fold_shape_chains_and_fuse() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "torch.onnx", &pytorch_style());
    let out = perfmodel(dir.path(), &["import-onnx", "torch.onnx", "-o", "net.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let net = Network::load(dir.path().join("net.json")).unwrap();
    assert_eq!((net.batch_size, net.input_shape.to_vec()), (1, vec![3, 8, 8]), "the symbolic batch becomes 1");
    let mut conv = Conv2d::new(16, [3, 3]);
    conv.strides = [2, 2];
    conv.padding = Padding::Explicit([1, 1, 1, 1]);
    conv.activation = Activation::Relu6;
    let ops: Vec<&Op> = net.layers.iter().map(|l| &l.op).collect();
    assert_eq!(
        ops,
        [
            &Op::Conv2d(conv),
            &Op::GlobalAvgPool2d,
            &Op::Dense(Dense { units: 5, use_bias: true, activation: Activation::Softmax })
        ],
        "{}",
        net.to_json_string()
    );
    // Unnamed nodes take their output tensor's name.
    assert_eq!(net.layers[0].name, "t1");
}

/// Hostile or broken files found in QA: each is a clear error naming the file, exit code 2, never a panic.
#[test]
fn hostile_models_are_clear_errors() {
    use tract_onnx::pb::{tensor_shape_proto::dimension::Value as Dim, type_proto::Value as Type};
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, model_bytes: Vec<u8>, wanted: &[&str]| {
        std::fs::write(dir.path().join(name), model_bytes).unwrap();
        let out = perfmodel(dir.path(), &["import-onnx", name, "-o", "net.json"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(name) && !err.contains("panicked"), "{err}");
        for w in wanted {
            assert!(err.contains(w), "{name}: expected '{w}' in: {err}");
        }
        assert!(!dir.path().join("net.json").exists(), "nothing may be written on error");
    };
    let good = export_network(&residual_concat()).unwrap().model;
    let bytes = good.encode_to_vec();
    check("truncated.onnx", bytes[..bytes.len() / 2].to_vec(), &["not a readable ONNX model"]);

    let mut dynamic = good.clone();
    let input = &mut dynamic.graph.as_mut().unwrap().input[0];
    let Some(Type::TensorType(t)) = input.r#type.as_mut().unwrap().value.as_mut() else { panic!("tensor input") };
    t.shape.as_mut().unwrap().dim[2].value = Some(Dim::DimParam("height".into()));
    check("dynamic.onnx", dynamic.encode_to_vec(), &["symbolic ('height')", "fixed input shape"]);
    let mut giant = good.clone();
    let input = &mut giant.graph.as_mut().unwrap().input[0];
    let Some(Type::TensorType(t)) = input.r#type.as_mut().unwrap().value.as_mut() else { panic!("tensor input") };
    for d in &mut t.shape.as_mut().unwrap().dim[2..] {
        d.value = Some(Dim::DimValue(1 << 40));
    }
    check("giant.onnx", giant.encode_to_vec(), &["input 'input'", "2^40 elements"]);

    let with_attrs = |node: &str, attrs: Vec<AttributeProto>| {
        let mut model = good.clone();
        let node = model.graph.as_mut().unwrap().node.iter_mut().find(|n| n.name == node).unwrap();
        node.attribute.retain(|a| !attrs.iter().any(|b| b.name == a.name));
        node.attribute.extend(attrs);
        model.encode_to_vec()
    };
    let with_stem_attr = |attr: AttributeProto| with_attrs("stem", vec![attr]);
    let ints = |name: &str, ints: Vec<i64>| AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints,
        ..Default::default()
    };
    let huge = 1i64 << 62;
    check(
        "pads.onnx",
        with_stem_attr(ints("pads", vec![huge, huge, huge, huge])),
        &["node 'stem' (Conv)", "'pads'", "outside"],
    );
    check(
        "strides.onnx",
        with_stem_attr(ints("strides", vec![huge, huge])),
        &["node 'stem' (Conv)", "'strides'", "outside"],
    );
    check("dilations.onnx", with_stem_attr(ints("dilations", vec![-1, 1])), &["stem", "dilations"]);
    let group = AttributeProto { name: "group".into(), r#type: AttributeType::Int as i32, i: -1, ..Default::default() };
    check("group.onnx", with_stem_attr(group), &["stem", "group"]);
    let mut flat_weights = good.clone();
    let graph = flat_weights.graph.as_mut().unwrap();
    let stem_weights = graph.node.iter().find(|n| n.name == "stem").unwrap().input[1].clone();
    let w = graph.initializer.iter_mut().find(|t| t.name == stem_weights).unwrap();
    w.dims = vec![w.dims[0], w.dims[1], w.dims[2] * w.dims[3]];
    check("flat_weights.onnx", flat_weights.encode_to_vec(), &["stem"]);
    // Sizes that arrive as constant tensors rather than attributes (opset 11 Pad).
    let mut padded = Network::new("padded", vec![3, 8, 8]);
    padded.layers = vec![Layer::new("pad", Op::ZeroPadding2d { padding: [1, 1, 1, 1] })];
    let mut pad_model = export_network(&padded).unwrap().model;
    let pads = pad_model.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name == "pad/pads").unwrap();
    pads.int64_data = vec![0, 0, i64::MAX, i64::MAX, 0, 0, i64::MAX, i64::MAX];
    check("pad_tensor.onnx", pad_model.encode_to_vec(), &["pad"]);
    let ceil =
        AttributeProto { name: "ceil_mode".into(), r#type: AttributeType::Int as i32, i: 1, ..Default::default() };
    let pool_pads = vec![ints("pads", vec![i64::MAX; 4]), ceil.clone()];
    check("pool_pads.onnx", with_attrs("pool", pool_pads), &["node 'pool' (MaxPool)", "'pads'", "outside"]);
    let pool_kernel = vec![ints("kernel_shape", vec![huge, huge]), ceil];
    check("pool_kernel.onnx", with_attrs("pool", pool_kernel), &["node 'pool' (MaxPool)", "'kernel_shape'"]);
}

/// The layers of a network without their names, inputs and biases (an exporter may fold an untrained batch
/// norm's zero shift away), as JSON.
fn layer_ops(net: &Network) -> Vec<serde_json::Value> {
    net.to_json()["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let mut l = l.clone();
            for key in ["name", "inputs", "use_bias"] {
                l.as_object_mut().unwrap().remove(key);
            }
            l
        })
        .collect()
}

/// `tests/data/torch/NAME_torchscript.onnx` and `NAME_dynamo.onnx`, imported: they must make the same layers.
/// Returns the TorchScript one and the directory.
fn both_exports(name: &str) -> (Network, std::path::PathBuf) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch");
    let script = Network::load(data.join(format!("{name}_torchscript.onnx"))).unwrap();
    let dynamo = Network::load(data.join(format!("{name}_dynamo.onnx"))).unwrap();
    assert_eq!(layer_ops(&script), layer_ops(&dynamo));
    (script, data)
}

/// `import-onnx` of `onnx` works, the shipped `zen4` device (which has the transformer types) estimates every
/// layer of the result, and tract runs it.
fn imports_estimates_and_runs(onnx: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let out = perfmodel(dir.path(), &["import-onnx", onnx.to_str().unwrap(), "-o", "net.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let root = env!("CARGO_MANIFEST_DIR");
    let (models, collectors) = (format!("{root}/models"), format!("{root}/collectors"));
    let args = ["estimate", "net.json", "--device", "zen4", "--format", "json", "--models-dir", &models];
    let out = perfmodel(dir.path(), &[&args[..], &["--collectors-dir", &collectors]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["uncovered"].as_array().unwrap().is_empty(), "{}: {json}", onnx.display());
    let out = perfmodel(dir.path(), &["bench", "net.json", "--rounds", "1", "--warmup", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// How many layers of each type `net` has.
fn type_counts(net: &Network) -> std::collections::BTreeMap<&'static str, usize> {
    let mut count = std::collections::BTreeMap::new();
    for t in layer_types(net) {
        *count.entry(t).or_default() += 1;
    }
    count
}

/// The torchvision fixture `tests/data/torch/NAME_{torchscript,dynamo}.onnx` from both exporters, which must
/// give the same layers but views (reshapes, flattens: each exporter writes its own); the TorchScript one.
fn both_exports_but_views(name: &str) -> Network {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch");
    let script = Network::load(data.join(format!("{name}_torchscript.onnx"))).unwrap();
    let dynamo = Network::load(data.join(format!("{name}_dynamo.onnx"))).unwrap();
    let working = |net: &Network| -> Vec<serde_json::Value> {
        layer_ops(net).into_iter().filter(|l| l["type"] != "reshape" && l["type"] != "flatten").collect()
    };
    assert_eq!(working(&script), working(&dynamo), "{name}");
    script
}

fn layer_types(net: &Network) -> Vec<&'static str> {
    net.layers.iter().map(|l| l.op.layer_type().as_str()).collect()
}

#[test]
fn both_pytorch_exporters_import_to_the_same_network() {
    // tests/data/torch/make_fixtures.py: a squeeze-excite block (a mean over H and W kept 1x1), torch.cat of a
    // single tensor and a mean over H and W before the classifier, written by the TorchScript exporter (opset
    // 13) and by the newer one (opset 18, axes as inputs, weights in NAME.onnx.data beside the model).
    let (script, data) = both_exports("tiny_se");
    assert_eq!(
        layer_types(&script),
        ["conv2d", "global_avg_pool2d", "reshape", "conv2d", "conv2d", "multiply", "global_avg_pool2d", "dense"]
    );
    // Run from another directory: the weights are found beside the model, not beside the caller.
    let dir = tempfile::tempdir().unwrap();
    let out = perfmodel(dir.path(), &["inspect", data.join("tiny_se_dynamo.onnx").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Without its weights file the model is refused, naming it.
    std::fs::copy(data.join("tiny_se_dynamo.onnx"), dir.path().join("alone.onnx")).unwrap();
    let out = perfmodel(dir.path(), &["inspect", "alone.onnx"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("alone.onnx"), "{}", stderr(&out));
}

#[test]
fn a_shufflenet_unit_imports_from_both_exporters_and_runs() {
    // tests/data/torch/make_fixtures.py: a channel split (Slice from TorchScript, Split from the newer
    // exporter), a branch, a concat and a channel shuffle (Reshape, Transpose, Reshape).
    let (script, data) = both_exports("tiny_shuffle");
    assert_eq!(
        layer_types(&script),
        ["conv2d", "channel_slice", "channel_slice", "conv2d", "depthwise_conv2d", "concat", "channel_shuffle"]
    );
    assert_eq!(script.layers[1].op, Op::ChannelSlice { start: 0, end: 8 });
    assert_eq!(script.layers[2].op, Op::ChannelSlice { start: 8, end: 16 });
    assert_eq!(script.layers[6].op, Op::ChannelShuffle { groups: 2 });
    // The first half goes straight to the concat, the second through the branch.
    let name = |i: usize| script.layers[i].name.clone();
    assert_eq!(script.layers[3].inputs, vec![name(2)]);
    assert_eq!(script.layers[5].inputs, vec![name(1), name(4)]);
    // The engine runs what the import made, and the estimate prices the new layers by their memory traffic.
    let dir = tempfile::tempdir().unwrap();
    let net = data.join("tiny_shuffle_dynamo.onnx");
    let out = perfmodel(dir.path(), &["bench", net.to_str().unwrap(), "--rounds", "2", "--warmup", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let est = perfmodel(dir.path(), &["estimate", net.to_str().unwrap(), "--device", "xeon480", "--format", "json"]);
    assert!(est.status.success(), "{}", stderr(&est));
    let v: serde_json::Value = serde_json::from_slice(&est.stdout).unwrap();
    for layer in v["layers"].as_array().unwrap() {
        if layer["type"] == "channel_shuffle" || layer["type"] == "channel_slice" {
            assert_eq!(layer["predictor"], "analytic:bandwidth", "{layer}");
            assert!(layer["latency_ms"].as_f64().unwrap() > 0.0, "{layer}");
        }
    }
}

/// A transformer encoder block written as PyTorch writes one (tests/data/vit_ti_block.json exported: products by
/// constant weights then an Add of the bias, the heads split by Reshape and Transpose, the products of two
/// tensors, Softmax over the keys, LayerNormalization, GELU as its erf formula) imports to the same layers, and
/// so do BERT's post-norm block and the zoo's ViT-Ti encoder.
#[test]
fn transformer_blocks_round_trip_through_onnx() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let block = Network::load(root.join("tests/data/vit_ti_block.json")).unwrap();
    let bert = perfmodel::zoo::encoder_block(64, 256, 4, false);
    let vit = Network::load(root.join("zoo/transformers/vit_ti16_encoder.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for net in [block, bert, vit] {
        write_model(dir.path(), "model.onnx", &export_network(&net).unwrap().model);
        let out = perfmodel(dir.path(), &["import-onnx", "model.onnx", "-o", "net.json"]);
        assert!(out.status.success(), "{}: {}", net.name, stderr(&out));
        let back = Network::load(dir.path().join("net.json")).unwrap();
        assert_eq!(layer_ops(&back), layer_ops(&net), "{}", net.name);
        let (a, b) = (back.analyze().unwrap(), net.analyze().unwrap());
        assert_eq!(a.output_shapes, b.output_shapes, "{}", net.name);
        assert_eq!(a.total_params(), b.total_params(), "{}", net.name);
    }
    // A transpose whose perm is no permutation, or moves the batch, is a clear error naming the file (from
    // tract's shape inference or from the mapping), never a panic.
    for perm in [vec![0, 1, 1, 3], vec![1, 0, 2, 3], vec![0, 2, 1, 9]] {
        let mut model =
            export_network(&Network::load(root.join("tests/data/vit_ti_block.json")).unwrap()).unwrap().model;
        let node = model.graph.as_mut().unwrap().node.iter_mut().find(|n| n.name == "q_t").unwrap();
        node.attribute = vec![AttributeProto {
            name: "perm".into(),
            r#type: AttributeType::Ints as i32,
            ints: perm,
            ..Default::default()
        }];
        write_model(dir.path(), "bad.onnx", &model);
        let out = perfmodel(dir.path(), &["import-onnx", "bad.onnx", "-o", "bad.json"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("bad.onnx"), "{}", stderr(&out));
        assert!(!dir.path().join("bad.json").exists());
    }
}

/// tests/data/torch/make_tiny_bert.py: HuggingFace's `BertModel` (2 layers of 64 features, 2 heads, 32 tokens),
/// written by the TorchScript exporter (opset 17, and 14) and the newer one (opset 20: GELU as one `Gelu` node,
/// an all-zero attention mask added before each softmax). Every node maps to perfmodel layers: the token lookup,
/// the embeddings' constant adds, the products, the attention scale, layer norms, GELU; tract runs the result.
#[test]
fn a_bert_encoder_from_both_exporters_imports_and_runs() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch");
    let dir = tempfile::tempdir().unwrap();
    let mut counts = Vec::new();
    for file in ["tiny_bert_torchscript.onnx", "tiny_bert_dynamo.onnx"] {
        let path = data.join(file);
        let out = perfmodel(dir.path(), &["import-onnx", path.to_str().unwrap(), "-o", "net.json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let net = Network::load(dir.path().join("net.json")).unwrap();
        assert_eq!(net.input_shape[..], [32]);
        assert_eq!(net.layers[0].op, Op::Embedding { vocab: 1000, features: 64 }, "{file}");
        let count = type_counts(&net);
        // Per layer: 4 products by a weight (query, key, value, output) and 2 of the feed-forward, 2 of two
        // tensors; layer norms after the embeddings and twice a layer.
        for (t, n) in [("embedding", 1), ("matmul", 16), ("layer_norm", 5), ("softmax", 2), ("transpose", 8)] {
            assert_eq!(count.get(t), Some(&n), "{file}: {t} in {count:?}");
        }
        assert_eq!(count.get("activation"), Some(&2), "{file}: {count:?}");
        assert!(net.layers.iter().any(|l| l.op
            == Op::Elementwise { function: perfmodel::layer::ElementwiseFn::Mul, constant_shape: Default::default() }));
        assert!(net
            .layers
            .iter()
            .any(|l| matches!(&l.op, Op::Elementwise { constant_shape, .. } if constant_shape[..] == [32, 64])));
        // The zoo's transformer device estimates every layer (the lookup by its memory traffic), and tract runs it.
        imports_estimates_and_runs(&path);
        counts.push(count);
    }
    // At opset 14 the TorchScript exporter writes each layer norm out (ReduceMean, Sub, Pow, ReduceMean, Add,
    // Sqrt, Div, Mul, Add): the same layers as at opset 17.
    let import = |file: &str, json: &str| {
        let path = data.join(file);
        let out = perfmodel(dir.path(), &["import-onnx", path.to_str().unwrap(), "-o", json]);
        assert!(out.status.success(), "{}", stderr(&out));
        Network::load(dir.path().join(json)).unwrap()
    };
    let (opset14, opset17) =
        (import("tiny_bert_torchscript14.onnx", "14.json"), import("tiny_bert_torchscript.onnx", "17.json"));
    assert_eq!(layer_ops(&opset14), layer_ops(&opset17));
    assert_eq!(opset14.layers.iter().filter(|l| matches!(l.op, Op::LayerNorm { .. })).count(), 5);
    // The newer exporter adds an (all-zero) attention mask before each softmax: 2 more constant adds.
    let (script, dynamo) = (&counts[0], &counts[1]);
    assert_eq!(dynamo["elementwise"], script["elementwise"] + 2);
    for (t, n) in script.iter().filter(|(t, _)| **t != "elementwise") {
        assert_eq!(dynamo.get(t), Some(n), "{t}: {script:?} against {dynamo:?}");
    }
}

/// tests/data/torch/make_tiny_torchvision.py: torchvision's `VisionTransformer` (2 layers of 64 features, 2 heads, 16
/// patches and a class token) from both exporters. Its `nn.MultiheadAttention` computes sequence first: the
/// exports put the batch of 1 behind the tokens, split the packed query/key/value projection with Unsqueeze,
/// Transpose, Squeeze and Gather, and bring the batch back. With a batch of 1 such tensors are taken whole per
/// sample (a free reshape where the batch moves; a transpose moving only axes of one element is a reshape too),
/// the class token's Concat with a constant is a zero padding of the token axis, and the output projection's
/// Gemm on `[tokens, features]` a product with a weight. Both exporters give the same layers but free reshapes;
/// the device with transformer models estimates every one, and tract runs the network.
#[test]
fn a_torchvision_vit_from_both_exporters_imports_and_runs() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch");
    // The newer exporter views the transposed keys once more.
    let net = both_exports_but_views("tiny_vit");
    let count = type_counts(&net);
    // Per layer: the packed projection, the output projection and the feed-forward's two products by a weight,
    // two products of two tensors; layer norms twice a layer and at the end; the class token picked at the end.
    let expected = [("matmul", 12), ("layer_norm", 5), ("softmax", 2), ("activation", 2), ("channel_slice", 7)];
    for (t, n) in expected {
        assert_eq!(count.get(t), Some(&n), "{t} in {count:?}");
    }
    let perms: Vec<&Vec<usize>> = net
        .layers
        .iter()
        .filter_map(|l| match &l.op {
            Op::Transpose { perm } => Some(perm),
            _ => None,
        })
        .collect();
    // The packed projection's q/k/v axis to the front, and the heads behind the tokens: real data movement,
    // twice each; no transpose that moves only the batch of 1.
    assert_eq!(perms.iter().filter(|p| ***p == [3, 1, 2, 0, 4]).count(), 2, "{perms:?}");
    assert_eq!(perms.iter().filter(|p| ***p == [2, 0, 1, 3]).count(), 2, "{perms:?}");
    let analysis = net.analyze().unwrap();
    let pad = net.layers.iter().position(|l| matches!(l.op, Op::ZeroPadding2d { .. })).unwrap();
    assert_eq!(net.layers[pad].op, Op::ZeroPadding2d { padding: [1, 0, 0, 0] });
    assert_eq!(analysis.output_shapes[pad][..], [1, 17, 64], "16 patches and the class token");
    imports_estimates_and_runs(&data.join("tiny_vit_torchscript.onnx"));
    // The estimate plans the attention's axis moves as tract runs them (its own trace of the imported network):
    // the heads' transposes, even through reshapes, another transpose and the scalar scales, are packed by the
    // products reading them, and the q/k/v slices are done by the transpose before them; the packed
    // projection's transpose and the patches' one run.
    let dir = tempfile::tempdir().unwrap();
    let onnx = data.join("tiny_vit_torchscript.onnx");
    assert!(perfmodel(dir.path(), &["import-onnx", onnx.to_str().unwrap(), "-o", "net.json"]).status.success());
    let root = env!("CARGO_MANIFEST_DIR");
    let (models, collectors) = (format!("{root}/models"), format!("{root}/collectors"));
    let args = ["estimate", "net.json", "--device", "zen4", "--format", "json", "--models-dir", &models];
    let out = perfmodel(dir.path(), &[&args[..], &["--collectors-dir", &collectors]].concat());
    let estimate: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let args = ["bench", "net.json", "--rounds", "1", "--warmup", "0", "--memory-trace", "trace.csv"];
    assert!(perfmodel(dir.path(), &args).status.success());
    let trace = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let has_nodes = |layer: &str| trace.lines().any(|l| l.split(',').nth(2) == Some(layer));
    let mut checked = 0;
    for layer in estimate["layers"].as_array().unwrap() {
        if layer["type"] != "transpose" && layer["type"] != "channel_slice" {
            continue;
        }
        let name = layer["name"].as_str().unwrap();
        // The class token's pick at the end is not a slice of a transposed tensor.
        if name == "/Gather/step0" {
            continue;
        }
        let folded = layer["predictor"].as_str().unwrap().starts_with("fused:");
        assert_eq!(folded, !has_nodes(name), "{name}: {}\n{trace}", layer["predictor"]);
        checked += 1;
    }
    assert_eq!(checked, 1 + 2 * (6 + 3), "the patches' transpose, and per block 6 transposes and 3 slices");
}

/// tests/data/torch/make_tiny_torchvision.py: torchvision's `ConvNeXt` in two small stages, as PyTorch exports
/// convnext_tiny: each block's layer norm over the channels between permutes to channels-last and back, its two
/// products with a weight on the channels-last tensor and GELU between them, its layer scale (a constant per
/// channel), the residual add; the newer exporter views the pooled tensor through a Gather of every index in
/// order (`as_strided`), a reshape. Both exporters give the same layers but views; the device with transformer
/// models estimates every one, and tract runs it.
#[test]
fn a_torchvision_convnext_from_both_exporters_imports_and_runs() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch");
    let count = type_counts(&both_exports_but_views("tiny_convnext"));
    let expected = [
        ("depthwise_conv2d", 2),
        ("layer_norm", 5),
        ("matmul", 4),
        ("activation", 2),
        ("elementwise", 2),
        ("add", 2),
        ("transpose", 8),
    ];
    for (t, n) in expected {
        assert_eq!(count.get(t), Some(&n), "{t} in {count:?}");
    }
    imports_estimates_and_runs(&data.join("tiny_convnext_dynamo.onnx"));
}

/// tests/data/tf2onnx/make_tf2onnx_fixtures.py: Keras models converted by tf2onnx 1.17 (TensorFlow 2.21, Keras
/// 3.15). A CNN (batch norms, ReLU6, a residual add) and squeeze-excite blocks (swish, hard sigmoid, a padded
/// strided depthwise convolution) import with the input in either layout, the batch norms tf2onnx does not fold
/// and the hard sigmoids it writes out as one layer each; a transformer block writes each layer
/// norm as TensorFlow's moments (global average pools of the sequence, Neg, Sub, the Reciprocal of a Sqrt) and
/// GELU as its tanh approximation (or with erf and a product by 1/√2): one layer each. When tf2onnx's transpose
/// optimiser gives up (a bias-less convolution before a hard sigmoid), the graph stays channels-last inside and
/// the import names the nodes it cannot map.
#[test]
fn keras_models_converted_by_tf2onnx_import() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tf2onnx");
    let count = |net: &Network, t: &str| layer_types(net).iter().filter(|x| **x == t).count();
    let nhwc = Network::load(data.join("tiny_cnn_opset13_nhwc.onnx")).unwrap();
    let nchw = Network::load(data.join("tiny_cnn_opset13_nchw.onnx")).unwrap();
    // The channels-last input is transposed once, then the layers are the same.
    assert_eq!(nhwc.layers[0].op, Op::Transpose { perm: vec![2, 0, 1] });
    assert_eq!(layer_ops(&nhwc)[1..], layer_ops(&nchw)[..]);
    // The batch norms tf2onnx leaves after the depthwise and the biased convolution (a per-channel Mul and Add)
    // are batch norms again, not element-wise layers.
    let expected = [("conv2d", 3), ("depthwise_conv2d", 1), ("batch_norm", 2), ("elementwise", 0), ("add", 1)];
    for (t, n) in expected {
        assert_eq!(count(&nchw, t), n, "{t}: {:?}", layer_types(&nchw));
    }
    let activations = |net: &Network, a: Activation| net.layers.iter().filter(|l| l.op == Op::Activation(a)).count();
    for file in ["tiny_se_opset13_nchw.onnx", "tiny_se_opset17_nhwc.onnx"] {
        let net = Network::load(data.join(file)).unwrap();
        // The written-out hard sigmoids (Add 3, Clip 0..6, Mul 1/6): two gates, and one times its input.
        assert_eq!(activations(&net, Activation::HardSigmoid), 2, "{file}: {:?}", layer_ops(&net));
        assert_eq!(activations(&net, Activation::HardSwish), 1, "{file}");
        assert_eq!((count(&net, "multiply"), count(&net, "depthwise_conv2d")), (2, 1), "{file}");
        assert_eq!((count(&net, "unsupported"), count(&net, "elementwise")), (0, 0), "{file}");
    }
    for (file, approximation) in
        [("tiny_transformer_opset17_nhwc.onnx", "tanh"), ("tiny_transformer_erf_opset13_nhwc.onnx", "erf")]
    {
        let net = Network::load(data.join(file)).unwrap();
        let norms: Vec<&Op> =
            net.layers.iter().map(|l| &l.op).filter(|op| matches!(op, Op::LayerNorm { .. })).collect();
        assert_eq!(norms, [&Op::LayerNorm { axis: -1, epsilon: 1e-6 }; 2], "{file}");
        let gelus = net.layers.iter().filter(|l| l.op == Op::Activation(Activation::Gelu)).count();
        assert_eq!(gelus, 1, "{approximation} GELU: {:?}", layer_types(&net));
        assert_eq!((count(&net, "softmax"), count(&net, "unsupported")), (1, 0), "{file}");
        imports_estimates_and_runs(&data.join(file));
    }
    // tf2onnx's transpose optimiser gave up on this one: every convolution sits between transposes, and the
    // swish, padding, squeeze-excite means and hard sigmoids run channels-last. With the transposes sunk, it imports
    // as the same model whose optimiser did not give up: the same layers but a free reshape, the batch norms folded
    // into the bias-less convolutions their biases.
    let nobias = Network::load(data.join("tiny_se_nobias_opset13_nchw.onnx")).unwrap();
    let biased = Network::load(data.join("tiny_se_opset13_nchw.onnx")).unwrap();
    let mut expected = type_counts(&biased);
    *expected.entry("reshape").or_default() += 1;
    assert_eq!(type_counts(&nobias), expected, "{:?}", layer_types(&nobias));
    let activations = |net: &Network| -> Vec<Activation> {
        net.layers
            .iter()
            .filter_map(|l| match &l.op {
                Op::Activation(a) => Some(*a),
                Op::Conv2d(c) => Some(c.activation),
                _ => None,
            })
            .collect()
    };
    assert_eq!(activations(&nobias), activations(&biased));
    imports_estimates_and_runs(&data.join("tiny_se_nobias_opset13_nchw.onnx"));
}

/// Runs `model` with tract on a fixed input (the one input's declared shape) and returns its outputs.
fn run_with_tract(model: &ModelProto) -> Vec<Vec<f32>> {
    use tract_onnx::prelude::*;
    let plan =
        tract_onnx::onnx().model_for_proto_model(model).unwrap().into_optimized().unwrap().into_runnable().unwrap();
    let input = &model.graph.as_ref().unwrap().input[0];
    let Some(tract_onnx::pb::type_proto::Value::TensorType(t)) = &input.r#type.as_ref().unwrap().value else {
        panic!("no tensor input")
    };
    let dims: Vec<usize> = t
        .shape
        .as_ref()
        .unwrap()
        .dim
        .iter()
        .map(|d| match d.value {
            Some(tract_onnx::pb::tensor_shape_proto::dimension::Value::DimValue(v)) => v as usize,
            _ => 1,
        })
        .collect();
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
    let x = tract_ndarray::ArrayD::from_shape_vec(dims, values).unwrap();
    let outputs = plan.run(tvec!(Tensor::from(x).into())).unwrap();
    outputs.iter().map(|o| o.to_plain_array_view::<f32>().unwrap().iter().copied().collect()).collect()
}

fn assert_same_outputs(a: &[Vec<f32>], b: &[Vec<f32>], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "{what}");
        let worst = x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-5 * (1.0 + x.iter().fold(0.0f32, |m, v| m.max(v.abs()))), "{what}: differ by {worst}");
    }
}

fn transposes_in(model: &ModelProto) -> usize {
    model.graph.as_ref().unwrap().node.iter().filter(|n| n.op_type == "Transpose").count()
}

/// A model of one `[1, 3, 4, 5]` input and `nodes` (the last one's output `y` the model's output), with
/// `constants` (name, dims, values as f32 or, for int64 tensors, values given as `i64`).
fn small_model(
    opset: i64,
    nodes: Vec<NodeProto>,
    floats: &[(&str, &[i64], &[f32])],
    ints: &[(&str, &[i64])],
) -> ModelProto {
    use tract_onnx::pb::tensor_shape_proto::{dimension::Value as Dim, Dimension};
    use tract_onnx::pb::{type_proto, GraphProto, OperatorSetIdProto, TensorShapeProto, TypeProto};
    let input = ValueInfoProto {
        name: "x".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: [1, 3, 4, 5]
                        .iter()
                        .map(|&d| Dimension { value: Some(Dim::DimValue(d)), ..Default::default() })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut initializer: Vec<TensorProto> = floats
        .iter()
        .map(|(name, dims, values)| TensorProto {
            name: name.to_string(),
            dims: dims.to_vec(),
            data_type: 1,
            float_data: values.to_vec(),
            ..Default::default()
        })
        .collect();
    initializer.extend(ints.iter().map(|(name, values)| TensorProto {
        name: name.to_string(),
        dims: vec![values.len() as i64],
        data_type: 7,
        int64_data: values.to_vec(),
        ..Default::default()
    }));
    ModelProto {
        ir_version: 7,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
        graph: Some(GraphProto {
            name: "small".into(),
            node: nodes,
            initializer,
            input: vec![input],
            output: vec![ValueInfoProto { name: "y".into(), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attributes: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: output.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute: attributes,
        ..Default::default()
    }
}

fn ints_attr(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Ints as i32, ints: ints.to_vec(), ..Default::default() }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Int as i32, i, ..Default::default() }
}

/// Sinking a channels-last island's transposes keeps what the graph computes: tract runs the file as converted and
/// as rewritten to the same outputs, through a per-channel add, a scalar product, a padding (pads as an input and,
/// before opset 11, as an attribute), a concat, a reduction keeping its axes and one dropping them, and a
/// transpose that cancels. Where the transposes would not meet (a product with a weight), or a constant's data
/// would have to move, the graph is left as it is.
#[test]
fn sunk_transposes_compute_the_same() {
    let to_nhwc = || ints_attr("perm", &[0, 2, 3, 1]);
    let to_nchw = || ints_attr("perm", &[0, 3, 1, 2]);
    let island = small_model(
        13,
        vec![
            node("Transpose", &["x"], "t", vec![to_nhwc()]),
            node("Add", &["t", "bias"], "a", vec![]),
            node("Mul", &["a", "half"], "m", vec![]),
            node("Pad", &["m", "pads"], "p", vec![]),
            node("Concat", &["p", "p"], "c", vec![int_attr("axis", -1)]),
            node("Relu", &["c"], "r", vec![]),
            node("ReduceMax", &["r"], "rm", vec![ints_attr("axes", &[1]), int_attr("keepdims", 1)]),
            node("Transpose", &["rm"], "y", vec![to_nchw()]),
        ],
        &[("bias", &[3], &[0.5, -1.0, 2.0]), ("half", &[], &[0.5])],
        &[("pads", &[0, 1, 0, 0, 0, 0, 2, 0])],
    );
    let means = small_model(
        13,
        vec![
            node("Transpose", &["x"], "t", vec![to_nhwc()]),
            node("Sigmoid", &["t"], "s", vec![]),
            node("Mul", &["t", "s"], "sw", vec![]),
            node("ReduceMean", &["sw"], "y", vec![ints_attr("axes", &[1, 2]), int_attr("keepdims", 0)]),
        ],
        &[],
        &[],
    );
    let old_pad = small_model(
        10,
        vec![
            node("Transpose", &["x"], "t", vec![to_nhwc()]),
            node("Pad", &["t"], "p", vec![ints_attr("pads", &[0, 2, 1, 0, 0, 0, 3, 0])]),
            node("Transpose", &["p"], "y", vec![to_nchw()]),
        ],
        &[],
        &[],
    );
    for (what, model) in [("island", &island), ("means", &means), ("opset 10 pad", &old_pad)] {
        let rewritten =
            perfmodel::onnx::transposes::sink_model(model).unwrap_or_else(|| panic!("{what}: nothing sunk"));
        assert_eq!(transposes_in(&rewritten), 0, "{what}: {:?}", rewritten.graph.as_ref().unwrap().node);
        assert_same_outputs(&run_with_tract(model), &run_with_tract(&rewritten), what);
    }
    // A product with a weight does not care for the transpose's company: nothing to gain.
    let product = small_model(
        13,
        vec![node("Transpose", &["x"], "t", vec![to_nhwc()]), node("MatMul", &["t", "w"], "y", vec![])],
        &[("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        &[],
    );
    assert!(perfmodel::onnx::transposes::sink_model(&product).is_none());
    // A `[W, C]` constant would be `[C, 1, W]` channel-first: its data would move. Left as it is.
    let moving: Vec<f32> = (0..15).map(|v| v as f32).collect();
    let reordering = small_model(
        13,
        vec![
            node("Transpose", &["x"], "t", vec![to_nhwc()]),
            node("Add", &["t", "wc"], "a", vec![]),
            node("Transpose", &["a"], "y", vec![to_nchw()]),
        ],
        &[("wc", &[5, 3], &moving)],
        &[],
    );
    assert!(perfmodel::onnx::transposes::sink_model(&reordering).is_none());
    // The converter's own file: every transpose sunk away, the same outputs.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tf2onnx/tiny_se_nobias_opset13_nchw.onnx");
    let file = ModelProto::decode(&*std::fs::read(data).unwrap()).unwrap();
    let rewritten = perfmodel::onnx::transposes::sink_model(&file).unwrap();
    assert_eq!(transposes_in(&file), 17);
    // One transpose stays: it moves only axes of one element (a free reshape), and its input is a reshape.
    assert!(transposes_in(&rewritten) <= 1, "{:?}", rewritten.graph.as_ref().unwrap().node);
    assert_same_outputs(&run_with_tract(&file), &run_with_tract(&rewritten), "tiny_se_nobias");
}

/// One token of a sequence (a `Gather` of a constant index on the first axis after the batch: BERT's pooler, a
/// ViT's class token) imports as a slice of that axis and a reshape that drops it, and tract runs it.
#[test]
fn one_token_of_a_sequence_imports_as_a_slice_and_runs() {
    let mut net = Network::new("pick", vec![8, 16]);
    net.layers = vec![Layer::new("fc", Op::MatMul { units: Some(16), use_bias: true })];
    let mut model = export_network(&net).unwrap().model;
    let graph = model.graph.as_mut().unwrap();
    let produced = graph.output[0].name.clone();
    let index = TensorProto { name: "index".into(), data_type: 7, int64_data: vec![-1], ..Default::default() };
    graph.initializer.push(index);
    let axis = AttributeProto { name: "axis".into(), r#type: AttributeType::Int as i32, i: 1, ..Default::default() };
    graph.node.push(NodeProto {
        name: "pick".into(),
        op_type: "Gather".into(),
        input: vec![produced, "index".into()],
        output: vec!["token".into()],
        attribute: vec![axis],
        ..Default::default()
    });
    graph.output[0] = ValueInfoProto { name: "token".into(), ..Default::default() };
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "pick.onnx", &model);
    let out = perfmodel(dir.path(), &["import-onnx", "pick.onnx", "-o", "net.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let back = Network::load(dir.path().join("net.json")).unwrap();
    assert_eq!(layer_types(&back), ["matmul", "channel_slice", "reshape"]);
    // The last token (index -1 of 8).
    assert_eq!(back.layers[1].op, Op::ChannelSlice { start: 7, end: 8 });
    assert_eq!(back.analyze().unwrap().output_shapes[2][..], [16]);
    let out = perfmodel(dir.path(), &["bench", "net.json", "--rounds", "1", "--warmup", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
