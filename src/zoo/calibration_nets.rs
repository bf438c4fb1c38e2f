//! Calibration-only networks: small published networks whose dense layers are larger than a core's own cache.
//!
//! `calibrate` fits how much longer a dense layer takes inside a network than looped alone, and whether a layer
//! too large for the core's cache (L2) pays that cost in a network whose weights still fit the shared cache
//! ([`crate::estimate::calibration`]). The training architectures have only one such layer in a small network
//! (tabular_mlp's 4-MiB layer): the classifier heads of the ImageNet CNNs all sit in networks of 13 MiB and
//! more. These networks fill that gap with 2.4-19 MiB layers in 2.6-46 MiB networks, and with MobileNetV2 heads in
//! networks of 8-10 MiB of weights that write 7-17 MiB of activations: the gate compares either size
//! ([`crate::estimate::calibration::SizeBasis`]).
//!
//! They are kept out of the sampled configs (`zoo/calibration/` is never read by `zoo sample`), so adding them
//! changes no model; like the training architectures, they are never used by `validate`'s holdout.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Mnih et al. 2013 ("Playing Atari with Deep Reinforcement Learning"): 4 stacked 84x84 frames, 16 8x8/4 and
/// 32 4x4/2 ReLU convolutions, 256 hidden units, one output per action (18, the full Atari action set).
/// Parameters from the layer list: 4,112 + 8,224 + 663,808 + 4,626.
pub const DQN_2013_PARAMS: u64 = 680_770;

pub fn dqn_2013() -> Network {
    let relu = Activation::Relu;
    let mut b = Builder::new("dqn_2013", vec![4, 84, 84]);
    b.conv("conv1", conv(16, 8).stride(4).act(relu));
    b.conv("conv2", conv(32, 4).stride(2).act(relu));
    b.flatten("flatten");
    b.dense("fc", 256, relu);
    b.dense("q_values", 18, Activation::Linear);
    b.finish()
}

/// Mnih et al. 2015 (Nature, "Human-level control through deep reinforcement learning"): 32 8x8/4, 64 4x4/2
/// and 64 3x3/1 ReLU convolutions, 512 hidden units, 18 actions. Parameters from the layer list: 8,224 + 32,832
/// + 36,928 + 1,606,144 + 9,234.
pub const DQN_NATURE_PARAMS: u64 = 1_693_362;

pub fn dqn_nature() -> Network {
    let relu = Activation::Relu;
    let mut b = Builder::new("dqn_nature", vec![4, 84, 84]);
    b.conv("conv1", conv(32, 8).stride(4).act(relu));
    b.conv("conv2", conv(64, 4).stride(2).act(relu));
    b.conv("conv3", conv(64, 3).act(relu));
    b.flatten("flatten");
    b.dense("fc", 512, relu);
    b.dense("q_values", 18, Activation::Linear);
    b.finish()
}

/// The Keras example `cifar10_cnn.py`: "Total params: 1,250,858".
pub const CIFAR10_CNN_PARAMS: u64 = 1_250_858;

pub fn cifar10_cnn() -> Network {
    let relu = Activation::Relu;
    let mut b = Builder::new("cifar10_cnn", vec![3, 32, 32]);
    b.conv("conv2d", conv(32, 3).same().act(relu));
    b.conv("conv2d_1", conv(32, 3).act(relu));
    b.max_pool("max_pooling2d", 2, 2, Padding::Valid);
    b.dropout("dropout", 0.25);
    b.conv("conv2d_2", conv(64, 3).same().act(relu));
    b.conv("conv2d_3", conv(64, 3).act(relu));
    b.max_pool("max_pooling2d_1", 2, 2, Padding::Valid);
    b.dropout("dropout_1", 0.25);
    b.flatten("flatten");
    b.dense("dense", 512, relu);
    b.dropout("dropout_2", 0.5);
    b.dense("dense_1", 10, Activation::Softmax);
    b.finish()
}

/// Parameters of [`mlp_800`]: 784*800+800 + 800*800+800 + 800*10+10.
pub const MLP_800_PARAMS: u64 = 628_000 + 640_800 + 8_010;

