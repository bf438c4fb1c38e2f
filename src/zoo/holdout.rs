//! Holdout networks: never sampled, so estimating them tests how well per-layer models generalise to
//! architectures (and layer configs) the collector never saw.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Conv2d, Padding};
use crate::network::Network;

/// torchvision AlexNet (Krizhevsky et al. 2012, single-GPU variant): 61,100,840 parameters (torchvision docs).
pub const ALEXNET_PARAMS: u64 = 61_100_840;

pub fn alexnet() -> Network {
    let relu = Activation::Relu;
    let mut b = Builder::new("alexnet", vec![3, 224, 224]);
    b.conv("conv1", conv(64, 11).stride(4).padding(Padding::Explicit([2; 4])).act(relu));
    b.max_pool("pool1", 3, 2, Padding::Valid);
    b.conv("conv2", conv(192, 5).padding(Padding::Explicit([2; 4])).act(relu));
    b.max_pool("pool2", 3, 2, Padding::Valid);
    b.conv("conv3", conv(384, 3).padding(Padding::Explicit([1; 4])).act(relu));
    b.conv("conv4", conv(256, 3).padding(Padding::Explicit([1; 4])).act(relu));
    b.conv("conv5", conv(256, 3).padding(Padding::Explicit([1; 4])).act(relu));
    b.max_pool("pool5", 3, 2, Padding::Valid);
    b.flatten("flatten");
    b.dropout("dropout1", 0.5);
    b.dense("fc6", 4096, relu);
    b.dropout("dropout2", 0.5);
    b.dense("fc7", 4096, relu);
    b.dense("fc8", 1000, Activation::Softmax);
    b.finish()
}

/// Keras `mnist_cnn.py` example: "Total params: 1,199,882".
pub const MNIST_CNN_PARAMS: u64 = 1_199_882;

pub fn mnist_cnn() -> Network {
    let mut b = Builder::new("mnist_cnn", vec![1, 28, 28]);
    b.conv("conv2d", conv(32, 3).act(Activation::Relu));
    b.conv("conv2d_1", conv(64, 3).act(Activation::Relu));
    b.max_pool("max_pooling2d", 2, 2, Padding::Valid);
    b.dropout("dropout", 0.25);
    b.flatten("flatten");
    b.dense("dense", 128, Activation::Relu);
    b.dropout("dropout_1", 0.5);
    b.dense("dense_1", 10, Activation::Softmax);
    b.finish()
}

/// The Darknet backbone of YOLOv3-tiny (Redmon & Farhadi 2018) at 416x416: 3x3 convolutions with batch norm and
/// leaky ReLU, max pooling, then the 1x1 / 3x3 head of the first detection scale (255 = 3 x (80 + 5) outputs).
pub fn yolo_tiny_backbone() -> Network {
    let mut b = Builder::new("yolo_tiny_backbone", vec![3, 416, 416]);
    let mut n = 0;
    let mut conv_bn = |b: &mut Builder, filters: usize, k: usize| {
        n += 1;
        b.conv(format!("conv{n}"), conv(filters, k).same().no_bias());
        b.bn(format!("bn{n}"));
        b.act(format!("leaky{n}"), Activation::LeakyRelu)
    };
    for (i, filters) in [16, 32, 64, 128, 256].into_iter().enumerate() {
        conv_bn(&mut b, filters, 3);
        b.max_pool(format!("pool{}", i + 1), 2, 2, Padding::Valid);
    }
    conv_bn(&mut b, 512, 3);
    b.max_pool("pool6", 2, 1, Padding::Same);
    conv_bn(&mut b, 1024, 3);
    conv_bn(&mut b, 256, 1);
    conv_bn(&mut b, 512, 3);
    b.conv("detect1", conv(255, 1));
    b.finish()
}

/// Parameters of [`yolo_tiny_backbone`] as computed from its layer list (3x3 / 1x1 convolutions without bias,
/// batch norm 4 per channel, a biased 1x1 detection convolution).
pub const YOLO_TINY_BACKBONE_PARAMS: u64 = 7_874_159;

/// A ShuffleNet-v1-like network (Zhang et al. 2018, groups = 3): grouped 1x1 convolutions around a depthwise 3x3,
/// with stride-2 units concatenating an average-pooled shortcut. Channel shuffle is a pure permutation and is
/// left out: the network predates the `channel_shuffle` layer, and stays as every device was validated on it.
pub fn shufflenet_like() -> Network {
    let mut b = Builder::new("shufflenet_like", vec![3, 224, 224]);
    b.conv("conv1", conv(24, 3).stride(2).same().no_bias());
    b.bn("conv1_bn");
    b.relu("conv1_relu");
    b.max_pool("pool1", 3, 2, Padding::Same);
    for (stage, (out_channels, repeats)) in [(240, 4), (480, 8), (960, 4)].into_iter().enumerate() {
        for unit in 0..repeats {
            let input = b.current();
            let in_channels = b.channels(&input);
            let stride = if unit == 0 { 2 } else { 1 };
            let branch_out = if stride == 2 { out_channels - in_channels } else { out_channels };
            let groups = if stage == 0 && unit == 0 { 1 } else { 3 };
            let p = format!("stage{}_unit{}", stage + 2, unit + 1);
            let bottleneck = out_channels / 4;
            b.conv(format!("{p}_gconv1"), Conv2d { groups, ..conv(bottleneck, 1).no_bias() });
            b.bn(format!("{p}_bn1"));
            b.relu(format!("{p}_relu1"));
            b.depthwise(format!("{p}_dwconv"), super::builder::depthwise(3).stride(stride).same().no_bias());
            b.bn(format!("{p}_bn2"));
            b.conv(format!("{p}_gconv2"), Conv2d { groups: 3, ..conv(branch_out, 1).no_bias() });
            let x = b.bn(format!("{p}_bn3"));
            if stride == 2 {
                b.at(&input);
                let s = b.avg_pool(format!("{p}_shortcut_pool"), 3, 2, Padding::Same);
                b.concat(format!("{p}_concat"), &[s, x]);
            } else {
                b.add(format!("{p}_add"), &[input, x]);
            }
            b.relu(format!("{p}_relu_out"));
        }
    }
    b.global_avg_pool("global_pool");
    b.dense("fc", 1000, Activation::Softmax);
    b.finish()
}
