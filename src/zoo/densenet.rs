//! DenseNet121 / 169 / 201 (Huang et al. 2017), as in Keras Applications `densenet.py`: dense blocks of
//! BN-ReLU-1x1-BN-ReLU-3x3 units whose outputs are concatenated, separated by halving transitions.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const DENSENET121_PARAMS: u64 = 8_062_504;
pub const DENSENET169_PARAMS: u64 = 14_307_880;
pub const DENSENET201_PARAMS: u64 = 20_242_984;

pub fn densenet121() -> Network {
    densenet("densenet121", [6, 12, 24, 16])
}
pub fn densenet169() -> Network {
    densenet("densenet169", [6, 12, 32, 32])
}
pub fn densenet201() -> Network {
    densenet("densenet201", [6, 12, 48, 32])
}

fn densenet(name: &str, blocks: [usize; 4]) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    b.zero_pad("zero_padding2d", [3; 4]);
    b.conv("conv1/conv", conv(64, 7).stride(2).no_bias());
    b.bn("conv1/bn");
    b.relu("conv1/relu");
    b.zero_pad("zero_padding2d_1", [1; 4]);
    b.max_pool("pool1", 3, 2, Padding::Valid);
    for (stage, &n) in blocks.iter().enumerate() {
        for i in 1..=n {
            conv_block(&mut b, &format!("conv{}_block{i}", stage + 2));
        }
        if stage < 3 {
            transition(&mut b, &format!("pool{}", stage + 2));
        }
    }
    b.bn("bn");
    b.relu("relu");
    b.global_avg_pool("avg_pool");
    b.dense("predictions", 1000, Activation::Softmax);
    b.finish()
}

fn conv_block(b: &mut Builder, name: &str) {
    const GROWTH: usize = 32;
    let input = b.current();
    b.bn(format!("{name}_0_bn"));
    b.relu(format!("{name}_0_relu"));
    b.conv(format!("{name}_1_conv"), conv(4 * GROWTH, 1).no_bias());
    b.bn(format!("{name}_1_bn"));
    b.relu(format!("{name}_1_relu"));
    let x = b.conv(format!("{name}_2_conv"), conv(GROWTH, 3).same().no_bias());
    b.concat(format!("{name}_concat"), &[input, x]);
}

fn transition(b: &mut Builder, name: &str) {
    let channels = b.channels(&b.current());
    b.bn(format!("{name}_bn"));
    b.relu(format!("{name}_relu"));
    b.conv(format!("{name}_conv"), conv(channels / 2, 1).no_bias());
    b.avg_pool(format!("{name}_pool"), 2, 2, Padding::Valid);
}
