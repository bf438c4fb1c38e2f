//! The model zoo: the architectures people deploy, written as builder code (not hand-typed JSON) so they can be
//! checked against their published parameter counts and regenerated. Sampling draws representative layer
//! configs from [`architectures`]; [`holdout`] networks are never sampled, so whole-network estimates on them
//! are an honest test of generalisation. [`calibration_nets`] networks fill the gaps in whole-network calibration and
//! are never sampled either.

pub mod builder;
mod calibration_nets;
mod densenet;
mod efficientnet;
mod holdout;
mod inception;
mod mlp;
mod mobilenet;
mod nasnet;
mod regnet;
mod resnet;
mod squeezenet;
mod transformer;
mod vgg;

use crate::error::Result;
use crate::fsio::write_atomic;
use crate::network::Network;
use std::path::{Path, PathBuf};

pub use transformer::encoder_block;

/// One zoo network: its file name, builder and published total parameter count (where one exists).
#[derive(Clone, Copy)]
pub struct ZooEntry {
    pub name: &'static str,
    pub build: fn() -> Network,
    /// Total parameters as published (Keras Applications docs unless the builder's module says otherwise),
    /// counted the Keras way: batch norm 4 per channel, separable conv = depthwise + pointwise.
    pub published_params: Option<u64>,
}

const fn entry(name: &'static str, build: fn() -> Network, params: u64) -> ZooEntry {
    ZooEntry { name, build, published_params: Some(params) }
}

/// Every architecture sampling draws from.
pub fn architectures() -> Vec<ZooEntry> {
    vec![
        entry("vgg16", vgg::vgg16, vgg::VGG16_PARAMS),
        entry("vgg19", vgg::vgg19, vgg::VGG19_PARAMS),
        entry("resnet50", resnet::resnet50, resnet::RESNET50_PARAMS),
        entry("resnet101", resnet::resnet101, resnet::RESNET101_PARAMS),
        entry("resnet152", resnet::resnet152, resnet::RESNET152_PARAMS),
        entry("resnet50v2", resnet::resnet50v2, resnet::RESNET50V2_PARAMS),
        entry("resnet101v2", resnet::resnet101v2, resnet::RESNET101V2_PARAMS),
        entry("resnet152v2", resnet::resnet152v2, resnet::RESNET152V2_PARAMS),
        entry("mobilenet", mobilenet::mobilenet, mobilenet::MOBILENET_PARAMS),
        entry("mobilenetv2", mobilenet::mobilenet_v2, mobilenet::MOBILENETV2_PARAMS),
        entry("mobilenetv3small", mobilenet::mobilenet_v3_small, mobilenet::MOBILENETV3_SMALL_PARAMS),
        entry("mobilenetv3large", mobilenet::mobilenet_v3_large, mobilenet::MOBILENETV3_LARGE_PARAMS),
        entry("densenet121", densenet::densenet121, densenet::DENSENET121_PARAMS),
        entry("densenet169", densenet::densenet169, densenet::DENSENET169_PARAMS),
        entry("densenet201", densenet::densenet201, densenet::DENSENET201_PARAMS),
        entry("inceptionv3", inception::inception_v3, inception::INCEPTIONV3_PARAMS),
        entry("inceptionresnetv2", inception::inception_resnet_v2, inception::INCEPTIONRESNETV2_PARAMS),
        entry("xception", inception::xception, inception::XCEPTION_PARAMS),
        entry("efficientnetb0", efficientnet::efficientnet_b0, efficientnet::EFFICIENTNETB0_PARAMS),
        entry("efficientnetb1", efficientnet::efficientnet_b1, efficientnet::EFFICIENTNETB1_PARAMS),
        entry("efficientnetb2", efficientnet::efficientnet_b2, efficientnet::EFFICIENTNETB2_PARAMS),
        entry("efficientnetb3", efficientnet::efficientnet_b3, efficientnet::EFFICIENTNETB3_PARAMS),
        entry("nasnetmobile", nasnet::nasnet_mobile, nasnet::NASNETMOBILE_PARAMS),
        entry("squeezenet", squeezenet::squeezenet, squeezenet::SQUEEZENET_PARAMS),
        entry("regnet_x_200mf", regnet::regnet_x_200mf, regnet::REGNET_X_200MF_PARAMS),
        entry("regnet_x_800mf", regnet::regnet_x_800mf, regnet::REGNET_X_800MF_PARAMS),
        entry("regnet_x_1_6gf", regnet::regnet_x_1_6gf, regnet::REGNET_X_1_6GF_PARAMS),
        entry("regnet_y_800mf", regnet::regnet_y_800mf, regnet::REGNET_Y_800MF_PARAMS),
        entry("mnist_mlp", mlp::mnist_mlp, mlp::MNIST_MLP_PARAMS),
        entry("tabular_mlp", mlp::tabular_mlp, mlp::TABULAR_MLP_PARAMS),
    ]
}

/// Architectures added after the shipped devices were collected: `zoo sample` takes their configs after the
/// augmentations, which draw from the others, so that every earlier config (and every device's rows of it) stays
/// and a device only measures what they add.
pub const ADDED_AFTER_AUGMENTATION: [&str; 4] =
    ["regnet_x_200mf", "regnet_x_800mf", "regnet_x_1_6gf", "regnet_y_800mf"];

