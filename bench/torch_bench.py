#!/usr/bin/python3
"""PyTorch's side of the CPU benchmark (issue 8) and of the GPU one: the same measurements as
vitrine-bench (tools/bench/), with the same flags and the same JSON, for bench/compare.py and
bench/gpu_compare.py.

    /usr/bin/python3 bench/torch_bench.py --model fmnist --threads 2 --json fmnist.json
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_bench.py --model cifar10 --variant tuned
    /usr/bin/python3 bench/torch_bench.py --model vit_small_patch16_224 --what explain
    /usr/bin/python3 bench/torch_bench.py --self-check
    python3 bench/torch_bench.py --model vit_base_patch16_224 --device cuda --precision bf16
    python3 bench/torch_bench.py --model vit_base_patch16_224 --device cuda --precision bf16 \
        --compile --warmup 20

On the CPU, run it with Debian's Python (/usr/bin/python3: python3-torch 1.13 on OpenBLAS and
oneDNN). On a GPU, any Python whose torch has CUDA (1.13 or 2.x; --compile needs 2.x).

Models: the Vision Transformer of Vitrine's presets (models/vit.cpp), written here as timm writes
it and initialised as Vitrine initialises it (the same classes as bench/fmnist_torch.py, whose
docstring says where each detail comes from, without dropout or drop path): Conv2d patch
embedding, class token, learned position embedding on all tokens, pre-norm blocks (LayerNorm eps
1e-6; attention as timm's: qkv Linear, reshape and permute, softmax(q * scale @ k^T) @ v, proj;
MLP fc1, exact GELU, fc2), final LayerNorm, the class token's output, head Linear.
    fmnist                 28x28x1, patch 4, dim 128, depth 6, heads 4, MLP 256, 10 classes
                           (805130 parameters), batch 128
    cifar10                32x32x3, patch 4, dim 192, depth 6, heads 3, MLP 768, 10 classes
                           (2693578 parameters), batch 64
    vit_small_patch16_224  224x224x3, patch 16, dim 384, depth 12, heads 6, MLP 1536, 1000 classes,
                           (22050664 parameters), batch 8 (64 with --device cuda)
    vit_base_patch16_224   224x224x3, patch 16, dim 768, depth 12, heads 12, MLP 3072, 1000
                           classes (86567656 parameters), batch 8 (64 with --device cuda)

Measurements (the same as vitrine-bench's; --what picks them, in this order):
  train    model.train(); a step: zero_grad(set_to_none=True), forward, cross_entropy, backward,
           AdamW(lr 1e-3, weight_decay 0.05, on every parameter).
  infer    model.eval() under torch.no_grad(): forward only.
           Both on one fixed random batch (seeded, float32) with random labels: --warmup untimed
           steps, then --repeats timings of --steps steps each (time.perf_counter); per repeat
           images/s = batch * steps / seconds; the median, min and max over the repeats, the
           model GFLOP/s at the median and its share of the sgemm peak.
  memory   (with train) the resident set just before the model is built (/proc/self/statm) and
           the peak resident set right after the train section (getrusage ru_maxrss); their
           difference is train_peak_mb.
  explain  one random image at the model's size, batch 1, the random-init model in eval mode with
           its parameters frozen (no weight gradients; Vitrine's explain pass freezes them too),
           float32; every method timed as a full call from the image to its patch-grid map: one
           warm-up call, then --repeats calls (5 unless given), median, min and max in ms. The
           methods are those of tests/fixtures/make_explain_fixtures.py (the published
           algorithms; explain/explain.h defines Vitrine's) with explain.h's defaults:
    attention             forward under no_grad; last layer, mean over heads, CLS row
    rollout               forward under no_grad; mean fusion, discard 0.9 (vit-explain's topk,
                          [CLS, CLS] spared), (F + I) / 2 row-normalised, product over layers
    grad-rollout          forward + backward of the predicted logit; max(0, mean_h(G * A)),
                          discard 0.9, as rollout
    chefer                forward + backward; R = I; R += mean_h max(0, G * A) @ R
    gradcam               forward + backward; the last block's norm1 output as [D, gh, gw]
                          (pytorch-grad-cam's ViT reshape), channel weights = mean gradient, ReLU
    saliency              forward + backward; |d y / d x|, max over channels, mean per patch
    smoothgrad            forward under no_grad for the class, then one batch of 16 noisy copies
                          (sigma 0.15 of the image's value range), torch.autograd.grad to the
                          input; mean gradient, |.| summed over channels, mean per patch
    integrated-gradients  a no_grad forward of the image and the black (zero) baseline (the class
                          and the completeness gap), then one batch of the 50 Gauss-Legendre path
                          points, torch.autograd.grad to the input (Captum's rule); |attr| summed
                          over channels, mean per patch
  Gradient methods backpropagate into the attention probabilities / tokens (retain_grad) and
  the input, as the fixture script's run_pass does. --self-check runs all eight, with the
  fixture's settings, on the weights of its timm case and compares them with its float64 maps.

FLOPs per image, counted analytically as vitrine-bench does (tools/bench/bench.h; 2 per
multiply-add, matmuls only): patch embedding 2 P (C p p) D; per block, with N = P + 1 tokens,
2 N D 3D + 2 N N D + 2 N N D + 2 N D D + 2 N D M + 2 N M D; head 2 D K. A training step is
3 x the forward (ViT-B/16: 35.13 GFLOPs forward, timm's 17.6 GMACs). The sgemm peak is the best
of 5 torch.mm of 2048x2048 float32 matrices at the same threads, measured last so that its
buffers do not count in the memory peak.

GPU (--device cuda): the model is built on the CPU as above (same seed, same values), then moved
to the GPU with the batch. CUDA runs asynchronously, so torch.cuda.synchronize() comes before
every time.perf_counter() read (around each repeat of --steps steps, and around each matmul of
the peak); the steps inside a repeat are queued back to back, as a training loop runs them.
memory gets "device_peak_mb", torch.cuda.max_memory_allocated right after the train section
(what vitrine-bench's memory_stats peak counts: the bytes tensors hold, model and batch
included), and "device_reserved_peak_mb" (max_memory_reserved: what the caching allocator took
from the driver); the resident-set fields stay (they include the CUDA context). The matmul peak
on the GPU: one untimed torch.mm, then the best of 5, each one 2048^3 torch.mm in the matmul
dtype of --precision (bfloat16 for bf16; float32 with or without TF32 otherwise).
--device cuda: the default batch of both 224x224 models is 64 (the GPU benchmark's).

--precision (as vitrine-bench's; as torch.set_float32_matmul_precision):
  fp32  torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False: every
        product in float32 (PyTorch's own default leaves cuDNN's convolution on TF32).
  tf32  both True: float32 tensors, TF32 tensor-core matmuls and convolutions.
  bf16  PyTorch's standard mixed precision: forward and loss under torch.autocast(device_type=
        --device, dtype=torch.bfloat16) (matmuls and the convolution take bfloat16 inputs and
        accumulate in float32; softmax, LayerNorm and the loss run in float32, autocast's CUDA
        float32 list; other ops keep their inputs' dtype); float32 parameters, gradients and
        AdamW; no GradScaler (bfloat16 has float32's range). The TF32 flags are False, as for
        fp32, so nothing else is rounded. Inference runs under the same autocast.
  The flags are only set with --device cuda (they do nothing on the CPU); bf16 also works on
  the CPU (autocast on the CPU), tf32 there is fp32 with a warning.

--timm: the model is timm's own (timm.create_model(--model), random weights), for
vit_small_patch16_224 and vit_base_patch16_224: what a PyTorch user trains, with timm's fused
attention (F.scaled_dot_product_attention: flash kernels on a GPU). Without it the model is this
script's re-implementation, whose attention is unfused (softmax(q k^T) v written out). The JSON
records "timm": {"version", "fused_attn"}. An error when timm is not importable.

--compile (PyTorch >= 2.0; an older torch exits 2 naming its version): the model wrapped in
torch.compile(model, mode=--compile-mode) (default "default": TorchInductor, Triton kernels on a
GPU); the optimizer step stays eager. Compilation happens in the first call of each section's
warm-up (training and, with its eval mode and no_grad, inference once more); that call's time is
recorded as "first_call_seconds". The warm-up default is 10 with --compile (3 otherwise); raise
it if the timings are not flat (bench/gpu_compare.py passes --compile-warmup, 20 by default).

Threads: torch.set_num_threads(--threads) (OpenMP; OpenBLAS's OpenMP build follows it; CPU work
only: on a GPU it matters little).
--variant tuned expects OMP_WAIT_POLICY=PASSIVE in the environment (libgomp reads it when torch
loads, so bench/compare.py sets it before the interpreter starts); --variant default expects it
unset. The value seen is recorded as "omp_wait_policy", and a mismatch is warned about.

JSON (--json FILE; a table goes to stdout):
    {"framework": "pytorch", "version" (torch.__version__), "variant", "omp_wait_policy", "model",
     "batch", "threads", "device" ("cpu" or "cuda"), "precision", "compile" (true or false),
     "compile_mode" (with --compile), "timm" (with --timm), "gpu" (torch.cuda.get_device_name; null on the CPU),
     "cuda_version" (torch.version.cuda; null on the CPU), "params",
     "flops_per_image": {"forward", "train"}, "sgemm_peak_gflops" (the matmul peak above),
     "train": {"images_per_s": {"median", "min", "max", "runs"}, "gflops", "peak_share"},
     "infer": {...}, "memory": {"baseline_rss_mb", "peak_rss_mb", "train_peak_mb",
     "device_peak_mb", "device_reserved_peak_mb" (these two on a GPU)},
     "first_call_seconds": {"train", "infer"} (with --compile),
     "explain": {method: {"median", "min", "max"} (ms)}}
Sections not asked for are absent. --what explain runs on the CPU in float32 only (not with
--device cuda, --precision bf16 or tf32, or --compile).
Exit codes: 0 done, 1 error, 2 bad command line (and --compile on a torch older than 2.0).
"""

