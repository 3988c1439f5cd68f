#!/usr/bin/env python3
"""Shares of a perf profile by kind of work: the tables of docs/convolutions.md (issue 47).

    perf record -o r8.data -F 2000 -g -- build/tools/bench/vitrine-bench --model fmnist \\
        --set model.arch=resnet --threads 2 --what infer --repeats 10
    python3 bench/profile_shares.py r8.data

Reads `perf report --no-children --sort symbol` of the recording and adds the samples of each
symbol to the first kind whose pattern matches its name; prints each kind's share of the samples
counted. The benchmark's own sgemm peak measurement (OpenBLAS's Cooperlake kernels) and its random
inputs are left out (the last line says how much). Standard library only.
"""
import collections
import re
import subprocess
import sys

KINDS = [
    ("SKIP", r"COOPERLAKE|CpuBackend::normal|CpuBackend::uniform|__ieee754_log|__cos_fma|__sin_fma"),
    ("matrix products (the own GEMM)", r"micro_kernel|sgemm|pack_block16|pack_panel|add_row_sums|run_units"),
    ("direct convolution's tiles", r"::tile<"),
    ("direct weight gradient's tiles", r"dw_tile<|dw_group_tiles|direct_dw_run"),
    ("direct convolution's phase planes, prefetches, plan", r"direct_run|pack_phases|deinterleave_row|make_plan|direct_conv2d|direct_weight"),
    ("narrow Winograd's products", r"::product<"),
    ("narrow Winograd's transforms (windows, outputs, weight)", r"input_panel|output_panel|make_lanes|direct_winograd|narrow_run"),
    ("Winograd's transforms (windows, input, output, weight)", r"gather_windows|input_transform|output_transform|transform_weight"),
    ("im2col", r"im2col"),
    ("col2im", r"col2im"),
    ("implicit GEMM's copies (padded planes, outputs, dy at the wide columns)", r"anonymous namespace\)::run\(|conv_implicit|implicit_conv2d_weight_grad|::pack\b|copy_out"),
    ("batch norm kernels", r"affine|centered|sum_row|batch_norm|channel_"),
    ("copies (y out of a group's product, dy into it)", r"memmove|memcpy|memset|conv2d_batched|conv_forward"),
    ("threads waiting (pool spins)", r"ensure_workers|run_chunks$|run_chunks\b(?!_of)|__schedule|spin|futex|sched_yield"),
    ("elementwise (ReLU, the residual add, their gradients)", r"binary|unary|relu|Loop<"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: profile_shares.py PERF_DATA")
    out = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--sort", "symbol",
                          "--stdio", "-g", "none"], capture_output=True, text=True, check=True).stdout
    total = collections.OrderedDict((name, 0.0) for name, _ in KINDS)
    total["the rest"] = 0.0
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        share, where, symbol = float(m.group(1)), m.group(2), m.group(3)
        kind = "the rest"
        if where != "k":
            for name, pattern in KINDS:
                if re.search(pattern, symbol):
                    kind = name
                    break
        total[kind] += share
    skipped = total.pop("SKIP")
    counted = sum(total.values())
    for name, share in total.items():
        print(f"{name}: {100 * share / counted:.1f}%")
    print(f"(left out: {skipped:.1f}% of the samples, the benchmark's sgemm peak and random inputs)")


if __name__ == "__main__":
    main()