/// Networks kept out of sampling, for validating whole-network estimates.
pub fn holdout() -> Vec<ZooEntry> {
    vec![
        entry("alexnet", holdout::alexnet, holdout::ALEXNET_PARAMS),
        entry("mnist_cnn", holdout::mnist_cnn, holdout::MNIST_CNN_PARAMS),
        entry("yolo_tiny_backbone", holdout::yolo_tiny_backbone, holdout::YOLO_TINY_BACKBONE_PARAMS),
        ZooEntry { name: "shufflenet_like", build: holdout::shufflenet_like, published_params: None },
    ]
}

/// Networks only `calibrate` runs (besides the architectures): small networks with dense layers larger than a
/// core's cache, see [`calibration_nets`], and a short-sequence BERT-base encoder ([`transformer::bert_base_s64`]).
/// Never sampled, never validated on.
pub fn calibration() -> Vec<ZooEntry> {
    vec![
        entry("dqn_2013", calibration_nets::dqn_2013, calibration_nets::DQN_2013_PARAMS),
        entry("dqn_nature", calibration_nets::dqn_nature, calibration_nets::DQN_NATURE_PARAMS),
        entry("cifar10_cnn", calibration_nets::cifar10_cnn, calibration_nets::CIFAR10_CNN_PARAMS),
        entry("mlp_800", calibration_nets::mlp_800, calibration_nets::MLP_800_PARAMS),
        entry("mlp_1200", calibration_nets::mlp_1200, calibration_nets::MLP_1200_PARAMS),
        entry("ciresan_mlp", calibration_nets::ciresan_mlp, calibration_nets::CIRESAN_MLP_PARAMS),
        entry("ciresan_mlp_3", calibration_nets::ciresan_mlp_3, calibration_nets::CIRESAN_MLP_3_PARAMS),
        entry("ciresan_mlp_4", calibration_nets::ciresan_mlp_4, calibration_nets::CIRESAN_MLP_4_PARAMS),
        entry("mobilenetv2_050_160", calibration_nets::mobilenetv2_050_160, calibration_nets::MOBILENETV2_050_PARAMS),
        entry("mobilenetv2_050_224", calibration_nets::mobilenetv2_050_224, calibration_nets::MOBILENETV2_050_PARAMS),
        entry("mobilenetv2_075_192", calibration_nets::mobilenetv2_075_192, calibration_nets::MOBILENETV2_075_PARAMS),
        entry("bert_base_encoder_s64", transformer::bert_base_s64, transformer::BERT_BASE_PARAMS),
    ]
}

/// Transformer encoders ([`transformer`]), in a directory of their own: the sampler draws their layer configs
/// from there (`perfmodel zoo sample --zoo-dir zoo/transformers`), and `calibrate`, which reads the zoo's own
/// directory, leaves them out until every device has models for their layer types.
pub fn transformers() -> Vec<ZooEntry> {
    vec![
        entry("vit_ti16_encoder", transformer::vit_ti16, transformer::VIT_TI16_PARAMS),
        entry("vit_s16_encoder", transformer::vit_s16, transformer::VIT_S16_PARAMS),
        entry("vit_b16_encoder", transformer::vit_b16, transformer::VIT_B16_PARAMS),
        entry("bert_base_encoder_s128", transformer::bert_base_s128, transformer::BERT_BASE_PARAMS),
        entry("bert_base_encoder_s512", transformer::bert_base_s512, transformer::BERT_BASE_PARAMS),
        entry("bert_small_encoder_s64", transformer::bert_small_s64, transformer::BERT_SMALL_PARAMS),
        entry("bert_small_encoder_s256", transformer::bert_small_s256, transformer::BERT_SMALL_PARAMS),
    ]
}

/// Transformer encoders kept out of sampling, for validating transformer estimates: another patch size (ViT-B/32's
/// 50 tokens) and another depth and width (BERT-medium), in `holdout/transformers/` so that a device without the
/// transformer layer types validates the holdout's CNNs alone.
pub fn transformer_holdout() -> Vec<ZooEntry> {
    vec![
        entry("vit_b32_encoder", transformer::vit_b32, transformer::VIT_B32_PARAMS),
        entry("bert_medium_encoder_s128", transformer::bert_medium_s128, transformer::BERT_MEDIUM_PARAMS),
    ]
}

/// Subdirectory of the holdout that holds [`transformer_holdout`].
pub const TRANSFORMER_HOLDOUT_DIR: &str = "holdout/transformers";

/// Subdirectory of the zoo that holds [`calibration_nets`] networks.
pub const CALIBRATION_DIR: &str = "calibration";

/// Subdirectory of the zoo that holds [`transformers`].
pub const TRANSFORMERS_DIR: &str = "transformers";

/// Write every architecture as `<dir>/<name>.json`, every holdout network as `<dir>/holdout/<name>.json`, every
/// calibration network as `<dir>/calibration/<name>.json`, every transformer as `<dir>/transformers/<name>.json`
/// and every transformer of the holdout as `<dir>/holdout/transformers/<name>.json`. Returns the written paths.
pub fn export(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let sets = [
        (dir.to_path_buf(), architectures()),
        (dir.join("holdout"), holdout()),
        (dir.join(CALIBRATION_DIR), calibration()),
        (dir.join(TRANSFORMERS_DIR), transformers()),
        (dir.join(TRANSFORMER_HOLDOUT_DIR), transformer_holdout()),
    ];
    for (sub, entries) in sets {
        for e in entries {
            let net = (e.build)();
            let path = sub.join(format!("{}.json", e.name));
            write_atomic(&path, net.to_json_string().as_bytes())?;
            written.push(path);
        }
    }
    Ok(written)
}
