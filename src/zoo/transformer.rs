//! Transformer encoders: ViT (Dosovitskiy et al. 2021; the timm/torchvision sizes) and BERT (Devlin et al. 2019;
//! the Google BERT-base and "well-read student" BERT-small checkpoints), written from the token embeddings on:
//! `input_shape` is `[tokens, features]`. What comes before (ViT's patch embedding, class token and position
//! embedding; BERT's word, position and segment embeddings) and after (the classifier head, BERT's pooler) is
//! left out, so the published totals are checked minus those parts, each counted below.
//!
//! Each block is written as the exporters and HuggingFace write it: separate query, key and value products,
//! heads split by a reshape and brought to the front by a transpose (the keys' transposed for the product),
//! the scores scaled by 1/√d (a multiply by a constant, as HuggingFace's BERT export has it), softmax over the
//! keys, the heads joined again, an output projection, a residual add, and a feed-forward of two products
//! around a GELU. ViT normalises before each half (pre-norm, epsilon 1e-6, a final layer norm), BERT after each
//! residual add (post-norm, epsilon 1e-12).

use super::builder::Builder;
use crate::layer::{Activation, ElementwiseFn, Op};
use crate::network::Network;

/// One encoder: its sequence, width, heads, depth and where it normalises.
struct Encoder {
    name: &'static str,
    tokens: usize,
    dim: usize,
    heads: usize,
    depth: usize,
    pre_norm: bool,
    epsilon: f64,
}

impl Encoder {
    fn build(&self) -> Network {
        let (s, d, h) = (self.tokens, self.dim, self.heads);
        let head = d / h;
        let mut b = Builder::new(self.name, vec![s, d]);
        let norm = |b: &mut Builder, name: String| b.layer(name, Op::LayerNorm { axis: -1, epsilon: self.epsilon });
        let linear = |b: &mut Builder, name: String, units: usize, from: &str| {
            b.layer_from(name, Op::MatMul { units: Some(units), use_bias: true }, &[from.to_string()])
        };
        let product = Op::MatMul { units: None, use_bias: false };
        let mut x = b.current();
        for i in 0..self.depth {
            let p = format!("block{i}");
            let attn_in = if self.pre_norm { norm(&mut b, format!("{p}_ln1")) } else { x.clone() };
            let mut heads = Vec::new();
            for (t, perm) in [("q", [1, 0, 2]), ("k", [1, 2, 0]), ("v", [1, 0, 2])] {
                linear(&mut b, format!("{p}_{t}"), d, &attn_in);
                b.reshape(format!("{p}_{t}_heads"), vec![s as i64, h as i64, head as i64]);
                heads.push(b.layer(format!("{p}_{t}_t"), Op::Transpose { perm: perm.to_vec() }));
            }
            b.layer_from(format!("{p}_scores"), product.clone(), &heads[..2]);
            b.layer(
                format!("{p}_scale"),
                Op::Elementwise { function: ElementwiseFn::Mul, constant_shape: smallvec::smallvec![] },
            );
            let weights = b.layer(format!("{p}_softmax"), Op::Softmax { axis: -1 });
            b.layer_from(format!("{p}_context"), product.clone(), &[weights, heads[2].clone()]);
            b.layer(format!("{p}_context_t"), Op::Transpose { perm: vec![1, 0, 2] });
            let joined = b.reshape(format!("{p}_context_flat"), vec![s as i64, d as i64]);
            let projected = linear(&mut b, format!("{p}_proj"), d, &joined);
            let mut res = b.add(format!("{p}_res1"), &[x.clone(), projected]);
            if !self.pre_norm {
                res = norm(&mut b, format!("{p}_ln1"));
            }
            let ffn_in = if self.pre_norm { norm(&mut b, format!("{p}_ln2")) } else { res.clone() };
            linear(&mut b, format!("{p}_fc1"), 4 * d, &ffn_in);
            let act = b.act(format!("{p}_gelu"), Activation::Gelu);
            let out = linear(&mut b, format!("{p}_fc2"), d, &act);
            x = b.add(format!("{p}_res2"), &[res, out]);
            if !self.pre_norm {
                x = norm(&mut b, format!("{p}_ln2"));
            }
        }
        if self.pre_norm {
            norm(&mut b, "final_ln".to_string());
        }
        b.finish()
    }
}

/// One encoder block of `tokens` tokens of `dim` features in `heads` heads, normalising before each half (ViT)
/// or after (BERT): the sampler's augmentation of the zoo's transformers.
pub fn encoder_block(tokens: usize, dim: usize, heads: usize, pre_norm: bool) -> Network {
    let epsilon = if pre_norm { 1e-6 } else { 1e-12 };
    Encoder { name: "encoder_block", tokens, dim, heads, depth: 1, pre_norm, epsilon }.build()
}