import argparse
import contextlib
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_explain import METHODS, Explainer  # noqa: E402  (the explanation methods)

MODELS = {
    "fmnist": dict(image=28, channels=1, patch=4, dim=128, depth=6, heads=4, mlp=256, classes=10,
                   batch=128, steps=5),
    "cifar10": dict(image=32, channels=3, patch=4, dim=192, depth=6, heads=3, mlp=768, classes=10,
                    batch=64, steps=5),
    "vit_small_patch16_224": dict(image=224, channels=3, patch=16, dim=384, depth=12, heads=6,
                                  mlp=1536, classes=1000, batch=8, steps=2),
    "vit_base_patch16_224": dict(image=224, channels=3, patch=16, dim=768, depth=12, heads=12,
                                 mlp=3072, classes=1000, batch=8, steps=2),
}
# ResNets (models/resnet.h): the CIFAR ones (3x32x32, 10 classes) and torchvision's ImageNet
# ResNet-18 and -34 (3x224x224, 1000 classes); --set model.arch=resnet on a ViT config is
# vitrine-train's ResNet-8 on that config's input and classes (Fashion-MNIST's for fmnist).
for _d in (8, 14, 20, 32, 44, 56):
    MODELS[f"resnet{_d}"] = dict(arch="resnet", depth=_d, image=32, channels=3, width=16,
                                 classes=10, batch=64, steps=5)
