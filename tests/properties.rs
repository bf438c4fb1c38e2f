//! Property tests of what the fuzz targets (tests/fuzz, docs/fuzzing.md) check at scale: no parser a user's bytes
//! reach panics, and a network that parses is estimated without panicking, into finite, non-negative figures.
//! A few hundred cases each, so that CI runs them; the fuzzers run millions.

use perfmodel::collect::DeviceProfile;
use perfmodel::estimate::Estimator;
use perfmodel::train::store::{Manifest, ModelFile};
use perfmodel::{LayerType, Metric, Network};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::OnceLock;

fn estimator() -> &'static Estimator {
    static ESTIMATOR: OnceLock<Estimator> = OnceLock::new();
    ESTIMATOR.get_or_init(|| {
        Estimator::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models"), "xeon480-ort").expect("shipped models")
    })
}

/// Numbers a field may hold: mostly plausible sizes, sometimes zero, negative, huge or fractional.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (1i64..64).prop_map(Value::from),
        1 => Just(json!(0)),
        1 => Just(json!(-3)),
        1 => Just(json!(1u64 << 40)),
        1 => Just(json!(2.5)),
    ]
}

/// Each layer type with the fields it takes (net.json's spec), so that most generated networks parse and go on
/// to shape inference and the estimator; one layer in thirty has a key its type does not take or
/// a type that does not exist.
const TYPES: &[(&str, &[&str])] = &[
    ("conv2d", &["filters", "kernel", "strides", "dilation", "groups", "padding", "activation", "use_bias"]),
    ("depthwise_conv2d", &["depth_multiplier", "kernel", "strides", "dilation", "padding", "activation"]),
    ("dense", &["units", "activation", "use_bias"]),
    ("max_pool2d", &["pool_size", "strides", "padding"]),
    ("avg_pool2d", &["pool_size", "strides", "padding"]),
    ("global_avg_pool2d", &[]),
    ("flatten", &[]),
    ("reshape", &["target_shape"]),
    ("add", &[]),
    ("multiply", &[]),
    ("concat", &["axis"]),
    ("activation", &["function"]),
    ("batch_norm", &[]),
    ("zero_padding2d", &["padding4"]),
    ("cropping2d", &["cropping"]),
    ("dropout", &["rate"]),
    ("channel_shuffle", &["groups"]),
];

/// A value for field `name`: mostly one the field accepts, sometimes one it does not.
fn field(name: &'static str) -> BoxedStrategy<Value> {
    let small = || prop_oneof![30 => (1i64..9).prop_map(Value::from), 1 => Just(json!(0)), 1 => Just(json!(-2))];
    let pair = move || prop_oneof![30 => (1i64..6, 1i64..6).prop_map(|(a, b)| json!([a, b])), 1 => Just(json!([0, 1])), 1 => Just(json!(3))];
    match name {
        "filters" | "units" => {
            prop_oneof![30 => (1i64..96).prop_map(Value::from), 1 => Just(json!(0)), 1 => Just(json!(1u64 << 40))].boxed()
        }
        "kernel" | "strides" | "dilation" | "pool_size" => pair().boxed(),
        "groups" | "depth_multiplier" => small().boxed(),
        "padding" => prop_oneof![
            20 => prop::sample::select(&["same", "valid"][..]).prop_map(Value::from),
            1 => prop::collection::vec(0i64..3, 4).prop_map(|v| json!(v)),
            1 => Just(json!("explicit")),
        ]
        .boxed(),
        "padding4" | "cropping" => prop::collection::vec(0i64..4, 2..5).prop_map(|v| json!(v)).boxed(),
        "activation" | "function" => {
            prop_oneof![
                20 => prop::sample::select(&["relu", "linear", "hard_swish", "sigmoid", "softmax"][..]).prop_map(Value::from),
                1 => Just(json!("nope")),
            ]
            .boxed()
        }
        "use_bias" => any::<bool>().prop_map(Value::from).boxed(),
        "target_shape" => prop::collection::vec(prop_oneof![(1i64..64), Just(-1i64), Just(0i64)], 1..4).prop_map(|v| json!(v)).boxed(),
        "axis" => (-4i64..4).prop_map(Value::from).boxed(),
        "rate" => prop_oneof![20 => (0.0f64..1.0).prop_map(Value::from), 1 => Just(json!(1.5))].boxed(),
        _ => small().boxed(),
    }
}

fn layer() -> impl Strategy<Value = Value> {
    prop::sample::select(TYPES)
        .prop_flat_map(|(kind, fields)| {
            let values: Vec<BoxedStrategy<Option<Value>>> =
                fields.iter().map(|&f| prop::option::weighted(0.95, field(f)).boxed()).collect();
            // Element-wise layers and concat read two or more: the network input and earlier layers, mostly.
            let merges = matches!(kind, "add" | "multiply" | "concat");
            let inputs = prop::option::weighted(
                if merges { 0.97 } else { 0.1 },
                prop::collection::vec(prop::sample::select(&["input", "input", "l0", "l1", "l9"][..]), 1..4),
            );
            (Just((kind, fields)), values, inputs, prop::bool::weighted(1.0 / 30.0))
        })
        .prop_map(|((kind, fields), values, inputs, bogus)| {
            let mut layer = json!({ "type": kind });
            for (name, value) in fields.iter().zip(values) {
                if let Some(value) = value {
                    let key = match *name {
                        "padding4" => "padding",
                        other => other,
                    };
                    layer[key] = value;
                }
            }
            if let Some(inputs) = inputs {
                layer["inputs"] = json!(inputs);
            }
            if bogus {
                if layer.as_object().is_some_and(|o| o.len() % 2 == 0) {
                    layer["bogus_key"] = json!(1);
                } else {
                    layer["type"] = json!("no_such_layer");
                }
            }
            layer
        })
}

