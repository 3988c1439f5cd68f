#!/usr/bin/python3
"""Side-by-side table of a vitrine-train run and a bench/fmnist_torch.py run, for docs/benchmarks.md.

    python3 bench/fmnist_summary.py RUN_DIR/metrics.jsonl TORCH.jsonl

Reads the per-epoch test lines of both (vitrine-train with train.test_each_epoch: {"type": "test",
"epoch" from 0, "train_seconds", "accuracy"}; fmnist_torch.py: {"epoch" from 1, "train_seconds",
"test_accuracy"}) and prints a markdown table: per epoch, the cumulative training time and test
accuracy of each, then the time at which each first reached 90% and 91% and the final accuracy. Needs no
torch (any python3).
"""
import json
import sys


def vitrine_epochs(path):
    rows = []
    for line in open(path):
        j = json.loads(line)
        if j.get("type") == "test" and "epoch" in j:
            rows.append((j["epoch"] + 1, j["train_seconds"], j["accuracy"]))
    return rows


def torch_epochs(path):
    rows = []
    for line in open(path):
        j = json.loads(line)
        if j.get("framework") == "pytorch":
            rows.append((j["epoch"], j["train_seconds"], j["test_accuracy"]))
    return rows


def first_at(rows, target):
    for epoch, seconds, acc in rows:
        if acc >= target:
            return f"reached after {seconds / 60:.1f} min (epoch {epoch})"
    return "not reached"


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    v, t = vitrine_epochs(argv[1]), torch_epochs(argv[2])
    n = max(len(v), len(t))
    print("| epoch | Vitrine time (min) | Vitrine test acc | PyTorch time (min) | PyTorch test acc |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for i in range(n):
        cells = [str(i + 1)]
        for rows in (v, t):
            if i < len(rows):
                cells += [f"{rows[i][1] / 60:.1f}", f"{100 * rows[i][2]:.2f}%"]
            else:
                cells += ["", ""]
        print("| " + " | ".join(cells) + " |")
    print()
    for name, rows in (("Vitrine", v), ("PyTorch", t)):
        final = f"{100 * rows[-1][2]:.2f}% after {rows[-1][1] / 60:.1f} min" if rows else "no data"
        print(f"- {name}: 90% test accuracy {first_at(rows, 0.90)}, 91% "
              f"{first_at(rows, 0.91)}; final {final}")
    if v and t:
        print(f"- training time ratio (PyTorch / Vitrine, {min(len(v), len(t))} epochs): "
              f"{t[min(len(v), len(t)) - 1][1] / v[min(len(v), len(t)) - 1][1]:.2f}")


if __name__ == "__main__":
    main(sys.argv)
