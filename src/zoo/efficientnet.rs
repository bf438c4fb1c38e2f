//! EfficientNet B0-B3 (Tan & Le 2019), as in Keras Applications `efficientnet.py`: MBConv blocks with
//! squeeze-and-excitation and swish, scaled in width, depth and resolution per variant.
//!
//! Keras' preprocessing `Normalization` layer carries 7 non-trainable weights (mean, variance, count) that are
//! included in the published totals; perfmodel has no such layer, so the zoo counts are 7 lower.

use super::builder::{conv, correct_pad, depthwise, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const EFFICIENTNETB0_PARAMS: u64 = 5_330_571;
pub const EFFICIENTNETB1_PARAMS: u64 = 7_856_239;
pub const EFFICIENTNETB2_PARAMS: u64 = 9_177_569;
pub const EFFICIENTNETB3_PARAMS: u64 = 12_320_535;

pub fn efficientnet_b0() -> Network {
    efficientnet("efficientnetb0", 1.0, 1.0, 224)
}
pub fn efficientnet_b1() -> Network {
    efficientnet("efficientnetb1", 1.0, 1.1, 240)
}
pub fn efficientnet_b2() -> Network {
    efficientnet("efficientnetb2", 1.1, 1.2, 260)
}
pub fn efficientnet_b3() -> Network {
    efficientnet("efficientnetb3", 1.2, 1.4, 300)
}

/// Keras `DEFAULT_BLOCKS_ARGS`: (kernel, repeats, filters_in, filters_out, expand_ratio, strides).
const BLOCKS: [(usize, usize, usize, usize, usize, usize); 7] = [
    (3, 1, 32, 16, 1, 1),
    (3, 2, 16, 24, 6, 2),
    (5, 2, 24, 40, 6, 2),
    (3, 3, 40, 80, 6, 2),
    (5, 3, 80, 112, 6, 1),
    (5, 4, 112, 192, 6, 2),
    (3, 1, 192, 320, 6, 1),
];

fn efficientnet(name: &str, width: f64, depth: f64, resolution: usize) -> Network {
    let round_filters = |filters: usize| {
        let f = filters as f64 * width;
        let mut new = ((f + 4.0) as usize / 8 * 8).max(8);
        if (new as f64) < 0.9 * f {
            new += 8;
        }
        new
    };
    let round_repeats = |r: usize| (depth * r as f64).ceil() as usize;
    let mut b = Builder::new(name, vec![3, resolution, resolution]);
    b.zero_pad("stem_conv_pad", correct_pad([resolution, resolution], 3));
    b.conv("stem_conv", conv(round_filters(32), 3).stride(2).no_bias());
    b.bn("stem_bn");
    b.act("stem_activation", Activation::Swish);
    for (i, &(kernel, repeats, filters_in, filters_out, expand, strides)) in BLOCKS.iter().enumerate() {
        let (mut f_in, f_out) = (round_filters(filters_in), round_filters(filters_out));
        for j in 0..round_repeats(repeats) {
            let stride = if j == 0 { strides } else { 1 };
            if j > 0 {
                f_in = f_out;
            }
            let prefix = format!("block{}{}_", i + 1, (b'a' + j as u8) as char);
            mbconv(&mut b, &prefix, f_in, f_out, kernel, stride, expand);
        }
    }
    b.conv("top_conv", conv(round_filters(1280), 1).same().no_bias());
    b.bn("top_bn");
    b.act("top_activation", Activation::Swish);
    b.global_avg_pool("avg_pool");
    b.dropout("top_dropout", 0.2);
    b.dense("predictions", 1000, Activation::Softmax);
    b.finish()
}

fn mbconv(
    b: &mut Builder,
    p: &str,
    filters_in: usize,
    filters_out: usize,
    kernel: usize,
    stride: usize,
    expand: usize,
) {
    let input = b.current();
    let filters = filters_in * expand;
    if expand != 1 {
        b.conv(format!("{p}expand_conv"), conv(filters, 1).same().no_bias());
        b.bn(format!("{p}expand_bn"));
        b.act(format!("{p}expand_activation"), Activation::Swish);
    }
    let padding = if stride == 2 {
        let hw = b.hw(&b.current());
        b.zero_pad(format!("{p}dwconv_pad"), correct_pad(hw, kernel));
        Padding::Valid
    } else {
        Padding::Same
    };
    b.depthwise(format!("{p}dwconv"), depthwise(kernel).stride(stride).padding(padding).no_bias());
    b.bn(format!("{p}bn"));
    let x = b.act(format!("{p}activation"), Activation::Swish);
    let squeezed = (filters_in / 4).max(1);
    b.global_avg_pool(format!("{p}se_squeeze"));
    b.reshape(format!("{p}se_reshape"), vec![filters as i64, 1, 1]);
    b.conv(format!("{p}se_reduce"), conv(squeezed, 1).same().act(Activation::Swish));
    let gate = b.conv(format!("{p}se_expand"), conv(filters, 1).same().act(Activation::Sigmoid));
    b.multiply(format!("{p}se_excite"), &[x, gate]);
    b.conv(format!("{p}project_conv"), conv(filters_out, 1).same().no_bias());
    b.bn(format!("{p}project_bn"));
    if stride == 1 && filters_in == filters_out {
        let x = b.dropout(format!("{p}drop"), 0.2);
        b.add(format!("{p}add"), &[x, input]);
    }
}
