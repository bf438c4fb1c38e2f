#!/usr/bin/env python3
"""Make tiny torchvision ConvNeXt ONNX test fixtures with both PyTorch exporters.

Versions used (Python 3.11.7, default PyPI (CUDA) builds of torch, run on CPU):
  torch 2.15.0+cu132, torchvision 0.29.2+cu132, onnx 1.23.2, onnxscript 0.7.2

Run:  python3 tests/data/torch/make_tiny_convnext.py (not in CI: the files it writes are committed)
Writes into the directory of this script:
  tiny_convnext_torchscript.onnx  (torch.onnx.export(..., dynamo=False, opset_version=13), as the issue's exports)
  tiny_convnext_dynamo.onnx       (torch.onnx.export(..., dynamo=True, external_data=False))

Model: torchvision.models.convnext.ConvNeXt with two stages (16 channels, 1 block; 32 channels, 1 block), 10
classes, 32x32 input: convnext_tiny's blocks (7x7 depthwise convolution, a layer norm over the channels between
permutes to channels-last and back, two linear layers on the channels-last tensor with GELU between, a layer
scale, the residual add), its downsampling (layer norm, 2x2 stride-2 convolution) and its head (average pool,
layer norm, flatten, linear). torch.manual_seed(0), then every parameter overwritten with N(0, 0.02^2) under
torch.manual_seed(1), eval(); input [1, 3, 32, 32] from torch.randn right after the model under seed 0.
"""
import os

import torch
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

OUT = os.path.dirname(os.path.abspath(__file__))


def tiny_convnext():
    torch.manual_seed(0)
    m = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.02)
    return m, (x,)


def main():
    for stem, dynamo, kw in [
        ("tiny_convnext_torchscript", False, dict(opset_version=13)),
        ("tiny_convnext_dynamo", True, dict(external_data=False)),
    ]:
        model, args = tiny_convnext()
        path = os.path.join(OUT, stem + ".onnx")
        torch.onnx.export(model, args, path, dynamo=dynamo, input_names=["input"], output_names=["logits"], **kw)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
