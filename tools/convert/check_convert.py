#!/usr/bin/env python3
"""Checks convert.py by hand (not part of make test: it needs Debian's python3-torch and
python3-torchvision, and for the end-to-end half a built vitrine-explain):

    /usr/bin/python3 tools/convert/check_convert.py --python-only
    /usr/bin/python3 tools/convert/check_convert.py build/tools/explain/vitrine-explain

The first half needs no Vitrine: it converts small models built here and checks the files written
(their names and vitrine.config) and the errors: a torchvision ViT whose heads were replaced by
nn.Linear(dim, 3), a classifier named with --head-key, an unknown extra tensor, a 2-head model of
width 64 (refused without --heads), heads from the checkpoint's own config and from a preset of
the same shapes, an attention narrower or wider than the model (dim_head) without a final norm,
and a position embedding that is not a square grid.

The second half (without --python-only) converts a tiny torchvision ViT (with its own head, and
with heads replaced by nn.Linear), a DINO-style backbone saved as DINO's checkpoints are (a
"teacher" dict with "backbone." names and a projection head), and a model with dim_head != width /
heads and no final norm, runs vitrine-explain on each one's input saved as .npy (no
--model-config), and compares Vitrine's logits (features without a head) with PyTorch's. It
prints the largest difference of each and fails above 1e-4.

Exits non-zero when any check fails.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def timm_vit(dim=48, depth=2, heads=3, dim_head=0, patch=8, image=32, mlp=None, classes=0,
             qkv_bias=True, final_norm=True, seed=0):
    """A ViT in timm's names (as DINO's vision_transformer.py and lucidrains' vit-pytorch compute
    it: pre-norm, class token), as a state dict and a function computing its output: logits with
    classes > 0, else the class token's features. dim_head 0: dim / heads."""
    g = torch.Generator().manual_seed(seed)
    n = (image // patch) ** 2
    mlp = mlp or 4 * dim
    hd = dim_head or dim // heads
    inner = heads * hd
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    sd = {"cls_token": r(1, 1, dim), "pos_embed": r(1, n + 1, dim),
          "patch_embed.proj.weight": r(dim, 3, patch, patch), "patch_embed.proj.bias": r(dim)}
    for i in range(depth):
        p = f"blocks.{i}."
        sd.update({p + "norm1.weight": 1 + r(dim), p + "norm1.bias": r(dim),
                   p + "attn.qkv.weight": r(3 * inner, dim),
                   p + "attn.proj.weight": r(dim, inner), p + "attn.proj.bias": r(dim),
                   p + "norm2.weight": 1 + r(dim), p + "norm2.bias": r(dim),
                   p + "mlp.fc1.weight": r(mlp, dim), p + "mlp.fc1.bias": r(mlp),
                   p + "mlp.fc2.weight": r(dim, mlp), p + "mlp.fc2.bias": r(dim)})
        if qkv_bias:
            sd[p + "attn.qkv.bias"] = r(3 * inner)
    if final_norm:
        sd.update({"norm.weight": 1 + r(dim), "norm.bias": r(dim)})
    if classes:
        sd.update({"head.weight": r(classes, dim) * 10, "head.bias": r(classes)})

    def forward(x):
        F = torch.nn.functional
        t = F.conv2d(x, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=patch)
        t = t.flatten(2).transpose(1, 2)
        t = torch.cat([sd["cls_token"].expand(x.shape[0], -1, -1), t], 1) + sd["pos_embed"]
        for i in range(depth):
            p = f"blocks.{i}."
            y = F.layer_norm(t, (dim,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], 1e-6)
            qkv = F.linear(y, sd[p + "attn.qkv.weight"], sd.get(p + "attn.qkv.bias"))
            q, k, v = qkv.reshape(x.shape[0], -1, 3, heads, hd).permute(2, 0, 3, 1, 4)
            a = ((q @ k.transpose(-2, -1)) * hd ** -0.5).softmax(-1)
            y = (a @ v).transpose(1, 2).reshape(x.shape[0], -1, inner)
            t = t + F.linear(y, sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
            y = F.layer_norm(t, (dim,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], 1e-6)
            y = F.linear(F.gelu(F.linear(y, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"])),
                         sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
            t = t + y
        if final_norm:
            t = F.layer_norm(t, (dim,), sd["norm.weight"], sd["norm.bias"], 1e-6)
        t = t[:, 0]
        return F.linear(t, sd["head.weight"], sd["head.bias"]) if classes else t

    return sd, forward


def torchvision_vit(classes=5, replace_heads=None):
    """A tiny torchvision ViT (2 heads of 64), its head and biases made non-zero; replace_heads:
    the number of classes of an nn.Linear put in place of model.heads (fine-tuning)."""
    torch.manual_seed(0)
    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                              num_heads=2, hidden_dim=128, mlp_dim=96,
                                              num_classes=classes)
    if replace_heads:
        tv.heads = torch.nn.Linear(128, replace_heads)
    with torch.no_grad():  # torchvision initialises the head (and biases) to zero
        for name, p in tv.named_parameters():
            if name.startswith("heads.") or name.endswith("bias"):
                p.normal_(0, 0.1)
    return tv.eval()


def convert(src, dst, *extra):
    """Runs convert.py; returns (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, os.path.join(HERE, "convert.py"), src, dst, *extra],
                       capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def header(path):
    """(vitrine.config as a dict, {name: shape}) of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
    meta = h.pop("__metadata__")
    return json.loads(meta["vitrine.config"]), {k: v["shape"] for k, v in h.items()}


def show(out, err):
    for line in (out + err).strip().splitlines():
        print("      " + line)


def python_checks(tmp):
    path = lambda name: os.path.join(tmp, name)

    # (a) torchvision, heads replaced by nn.Linear(dim, 3): heads.weight / heads.bias.
    torch.save(torchvision_vit(replace_heads=3).state_dict(), path("tv3.pth"))
    rc, out, err = convert(path("tv3.pth"), path("tv3.safetensors"), "--heads", "2")
    show(out, err)
    config, names = header(path("tv3.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("num_classes") == 3
          and names.get("heads.head.weight") == [3, 128] and names.get("heads.head.bias") == [3]
          and "heads.weight" not in names,
          "torchvision ViT with model.heads = nn.Linear(128, 3): num_classes 3, written as "
          "heads.head.weight/bias")

    # A classifier under another name, given with --head-key; without it, an error naming it.
    sd, _ = timm_vit(classes=0)
    sd.update({"mlp_head.1.weight": torch.randn(7, 48), "mlp_head.1.bias": torch.randn(7)})
    torch.save(sd, path("mlp_head.pth"))
    rc, out, err = convert(path("mlp_head.pth"), path("mlp_head.safetensors"), "--heads", "3")
    show(out, err)
    check(rc == 1 and err.startswith("error: ") and "mlp_head.1.weight" in err
          and "--head-key mlp_head.1" in err and not os.path.exists(path("mlp_head.safetensors")),
          "a head under mlp_head.1 without --head-key: refused, naming it and --head-key "
          "mlp_head.1, nothing written")
    rc, out, err = convert(path("mlp_head.pth"), path("mlp_head.safetensors"), "--heads", "3",
                           "--head-key", "mlp_head.1")
    show(out, err)
    config, names = header(path("mlp_head.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("num_classes") == 7 and names.get("head.weight") == [7, 48]
          and not any(n.startswith("mlp_head") for n in names),
          "--head-key mlp_head.1: num_classes 7, written as head.weight/bias (timm's name)")

    # (b) an unknown extra tensor is named in the error, and nothing is written.
    sd = torchvision_vit().state_dict()
    sd["extra_scale"] = torch.ones(128)
    torch.save(sd, path("extra.pth"))
    rc, out, err = convert(path("extra.pth"), path("extra.safetensors"), "--heads", "2")
    show(out, err)
    check(rc == 1 and err.startswith("error: ") and "extra_scale [128]" in err
          and not os.path.exists(path("extra.safetensors")),
          "an unknown tensor (extra_scale): refused, named in the error, nothing written")

    # (c) 2 heads of width 32 (width 64): refused without --heads, converts with it.
    sd, _ = timm_vit(dim=64, heads=2, classes=10, image=28, patch=7, mlp=128)
    torch.save(sd, path("w64.pth"))
    rc, out, err = convert(path("w64.pth"), path("w64.safetensors"))
    show(out, err)
    check(rc == 1 and err.startswith("error: ") and "--heads" in err and "width 64" in err
          and not os.path.exists(path("w64.safetensors")),
          "width 64, no config, no --heads: refused, asking for --heads and naming the width")
    rc, out, err = convert(path("w64.pth"), path("w64.safetensors"), "--heads", "2")
    show(out, err)
    config, _ = header(path("w64.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("heads") == 2 and "dim_head" not in config
          and "heads 2 from --heads" in out,
          "width 64 with --heads 2: heads 2, said to be from --heads")

    # (c2) init: torchvision's naming writes "init": "torchvision"; timm's writes none (the
    # default); --init names any scheme; an unknown one is refused by argparse.
    torch.save(torchvision_vit().state_dict(), path("tvinit.pth"))
    rc, out, err = convert(path("tvinit.pth"), path("tvinit.safetensors"), "--heads", "2")
    config, _ = header(path("tvinit.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("init") == "torchvision" and "init torchvision" in out,
          "torchvision's naming: init torchvision written, and said")
    config, _ = header(path("w64.safetensors"))
    check("init" not in config, "timm's naming: no init written (timm's, the default)")
    rc, out, err = convert(path("w64.pth"), path("w64_dino.safetensors"), "--heads", "2",
                           "--init", "dino")
    config, _ = header(path("w64_dino.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("init") == "dino" and "init dino (--init)" in out,
          "--init dino: written, and said")
    rc, out, err = convert(path("w64.pth"), path("w64_bad.safetensors"), "--heads", "2",
                           "--init", "xavier")
    check(rc == 2 and "invalid choice: 'xavier'" in err
          and not os.path.exists(path("w64_bad.safetensors")), "--init xavier: refused")

    # The same model with a config of its own beside the state dict (as a Hugging Face config).
    torch.save({"model": sd, "config": {"hidden_size": 64, "num_attention_heads": 2}},
               path("w64_own.pth"))
    rc, out, err = convert(path("w64_own.pth"), path("w64_own.safetensors"))
    show(out, err)
    config, _ = header(path("w64_own.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("heads") == 2 and "own config" in out,
          "width 64 with its own config (num_attention_heads 2): heads 2, from that config")

    # (d) the shapes of vit_tiny_patch16_224 (depth 12): heads 3 from the preset.
    sd, _ = timm_vit(dim=192, depth=12, heads=3, patch=16, image=224, mlp=768, classes=1000)
    torch.save(sd, path("tiny.pth"))
    rc, out, err = convert(path("tiny.pth"), path("tiny.safetensors"))
    show(out, err)
    config, _ = header(path("tiny.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("heads") == 3 and "preset vit_tiny_patch16_224" in out,
          "vit_tiny_patch16_224's shapes: heads 3 from that preset")
    sd, _ = timm_vit(dim=192, depth=11, heads=3, patch=16, image=224, mlp=768)  # one block short
    torch.save(sd, path("tiny11.pth"))
    rc, out, err = convert(path("tiny11.pth"), path("tiny11.safetensors"))
    show(out, err)
    check(rc == 1 and "--heads" in err and "vit_tiny_patch16_224" in err,
          "vit_tiny_patch16_224 but depth 11: refused, naming the nearest preset")

    # (e) heads of 32 in a model of width 48 (4 heads: an attention 128 wide, as lucidrains'
    # vit-pytorch builds with dim_head), no qkv bias, no final norm.
    sd, _ = timm_vit(dim=48, heads=4, dim_head=32, qkv_bias=False, final_norm=False, classes=5)
    torch.save(sd, path("dh.pth"))
    rc, out, err = convert(path("dh.pth"), path("dh.safetensors"))
    show(out, err)
    check(rc == 1 and "--heads" in err and "128" in err,
          "attention 128 wide in width 48, no --heads: refused, saying the attention's width")
    rc, out, err = convert(path("dh.pth"), path("dh.safetensors"), "--heads", "4")
    show(out, err)
    config, _ = header(path("dh.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("heads") == 4 and config.get("dim_head") == 32
          and config.get("final_norm") is False and config.get("qkv_bias") is False,
          "dim_head 32 with --heads 4 (width 48), final_norm false, qkv_bias false")
    rc, out, err = convert(path("w64.pth"), path("w64.safetensors"), "--heads", "2")
    config, _ = header(path("w64.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and "dim_head" not in config and "final_norm" not in config,
          "dim_head and final_norm not written when they are the defaults")

    # A position embedding whose patches are not a square grid: refused without --image-size.
    sd, _ = timm_vit(dim=64, heads=2, classes=0)
    sd["pos_embed"] = torch.randn(1, 4 * 8 + 1, 64)  # 32x64 images in patches of 8
    torch.save(sd, path("wide.pth"))
    rc, out, err = convert(path("wide.pth"), path("wide.safetensors"), "--heads", "2")
    show(out, err)
    check(rc == 1 and "--image-size" in err, "a 4x8 grid without --image-size: refused, "
          "asking for it")
    rc, out, err = convert(path("wide.pth"), path("wide.safetensors"), "--heads", "2",
                           "--image-size", "32", "64")
    config, _ = header(path("wide.safetensors")) if rc == 0 else ({}, {})
    check(rc == 0 and config.get("image_size") == [32, 64], "with --image-size 32 64: 32x64")


def gpt2_checks(tmp):
    """GPT-2 in Hugging Face's layout (GPT2Model's names, Conv1D weights [in, out]), nanoGPT's
    (Linear's layout, in a {"model": ...} container), a model.safetensors, an untied head."""
    from checkpoint_read import load_safetensors
    from convert import write_safetensors
    path = lambda name: os.path.join(tmp, name)
    g = torch.Generator().manual_seed(0)
    C, V, P = 24, 30, 16
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    ours = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(P, C),
            "transformer.ln_f.weight": 1 + r(C), "transformer.ln_f.bias": r(C)}
    for i in range(2):
        p = f"transformer.h.{i}."
        ours.update({p + "ln_1.weight": 1 + r(C), p + "ln_1.bias": r(C),
                     p + "attn.c_attn.weight": r(3 * C, C), p + "attn.c_attn.bias": r(3 * C),
                     p + "attn.c_proj.weight": r(C, C), p + "attn.c_proj.bias": r(C),
                     p + "ln_2.weight": 1 + r(C), p + "ln_2.bias": r(C),
                     p + "mlp.c_fc.weight": r(4 * C, C), p + "mlp.c_fc.bias": r(4 * C),
                     p + "mlp.c_proj.weight": r(C, 4 * C), p + "mlp.c_proj.bias": r(C)})
    ours["lm_head.weight"] = ours["transformer.wte.weight"]
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    hf = {k[len("transformer."):]: (v.t().contiguous() if k.endswith(conv1d) else v)
          for k, v in ours.items() if k.startswith("transformer.")}
    hf["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    same = lambda f: all(torch.equal(load_safetensors(f)[k], v) for k, v in ours.items()) and \
        set(load_safetensors(f)) == set(ours)
    torch.save(hf, path("gpt2.bin"))
    rc, out, err = convert(path("gpt2.bin"), path("g1.safetensors"))
    check(rc == 1 and "--heads" in err, "GPT-2 of width 24 without --heads: refused, asks for it")
    rc, out, err = convert(path("gpt2.bin"), path("g1.safetensors"), "--heads", "2")
    check(rc == 0 and same(path("g1.safetensors")) and header(path("g1.safetensors"))[0] ==
          {"vocab_size": V, "block_size": P, "n_layer": 2, "n_head": 2, "n_embd": C},
          "GPT2Model (Hugging Face's layout): transposed, prefixed, tied head, config")
    torch.save({"model": ours, "iter_num": 1}, path("nano.pt"))
    rc, out, err = convert(path("nano.pt"), path("g2.safetensors"), "--heads", "2")
    check(rc == 0 and same(path("g2.safetensors")), "nanoGPT's checkpoint: written as it is")
    write_safetensors(path("model.safetensors"), hf, {"format": "pt"})
    rc, out, err = convert(path("model.safetensors"), path("g3.safetensors"), "--heads", "2")
    check(rc == 0 and same(path("g3.safetensors")), "a model.safetensors input")
    untied = dict(ours, **{"lm_head.weight": ours["lm_head.weight"] + 1})
    torch.save(untied, path("untied.bin"))
    rc, out, err = convert(path("untied.bin"), path("g4.safetensors"), "--heads", "2")
    check(rc == 1 and "untied head" in err and not os.path.exists(path("g4.safetensors")),
          "an untied head: refused, nothing written")


def explain(vitrine_explain, checkpoint, x, tmp, name):
    np.save(os.path.join(tmp, name + ".npy"), x.numpy())
    out = os.path.join(tmp, name + "_out")
    r = subprocess.run([vitrine_explain, "--checkpoint", checkpoint, "--input",
                        os.path.join(tmp, name + ".npy"), "--method", "attention", "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"vitrine-explain failed: {(r.stderr or r.stdout).strip()}")
    for f in ("logits.npy", "features.npy"):
        if os.path.exists(os.path.join(out, f)):
            return np.load(os.path.join(out, f))
    raise RuntimeError(f"{out}: no logits.npy or features.npy")


def compare(vitrine_explain, tmp, name, what, src, forward, *extra):
    """Converts src, runs Vitrine on random images and compares with forward's outputs."""
    dst = os.path.join(tmp, name + ".safetensors")
    rc, out, err = convert(src, dst, *extra)
    show(out, err)
    if rc != 0:
        check(False, f"{what}: the conversion failed")
        return
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = forward(x).numpy()
    try:
        got = explain(vitrine_explain, dst, x, tmp, name)
    except RuntimeError as e:
        check(False, f"{what}: {e}")
        return
    d = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    check(d < 1e-4, f"{what}: max |difference| {d:.2e} (outputs up to "
          f"{float(np.abs(want).max()):.3f})")


def end_to_end_checks(vitrine_explain, tmp):
    tv = torchvision_vit()
    torch.save(tv.state_dict(), os.path.join(tmp, "tv.pth"))
    compare(vitrine_explain, tmp, "tv", "torchvision ViT, 2 heads, its own head (logits)",
            os.path.join(tmp, "tv.pth"), tv, "--heads", "2")

    tv3 = torchvision_vit(replace_heads=3)
    torch.save(tv3.state_dict(), os.path.join(tmp, "tv3.pth"))
    compare(vitrine_explain, tmp, "tv3", "torchvision ViT with heads = nn.Linear(128, 3) (logits)",
            os.path.join(tmp, "tv3.pth"), tv3, "--heads", "2")

    sd, forward = timm_vit()
    ckpt = {"teacher": {"backbone." + k: v for k, v in sd.items()}
            | {"head.mlp.0.weight": torch.zeros(8, 48)}, "epoch": 100}
    torch.save(ckpt, os.path.join(tmp, "dino.pth"))
    compare(vitrine_explain, tmp, "dino", "DINO-style backbone from a teacher checkpoint "
            "(features)", os.path.join(tmp, "dino.pth"), forward, "--heads", "3")

    sd, forward = timm_vit(dim=48, heads=4, dim_head=32, qkv_bias=False, final_norm=False,
                           classes=5)
    torch.save(sd, os.path.join(tmp, "dh.pth"))
    compare(vitrine_explain, tmp, "dh", "dim_head 32 x 4 heads in width 48, no qkv bias, no "
            "final norm (logits)", os.path.join(tmp, "dh.pth"), forward, "--heads", "4")


def main():
    args = sys.argv[1:]
    python_only = "--python-only" in args
    args = [a for a in args if a != "--python-only"]
    vitrine_explain = args[0] if args else "build/tools/explain/vitrine-explain"
    with tempfile.TemporaryDirectory() as tmp:
        print("-- conversions (no Vitrine needed)")
        python_checks(tmp)
        gpt2_checks(tmp)
        if not python_only:
            print(f"-- end to end, with {vitrine_explain}")
            if not os.path.exists(vitrine_explain):
                check(False, f"{vitrine_explain}: no such program (build it, or run with "
                      f"--python-only)")
            else:
                end_to_end_checks(vitrine_explain, tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
