//! RegNetX and RegNetY (Radosavovic et al. 2020), as torchvision builds them and its ONNX export writes them:
//! batch norms folded into the convolutions' biases, ReLUs into the convolutions they follow, PyTorch's
//! explicit padding. A stem of one 3x3 stride-2 convolution, four stages of bottleneck blocks (1x1, a grouped 3x3
//! of `group_width` channels per group that strides the stage's first block, 1x1; RegNetY a squeeze-excite of a
//! quarter of the block's input width between the last two), a 1x1 projection where a block changes width or
//! size, global average pooling and a 1000-way classifier.
//!
//! The zoo holds the family's other sizes; torchvision's RegNetX-400MF and RegNetY-400MF stay out of sampling for
//! validation, so the grouped convolutions of 8 to 24 channels per group on small images that those networks are
//! made of are sampled from their siblings, as other networks' configs are from theirs.

use super::builder::{conv, Builder, ConvSpec};
use crate::layer::{Activation, Padding};
use crate::network::Network;

/// Published total parameters (torchvision model docs); the folded networks count one bias per batch-norm
/// channel where torchvision counts two, well inside the zoo's 1% check.
pub const REGNET_X_200MF_PARAMS: u64 = 2_684_792;
pub const REGNET_X_800MF_PARAMS: u64 = 7_259_656;
pub const REGNET_X_1_6GF_PARAMS: u64 = 9_190_136;
pub const REGNET_Y_800MF_PARAMS: u64 = 6_432_512;

/// One RegNet: per stage its depth and width, the channels per group, and whether blocks squeeze and excite.
struct Design {
    depths: [usize; 4],
    widths: [usize; 4],
    group_width: usize,
    squeeze_excite: bool,
}

pub fn regnet_x_200mf() -> Network {
    regnet(
        "regnet_x_200mf",
        Design { depths: [1, 1, 4, 7], widths: [24, 56, 152, 368], group_width: 8, squeeze_excite: false },
    )
}

pub fn regnet_x_800mf() -> Network {
    regnet(
        "regnet_x_800mf",
        Design { depths: [1, 3, 7, 5], widths: [64, 128, 288, 672], group_width: 16, squeeze_excite: false },
    )
}

pub fn regnet_x_1_6gf() -> Network {
    regnet(
        "regnet_x_1_6gf",
        Design { depths: [2, 4, 10, 2], widths: [72, 168, 408, 912], group_width: 24, squeeze_excite: false },
    )
}

pub fn regnet_y_800mf() -> Network {
    regnet(
        "regnet_y_800mf",
        Design { depths: [1, 3, 8, 2], widths: [64, 144, 320, 784], group_width: 16, squeeze_excite: true },
    )
}

/// RegNetX-400MF as torchvision builds it: not in the zoo (torchvision's export of it validates), here to check
/// the builder against that export layer by layer.
#[cfg(test)]
fn regnet_x_400mf() -> Network {
    regnet(
        "regnet_x_400mf",
        Design { depths: [1, 2, 7, 12], widths: [32, 64, 160, 400], group_width: 16, squeeze_excite: false },
    )
}

/// RegNetY-400MF likewise.
#[cfg(test)]
fn regnet_y_400mf() -> Network {
    regnet(
        "regnet_y_400mf",
        Design { depths: [1, 3, 6, 6], widths: [48, 104, 208, 440], group_width: 8, squeeze_excite: true },
    )
}

const PAD_1: Padding = Padding::Explicit([1, 1, 1, 1]);

fn regnet(name: &str, d: Design) -> Network {
    let mut b = Builder::new(name, vec![3, 224, 224]);
    b.conv("stem", conv(32, 3).stride(2).padding(PAD_1).act(Activation::Relu));
    let mut width_in = 32;
    for (stage, (&depth, &width)) in d.depths.iter().zip(&d.widths).enumerate() {
        for i in 0..depth {
            let stride = if i == 0 { 2 } else { 1 };
            block(&mut b, &format!("block{}-{i}", stage + 1), width_in, width, stride, &d);
            width_in = width;
        }
    }
    b.global_avg_pool("avgpool");
    b.dense("fc", 1000, Activation::Linear);
    b.finish()
}

fn block(b: &mut Builder, name: &str, width_in: usize, width: usize, stride: usize, d: &Design) {
    let input = b.current();
    let shortcut = if width_in != width || stride != 1 {
        let s = b.conv(format!("{name}/proj"), conv(width, 1).stride(stride));
        b.at(&input);
        s
    } else {
        input
    };
    b.conv(format!("{name}/a"), conv(width, 1).act(Activation::Relu));
    let groups = width / d.group_width;
    // PyTorch's one pixel of padding: at stride 1 what 'same' pads (the importer writes it so).
    let padding = if stride == 1 { Padding::Same } else { PAD_1 };
    let mut grouped = conv(width, 3).stride(stride).padding(padding).act(Activation::Relu);
    grouped.groups = groups;
    let x = b.conv(format!("{name}/b"), grouped);
    if d.squeeze_excite {
        let squeeze = ((width_in as f64) * 0.25).round() as usize;
        b.global_avg_pool_keepdims(&format!("{name}/se/avgpool"));
        b.conv(format!("{name}/se/fc1"), conv(squeeze, 1).act(Activation::Relu));
        let scale = b.conv(format!("{name}/se/fc2"), conv(width, 1).act(Activation::Sigmoid));
        b.multiply(format!("{name}/se/mul"), &[scale, x]);
    }
    let x = b.conv(format!("{name}/c"), conv(width, 1));
    b.add(format!("{name}/add"), &[shortcut, x]);
    b.relu(format!("{name}/relu"));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder gives torchvision's own export of RegNetX-400MF and RegNetY-400MF (`zoo/torchvision/`), layer
    /// by layer: the same operations, hyperparameters, shapes and parameters.
    #[test]
    fn the_builder_gives_torchvision_s_exported_regnets() {
        for (built, file) in [(regnet_x_400mf(), "regnet_x_400mf.json"), (regnet_y_400mf(), "regnet_y_400mf.json")] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("zoo/torchvision").join(file);
            let exported = Network::load(&path).unwrap();
            let (a, e) = (built.analyze().unwrap(), exported.analyze().unwrap());
            assert_eq!(built.layers.len(), exported.layers.len(), "{file}");
            for i in 0..built.layers.len() {
                let (x, y) = (a.config(i), e.config(i));
                assert_eq!(x.op, y.op, "{file}: layer {i} ({} / {})", built.layers[i].name, exported.layers[i].name);
                assert_eq!(x.input_shapes, y.input_shapes, "{file}: layer {i} ({})", built.layers[i].name);
                assert_eq!(a.sources[i], e.sources[i], "{file}: layer {i} ({})", built.layers[i].name);
            }
            assert_eq!(a.total_params(), e.total_params(), "{file}");
        }
    }
}
