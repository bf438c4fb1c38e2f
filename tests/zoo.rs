//! The zoo: every architecture's parameter count against its published figure, export through the real binary,
//! and representative-config sampling (determinism, per-type coverage, holdout never sampled).

use perfmodel::layer::{LayerType, Op};
use perfmodel::sample::ConfigSet;
use perfmodel::{zoo, Network};
use std::collections::BTreeSet;
use std::path::Path;

mod common;
use common::perfmodel;

/// Published total parameters, typed in here independently of the constants beside the builders
/// (Keras Applications docs unless noted).
const PUBLISHED: [(&str, u64); 55] = [
    ("vgg16", 138_357_544),
    ("vgg19", 143_667_240),
    ("resnet50", 25_636_712),
    ("resnet101", 44_707_176),
    ("resnet152", 60_419_944),
    ("resnet50v2", 25_613_800),
    ("resnet101v2", 44_675_560),
    ("resnet152v2", 60_380_648),
    ("mobilenet", 4_253_864),
    ("mobilenetv2", 3_538_984),
    ("mobilenetv3small", 2_554_968),
    ("mobilenetv3large", 5_507_432),
    // torchvision's RegNets, batch norms folded as its ONNX export writes them (one bias per channel for two).
    ("regnet_x_200mf", 2_684_792),
    ("regnet_x_800mf", 7_259_656),
    ("regnet_x_1_6gf", 9_190_136),
    ("regnet_y_800mf", 6_432_512),
    ("densenet121", 8_062_504),
    ("densenet169", 14_307_880),
    ("densenet201", 20_242_984),
    ("inceptionv3", 23_851_784),
    ("inceptionresnetv2", 55_873_736),
    ("xception", 22_910_480),
    ("efficientnetb0", 5_330_571),
    ("efficientnetb1", 7_856_239),
    ("efficientnetb2", 9_177_569),
    ("efficientnetb3", 12_320_535),
    ("nasnetmobile", 5_326_716),
    // keras-squeezenet (SqueezeNet 1.1) model summary.
    ("squeezenet", 1_235_496),
    // Keras examples mnist_mlp.py.
    ("mnist_mlp", 669_706),
    // 256-1024-1024-256-64-1 with biases, by hand.
    ("tabular_mlp", 1_591_681),
    // torchvision docs.
    ("alexnet", 61_100_840),
    // Keras examples mnist_cnn.py.
    ("mnist_cnn", 1_199_882),
    // conv 3x3 16..1024 (no bias) + BN + 1x1 256 + 3x3 512 + biased 1x1 255 head, by hand.
    ("yolo_tiny_backbone", 7_874_159),
    // Placeholder row checked below to have no published figure.
    ("shufflenet_like", 0),
    // Calibration-only networks. Keras examples cifar10_cnn.py.
    ("cifar10_cnn", 1_250_858),
    // Layer lists of the papers, by hand: Mnih et al. 2013 and 2015 with 18 actions, 784-800-800-10,
    // 784-1200-1200-10, Ciresan et al. 2010's 784-2500-2000-1500-1000-500-10.
    ("dqn_2013", 680_770),
    ("dqn_nature", 1_693_362),
    ("mlp_800", 1_276_810),
    ("mlp_1200", 2_395_210),
    // Transformer encoders: the published totals (timm vit_tiny/vit_small_patch16_224, torchvision vit_b_16,
    // HuggingFace bert-base-uncased) minus what lies outside the encoder: a ViT's patch embedding, class token,
    // 197 position embeddings and 1000-class head; BERT's embeddings with their layer norm, and its pooler.
    ("vit_ti16_encoder", 5_717_416 - (147_648 + 192 + 37_824 + 193_000)),
    ("vit_s16_encoder", 22_050_664 - (295_296 + 384 + 75_648 + 385_000)),
    ("vit_b16_encoder", 86_567_656 - (590_592 + 768 + 151_296 + 769_000)),
    ("bert_base_encoder_s128", 109_482_240 - (23_837_184 + 590_592)),
    ("bert_base_encoder_s512", 109_482_240 - (23_837_184 + 590_592)),
    // BERT-small (4 blocks of 512 features): the architecture's count, 4 x (12 x 512^2 + 13 x 512).
    ("bert_small_encoder_s64", 12_609_536),
    ("bert_small_encoder_s256", 12_609_536),
    ("vit_b32_encoder", 85_056_000),
    ("bert_medium_encoder_s128", 25_219_072),
    ("ciresan_mlp", 11_972_510),
    // Ciresan et al. 2010's smaller MLPs (layer lists by hand), and Keras Applications' MobileNetV2 of width 0.5
    // and 0.75 ("Total params" of `MobileNetV2(alpha=...)` with its top; the input size changes no parameter).
    ("ciresan_mlp_3", 3_184_010),
    ("ciresan_mlp_4", 6_578_010),
    ("mobilenetv2_050_160", 1_987_224),
    ("mobilenetv2_050_224", 1_987_224),
    ("mobilenetv2_075_192", 2_663_064),
    ("bert_base_encoder_s64", 109_482_240 - (23_837_184 + 590_592)),
];

fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn every_zoo_network_matches_its_published_parameter_count_within_one_percent() {
    let entries: Vec<_> = zoo::architectures()
        .into_iter()
        .chain(zoo::holdout())
        .chain(zoo::calibration())
        .chain(zoo::transformers())
        .chain(zoo::transformer_holdout())
        .collect();
    assert!(zoo::architectures().len() >= 20);
    assert!(zoo::holdout().len() >= 4);
    let mut failures = Vec::new();
    for (name, published) in PUBLISHED {
        let entry = entries.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} missing from the zoo"));
        if published == 0 {
            assert_eq!(entry.published_params, None, "{name}");
            continue;
        }
        assert_eq!(entry.published_params, Some(published), "{name}: constant beside the builder differs");
        let counted = (entry.build)().analyze().unwrap().total_params();
        let rel = (counted as f64 - published as f64).abs() / published as f64;
        println!("{name:<20} counted {counted:>12} published {published:>12} ({:+.4} %)", 100.0 * rel);
        if rel > 0.01 {
            failures.push(format!("{name}: counted {counted}, published {published}"));
        }
    }
    assert_eq!(entries.len(), PUBLISHED.len(), "every zoo network is listed in PUBLISHED");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn export_writes_loadable_networks_and_holdouts_apart() {
    let dir = tempfile::tempdir().unwrap();
    ok(&perfmodel(dir.path(), &["zoo", "export", "-o", "out"]));
    for e in zoo::architectures() {
        let net = Network::load(dir.path().join("out").join(format!("{}.json", e.name))).unwrap();
        assert_eq!(net, (e.build)(), "{}", e.name);
    }
    // Each set in its own directory, and not in the one it must stay out of.
    let sets = [
        (zoo::holdout(), "out/holdout", "out"),
        (zoo::calibration(), "out/calibration", "out"),
        (zoo::transformers(), "out/transformers", "out"),
        (zoo::transformer_holdout(), "out/holdout/transformers", "out/transformers"),
    ];
    for (entries, written, not_in) in sets {
        for e in entries {
            let path = dir.path().join(written).join(format!("{}.json", e.name));
            assert_eq!(Network::load(&path).unwrap(), (e.build)(), "{}", e.name);
            assert!(!dir.path().join(not_in).join(format!("{}.json", e.name)).exists(), "{}", e.name);
        }
    }
    let list = ok(&perfmodel(dir.path(), &["zoo", "list"]));
    assert!(list.contains("resnet50") && list.contains("25636712") && list.contains("holdout"), "{list}");
    assert!(list.contains("vit_b16_encoder") && list.contains("transformers"), "{list}");
}

/// Export the zoo into a temp dir and sample it with `seed`; returns the dir (kept alive) and stdout.
fn sample(dir: &Path, seed: &str, out: &str, extra: &[&str]) -> String {
    if !dir.join("zoo").exists() {
        ok(&perfmodel(dir, &["zoo", "export", "-o", "zoo"]));
    }
    let mut args = vec!["zoo", "sample", "--zoo-dir", "zoo", "--seed", seed, "-o", out];
    args.extend_from_slice(extra);
    ok(&perfmodel(dir, &args))
}

