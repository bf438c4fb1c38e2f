#!/usr/bin/env python3
"""Export torchvision classification networks to ONNX, as users do, for validating perfmodel on networks no one
here wrote.

Not run by CI (it needs PyTorch). Random weights (no download), batch 1, 224x224 unless a network needs more.

    pip install torch torchvision onnx onnxscript
    python3 zoo/torchvision/export.py --out /tmp/torchvision-onnx            # TorchScript exporter, opset 13
    python3 zoo/torchvision/export.py --out /tmp/tv-dynamo --dynamo          # the newer exporter
    perfmodel validate /tmp/torchvision-onnx/*.onnx --device NAME

Each file is named after the network (resnet18.onnx); a network the exporter fails on is reported and skipped.
"""
import argparse
import os
import sys

NETWORKS = [
    "alexnet", "resnet18", "resnet34", "resnet50", "vgg11_bn", "squeezenet1_0", "squeezenet1_1",
    "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "regnet_x_400mf",
    "regnet_y_400mf", "mnasnet0_5", "mnasnet1_0", "googlenet", "densenet121", "shufflenet_v2_x1_0",
    "resnext50_32x4d", "wide_resnet50_2", "convnext_tiny", "vit_b_16",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to write NAME.onnx into")
    parser.add_argument("--dynamo", action="store_true", help="use the newer (dynamo) exporter")
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("networks", nargs="*", help=f"default: {' '.join(NETWORKS)}")
    args = parser.parse_args()

    import torch
    import torchvision

    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in args.networks or NETWORKS:
        kwargs = {"weights": None}
        if name == "googlenet":
            kwargs.update(aux_logits=False, init_weights=True)
        model = getattr(torchvision.models, name)(**kwargs).eval()
        x = torch.randn(1, 3, 224, 224)
        path = os.path.join(args.out, f"{name}.onnx")
        try:
            with torch.no_grad():
                torch.onnx.export(model, (x,), path, opset_version=args.opset, dynamo=args.dynamo,
                                  input_names=["input"], output_names=["output"])
            print(f"{name}: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")
        except Exception as e:  # the exporter's own failure, reported per network
            failed.append(name)
            print(f"{name}: export failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  file=sys.stderr)
    if failed:
        print(f"{len(failed)} network(s) not exported: {', '.join(failed)}", file=sys.stderr)


if __name__ == "__main__":
    main()