/// The 784-800-800-10 MNIST MLP (Simard et al. 2003; the distilled student of Hinton et al. 2015).
pub fn mlp_800() -> Network {
    let mut b = Builder::new("mlp_800", vec![784]);
    b.dense("dense", 800, Activation::Relu);
    b.dense("dense_1", 800, Activation::Relu);
    b.dense("dense_2", 10, Activation::Softmax);
    b.finish()
}

/// Parameters of [`mlp_1200`]: 784*1200+1200 + 1200*1200+1200 + 1200*10+10.
pub const MLP_1200_PARAMS: u64 = 942_000 + 1_441_200 + 12_010;

/// The 784-1200-1200-10 MNIST MLP with dropout (Hinton et al. 2012; the teacher of Hinton et al. 2015).
pub fn mlp_1200() -> Network {
    let mut b = Builder::new("mlp_1200", vec![784]);
    b.dense("dense", 1200, Activation::Relu);
    b.dropout("dropout", 0.5);
    b.dense("dense_1", 1200, Activation::Relu);
    b.dropout("dropout_1", 0.5);
    b.dense("dense_2", 10, Activation::Softmax);
    b.finish()
}

/// Parameters of [`ciresan_mlp`]: 784*2500+2500 + 2500*2000+2000 + 2000*1500+1500 + 1500*1000+1000 + 1000*500+500
/// + 500*10+10.
pub const CIRESAN_MLP_PARAMS: u64 = 1_962_500 + 5_002_000 + 3_001_500 + 1_501_000 + 500_500 + 5_010;

/// The deepest of Ciresan et al. 2010's "deep, big, simple" MNIST MLPs: 2500-2000-1500-1000-500 tanh units.
pub fn ciresan_mlp() -> Network {
    ciresan("ciresan_mlp", &[2500, 2000, 1500, 1000, 500])
}

/// Parameters of [`ciresan_mlp_3`]: 784*1500+1500 + 1500*1000+1000 + 1000*500+500 + 500*10+10.
pub const CIRESAN_MLP_3_PARAMS: u64 = 1_177_500 + 1_501_000 + 500_500 + 5_010;

/// Ciresan et al. 2010's 1500-1000-500 MLP.
pub fn ciresan_mlp_3() -> Network {
    ciresan("ciresan_mlp_3", &[1500, 1000, 500])
}

/// Parameters of [`ciresan_mlp_4`]: 784*2000+2000 + 2000*1500+1500 + 1500*1000+1000 + 1000*500+500 + 500*10+10.
pub const CIRESAN_MLP_4_PARAMS: u64 = 1_570_000 + 3_001_500 + 1_501_000 + 500_500 + 5_010;

/// Ciresan et al. 2010's 2000-1500-1000-500 MLP.
pub fn ciresan_mlp_4() -> Network {
    ciresan("ciresan_mlp_4", &[2000, 1500, 1000, 500])
}

fn ciresan(name: &str, hidden: &[usize]) -> Network {
    let mut b = Builder::new(name, vec![784]);
    for (i, &units) in hidden.iter().enumerate() {
        b.dense(format!("dense_{i}"), units, Activation::Tanh);
    }
    b.dense("output", 10, Activation::Softmax);
    b.finish()
}

/// Keras Applications' MobileNetV2 of width 0.5 ("Total params: 1,987,224"), on 160x160 images.
pub const MOBILENETV2_050_PARAMS: u64 = 1_987_224;

pub fn mobilenetv2_050_160() -> Network {
    super::mobilenet::mobilenet_v2_with("mobilenetv2_050_160", 0.5, 160)
}

/// The same on 224x224 images.
pub fn mobilenetv2_050_224() -> Network {
    super::mobilenet::mobilenet_v2_with("mobilenetv2_050_224", 0.5, 224)
}

/// Keras Applications' MobileNetV2 of width 0.75 ("Total params: 2,663,064"), on 192x192 images.
pub const MOBILENETV2_075_PARAMS: u64 = 2_663_064;

pub fn mobilenetv2_075_192() -> Network {
    super::mobilenet::mobilenet_v2_with("mobilenetv2_075_192", 0.75, 192)
}
