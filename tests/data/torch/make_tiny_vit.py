#!/usr/bin/env python3
"""Make tiny torchvision ViT ONNX test fixtures with both PyTorch exporters.

Versions used (Python 3.11.7, default PyPI (CUDA) builds of torch, run on CPU):
  torch 2.15.0+cu132, torchvision 0.29.2+cu132, onnx 1.23.2, onnxscript 0.7.2

Run:  python3 tests/data/torch/make_tiny_vit.py (not in CI: the files it writes are committed)
Writes into the directory of this script:
  tiny_vit_torchscript.onnx  (torch.onnx.export(..., dynamo=False, opset_version=17))
  tiny_vit_dynamo.onnx       (torch.onnx.export(..., dynamo=True, external_data=False))

Model: torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
hidden_dim=64, mlp_dim=128, num_classes=10), the architecture of torchvision's vit_b_16 at a tenth of its size:
its encoder's nn.MultiheadAttention (batch_first=True) computes sequence first, so the exports transpose the
batch of 1 behind the tokens and back. torch.manual_seed(0), then every parameter overwritten with
N(0, 0.02^2) under torch.manual_seed(1) (the default init has zero biases and class token, which the exporters
deduplicate or drop, unlike a trained checkpoint's), eval(). Input [1, 3, 32, 32] from torch.randn right after the model under seed 0.
The exports are deliberately not run under torch.no_grad(): with grad disabled, eval-mode
nn.MultiheadAttention takes its fast path (aten::_native_multi_head_attention), which the TorchScript
exporter cannot write at opset 17.
"""
import os

import torch
import torchvision

OUT = os.path.dirname(os.path.abspath(__file__))


def tiny_vit():
    torch.manual_seed(0)
    m = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
    ).eval()
    x = torch.randn(1, 3, 32, 32)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.02)
    return m, (x,)


def main():
    for stem, dynamo, kw in [
        ("tiny_vit_torchscript", False, dict(opset_version=17)),
        ("tiny_vit_dynamo", True, dict(external_data=False)),
    ]:
        model, args = tiny_vit()
        path = os.path.join(OUT, stem + ".onnx")
        torch.onnx.export(model, args, path, dynamo=dynamo, input_names=["input"], output_names=["logits"], **kw)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
