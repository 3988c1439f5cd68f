"""bench/torch_bench.py --self-check: its models' sizes and FLOPs, and its explanation methods
against the float64 references of tests/fixtures/explain_parity.json, so that the PyTorch side of
the benchmarks is known to compute what Vitrine computes."""
import json
import os

from torch_bench import EXPECTED_PARAMS, MODELS, build_model, forward_flops
from torch_explain import Explainer


def read_safetensors(path):
    import numpy as np
    import torch
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            a, b = info["data_offsets"]
            out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").copy()).reshape(
                info["shape"])
    return out


def self_check():
    """The models' sizes and FLOPs, and the eight methods against the float64 references of
    tests/fixtures/explain_parity.json (its timm case, image 0, whose target is the predicted
    class), on the fixture's weights."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    failures = []

    def check(name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failures.append(name)

    for name in EXPECTED_PARAMS:  # the ViTs (the ResNets' sizes: tests/models, against torchvision)
        n = sum(p.numel() for p in build_model(MODELS[name]).parameters())
        check(f"{name} parameters", n == EXPECTED_PARAMS[name], f"{n} (want "
              f"{EXPECTED_PARAMS[name]})")
    # fmnist: 2 49 16 128 (patch) + 6 (2 50 128 384 + 4 50 50 128 + 2 50 128 128 + 4 50 128 256)
    # + 2 128 10 (head)
    f = forward_flops(MODELS["fmnist"])
    check("fmnist forward FLOPs", f == 86526464, f"{f:.0f} (want 86526464)")
    # ViT-B/16, N = 197: 2 196 768 768 + 12 (2 197 768 2304 + 4 197 197 768 + 2 197 768 768
    # + 4 197 768 3072) + 2 768 1000, timm's 17.6 GMACs
    f = forward_flops(MODELS["vit_base_patch16_224"])
    check("vit_base_patch16_224 forward FLOPs", f == 35127656448, f"{f:.0f} (want 35127656448)")

    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                            "fixtures")
    with open(os.path.join(fixtures, "explain_parity.json"), encoding="utf-8") as fh:
        case = json.load(fh)["cases"]["timm"]
    cfg = case["config"]
    assert cfg["pool"] == "cls" and cfg["registers"] == 0 and cfg["qkv_bias"], cfg
    m = dict(image=cfg["image_size"], channels=cfg["channels"], patch=cfg["patch"], dim=cfg["dim"],
             depth=cfg["depth"], heads=cfg["heads"], mlp=cfg["mlp_dim"],
             classes=cfg["num_classes"])
    model = build_model(m)
    model.load_state_dict(read_safetensors(os.path.join(fixtures, case["file"])), strict=True)
    model.eval()
    model.requires_grad_(False)

    def dec(t):
        return torch.tensor(t["values"], dtype=torch.float64).reshape(t["shape"])

    def patch_mean(pixel_map):
        return F.avg_pool2d(pixel_map[:1, None], cfg["patch"])[0, 0]

    x = dec(case["input"]).float()[:1]
    ig = case["ig"]["black_gausslegendre"]
    sg = case["smoothgrad"]
    ex = Explainer(model, cfg["patch"], ig_steps=ig["steps"], black=ig["black"][0],
                   samples=sg["samples"], sigma=sg["sigma"], noise=dec(sg["noise"]).float()[0])
    wanted = [("attention", 0.9, case["attention"]["last_mean"]),
              ("rollout", 0.0, case["rollout"]["mean_0"]),
              ("rollout", 0.5, case["rollout"]["mean_0.5"]),
              ("grad-rollout", 0.0, case["grad_rollout"]["0"]),
              ("grad-rollout", 0.5, case["grad_rollout"]["0.5"]),
              ("chefer", 0.9, case["chefer"]), ("gradcam", 0.9, case["gradcam"]["last"]),
              ("saliency", 0.9, case["saliency"]["map"]), ("smoothgrad", 0.9, sg["map"]),
              ("integrated-gradients", 0.9, ig["map"])]
    for name, ratio, ref in wanted:
        ex.discard_ratio = ratio
        want = dec(ref)
        want = patch_mean(want) if want.dim() == 3 and want.shape[1:] == x.shape[2:] else want[0]
        got = ex.method(name)(x)[0].double()
        err = ((got - want).abs().max() / want.abs().max()).item()
        label = name + (f" (discard {ratio:g})" if "rollout" in name else "")
        check(f"{label} against the float64 fixture", err < 1e-5,
              f"largest difference {err:.1e} of the map's largest value")
    if failures:
        print(f"self-check: {len(failures)} FAILED: {', '.join(failures)}")
        return 1
    print("self-check: all passed")
    return 0


