//! InceptionV3 (Szegedy et al. 2016), InceptionResNetV2 (Szegedy et al. 2017) and Xception (Chollet 2017), as in
//! Keras Applications `inception_v3.py`, `inception_resnet_v2.py` and `xception.py` (299x299, with top).
//!
//! Keras builds the Inception convolutions with `BatchNormalization(scale=False)` (3 parameters per channel);
//! perfmodel's batch norm always counts 4, so these two networks count about 0.1 % more than published.

use super::builder::{conv, conv_hw, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const INCEPTIONV3_PARAMS: u64 = 23_851_784;
pub const INCEPTIONRESNETV2_PARAMS: u64 = 55_873_736;
pub const XCEPTION_PARAMS: u64 = 22_910_480;

/// Keras `conv2d_bn`: convolution without bias, batch norm, ReLU. Returns the ReLU's name.
fn conv_bn(
    b: &mut Builder,
    from: &str,
    filters: usize,
    kh: usize,
    kw: usize,
    strides: usize,
    padding: Padding,
) -> String {
    b.at(from);
    let conv_name = b.auto("conv2d");
    let bn_name = b.auto("batch_normalization");
    let act_name = b.auto("activation");
    b.conv(conv_name, conv_hw(filters, kh, kw).stride(strides).padding(padding).no_bias());
    b.bn(bn_name);
    b.relu(act_name)
}

fn same(b: &mut Builder, from: &str, filters: usize, kh: usize, kw: usize) -> String {
    conv_bn(b, from, filters, kh, kw, 1, Padding::Same)
}

fn pool_from(
    b: &mut Builder,
    from: &str,
    name: String,
    max: bool,
    size: usize,
    strides: usize,
    padding: Padding,
) -> String {
    b.at(from);
    if max {
        b.max_pool(name, size, strides, padding)
    } else {
        b.avg_pool(name, size, strides, padding)
    }
}

fn classifier(b: &mut Builder) {
    b.global_avg_pool("avg_pool");
    b.dense("predictions", 1000, Activation::Softmax);
}

/// The stem both networks share: 299 x 299 x 3 down to 35 x 35 x 192.
fn stem(b: &mut Builder) -> String {
    use Padding::{Same as S, Valid as V};
    let x = conv_bn(b, "input", 32, 3, 3, 2, V);
    let x = conv_bn(b, &x, 32, 3, 3, 1, V);
    let x = conv_bn(b, &x, 64, 3, 3, 1, S);
    let x = pool_from(b, &x, "max_pooling2d".into(), true, 3, 2, V);
    let x = conv_bn(b, &x, 80, 1, 1, 1, V);
    let x = conv_bn(b, &x, 192, 3, 3, 1, V);
    pool_from(b, &x, "max_pooling2d_1".into(), true, 3, 2, V)
}

pub fn inception_v3() -> Network {
    use Padding::{Same as S, Valid as V};
    let mut b = Builder::new("inceptionv3", vec![3, 299, 299]);
    let mut x = stem(&mut b);

    // mixed 0, 1, 2: 35 x 35.
    for (i, pool_filters) in [32, 64, 64].into_iter().enumerate() {
        let b1 = same(&mut b, &x, 64, 1, 1);
        let b5 = same(&mut b, &x, 48, 1, 1);
        let b5 = same(&mut b, &b5, 64, 5, 5);
        let d = same(&mut b, &x, 64, 1, 1);
        let d = same(&mut b, &d, 96, 3, 3);
        let d = same(&mut b, &d, 96, 3, 3);
        let p = pool_from(&mut b, &x, format!("average_pooling2d_mixed{i}"), false, 3, 1, S);
        let p = same(&mut b, &p, pool_filters, 1, 1);
        x = b.concat(format!("mixed{i}"), &[b1, b5, d, p]);
    }
    // mixed 3: 17 x 17.
    let b3 = conv_bn(&mut b, &x, 384, 3, 3, 2, V);
    let d = same(&mut b, &x, 64, 1, 1);
    let d = same(&mut b, &d, 96, 3, 3);
    let d = conv_bn(&mut b, &d, 96, 3, 3, 2, V);
    let p = pool_from(&mut b, &x, "max_pooling2d_mixed3".into(), true, 3, 2, V);
    x = b.concat("mixed3", &[b3, d, p]);
    // mixed 4..7.
    for (i, c) in [128, 160, 160, 192].into_iter().enumerate() {
        let b1 = same(&mut b, &x, 192, 1, 1);
        let b7 = same(&mut b, &x, c, 1, 1);
        let b7 = same(&mut b, &b7, c, 1, 7);
        let b7 = same(&mut b, &b7, 192, 7, 1);
        let d = same(&mut b, &x, c, 1, 1);
        let d = same(&mut b, &d, c, 7, 1);
        let d = same(&mut b, &d, c, 1, 7);
        let d = same(&mut b, &d, c, 7, 1);
        let d = same(&mut b, &d, 192, 1, 7);
        let p = pool_from(&mut b, &x, format!("average_pooling2d_mixed{}", i + 4), false, 3, 1, S);
        let p = same(&mut b, &p, 192, 1, 1);
        x = b.concat(format!("mixed{}", i + 4), &[b1, b7, d, p]);
    }
    // mixed 8: 8 x 8.
    let b3 = same(&mut b, &x, 192, 1, 1);
    let b3 = conv_bn(&mut b, &b3, 320, 3, 3, 2, V);
    let b7 = same(&mut b, &x, 192, 1, 1);
    let b7 = same(&mut b, &b7, 192, 1, 7);
    let b7 = same(&mut b, &b7, 192, 7, 1);
    let b7 = conv_bn(&mut b, &b7, 192, 3, 3, 2, V);
    let p = pool_from(&mut b, &x, "max_pooling2d_mixed8".into(), true, 3, 2, V);
    x = b.concat("mixed8", &[b3, b7, p]);
    // mixed 9, 10.
    for i in 0..2 {
        let b1 = same(&mut b, &x, 320, 1, 1);
        let b3 = same(&mut b, &x, 384, 1, 1);
        let b3a = same(&mut b, &b3, 384, 1, 3);
        let b3b = same(&mut b, &b3, 384, 3, 1);
        let b3 = b.concat(format!("mixed9_{i}"), &[b3a, b3b]);
        let d = same(&mut b, &x, 448, 1, 1);
        let d = same(&mut b, &d, 384, 3, 3);
        let da = same(&mut b, &d, 384, 1, 3);
        let db = same(&mut b, &d, 384, 3, 1);
        let d = b.concat(format!("concatenate_{i}"), &[da, db]);
        let p = pool_from(&mut b, &x, format!("average_pooling2d_mixed{}", 9 + i), false, 3, 1, S);
        let p = same(&mut b, &p, 192, 1, 1);
        x = b.concat(format!("mixed{}", 9 + i), &[b1, b3, d, p]);
    }
    b.at(&x);
    classifier(&mut b);
    b.finish()
}

pub fn inception_resnet_v2() -> Network {
    use Padding::{Same as S, Valid as V};
    let mut b = Builder::new("inceptionresnetv2", vec![3, 299, 299]);
    let x = stem(&mut b);
    // mixed_5b: 35 x 35 x 320.
    let b0 = same(&mut b, &x, 96, 1, 1);
    let b1 = same(&mut b, &x, 48, 1, 1);
    let b1 = same(&mut b, &b1, 64, 5, 5);
    let b2 = same(&mut b, &x, 64, 1, 1);
    let b2 = same(&mut b, &b2, 96, 3, 3);
    let b2 = same(&mut b, &b2, 96, 3, 3);
    let p = pool_from(&mut b, &x, "average_pooling2d".into(), false, 3, 1, S);
    let p = same(&mut b, &p, 64, 1, 1);
    let mut x = b.concat("mixed_5b", &[b0, b1, b2, p]);
    for i in 1..=10 {
        x = residual_block(&mut b, &x, Block::B35, &format!("block35_{i}"), true);
    }
    // mixed_6a: 17 x 17 x 1088.
    let b0 = conv_bn(&mut b, &x, 384, 3, 3, 2, V);
    let b1 = same(&mut b, &x, 256, 1, 1);
    let b1 = same(&mut b, &b1, 256, 3, 3);
    let b1 = conv_bn(&mut b, &b1, 384, 3, 3, 2, V);
    let p = pool_from(&mut b, &x, "max_pooling2d_2".into(), true, 3, 2, V);
    x = b.concat("mixed_6a", &[b0, b1, p]);
    for i in 1..=20 {
        x = residual_block(&mut b, &x, Block::B17, &format!("block17_{i}"), true);
    }
    // mixed_7a: 8 x 8 x 2080.
    let b0 = same(&mut b, &x, 256, 1, 1);
    let b0 = conv_bn(&mut b, &b0, 384, 3, 3, 2, V);
    let b1 = same(&mut b, &x, 256, 1, 1);
    let b1 = conv_bn(&mut b, &b1, 288, 3, 3, 2, V);
    let b2 = same(&mut b, &x, 256, 1, 1);
    let b2 = same(&mut b, &b2, 288, 3, 3);
    let b2 = conv_bn(&mut b, &b2, 320, 3, 3, 2, V);
    let p = pool_from(&mut b, &x, "max_pooling2d_3".into(), true, 3, 2, V);
    x = b.concat("mixed_7a", &[b0, b1, b2, p]);
    for i in 1..=10 {
        x = residual_block(&mut b, &x, Block::B8, &format!("block8_{i}"), i < 10);
    }
    b.at(&x);
    b.conv("conv_7b", conv(1536, 1).no_bias());
    b.bn("conv_7b_bn");
    b.relu("conv_7b_ac");
    classifier(&mut b);
    b.finish()
}

enum Block {
    B35,
    B17,
    B8,
}

/// Keras `inception_resnet_block`: parallel branches, concatenated, projected back by a biased 1x1 convolution
/// and added (scaled) to the block input. The scaling multiplies by a constant, which this add absorbs.
fn residual_block(b: &mut Builder, x: &str, block: Block, name: &str, relu: bool) -> String {
    let branches = match block {
        Block::B35 => {
            let b0 = same(b, x, 32, 1, 1);
            let b1 = same(b, x, 32, 1, 1);
            let b1 = same(b, &b1, 32, 3, 3);
            let b2 = same(b, x, 32, 1, 1);
            let b2 = same(b, &b2, 48, 3, 3);
            let b2 = same(b, &b2, 64, 3, 3);
            vec![b0, b1, b2]
        }
        Block::B17 => {
            let b0 = same(b, x, 192, 1, 1);
            let b1 = same(b, x, 128, 1, 1);
            let b1 = same(b, &b1, 160, 1, 7);
            let b1 = same(b, &b1, 192, 7, 1);
            vec![b0, b1]
        }
        Block::B8 => {
            let b0 = same(b, x, 192, 1, 1);
            let b1 = same(b, x, 192, 1, 1);
            let b1 = same(b, &b1, 224, 1, 3);
            let b1 = same(b, &b1, 256, 3, 1);
            vec![b0, b1]
        }
    };
    let channels = b.channels(x);
    b.concat(format!("{name}_mixed"), &branches);
    let up = b.conv(format!("{name}_conv"), conv(channels, 1).same());
    let out = b.add(format!("{name}_add"), &[x.to_string(), up]);
    if relu {
        b.relu(format!("{name}_ac"))
    } else {
        out
    }
}

pub fn xception() -> Network {
    let mut b = Builder::new("xception", vec![3, 299, 299]);
    b.conv("block1_conv1", conv(32, 3).stride(2).no_bias());
    b.bn("block1_conv1_bn");
    b.relu("block1_conv1_act");
    b.conv("block1_conv2", conv(64, 3).no_bias());
    b.bn("block1_conv2_bn");
    let mut x = b.relu("block1_conv2_act");
    // Entry flow: blocks 2-4 downsample with a strided 1x1 shortcut.
    for (block, filters) in [(2, 128), (3, 256), (4, 728)] {
        b.at(&x);
        b.conv(format!("conv2d_shortcut{block}"), conv(filters, 1).stride(2).same().no_bias());
        let shortcut = b.bn(format!("batch_normalization_shortcut{block}"));
        b.at(&x);
        if block > 2 {
            b.relu(format!("block{block}_sepconv1_act"));
        }
        b.separable(&format!("block{block}_sepconv1"), filters, 3, 1, Padding::Same);
        b.bn(format!("block{block}_sepconv1_bn"));
        b.relu(format!("block{block}_sepconv2_act"));
        b.separable(&format!("block{block}_sepconv2"), filters, 3, 1, Padding::Same);
        b.bn(format!("block{block}_sepconv2_bn"));
        let y = b.max_pool(format!("block{block}_pool"), 3, 2, Padding::Same);
        x = b.add(format!("add_block{block}"), &[y, shortcut]);
    }
    // Middle flow: 8 residual blocks of three separable convolutions.
    for block in 5..=12 {
        for i in 1..=3 {
            b.relu(format!("block{block}_sepconv{i}_act"));
            b.separable(&format!("block{block}_sepconv{i}"), 728, 3, 1, Padding::Same);
            b.bn(format!("block{block}_sepconv{i}_bn"));
        }
        let y = b.current();
        x = b.add(format!("add_block{block}"), &[y, x]);
    }
    // Exit flow.
    b.conv("conv2d_shortcut13", conv(1024, 1).stride(2).same().no_bias());
    let shortcut = b.bn("batch_normalization_shortcut13");
    b.at(&x);
    b.relu("block13_sepconv1_act");
    b.separable("block13_sepconv1", 728, 3, 1, Padding::Same);
    b.bn("block13_sepconv1_bn");
    b.relu("block13_sepconv2_act");
    b.separable("block13_sepconv2", 1024, 3, 1, Padding::Same);
    b.bn("block13_sepconv2_bn");
    let y = b.max_pool("block13_pool", 3, 2, Padding::Same);
    b.add("add_block13", &[y, shortcut]);
    b.separable("block14_sepconv1", 1536, 3, 1, Padding::Same);
    b.bn("block14_sepconv1_bn");
    b.relu("block14_sepconv1_act");
    b.separable("block14_sepconv2", 2048, 3, 1, Padding::Same);
    b.bn("block14_sepconv2_bn");
    b.relu("block14_sepconv2_act");
    classifier(&mut b);
    b.finish()
}