MODELS["resnet18"] = dict(arch="resnet", depth=18, layers=[2, 2, 2, 2], image=224, channels=3,
                          width=64, classes=1000, batch=8, steps=2)
MODELS["resnet34"] = dict(MODELS["resnet18"], depth=34, layers=[3, 4, 6, 3])
# the default batch with --device cuda, where it differs (the GPU benchmark's)
# The models --timm builds with timm.create_model (the same names there, 1000 classes).
TIMM_MODELS = ["vit_small_patch16_224", "vit_base_patch16_224"]
CUDA_BATCH = {"vit_small_patch16_224": 64, "vit_base_patch16_224": 64}
# Vitrine's presets (fmnist: vitrine-train --summary; the 224x224 ones: as timm's)
EXPECTED_PARAMS = {"fmnist": 805130, "cifar10": 2693578, "vit_small_patch16_224": 22050664,
                   "vit_base_patch16_224": 86567656}
EPS = 1e-6


# ---- the model (as bench/fmnist_torch.py's build_model, without dropout and drop path) ---------

def build_model(m):
    if m.get("arch") == "resnet":
        return build_resnet(m)
    import torch
    from fmnist_models import vitrine_init
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.scale = self.head_dim ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)
            self.keep = False  # explain: keep the probabilities (and their gradient)
            self.probs = None

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            if self.keep:
                if attn.requires_grad:
                    attn.retain_grad()
                self.probs = attn
            x = (attn @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj(x)

    class Mlp(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.act = nn.GELU()  # exact (erf)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(m["dim"], eps=EPS)
            self.attn = Attention(m["dim"], m["heads"])
            self.norm2 = nn.LayerNorm(m["dim"], eps=EPS)
            self.mlp = Mlp(m["dim"], m["mlp"])

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(m["channels"], m["dim"], m["patch"], stride=m["patch"])

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            h, w = image_hw(m)
            self.grid = (h // m["patch"], w // m["patch"])
            self.patch_embed = PatchEmbed()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, m["dim"]))
            self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.grid[0] * self.grid[1],
                                                      m["dim"]))
            self.blocks = nn.ModuleList([Block() for _ in range(m["depth"])])
            self.norm = nn.LayerNorm(m["dim"], eps=EPS)
            self.head = nn.Linear(m["dim"], m["classes"])
            vitrine_init(self)  # bench/fmnist_models.py: Vitrine's init

        def forward(self, images):
            x = self.patch_embed.proj(images).flatten(2).transpose(1, 2)  # [B, patches, dim]
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)[:, 0])

        def keep_attention(self, on):
            for block in self.blocks:
                block.attn.keep = on
                block.attn.probs = None

        def attentions(self):
            return [block.attn.probs for block in self.blocks]

    return VisionTransformer()


