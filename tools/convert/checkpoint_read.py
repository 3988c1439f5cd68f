"""convert.py's reading of a PyTorch checkpoint: torch.load (weights only unless asked), the state
dict found in its container, the names cleaned (module., _orig_mod., backbone.), a config kept
beside it, and a --config file."""

import argparse
import json

import torch

from vit_names import ConvertError

CONTAINER_KEYS = ("model", "state_dict", "teacher", "model_state_dict", "module")
HF_CONFIG_KEYS = ("model_type", "hidden_size", "architectures", "num_hidden_layers")

# Where a checkpoint may keep a config of its own beside the state dict, and the keys read there.
OWN_CONFIG_KEYS = ("vitrine.config", "config", "model_config", "hyper_parameters", "hparams",
                   "args", "cfg")
HEADS_KEYS = ("heads", "num_attention_heads", "num_heads", "n_heads")
WIDTH_KEYS = ("dim", "hidden_size", "embed_dim")
IMAGE_KEYS = ("image_size", "img_size")


# ---- reading the checkpoint ------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
                      "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                      "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def load_safetensors(path):
    """A .safetensors file (Hugging Face's model.safetensors) as a state dict."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConvertError(f"{path}: cannot read: {e}")
    if len(data) < 8:
        raise ConvertError(f"{path}: too short for a safetensors file ({len(data)} bytes)")
    n = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ConvertError(f"{path}: the safetensors header is not JSON: {e}")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        begin, end = entry["data_offsets"]
        if dtype is None or 8 + n + end > len(data):
            raise ConvertError(f"{path}: tensor {name!r}: dtype {entry.get('dtype')} or offsets "
                               f"{entry['data_offsets']} that this reader cannot take")
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtype).reshape(entry["shape"]) if raw else \
            torch.empty(entry["shape"], dtype=dtype)
    return out


def load(path, unsafe):
    if path.endswith(".safetensors"):
        return load_safetensors(path)
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


def clean_names(sd, strip_backbone=True):
    """Strips DDP / torch.compile prefixes and (strip_backbone) DINO's backbone. prefix; returns
    (tensors, notes)."""
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
    if strip_backbone and any(n.startswith("backbone.") for n in out):
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
