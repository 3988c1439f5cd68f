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

Data (nn/data/idx.cpp, transforms.cpp, loader.cpp, tools/train/datasets.cpp): the IDX .gz files in
data.path, or $VITRINE_FASHION_MNIST, or /usr/share/datasets/fashion-mnist; pixels / 255; training
transforms in from_config's order: random_crop {size, padding} (zero padding on the [0, 1]
image, window top then left uniform, as torchvision's RandomCrop(size, padding)), hflip p, then
normalise (mean, std). Evaluation: the random crop becomes a centre crop of its size (identity at
28), no flip, normalise. data.validation_fraction holds out round(fraction * 60000) training
images chosen by a seeded permutation (Vitrine's split draws a different, Philox, permutation);
they are evaluated after every epoch too. Batches of data.batch_size, reshuffled every epoch, the
last partial batch kept (DataLoader's drop_last = false), so steps per epoch = ceil(n / batch).

Optimisation (tools/train/trainer.cpp, nn/optim/*): AdamW (torch.optim.AdamW) with betas and eps
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
import copy
import datetime
import gzip
import json
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(REPO, "configs", "fashion_mnist.json")
DEFAULT_OUT = os.path.join(REPO, "bench", "results", "fmnist_torch.jsonl")

# ---- the config (tools/train/config.{h,cpp}) -----------------------------------------------------

SECTIONS = ["model", "data", "optim", "schedule", "train"]
SECTION_KEYS = {
    "data": ["dataset", "path", "validation_fraction", "subset", "batch_size", "workers",
             "transforms"],
    "optim": ["name", "lr", "weight_decay", "betas", "eps", "momentum", "nesterov",
              "label_smoothing", "grad_clip", "no_decay"],
    "schedule": ["name", "warmup_epochs", "min_lr_factor", "step_epochs", "gamma"],
    "train": ["epochs", "seed", "eval_every", "log_every", "early_stopping_patience",
              "accum_steps", "ema_decay", "test_each_epoch", "tta_hflip", "finetune",
              "max_steps", "freeze_backbone", "device", "precision", "out", "zero", "bucket_mb",
              "early_stopping_metric", "sync_bn"],
}
TRANSFORM_KEYS = ["resize", "center_crop", "random_crop", "hflip", "mean", "std"]
SIZE_KEYS = ["model.image_size", "data.transforms.resize", "data.transforms.center_crop",
             "data.transforms.random_crop", "data.transforms.random_crop.size"]

# ViTConfig's defaults (models/vit.h), in to_json()'s form.
VIT_DEFAULTS = {
    "image_size": [224, 224], "patch": 16, "patch_kernel": 0, "stem": [], "channels": 3,
    "num_classes": 1000,
    "dim": 768, "depth": 12, "heads": 12, "mlp_dim": 3072, "dropout": 0.0, "attn_dropout": 0.0,
    "embed_dropout": 0.0, "drop_path": 0.0, "pool": "cls", "representation": 0,
    "qkv_bias": True, "eps": 1e-6, "registers": 0, "layer_scale": False,
    "layer_scale_init": 1e-5, "no_embed_class": False, "fc_norm": False,
}
PRESETS = {
    "fmnist": dict(VIT_DEFAULTS, image_size=[28, 28], patch=4, channels=1, num_classes=10,
                   dim=128, depth=6, heads=4, mlp_dim=256),
}
# ResNetConfig's defaults (models/resnet.h) and presets: the CIFAR networks (depth 6 n + 2, 3
# channels, 10 classes, 32x32) and torchvision's resnet18 / resnet34 (the imagenet stem, width 64,
# 1000 classes, 224x224); vitrine-train's --set model.arch=resnet keeps the data's channels,
# classes and size. RESNET_OPTIONAL: the keys ResNetConfig::to_json writes only where they are not
# the CIFAR network's (blocks per stage, [n, n, n] from depth when absent; the stem), with a value
# of their type (ResNetConfig::fields).
RESNET_DEFAULTS = {"arch": "resnet", "depth": 20, "channels": 3, "num_classes": 10, "width": 16,
                   "image_size": [32, 32]}
RESNET_OPTIONAL = {"layers": [3, 3, 3], "stem": "cifar"}
RESNET_PRESETS = {f"resnet{d}": dict(RESNET_DEFAULTS, depth=d) for d in (8, 14, 20, 32, 44, 56)}
RESNET_PRESETS.update({
    f"resnet{d}": dict(RESNET_DEFAULTS, depth=d, num_classes=1000, width=64, image_size=[224, 224],
                       layers=layers, stem="imagenet")
    for d, layers in ((18, [2, 2, 2, 2]), (34, [3, 4, 6, 3]))})
# The model fields this script implements beyond the preset.
SUPPORTED_MODEL_FIELDS = ["dim", "depth", "heads", "mlp_dim", "patch", "patch_kernel", "stem",
                          "pool", "dropout", "drop_path", "eps", "qkv_bias"]
# Fields whose value only matters when another is set (layer_scale_init without layer_scale).
IGNORABLE_MODEL_FIELDS = ["layer_scale_init"]


class ConfigError(Exception):
    pass


def is_comment(key):
    return key.startswith("_")


def without_comments(j):
    if isinstance(j, dict):
        return {k: without_comments(v) for k, v in j.items() if not is_comment(k)}
    if isinstance(j, list):
        return [without_comments(v) for v in j]
    return j


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_json(path, what):
    if not os.path.isfile(path):
        raise ConfigError(f'{what} "{path}": no such file')
    with open(path, encoding="utf-8") as f:
        try:
            j = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f'{what} "{path}": invalid JSON at line {e.lineno}, column '
                              f'{e.colno}: {e.msg}') from None
    if not isinstance(j, dict):
        raise ConfigError(f'{what} "{path}": expected a JSON object with the sections '
                          f'{", ".join(SECTIONS)}')
    return j


def with_defaults(config, defaults):
    """vitrine's with_defaults: missing sections and keys from the default config; "model" whole."""
    out = copy.deepcopy(config)
    for section, values in defaults.items():
        if is_comment(section):
            continue
        if section not in out:
            out[section] = copy.deepcopy(values)
        elif section != "model" and isinstance(out[section], dict) and isinstance(values, dict):
            for k, v in values.items():
                if not is_comment(k) and k not in out[section]:
                    out[section][k] = copy.deepcopy(v)
    return out


def parse_value(text):
    """JSON when it parses (4, 5e-4, true, [28, 28], {"size": 28}); C-style numbers (.5, 1.);
    else the text as a string."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if text and not text[0].isspace():
        try:
            x = float(text)
            if math.isfinite(x):
                return x
        except ValueError:
            pass
    return text


def type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if is_number(v):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def same_kind(old, given, path):
    if old is None or type_name(old) == type_name(given):
        return True
    if path in SIZE_KEYS:
        size_like = is_number(given) or isinstance(given, list) or (
            path == "data.transforms.random_crop" and isinstance(given, dict))
        return size_like and (is_number(old) or isinstance(old, (list, dict)))
    return False


def optional_keys(parent, node):
    """Keys that may be --set though absent, with a value of their type (None: any)."""
    if parent == "model":
        if isinstance(node, dict) and node.get("arch") == "resnet":
            return dict(RESNET_DEFAULTS, **RESNET_OPTIONAL, preset="resnet8")
        return dict(VIT_DEFAULTS, preset="fmnist", arch="vit")
    if parent == "data.transforms":
        return {k: None for k in TRANSFORM_KEYS}
    if parent == "data.transforms.random_crop" and isinstance(node, dict):
        return {"size": None, "padding": None}
    return {}


def apply_override(config, assignment):
    """vitrine-train's --set section.key=value (tools/train/config.cpp apply_override)."""
    if "=" not in assignment:
        raise ConfigError(f'--set "{assignment}": expected KEY=VALUE with a dotted key, as '
                          'model.depth=4 or optim.lr=5e-4')
    key, text = assignment.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f'--set "{assignment}": "{key}" is not a dotted key')
    given = parse_value(text)
    if key == "model.arch":
        # As vitrine-train: another architecture starts a fresh model section that keeps what the
        # data decided (channels, classes, input size; the ViT preset's here).
        if given not in ("vit", "resnet"):
            raise ConfigError(f'--set {assignment}: unknown architecture "{text}" (known: vit, '
                              'resnet)')
        if given != config["model"].get("arch", "vit"):
            config["model"] = {"arch": given, "channels": 1, "num_classes": 10,
                               "image_size": [28, 28]}
            if given == "resnet":
                config["model"]["preset"] = "resnet8"
        return
    node, parent = config, ""
    for i, part in enumerate(parts):
        path = f"{parent}.{part}" if parent else part
        last = i + 1 == len(parts)
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment}: {parent} is {type_name(node)}, not a "
                              f'section, so it has no key "{part}"')
        if part not in node:
            optional = optional_keys(parent, node)
            if part in optional and last:
                if isinstance(optional[part], str) and not isinstance(given, str):
                    given = text
                if not same_kind(optional[part], given, path):
                    raise ConfigError(f"--set {assignment}: {path} takes "
                                      f"{type_name(optional[part])}, got {text} "
                                      f"({type_name(given)})")
                node[part] = given
                return
            valid = SECTIONS if not parent else sorted(
                {k for k in node if not is_comment(k)} | set(optional))
            raise ConfigError(f'--set {assignment}: unknown key "{path}"; the keys of '
                              f'"{parent or "the config"}" are: {", ".join(valid)}')
        if last:
            old = node[part]
            if isinstance(old, str) and not isinstance(given, str):
                given = text
            if not same_kind(old, given, path):
                raise ConfigError(f"--set {assignment}: {path} holds {type_name(old)} (now "
                                  f"{json.dumps(old)}), got {text} ({type_name(given)})")
            node[part] = given
            return
        node, parent = node[part], path


def check_keys(config):
    for k in config:
        if not is_comment(k) and k not in SECTIONS:
            raise ConfigError(f'config: unknown section "{k}"; the sections are: '
                              f'{", ".join(SECTIONS)}')
    for section, keys in SECTION_KEYS.items():
        s = config.get(section)
        if not isinstance(s, dict):
            raise ConfigError(f'config: section "{section}" must be an object')
        for k in s:
            if not is_comment(k) and k not in keys:
                raise ConfigError(f'config: unknown key "{section}.{k}"; the keys of "{section}" '
                                  f'are: {", ".join(keys)}')
        for k in keys:
            if k not in s:
                raise ConfigError(f'config: missing key "{section}.{k}"')


def model_config(config):
    """The model section as ViTConfig fields: the preset, then the section's other fields; checked
    against what this script implements."""
    section = without_comments(config["model"])
    if not isinstance(section, dict):
        raise ConfigError("config: the model section must be an object")
    if section.get("arch", "vit") == "resnet":
        return resnet_config(section)
    section = {k: v for k, v in section.items() if k != "arch"}
    for k in section:
        if k != "preset" and k not in VIT_DEFAULTS:
            raise ConfigError(f'config: model: unknown key "{k}"; the keys are: preset, '
                              f'{", ".join(VIT_DEFAULTS)}')
    preset = section.get("preset")
    if preset is None:
        merged = dict(VIT_DEFAULTS)
    elif preset in PRESETS:
        merged = dict(PRESETS[preset])
    elif preset in RESNET_PRESETS:
        raise ConfigError(f"config: model: preset '{preset}' is a ResNet's, and this model "
                          'section\'s arch is vit: give "arch": "resnet" with it (vitrine-train: '
                          f"--set model.arch=resnet --set model.preset={preset})")
    else:
        raise ConfigError(f'config: model.preset "{preset}": this benchmark implements only the '
                          f'{", ".join(PRESETS)} preset (Vitrine knows more)')
    merged.update({k: v for k, v in section.items() if k != "preset"})
    if is_number(merged["image_size"]):
        merged["image_size"] = [merged["image_size"]] * 2
    ref = PRESETS["fmnist"]
    for k, v in merged.items():
        if k in SUPPORTED_MODEL_FIELDS or k in IGNORABLE_MODEL_FIELDS:
            continue
        if v != ref[k]:
            raise ConfigError(f"config: model.{k} = {json.dumps(v)}: this benchmark supports only "
                              f"the fmnist preset's value {json.dumps(ref[k])} (it implements "
                              f"{', '.join(SUPPORTED_MODEL_FIELDS)} besides)")
    for k in ["dim", "depth", "heads", "mlp_dim", "patch"]:
        v = merged[k]
        if not (is_number(v) and v == int(v) and v > 0):
            raise ConfigError(f"config: model.{k} must be a positive integer, got {json.dumps(v)}")
        merged[k] = int(v)
    for k in ["dropout", "drop_path"]:
        if not (is_number(merged[k]) and 0 <= merged[k] < 1):
            raise ConfigError(f"config: model.{k} must be in [0, 1), got {merged[k]}")
    if not (is_number(merged["eps"]) and merged["eps"] > 0):
        raise ConfigError(f"config: model.eps must be positive, got {merged['eps']}")
    if not isinstance(merged["qkv_bias"], bool):
        raise ConfigError("config: model.qkv_bias must be true or false")
    if merged["pool"] not in ("cls", "mean"):
        raise ConfigError(f"config: model.pool \"{merged['pool']}\" is not \"cls\" or \"mean\"")
    if merged["dim"] % merged["heads"]:
        raise ConfigError(f"config: model.dim {merged['dim']} is not divisible by model.heads "
                          f"{merged['heads']}")
    pk = merged["patch_kernel"]
    if not (is_number(pk) and pk == int(pk) and
            (pk == 0 or (pk >= merged["patch"] and (pk - merged["patch"]) % 2 == 0))):
        raise ConfigError(f"config: model.patch_kernel {json.dumps(pk)} must be 0 (the patch "
                          f"size) or the patch size {merged['patch']} plus an even number")
    stem = merged["stem"]
    if not (isinstance(stem, list) and len(stem) <= 8 and
            all(is_number(w) and w == int(w) and 0 < w <= 4096 for w in stem)):
        raise ConfigError(f"config: model.stem {json.dumps(stem)} must be a list of at most 8 "
                          f"widths in [1, 4096]")
    if stem and pk:
        raise ConfigError(f"config: model: a stem and patch_kernel {pk} cannot be combined")
    merged["stem"] = [int(w) for w in stem]
    # ViTConfig::stem_strides: 2 while the patch size left is even, else 1.
    strides, left = [], merged["patch"]
    for _ in stem:
        strides.append(2 if left % 2 == 0 else 1)
        left //= strides[-1]
    merged["stem_strides"] = strides
    merged["patch_kernel"] = int(pk) if pk else left
    h, w = merged["image_size"]
    if h % merged["patch"] or w % merged["patch"]:
        raise ConfigError(f"config: model: image size {h}x{w} is not a multiple of the patch "
                          f"size {merged['patch']}")
    return merged


def resnet_config(section):
    """A ResNet model section (ResNetConfig::from_json and preset, ClassifierSpec::from_json): the
    preset, then the fields; layers given without depth take the depth they make. The result has
    every field, layers and stem included."""
    keys = list(RESNET_DEFAULTS) + list(RESNET_OPTIONAL)
    for k in section:
        if k != "preset" and k not in keys:
            raise ConfigError(f'config: model: unknown key "{k}" for a resnet; the keys are: '
                              f'preset, {", ".join(keys)}')
    preset = section.get("preset", "resnet20")
    if preset not in RESNET_PRESETS:
        raise ConfigError(f'config: model.preset "{preset}": the resnet presets are '
                          f'{", ".join(RESNET_PRESETS)}')
    merged = dict(RESNET_OPTIONAL, layers=None)
    merged.update(RESNET_PRESETS[preset])
    merged.update({k: v for k, v in section.items() if k != "preset"})
    if is_number(merged["image_size"]):
        merged["image_size"] = [merged["image_size"]] * 2
    layers = merged["layers"]
    if layers is not None:
        if not (isinstance(layers, list) and 1 <= len(layers) <= 8):
            raise ConfigError(f"config: model.layers must list the basic blocks of 1 to 8 stages "
                              f"(as [2, 2, 2, 2] for ResNet-18), got {layers}")
        for i, b in enumerate(layers):
            if not (is_number(b) and b == int(b) and 1 <= b <= 600):
                raise ConfigError(f"config: model.layers[{i}] must be a number of blocks in "
                                  f"[1, 600], got {b}")
        layers = [int(b) for b in layers]
        if "layers" in section and "depth" not in section:
            merged["depth"] = 2 * sum(layers) + 2
    for k in ["depth", "channels", "num_classes", "width"]:
        if not (is_number(merged[k]) and merged[k] == int(merged[k]) and merged[k] > 0):
            raise ConfigError(f"config: model.{k} must be a positive integer")
        merged[k] = int(merged[k])
    if layers is None:
        if merged["depth"] < 8 or (merged["depth"] - 2) % 6:
            raise ConfigError(f"config: model.depth {merged['depth']}: a resnet's depth is 6 n + 2 "
                              "(8, 14, 20, ...) without model.layers")
        layers = [(merged["depth"] - 2) // 6] * 3
    elif merged["depth"] != 2 * sum(layers) + 2:
        raise ConfigError(f"config: model.depth {merged['depth']} disagrees with model.layers "
                          f"{layers}: basic blocks make depth 2 x {sum(layers)} blocks + 2 = "
                          f"{2 * sum(layers) + 2}")
    merged["layers"] = layers
    if merged["stem"] not in ("cifar", "imagenet"):
        raise ConfigError(f'config: model.stem must be "cifar" or "imagenet", got {merged["stem"]}')
    if (merged["channels"], merged["num_classes"], list(merged["image_size"])) != (1, 10, [28, 28]):
        raise ConfigError("config: this benchmark trains on Fashion-MNIST: 1 channel, 10 classes, "
                          "28x28")
    return merged


def resnet_json(m):
    """A resolved ResNet section as ResNetConfig::to_json writes it: layers and stem only where
    they are not the CIFAR network's."""
    out = {k: m[k] for k in RESNET_DEFAULTS}
    if m["layers"] != [(m["depth"] - 2) // 6] * 3:
        out["layers"] = m["layers"]
    if m["stem"] != "cifar":
        out["stem"] = m["stem"]
    return out


def size_pair(v, key):
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x > 0 for x in v):
        return tuple(v)
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return (v, v)
    raise ConfigError(f'config: data.transforms.{key} must be [height, width] or one size, got '
                      f'{json.dumps(v)}')


def transforms_config(config, image_hw):
    """data.transforms as {"crop": (h, w, padding) or None, "hflip": p, "mean", "std"}."""
    t = without_comments(config["data"]["transforms"])
    if not isinstance(t, dict):
        raise ConfigError("config: data.transforms must be an object")
    for k in t:
        if k not in TRANSFORM_KEYS:
            raise ConfigError(f'config: data.transforms: unknown key "{k}" (known: '
                              f'{", ".join(TRANSFORM_KEYS)})')
    for k in ("resize", "center_crop"):
        if k in t:
            raise ConfigError(f"config: data.transforms.{k} is not implemented by this benchmark "
                              "(Fashion-MNIST images are already 28x28)")
    out = {"crop": None, "hflip": 0.0, "mean": None, "std": None}
    if "random_crop" in t:
        rc = t["random_crop"]
        padding = 0
        if isinstance(rc, dict):
            for k in rc:
                if k not in ("size", "padding"):
                    raise ConfigError(f'config: data.transforms.random_crop: unknown key "{k}" '
                                      "(known: size, padding)")
            if "size" not in rc:
                raise ConfigError('config: data.transforms.random_crop needs a "size"')
            size = size_pair(rc["size"], "random_crop.size")
            padding = rc.get("padding", 0)
            if not (isinstance(padding, int) and not isinstance(padding, bool) and padding >= 0):
                raise ConfigError("config: data.transforms.random_crop.padding must be an "
                                  f"integer >= 0, got {json.dumps(padding)}")
        else:
            size = size_pair(rc, "random_crop")
        if tuple(size) != tuple(image_hw):
            raise ConfigError(f"config: data.transforms.random_crop size {list(size)}: the model "
                              f"takes {list(image_hw)} images and this benchmark does no resize")
        out["crop"] = (size[0], size[1], padding)
    if "hflip" in t:
        p = t["hflip"]
        if not (is_number(p) and 0 <= p <= 1):
            raise ConfigError(f"config: data.transforms.hflip must be a probability, got {p}")
        out["hflip"] = float(p)
    if ("mean" in t) != ("std" in t):
        raise ConfigError('config: data.transforms: "mean" and "std" go together')
    if "mean" in t:
        for k in ("mean", "std"):
            v = t[k]
            if not (isinstance(v, list) and len(v) == 1 and is_number(v[0])):
                raise ConfigError(f"config: data.transforms.{k} must be one number per channel "
                                  f"(1 for Fashion-MNIST), got {json.dumps(v)}")
            out[k] = [float(x) for x in v]
        if out["std"][0] == 0:
            raise ConfigError("config: data.transforms.std must be non-zero")
    return out


def check_recipe(config):
    """Errors for what the config asks and this script does not do; returns the resolved values."""
    check_keys(config)
    d, o, s, t = config["data"], config["optim"], config["schedule"], config["train"]
    if d["dataset"] != "fashion-mnist":
        raise ConfigError(f'config: data.dataset "{d["dataset"]}": this benchmark runs '
                          'fashion-mnist only')
    if not (is_number(d["validation_fraction"]) and 0 <= d["validation_fraction"] < 1):
        raise ConfigError("config: data.validation_fraction must be in [0, 1)")
    if not (isinstance(d["batch_size"], int) and d["batch_size"] >= 1):
        raise ConfigError("config: data.batch_size must be an integer >= 1")
    if o["name"] != "adamw":
        raise ConfigError(f'config: optim.name "{o["name"]}": this benchmark implements adamw only')
    if not (is_number(o["lr"]) and o["lr"] > 0 and is_number(o["weight_decay"])
            and o["weight_decay"] >= 0):
        raise ConfigError("config: optim.lr must be > 0 and optim.weight_decay >= 0")
    if not (isinstance(o["betas"], list) and len(o["betas"]) == 2
            and all(is_number(b) and 0 <= b < 1 for b in o["betas"])):
        raise ConfigError(f"config: optim.betas must be [beta1, beta2] in [0, 1), got {o['betas']}")
    if not (is_number(o["label_smoothing"]) and 0 <= o["label_smoothing"] < 1):
        raise ConfigError("config: optim.label_smoothing must be in [0, 1)")
    if not (is_number(o["grad_clip"]) and o["grad_clip"] >= 0):
        raise ConfigError("config: optim.grad_clip must be >= 0")
    if s["name"] not in ("warmup_cosine", "constant", "step"):
        raise ConfigError(f'config: schedule.name "{s["name"]}" must be one of warmup_cosine, '
                          "constant, step")
    if not (isinstance(t["epochs"], int) and t["epochs"] >= 1):
        raise ConfigError("config: train.epochs must be an integer >= 1")
    if s["name"] == "warmup_cosine" and not (0 <= s["warmup_epochs"] <= t["epochs"]):
        raise ConfigError("config: schedule.warmup_epochs must be in [0, train.epochs]")
    if s["name"] == "warmup_cosine" and not (0 <= s["min_lr_factor"] <= 1):
        raise ConfigError("config: schedule.min_lr_factor must be in [0, 1]")
    if not (isinstance(t["seed"], int) and t["seed"] >= 0):
        raise ConfigError("config: train.seed must be an integer >= 0")
    if d["subset"] != 0 or t["max_steps"] != 0:
        raise ConfigError("config: data.subset and train.max_steps are not implemented by this "
                          "benchmark (--max-steps limits the steps of an epoch)")
    if t["accum_steps"] != 1:
        raise ConfigError("config: train.accum_steps != 1 is not implemented by this benchmark")
    if t["ema_decay"] != 0:
        raise ConfigError("config: train.ema_decay is not implemented by this benchmark")
    if t["finetune"] or t["freeze_backbone"]:
        raise ConfigError("config: train.finetune / freeze_backbone are not implemented by this "
                          "benchmark (it trains from scratch)")
    if t["device"] != "cpu":
        raise ConfigError(f'config: train.device "{t["device"]}": this benchmark runs on the cpu')
    if not isinstance(t["tta_hflip"], bool):
        raise ConfigError("config: train.tta_hflip must be true or false")
    model = model_config(config)
    transforms = transforms_config(config, model["image_size"])
    transforms["tta_hflip"] = t["tta_hflip"]
    return model, transforms


def load_config(path, sets):
    defaults = read_json(DEFAULT_CONFIG, "default config")
    config = with_defaults(read_json(path, "config file"), defaults)
    for assignment in sets:
        apply_override(config, assignment)
    return config


# ---- the schedule (nn/optim/schedule.cpp, tools/train/config.cpp make_schedule) -------------------

def llround(x):
    """std::llround: to nearest, halves away from zero (Python's round() goes to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def warmup_cosine(step, warmup_steps, total_steps, min_factor):
    if step < 0:
        raise ValueError(f"schedule: step must be >= 0, got {step}")
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * progress))


def make_schedule(config, updates_per_epoch):
    """factor(step) as make_schedule builds it for updates_per_epoch optimizer steps per epoch."""
    s, epochs = config["schedule"], config["train"]["epochs"]
    if s["name"] == "constant":
        return lambda step: 1.0
    if s["name"] == "step":
        size, gamma = s["step_epochs"] * updates_per_epoch, s["gamma"]
        return lambda step: gamma ** (step // size)
    warmup = llround(s["warmup_epochs"] * updates_per_epoch)
    total = epochs * updates_per_epoch
    if not 0 <= warmup <= total:
        raise ConfigError(f"warmup_cosine schedule: need 0 <= warmup_steps <= total_steps, got "
                          f"{warmup} and {total}")
    return lambda step: warmup_cosine(step, warmup, total, s["min_lr_factor"])


# ---- the model (models/vit.cpp, nn/attention.cpp, nn/mlp.cpp, nn/layers.cpp) ----------------------

def build_model(m):
    if m.get("arch") == "resnet":
        return build_resnet(m)
    import torch
    from torch import nn

    def drop_path(x, p, training):  # timm.layers.drop_path
        if p == 0.0 or not training:
            return x
        keep = 1.0 - p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    class DropPath(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            return drop_path(x, self.p, self.training)

    class Attention(nn.Module):
        def __init__(self, dim, heads, qkv_bias, proj_drop):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.scale = self.head_dim ** -0.5
            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.attn_drop = nn.Dropout(0.0)
            self.proj = nn.Linear(dim, dim)
            self.proj_drop = nn.Dropout(proj_drop)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj_drop(self.proj(x))

    class Mlp(nn.Module):
        def __init__(self, dim, hidden, drop):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.act = nn.GELU()  # exact erf GELU
            self.drop1 = nn.Dropout(drop)
            self.fc2 = nn.Linear(hidden, dim)
            self.drop2 = nn.Dropout(drop)

        def forward(self, x):
            return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

    class Block(nn.Module):
        def __init__(self, dp):
            super().__init__()
            self.norm1 = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.attn = Attention(m["dim"], m["heads"], m["qkv_bias"], m["dropout"])
            self.drop_path1 = DropPath(dp) if dp > 0 else nn.Identity()
            self.norm2 = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.mlp = Mlp(m["dim"], m["mlp_dim"], m["dropout"])
            self.drop_path2 = DropPath(dp) if dp > 0 else nn.Identity()

        def forward(self, x):
            x = x + self.drop_path1(self.attn(self.norm1(x)))
            return x + self.drop_path2(self.mlp(self.norm2(x)))

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            # The convolutional stem (models/vit.h, ViTConfig::stem): per width, Conv2d 3x3
            # (padding 1, no bias, stride from stem_strides), BatchNorm2d, ReLU.
            layers, cin = [], m["channels"]
            for width, stride in zip(m["stem"], m["stem_strides"]):
                layers += [nn.Conv2d(cin, width, 3, stride=stride, padding=1, bias=False),
                           nn.BatchNorm2d(width), nn.ReLU()]
                cin = width
            self.stem = nn.Sequential(*layers) if layers else None
            # kernel patch_kernel, stride what the stem left of the patch, padding (kernel -
            # patch) / 2: the grid stays image / patch (ViTConfig::patch_kernel)
            k, st = m["patch_kernel"], m["patch"] // math.prod(m["stem_strides"])
            self.proj = nn.Conv2d(cin, m["dim"], k, stride=st, padding=(k - st) // 2)

        def forward(self, images):
            return self.proj(self.stem(images) if self.stem is not None else images)

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            h, w = m["image_size"]
            patches = (h // m["patch"]) * (w // m["patch"])
            self.pool = m["pool"]
            self.patch_embed = PatchEmbed()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, m["dim"]))
            self.pos_embed = nn.Parameter(torch.zeros(1, 1 + patches, m["dim"]))
            depth = m["depth"]
            rates = [m["drop_path"] * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
            self.blocks = nn.ModuleList([Block(r) for r in rates])
            self.norm = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.head = nn.Linear(m["dim"], m["num_classes"])
            # Vitrine's init (see the docstring); Conv2d and LayerNorm keep PyTorch's defaults.
            nn.init.normal_(self.cls_token, mean=0.0, std=1e-6)
            nn.init.trunc_normal_(self.pos_embed, mean=0.0, std=0.02, a=-2.0, b=2.0)
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    nn.init.trunc_normal_(mod.weight, mean=0.0, std=0.02, a=-2.0, b=2.0)
                    if mod.bias is not None:
                        nn.init.zeros_(mod.bias)

        def forward(self, images):
            x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [B, patches, dim]
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            x = self.norm(x)
            x = x[:, 0] if self.pool == "cls" else x[:, 1:].mean(dim=1)
            return self.head(x)

    return VisionTransformer()


def build_resnet(m):
    """models/resnet.{h,cpp}: the ResNet of He et al. 2016 (the CIFAR networks, or torchvision's
    resnet18/34 with the imagenet stem), torchvision's BasicBlock with option-B shortcuts, as
    tests/fixtures/make_resnet_fixtures.py writes it (the network of the parity fixtures, checked
    there against torchvision's own), with torchvision's init (convs kaiming_normal fan_out,
    BatchNorm 1 and 0, fc PyTorch's Linear default)."""
    import importlib.util
    from torch import nn
    spec = importlib.util.spec_from_file_location(
        "make_resnet_fixtures", os.path.join(REPO, "tests", "fixtures", "make_resnet_fixtures.py"))
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    model = fixtures.ResNet(m["depth"], m["channels"], m["num_classes"], m["width"], m["layers"],
                            m["stem"])
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    return model


def param_groups_with_decay(model, lr, weight_decay,
                            no_decay_names=("ndim<=1", "pos_embed", "cls_token", "register_tokens")):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exempt = any(p.dim() <= 1 if n == "ndim<=1" else n in name for n in no_decay_names)
        (no_decay if exempt else decay).append(p)
    return [{"params": decay, "lr": lr, "weight_decay": weight_decay, "name": "decay"},
            {"params": no_decay, "lr": lr, "weight_decay": 0.0, "name": "no_decay"}]


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
            if t.get("tta_hflip"):  # vitrine-train's evaluate (tools/train/trainer.h)
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