def build_resnet(m):
    """models/resnet.cpp's networks: torchvision's own resnet18/34 (the reference a user compares
    with), or the CIFAR ResNet of bench/fmnist_models.py's build_resnet (torchvision's BasicBlock,
    option-B shortcuts, torchvision's init)."""
    if "layers" in m:
        import torchvision
        return getattr(torchvision.models, f"resnet{m['depth']}")(num_classes=m["classes"])
    from fmnist_models import build_resnet as cifar_resnet
    return cifar_resnet(dict(depth=m["depth"], channels=m["channels"], num_classes=m["classes"],
                             width=m["width"], layers=None, stem="cifar"))


def build_timm_model(name):
    """timm's own model of that name (timm.create_model, random weights, timm's defaults: its
    attention runs F.scaled_dot_product_attention, the fused kernels, where timm's
    use_fused_attn() says so) and what to record of it: {"version", "fused_attn"}."""
    try:
        import timm
    except ImportError as e:
        raise RuntimeError(f"--timm: timm is not importable in {sys.executable} ({e})")
    if name not in TIMM_MODELS:
        raise RuntimeError(f"--timm: {name} is not one of timm's models this script compares "
                           f"with ({', '.join(TIMM_MODELS)})")
    model = timm.create_model(name, pretrained=False)
    fused = None
    try:
        from timm.layers import use_fused_attn
        fused = bool(use_fused_attn())
    except ImportError:
        pass
    return model, {"version": timm.__version__, "fused_attn": fused}


def resolve_model(name, sets):
    """--model and --set as vitrine-bench takes them (the model keys this script implements)."""
    m = dict(MODELS[name])
    for assignment in sets:
        key, _, value = assignment.partition("=")
        if key == "model.arch" and value == "resnet" and m.get("arch") != "resnet":
            m = dict(arch="resnet", depth=8, image=m["image"], channels=m["channels"], width=16,
                     classes=m["classes"], batch=m["batch"], steps=m["steps"])
        elif key == "model.arch" and value == m.get("arch", "vit"):
            pass
        elif m.get("arch") == "resnet" and key in ("model.depth", "model.width") and \
                "layers" not in m and value.isdigit():
            m[key[len("model."):]] = int(value)
        else:
            raise RuntimeError(f"--set {assignment}: this script implements model.arch=resnet and, "
                               "for a CIFAR ResNet, model.depth and model.width")
    return m


def image_hw(m):
    """m["image"]: one size, or [height, width] (the self-check's fixture model)."""
    return (m["image"], m["image"]) if isinstance(m["image"], int) else tuple(m["image"])


