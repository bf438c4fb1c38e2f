//! NASNetMobile (Zoph et al. 2018), as in Keras Applications `nasnet.py` (penultimate filters 1056, 4 cells
//! per stage, stem 32 filters, 224x224): normal and reduction cells of separable convolutions and pooling, with
//! the previous cell's output adjusted (factorised reduction) to match.

use super::builder::{conv, correct_pad, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const NASNETMOBILE_PARAMS: u64 = 5_326_716;

pub fn nasnet_mobile() -> Network {
    let mut b = Builder::new("nasnetmobile", vec![3, 224, 224]);
    let filters = 1056 / 24;
    b.conv("stem_conv1", conv(32, 3).stride(2).no_bias());
    let stem = b.bn("stem_bn1");
    let (mut x, mut p) = reduction_cell(&mut b, &stem, None, filters / 4, "stem_1");
    let next = reduction_cell(&mut b, &x, Some(&p), filters / 2, "stem_2");
    (x, p) = next;
    for (stage, stage_filters) in [filters, filters * 2, filters * 4].into_iter().enumerate() {
        if stage > 0 {
            let next = reduction_cell(&mut b, &x, Some(&p), stage_filters, &format!("reduce_{}", 4 * stage));
            (x, p) = next;
        }
        for i in 0..4 {
            let id = if stage == 0 { i } else { 4 * stage + i + 1 };
            let next = normal_cell(&mut b, &x, &p, stage_filters, &id.to_string());
            (x, p) = next;
        }
    }
    b.at(&x);
    b.relu("activation_final");
    b.global_avg_pool("global_average_pooling2d");
    b.dense("predictions", 1000, Activation::Softmax);
    b.finish()
}

/// Keras `_separable_conv_block`: (ReLU, separable conv, BN) twice; the first may be strided.
fn sep_block(b: &mut Builder, from: &str, filters: usize, kernel: usize, stride: usize, id: &str) -> String {
    b.at(from);
    b.relu(format!("separable_conv_1_act_{id}"));
    let padding = if stride == 2 {
        let hw = b.hw(&b.current());
        b.zero_pad(format!("separable_conv_1_pad_{id}"), correct_pad(hw, kernel));
        Padding::Valid
    } else {
        Padding::Same
    };
    b.separable(&format!("separable_conv_1_{id}"), filters, kernel, stride, padding);
    b.bn(format!("separable_conv_1_bn_{id}"));
    b.relu(format!("separable_conv_2_act_{id}"));
    b.separable(&format!("separable_conv_2_{id}"), filters, kernel, 1, Padding::Same);
    b.bn(format!("separable_conv_2_bn_{id}"))
}

/// Keras `_adjust_block`: bring the previous cell's output `p` to the spatial size of `ip` and `filters` channels.
fn adjust(b: &mut Builder, p: Option<&str>, ip: &str, filters: usize, id: &str) -> String {
    let Some(p) = p else { return ip.to_string() };
    if b.hw(p) != b.hw(ip) {
        b.at(p);
        let act = b.relu(format!("adjust_relu_1_{id}"));
        b.avg_pool(format!("adjust_avg_pool_1_{id}"), 1, 2, Padding::Valid);
        let p1 = b.conv(format!("adjust_conv_1_{id}"), conv(filters / 2, 1).same().no_bias());
        b.at(&act);
        b.zero_pad(format!("zero_padding2d_adjust_{id}"), [0, 1, 0, 1]);
        b.crop(format!("cropping2d_adjust_{id}"), [1, 0, 1, 0]);
        b.avg_pool(format!("adjust_avg_pool_2_{id}"), 1, 2, Padding::Valid);
        let p2 = b.conv(format!("adjust_conv_2_{id}"), conv(filters / 2, 1).same().no_bias());
        b.concat(format!("concatenate_adjust_{id}"), &[p1, p2]);
        b.bn(format!("adjust_bn_{id}"))
    } else if b.channels(p) != filters {
        b.at(p);
        b.relu(format!("adjust_relu_1_{id}"));
        b.conv(format!("adjust_conv_projection_{id}"), conv(filters, 1).same().no_bias());
        b.bn(format!("adjust_bn_{id}"))
    } else {
        p.to_string()
    }
}

/// The 1x1 projection of the cell input both cell types start with.
fn project(b: &mut Builder, ip: &str, filters: usize, id: &str, kind: &str) -> String {
    b.at(ip);
    b.relu(format!("{kind}_relu1_{id}"));
    b.conv(format!("{kind}_conv_1_{id}"), conv(filters, 1).same().no_bias());
    b.bn(format!("{kind}_bn_1_{id}"))
}

fn normal_cell(b: &mut Builder, ip: &str, p: &str, filters: usize, id: &str) -> (String, String) {
    let p = adjust(b, Some(p), ip, filters, id);
    let h = project(b, ip, filters, id, "normal");
    let x1a = sep_block(b, &h, filters, 5, 1, &format!("normal_left1_{id}"));
    let x1b = sep_block(b, &p, filters, 3, 1, &format!("normal_right1_{id}"));
    let x1 = b.add(format!("normal_add_1_{id}"), &[x1a, x1b]);
    let x2a = sep_block(b, &p, filters, 5, 1, &format!("normal_left2_{id}"));
    let x2b = sep_block(b, &p, filters, 3, 1, &format!("normal_right2_{id}"));
    let x2 = b.add(format!("normal_add_2_{id}"), &[x2a, x2b]);
    b.at(&h);
    let x3 = b.avg_pool(format!("normal_left3_{id}"), 3, 1, Padding::Same);
    let x3 = b.add(format!("normal_add_3_{id}"), &[x3, p.clone()]);
    b.at(&p);
    let x4a = b.avg_pool(format!("normal_left4_{id}"), 3, 1, Padding::Same);
    b.at(&p);
    let x4b = b.avg_pool(format!("normal_right4_{id}"), 3, 1, Padding::Same);
    let x4 = b.add(format!("normal_add_4_{id}"), &[x4a, x4b]);
    let x5 = sep_block(b, &h, filters, 3, 1, &format!("normal_left5_{id}"));
    let x5 = b.add(format!("normal_add_5_{id}"), &[x5, h.clone()]);
    let out = b.concat(format!("normal_concat_{id}"), &[p, x1, x2, x3, x4, x5]);
    (out, ip.to_string())
}

fn reduction_cell(b: &mut Builder, ip: &str, p: Option<&str>, filters: usize, id: &str) -> (String, String) {
    let p = adjust(b, p, ip, filters, id);
    let h = project(b, ip, filters, id, "reduction");
    let hw = b.hw(&h);
    let h3 = b.zero_pad(format!("reduction_pad_1_{id}"), correct_pad(hw, 3));
    let x1a = sep_block(b, &h, filters, 5, 2, &format!("reduction_left1_{id}"));
    let x1b = sep_block(b, &p, filters, 7, 2, &format!("reduction_right1_{id}"));
    let x1 = b.add(format!("reduction_add_1_{id}"), &[x1a, x1b]);
    b.at(&h3);
    let x2a = b.max_pool(format!("reduction_left2_{id}"), 3, 2, Padding::Valid);
    let x2b = sep_block(b, &p, filters, 7, 2, &format!("reduction_right2_{id}"));
    let x2 = b.add(format!("reduction_add_2_{id}"), &[x2a, x2b]);
    b.at(&h3);
    let x3a = b.avg_pool(format!("reduction_left3_{id}"), 3, 2, Padding::Valid);
    let x3b = sep_block(b, &p, filters, 5, 2, &format!("reduction_right3_{id}"));
    let x3 = b.add(format!("reduction_add3_{id}"), &[x3a, x3b]);
    b.at(&x1);
    let x4 = b.avg_pool(format!("reduction_left4_{id}"), 3, 1, Padding::Same);
    let x4 = b.add(format!("reduction_add4_{id}"), &[x2.clone(), x4]);
    let x5a = sep_block(b, &x1, filters, 3, 1, &format!("reduction_left4b_{id}"));
    b.at(&h3);
    let x5b = b.max_pool(format!("reduction_right5_{id}"), 3, 2, Padding::Valid);
    let x5 = b.add(format!("reduction_add5_{id}"), &[x5a, x5b]);
    let out = b.concat(format!("reduction_concat_{id}"), &[x2, x3, x4, x5]);
    (out, ip.to_string())
}
