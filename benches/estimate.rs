//! How fast estimation answers, on the two paths users take: the Rust API on a 50-layer network (target: median
//! ≤ 1 ms with all metrics; measured with the layer cache off, so every layer is predicted, and again with it)
//! and the C ABI call a NAS loop makes per candidate (`pm_estimate_layers` on a small CNN, layer cache on as in
//! the library's default; the NAS example targets ≥ 10,000 networks/s including its Python side).
//!
//! Uses the trained models in `$PERFMODEL_MODELS` (default: the shipped `models/`) for `$PERFMODEL_DEVICE`
//! (default `local`), with the shipped device profiles, as `perfmodel estimate` does. The team builds with the
//! dev profile only, so run it as
//! `cargo bench --profile dev --bench estimate` (Cargo.toml builds perfmodel itself at opt-level 2 and its
//! dependencies at opt-level 3 in that profile).

use criterion::{criterion_group, criterion_main, Criterion};
use perfmodel::engine::rules::{EngineRules, OnnxRuntime};
use perfmodel::engine::GraphOptimization;
use perfmodel::estimate::Estimator;
use perfmodel::ffi::{pm_estimate_layers, pm_estimator_close, PmLayer, PmResult};
use perfmodel::layer::{Activation, Conv2d, Dense, DepthwiseConv2d, Padding};
use perfmodel::Dirs;
use perfmodel::{Layer, Network, Op};
use std::hint::black_box;
use std::path::PathBuf;

fn models() -> (PathBuf, String) {
    let dir = std::env::var_os("PERFMODEL_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")));
    let device = std::env::var("PERFMODEL_DEVICE").unwrap_or_else(|_| "local".to_string());
    (dir, device)
}

fn conv(filters: usize, kernel: usize, stride: usize, activation: Activation) -> Op {
    let mut c = Conv2d::new(filters, [kernel, kernel]);
    c.strides = [stride, stride];
    c.padding = Padding::Same;
    c.activation = activation;
    Op::Conv2d(c)
}

/// A MobileNetV2-like network of exactly 50 layers: stem, 11 inverted-residual blocks of 4 layers (expand,
/// depthwise, project, then add or batch norm), and a 5-layer head.
fn fifty_layer_network() -> Network {
    let mut net = Network::new("mobilenet_v2_like_50", vec![3, 224, 224]);
    net.layers.push(Layer::new("stem", conv(32, 3, 2, Activation::Relu6)));
    let mut channels = 32;
    let blocks = [(16, 1), (24, 2), (24, 1), (32, 2), (32, 1), (64, 2), (64, 1), (96, 1), (96, 1), (160, 2), (160, 1)];
    for (b, &(out, stride)) in blocks.iter().enumerate() {
        let input = net.layers.last().map(|l| l.name.clone()).unwrap_or_default();
        net.layers.push(Layer::new(format!("b{b}_expand"), conv(channels * 6, 1, 1, Activation::Relu6)));
        let mut dw = DepthwiseConv2d::new([3, 3]);
        dw.strides = [stride, stride];
        dw.padding = Padding::Same;
        dw.activation = Activation::Relu6;
        net.layers.push(Layer::new(format!("b{b}_dw"), Op::DepthwiseConv2d(dw)));
        net.layers.push(Layer::new(format!("b{b}_project"), conv(out, 1, 1, Activation::Linear)));
        let project = format!("b{b}_project");
        if stride == 1 && out == channels {
            net.layers.push(Layer::new(format!("b{b}_add"), Op::Add).with_inputs(&[&input, &project]));
        } else {
            net.layers.push(Layer::new(format!("b{b}_bn"), Op::BatchNorm));
        }
        channels = out;
    }
    net.layers.push(Layer::new("head_conv", conv(1280, 1, 1, Activation::Relu6)));
    net.layers.push(Layer::new("pool", Op::GlobalAvgPool2d));
    net.layers.push(Layer::new("dropout", Op::Dropout { rate: 0.2 }));
    net.layers
        .push(Layer::new("logits", Op::Dense(Dense { units: 1000, use_bias: true, activation: Activation::Linear })));
    net.layers.push(Layer::new("softmax", Op::Activation(Activation::Softmax)));
    assert_eq!(net.layers.len(), 50);
    net
}

#[path = "../tests/common/nas.rs"]
mod nas;
use nas::nas_candidate;

fn bench(c: &mut Criterion) {
    let (dir, device) = models();
    let shipped = |name: &str| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name);
    let (data, collectors) = (shipped("data"), shipped("collectors"));
    let dirs = Dirs::default().with_models(&dir).with_data(&data).with_collectors(&collectors);
    let open = || {
        Estimator::open_method("learned", &device, &dirs).unwrap_or_else(|e| {
            panic!("{e}\nthe estimate bench needs trained models: set PERFMODEL_MODELS / PERFMODEL_DEVICE")
        })
    };
    // Every layer predicted afresh, as for a network never seen: what the models cost.
    let estimator = open().with_layer_cache(false);
    let net = fifty_layer_network();
    let estimate = estimator.estimate(&net).expect("estimate the 50-layer network");
    eprintln!(
        "50-layer network on '{device}': {:.3} ms, energy {:?} mJ, peak {:.1} MiB, {} uncovered",
        estimate.total.latency_ms,
        estimate.total.energy_mj,
        estimate.total.peak_memory_mib,
        estimate.uncovered.len()
    );
    c.bench_function("estimate/50_layers", |b| b.iter(|| estimator.estimate(black_box(&net)).unwrap()));
    // ONNX Runtime's plan of the zoo's largest networks, with the NCHWc layout and the conversions it saves:
    // linear in the layers (it was quadratic once, through the layout of every batch norm's input).
    let rules = OnnxRuntime { level: GraphOptimization::All, nchwc_block: 16 };
    for name in ["densenet201", "inceptionresnetv2"] {
        let zoo_net = Network::load(shipped("zoo").join(format!("{name}.json"))).expect("a zoo network");
        let analysis = zoo_net.analyze().expect("a zoo network analyses");
        c.bench_function(&format!("plan/onnxruntime_{name}"), |b| {
            b.iter(|| {
                let plan = rules.plan(black_box(&zoo_net), &analysis);
                rules.layout_bytes_saved(&zoo_net, &analysis, &plan)
            })
        });
    }
    // The same network again with the per-thread layer cache (the default): every layer is a lookup.
    let cached = open();
    c.bench_function("estimate/50_layers_cached", |b| b.iter(|| cached.estimate(black_box(&net)).unwrap()));

    let handle = nas::open_estimator(&dir.to_string_lossy(), &device).expect("open the device through the C ABI");
    let shape = [3i64, 32, 32];
    let residual = [1i64, 3];
    let candidates: Vec<Vec<PmLayer>> =
        [8, 16, 24, 32, 48, 64].iter().flat_map(|&w| [1, 3, 5, 7].map(|k| nas_candidate(w, k, &residual))).collect();
    let mut next = 0;
    c.bench_function("ffi/pm_estimate_layers_nas_candidate", |b| {
        b.iter(|| {
            let layers = &candidates[next % candidates.len()];
            next += 1;
            let mut out = PmResult::default();
            let code =
                unsafe { pm_estimate_layers(handle, layers.as_ptr(), layers.len(), shape.as_ptr(), 3, 1, &mut out) };
            assert_eq!(code, 0);
            black_box(out)
        })
    });
    unsafe { pm_estimator_close(handle) };
}

criterion_group!(benches, bench);
criterion_main!(benches);
