"""The networks bench/fmnist_torch.py trains, in PyTorch as Vitrine builds them: the ViT
(build_model) and the CIFAR ResNet (build_resnet, tests/fixtures/make_resnet_fixtures.py's), and
the parameter groups with and without weight decay. See fmnist_torch.py's docstring."""

import math
import os

from fmnist_config import REPO


# ---- the model (models/vit.cpp, nn/attention.cpp, nn/mlp.cpp, nn/layers.cpp) ----------------------

def vitrine_init(vit):
    """Vitrine's ViT init on a PyTorch ViT (cls_token, pos_embed, Linear layers); Conv2d and
    LayerNorm keep PyTorch's defaults. Shared with bench/torch_bench.py's ViT."""
    from torch import nn
    nn.init.normal_(vit.cls_token, mean=0.0, std=1e-6)
    nn.init.trunc_normal_(vit.pos_embed, mean=0.0, std=0.02, a=-2.0, b=2.0)
    for mod in vit.modules():
        if isinstance(mod, nn.Linear):
            nn.init.trunc_normal_(mod.weight, mean=0.0, std=0.02, a=-2.0, b=2.0)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)


def build_model(m):
    if m.get("arch") == "resnet":
        return build_resnet(m)
    import torch
    from torch import nn

    def drop_path(x, p, training):  # timm.layers.drop_path
        if p == 0.0 or not training:
            return x
        keep = 1.0 - p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    class DropPath(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            return drop_path(x, self.p, self.training)

    class Attention(nn.Module):
        def __init__(self, dim, heads, qkv_bias, proj_drop):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.scale = self.head_dim ** -0.5
            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.attn_drop = nn.Dropout(0.0)
            self.proj = nn.Linear(dim, dim)
            self.proj_drop = nn.Dropout(proj_drop)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj_drop(self.proj(x))

    class Mlp(nn.Module):
        def __init__(self, dim, hidden, drop):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.act = nn.GELU()  # exact erf GELU
            self.drop1 = nn.Dropout(drop)
            self.fc2 = nn.Linear(hidden, dim)
            self.drop2 = nn.Dropout(drop)

        def forward(self, x):
            return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

    class Block(nn.Module):
        def __init__(self, dp):
            super().__init__()
            self.norm1 = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.attn = Attention(m["dim"], m["heads"], m["qkv_bias"], m["dropout"])
            self.drop_path1 = DropPath(dp) if dp > 0 else nn.Identity()
            self.norm2 = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.mlp = Mlp(m["dim"], m["mlp_dim"], m["dropout"])
            self.drop_path2 = DropPath(dp) if dp > 0 else nn.Identity()

        def forward(self, x):
            x = x + self.drop_path1(self.attn(self.norm1(x)))
            return x + self.drop_path2(self.mlp(self.norm2(x)))

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            # The convolutional stem (models/vit.h, ViTConfig::stem): per width, Conv2d 3x3
            # (padding 1, no bias, stride from stem_strides), BatchNorm2d, ReLU.
            layers, cin = [], m["channels"]
            for width, stride in zip(m["stem"], m["stem_strides"]):
                layers += [nn.Conv2d(cin, width, 3, stride=stride, padding=1, bias=False),
                           nn.BatchNorm2d(width), nn.ReLU()]
                cin = width
            self.stem = nn.Sequential(*layers) if layers else None
            # kernel patch_kernel, stride what the stem left of the patch, padding (kernel -
            # patch) / 2: the grid stays image / patch (ViTConfig::patch_kernel)
            k, st = m["patch_kernel"], m["patch"] // math.prod(m["stem_strides"])
            self.proj = nn.Conv2d(cin, m["dim"], k, stride=st, padding=(k - st) // 2)

        def forward(self, images):
            return self.proj(self.stem(images) if self.stem is not None else images)

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            h, w = m["image_size"]
            patches = (h // m["patch"]) * (w // m["patch"])
            self.pool = m["pool"]
            self.patch_embed = PatchEmbed()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, m["dim"]))
            self.pos_embed = nn.Parameter(torch.zeros(1, 1 + patches, m["dim"]))
            depth = m["depth"]
            rates = [m["drop_path"] * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
            self.blocks = nn.ModuleList([Block(r) for r in rates])
            self.norm = nn.LayerNorm(m["dim"], eps=m["eps"])
            self.head = nn.Linear(m["dim"], m["num_classes"])
            vitrine_init(self)  # see the docstring

        def forward(self, images):
            x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [B, patches, dim]
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            x = self.norm(x)
            x = x[:, 0] if self.pool == "cls" else x[:, 1:].mean(dim=1)
            return self.head(x)

    return VisionTransformer()


def build_resnet(m):
    """models/resnet.{h,cpp}: the ResNet of He et al. 2016 (the CIFAR networks, or torchvision's
    resnet18/34 with the imagenet stem), torchvision's BasicBlock with option-B shortcuts, as
    tests/fixtures/make_resnet_fixtures.py writes it (the network of the parity fixtures, checked
    there against torchvision's own), with torchvision's init (convs kaiming_normal fan_out,
    BatchNorm 1 and 0, fc PyTorch's Linear default)."""
    import importlib.util
    from torch import nn
    spec = importlib.util.spec_from_file_location(
        "make_resnet_fixtures", os.path.join(REPO, "tests", "fixtures", "make_resnet_fixtures.py"))
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    model = fixtures.ResNet(m["depth"], m["channels"], m["num_classes"], m["width"], m["layers"],
                            m["stem"])
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    return model


def param_groups_with_decay(model, lr, weight_decay,
                            no_decay_names=("ndim<=1", "pos_embed", "cls_token", "register_tokens")):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exempt = any(p.dim() <= 1 if n == "ndim<=1" else n in name for n in no_decay_names)
        (no_decay if exempt else decay).append(p)
    return [{"params": decay, "lr": lr, "weight_decay": weight_decay, "name": "decay"},
            {"params": no_decay, "lr": lr, "weight_decay": 0.0, "name": "no_decay"}]