#[test]
fn sampling_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path(), "5", "a.json", &[]);
    sample(dir.path(), "5", "b.json", &[]);
    sample(dir.path(), "6", "c.json", &[]);
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    assert_eq!(read("a.json"), read("b.json"));
    assert_ne!(read("a.json"), read("c.json"));
    let a = ConfigSet::load(dir.path().join("a.json")).unwrap();
    let c = ConfigSet::load(dir.path().join("c.json")).unwrap();
    assert_eq!((a.seed, c.seed), (5, 6));
    // The found part is independent of the seed; only augmentation differs.
    let found = |s: &ConfigSet| s.configs.iter().filter(|c| c.count > 0).cloned().collect::<Vec<_>>();
    assert_eq!(found(&a), found(&c));
}

#[test]
fn sample_covers_every_main_type_with_found_and_augmented_configs() {
    let dir = tempfile::tempdir().unwrap();
    let table = sample(dir.path(), "1", "configs.json", &["--batch-sizes", "1,8"]);
    let set = ConfigSet::load(dir.path().join("configs.json")).unwrap();
    assert_eq!(set.batch_sizes, vec![1, 8]);
    let count = |t: LayerType, augmented: bool| {
        set.configs.iter().filter(|c| c.config.layer_type() == t && (c.count == 0) == augmented).count()
    };
    for t in [
        LayerType::Conv2d,
        LayerType::DepthwiseConv2d,
        LayerType::Dense,
        LayerType::MaxPool2d,
        LayerType::AvgPool2d,
        LayerType::GlobalAvgPool2d,
        LayerType::Add,
        LayerType::Multiply,
        LayerType::Concat,
        LayerType::Activation,
        LayerType::BatchNorm,
    ] {
        assert!(count(t, false) > 0, "no found {t} configs");
        assert!(table.lines().any(|l| l.starts_with(t.as_str())), "{t} missing from the table:\n{table}");
    }
    for t in
        [LayerType::Conv2d, LayerType::DepthwiseConv2d, LayerType::Dense, LayerType::MaxPool2d, LayerType::AvgPool2d]
    {
        assert!(count(t, true) > 0, "no augmented {t} configs");
    }
    let conv = count(LayerType::Conv2d, false) + count(LayerType::Conv2d, true);
    assert!(set.configs.iter().all(|c| c.config.batch == 1));
    // Conv2d is the largest set, and keys are unique.
    for t in LayerType::ALL {
        assert!(count(t, false) + count(t, true) <= conv, "{t} outnumbers conv2d");
    }
    let keys: BTreeSet<String> = set.configs.iter().map(|c| c.config.key().unwrap()).collect();
    assert_eq!(keys.len(), set.configs.len());
    // Dilated variants exist, and augmented sources are labelled.
    assert!(set.configs.iter().any(|c| matches!(&c.config.op, Op::Conv2d(x) if x.dilation == [8, 8])));
    assert!(set.configs.iter().all(|c| (c.count == 0) == c.source.starts_with("augment:")));
    // A config met in many networks counts all its occurrences.
    assert!(set.configs.iter().any(|c| c.count >= 10));
}

