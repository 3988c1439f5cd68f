"""convert.py's GPT-2: a Hugging Face GPT2LMHeadModel / GPT2Model state dict (or nanoGPT's, which
already has Linear's layout) into Vitrine's models::GPT (models/gpt.h).

What changes:
  - names: GPT2Model's "h.0..." gets GPT2LMHeadModel's "transformer." prefix;
  - Hugging Face's Conv1D weights [in, out] (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are
    transposed to Linear's [out, in] (nanoGPT's checkpoints are already [out, in]: the layout is
    told apart by c_attn's shape, [n_embd, 3 n_embd] against [3 n_embd, n_embd]);
  - c_attn stays one matrix: Vitrine's attention reads q, k and v in place from its output;
  - attn.bias and attn.masked_bias (the causal mask, a buffer in older transformers) are dropped;
  - lm_head.weight is written as transformer.wte.weight (the two are tied); a checkpoint whose
    head differs from its embedding is refused, as models::GPT always ties them.
The config (vocab_size, block_size, n_layer, n_embd) comes from the shapes; n_head from --heads, a
config.json beside the input (Hugging Face's n_head), or GPT-2's own sizes (gpt2 .. gpt2-xl)."""

import json
import os
import re

import torch

from vit_names import ConvertError

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
PER_LAYER = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
MASK_BUFFERS = ("attn.bias", "attn.masked_bias")
# GPT-2's released sizes: (n_layer, n_embd) -> n_head.
GPT2_HEADS = {(12, 768): 12, (24, 1024): 16, (36, 1280): 20, (48, 1600): 25}


def is_gpt2(tensors):
    return any(re.fullmatch(r"(transformer\.)?h\.\d+\.attn\.c_attn\.weight", n) for n in tensors)


def heads_from_files(input_path):
    path = os.path.join(os.path.dirname(os.path.abspath(input_path)), "config.json")
    if not os.path.exists(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: cannot read: {e}")
    heads = config.get("n_head") if isinstance(config, dict) else None
    return (heads, path) if isinstance(heads, int) and heads > 0 else (None, None)


def convert_gpt2(tensors, input_path, heads=None, eps=None):
    """Returns (tensors in Vitrine's names and layout, config dict, notes)."""
    notes = []
    named = {}
    for name, t in tensors.items():
        if not name.startswith("transformer.") and name != "lm_head.weight":
            name = "transformer." + name
        named[name] = t
    layers = sorted({int(m.group(1)) for n in named
                     if (m := re.fullmatch(r"transformer\.h\.(\d+)\..*", n))})
    if not layers or layers != list(range(len(layers))):
        raise ConvertError(f"the blocks are numbered {layers}, expected 0..n_layer-1")
    for key in ("transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                "transformer.ln_f.bias"):
        if key not in named:
            raise ConvertError(f"GPT-2 tensor {key} is missing")
    vocab, n_embd = named["transformer.wte.weight"].shape
    block_size = named["transformer.wpe.weight"].shape[0]
    c_attn = named.get(f"transformer.h.{layers[0]}.attn.c_attn.weight")
    if c_attn is None or c_attn.dim() != 2 or sorted(c_attn.shape) != sorted([n_embd, 3 * n_embd]):
        raise ConvertError(f"transformer.h.{layers[0]}.attn.c_attn.weight has shape "
                           f"{list(c_attn.shape) if c_attn is not None else None}, expected "
                           f"[{n_embd}, {3 * n_embd}] (Hugging Face) or [{3 * n_embd}, {n_embd}]")
    hf_layout = c_attn.shape[0] == n_embd  # Conv1D [in, out]
    out = {"transformer.wte.weight": named.pop("transformer.wte.weight"),
           "transformer.wpe.weight": named.pop("transformer.wpe.weight")}
    dropped = []
    for i in layers:
        for suffix in PER_LAYER:
            key = f"transformer.h.{i}.{suffix}"
            if key not in named:
                raise ConvertError(f"GPT-2 tensor {key} is missing")
            t = named.pop(key)
            if suffix in CONV1D and hf_layout:
                t = t.t()
            out[key] = t.contiguous()
        for suffix in MASK_BUFFERS:
            if f"transformer.h.{i}.{suffix}" in named:
                dropped.append(f"transformer.h.{i}.{suffix}")
                named.pop(f"transformer.h.{i}.{suffix}")
    out["transformer.ln_f.weight"] = named.pop("transformer.ln_f.weight")
    out["transformer.ln_f.bias"] = named.pop("transformer.ln_f.bias")
    head = named.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, out["transformer.wte.weight"]):
        raise ConvertError("lm_head.weight differs from transformer.wte.weight: Vitrine's GPT "
                           "ties them (GPT-2 does); an untied head cannot be loaded")
    out["lm_head.weight"] = out["transformer.wte.weight"]
    if named:
        raise ConvertError(f"tensors that are not GPT-2's: {', '.join(sorted(named))}")
    if hf_layout:
        notes.append("transposed Hugging Face's Conv1D weights [in, out] to Linear's [out, in]")
    if dropped:
        notes.append(f"dropped the causal-mask buffers ({len(dropped)}): Vitrine's attention "
                     f"masks by itself")
    n_layer = len(layers)
    source = "--heads"
    if heads is None:
        heads, source = heads_from_files(input_path)
    if heads is None and (n_layer, n_embd) in GPT2_HEADS:
        heads, source = GPT2_HEADS[(n_layer, n_embd)], "GPT-2's released sizes"
    if heads is None:
        raise ConvertError(f"the number of heads cannot be read from the tensors (n_embd "
                           f"{n_embd}); give --heads N, or put Hugging Face's config.json "
                           f"beside the input")
    if n_embd % heads:
        raise ConvertError(f"n_embd {n_embd} is not a multiple of {heads} heads ({source})")
    config = {"vocab_size": vocab, "block_size": block_size, "n_layer": n_layer,
              "n_head": heads, "n_embd": n_embd}
    if eps is not None:
        config["layer_norm_eps"] = eps
    line = (f"GPT-2: {n_layer} layers, {heads} heads ({source}), n_embd {n_embd}, vocabulary "
            f"{vocab}, context {block_size}")
    return out, config, notes, line
