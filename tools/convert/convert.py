#!/usr/bin/env python3
"""Converts a PyTorch checkpoint (.pth / .bin) into a safetensors file that Vitrine reads.

    python3 tools/convert/convert.py input.pth output.safetensors
    python3 tools/convert/convert.py dinov2_vits14.pth dinov2.safetensors --heads 6
    python3 tools/convert/convert.py finetuned.pth out.safetensors --head-key mlp_head.1
    python3 tools/convert/convert.py vit.pth vit.safetensors --config config.json   # no inference

Needs torch (on Debian: apt install python3-torch, then run it with /usr/bin/python3). It is
optional: nothing in Vitrine's build or tests imports it, and checkpoints already in safetensors
(timm, Hugging Face, torchvision exports) need no conversion.

What it reads:
  - a plain state dict (name -> tensor), as timm, torchvision and Hugging Face's
    pytorch_model.bin hold;
  - a dict that holds the state dict under "model", "state_dict", "teacher" (DINO's checkpoints),
    "model_state_dict" or "module", or under the key given with --key (e.g. --key student);
  - a whole pickled nn.Module (its state_dict() is taken; needs --unsafe-pickle).
The leading "module." (DistributedDataParallel) and "_orig_mod." (torch.compile) of every name
are removed. When names start with "backbone." (DINO's teacher / student), only those tensors are
kept, without the prefix, and the others are named in a note: they are DINO's projection head,
not a classifier.

The naming is detected from the names: timm / DINO / DINOv2, torchvision or Hugging Face, the one
that knows the most of them (as Vitrine's loader decides). Then:

The classifier. A single Linear layer (PREFIX.weight [classes, width], PREFIX.bias [classes];
the width is the representation layer's when there is one) is the head when it is stored under
the naming's own name (timm / DINO: head, torchvision: heads.head, Hugging Face: classifier) or,
failing that, under one of head, heads, heads.head, fc, classifier (timm, torchvision before and
after `model.heads = nn.Linear(...)`, Hugging Face, others); --head-key PREFIX names any other
(e.g. --head-key mlp_head.1). It is written under the naming's own name, which the loaders read,
so "heads.weight" of a fine-tuned torchvision ViT becomes "heads.head.weight"; a head without a
bias gets a zero one (the same logits). The number of classes is its rows; none of these names:
no head, 0 classes (a backbone, as DINO's).

No tensor is dropped or left for the loader to refuse. Every tensor must be one of a Vision
Transformer's in the detected naming (the names in docs/vit.md, including those the loader
deliberately ignores: DINOv2's mask_token, Hugging Face's pooler); the others are an error that
lists them all, and suggests --head-key when one of them looks like a Linear layer.

The config is inferred from the tensors' names and shapes (infer_config): the width, the patch
size and channels (the patch embedding's kernel), the depth (the blocks), the MLP width, the
classes, qkv biases, register tokens, layer scale, mean pooling (timm's fc_norm), torchvision's
representation layer, whether the position embedding covers the class token, the attention's
inner width (qkv has 3 x heads x dim_head rows) and whether there is a final norm.

The number of heads is never guessed: qkv has 3 x heads x dim_head rows however they are split.
It comes from, in this order:
  1. --heads N (or --set heads=N), with a note when the checkpoint's own config or a preset of
     the same shapes says otherwise;
  2. the checkpoint's own config, when it holds one beside the tensors: a whole pickled Hugging
     Face model's .config, or an entry "vitrine.config", "config", "model_config",
     "hyper_parameters", "hparams", "args" or "cfg" (its heads / num_attention_heads /
     num_heads / n_heads; used only when its width, if it gives one, is the tensors');
  3. a preset of Vitrine's (models/vit.cpp: vit_{tiny,small,base,large}_patch{8,16,32}_224,
     fmnist, cifar10) whose every shape is the tensors': image size, patch, channels, width,
     depth, MLP width, and an attention as wide as the model.
Otherwise it is an error that asks for --heads. The output says which source gave it.

The image size comes from --image-size (or --set image_size=...), else from the checkpoint's own
config (image_size / img_size), else from the position embedding's rows when its patches make a
square grid; a grid that is not square is an error that asks for --image-size H W. Given sizes
must fit the rows. A convolutional stem (patch_embed.stem.*) leaves the patch size open: such a
checkpoint needs --config.

Two keys are written only when they differ from Vitrine's defaults: "dim_head" (the width of
each head, when the attention's inner width heads x dim_head is not the model's width, as in
lucidrains' vit-pytorch; 0, the default, means width / heads) and "final_norm": false (no
LayerNorm between the last block and the pooling: the checkpoint has no final norm and no
fc_norm). LayerNorm eps is 1e-6, 1e-12 for Hugging Face's ViT (1e-6 for its DINOv2 names), or
the checkpoint's own config's layer_norm_eps (eps in a "vitrine.config" entry).

Every field can be set: --heads, --image-size H [W], --eps, or --set key=value (any field of
Vitrine's config, the value as JSON). --config FILE takes Vitrine's JSON as it is instead (its
num_classes must be the checkpoint's classes). A Hugging Face config.json is not read as
Vitrine's: give it to Vitrine's models::resolve_config (the tools' --model-config) instead, or its
num_attention_heads to --heads here.

What it writes: the tensors under their names (the head under the naming's own name), sorted, in
their own dtypes, and the metadata {"format": "pt", "vitrine.config": <the model's config>}, so
that the file alone rebuilds its model: vitrine-explain and vitrine-train --finetune then need no
--model-config.

The file is written by hand (no safetensors package is needed): an 8-byte little-endian header
length, the JSON header padded with spaces to a multiple of 8 bytes, then the raw little-endian
tensor data. It is written to a temporary file and renamed, so a failed run leaves no half-written
output. Errors are printed as "error: ..." with exit status 1.

By default the checkpoint is loaded with torch.load(weights_only=True), which runs no code from the
file. Checkpoints that also pickle other Python objects (DINO's full checkpoints store their
argparse arguments) need --unsafe-pickle: use it only for files from a source you trust.
"""
import argparse
import json
import os
import re
import sys

