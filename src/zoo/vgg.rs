//! VGG16 / VGG19 (Simonyan & Zisserman 2014), as in Keras Applications `vgg16.py` / `vgg19.py`.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const VGG16_PARAMS: u64 = 138_357_544;
pub const VGG19_PARAMS: u64 = 143_667_240;

pub fn vgg16() -> Network {
    vgg("vgg16", [2, 2, 3, 3, 3])
}

pub fn vgg19() -> Network {
    vgg("vgg19", [2, 2, 4, 4, 4])
}

fn vgg(name: &str, convs_per_block: [usize; 5]) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    for (block, (&n, filters)) in convs_per_block.iter().zip([64, 128, 256, 512, 512]).enumerate() {
        for i in 1..=n {
            b.conv(format!("block{}_conv{i}", block + 1), conv(filters, 3).same().act(Activation::Relu));
        }
        b.max_pool(format!("block{}_pool", block + 1), 2, 2, Padding::Valid);
    }
    b.flatten("flatten");
    b.dense("fc1", 4096, Activation::Relu);
    b.dense("fc2", 4096, Activation::Relu);
    b.dense("predictions", 1000, Activation::Softmax);
    b.finish()
}
