#!/usr/bin/python3
"""Evaluates vitrine-train checkpoints (Fashion-MNIST, the fmnist_torch.py architecture) in
PyTorch on the 10000 test images, once on the images as they are and once with flip test-time
augmentation (the softmax of each image and of its mirror image averaged), and prints both.

A cross-check of Vitrine's own evaluation (the single-view figure must equal the one
vitrine-train printed) and the measurement behind docs/benchmarks.md's flip-TTA table:
    /usr/bin/python3 bench/fmnist_eval_torch.py runs/fashion_mnist/last.safetensors ...
Reads the safetensors file by hand (Debian has no safetensors package); the model's config comes
from the checkpoint's vitrine.config metadata, the rest of the recipe from
configs/fashion_mnist.json.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist_torch as ft  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    dtypes = {"F32": torch.float32, "I64": torch.int64}  # I64: BatchNorm's batch count
    for k, v in header.items():
        if v["dtype"] not in dtypes:
            raise SystemExit(f"{path}: tensor {k} is {v['dtype']}, expected F32 or I64")
        s, e = v["data_offsets"]
        tensors[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]),
                                      dtype=dtypes[v["dtype"]]).view(v["shape"])
    return tensors, meta


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    data = None
    for path in sys.argv[1:]:
        tensors, meta = read_safetensors(path)
        if "vitrine.config" not in meta:
            raise SystemExit(f"{path}: no vitrine.config metadata (not a vitrine-train checkpoint)")
        mc = json.loads(meta["vitrine.config"])
        fields = ("dim", "depth", "heads", "mlp_dim", "patch", "patch_kernel", "stem", "pool")
        sets = [f"model.{k}={json.dumps(mc[k])}" for k in fields if k in mc]
        config = ft.load_config(ft.DEFAULT_CONFIG, sets)
        m, t = ft.check_recipe(config)
        model = ft.build_model(m)
        model.load_state_dict({k: v for k, v in tensors.items()
                               if not k.startswith("optimizer.")})
        model.eval()
        if data is None:
            _, data = ft.load_fashion_mnist(config)
        images, labels = data["test"]
        single = flip = 0
        with torch.no_grad():
            for i in range(0, images.shape[0], 500):
                x = ft.make_batch(images[i:i + 500], t, False, None)
                y = labels[i:i + 500]
                p = model(x).softmax(1)
                single += (p.argmax(1) == y).sum().item()
                flip += ((p + model(x.flip(3)).softmax(1)).argmax(1) == y).sum().item()
        n = images.shape[0]
        print(f"{path}: {' '.join(sets)}: test accuracy {100 * single / n:.2f}%, "
              f"with flip TTA {100 * flip / n:.2f}%")


if __name__ == "__main__":
    main()
