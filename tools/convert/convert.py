#!/usr/bin/env python3
"""Converts a PyTorch checkpoint (.pth / .bin) into a safetensors file that Vitrine reads.

    python3 tools/convert/convert.py input.pth output.safetensors [--config config.json]

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
{"format": "pt"} plus, with --config, {"vitrine.config": <the JSON>}, so that the file alone
rebuilds its model. The config is Vitrine's JSON (see docs/vit.md); a Hugging Face config.json is
not copied in: give it to Vitrine's models::resolve_config (the tools' --model-config) instead.

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
    parser.add_argument("--config", help="Vitrine's model config JSON, stored as vitrine.config")
    parser.add_argument("--key", help="the checkpoint entry that holds the state dict "
                        f"(default: the first of {', '.join(CONTAINER_KEYS)})")
    parser.add_argument("--unsafe-pickle", action="store_true",
                        help="load with weights_only=False (runs code from the file: trusted "
                        "files only)")
    args = parser.parse_args(argv)
    try:
        metadata = {"format": "pt"}
        if args.config:
            metadata["vitrine.config"] = json.dumps(read_config(args.config))
        obj = load(args.input, args.unsafe_pickle)
        tensors, notes = clean_names(find_state_dict(obj, args.key, args.input))
        if not tensors:
            raise ConvertError(f"{args.input}: no tensors to write")
        size = write_safetensors(args.output, tensors, metadata)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {args.output}: {len(tensors)} tensors, {size} bytes of data"
          + (", with vitrine.config" if args.config else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
