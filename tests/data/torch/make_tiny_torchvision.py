#!/usr/bin/env python3
"""Make tiny torchvision ViT and ConvNeXt ONNX test fixtures with both PyTorch exporters.

Versions used (Python 3.11.7, default PyPI (CUDA) builds of torch, run on CPU):
  torch 2.15.0+cu132, torchvision 0.29.2+cu132, onnx 1.23.2, onnxscript 0.7.2

Run:  python3 tests/data/torch/make_tiny_torchvision.py (not in CI: the files it writes are committed)
Writes into the directory of this script:
  tiny_vit_torchscript.onnx       (torch.onnx.export(..., dynamo=False, opset_version=17))
  tiny_vit_dynamo.onnx            (torch.onnx.export(..., dynamo=True, external_data=False))
  tiny_convnext_torchscript.onnx  (dynamo=False, opset_version=13, as the issue's exports)
  tiny_convnext_dynamo.onnx       (dynamo=True, external_data=False)

Models, each: torch.manual_seed(0), the model, its input [1, 3, 32, 32] from torch.randn, then every parameter
overwritten with N(0, 0.02^2) under torch.manual_seed(1) (the default init has zero biases and class token, which
the exporters deduplicate or drop, unlike a trained checkpoint's), eval().
- VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
  num_classes=10): vit_b_16's architecture at a tenth of its size. Its encoder's nn.MultiheadAttention
  (batch_first=True) computes sequence first, so the exports transpose the batch of 1 behind the tokens and
  back. Not exported under torch.no_grad(): with grad disabled, eval-mode nn.MultiheadAttention takes its fast
  path (aten::_native_multi_head_attention), which the TorchScript exporter cannot write at opset 17.
- ConvNeXt with two stages (16 channels, 1 block; 32 channels, 1 block), 10 classes: convnext_tiny's blocks
  (7x7 depthwise convolution, a layer norm over the channels between permutes to channels-last and back, two
  linear layers on the channels-last tensor with GELU between, a layer scale, the residual add), its
  downsampling (layer norm, 2x2 stride-2 convolution) and its head (average pool, layer norm, flatten, linear).
"""
import os

import torch
import torchvision
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

OUT = os.path.dirname(os.path.abspath(__file__))


def tiny_vit():
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
    )


def tiny_convnext():
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def seeded(build):
    torch.manual_seed(0)
    m = build().eval()
    x = torch.randn(1, 3, 32, 32)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.02)
    return m, (x,)


def main():
    jobs = [
        ("tiny_vit_torchscript", tiny_vit, False, dict(opset_version=17)),
        ("tiny_vit_dynamo", tiny_vit, True, dict(external_data=False)),
        ("tiny_convnext_torchscript", tiny_convnext, False, dict(opset_version=13)),
        ("tiny_convnext_dynamo", tiny_convnext, True, dict(external_data=False)),
    ]
    for stem, build, dynamo, kw in jobs:
        model, args = seeded(build)
        path = os.path.join(OUT, stem + ".onnx")
        torch.onnx.export(model, args, path, dynamo=dynamo, input_names=["input"], output_names=["logits"], **kw)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
