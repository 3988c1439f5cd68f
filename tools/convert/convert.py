#!/usr/bin/env python3
"""Converts a PyTorch checkpoint (.pth / .bin) into a safetensors file that Vitrine reads.

    python3 tools/convert/convert.py input.pth output.safetensors
    python3 tools/convert/convert.py dino_vits8.pth dino.safetensors --heads 6 --image-size 224
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
kept, without the prefix: the rest is DINO's projection head, not a classifier.

What it writes: the tensors under their own names (Vitrine detects the naming: timm / DINO,
DINOv2, torchvision or Hugging Face), sorted, in their own dtypes, and the metadata
{"format": "pt", "vitrine.config": <the model's config>}, so that the file alone rebuilds its
model: vitrine-explain and vitrine-train --finetune then need no --model-config.

The config is inferred from the tensors' names and shapes (infer_config): the width, the patch
size and channels (the patch embedding's kernel), the depth (the blocks), the MLP width, the
classes (the head's rows; 0 without a head, as DINO's backbones), qkv biases, register tokens,
layer scale, mean pooling (timm's fc_norm), torchvision's representation layer, whether the
position embedding covers the class token, and the image size (the position embedding's rows:
a square grid of patches). Two things the tensors cannot say are guessed and printed as guesses:
the number of heads (width / 64, as timm and DINO name their ViTs: ViT-Ti 192 -> 3, ViT-S 384 ->
6, ViT-B 768 -> 12, ViT-L 1024 -> 16) and, for a non-square grid, the image size. Every field can
be set: --heads, --image-size H [W], --eps, or --set key=value (any field of Vitrine's config,
the value as JSON). --config FILE takes Vitrine's JSON as it is instead. A Hugging Face
config.json is not copied in: give it to Vitrine's models::resolve_config (the tools'
--model-config) instead, or let the converter infer one (it then uses Hugging Face's eps 1e-12).

The file is written by hand (no safetensors package is needed): an 8-byte little-endian header
length, the JSON header padded with spaces to a multiple of 8 bytes, then the raw little-endian
tensor data. It is written to a temporary file and renamed, so a failed run leaves no half-written
output.

By default the checkpoint is loaded with torch.load(weights_only=True), which runs no code from the
file. Checkpoints that also pickle other Python objects (DINO's full checkpoints store their
argparse arguments) need --unsafe-pickle: use it only for files from a source you trust.
"""
import argparse
import json
import os
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


class ConvertError(Exception):
    pass


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


def is_state_dict(obj):
    return isinstance(obj, dict) and len(obj) > 0 and all(
        isinstance(k, str) for k in obj) and any(torch.is_tensor(v) for v in obj.values())


def find_state_dict(obj, key, path):
    if hasattr(obj, "state_dict") and callable(obj.state_dict):  # a whole nn.Module
        obj = obj.state_dict()
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            keys = list(obj) if isinstance(obj, dict) else type(obj).__name__
            raise ConvertError(f"{path}: --key {key!r} is not in the checkpoint (it has {keys})")
        sd = obj[key]
        if hasattr(sd, "state_dict") and callable(sd.state_dict):
            sd = sd.state_dict()
        if not is_state_dict(sd):
            raise ConvertError(f"{path}: {key!r} holds no tensors")
        return sd
    if is_state_dict(obj):
        return obj
    if isinstance(obj, dict):
        for k in CONTAINER_KEYS:
            sd = obj.get(k)
            if hasattr(sd, "state_dict") and callable(sd.state_dict):
                sd = sd.state_dict()
            if is_state_dict(sd):
                return sd
        raise ConvertError(
            f"{path}: no state dict found: the checkpoint's keys are {list(obj)[:20]}; expected "
            f"tensors, or a state dict under one of {list(CONTAINER_KEYS)} (choose one with --key)")
    raise ConvertError(f"{path}: holds a {type(obj).__name__}, not a state dict")


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
            notes.append(f"kept the backbone; dropped {len(dropped)} other tensors "
                         f"(e.g. {dropped[0]!r}: DINO's projection head)")
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
        raise ConvertError(
            f"{path}: this is a Hugging Face config.json, not Vitrine's config; convert without "
            f"--config and give the config.json to Vitrine's models::resolve_config (--model-config)")
    return config


