//! ResNet v1 (He et al. 2015) and v2 (pre-activation, He et al. 2016), as in Keras Applications `resnet.py` /
//! `resnet_v2.py`: bottleneck blocks, 7x7 stem, global average pooling and a 1000-way classifier.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const RESNET50_PARAMS: u64 = 25_636_712;
pub const RESNET101_PARAMS: u64 = 44_707_176;
pub const RESNET152_PARAMS: u64 = 60_419_944;
pub const RESNET50V2_PARAMS: u64 = 25_613_800;
pub const RESNET101V2_PARAMS: u64 = 44_675_560;
pub const RESNET152V2_PARAMS: u64 = 60_380_648;

pub fn resnet50() -> Network {
    resnet_v1("resnet50", [3, 4, 6, 3])
}
pub fn resnet101() -> Network {
    resnet_v1("resnet101", [3, 4, 23, 3])
}
pub fn resnet152() -> Network {
    resnet_v1("resnet152", [3, 8, 36, 3])
}
pub fn resnet50v2() -> Network {
    resnet_v2("resnet50v2", [3, 4, 6, 3])
}
pub fn resnet101v2() -> Network {
    resnet_v2("resnet101v2", [3, 4, 23, 3])
}
pub fn resnet152v2() -> Network {
    resnet_v2("resnet152v2", [3, 8, 36, 3])
}

fn classifier(b: &mut Builder) {
    b.global_avg_pool("avg_pool");
    b.dense("predictions", 1000, Activation::Softmax);
}

fn resnet_v1(name: &str, blocks: [usize; 4]) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    b.zero_pad("conv1_pad", [3; 4]);
    b.conv("conv1_conv", conv(64, 7).stride(2));
    b.bn("conv1_bn");
    b.relu("conv1_relu");
    b.zero_pad("pool1_pad", [1; 4]);
    b.max_pool("pool1_pool", 3, 2, Padding::Valid);
    for (stage, (&n, filters)) in blocks.iter().zip([64, 128, 256, 512]).enumerate() {
        let first_stride = if stage == 0 { 1 } else { 2 };
        for i in 1..=n {
            let block = format!("conv{}_block{i}", stage + 2);
            bottleneck_v1(&mut b, &block, filters, if i == 1 { first_stride } else { 1 }, i == 1);
        }
    }
    classifier(&mut b);
    b.finish()
}

fn bottleneck_v1(b: &mut Builder, name: &str, filters: usize, stride: usize, conv_shortcut: bool) {
    let input = b.current();
    let shortcut = if conv_shortcut {
        b.conv(format!("{name}_0_conv"), conv(4 * filters, 1).stride(stride));
        let s = b.bn(format!("{name}_0_bn"));
        b.at(&input);
        s
    } else {
        input
    };
    b.conv(format!("{name}_1_conv"), conv(filters, 1).stride(stride));
    b.bn(format!("{name}_1_bn"));
    b.relu(format!("{name}_1_relu"));
    b.conv(format!("{name}_2_conv"), conv(filters, 3).same());
    b.bn(format!("{name}_2_bn"));
    b.relu(format!("{name}_2_relu"));
    b.conv(format!("{name}_3_conv"), conv(4 * filters, 1));
    let x = b.bn(format!("{name}_3_bn"));
    b.add(format!("{name}_add"), &[shortcut, x]);
    b.relu(format!("{name}_out"));
}

fn resnet_v2(name: &str, blocks: [usize; 4]) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    b.zero_pad("conv1_pad", [3; 4]);
    b.conv("conv1_conv", conv(64, 7).stride(2));
    b.zero_pad("pool1_pad", [1; 4]);
    b.max_pool("pool1_pool", 3, 2, Padding::Valid);
    for (stage, (&n, filters)) in blocks.iter().zip([64, 128, 256, 512]).enumerate() {
        let last_stride = if stage == 3 { 1 } else { 2 };
        for i in 1..=n {
            let block = format!("conv{}_block{i}", stage + 2);
            bottleneck_v2(&mut b, &block, filters, if i == n { last_stride } else { 1 }, i == 1);
        }
    }
    b.bn("post_bn");
    b.relu("post_relu");
    classifier(&mut b);
    b.finish()
}

fn bottleneck_v2(b: &mut Builder, name: &str, filters: usize, stride: usize, conv_shortcut: bool) {
    let input = b.current();
    b.bn(format!("{name}_preact_bn"));
    let preact = b.relu(format!("{name}_preact_relu"));
    let shortcut = if conv_shortcut {
        let s = b.conv(format!("{name}_0_conv"), conv(4 * filters, 1).stride(stride));
        b.at(&preact);
        s
    } else if stride > 1 {
        b.at(&input);
        let s = b.max_pool(format!("{name}_0_pool"), 1, stride, Padding::Valid);
        b.at(&preact);
        s
    } else {
        input
    };
    b.conv(format!("{name}_1_conv"), conv(filters, 1).no_bias());
    b.bn(format!("{name}_1_bn"));
    b.relu(format!("{name}_1_relu"));
    b.zero_pad(format!("{name}_2_pad"), [1; 4]);
    b.conv(format!("{name}_2_conv"), conv(filters, 3).stride(stride).no_bias());
    b.bn(format!("{name}_2_bn"));
    b.relu(format!("{name}_2_relu"));
    let x = b.conv(format!("{name}_3_conv"), conv(4 * filters, 1));
    b.add(format!("{name}_out"), &[shortcut, x]);
}
