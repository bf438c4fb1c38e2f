#!/usr/bin/env python3
"""Small ONNX fixtures written by PyTorch's two exporters, for the import tests (tests/onnx.rs).

Not run by CI (it needs PyTorch); the files it writes are committed. Run from the repository root:

    pip install torch onnx onnxscript
    python3 tests/data/torch/make_fixtures.py

`tiny_se` has what the exporters write differently from a Keras-style description: a squeeze-excite block
(a mean over H and W kept 1x1, two 1x1 convolutions, a gate), `torch.cat([x])` of a single tensor, and global
average pooling written as `x.mean((2, 3))`. The newer (dynamo) exporter stores the weights beside the model
(`NAME.onnx.data`) and writes the reductions with their axes as an input (opset 18). `tiny_shuffle` is a
ShuffleNet v2 unit: a channel split (`Slice` or `Split`) and a channel shuffle (`Reshape`, `Transpose`,
`Reshape`).
"""
import os

import torch
from torch import nn

OUT = os.path.dirname(os.path.abspath(__file__))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.squeeze = nn.Conv2d(16, 4, 1)
        self.excite = nn.Conv2d(4, 16, 1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        s = x.mean((2, 3), keepdim=True)
        s = torch.sigmoid(self.excite(torch.relu(self.squeeze(s))))
        x = torch.cat([x * s], 1)
        return self.head(x.mean((2, 3)))


class TinyShuffle(nn.Module):
    """A ShuffleNet v2 unit: the channels split in two, one half through a 1x1 and a depthwise convolution,
    concatenated with the other and shuffled (torchvision's `channel_shuffle`)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=8))

    def forward(self, x):
        x = self.stem(x)
        a, b = x.chunk(2, dim=1)
        x = torch.cat((a, self.branch(b)), dim=1)
        n, c, h, w = x.size()
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        return x


def main():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    for model, base in [(Tiny().eval(), "tiny_se"), (TinyShuffle().eval(), "tiny_shuffle")]:
        for name, dynamo, opset in [(f"{base}_torchscript", False, 13), (f"{base}_dynamo", True, 18)]:
            path = os.path.join(OUT, f"{name}.onnx")
            with torch.no_grad():
                torch.onnx.export(model, (x,), path, opset_version=opset, dynamo=dynamo, external_data=dynamo,
                                  input_names=["input"], output_names=["output"])
            print(path, sorted(f for f in os.listdir(OUT) if f.startswith(name)))


if __name__ == "__main__":
    main()