def _rows(t):
    return int(t.shape[0])


def _blocks(tensors, pattern):
    """The number of blocks: 1 + the largest index i of names matching pattern.format(i)."""
    import re
    rx = re.compile(pattern)
    found = [int(m.group(1)) for n in tensors for m in [rx.match(n)] if m]
    return max(found) + 1 if found else 0


def naming_of(tensors):
    names = set(tensors)
    if "conv_proj.weight" in names or any(n.startswith("encoder.layers.") for n in names):
        return "torchvision"
    if any(n.startswith(("vit.embeddings.", "embeddings.patch_embeddings.")) for n in names):
        return "huggingface"
    if "patch_embed.proj.weight" in names:
        return "timm"
    raise ConvertError(
        "the tensors are not a Vision Transformer's in any naming Vitrine reads (timm / DINO, "
        "torchvision, Hugging Face): no patch embedding (patch_embed.proj.weight, conv_proj.weight "
        f"or embeddings.patch_embeddings.projection.weight); the first names are {sorted(names)[:8]}")


def infer_config(tensors):
    """Vitrine's config for the state dict, and the fields that were guessed (see the top)."""
    naming = naming_of(tensors)
    t = tensors
    c = {"qkv_bias": True, "pool": "cls", "representation": 0, "registers": 0,
         "layer_scale": False, "no_embed_class": False, "fc_norm": False, "eps": 1e-6,
         "num_classes": 0}
    if naming == "timm":
        w = t["patch_embed.proj.weight"]
        pos = t.get("pos_embed")
        c["depth"] = _blocks(t, r"blocks\.(\d+)\.")
        c["mlp_dim"] = _rows(t["blocks.0.mlp.fc1.weight"])
        c["qkv_bias"] = "blocks.0.attn.qkv.bias" in t
        c["layer_scale"] = any(n.startswith("blocks.0.ls1.") for n in t)
        c["registers"] = int(t["reg_token"].shape[1]) if "reg_token" in t else (
            int(t["register_tokens"].shape[1]) if "register_tokens" in t else 0)
        if "fc_norm.weight" in t:
            c["fc_norm"], c["pool"] = True, "mean"
        if "head.weight" in t:
            c["num_classes"] = _rows(t["head.weight"])
        if "pre_logits.fc.weight" in t:
            c["representation"] = _rows(t["pre_logits.fc.weight"])
    elif naming == "torchvision":
        w = t["conv_proj.weight"]
        pos = t.get("encoder.pos_embedding")
        c["depth"] = _blocks(t, r"encoder\.layers\.encoder_layer_(\d+)\.")
        mlp = "encoder.layers.encoder_layer_0.mlp."
        fc1 = t.get(mlp + "0.weight", t.get(mlp + "linear_1.weight"))  # or the legacy name
        if fc1 is None:
            raise ConvertError(f"no {mlp}0.weight (the MLP's first layer)")
        c["mlp_dim"] = _rows(fc1)
        if "heads.head.weight" in t:
            c["num_classes"] = _rows(t["heads.head.weight"])
        if "heads.pre_logits.weight" in t:
            c["representation"] = _rows(t["heads.pre_logits.weight"])
    else:  # Hugging Face ViTModel / ViTForImageClassification, with or without "vit."
        p = "vit." if any(n.startswith("vit.") for n in t) else ""
        w = t[p + "embeddings.patch_embeddings.projection.weight"]
        pos = t.get(p + "embeddings.position_embeddings")
        c["depth"] = _blocks(t, r"(?:vit\.)?encoder\.layer\.(\d+)\.")
        c["mlp_dim"] = _rows(t[p + "encoder.layer.0.intermediate.dense.weight"])
        c["qkv_bias"] = (p + "encoder.layer.0.attention.attention.query.bias") in t
        c["eps"] = 1e-12
        if "classifier.weight" in t:
            c["num_classes"] = _rows(t["classifier.weight"])
    dim, channels, kh, kw = (int(x) for x in w.shape)
    if kh != kw:
        raise ConvertError(f"the patch embedding's kernel is {kh}x{kw}; Vitrine's patches are square")
    c.update(dim=dim, channels=channels, patch=kh, heads=max(1, dim // 64))
    guessed = [f"heads {c['heads']} (width {dim} / 64)"]
    if c["depth"] == 0:
        raise ConvertError("no encoder blocks found")
    if pos is None:
        raise ConvertError("no position embedding found")
    rows = int(pos.shape[1])
    patches = rows - 1  # the class token's row first
    if naming == "timm" and int(round(rows ** 0.5)) ** 2 == rows:
        patches, c["no_embed_class"] = rows, True  # timm's no_embed_class: the patches only
    side = int(round(patches ** 0.5))
    if side * side != patches:
        raise ConvertError(f"the position embedding has {rows} rows: {patches} patches do not make "
                           f"a square grid; give the image size with --image-size H W")
    c["image_size"] = [side * kh, side * kh]
    guessed.append(f"image size {side * kh} (a square grid of {side}x{side} patches)")
    c["embed_dropout"] = c["dropout"] = c["attn_dropout"] = c["drop_path"] = 0.0
    return c, naming, guessed


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


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Converts a PyTorch .pth/.bin checkpoint into safetensors for Vitrine.")
    parser.add_argument("input", help="the PyTorch checkpoint (.pth, .pt, .bin)")
    parser.add_argument("output", help="the safetensors file to write")
    parser.add_argument("--config", help="Vitrine's model config JSON, stored as vitrine.config "
                        "as it is (no inference)")
    parser.add_argument("--heads", type=int, help="attention heads (inferred: width / 64)")
    parser.add_argument("--image-size", type=int, nargs="+", metavar="H [W]",
                        help="the input size the position embedding was trained at (inferred "
                        "from its rows, square)")
    parser.add_argument("--eps", type=float, help="LayerNorm eps (inferred: 1e-6; Hugging Face "
                        "1e-12)")
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
    try:
        metadata = {"format": "pt"}
        config_line = None
        if args.config:
            metadata["vitrine.config"] = json.dumps(read_config(args.config))
        obj = load(args.input, args.unsafe_pickle)
        tensors, notes = clean_names(find_state_dict(obj, args.key, args.input))
        if not tensors:
            raise ConvertError(f"{args.input}: no tensors to write")
        if not args.config and not args.no_config:
            try:
                config, naming, guessed = infer_config(tensors)
            except ConvertError as e:
                raise ConvertError(f"{args.input}: {e}")
            except KeyError as e:
                raise ConvertError(f"{args.input}: cannot infer the config: tensor {e} is missing")
            if args.heads is not None:
                config["heads"] = args.heads
                guessed = [g for g in guessed if not g.startswith("heads")]
            if args.image_size:
                hw = args.image_size * 2 if len(args.image_size) == 1 else args.image_size[:2]
                config["image_size"] = hw
                guessed = [g for g in guessed if not g.startswith("image size")]
            if args.eps is not None:
                config["eps"] = args.eps
            for assignment in args.set:
                key, eq, value = assignment.partition("=")
                if not eq:
                    raise ConvertError(f"--set {assignment!r}: expected KEY=VALUE")
                try:
                    config[key.strip()] = json.loads(value)
                except ValueError:
                    config[key.strip()] = value
            if config["dim"] % config["heads"]:
                raise ConvertError(f"the width {config['dim']} is not a multiple of --heads "
                                   f"{config['heads']}")
            metadata["vitrine.config"] = json.dumps(config)
            config_line = (f"config ({naming} naming): image {config['image_size'][0]}x"
                           f"{config['image_size'][1]}, patch {config['patch']}, channels "
                           f"{config['channels']}, dim {config['dim']}, depth {config['depth']}, "
                           f"heads {config['heads']}, MLP {config['mlp_dim']}, classes "
                           f"{config['num_classes']}"
                           + (f", registers {config['registers']}" if config["registers"] else "")
                           + (", mean pooling" if config["pool"] == "mean" else ""))
            if guessed:
                notes.append("guessed (check them, set them with --heads / --image-size): "
                             + "; ".join(guessed))
        size = write_safetensors(args.output, tensors, metadata)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if config_line:
        print(config_line)
    print(f"wrote {args.output}: {len(tensors)} tensors, {size} bytes of data"
          + (", with vitrine.config" if "vitrine.config" in metadata else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
