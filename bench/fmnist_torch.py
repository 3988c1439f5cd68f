#!/usr/bin/python3
"""PyTorch reference run of vitrine-train's Fashion-MNIST recipe, for docs/benchmarks.md.

Trains, on the CPU, the same Vision Transformer with the same recipe as `vitrine-train` does from
a vitrine-train config (default: configs/fashion_mnist.json; --config FILE, --set key=value as
vitrine-train's), evaluates the test set after every epoch, and appends one JSON line per epoch to
--out (default bench/results/fmnist_torch.jsonl). Run it with Debian's Python, which has torch:

    nice /usr/bin/python3 bench/fmnist_torch.py --set data.validation_fraction=0
    /usr/bin/python3 bench/fmnist_torch.py --self-check

What is reproduced from Vitrine (each with the file it was read from):

Model (models/vit.{h,cpp}; timm's VisionTransformer and names): patch_embed.proj, a Conv2d
(kernel = stride = patch, bias); cls_token [1, 1, dim] concatenated in front; pos_embed
[1, 1 + patches, dim] added to all tokens (cls included); `depth` pre-norm blocks
    x = x + drop_path(attn(norm1(x)));  x = x + drop_path(mlp(norm2(x)))
with LayerNorm(eps = model.eps, default 1e-6), attention qkv = Linear(dim, 3 dim, bias =
model.qkv_bias), softmax(q * head_dim^-0.5 @ k^T) @ v, proj Linear; MLP fc1 -> exact (erf) GELU ->
dropout -> fc2 -> dropout (model.dropout, also after attn.proj, as timm's proj_drop); drop path
(stochastic depth) rate model.drop_path * i / (depth - 1) in block i, as timm's DropPath (one
Bernoulli(1 - p) per example, scaled by 1 / (1 - p)); final LayerNorm; pooling: the class token
("cls") or the mean of the patch tokens ("mean"); head Linear(dim, 10).
The "fmnist" preset (ViTConfig::preset): 28x28, 1 channel, 10 classes, patch 4, dim 128, depth 6,
4 heads, mlp_dim 256 -- 805130 parameters. Fields in the model section override the preset.
Supported fields: dim, depth, heads, mlp_dim, patch, pool, dropout, drop_path, eps, qkv_bias;
anything else that differs from the preset (image_size, channels, num_classes, attn_dropout,
embed_dropout, registers, layer_scale, representation, no_embed_class, fc_norm) is an error.

Initialisation (VisionTransformer / ViTBlock constructors, nn/layers.cpp, nn/init.cpp; it is
timm's default 'init_weights_vit_timm'):
  * every Linear (attn.qkv, attn.proj, mlp.fc1, mlp.fc2, head): weight trunc_normal(mean 0,
    std 0.02, cut at the absolute bounds [-2, 2], i.e. in effect untruncated), bias zeros;
  * pos_embed: trunc_normal(std 0.02, [-2, 2]);
  * cls_token: normal(mean 0, std 1e-6);
  * patch_embed.proj (Conv2d): PyTorch's default, weight kaiming_uniform(a = sqrt 5), i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = channels * patch^2, bias the same bound;
  * LayerNorm: weight ones, bias zeros.
The distributions are Vitrine's; the random streams are not (Vitrine draws from its own Philox
generator), so the two runs start from different samples of the same initialisation.

Data (nn/data/idx.cpp, transforms.cpp, loader.cpp, train/datasets.cpp): the IDX .gz files in
data.path, or $VITRINE_FASHION_MNIST, or /usr/share/datasets/fashion-mnist; pixels / 255; training
transforms in from_config's order: random_crop {size, padding} (zero padding on the [0, 1]
image, window top then left uniform, as torchvision's RandomCrop(size, padding)), hflip p, then
normalise (mean, std). Evaluation: the random crop becomes a centre crop of its size (identity at
28), no flip, normalise. data.validation_fraction holds out round(fraction * 60000) training
images chosen by a seeded permutation (Vitrine's split draws a different, Philox, permutation);
they are evaluated after every epoch too. Batches of data.batch_size, reshuffled every epoch, the
last partial batch kept (DataLoader's drop_last = false), so steps per epoch = ceil(n / batch).

Optimisation (train/trainer.cpp, nn/optim/*): AdamW (torch.optim.AdamW) with betas and eps
from the config and two param groups as param_groups_with_decay: weight_decay on parameters with
>= 2 dims except names containing pos_embed / cls_token / register_tokens, none on biases and
norms; cross entropy with optim.label_smoothing; clip_grad_norm_(optim.grad_clip) when > 0.
Schedule, set before each optimizer step s = 0, 1, ...: lr = optim.lr * factor(s), with
(make_schedule, WarmupCosineSchedule) W = llround(warmup_epochs * steps_per_epoch) (half away from
zero), T = epochs * steps_per_epoch,
    s < W:  factor = s / W
    else:   p = min(1, (s - W) / max(1, T - W)),
            factor = min_lr_factor + (1 - min_lr_factor) * 0.5 * (1 + cos(pi p));
"constant" is factor 1, "step" gamma ^ floor(s / (step_epochs * steps_per_epoch)).
The model is initialised under torch.manual_seed(train.seed); the shuffle and the augmentation
draw from torch Generators seeded from train.seed too. torch.set_num_threads(--threads).

Timing: train_seconds counts the training steps only (building the batch -- indexing, crop,
normalise -- forward, backward, clipping, optimizer step, reading the loss and the accuracy), as
vitrine-train's train_seconds (which includes waiting for its loader); evaluations are excluded.

Per epoch it prints and appends {"framework": "pytorch", "epoch" (epochs done, from 1; Vitrine's
metrics.jsonl counts from 0), "global_step", "train_seconds" (cumulative), "images_per_s" (this
epoch), "train_loss" (mean label-smoothed batch loss), "train_accuracy", "test_accuracy",
"test_loss" (mean unsmoothed cross entropy), "test_images", "run", ...}; at the end a summary:
final test accuracy and the train_seconds at which test accuracy first reached 0.90.

train.tta_hflip evaluates as vitrine-train does: the softmax of each test image and of its mirror
image averaged, log of it as the logits.
Train keys that do not apply here (eval_every, log_every, early_stopping_patience,
early_stopping_metric, test_each_epoch, sync_bn (one process), precision (a GPU setting), out,
data.workers) are ignored; optim.no_decay names the parameters without weight decay as
vitrine-train's ("ndim<=1": every vector and scalar, else a substring of the name); accum_steps != 1, ema_decay, finetune, freeze_backbone, a device
other than "cpu" and optimizers other than adamw are errors.
"""

