"""convert.py's Vision Transformer config: inferred from the tensors' shapes (and the number of
heads, the image size and other fields from a config the checkpoint keeps, or the command line),
compared with Vitrine's presets, and checked against the tensors."""

import re

from checkpoint_read import HEADS_KEYS, IMAGE_KEYS, WIDTH_KEYS
from vit_names import HEAD_NAMES, ConvertError, _rows, hf_prefix, shape_of, width_of

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
