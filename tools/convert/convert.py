#!/usr/bin/env python3
"""Converts a PyTorch checkpoint (.pth / .bin) into a safetensors file that Vitrine reads.

    python3 tools/convert/convert.py input.pth output.safetensors
    python3 tools/convert/convert.py dinov2_vits14.pth dinov2.safetensors --heads 6
    python3 tools/convert/convert.py finetuned.pth out.safetensors --head-key mlp_head.1
    python3 tools/convert/convert.py vit.pth vit.safetensors --config config.json   # no inference
    python3 tools/convert/convert.py lstm_lm.pt lstm_lm.safetensors --by-name   # any nn modules
    python3 tools/convert/convert.py gpt2/pytorch_model.bin gpt2.safetensors    # GPT-2 (models::GPT)

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

--by-name: the state dict of any model made of torch.nn modules that Vitrine has under the same
names (Linear, Embedding, LayerNorm, RNN / LSTM / GRU and their cells, MultiheadAttention, the
Transformer layers, ...): every tensor is written under its own name (after the "module." and
"_orig_mod." clean-up), with no ViT checks and no config; nn::load_checkpoint or
nn::load_state_dict then loads it into the Vitrine model of the same structure, by name, and
names every tensor that does not fit. docs/nn.md ("Weights from PyTorch") has an example.

GPT-2 (Hugging Face's GPT2LMHeadModel / GPT2Model, or nanoGPT's): detected by its
"h.N.attn.c_attn.weight" names; written in the names and layout of Vitrine's models::GPT, with
its config (gpt2_names.py says what changes: Conv1D weights transposed, mask buffers dropped, the
head tied to the embedding; n_head from --heads, a config.json beside the input, or GPT-2's own
sizes). A .safetensors input (Hugging Face's model.safetensors) is read as well.

Otherwise the naming is detected from the names: timm / DINO / DINOv2, torchvision or Hugging Face, the one
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

"init" (ViTConfig::init: the scheme a new head is drawn with when the model is fine-tuned, as
its source would draw it) is written only when it is not timm's: "torchvision" for torchvision's
naming, or what --init gives (timm, torchvision, vit-pytorch, dino).

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
import sys

import torch

from checkpoint_read import (CONTAINER_KEYS, clean_names, find_state_dict, load, own_config,
                             read_config)
from gpt2_names import convert_gpt2, is_gpt2
from vit_config_infer import check_attention, checked_own_config, infer_config
from vit_names import (HEAD_NAMES, NAMING_NAMES, ConvertError, _rows, check_names, naming_of,
                       place_head)

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


# ViTConfig::init's schemes (models/vit_config.h).
INITS = ("timm", "torchvision", "vit-pytorch", "dino")


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
    parser.add_argument("--init", choices=INITS,
                        help="the initialisation a new head (vitrine-train --finetune) is drawn "
                        "with: written as the config's init (default: torchvision for "
                        "torchvision's naming, else timm's, which is not written)")
    parser.add_argument("--no-config", action="store_true",
                        help="write no vitrine.config (the tools then need --model-config)")
    parser.add_argument("--by-name", action="store_true",
                        help="any torch.nn model: write every tensor under its own name (no ViT "
                        "checks, no config)")
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
                            or args.init or sets):
            raise ConvertError("--config stores the given config as it is: set the heads, image "
                               "size, eps, init and other fields in it, not with --heads, "
                               "--image-size, --eps, --init or --set")
        if args.image_size and len(args.image_size) > 2:
            raise ConvertError("--image-size takes H or H W")
        metadata = {"format": "pt"}
        obj = load(args.input, args.unsafe_pickle)
        tensors, notes = clean_names(find_state_dict(obj, args.key, args.input),
                                     strip_backbone=not args.by_name)
        if not tensors:
            raise ConvertError(f"{args.input}: no tensors to write")
        if args.by_name:
            vit_only = [flag for flag, given in (
                ("--config", args.config), ("--heads", args.heads is not None),
                ("--image-size", args.image_size), ("--head-key", args.head_key),
                ("--eps", args.eps is not None), ("--set", args.set), ("--init", args.init))
                if given]
            if vit_only:
                raise ConvertError(f"--by-name writes the tensors as they are: "
                                   f"{', '.join(vit_only)} describe a Vision Transformer")
            size = write_safetensors(args.output, tensors, metadata)
            print(f"wrote {args.output}: {len(tensors)} tensors by name, {size} bytes of data")
            for note in notes:
                print(f"note: {note}", file=sys.stderr)
            return 0
        if is_gpt2(tensors):
            vit_only = [flag for flag, given in (
                ("--image-size", args.image_size), ("--head-key", args.head_key),
                ("--init", args.init), ("--set", args.set)) if given]
            if vit_only:
                raise ConvertError(f"{args.input} is a GPT-2 checkpoint: {', '.join(vit_only)} "
                                   f"describe a Vision Transformer")
            try:
                tensors, config, more, line = convert_gpt2(tensors, args.input, args.heads,
                                                           args.eps)
            except ConvertError as e:
                raise ConvertError(f"{args.input}: {e}")
            notes += more
            if args.config:
                config = read_config(args.config)
            metadata["vitrine.config"] = json.dumps(config)
            metadata["vitrine.model"] = "gpt"
            size = write_safetensors(args.output, tensors, metadata)
            print(line)
            print(f"wrote {args.output}: {len(tensors)} tensors, {size} bytes of data, with "
                  f"vitrine.config")
            for note in notes:
                print(f"note: {note}", file=sys.stderr)
            return 0
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
            init = args.init or ("torchvision" if naming == "torchvision" else "timm")
            if init != "timm":
                config["init"] = init
                sources.append(f"init {init} "
                               + ("(--init)" if args.init else "(torchvision's naming)"))
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
