//! SqueezeNet 1.1 (Iandola et al. 2016; the 1.1 variant from the reference Caffe model, as ported to Keras by
//! rcmalli/keras-squeezenet): fire modules of a 1x1 squeeze and concatenated 1x1 / 3x3 expands.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters of SqueezeNet 1.1 with a 1000-way classifier (keras-squeezenet model summary).
pub const SQUEEZENET_PARAMS: u64 = 1_235_496;

pub fn squeezenet() -> Network {
    let mut b = Builder::new("squeezenet", vec![3, 224, 224]);
    b.conv("conv1", conv(64, 3).stride(2).act(Activation::Relu));
    b.max_pool("pool1", 3, 2, Padding::Valid);
    fire(&mut b, 2, 16, 64);
    fire(&mut b, 3, 16, 64);
    b.max_pool("pool3", 3, 2, Padding::Valid);
    fire(&mut b, 4, 32, 128);
    fire(&mut b, 5, 32, 128);
    b.max_pool("pool5", 3, 2, Padding::Valid);
    fire(&mut b, 6, 48, 192);
    fire(&mut b, 7, 48, 192);
    fire(&mut b, 8, 64, 256);
    fire(&mut b, 9, 64, 256);
    b.dropout("drop9", 0.5);
    b.conv("conv10", conv(1000, 1).act(Activation::Relu));
    b.global_avg_pool("global_average_pooling2d");
    b.act("loss", Activation::Softmax);
    b.finish()
}

fn fire(b: &mut Builder, id: usize, squeeze: usize, expand: usize) {
    let s = b.conv(format!("fire{id}/squeeze1x1"), conv(squeeze, 1).act(Activation::Relu));
    let left = b.conv(format!("fire{id}/expand1x1"), conv(expand, 1).act(Activation::Relu));
    b.at(&s);
    let right = b.conv(format!("fire{id}/expand3x3"), conv(expand, 3).same().act(Activation::Relu));
    b.concat(format!("fire{id}/concat"), &[left, right]);
}