import torch

DTYPES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
CONTAINER_KEYS = ("model", "state_dict", "teacher", "model_state_dict", "module")
HF_CONFIG_KEYS = ("model_type", "hidden_size", "architectures", "num_hidden_layers")

# Where a checkpoint may keep a config of its own beside the state dict, and the keys read there.
OWN_CONFIG_KEYS = ("vitrine.config", "config", "model_config", "hyper_parameters", "hparams",
                   "args", "cfg")
HEADS_KEYS = ("heads", "num_attention_heads", "num_heads", "n_heads")
WIDTH_KEYS = ("dim", "hidden_size", "embed_dim")
IMAGE_KEYS = ("image_size", "img_size")

NAMING_NAMES = {"timm": "timm/DINO", "torchvision": "torchvision", "huggingface": "Hugging Face"}

# Every tensor name of a ViT in each naming that Vitrine's loader reads (models/vit_import.cpp),
# including the ones it deliberately ignores (DINOv2's mask_token, Hugging Face's pooler).
# "blocks.C.N." is DINOv2's chunked blocks.
KNOWN_NAMES = {
    "timm": re.compile(
        r"cls_token|pos_embed|register_tokens|reg_token|mask_token"
        r"|(patch_embed\.proj|norm|fc_norm|pre_logits\.fc|head)\.(weight|bias)"
        r"|patch_embed\.stem\.\d+\.(weight|bias|running_mean|running_var|num_batches_tracked)"
        r"|blocks\.(\d+\.)?\d+\.(ls1\.gamma|ls2\.gamma"
        r"|(norm1|attn\.qkv|attn\.proj|norm2|mlp\.fc1|mlp\.fc2)\.(weight|bias))"),
    "torchvision": re.compile(
        r"class_token|encoder\.pos_embedding"
        r"|(conv_proj|encoder\.ln|heads\.head|heads\.pre_logits)\.(weight|bias)"
        r"|encoder\.layers\.encoder_layer_\d+\.(self_attention\.in_proj_(weight|bias)"
        r"|(ln_1|ln_2|self_attention\.out_proj|mlp\.0|mlp\.3|mlp\.linear_1|mlp\.linear_2)"
        r"\.(weight|bias))"),
    "huggingface": re.compile(
        r"((vit|dinov2)\.)?("
        r"embeddings\.(cls_token|position_embeddings|register_tokens|mask_token)"
        r"|(embeddings\.patch_embeddings\.projection|layernorm|classifier|pooler\.dense)"
        r"\.(weight|bias)"
        r"|encoder\.layer\.\d+\.(layer_scale1\.lambda1|layer_scale2\.lambda1"
        r"|(layernorm_before|norm1|layernorm_after|norm2|attention\.attention\.query"
        r"|attention\.attention\.key|attention\.attention\.value|attention\.output\.dense"
        r"|intermediate\.dense|output\.dense|mlp\.fc1|mlp\.fc2)\.(weight|bias)))"),
}

# The classifier: its name in each naming (what the loaders read), and where else a single Linear
# classifier is looked for when that name is absent.
HEAD_NAMES = {"timm": "head", "torchvision": "heads.head", "huggingface": "classifier"}
HEAD_CANDIDATES = ("head", "heads", "heads.head", "fc", "classifier")

# Vitrine's presets (models/vit.cpp, ViTConfig::preset), and the fields compared with a model's.
PRESETS = {}
for _size, (_dim, _depth, _heads, _mlp) in {"tiny": (192, 12, 3, 768),
                                            "small": (384, 12, 6, 1536),
                                            "base": (768, 12, 12, 3072),
                                            "large": (1024, 24, 16, 4096)}.items():
    for _patch in (8, 16, 32):
        PRESETS[f"vit_{_size}_patch{_patch}_224"] = {
            "image_size": [224, 224], "patch": _patch, "channels": 3, "dim": _dim,
            "depth": _depth, "heads": _heads, "mlp_dim": _mlp}
PRESETS["fmnist"] = {"image_size": [28, 28], "patch": 4, "channels": 1, "dim": 128, "depth": 6,
                     "heads": 4, "mlp_dim": 256}
PRESETS["cifar10"] = {"image_size": [32, 32], "patch": 4, "channels": 3, "dim": 192, "depth": 6,
                      "heads": 3, "mlp_dim": 768}
PRESET_SHAPES = ("image_size", "patch", "channels", "dim", "depth", "mlp_dim")


