"""NCHW against NHWC (channels_last) in PyTorch's own CPU convolutions (oneDNN), for
docs/performance.md's "Layout": inference of torchvision's ResNet-18 (3x224x224, batch 8) and of
vitrine-train's ResNet-8 (1x28x28, batch 128), 2 threads, the two formats alternating over 3
rounds, each the median of its passes.

    /usr/bin/python3 bench/conv_layout_torch.py
"""
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmnist_models import build_resnet  # noqa: E402


def images_per_s(model, x, passes):
    with torch.no_grad():
        for _ in range(3):
            model(x)
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
    times.sort()
    return x.shape[0] / times[len(times) // 2]


def main():
    torch.set_num_threads(2)
    resnet8 = {"depth": 8, "channels": 1, "num_classes": 10, "width": 16, "layers": [1, 1, 1],
               "stem": "cifar"}
    cases = [("ResNet-18 3x224x224, batch 8", torchvision.models.resnet18(),
              torch.randn(8, 3, 224, 224), 7),
             ("ResNet-8 1x28x28, batch 128", build_resnet(resnet8), torch.randn(128, 1, 28, 28),
              15)]
    for name, model, x, passes in cases:
        model.eval()
        for r in range(3):
            nchw = images_per_s(model.to(memory_format=torch.contiguous_format), x, passes)
            nhwc = images_per_s(model.to(memory_format=torch.channels_last),
                                x.to(memory_format=torch.channels_last), passes)
            print(f"{name}, round {r + 1}: NCHW {nchw:.1f} images/s, channels_last {nhwc:.1f} "
                  f"images/s ({nhwc / nchw:.2f}x)")


if __name__ == "__main__":
    main()