def forward_flops(m, model=None):
    """Model FLOPs of one image's forward (tools/bench/bench.cpp forward_flops): a ViT's analytic
    count, any other model's measured from its Conv2d and Linear layers."""
    if m.get("arch") == "resnet":
        import torch
        from torch import nn
        flops = [0.0]

        def count(mod, inputs, out):
            if isinstance(mod, nn.Conv2d):
                flops[0] += 2.0 * out.numel() * mod.weight[0].numel()
            elif isinstance(mod, nn.Linear):
                flops[0] += 2.0 * out.numel() * mod.in_features
        hooks = [mod.register_forward_hook(count) for mod in model.modules()
                 if isinstance(mod, (nn.Conv2d, nn.Linear))]
        was = model.training
        model.eval()
        with torch.no_grad():
            model(torch.randn(1, m["channels"], *image_hw(m)))
        model.train(was)
        for h in hooks:
            h.remove()
        return flops[0]
    h, w = image_hw(m)
    P = (h // m["patch"]) * (w // m["patch"])
    N, D, M, K = P + 1, m["dim"], m["mlp"], m["classes"]
    f = 2 * P * (m["channels"] * m["patch"] ** 2) * D
    f += m["depth"] * (2 * N * D * 3 * D + 2 * N * N * D + 2 * N * N * D + 2 * N * D * D
                       + 2 * N * D * M + 2 * N * M * D)
    return float(f + 2 * D * K)


# ---- timing, memory, peak --------------------------------------------------------------------

def stats_of(values, with_runs=True):
    """Median (of an even count: the mean of the middle two), min and max."""
    v = sorted(values)
    n = len(v)
    median = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    out = {"median": median, "min": v[0], "max": v[-1]}
    if with_runs:
        out["runs"] = list(values)
    return out


def time_repeats(f, warmup, repeats, steps, sync=None):
    """f warmup times untimed, then `repeats` timings of `steps` calls: seconds per repeat.
    sync (a GPU's torch.cuda.synchronize) is called before every clock read."""
    for _ in range(warmup):
        f()
    seconds = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            f()
        if sync:
            sync()
        seconds.append(time.perf_counter() - t0)
    return seconds


def throughput(seconds, images_per_repeat, flops_per_image, peak):
    st = stats_of([images_per_repeat / s for s in seconds])
    gflops = flops_per_image * st["median"] / 1e9
    return {"images_per_s": st, "gflops": gflops, "peak_share": gflops / peak if peak > 0 else 0.0}


def current_rss_mb():
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def openblas_core():
    """The kernel set the OpenBLAS that torch loaded chose for this CPU (openblas_get_corename,
    e.g. "SkylakeX", "Haswell", or "Prescott", its SSE3 fallback for a CPU model newer than its
    table), or None when no OpenBLAS is loaded. Call after importing torch."""
    import ctypes
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and ".so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            get = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_char_p
        return get().decode()
    return None


def sgemm_peak_gflops(n=2048, reps=5, device="cpu", dtype=None):
    """The best of `reps` n^3 torch.mm. On a GPU: in `dtype` (the precision's matmul dtype), one
    untimed call first (cuBLAS's set-up), torch.cuda.synchronize() before each clock read."""
    import torch
    if device == "cpu":
        a = torch.full((n, n), 0.5)
        b = torch.full((n, n), 0.25)
        best = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
        return best
    a = torch.full((n, n), 0.5, device=device, dtype=dtype)
    b = torch.full((n, n), 0.25, device=device, dtype=dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def set_precision(torch, device, precision):
    """The TF32 flags of --precision (on a GPU), and the autocast of the forward and loss: a
    function returning a fresh context manager for each use."""
    if device == "cuda":
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device, dtype=torch.bfloat16)
    return contextlib.nullcontext


# ---- the explanation methods' timing (the methods: bench/torch_explain.py) ---------------

def time_explain(model, m, repeats):
    import torch
    model.eval()
    model.requires_grad_(False)
    ex = Explainer(model, m["patch"])
    gen = torch.Generator().manual_seed(7)
    image = torch.randn(1, m["channels"], m["image"], m["image"], generator=gen)
    out = {}
    print(f"\nexplain, one {m['image']}x{m['image']} image (ms, from the image to the map)")
    print(f"{'method':<22} {'median':>9} {'min':>9} {'max':>9}")
    for name in METHODS:
        f = ex.method(name)
        grid = f(image)  # the warm-up call, and a check of the map's shape
        if tuple(grid.shape) != (1, ex.gh, ex.gw) or not bool(torch.isfinite(grid).all()):
            raise RuntimeError(f"explain {name}: map of shape {tuple(grid.shape)}, expected "
                               f"(1, {ex.gh}, {ex.gw}) and finite")
        ms = [1e3 * s for s in time_repeats(lambda: f(image), 0, repeats, 1)]
        out[name] = stats_of(ms, with_runs=False)
        print(f"{name:<22} {out[name]['median']:>9.1f} {out[name]['min']:>9.1f} "
              f"{out[name]['max']:>9.1f}")
    return out


# ---- main --------------------------------------------------------------------------------------

def print_row(what, j):
    s = j["images_per_s"]
    print(f"{what:<8} {s['median']:>10.1f} {s['min']:>10.1f} {s['max']:>10.1f} "
          f"{j['gflops']:>9.1f} {100 * j['peak_share']:>7.1f}%", flush=True)


def torch_major(torch):
    try:
        return int(torch.__version__.split(".")[0])
    except ValueError:
        return 0


def run(args):
    import torch
    import torch.nn.functional as F

    if args.compile and (torch_major(torch) < 2 or not hasattr(torch, "compile")):
        print(f"torch_bench: --compile needs PyTorch >= 2.0 (torch.compile); this is torch "
              f"{torch.__version__} ({torch.__file__})", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError(f"--device cuda: torch.cuda.is_available() is False (torch "
                           f"{torch.__version__}, built for CUDA {torch.version.cuda})")
    if args.precision == "tf32" and not cuda:
        print("torch_bench: warning: --precision tf32 does nothing on the CPU (it runs fp32)",
              file=sys.stderr)
    m = resolve_model(args.model, args.set)
    what = args.what
    policy = os.environ.get("OMP_WAIT_POLICY")
    if args.variant == "tuned" and (policy or "").upper() != "PASSIVE":
        print(f"torch_bench: warning: --variant tuned expects OMP_WAIT_POLICY=PASSIVE in the "
              f"environment before python starts; it is {policy!r}", file=sys.stderr)
    if args.variant == "default" and policy is not None:
        print(f"torch_bench: warning: --variant default expects no OMP_WAIT_POLICY; it is "
              f"{policy!r}", file=sys.stderr)
    torch.set_num_threads(args.threads)
    batch = args.batch or (CUDA_BATCH.get(args.model, m["batch"]) if cuda else m["batch"])
    steps = args.steps or m["steps"]
    warmup = args.warmup if args.warmup is not None else (10 if args.compile else 3)
    if args.compile and warmup == 0:
        print("torch_bench: warning: --compile with --warmup 0: the first timed repeat includes "
              "the compilation", file=sys.stderr)
    autocast = set_precision(torch, args.device, args.precision)
    sync = torch.cuda.synchronize if cuda else None

    baseline = current_rss_mb()  # just before the model (the batch comes after it, as in C++)
    torch.manual_seed(0)
    timm_info = None
    if args.timm:
        model, timm_info = build_timm_model(args.model)
    else:
        model = build_model(m)
    params = sum(p.numel() for p in model.parameters())
    fwd = forward_flops(m, model)
    if args.model in EXPECTED_PARAMS and not args.set and params != EXPECTED_PARAMS[args.model]:
        raise RuntimeError(f"{args.model}: {params} parameters{' (timm)' if args.timm else ''}, "
                           f"Vitrine's preset has {EXPECTED_PARAMS[args.model]}")
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(batch, m["channels"], m["image"], m["image"], generator=gen)
    labels = torch.randint(0, m["classes"], (batch,), generator=gen)
    gpu = None
    if cuda:  # the CUDA context comes after the baseline, as in vitrine-bench
        model.to(args.device)
        images, labels = images.to(args.device), labels.to(args.device)
        gpu = torch.cuda.get_device_name()
    net = model
    if args.compile:
        net = torch.compile(model, mode=None if args.compile_mode == "default" else
                            args.compile_mode)

    j = {"framework": "pytorch", "version": torch.__version__, "variant": args.variant,
         "omp_wait_policy": policy, "model": args.model, "sets": args.set,
         "arch": m.get("arch", "vit"), "batch": batch, "threads": args.threads,
         "device": args.device, "precision": args.precision, "compile": args.compile,
         "gpu": gpu, "cuda_version": torch.version.cuda if cuda else None,
         "params": params, "flops_per_image": {"forward": fwd, "train": 3 * fwd}}
    if args.compile:
        j["compile_mode"] = args.compile_mode
    if timm_info:
        j["timm"] = timm_info
    if timm_info:
        print(f"torch_bench: timm {timm_info['version']}'s own {args.model} (fused attention "
              f"{timm_info['fused_attn']})")
    print(f"torch_bench: {args.model} ({params} parameters), batch {batch}, {args.threads} "
          f"thread(s) (torch.get_num_threads() = {torch.get_num_threads()}), torch "
          f"{torch.__version__}, variant {args.variant} (OMP_WAIT_POLICY={policy})")
    if cuda or args.precision != "fp32" or args.compile:
        print(f"device {args.device}" + (f" ({gpu}, CUDA {torch.version.cuda})" if cuda else "")
              + f", precision {args.precision}"
              + (f", torch.compile mode {args.compile_mode}" if args.compile else "")
              + f", warm-up {warmup} steps")
    print(f"model GFLOPs per image: forward {fwd / 1e9:.4f}, training step {3 * fwd / 1e9:.4f}",
          flush=True)

    def first_call(part, f):
        """--compile: the first warm-up call (compilation) alone, timed."""
        if sync:
            sync()
        t0 = time.perf_counter()
        f()
        if sync:
            sync()
        seconds = time.perf_counter() - t0
        j.setdefault("first_call_seconds", {})[part] = seconds
        print(f"{part}: first call (compilation) {seconds:.1f} s", flush=True)

    results = {}
    if "train" in what:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(net(images), labels)
            loss.backward()
            opt.step()
        left = warmup
        if args.compile and warmup > 0:
            first_call("train", step)
            left -= 1
        results["train"] = (time_repeats(step, left, args.repeats or 7, steps, sync), 3 * fwd)
        peak_rss = peak_rss_mb()
        j["memory"] = {"baseline_rss_mb": baseline, "peak_rss_mb": peak_rss,
                       "train_peak_mb": peak_rss - baseline}
        if cuda:
            j["memory"]["device_peak_mb"] = torch.cuda.max_memory_allocated() / (1 << 20)
            j["memory"]["device_reserved_peak_mb"] = torch.cuda.max_memory_reserved() / (1 << 20)
        print(f"train: {batch * steps / min(results['train'][0]):.1f} images/s at best",
              flush=True)
        del opt
        model.zero_grad(set_to_none=True)
    if "infer" in what:
        model.eval()

        def infer():
            with torch.no_grad(), autocast():
                net(images)
        left = warmup
        if args.compile and warmup > 0:
            first_call("infer", infer)
            left -= 1
        results["infer"] = (time_repeats(infer, left, args.repeats or 7, steps, sync), fwd)
        print(f"infer: {batch * steps / min(results['infer'][0]):.1f} images/s at best",
              flush=True)
    if "explain" in what:
        j["explain"] = time_explain(model, m, args.repeats or 5)

    mm_dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    peak = sgemm_peak_gflops(device=args.device, dtype=mm_dtype)
    j["sgemm_peak_gflops"] = peak
    if cuda:
        print(f"\nmatmul peak (torch.mm 2048x2048 {str(mm_dtype).replace('torch.', '')}"
              f"{', TF32' if args.precision == 'tf32' else ''} on the GPU, best of 5): "
              f"{peak:.1f} GFLOP/s")
    else:
        print(f"\nsgemm peak (torch.mm 2048x2048, best of 5): {peak:.1f} GFLOP/s")
        j["gemm"] = {"openblas_core": openblas_core()}
        print(f"matrix products: OpenBLAS kernels {j['gemm']['openblas_core']}")
    if results:
        print(f"\n{'':<8} {'images/s':>10} {'min':>10} {'max':>10} {'GFLOP/s':>9} {'of peak':>8}")
    for part in ("train", "infer"):
        if part in results:
            seconds, flops = results[part]
            j[part] = throughput(seconds, batch * steps, flops, peak)
            print_row(part, j[part])
    if "memory" in j:
        mem = j["memory"]
        print(f"\ntraining peak memory: {mem['peak_rss_mb']:.1f} MiB resident "
              f"({mem['train_peak_mb']:.1f} MiB above the {baseline:.1f} MiB before the model)")
        if "device_peak_mb" in mem:
            print(f"training peak GPU memory: {mem['device_peak_mb']:.1f} MiB allocated "
                  f"(max_memory_allocated), {mem['device_reserved_peak_mb']:.1f} MiB reserved")
    # the schema's order (vitrine-bench's, then the GPU fields)
    order = ["framework", "version", "variant", "omp_wait_policy", "model", "sets", "arch", "batch", "threads",
             "device", "precision", "compile", "compile_mode", "timm", "gpu", "cuda_version",
             "params",
             "flops_per_image", "sgemm_peak_gflops", "gemm", "train", "infer", "memory",
             "first_call_seconds", "explain"]
    j = {k: j[k] for k in order if k in j}
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(folder, exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(j, indent=1) + "\n")
        os.replace(tmp, args.json)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(
        description="PyTorch's side of the CPU and GPU benchmarks: training and inference speed "
                    "of a model config (a ViT, a ResNet), its memory, and the explanation methods (the flags and "
                    "JSON of vitrine-bench).")
    p.add_argument("--model", default="fmnist", choices=sorted(MODELS),
                   help="the model config (default fmnist)")
    p.add_argument("--set", action="append", default=[], metavar="model.KEY=VALUE",
                   help="as vitrine-bench's: model.arch=resnet (vitrine-train's ResNet-8 on the "
                        "config's input), model.depth, model.width")
    p.add_argument("--batch", type=int, default=0,
                   help="images per step (default: fmnist 128, cifar10 64, the 224x224 models 8, "
                        "or 64 with --device cuda)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default 3; 10 with --compile, whose first call "
                        "compiles: raise it if the timings still drift)")
    p.add_argument("--repeats", type=int, default=0,
                   help="timed repeats (default 7; explain: 5)")
    p.add_argument("--steps", type=int, default=0,
                   help="steps per repeat (default 5, 2 for the 224x224 models)")
    p.add_argument("--what", default="train,infer",
                   help="train, infer, explain (comma-separated; default train,infer)")
    p.add_argument("--json", default="", metavar="FILE", help="also write the results here")
    p.add_argument("--variant", default="default", choices=["default", "tuned"],
                   help="tuned: run with OMP_WAIT_POLICY=PASSIVE in the environment")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the model and the batch live (default cpu)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                   help="fp32: float32 products; tf32: TF32 matmuls and convolutions (GPU); "
                        "bf16: forward and loss under torch.autocast bfloat16, float32 weights "
                        "and AdamW (default fp32)")
    p.add_argument("--compile", action="store_true",
                   help="wrap the model in torch.compile (PyTorch >= 2.0); give it more "
                        "--warmup")
    p.add_argument("--compile-mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune"],
                   help="torch.compile's mode (default default)")
    p.add_argument("--timm", action="store_true",
                   help="build timm's own model (timm.create_model(--model), fused attention as "
                        f"timm defaults) instead of this script's re-implementation; for "
                        f"{', '.join(TIMM_MODELS)}")
    p.add_argument("--openblas-core", action="store_true",
                   help="print the kernel set OpenBLAS chose for this CPU (as torch loads it), "
                        "then exit")
    p.add_argument("--self-check", action="store_true",
                   help="check the models' sizes and FLOPs and the explanation methods against "
                        "tests/fixtures/explain_parity.json, then exit")
    args = p.parse_args(argv)
    if args.self_check:
        from torch_bench_check import self_check  # the models and methods against fixtures
        return self_check()
    if args.openblas_core:
        import torch  # noqa: F401 (loads OpenBLAS)
        print(openblas_core() or "none")
        return 0
    for name in ("batch", "repeats", "steps"):
        if getattr(args, name) < 0:
            p.error(f"--{name} must be positive")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.warmup is not None and args.warmup < 0:
        p.error("--warmup must be >= 0")
    args.what = [w.strip() for w in args.what.split(",") if w.strip()]
    bad = [w for w in args.what if w not in ("train", "infer", "explain")]
    if bad or not args.what:
        p.error(f"--what: unknown part {', '.join(map(repr, bad)) or '(none)'} (expected train, "
                "infer or explain, comma-separated)")
    if "explain" in args.what and (args.device != "cpu" or args.precision != "fp32"
                                   or args.compile):
        p.error("--what explain runs on the CPU in float32 only: not with --device cuda, "
                "--precision tf32 or bf16, or --compile")
    if args.timm and ("explain" in args.what or args.set or args.model not in TIMM_MODELS):
        p.error(f"--timm builds timm's {' or '.join(TIMM_MODELS)} for train and infer (not with "
                "--what explain or --set)")
    try:
        return run(args)
    except (RuntimeError, OSError) as e:
        print(f"torch_bench: {e}", file=sys.stderr)
        return 1

if __name__ == "__main__":
    sys.exit(main())
