"""vitrine-train's config as bench/fmnist_torch.py reads it: the sections and keys, --set, the
checks of what the PyTorch run can reproduce (check_recipe), the model, transforms and schedule
derived from it. The recipe itself is described in fmnist_torch.py's docstring."""

import copy
import json
import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(REPO, "configs", "fashion_mnist.json")
DEFAULT_OUT = os.path.join(REPO, "bench", "results", "fmnist_torch.jsonl")

# ---- the config (train/config.{h,cpp}) -----------------------------------------------------------

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
    """vitrine-train's --set section.key=value (train/config.cpp apply_override)."""
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


# ---- the schedule (nn/optim/schedule.cpp, train/config.cpp make_schedule) -------------------------

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