/// A ViT's parameters outside its encoder: the 16×16 patch embedding of 3 channels, the class token, the position
/// embedding of 197 tokens and the 1000-class head.
const fn vit_outside(d: u64) -> u64 {
    (3 * 16 * 16 * d + d) + d + 197 * d + (d * 1000 + 1000)
}

/// timm `vit_tiny_patch16_224`: 5,717,416 parameters.
pub const VIT_TI16_PARAMS: u64 = 5_717_416 - vit_outside(192);
/// timm `vit_small_patch16_224` (DeiT-S's architecture): 22,050,664 parameters.
pub const VIT_S16_PARAMS: u64 = 22_050_664 - vit_outside(384);
/// torchvision `vit_b_16`: 86,567,656 parameters.
pub const VIT_B16_PARAMS: u64 = 86_567_656 - vit_outside(768);

/// BERT's parameters outside its encoder: word (30,522), position (512) and segment (2) embeddings with their layer
/// norm, and the pooler.
const fn bert_outside(d: u64) -> u64 {
    (30_522 + 512 + 2) * d + 2 * d + (d * d + d)
}

/// HuggingFace `bert-base-uncased`: 109,482,240 parameters.
pub const BERT_BASE_PARAMS: u64 = 109_482_240 - bert_outside(768);

const fn vit(name: &'static str, dim: usize, heads: usize) -> Encoder {
    Encoder { name, tokens: 197, dim, heads, depth: 12, pre_norm: true, epsilon: 1e-6 }
}

const fn bert(name: &'static str, tokens: usize, dim: usize, heads: usize, depth: usize) -> Encoder {
    Encoder { name, tokens, dim, heads, depth, pre_norm: false, epsilon: 1e-12 }
}

/// ViT-Ti/16 at 224×224: 197 tokens of 192 features, 3 heads, 12 blocks.
pub fn vit_ti16() -> Network {
    vit("vit_ti16_encoder", 192, 3).build()
}

/// ViT-S/16 (DeiT-S) at 224×224: 197 tokens of 384 features, 6 heads, 12 blocks.
pub fn vit_s16() -> Network {
    vit("vit_s16_encoder", 384, 6).build()
}

/// ViT-B/16 at 224×224: 197 tokens of 768 features, 12 heads, 12 blocks.
pub fn vit_b16() -> Network {
    vit("vit_b16_encoder", 768, 12).build()
}

/// BERT-base (768 features, 12 heads, 12 blocks) on 128 tokens.
pub fn bert_base_s128() -> Network {
    bert("bert_base_encoder_s128", 128, 768, 12, 12).build()
}

/// BERT-base on 512 tokens, its longest sequence.
pub fn bert_base_s512() -> Network {
    bert("bert_base_encoder_s512", 512, 768, 12, 12).build()
}

/// BERT-base on 64 tokens (calibration only: never sampled): with BERT-small's 64 tokens, the encoders whose
/// products read more weights than rows, which a network reads from farther than the products looped alone.
pub fn bert_base_s64() -> Network {
    bert("bert_base_encoder_s64", 64, 768, 12, 12).build()
}

/// BERT-small (512 features, 8 heads, 4 blocks) on 64 tokens.
pub fn bert_small_s64() -> Network {
    bert("bert_small_encoder_s64", 64, 512, 8, 4).build()
}

/// BERT-small on 256 tokens.
pub fn bert_small_s256() -> Network {
    bert("bert_small_encoder_s256", 256, 512, 8, 4).build()
}

/// ViT-B/32 at 224×224 (holdout: never sampled): 50 tokens of 768 features, 12 heads, 12 blocks.
pub fn vit_b32() -> Network {
    Encoder { tokens: 50, ..vit("vit_b32_encoder", 768, 12) }.build()
}

/// torchvision `vit_b_32`: 88,224,232 parameters, of which the 32×32 patch embedding, the class token, 50
/// position embeddings and the head are outside the encoder.
pub const VIT_B32_PARAMS: u64 = 88_224_232 - ((3 * 32 * 32 * 768 + 768) + 768 + 50 * 768 + (768 * 1000 + 1000));

/// BERT-medium (Google's `bert_uncased_L-8_H-512_A-8`: 512 features, 8 heads, 8 blocks) on 128 tokens (holdout:
/// never sampled).
pub fn bert_medium_s128() -> Network {
    bert("bert_medium_encoder_s128", 128, 512, 8, 8).build()
}

/// BERT-medium's encoder parameters (the architecture's count, as for BERT-small).
pub const BERT_MEDIUM_PARAMS: u64 = 8 * (12 * 512 * 512 + 13 * 512);

/// BERT-small's encoder parameters: 4 blocks of 12·512² + 13·512 (its checkpoint's total is not published
/// beside it, so the count is the architecture's).
pub const BERT_SMALL_PARAMS: u64 = 4 * (12 * 512 * 512 + 13 * 512);