/// The keys of every layer config of these networks.
fn config_keys(entries: &[zoo::ZooEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .flat_map(|e| {
            let net = (e.build)();
            let a = net.analyze().unwrap();
            (0..net.layers.len()).map(move |i| a.config(i).key().unwrap()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn holdout_networks_are_never_sampled() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path(), "1", "configs.json", &[]);
    let set = ConfigSet::load(dir.path().join("configs.json")).unwrap();
    let holdout: Vec<&str> = zoo::holdout().iter().map(|e| e.name).collect();
    let calibration: Vec<&str> = zoo::calibration().iter().map(|e| e.name).collect();
    for c in &set.configs {
        let net = c.source.split('/').next().unwrap();
        assert!(!holdout.contains(&net), "{} sampled from holdout", c.source);
        assert!(!calibration.contains(&net), "{} sampled from a calibration-only network", c.source);
    }
    // Layers that only holdout networks contain are absent: AlexNet's 11x11 stride-4 stem, the MNIST CNN's
    // 1x28x28 input, YOLO's leaky ReLU.
    let holdout_keys = config_keys(&zoo::holdout());
    let zoo_keys = config_keys(&zoo::architectures());
    let holdout_only: Vec<&String> = holdout_keys.difference(&zoo_keys).collect();
    assert!(holdout_only.len() > 20, "holdout networks should contain unseen configs");
    let sampled: BTreeSet<String> = set.configs.iter().map(|c| c.config.key().unwrap()).collect();
    let leaked: Vec<_> = holdout_only.iter().filter(|k| sampled.contains(k.as_str())).collect();
    println!("{} holdout-only configs, {} of them produced by augmentation", holdout_only.len(), leaked.len());
    assert!(leaked.is_empty(), "holdout-only configs in the sample: {leaked:?}");
    assert!(!set.configs.iter().any(|c| matches!(&c.config.op, Op::Conv2d(x) if x.kernel == [11, 11])));
    assert!(!set.configs.iter().any(|c| c.config.input_shapes[0][..] == [1, 28, 28]));
}

#[test]
fn layer_filter_and_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path(), "1", "dense.json", &["--layers", "dense,max_pool2d"]);
    let set = ConfigSet::load(dir.path().join("dense.json")).unwrap();
    let types: BTreeSet<LayerType> = set.configs.iter().map(|c| c.config.layer_type()).collect();
    assert_eq!(types, BTreeSet::from([LayerType::Dense, LayerType::MaxPool2d]));
    let out = perfmodel(dir.path(), &["zoo", "sample", "--zoo-dir", "zoo", "--layers", "conv3d", "-o", "x.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("conv3d"));
    assert!(!dir.path().join("x.json").exists());
    let out = perfmodel(dir.path(), &["zoo", "sample", "--zoo-dir", "missing", "-o", "x.json"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
    // A batch size no config can have (found in QA: it was written to configs.json for the collector to fail on).
    let out = perfmodel(
        dir.path(),
        &["zoo", "sample", "--zoo-dir", "zoo", "--batch-sizes", "1,99999999999999", "-o", "x.json"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("batch size 99999999999999") && err.contains("2^40") && !err.contains("panicked"), "{err}");
    assert!(!dir.path().join("x.json").exists());
}

#[test]
fn corrupt_config_set_names_file_config_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("configs.json");
    std::fs::write(
        &path,
        r#"{"seed": 1, "batch_sizes": [1], "configs": [
{"config": {"type": "dense", "units": 4, "input_shapes": [[8]]}, "source": "a/fc", "count": 1},
{"config": {"type": "conv2d", "filters": 4, "input_shapes": [[3, 8, 8]]}, "source": "b/conv", "count": 1}]}"#,
    )
    .unwrap();
    let err = ConfigSet::load(&path).unwrap_err().to_string();
    assert!(err.contains("configs.json") && err.contains("#1") && err.contains("b/conv"), "{err}");
    assert!(err.contains("config.kernel"), "{err}");
    // Sizes whose products overflow u64 (found in QA: a panic) and bytes that are not text.
    std::fs::write(
        &path,
        r#"{"seed": 1, "batch_sizes": [1], "configs": [
{"config": {"type": "dense", "units": 4, "input_shapes": [[8]], "batch_size": 18446744073709551615}, "source": "a/fc"}]}"#,
    )
    .unwrap();
    let err = ConfigSet::load(&path).unwrap_err().to_string();
    assert!(err.contains("configs.json") && err.contains("a/fc") && err.contains("config.batch_size"), "{err}");
    std::fs::write(
        &path,
        r#"{"seed": 1, "batch_sizes": [1, 99999999999999], "configs": [
{"config": {"type": "dense", "units": 4, "input_shapes": [[8]]}, "source": "a/fc"}]}"#,
    )
    .unwrap();
    let err = ConfigSet::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("field 'batch_sizes'") && err.contains("batch size 99999999999999") && err.contains("a/fc"),
        "{err}"
    );
    std::fs::write(&path, b"{\"seed\": \xff}").unwrap();
    let err = ConfigSet::load(&path).unwrap_err().to_string();
    assert!(err.contains("configs.json") && err.contains("not UTF-8"), "{err}");
}