fn network() -> impl Strategy<Value = Value> {
    let shape = prop_oneof![
        20 => (1i64..8, 4i64..40, 4i64..40).prop_map(|(c, h, w)| vec![json!(c), json!(h), json!(w)]),
        1 => prop::collection::vec(number(), 1..4),
    ];
    (shape, prop::collection::vec(layer(), 1..6), prop_oneof![20 => 1usize..3, 1 => Just(0usize)]).prop_map(
        |(shape, layers, batch)| {
            let layers: Vec<Value> = layers
                .into_iter()
                .enumerate()
                .map(|(i, mut l)| {
                    l["name"] = json!(format!("l{i}"));
                    l
                })
                .collect();
            json!({ "name": "prop", "input_shape": shape, "batch_size": batch, "layers": layers })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_network_that_parses_is_estimated_into_finite_figures(net in network()) {
        let text = net.to_string();
        if let Ok(network) = Network::from_json_str(&text, "prop.json") {
            if let Ok(estimate) = estimator().estimate(&network) {
                let t = &estimate.total;
                prop_assert!(t.latency_ms.is_finite() && t.latency_ms >= 0.0, "{text}: {:?}", t.latency_ms);
                let peak = t.peak_memory_mib;
                prop_assert!(peak.is_finite() && peak >= 0.0, "{text}: peak {peak}");
            }
        }
    }

    #[test]
    fn no_parser_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Network::from_json_str(&text, "prop.json");
        let _ = perfmodel::data::parse_samples(Path::new("prop.csv"), &bytes);
        let _ = DeviceProfile::parse(&text, "prop", Path::new("prop.toml"));
        let _ = serde_json::from_slice::<Manifest>(&bytes);
        if let Ok(file) = ModelFile::decode(Path::new("prop.bin"), &bytes, LayerType::Conv2d, Metric::Latency) {
            let _ = file.predictor.predict(&vec![1.0; LayerType::Conv2d.feature_names().len()]);
        }
        use tract_onnx::prelude::*;
        if let Ok(proto) = tract_onnx::onnx().proto_model_for_read(&mut &bytes[..]) {
            let _ = perfmodel::onnx::import_proto(&proto, "prop.onnx", "prop", true);
        }
    }

    /// A channels-last graph (tf2onnx's, every convolution between transposes) with its permutations, axes,
    /// pads and constants' sizes damaged: sinking its transposes and importing it never panics.
    #[test]
    fn sinking_damaged_transposes_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<i64>()), 1..6)) {
        use prost::Message;
        let bytes = include_bytes!("data/tf2onnx/tiny_se_nobias_opset13_nchw.onnx");
        let mut model = tract_onnx::pb::ModelProto::decode(&bytes[..]).unwrap();
        let graph = model.graph.as_mut().unwrap();
        for (at, value) in edits {
            let n = at.index(graph.node.len());
            let node = &mut graph.node[n];
            let small = value % 9 - 4;
            match node.attribute.first_mut() {
                Some(a) if !a.ints.is_empty() => {
                    let k = value.unsigned_abs() as usize % a.ints.len();
                    a.ints[k] = small;
                }
                Some(a) => a.i = small,
                None => {
                    let k = n % graph.initializer.len();
                    let dims = &mut graph.initializer[k].dims;
                    if !dims.is_empty() {
                        let d = value.unsigned_abs() as usize % dims.len();
                        dims[d] = value % 65;
                    }
                }
            }
        }
        let _ = perfmodel::onnx::transposes::sink(graph, 13);
        let _ = perfmodel::onnx::import_proto(&model, "prop.onnx", "prop", true);
    }

    #[test]
    fn a_damaged_model_file_is_refused_or_predicts_finite_values(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let bytes = model_file_bytes();
        let mut damaged = bytes.to_vec();
        for (at, value) in flips {
            let i = at.index(damaged.len());
            damaged[i] ^= value | 1;
        }
        if let Ok(file) = ModelFile::decode(Path::new("prop.bin"), &damaged, LayerType::Dense, Metric::Latency) {
            let width = LayerType::Dense.feature_names().len();
            let y = file.predictor.predict(&vec![8.0; width]);
            prop_assert!(y >= 0.0, "{y}");
        }
    }
}

/// A real model file: the shipped xeon480-ort dense latency model.
fn model_file_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/xeon480-ort");
        let manifest: Manifest = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("manifest json");
        let entry = manifest
            .models
            .iter()
            .find(|m| m.layer_type == "dense" && m.metric == "latency")
            .expect("a dense latency model");
        std::fs::read(dir.join(&entry.file)).expect("model file")
    })
}
