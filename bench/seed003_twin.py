#!/usr/bin/python3
"""Seed 003's recipe (configs/seeds/003_mnist_vit.json) trained by vitrine-train and by its
PyTorch twin, seed by seed in one run, alternating: the issue's acceptance (docs/training.md,
"Seed recipes"). Run with Debian's Python, which has torch and torchvision:

    /usr/bin/python3 bench/seed003_twin.py [--seeds 0 1 2] [--steps 150] [--exe build/tools/train/vitrine-train]

The twin is torchvision's own VisionTransformer with the config's sizes (image 28, patch 7,
6 layers, 2 heads, width 64, MLP 128, 10 classes), its own __init__ (the initialisation that
model.init "torchvision" draws on Vitrine's side), and conv_proj made a 1-channel Conv2d
(the data are grey) initialised as torchvision's __init__ initialises conv_proj: trunc_normal with
std sqrt(1 / fan_in), a zero bias. Recipe, as the config: pixels / 255 (ToTensor; mean 0, std 1),
no augmentation, batches of 64 reshuffled each epoch (last partial batch kept), cross entropy,
torch.optim.Adam(lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay), constant lr, no
clipping; `--steps` optimizer steps, then the test set (10,000 images) in eval mode.

Both sides seed their own generators from the same seed; the random streams differ (Vitrine draws
from its own Philox generator), so each side's runs are samples of the same recipe: compare the
means over the seeds. Accuracy only: the runs are not timed against each other (bench/ has the
speed comparisons). Prints a table and writes it, with `lscpu`'s model line, to --out (a Markdown
file; default bench/results/<date>-seed003-twin/README.md).
"""
import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fmnist_torch import read_idx  # noqa: E402  (the IDX reader of the Fashion-MNIST benchmark)

CONFIG = os.path.join(REPO, "configs", "seeds", "003_mnist_vit.json")


def load(folder):
    import torch
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(folder, f"{prefix}-images-idx3-ubyte")
        labels = read_idx(folder, f"{prefix}-labels-idx1-ubyte")
        out[split] = (torch.from_numpy(images.copy()).unsqueeze(1).float() / 255,
                      torch.from_numpy(labels.astype("int64")))
    return out


def torch_run(config, data, seed, steps, threads):
    import torch
    import torch.nn as nn
    from torchvision.models.vision_transformer import VisionTransformer
    torch.set_num_threads(threads)
    m, d, o = config["model"], config["data"], config["optim"]
    torch.manual_seed(seed)
    model = VisionTransformer(image_size=m["image_size"][0], patch_size=m["patch"],
                              num_layers=m["depth"], num_heads=m["heads"], hidden_dim=m["dim"],
                              mlp_dim=m["mlp_dim"], num_classes=m["num_classes"])
    # Grey images: conv_proj over 1 channel, initialised as torchvision's __init__ does conv_proj.
    model.conv_proj = nn.Conv2d(m["channels"], m["dim"], m["patch"], m["patch"])
    fan_in = model.conv_proj.in_channels * m["patch"] ** 2
    nn.init.trunc_normal_(model.conv_proj.weight, std=math.sqrt(1 / fan_in))
    nn.init.zeros_(model.conv_proj.bias)
    opt = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                           weight_decay=o["weight_decay"])
    loss_fn = nn.CrossEntropyLoss()
    x_train, y_train = data["train"]
    gen = torch.Generator().manual_seed(seed)
    batch, step = d["batch_size"], 0
    model.train()
    while step < steps:
        order = torch.randperm(len(y_train), generator=gen)
        for b in range(0, len(order), batch):
            idx = order[b:b + batch]
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == steps:
                break
    model.eval()
    x_test, y_test = data["test"]
    correct = 0
    with torch.no_grad():
        for b in range(0, len(y_test), 500):
            correct += (model(x_test[b:b + 500]).argmax(1) == y_test[b:b + 500]).sum().item()
    return correct / len(y_test)


def vitrine_run(exe, seed, steps, workdir):
    out = os.path.join(workdir, f"vitrine_{seed}")
    r = subprocess.run([exe, "--config", CONFIG, "--set", f"train.seed={seed}", "--max-steps",
                        str(steps), "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"vitrine-train failed (seed {seed}):\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [line for line in lines if line.get("type") == "test"][-1]["accuracy"]


def lscpu():
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "lscpu: not available"


def cpu_model():
    found = re.search(r"Model name:\s*(.+)", lscpu())
    return found.group(1).strip() if found else "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--exe", default=os.path.join(REPO, "build", "tools", "train",
                                                 "vitrine-train"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=os.path.join(
        REPO, "bench", "results", f"{datetime.date.today()}-seed003-twin", "README.md"))
    args = p.parse_args()
    with open(CONFIG) as f:
        config = json.load(f)
    folder = os.environ.get("VITRINE_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"
    data = load(folder)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:  # alternating: Vitrine, then PyTorch, per seed
            va = vitrine_run(args.exe, seed, args.steps, work)
            ta = torch_run(config, data, seed, args.steps, args.threads)
            rows.append((seed, va, ta))
            print(f"seed {seed}: vitrine {va:.4f}  pytorch {ta:.4f}", flush=True)
    mean = lambda i: sum(r[i] for r in rows) / len(rows)  # noqa: E731
    lines = [
        f"# Seed 003's recipe, {args.steps} steps: Vitrine and PyTorch's twin",
        "",
        f"{datetime.datetime.now().isoformat(timespec='minutes')}, {cpu_model()}, "
        f"{args.threads} threads, data {folder}.",
        f"Command: `/usr/bin/python3 bench/seed003_twin.py --seeds "
        f"{' '.join(map(str, args.seeds))} --steps {args.steps}`",
        "",
        "| seed | Vitrine test accuracy | PyTorch test accuracy |",
        "|---|---|---|",
    ]
    for seed, va, ta in rows:
        lines.append(f"| {seed} | {va:.2%} | {ta:.2%} |")
    lines.append(f"| mean | {mean(1):.2%} | {mean(2):.2%} |")
    lines.append("")
    lines.append(f"Difference of the means: {100 * (mean(1) - mean(2)):+.2f} points.")
    lines += ["", "```", lscpu().rstrip(), "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
