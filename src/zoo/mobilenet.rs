//! MobileNet v1 (Howard et al. 2017), v2 (Sandler et al. 2018) and v3 small / large (Howard et al. 2019), as in
//! Keras Applications `mobilenet.py`, `mobilenet_v2.py` and `mobilenet_v3.py` (alpha 1.0, 224x224, with top).

use super::builder::{conv, correct_pad, depthwise, make_divisible, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (Keras Applications docs, include_top=True).
pub const MOBILENET_PARAMS: u64 = 4_253_864;
pub const MOBILENETV2_PARAMS: u64 = 3_538_984;
/// Keras Applications docs (include_top=True, include_preprocessing=True; rescaling has no parameters).
pub const MOBILENETV3_SMALL_PARAMS: u64 = 2_554_968;
pub const MOBILENETV3_LARGE_PARAMS: u64 = 5_507_432;

pub fn mobilenet() -> Network {
    let mut b = Builder::new("mobilenet", vec![3, 224, 224]);
    b.conv("conv1", conv(32, 3).stride(2).same().no_bias());
    b.bn("conv1_bn");
    b.act("conv1_relu", Activation::Relu6);
    let blocks: [(usize, usize); 13] = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    for (i, &(filters, stride)) in blocks.iter().enumerate() {
        let id = i + 1;
        let padding = if stride == 1 {
            Padding::Same
        } else {
            b.zero_pad(format!("conv_pad_{id}"), [0, 1, 0, 1]);
            Padding::Valid
        };
        b.depthwise(format!("conv_dw_{id}"), depthwise(3).stride(stride).padding(padding).no_bias());
        b.bn(format!("conv_dw_{id}_bn"));
        b.act(format!("conv_dw_{id}_relu"), Activation::Relu6);
        b.conv(format!("conv_pw_{id}"), conv(filters, 1).same().no_bias());
        b.bn(format!("conv_pw_{id}_bn"));
        b.act(format!("conv_pw_{id}_relu"), Activation::Relu6);
    }
    b.global_avg_pool_keepdims("global_average_pooling2d");
    b.dropout("dropout", 1e-3);
    b.conv("conv_preds", conv(1000, 1).same());
    b.reshape("reshape_2", vec![1000]);
    b.act("predictions", Activation::Softmax);
    b.finish()
}

pub fn mobilenet_v2() -> Network {
    mobilenet_v2_with("mobilenetv2", 1.0, 224)
}

/// Keras' MobileNetV2 of width multiplier `alpha` on `rows`x`rows` images (the parameters depend on `alpha`
/// only; the last convolution keeps 1280 filters up to an `alpha` of 1).
pub fn mobilenet_v2_with(name: &str, alpha: f64, rows: usize) -> Network {
    let mut b = Builder::new(name, vec![3, rows, rows]);
    b.conv("Conv1", conv(make_divisible(32.0 * alpha, 8), 3).stride(2).same().no_bias());
    b.bn("bn_Conv1");
    b.act("Conv1_relu", Activation::Relu6);
    // (filters, stride, expansion) for block ids 0..=16.
    let blocks: [(usize, usize, usize); 17] = [
        (16, 1, 1),
        (24, 2, 6),
        (24, 1, 6),
        (32, 2, 6),
        (32, 1, 6),
        (32, 1, 6),
        (64, 2, 6),
        (64, 1, 6),
        (64, 1, 6),
        (64, 1, 6),
        (96, 1, 6),
        (96, 1, 6),
        (96, 1, 6),
        (160, 2, 6),
        (160, 1, 6),
        (160, 1, 6),
        (320, 1, 6),
    ];
    for (id, &(filters, stride, expansion)) in blocks.iter().enumerate() {
        let input = b.current();
        let in_channels = b.channels(&input);
        let prefix = if id == 0 { "expanded_conv_".to_string() } else { format!("block_{id}_") };
        if id > 0 {
            b.conv(format!("{prefix}expand"), conv(expansion * in_channels, 1).same().no_bias());
            b.bn(format!("{prefix}expand_BN"));
            b.act(format!("{prefix}expand_relu"), Activation::Relu6);
        }
        let padding = if stride == 2 {
            let hw = b.hw(&b.current());
            b.zero_pad(format!("{prefix}pad"), correct_pad(hw, 3));
            Padding::Valid
        } else {
            Padding::Same
        };
        b.depthwise(format!("{prefix}depthwise"), depthwise(3).stride(stride).padding(padding).no_bias());
        b.bn(format!("{prefix}depthwise_BN"));
        b.act(format!("{prefix}depthwise_relu"), Activation::Relu6);
        let pointwise = make_divisible(filters as f64 * alpha, 8);
        b.conv(format!("{prefix}project"), conv(pointwise, 1).same().no_bias());
        let x = b.bn(format!("{prefix}project_BN"));
        if in_channels == pointwise && stride == 1 {
            b.add(format!("{prefix}add"), &[input, x]);
        }
    }
    let last = if alpha > 1.0 { make_divisible(1280.0 * alpha, 8) } else { 1280 };
    b.conv("Conv_1", conv(last, 1).no_bias());
    b.bn("Conv_1_bn");
    b.act("out_relu", Activation::Relu6);
    b.global_avg_pool("global_average_pooling2d");
    b.dense("predictions", 1000, Activation::Softmax);
    b.finish()
}

/// One MobileNetV3 bottleneck: (expansion, filters, kernel, stride, squeeze-excite, activation).
type V3Block = (f64, usize, usize, usize, bool, Activation);

pub fn mobilenet_v3_small() -> Network {
    use Activation::{HardSwish as HS, Relu as RE};
    let blocks: [V3Block; 11] = [
        (1.0, 16, 3, 2, true, RE),
        (72.0 / 16.0, 24, 3, 2, false, RE),
        (88.0 / 24.0, 24, 3, 1, false, RE),
        (4.0, 40, 5, 2, true, HS),
        (6.0, 40, 5, 1, true, HS),
        (6.0, 40, 5, 1, true, HS),
        (3.0, 48, 5, 1, true, HS),
        (3.0, 48, 5, 1, true, HS),
        (6.0, 96, 5, 2, true, HS),
        (6.0, 96, 5, 1, true, HS),
        (6.0, 96, 5, 1, true, HS),
    ];
    mobilenet_v3("mobilenetv3small", &blocks, 1024)
}

pub fn mobilenet_v3_large() -> Network {
    use Activation::{HardSwish as HS, Relu as RE};
    let blocks: [V3Block; 15] = [
        (1.0, 16, 3, 1, false, RE),
        (4.0, 24, 3, 2, false, RE),
        (3.0, 24, 3, 1, false, RE),
        (3.0, 40, 5, 2, true, RE),
        (3.0, 40, 5, 1, true, RE),
        (3.0, 40, 5, 1, true, RE),
        (6.0, 80, 3, 2, false, HS),
        (2.5, 80, 3, 1, false, HS),
        (2.3, 80, 3, 1, false, HS),
        (2.3, 80, 3, 1, false, HS),
        (6.0, 112, 3, 1, true, HS),
        (6.0, 112, 3, 1, true, HS),
        (6.0, 160, 5, 2, true, HS),
        (6.0, 160, 5, 1, true, HS),
        (6.0, 160, 5, 1, true, HS),
    ];
    mobilenet_v3("mobilenetv3large", &blocks, 1280)
}

fn mobilenet_v3(name: &str, blocks: &[V3Block], last_point_channels: usize) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    b.conv("Conv", conv(16, 3).stride(2).same().no_bias());
    b.bn("Conv/BatchNorm");
    b.act("Conv/hard_swish", Activation::HardSwish);
    for (id, &(expansion, filters, kernel, stride, se, activation)) in blocks.iter().enumerate() {
        let input = b.current();
        let in_channels = b.channels(&input);
        let prefix = if id == 0 { "expanded_conv/".to_string() } else { format!("expanded_conv_{id}/") };
        let expanded = make_divisible(in_channels as f64 * expansion, 8);
        if id > 0 {
            b.conv(format!("{prefix}expand"), conv(expanded, 1).same().no_bias());
            b.bn(format!("{prefix}expand/BatchNorm"));
            b.act(format!("{prefix}expand/act"), activation);
        }
        let padding = if stride == 2 {
            let hw = b.hw(&b.current());
            b.zero_pad(format!("{prefix}depthwise/pad"), correct_pad(hw, kernel));
            Padding::Valid
        } else {
            Padding::Same
        };
        b.depthwise(format!("{prefix}depthwise"), depthwise(kernel).stride(stride).padding(padding).no_bias());
        b.bn(format!("{prefix}depthwise/BatchNorm"));
        let x = b.act(format!("{prefix}depthwise/act"), activation);
        if se {
            b.global_avg_pool_keepdims(&format!("{prefix}squeeze_excite/AvgPool"));
            b.conv(format!("{prefix}squeeze_excite/Conv"), conv(make_divisible(expanded as f64 * 0.25, 8), 1).same());
            b.relu(format!("{prefix}squeeze_excite/Relu"));
            b.conv(format!("{prefix}squeeze_excite/Conv_1"), conv(expanded, 1).same());
            let gate = b.act(format!("{prefix}squeeze_excite/hard_sigmoid"), Activation::HardSigmoid);
            b.multiply(format!("{prefix}squeeze_excite/Mul"), &[x, gate]);
        }
        b.conv(format!("{prefix}project"), conv(filters, 1).same().no_bias());
        let x = b.bn(format!("{prefix}project/BatchNorm"));
        if stride == 1 && in_channels == filters {
            b.add(format!("{prefix}Add"), &[input, x]);
        }
    }
    let last_conv = make_divisible(b.channels(&b.current()) as f64 * 6.0, 8);
    b.conv("Conv_1", conv(last_conv, 1).same().no_bias());
    b.bn("Conv_1/BatchNorm");
    b.act("Conv_1/hard_swish", Activation::HardSwish);
    b.global_avg_pool_keepdims("global_average_pooling2d");
    b.conv("Conv_2", conv(last_point_channels, 1).same());
    b.act("Conv_2/hard_swish", Activation::HardSwish);
    b.dropout("dropout", 0.2);
    b.conv("Logits", conv(1000, 1).same());
    b.flatten("flatten");
    b.act("Predictions", Activation::Softmax);
    b.finish()
}
