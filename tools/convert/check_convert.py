#!/usr/bin/env python3
"""Checks convert.py's inferred configs end to end, by hand (not part of make test: it needs
Debian's python3-torch and python3-torchvision, and a built vitrine-explain):

    /usr/bin/python3 tools/convert/check_convert.py build/tools/explain/vitrine-explain

For a tiny torchvision ViT (with a head) and a DINO-style backbone saved as DINO's checkpoints are
(a "teacher" dict with "backbone." names and a projection head), it converts the PyTorch file with
no config given, runs vitrine-explain on the model's input saved as .npy (no --model-config), and
compares Vitrine's logits (features without a head) with PyTorch's. Prints the largest
difference of each and exits non-zero above 1e-4.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


def dino_backbone(dim=48, depth=2, heads=3, patch=8, image=32, seed=0):
    """A DINO-style ViT (DINO's vision_transformer.py, pre-norm, timm names) as a state dict and a
    function computing its CLS features."""
    g = torch.Generator().manual_seed(seed)
    n = (image // patch) ** 2
    r = lambda *s: torch.randn(*s, generator=g) * 0.05
    sd = {"cls_token": r(1, 1, dim), "pos_embed": r(1, n + 1, dim),
          "patch_embed.proj.weight": r(dim, 3, patch, patch), "patch_embed.proj.bias": r(dim)}
    for i in range(depth):
        p = f"blocks.{i}."
        sd.update({p + "norm1.weight": 1 + r(dim), p + "norm1.bias": r(dim),
                   p + "attn.qkv.weight": r(3 * dim, dim), p + "attn.qkv.bias": r(3 * dim),
                   p + "attn.proj.weight": r(dim, dim), p + "attn.proj.bias": r(dim),
                   p + "norm2.weight": 1 + r(dim), p + "norm2.bias": r(dim),
                   p + "mlp.fc1.weight": r(4 * dim, dim), p + "mlp.fc1.bias": r(4 * dim),
                   p + "mlp.fc2.weight": r(dim, 4 * dim), p + "mlp.fc2.bias": r(dim)})
    sd.update({"norm.weight": 1 + r(dim), "norm.bias": r(dim)})

    def forward(x):
        F = torch.nn.functional
        t = F.conv2d(x, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=patch)
        t = t.flatten(2).transpose(1, 2)
        t = torch.cat([sd["cls_token"].expand(x.shape[0], -1, -1), t], 1) + sd["pos_embed"]
        hd = dim // heads
        for i in range(depth):
            p = f"blocks.{i}."
            y = F.layer_norm(t, (dim,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], 1e-6)
            qkv = F.linear(y, sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"])
            q, k, v = qkv.reshape(x.shape[0], -1, 3, heads, hd).permute(2, 0, 3, 1, 4)
            a = ((q @ k.transpose(-2, -1)) * hd ** -0.5).softmax(-1)
            y = (a @ v).transpose(1, 2).reshape(x.shape[0], -1, dim)
            t = t + F.linear(y, sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
            y = F.layer_norm(t, (dim,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], 1e-6)
            y = F.linear(F.gelu(F.linear(y, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"])),
                         sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
            t = t + y
        t = F.layer_norm(t, (dim,), sd["norm.weight"], sd["norm.bias"], 1e-6)
        return t[:, 0]

    return sd, forward


def run(explain, checkpoint, x, tmp, name):
    np.save(os.path.join(tmp, name + ".npy"), x.numpy())
    out = os.path.join(tmp, name + "_out")
    subprocess.run([explain, "--checkpoint", checkpoint, "--input", os.path.join(tmp, name + ".npy"),
                    "--method", "attention", "--out", out], check=True, capture_output=True)
    for f in ("logits.npy", "features.npy"):
        if os.path.exists(os.path.join(out, f)):
            return np.load(os.path.join(out, f))
    raise RuntimeError(f"{out}: no logits.npy or features.npy")


def convert(src, dst, *extra):
    r = subprocess.run([sys.executable, os.path.join(HERE, "convert.py"), src, dst, *extra],
                       check=True, capture_output=True, text=True)
    print(r.stdout.strip())
    if r.stderr.strip():
        print(r.stderr.strip())


def main():
    explain = sys.argv[1] if len(sys.argv) > 1 else "build/tools/explain/vitrine-explain"
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                  num_heads=2, hidden_dim=128, mlp_dim=96,
                                                  num_classes=5).eval()
        with torch.no_grad():  # torchvision initialises the head (and biases) to zero
            for name, p in tv.named_parameters():
                if name.startswith("heads.") or name.endswith("bias"):
                    p.normal_(0, 0.1)
        torch.save(tv.state_dict(), os.path.join(tmp, "tv.pth"))
        convert(os.path.join(tmp, "tv.pth"), os.path.join(tmp, "tv.safetensors"))
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            want = tv(x).numpy()
        got = run(explain, os.path.join(tmp, "tv.safetensors"), x, tmp, "tv")
        d = float(np.abs(got - want).max())
        print(f"torchvision ViT (2 heads = 128 / 64): max |logit difference| {d:.2e} "
              f"(logits up to {float(np.abs(want).max()):.3f})")
        worst = max(worst, d)

        sd, forward = dino_backbone()
        ckpt = {"teacher": {"backbone." + k: v for k, v in sd.items()}
                | {"head.mlp.0.weight": torch.zeros(8, 48)}, "epoch": 100}
        torch.save(ckpt, os.path.join(tmp, "dino.pth"))
        convert(os.path.join(tmp, "dino.pth"), os.path.join(tmp, "dino.safetensors"), "--heads", "3")
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            want = forward(x).numpy()
        got = run(explain, os.path.join(tmp, "dino.safetensors"), x, tmp, "dino")
        d = float(np.abs(got - want).max())
        print(f"DINO-style backbone from a teacher checkpoint: max |feature difference| {d:.2e}")
        worst = max(worst, d)
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