import argparse
import datetime
import gzip
import json
import os
import sys
import time

from fmnist_config import (ConfigError, DEFAULT_CONFIG, DEFAULT_OUT,
                           SUPPORTED_MODEL_FIELDS, check_recipe, llround, load_config,
                           make_schedule, resnet_json, warmup_cosine, without_comments)
from fmnist_models import build_model, param_groups_with_decay

# ---- data (nn/data/idx.cpp, transforms.cpp, dataset.cpp) ---------------------------------------

def read_idx(folder, name):
    import numpy as np
    for path in (os.path.join(folder, name + ".gz"), os.path.join(folder, name)):
        if os.path.isfile(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            break
    else:
        raise ConfigError(f'data: {name}(.gz) not found in "{folder}" (set data.path, or '
                          "$VITRINE_FASHION_MNIST)")
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 16 != 0 or (magic >> 8) & 0xFF != 0x08:
        raise ConfigError(f"data: {path} is not an unsigned-byte IDX file (magic {magic:#x})")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(config):
    import torch
    folder = config["data"]["path"] or os.environ.get("VITRINE_FASHION_MNIST") or \
        "/usr/share/datasets/fashion-mnist"
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(folder, f"{prefix}-images-idx3-ubyte")
        labels = read_idx(folder, f"{prefix}-labels-idx1-ubyte")
        out[split] = (torch.from_numpy(images.copy()).unsqueeze(1),  # uint8 [N, 1, 28, 28]
                      torch.from_numpy(labels.astype("int64")))
    return folder, out


def make_batch(images_u8, t, train, gen):
    """The transforms on a uint8 batch [B, C, H, W]: /255, random crop (zero padding) or the
    centre crop, hflip, normalise."""
    import torch
    import torch.nn.functional as F
    x = images_u8.float().div_(255.0)
    B, C, H, W = x.shape
    if t["crop"] is not None:
        h, w, pad = t["crop"]
        if train:
            if pad:
                x = F.pad(x, (pad, pad, pad, pad))
            Hp, Wp = x.shape[2], x.shape[3]
            top = torch.randint(0, Hp - h + 1, (B,), generator=gen)
            left = torch.randint(0, Wp - w + 1, (B,), generator=gen)
            if Hp != h or Wp != w:  # out[b, c, y, x] = x[b, c, top_b + y, left_b + x]
                flat = ((top.view(B, 1, 1) + torch.arange(h).view(1, h, 1)) * Wp
                        + left.view(B, 1, 1) + torch.arange(w).view(1, 1, w))
                x = x.reshape(B, C, Hp * Wp).gather(
                    2, flat.view(B, 1, h * w).expand(B, C, h * w)).view(B, C, h, w)
        else:  # torchvision CenterCrop: top = round((H - h) / 2), half to even
            top, left = round((H - h) / 2), round((W - w) / 2)
            x = x[:, :, top:top + h, left:left + w]
    if train and t["hflip"] > 0:
        flip = torch.rand(B, generator=gen) < t["hflip"]
        x = torch.where(flip.view(B, 1, 1, 1), x.flip(3), x)
    if t["mean"] is not None:
        mean = torch.tensor(t["mean"], dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(t["std"], dtype=torch.float32).view(1, -1, 1, 1)
        x = (x - mean) / std
    return x.contiguous()


# ---- training ----------------------------------------------------------------------------------

def evaluate(model, images, labels, t, batch_size):
    import torch
    import torch.nn.functional as F
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, images.shape[0], batch_size):
            x = make_batch(images[i:i + batch_size], t, False, None)
            y = labels[i:i + batch_size]
            logits = model(x)
            if t.get("tta_hflip"):  # vitrine-train's evaluate (train/trainer.h)
                p = (logits.softmax(1) + model(x.flip(3)).softmax(1)) * 0.5
                logits = p.log()
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    model.train()
    n = images.shape[0]
    return correct / n, loss_sum / n


def train(args, config, m, t):
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    seed = config["train"]["seed"]
    torch.manual_seed(seed)
    model = build_model(m)
    n_params = sum(p.numel() for p in model.parameters())

    folder, data = load_fashion_mnist(config)
    train_x, train_y = data["train"]
    test_x, test_y = data["test"]
    if args.test_limit:
        test_x, test_y = test_x[:args.test_limit], test_y[:args.test_limit]
    val = None
    fraction = config["data"]["validation_fraction"]
    if fraction > 0:  # as nn::data::split: round(fraction * n) held out, both parts sorted
        n = train_x.shape[0]
        nval = llround(fraction * n)
        perm = np.random.default_rng(seed).permutation(n)
        vi, ti = torch.from_numpy(np.sort(perm[:nval])), torch.from_numpy(np.sort(perm[nval:]))
        val = (train_x[vi], train_y[vi])
        train_x, train_y = train_x[ti], train_y[ti]

    o = config["optim"]
    optimizer = torch.optim.AdamW(
        param_groups_with_decay(model, o["lr"], o["weight_decay"], o["no_decay"]), lr=o["lr"],
        betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])
    for g in optimizer.param_groups:
        g["initial_lr"] = g["lr"]
    batch_size = config["data"]["batch_size"]
    n_train = train_x.shape[0]
    steps_per_epoch = (n_train + batch_size - 1) // batch_size  # drop_last = false
    factor = make_schedule(config, steps_per_epoch)
    smoothing, clip = o["label_smoothing"], o["grad_clip"]
    epochs = config["train"]["epochs"]
    shuffle_gen = torch.Generator().manual_seed(seed)
    augment_gen = torch.Generator().manual_seed(seed + 2)

    run = datetime.datetime.now().isoformat(timespec="seconds")
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} threads; model "
          f"{json.dumps(resnet_json(m) if m.get('arch') == 'resnet' else {k: m[k] for k in SUPPORTED_MODEL_FIELDS})}"
          f", {n_params} parameters; data {folder}: {n_train} training images"
          f"{f', {val[0].shape[0]} validation' if val else ''}, {test_x.shape[0]} test; "
          f"batch {batch_size}, {steps_per_epoch} steps per epoch, {epochs} epochs", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    global_step, train_seconds = 0, 0.0
    history = []
    for epoch in range(epochs):
        order = torch.randperm(n_train, generator=shuffle_gen)
        epoch_seconds, loss_sum, correct, seen, steps = 0.0, 0.0, 0, 0, 0
        for s in range(steps_per_epoch):
            if args.max_steps and s >= args.max_steps:
                break
            start = time.perf_counter()
            idx = order[s * batch_size:(s + 1) * batch_size]
            x = make_batch(train_x[idx], t, True, augment_gen)
            y = train_y[idx]
            f = factor(global_step)
            for g in optimizer.param_groups:
                g["lr"] = g["initial_lr"] * f
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            loss_sum += loss.item()
            correct += (logits.detach().argmax(1) == y).sum().item()
            epoch_seconds += time.perf_counter() - start
            seen += y.shape[0]
            steps += 1
            global_step += 1
        train_seconds += epoch_seconds
        test_acc, test_loss = evaluate(model, test_x, test_y, t, batch_size)
        line = {"framework": "pytorch", "epoch": epoch + 1, "global_step": global_step,
                "train_seconds": round(train_seconds, 3),
                "images_per_s": round(seen / epoch_seconds, 1) if epoch_seconds > 0 else None,
                "train_loss": round(loss_sum / max(1, steps), 5),
                "train_accuracy": round(correct / max(1, seen), 5),
                "test_accuracy": round(test_acc, 5), "test_loss": round(test_loss, 5),
                "test_images": int(test_x.shape[0])}
        if val is not None:
            val_acc, val_loss = evaluate(model, val[0], val[1], t, batch_size)
            line["validation_accuracy"] = round(val_acc, 5)
            line["validation_loss"] = round(val_loss, 5)
        line.update({"lr": optimizer.param_groups[0]["lr"], "threads": torch.get_num_threads(),
                     "torch": torch.__version__, "run": run})
        if args.max_steps:
            line["max_steps"] = args.max_steps
        print(json.dumps(line), flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f_out:
                f_out.write(json.dumps(line) + "\n")
        history.append(line)
        if args.time_limit is not None and train_seconds >= args.time_limit:
            print(f"time limit: {train_seconds:.1f} s of training >= {args.time_limit} s; "
                  f"stopping after epoch {epoch + 1}", flush=True)
            break

    final = history[-1]
    reached = next((h for h in history if h["test_accuracy"] >= 0.90), None)
    print(f"final test accuracy: {final['test_accuracy']:.4f} after {final['epoch']} epochs, "
          f"{final['train_seconds']:.1f} s of training")
    if reached:
        print(f"test accuracy >= 0.90 first at {reached['train_seconds']:.1f} s of training "
              f"(epoch {reached['epoch']}, accuracy {reached['test_accuracy']:.4f})")
    else:
        print("test accuracy >= 0.90: not reached")
    if args.out:
        print(f"results appended to {args.out}")


# ---- --self-check ------------------------------------------------------------------------------

def self_check():
    import torch
    failures = []

    def check(name, got, want, tol=1e-12):
        ok = abs(got - want) <= tol if isinstance(want, float) else got == want
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {got} (want {want})")
        if not ok:
            failures.append(name)

    # WarmupCosineSchedule(W, T, min): hand-computed values.
    check("warmup_cosine(0; 422, 4220, 0)", warmup_cosine(0, 422, 4220, 0.0), 0.0)
    check("warmup_cosine(211; 422, 4220, 0)", warmup_cosine(211, 422, 4220, 0.0), 0.5)
    check("warmup_cosine(422; 422, 4220, 0)", warmup_cosine(422, 422, 4220, 0.0), 1.0)
    check("warmup_cosine(2321; 422, 4220, 0) (progress 1/2)", warmup_cosine(2321, 422, 4220, 0.0),
          0.5, 1e-12)
    check("warmup_cosine(35; 10, 110, 0) (progress 1/4)", warmup_cosine(35, 10, 110, 0.0),
          0.8535533905932737, 1e-15)  # (1 + cos(pi/4)) / 2
    check("warmup_cosine(85; 10, 110, 0) (progress 3/4)", warmup_cosine(85, 10, 110, 0.0),
          0.1464466094067262, 1e-15)  # (1 - cos(pi/4)) / 2
    check("warmup_cosine(4220; 422, 4220, 0)", warmup_cosine(4220, 422, 4220, 0.0), 0.0)
    check("warmup_cosine(9999; 422, 4220, 0) (clamped)", warmup_cosine(9999, 422, 4220, 0.0), 0.0)
    check("warmup_cosine(2321; 422, 4220, 0.1)", warmup_cosine(2321, 422, 4220, 0.1), 0.55, 1e-12)
    check("warmup_cosine(4220; 422, 4220, 0.1)", warmup_cosine(4220, 422, 4220, 0.1), 0.1, 1e-12)
    check("warmup_cosine(10; 10, 10, 0) (max(1, T - W))", warmup_cosine(10, 10, 10, 0.0), 1.0)
    check("warmup_cosine(5; 0, 10, 0) (no warm-up)", warmup_cosine(5, 0, 10, 0.0), 0.5, 1e-12)
    # make_schedule on the default config with one epoch of warm-up, 10 epochs and depth 6 (the
    # values below are worked for those): 60000 / 128 -> 469 steps per epoch (last batch kept).
    cfg = load_config(DEFAULT_CONFIG, ["data.validation_fraction=0", "schedule.warmup_epochs=1",
                                       "model.depth=6", "model.stem=[]", "train.epochs=10"])
    f = make_schedule(cfg, 469)  # W = 469, T = 4690
    check("default config: factor(0)", f(0), 0.0)
    check("default config: factor(100) = 100/469", f(100), 100 / 469, 1e-15)
    check("default config: factor(469)", f(469), 1.0)
    check("default config: factor(469 + 4221/3 = 1876) (progress 1/3)", f(1876), 0.75, 1e-15)
    check("default config: factor(469 + 2 * 4221/3 = 3283) (progress 2/3)", f(3283), 0.25, 1e-15)
    check("default config: factor(4690)", f(4690), 0.0)
    # warm-up rounding: llround(0.5 * 469) = 235 (half away from zero; Python round gives 234).
    cfg2 = load_config(DEFAULT_CONFIG, ["schedule.warmup_epochs=0.5"])
    f2 = make_schedule(cfg2, 469)
    check("warmup_epochs 0.5 x 469 steps: factor(234) = 234/235", f2(234), 234 / 235, 1e-15)
    check("warmup_epochs 0.5 x 469 steps: factor(235) = 1", f2(235), 1.0)
    cfg3 = load_config(DEFAULT_CONFIG, ["schedule.name=constant"])
    check("constant: factor(123)", make_schedule(cfg3, 469)(123), 1.0)

    # The model: the fmnist preset has 805130 parameters (vitrine-train --summary).
    m, _ = check_recipe(cfg)
    torch.manual_seed(0)
    model = build_model(m)
    check("fmnist preset parameters", sum(p.numel() for p in model.parameters()), 805130)
    groups = param_groups_with_decay(model, 1e-3, 0.05)
    check("decayed tensors (conv, 4 Linear weights x 6 blocks, head)", len(groups[0]["params"]), 26)
    check("undecayed tensors", len(groups[1]["params"]), 54)
    names = [n for n, _ in model.named_parameters()]
    check("timm names", names[:6] + names[-2:],
          ["cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias",
           "blocks.0.norm1.weight", "blocks.0.norm1.bias", "head.weight", "head.bias"])
    out = model(torch.zeros(2, 1, 28, 28))
    check("logits shape", tuple(out.shape), (2, 10))
    w = model.blocks[0].attn.qkv.weight
    check("qkv weight std ~ 0.02", round(w.std().item(), 3), 0.02)
    check("Linear biases zero", sum(mod.bias.abs().sum().item() for mod in model.modules()
                                    if isinstance(mod, torch.nn.Linear)), 0.0)
    check("cls_token std < 1e-5", model.cls_token.std().item() < 1e-5, True)
    m7, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.patch=7", "model.pool=mean"]))
    check("--set model.patch=7 model.pool=mean", (m7["patch"], m7["pool"], m7["dim"]),
          (7, "mean", 128))
    m8, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.patch_kernel=8"]))
    proj8 = build_model(m8).patch_embed.proj
    check("--set model.patch_kernel=8: the overlapping patch embedding",
          (tuple(proj8.weight.shape), proj8.stride, proj8.padding), ((128, 1, 8, 8), (4, 4), (2, 2)))
    check("--set model.patch_kernel=8: logits shape",
          tuple(build_model(m8)(torch.zeros(2, 1, 28, 28)).shape), (2, 10))

    # The convolutional stem (models/vit.h, ViTConfig::stem): [24, 48, 96] over patch 4 has
    # strides 2, 2, 1 and a 1x1 projection; parameters as vitrine-train prints them.
    ms, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.stem=[24,48,96]"]))
    stem_model = build_model(ms)
    check("--set model.stem=[24,48,96]: strides", ms["stem_strides"], [2, 2, 1])
    check("--set model.stem=[24,48,96]: projection",
          (tuple(stem_model.patch_embed.proj.weight.shape), stem_model.patch_embed.proj.stride),
          ((128, 96, 1, 1), (1, 1)))
    check("--set model.stem=[24,48,96]: stem names",
          [n for n, _ in stem_model.named_parameters()][2:5],
          ["patch_embed.stem.0.weight", "patch_embed.stem.1.weight", "patch_embed.stem.1.bias"])
    check("--set model.stem=[24,48,96]: parameters (depth 4)",
          sum(p.numel() for p in stem_model.parameters()), 602802)
    check("--set model.stem=[24,48,96]: logits shape",
          tuple(stem_model(torch.zeros(2, 1, 28, 28)).shape), (2, 10))
    try:
        check_recipe(load_config(DEFAULT_CONFIG, ["model.stem=[24]", "model.patch_kernel=8"]))
        check("a stem with patch_kernel is refused", False, True)
    except ConfigError as e:
        check("a stem with patch_kernel is refused", "cannot be combined" in str(e), True)

    # The ResNet of --set model.arch=resnet: ResNet-8 for 1x28x28 images, torchvision's names.
    mr, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.arch=resnet"]))
    check("--set model.arch=resnet: ResNet-8", (mr["depth"], mr["width"], mr["channels"]),
          (8, 16, 1))
    resnet = build_model(mr)
    check("ResNet-8 parameters (vitrine-train --summary)",
          sum(p.numel() for p in resnet.parameters()), 77754)
    check("ResNet names", [n for n, _ in resnet.named_parameters()][:2] +
          [n for n, _ in resnet.named_parameters()][-2:],
          ["conv1.weight", "bn1.weight", "fc.weight", "fc.bias"])
    check("ResNet logits shape", tuple(resnet(torch.zeros(2, 1, 28, 28)).shape), (2, 10))
    mr20, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.arch=resnet", "model.depth=20"]))
    check("--set model.depth=20 after model.arch=resnet", mr20["depth"], 20)
    # torchvision's ResNet-18 for Fashion-MNIST: 11,689,512 less a 3-channel conv1 and 1000 classes.
    m18, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.arch=resnet", "model.preset=resnet18"]))
    check("--set model.preset=resnet18: layers and stem", (m18["depth"], m18["layers"], m18["stem"]),
          (18, [2, 2, 2, 2], "imagenet"))
    r18 = build_model(m18)
    check("ResNet-18 parameters (vitrine-train --summary)",
          sum(p.numel() for p in r18.parameters()), 11175370)
    check("ResNet-18 stem", (tuple(r18.conv1.weight.shape), r18.conv1.stride, r18.maxpool.stride),
          ((64, 1, 7, 7), (2, 2), 2))
    check("ResNet-18 logits shape", tuple(r18(torch.zeros(2, 1, 28, 28)).shape), (2, 10))
    m10, _ = check_recipe(load_config(DEFAULT_CONFIG, ["model.arch=resnet", "model.layers=[1,1,1,1]",
                                                       "model.stem=imagenet", "model.width=8"]))
    check("--set model.layers=[1,1,1,1] model.stem=imagenet: depth", m10["depth"], 10)
    check("ResNet-10 width 8 stages", [n for n, _ in build_model(m10).named_children()],
          ["conv1", "bn1", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"])
    try:
        check_recipe(load_config(DEFAULT_CONFIG, ["model.arch=resnet", "model.preset=resnet18",
                                                  "model.depth=34"]))
        check("depth 34 with layers [2, 2, 2, 2] is refused", False, True)
    except ConfigError as e:
        check("depth 34 with layers [2, 2, 2, 2] is refused", "disagrees" in str(e), True)

    # Augmentation: padding 2 then a 28x28 window is a shift of the image within zeros.
    g = torch.Generator().manual_seed(0)
    img = torch.arange(28 * 28, dtype=torch.float32).view(1, 1, 28, 28).to(torch.uint8)
    t = {"crop": (28, 28, 2), "hflip": 0.0, "mean": None, "std": None}
    x = make_batch(img.repeat(64, 1, 1, 1), t, True, g)
    ref = torch.nn.functional.pad(img.float() / 255, (2, 2, 2, 2))[0, 0]
    ok = all(any(torch.equal(x[b, 0], ref[i:i + 28, j:j + 28]) for i in range(5) for j in range(5))
             for b in range(64))
    check("random_crop(28, padding 2) = a window of the zero-padded image", ok, True)
    check("eval crop is the identity at 28",
          torch.equal(make_batch(img, t, False, None), img.float() / 255), True)

    if failures:
        print(f"self-check: {len(failures)} FAILED: {', '.join(failures)}")
        return 1
    print("self-check: all passed")
    return 0


# ---- main --------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(
        description="Train vitrine-train's Fashion-MNIST ViT recipe in PyTorch (CPU) and log "
                    "time and test accuracy per epoch.")
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help="a vitrine-train config JSON (default: configs/fashion_mnist.json)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one key, as vitrine-train: --set model.patch=7 "
                        "--set train.epochs=15 (repeatable; values are JSON when they parse)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="JSON-lines file the epochs are appended to (default "
                        "bench/results/fmnist_torch.jsonl; '' for none)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop after the epoch during which train_seconds passes SECONDS")
    p.add_argument("--max-steps", type=int, default=0,
                   help="smoke tests: at most this many steps per epoch (the schedule keeps the "
                        "full epoch's length)")
    p.add_argument("--test-limit", type=int, default=0,
                   help="smoke tests: evaluate only the first N test images")
    p.add_argument("--self-check", action="store_true",
                   help="check the schedule and the model's size against Vitrine's, then exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config and exit")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    # OpenMP (and OpenBLAS's OpenMP build) read this when torch loads; set_num_threads follows.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    try:
        if args.self_check:
            import torch
            torch.set_num_threads(args.threads)
            return self_check()
        config = load_config(args.config, args.sets)
        m, t = check_recipe(config)
        if args.print_config:
            print(json.dumps(without_comments(config), indent=2))
            return 0
        train(args, config, m, t)
        return 0
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
