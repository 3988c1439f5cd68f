#!/usr/bin/python3
"""DCGAN's speed, Vitrine against PyTorch in one run, alternating (issue 61's acceptance;
docs/benchmarks.md, "Image models"): bench/dcgan.cpp (built here from the library in --build)
and bench/dcgan_torch.py (Debian's /usr/bin/python3, torch 1.13), 2 threads each. Cases: the
training step (images/s), and each of the generator's four transposed convolutions and the
convolution it is the gradient of, forward + backward (calls/s), so that both the ratio to
PyTorch and the ratio of a transposed convolution to its convolution can be read off. Writes the
tables, the raw lines and `lscpu` to --out (default bench/results/<date>-dcgan/).

    /usr/bin/python3 bench/dcgan.py [--rounds 3] [--threads 2] [--build build]
"""
import argparse, datetime, os, statistics

import side_by_side as sbs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(sbs.REPO, "build"))
    ap.add_argument("--out", default=os.path.join(
        sbs.REPO, "bench", "results", f"{datetime.date.today()}-dcgan"))
    a = ap.parse_args()
    exe = os.path.join(a.build, "dcgan_bench")
    sbs.build(os.path.join(sbs.HERE, "dcgan.cpp"), exe, a.build)
    cases = [("step", ["--what", "step", "--steps", "8"])]
    for layer in range(1, 5):
        for what in ("convt", "conv"):
            cases.append((f"layer {layer} {what}",
                          ["--what", what, "--layer", str(layer), "--steps", "30"]))
    runs = [(name, [exe] + args + ["--threads", str(a.threads)],
             ["/usr/bin/python3", os.path.join(sbs.HERE, "dcgan_torch.py")] + args +
             ["--threads", str(a.threads)]) for name, args in cases]
    medians, raw = sbs.run(runs, a.rounds, "rate")
    step = sbs.table(["step"], medians, ("training step, batch 64, 32 x 32", "images/s"))
    layers = sbs.table([n for n, _ in cases[1:]], medians, ("layer, forward + backward",
                                                           "calls/s"))
    rows = ["| layer | Vitrine conv_transpose / conv time | PyTorch conv_transpose / conv time |",
            "| --- | ---: | ---: |"]
    for layer in range(1, 5):
        ratio = []
        for side in ("vitrine", "pytorch"):
            t = statistics.median(medians[(f"layer {layer} convt", side)])
            c = statistics.median(medians[(f"layer {layer} conv", side)])
            ratio.append(f"{c / t:.2f}")
        rows.append(f"| {layer} | {ratio[0]} | {ratio[1]} |")
    text = "\n\n".join([step, layers, "\n".join(rows)])
    print(text)
    sbs.write_record(a.out, "DCGAN speed",
                     f"/usr/bin/python3 bench/dcgan.py --rounds {a.rounds} --threads {a.threads}",
                     a.rounds, a.threads, text, raw)


if __name__ == "__main__":
    main()
