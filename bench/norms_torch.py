#!/usr/bin/python3
"""PyTorch 1.13's CPU times for bench/norms.cpp's shapes: F.layer_norm, F.group_norm, and
rms_norm composed (torch 1.13 has none: x * rsqrt(mean(x^2) + eps) * w, PyTorch 2.4's formula).
Forward (no_grad) and forward + backward from a fixed dy, float32, medians of `rounds` timed runs
after two warm-ups, at 1 and 2 threads:
  /usr/bin/python3 bench/norms_torch.py 21"""
import sys, time
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


cases = [
    ("rms_norm [1024, 384] (composed)", [leaf(1024, 384), leaf(384)],
     lambda x, w: rms_norm(x, w, 1e-6)),
    ("rms_norm [256, 4096] (composed)", [leaf(256, 4096), leaf(4096)],
     lambda x, w: rms_norm(x, w, 1e-6)),
    ("group_norm [64, 64, 16, 16] G 32", [leaf(64, 64, 16, 16), leaf(64), leaf(64)],
     lambda x, w, b: F.group_norm(x, 32, w, b)),
    ("group_norm [16, 128, 32, 32] G 32", [leaf(16, 128, 32, 32), leaf(128), leaf(128)],
     lambda x, w, b: F.group_norm(x, 32, w, b)),
    ("layer_norm [1024, 384]", [leaf(1024, 384), leaf(384), leaf(384)],
     lambda x, w, b: F.layer_norm(x, (384,), w, b)),
]


def run(leaves, fn, dy, backward):
    for t in leaves:
        t.grad = None
    t0 = time.perf_counter()
    if backward:
        fn(*leaves).backward(dy)
    else:
        with torch.no_grad():
            fn(*leaves)
    return (time.perf_counter() - t0) * 1e3


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    torch.manual_seed(1)
    print(f"torch {torch.__version__}, float32, median of {rounds} (ms)")
    print(f"{'case':36s} {'thr':>3s} {'fwd':>10s} {'f+b':>10s}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, leaves, fn in cases:
            dy = torch.randn(leaves[0].shape)
            times = [[], []]
            for i in range(rounds + 2):
                for b in (0, 1):
                    ms = run(leaves, fn, dy, b == 1)
                    if i >= 2:
                        times[b].append(ms)
            med = [sorted(t)[len(t) // 2] for t in times]
            print(f"{name:36s} {threads:3d} {med[0]:10.3f} {med[1]:10.3f}")


main()