class ConvertError(Exception):
    pass


# ---- reading the checkpoint ------------------------------------------------------------------

def load(path, unsafe):
    try:
        if unsafe:
            return torch.load(path, map_location="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConvertError(f"{path}: no such file")
    except Exception as e:  # torch raises several types for a refused or malformed pickle
        hint = "" if unsafe else (
            " (if the file pickles other Python objects besides tensors and comes from a source "
            "you trust, run again with --unsafe-pickle)")
        raise ConvertError(f"{path}: cannot load: {e}{hint}")


def is_module(obj):
    return hasattr(obj, "state_dict") and callable(obj.state_dict)


def is_state_dict(obj):
    return isinstance(obj, dict) and len(obj) > 0 and all(
        isinstance(k, str) for k in obj) and any(torch.is_tensor(v) for v in obj.values())


def find_state_dict(obj, key, path):
    if is_module(obj):  # a whole nn.Module
        obj = obj.state_dict()
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            keys = list(obj) if isinstance(obj, dict) else type(obj).__name__
            raise ConvertError(f"{path}: --key {key!r} is not in the checkpoint (it has {keys})")
        sd = obj[key]
        if is_module(sd):
            sd = sd.state_dict()
        if not is_state_dict(sd):
            raise ConvertError(f"{path}: {key!r} holds no tensors")
        return sd
    if is_state_dict(obj):
        return obj
    if isinstance(obj, dict):
        for k in CONTAINER_KEYS:
            sd = obj.get(k)
            if is_module(sd):
                sd = sd.state_dict()
            if is_state_dict(sd):
                return sd
        raise ConvertError(
            f"{path}: no state dict found: the checkpoint's keys are {list(obj)[:20]}; expected "
            f"tensors, or a state dict under one of {list(CONTAINER_KEYS)} (choose one with --key)")
    raise ConvertError(f"{path}: holds a {type(obj).__name__}, not a state dict")


def as_dict(value):
    """A config as a dict: a dict, a JSON object string, a Hugging Face PretrainedConfig
    (to_dict) or an argparse Namespace; None for anything else."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    if hasattr(value, "to_dict") and callable(value.to_dict):
        value = value.to_dict()
        return value if isinstance(value, dict) else None
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return None


def own_config(obj):
    """The config the checkpoint holds beside its tensors, if any: (dict, where) or (None, None).
    Only a config that has a heads, width or image-size key counts."""
    found = []
    if isinstance(obj, dict):
        found += [(repr(k), obj[k]) for k in OWN_CONFIG_KEYS if k in obj]
        found += [(f"{k!r}.config", obj[k].config) for k in CONTAINER_KEYS
                  if is_module(obj.get(k)) and hasattr(obj[k], "config")]
    elif is_module(obj) and hasattr(obj, "config"):  # a whole Hugging Face model
        found.append(("the model's .config", obj.config))
    for where, value in found:
        config = as_dict(value)
        if config and any(k in config for k in HEADS_KEYS + WIDTH_KEYS + IMAGE_KEYS):
            return config, where
    return None, None


def clean_names(sd):
    """Strips DDP / torch.compile prefixes and DINO's backbone. prefix; returns (tensors, notes)."""
    notes = []
    out = {}
    skipped = []
    for name, value in sd.items():
        if not torch.is_tensor(value):
            skipped.append(name)
            continue
        for prefix in ("module.", "_orig_mod."):
            while name.startswith(prefix):
                name = name[len(prefix):]
        if name in out:
            raise ConvertError(f"two tensors are named {name!r} once prefixes are removed")
        out[name] = value
    if skipped:
        notes.append(f"skipped {len(skipped)} entries that are not tensors: {skipped[:5]}")
    if any(n.startswith("backbone.") for n in out):
        dropped = [n for n in out if not n.startswith("backbone.")]
        out = {n[len("backbone."):]: t for n, t in out.items() if n.startswith("backbone.")}
        if dropped:
            notes.append(f"kept the backbone; dropped {len(dropped)} other tensors (DINO's "
                         f"projection head, not a classifier): {', '.join(dropped)}")
    return out, notes


def read_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: cannot read the config: {e}")
    if not isinstance(config, dict):
        raise ConvertError(f"{path}: the config must be a JSON object")
    if any(k in config for k in HF_CONFIG_KEYS):
        heads = config.get("num_attention_heads")
        hint = f" (its num_attention_heads: --heads {heads})" if heads else ""
        raise ConvertError(
            f"{path}: this is a Hugging Face config.json, not Vitrine's config; convert without "
            f"--config{hint}, or give the config.json to Vitrine's models::resolve_config "
            f"(--model-config)")
    return config


# ---- names -----------------------------------------------------------------------------------

def shape_of(t):
    return list(t.shape)


def _rows(t):
    return int(t.shape[0])


def naming_of(tensors):
    """The naming that knows the most of the names (Vitrine's loader decides the same way)."""
    counts = {naming: sum(1 for n in tensors if rx.fullmatch(n))
              for naming, rx in KNOWN_NAMES.items()}
    best = max(counts, key=counts.get)
    if counts[best] == 0:
        raise ConvertError(
            "the tensors are not a Vision Transformer's in any naming Vitrine reads (timm / DINO, "
            "torchvision, Hugging Face): no name is one of theirs; the first names are "
            f"{sorted(tensors)[:8]}")
    return best


def hf_prefix(tensors):
    for p in ("vit.", "dinov2."):
        if any(n.startswith(p) for n in tensors):
            return p
    return ""


def width_of(tensors, naming):
    """The model's width (the patch embedding's rows), or None without a patch embedding."""
    name = {"timm": "patch_embed.proj.weight", "torchvision": "conv_proj.weight",
            "huggingface": hf_prefix(tensors) + "embeddings.patch_embeddings.projection.weight"}
    t = tensors.get(name[naming])
    return _rows(t) if t is not None and t.dim() == 4 else None


def head_inputs(tensors, naming):
    """What the head reads: the representation layer's width when there is one, else the
    model's width (None when unknown)."""
    rep = {"timm": "pre_logits.fc.weight", "torchvision": "heads.pre_logits.weight"}.get(naming)
    if rep in tensors:
        return _rows(tensors[rep])
    return width_of(tensors, naming)


def place_head(tensors, naming, head_key):
    """Finds the classifier, a single Linear layer (see the top), and renames it to the naming's
    own head name. Changes tensors; returns notes."""
    target = HEAD_NAMES[naming]
    if head_key is not None:
        prefix = re.sub(r"\.(weight|bias)$", "", head_key)
        if prefix + ".weight" not in tensors:
            under = [n for n in sorted(tensors) if n.startswith(prefix + ".")]
            has = f" (under {prefix!r} it has {', '.join(under)})" if under else ""
            raise ConvertError(f"--head-key {head_key}: the checkpoint has no tensor "
                               f"{prefix + '.weight'!r}{has}")
        if prefix != target and target + ".weight" in tensors:
            raise ConvertError(
                f"--head-key {head_key}: the checkpoint already has a classifier under the "
                f"{NAMING_NAMES[naming]} name {target!r} ({target}.weight "
                f"{shape_of(tensors[target + '.weight'])}); a ViT has one head")
    elif target + ".weight" in tensors:
        prefix = target
    else:
        found = [p for p in HEAD_CANDIDATES if p + ".weight" in tensors]
        if not found:
            return []  # no head: a backbone (num_classes 0)
        if len(found) > 1:
            raise ConvertError(
                "several tensors look like the classifier: "
                + ", ".join(f"{p}.weight {shape_of(tensors[p + '.weight'])}" for p in found)
                + "; name the head with --head-key PREFIX")
        prefix = found[0]

    weight, bias = tensors[prefix + ".weight"], tensors.get(prefix + ".bias")
    if weight.dim() != 2:
        raise ConvertError(f"the classifier {prefix}.weight has shape {shape_of(weight)}: a "
                           f"Linear layer's weight is [classes, inputs]")
    if bias is not None and shape_of(bias) != [_rows(weight)]:
        raise ConvertError(f"the classifier {prefix}.bias has shape {shape_of(bias)}; "
                           f"{prefix}.weight {shape_of(weight)} needs [{_rows(weight)}]")
    inputs = head_inputs(tensors, naming)
    if inputs is not None and int(weight.shape[1]) != inputs:
        raise ConvertError(
            f"the classifier {prefix}.weight has shape {shape_of(weight)}: a Linear layer on what "
            f"the ViT's head reads (width {inputs}) has {inputs} columns; it is not a single "
            f"Linear classifier on the class token (name the right one with --head-key)")
    notes = []
    if bias is None:
        bias = torch.zeros(_rows(weight), dtype=weight.dtype)
        notes.append(f"the classifier {prefix}.weight has no bias: wrote a zero {target}.bias "
                     f"(the same logits)")
    if prefix != target:
        del tensors[prefix + ".weight"]
        tensors.pop(prefix + ".bias", None)
        notes.append(f"the classifier {prefix}.weight/bias ({_rows(weight)} classes) is written "
                     f"as {target}.weight/bias, the {NAMING_NAMES[naming]} name Vitrine reads")
    tensors[target + ".weight"], tensors[target + ".bias"] = weight, bias
    return notes


def linear_like(names, tensors):
    """Prefixes P among names that look like a Linear layer: P.weight 2-D, P.bias absent or of
    its rows."""
    out = []
    for n in names:
        if not n.endswith(".weight") or tensors[n].dim() != 2:
            continue
        p = n[:-len(".weight")]
        bias = tensors.get(p + ".bias")
        if bias is None or shape_of(bias) == [_rows(tensors[n])]:
            out.append(p)
    return out


def check_names(tensors, naming):
    """Every tensor must be one of a ViT's in the naming; the others are an error naming them
    (after place_head: the classifier is under its own name)."""
    unknown = [n for n in sorted(tensors) if not KNOWN_NAMES[naming].fullmatch(n)]
    if not unknown:
        return
    listing = "\n".join(f"  {n} {shape_of(tensors[n])}" for n in unknown)
    linear = linear_like(unknown, tensors)
    width = head_inputs(tensors, naming)
    linear.sort(key=lambda p: int(tensors[p + ".weight"].shape[1]) != width)  # on the width first
    hint = ""
    if linear:
        layers = ", ".join(f"{p}.weight {shape_of(tensors[p + '.weight'])}" for p in linear)
        head = HEAD_NAMES[naming]
        other = (f" (a ViT has one head: the classifier found, written as {head}, must then go)"
                 if head + ".weight" in tensors else "")
        hint = (f"\n{'these look' if len(linear) > 1 else 'this looks'} like a Linear layer: "
                f"{layers}; if it is the classifier (a single Linear layer on the class token), "
                f"convert again with --head-key {linear[0]}{other}")
    raise ConvertError(
        f"{len(unknown)} tensor{'s are' if len(unknown) > 1 else ' is'} not part of a Vision "
        f"Transformer in the {NAMING_NAMES[naming]} naming (the naming of the other tensors), so "
        f"no Vitrine loader could use {'them' if len(unknown) > 1 else 'it'}; nothing was "
        f"written:\n{listing}{hint}")


# ---- the config ------------------------------------------------------------------------------

def _blocks(tensors, pattern):
    """The number of blocks: 1 + the largest index (pattern's first group) in the names."""
    rx = re.compile(pattern)
    found = [int(m.group(1)) for n in tensors for m in [rx.match(n)] if m]
    return max(found) + 1 if found else 0


def own_value(own, keys, what):
    """(key, value) of the first of keys in the checkpoint's own config whose value is a positive
    whole number (or [h, w] of them for the image size); None when there is none."""
    config, where = own
    ok = lambda x: isinstance(x, int) and not isinstance(x, bool) and x > 0
    for key in keys if config else ():
        v = config.get(key)
        if ok(v) or (what == "image size" and isinstance(v, (list, tuple)) and len(v) == 2
                     and all(ok(x) for x in v)):
            return key, v
    return None


def image_size_of(pos, patch, naming, given, own):
    """(image size [h, w], no_embed_class, where it came from) for a position embedding of pos
    rows: the class token's row, then the patches (timm without a class token row:
    no_embed_class)."""
    if given is None and own_value(own, IMAGE_KEYS, "image size"):
        key, v = own_value(own, IMAGE_KEYS, "image size")
        given = (v if isinstance(v, (list, tuple)) else [v, v],
                 f"the checkpoint's own config ({own[1]}: {key} {v})")
    if given is not None:
        (h, w), source = given
        if h % patch or w % patch:
            raise ConvertError(f"{source}: image size {h}x{w} is not a multiple of the patch "
                               f"size {patch}")
        patches = (h // patch) * (w // patch)
        if pos == patches + 1:
            return [h, w], False, source
        if pos == patches and naming == "timm":
            return [h, w], True, source
        raise ConvertError(
            f"{source}: image size {h}x{w} in patches of {patch} makes {h // patch}x{w // patch} "
            f"= {patches} patches, but the position embedding has {pos} rows (the patches and "
            f"the class token); give the size it was trained at with --image-size H W")
    no_embed_class = naming == "timm" and int(round(pos ** 0.5)) ** 2 == pos
    patches = pos if no_embed_class else pos - 1  # timm's no_embed_class: the patches only
    side = int(round(patches ** 0.5))
    if side * side != patches:
        grids = [f"{a}x{patches // a}" for a in range(1, patches + 1) if patches % a == 0]
        raise ConvertError(
            f"the position embedding has {pos} rows: {patches} patches and the class token, and "
            f"{patches} patches are not a square grid, so the image size is not known (grids of "
            f"{patches}: {', '.join(grids[:12])}{' ...' if len(grids) > 12 else ''}); give it "
            f"with --image-size H W (H and W multiples of the patch size {patch})")
    rows = "the patches" if no_embed_class else "the class token and"
    return [side * patch] * 2, no_embed_class, (
        f"the position embedding's {pos} rows ({rows} a square grid of {side}x{side} patches)")


def preset_differences(c, inner, preset):
    """The shapes in which the model c (attention width inner) differs from a preset."""
    p = PRESETS[preset]
    out = [f"{k} ({c[k]} here, {p[k]} there)" for k in PRESET_SHAPES if c[k] != p[k]]
    if inner != c["dim"]:
        out.append(f"attention width ({inner} here, the width {c['dim']} there)")
    return out


def heads_of(c, inner, given, own, notes):
    """(heads, where they came from): given ((heads, "--heads") or None), the checkpoint's own
    config or a preset of the same shapes (see the top); any other case is an error."""
    from_own = own_value(own, HEADS_KEYS, "number of heads")
    matching = [p for p in PRESETS if not preset_differences(c, inner, p)]
    if given is not None:
        heads, option = given
        if from_own and from_own[1] != heads:
            notes.append(f"{option} {heads} overrides the checkpoint's own config ({own[1]}: "
                         f"{from_own[0]} {from_own[1]})")
        elif matching and PRESETS[matching[0]]["heads"] != heads:
            notes.append(f"{option} {heads}: the preset {matching[0]}, which has this model's "
                         f"shapes, has {PRESETS[matching[0]]['heads']} heads")
        return heads, option
    if from_own:
        return from_own[1], f"the checkpoint's own config ({own[1]}: {from_own[0]} {from_own[1]})"
    if matching:
        return PRESETS[matching[0]]["heads"], (f"the preset {matching[0]} (all of its shapes are "
                                               f"this model's)")
    nearest = min(PRESETS, key=lambda p: len(preset_differences(c, inner, p)))
    differences = preset_differences(c, inner, nearest)
    near = (f"; the nearest, {nearest}, differs in {', '.join(differences)}"
            if len(differences) <= 2 else "")
    wide = "" if inner == c["dim"] else (
        f" The attention is {inner} wide, not the model's width {c['dim']}: each head is "
        f"{inner} / heads wide (dim_head).")
    config = ("the checkpoint holds no config of its own" if own[0] is None
              else f"the checkpoint's own config ({own[1]}) names no heads")
    raise ConvertError(
        f"the number of attention heads is not known: the weights cannot tell (qkv has 3 x "
        f"{inner} rows however they are split into heads), {config}, no --heads was given, and "
        f"no preset of Vitrine's has this model's shapes (image "
        f"{c['image_size'][0]}x{c['image_size'][1]}, patch {c['patch']}, channels "
        f"{c['channels']}, width {c['dim']}, depth {c['depth']}, MLP {c['mlp_dim']}){near}.{wide} "
        f"Give it with --heads N (N divides {inner}): typically {max(1, inner // 64)} for "
        f"{'an attention' if inner != c['dim'] else 'a width'} of {inner}, with heads 64 wide "
        f"as in timm's and DINO's ViTs (ViT-Ti 192 -> 3, ViT-S 384 -> 6, ViT-B 768 -> 12), but "
        f"small models often have narrower heads: check the code or config that trained this "
        f"one")


def check_attention(c, inner):
    """heads x dim_head (0: width / heads) must be the attention's inner width."""
    heads, dim_head = c["heads"], c.get("dim_head", 0)
    if not isinstance(heads, int) or heads <= 0:
        raise ConvertError(f"heads {heads!r} must be a positive whole number")
    if dim_head:
        if heads * dim_head != inner:
            raise ConvertError(f"heads {heads} x dim_head {dim_head} = {heads * dim_head}, but "
                               f"the attention is {inner} wide (qkv has 3 x {inner} rows)")
    elif inner != c["dim"]:
        raise ConvertError(f"dim_head 0 means width / heads, but the attention is {inner} wide "
                           f"(qkv has 3 x {inner} rows), not the width {c['dim']}")
    elif c["dim"] % heads:
        raise ConvertError(f"the width {c['dim']} is not a multiple of heads {heads}")


def infer_config(tensors, naming, given_heads=None, given_image=None, own=(None, None)):
    """Vitrine's config for the state dict (see the top), the attention's inner width, lines
    saying where the heads and the image size came from, and notes. given_heads: (heads, source)
    or None; given_image: ([h, w], source) or None; own: the checkpoint's own config and where it
    is, or (None, None)."""
    if naming == "timm":  # DINOv2's chunked blocks blocks.C.N.* are blocks N
        t = {re.sub(r"^blocks\.\d+\.(\d+)\.", r"blocks.\1.", n): v for n, v in tensors.items()}
    else:
        t = tensors
    notes = []
    c = {"qkv_bias": True, "pool": "cls", "representation": 0, "registers": 0,
         "layer_scale": False, "no_embed_class": False, "fc_norm": False, "eps": 1e-6,
         "num_classes": 0}
    head = HEAD_NAMES[naming] + ".weight"
    if naming == "timm":
        if any(n.startswith("patch_embed.stem.") for n in t):
            raise ConvertError("the patch embedding has a convolutional stem (patch_embed.stem.*), "
                               "whose patch size the tensors do not fix; give the whole config "
                               "with --config")
        w = t["patch_embed.proj.weight"]
        pos = t.get("pos_embed")
        c["depth"] = _blocks(t, r"blocks\.(\d+)\.")
        c["mlp_dim"] = _rows(t["blocks.0.mlp.fc1.weight"])
        qkv_rows = _rows(t["blocks.0.attn.qkv.weight"])
        proj = t["blocks.0.attn.proj.weight"]
        c["qkv_bias"] = "blocks.0.attn.qkv.bias" in t
        c["layer_scale"] = "blocks.0.ls1.gamma" in t
        c["registers"] = int(t["reg_token"].shape[1]) if "reg_token" in t else (
            int(t["register_tokens"].shape[1]) if "register_tokens" in t else 0)
        if "fc_norm.weight" in t:
            c["fc_norm"], c["pool"] = True, "mean"
        if "pre_logits.fc.weight" in t:
            c["representation"] = _rows(t["pre_logits.fc.weight"])
        final_norm = "norm.weight" in t or c["fc_norm"]
    elif naming == "torchvision":
        w = t["conv_proj.weight"]
        pos = t.get("encoder.pos_embedding")
        c["depth"] = _blocks(t, r"encoder\.layers\.encoder_layer_(\d+)\.")
        block = "encoder.layers.encoder_layer_0."
        fc1 = t.get(block + "mlp.0.weight", t.get(block + "mlp.linear_1.weight"))  # or legacy
        if fc1 is None:
            raise ConvertError(f"no {block}mlp.0.weight (the MLP's first layer)")
        c["mlp_dim"] = _rows(fc1)
        qkv_rows = _rows(t[block + "self_attention.in_proj_weight"])
        proj = t[block + "self_attention.out_proj.weight"]
        c["qkv_bias"] = block + "self_attention.in_proj_bias" in t
        if "heads.pre_logits.weight" in t:
            c["representation"] = _rows(t["heads.pre_logits.weight"])
        final_norm = "encoder.ln.weight" in t
    else:  # Hugging Face ViTModel / ViTForImageClassification / Dinov2Model, prefix optional
        p = hf_prefix(t)
        block = p + "encoder.layer.0."
        w = t[p + "embeddings.patch_embeddings.projection.weight"]
        pos = t.get(p + "embeddings.position_embeddings")
        c["depth"] = _blocks(t, r"(?:vit\.|dinov2\.)?encoder\.layer\.(\d+)\.")
        dinov2 = block + "mlp.fc1.weight" in t  # Dinov2Model's names
        fc1 = block + ("mlp.fc1.weight" if dinov2 else "intermediate.dense.weight")
        c["mlp_dim"] = _rows(t[fc1])
        qkv_rows = 3 * _rows(t[block + "attention.attention.query.weight"])
        proj = t[block + "attention.output.dense.weight"]
        c["qkv_bias"] = block + "attention.attention.query.bias" in t
        c["layer_scale"] = block + "layer_scale1.lambda1" in t
        if p + "embeddings.register_tokens" in t:
            c["registers"] = int(t[p + "embeddings.register_tokens"].shape[1])
        c["eps"] = 1e-6 if dinov2 else 1e-12
        final_norm = p + "layernorm.weight" in t
    if head in t:
        c["num_classes"] = _rows(t[head])

    dim, channels, kh, kw = (int(x) for x in w.shape)
    if kh != kw:
        raise ConvertError(f"the patch embedding's kernel is {kh}x{kw}; Vitrine's patches are "
                           f"square")
    c.update(dim=dim, channels=channels, patch=kh)
    if c["depth"] == 0:
        raise ConvertError("no encoder blocks found")
    if pos is None:
        raise ConvertError("no position embedding found")
    if qkv_rows % 3:
        raise ConvertError(f"the attention's qkv has {qkv_rows} rows, not 3 x its width")
    inner = qkv_rows // 3
    if proj.dim() != 2 or shape_of(proj) != [dim, inner]:
        raise ConvertError(f"the attention's output projection has shape {shape_of(proj)}; with "
                           f"qkv of 3 x {inner} rows and width {dim} it must be [{dim}, {inner}]")
    eps_from = None
    config, where = own
    for key in ("layer_norm_eps", "eps") if config else ():  # eps: Vitrine's own config only
        v = config.get(key)
        if isinstance(v, float) and v > 0 and (key != "eps" or where == "'vitrine.config'"):
            c["eps"], eps_from = v, f"eps {v} from the checkpoint's own config ({where}: {key})"
            break
    c["image_size"], c["no_embed_class"], image_from = image_size_of(
        int(pos.shape[1]), kh, naming, given_image, own)
    c["heads"], heads_from = heads_of(c, inner, given_heads, own, notes)
    if inner != dim:
        if inner % c["heads"]:
            raise ConvertError(f"the attention is {inner} wide (qkv has 3 x {inner} rows), "
                               f"which is not a multiple of heads {c['heads']}")
        c["dim_head"] = inner // c["heads"]
    if not final_norm:
        c["final_norm"] = False
    c["embed_dropout"] = c["dropout"] = c["attn_dropout"] = c["drop_path"] = 0.0
    sources = [f"heads {c['heads']} from {heads_from}",
               f"image size {c['image_size'][0]}x{c['image_size'][1]} from {image_from}"]
    if eps_from:
        sources.append(eps_from)
    return c, inner, sources, notes


def checked_own_config(own, tensors, naming, notes):
    """The checkpoint's own config when its width (if it gives one) is the tensors'; else it is
    not this model's: (None, None), with a note."""
    config, where = own
    if config is None:
        return own
    width = width_of(tensors, naming)
    for key in WIDTH_KEYS:
        if key in config and config[key] != width:
            notes.append(f"not used: the checkpoint's own config ({where}), whose {key} "
                         f"{config[key]!r} is not the tensors' width {width}")
            return None, None
    return own


# ---- writing ---------------------------------------------------------------------------------

def raw_bytes(t):
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same 16 bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata):
    if sys.byteorder != "little":
        raise ConvertError("safetensors data is little-endian; this writer runs on little-endian "
                           "machines only")
    header = {"__metadata__": metadata}
    offset = 0
    names = sorted(tensors)
    for name in names:
        t = tensors[name]
        if t.dtype not in DTYPES:
            raise ConvertError(f"tensor {name!r} has dtype {t.dtype}, which safetensors files "
                               f"for Vitrine cannot hold ({', '.join(map(str, DTYPES))})")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for name in names:
                f.write(raw_bytes(tensors[name]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return offset


# ---- the program -----------------------------------------------------------------------------

def parse_sets(assignments):
    """--set KEY=VALUE ... as a dict, each value as JSON (else as a string)."""
    out = {}
    for assignment in assignments:
        key, eq, value = assignment.partition("=")
        if not eq:
            raise ConvertError(f"--set {assignment!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def describe(config, naming):
    return (f"config ({NAMING_NAMES[naming]} naming): image {config['image_size'][0]}x"
            f"{config['image_size'][1]}, patch {config['patch']}, channels {config['channels']}, "
            f"dim {config['dim']}, depth {config['depth']}, heads {config['heads']}"
            + (f", dim_head {config['dim_head']}" if config.get("dim_head") else "")
            + f", MLP {config['mlp_dim']}, classes {config['num_classes']}"
            + (f", registers {config['registers']}" if config["registers"] else "")
            + (", mean pooling" if config["pool"] == "mean" else "")
            + ("" if config.get("final_norm", True) else ", no final norm"))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Converts a PyTorch .pth/.bin checkpoint into safetensors for Vitrine.")
    parser.add_argument("input", help="the PyTorch checkpoint (.pth, .pt, .bin)")
    parser.add_argument("output", help="the safetensors file to write")
    parser.add_argument("--config", help="Vitrine's model config JSON, stored as vitrine.config "
                        "as it is (no inference)")
    parser.add_argument("--heads", type=int, help="attention heads (else from the checkpoint's "
                        "own config or a preset of the same shapes; never guessed)")
    parser.add_argument("--image-size", type=int, nargs="+", metavar="H [W]",
                        help="the input size the position embedding was trained at (else from "
                        "the checkpoint's own config, or its rows as a square grid)")
    parser.add_argument("--head-key", metavar="PREFIX",
                        help="the classifier's name when it is not head, heads, heads.head, fc "
                        "or classifier (a Linear layer: PREFIX.weight, PREFIX.bias)")
    parser.add_argument("--eps", type=float, help="LayerNorm eps (inferred: 1e-6; Hugging Face "
                        "ViT 1e-12)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any field of Vitrine's config, the value as JSON (repeatable)")
    parser.add_argument("--no-config", action="store_true",
                        help="write no vitrine.config (the tools then need --model-config)")
    parser.add_argument("--key", help="the checkpoint entry that holds the state dict "
                        f"(default: the first of {', '.join(CONTAINER_KEYS)})")
    parser.add_argument("--unsafe-pickle", action="store_true",
                        help="load with weights_only=False (runs code from the file: trusted "
                        "files only)")
    args = parser.parse_args(argv)
    lines = []
    try:
        sets = parse_sets(args.set)
        if args.config and (args.heads is not None or args.image_size or args.eps is not None
                            or sets):
            raise ConvertError("--config stores the given config as it is: set the heads, image "
                               "size, eps and other fields in it, not with --heads, "
                               "--image-size, --eps or --set")
        if args.image_size and len(args.image_size) > 2:
            raise ConvertError("--image-size takes H or H W")
        metadata = {"format": "pt"}
        obj = load(args.input, args.unsafe_pickle)
        tensors, notes = clean_names(find_state_dict(obj, args.key, args.input))
        if not tensors:
            raise ConvertError(f"{args.input}: no tensors to write")
        try:
            naming = naming_of(tensors)
            notes += place_head(tensors, naming, args.head_key)
            check_names(tensors, naming)
        except ConvertError as e:
            raise ConvertError(f"{args.input}: {e}")
        head = tensors.get(HEAD_NAMES[naming] + ".weight")
        classes = _rows(head) if head is not None else 0
        if args.config:
            config = read_config(args.config)
            want = config.get("num_classes", 1000)
            if want != classes:
                unset = " (the default, as it is not set)" if "num_classes" not in config else ""
                has = f"a head of {classes} classes" if classes else "no head"
                raise ConvertError(f"{args.config}: num_classes is {want}{unset}, but the "
                                   f"checkpoint has {has}; set \"num_classes\": {classes} in it")
            metadata["vitrine.config"] = json.dumps(config)
        elif not args.no_config:
            option = "--set heads" if "heads" in sets else "--heads"
            heads = sets.pop("heads", args.heads)
            if heads is not None and (not isinstance(heads, int) or isinstance(heads, bool)
                                      or heads <= 0):
                raise ConvertError(f"{option} {heads!r}: expected a positive whole number")
            given_heads = (heads, option) if heads is not None else None
            option = "--set image_size" if "image_size" in sets else "--image-size"
            image = sets.pop("image_size", args.image_size)
            given_image = None
            if image is not None:
                hw = [image] if isinstance(image, int) else image
                if (not isinstance(hw, list) or len(hw) not in (1, 2)
                        or not all(isinstance(x, int) and x > 0 for x in hw)):
                    raise ConvertError(f"{option} {image!r}: expected H or [H, W], positive "
                                       f"whole numbers")
                given_image = (hw * 2 if len(hw) == 1 else hw, option)
            own = checked_own_config(own_config(obj), tensors, naming, notes)
            try:
                config, inner, sources, more = infer_config(tensors, naming, given_heads,
                                                            given_image, own)
            except ConvertError as e:
                raise ConvertError(f"{args.input}: {e}")
            except KeyError as e:
                raise ConvertError(f"{args.input}: cannot infer the config: tensor {e} is missing")
            notes += more
            if args.eps is not None:
                config["eps"] = args.eps
            config.update(sets)
            check_attention(config, inner)
            metadata["vitrine.config"] = json.dumps(config)
            lines = [describe(config, naming)] + [f"  {s}" for s in sources]
        size = write_safetensors(args.output, tensors, metadata)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    print(f"wrote {args.output}: {len(tensors)} tensors, {size} bytes of data"
          + (", with vitrine.config" if "vitrine.config" in metadata else ""))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
