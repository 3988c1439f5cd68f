"""convert.py's knowledge of a Vision Transformer's tensor names: the namings (timm / DINO,
torchvision, Hugging Face) and every name Vitrine's loader reads in each (models/vit_import.cpp),
telling the naming from the names, and finding and placing the classifier (the head)."""

import re

import torch


class ConvertError(Exception):
    pass


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
