#!/usr/bin/env python3
"""Vitrine against PyTorch on one GPU: ViT-S/16 and ViT-B/16 training (batch 64, 224x224,
AdamW, bf16) and inference, in images per second and model FLOP utilisation, every side on the
same GPU in the same run.

    python3 bench/gpu_compare.py                                # ViT-S and ViT-B, 3 rounds
    python3 bench/gpu_compare.py --models vit_base_patch16_224 --rounds 5 --markdown /tmp/gpu.md
    python3 bench/gpu_compare.py --dry-run                      # the commands only
    python3 bench/gpu_compare.py --summarize bench/results/gpu-2026-11-23-120000   # tables again
    python3 bench/gpu_compare.py --out bench/results/gpu-x --resume   # finish an interrupted run

Standard library only (it imports bench/compare.py's helpers); PyTorch's side runs under
--torch-python (default: the Python running this script; it needs torch with CUDA, 2.x for the
torch.compile sides, and timm for the timm sides).

The reference is timm's own model, what a PyTorch user trains: when --torch-python imports timm,
the default sides are vitrine, timm-bf16 and timm-compile. Without timm they are vitrine,
torch-bf16, torch-float32 and torch-compile, bench/torch_bench.py's re-implementation (its
attention unfused: about 0.7x of timm's training speed on an H200), with a note saying so;
--sides picks any of the six either way.

For every round and model it runs, back to back, each as its own process writing its JSON (and
its output, .log) into --out (the order reversed every other round, so that no side always runs
first or last):
    vitrine          vitrine-bench --device cuda --precision bf16 (bfloat16 matmul inputs, float32
                     accumulation, float32 master weights and AdamW)
    timm-bf16        torch_bench.py --timm --device cuda --precision bf16: timm.create_model(M)
                     with timm's defaults (fused attention: F.scaled_dot_product_attention),
                     eager under torch.autocast(bfloat16), float32 weights and default AdamW
    timm-compile     the same with --compile: torch.compile of timm's model under that autocast
    torch-bf16       torch_bench.py --device cuda --precision bf16: eager, forward and loss under
                     torch.autocast(bfloat16), float32 weights and AdamW (PyTorch's standard mixed
                     precision; no GradScaler for bf16)
    torch-float32    torch_bench.py --device cuda --precision tf32 (--float32 tf32, the default:
                     float32 tensors, TF32 tensor-core matmuls, torch.set_float32_matmul_precision
                     ("high"), the usual fast float32 on Ampere and Hopper; --float32 fp32: every
                     product in full float32, PyTorch's default for matmuls, several times slower
                     on an H100, so a weak reference)
    torch-compile    torch_bench.py --device cuda --precision bf16 --compile: torch.compile (mode
                     default, Inductor) of the model under the same autocast; the optimizer step
                     eager. Skipped, with a note, when --torch-python's torch is older than 2.0.
All with --model M --batch 64 --what train,infer --threads 2 --warmup 5 --repeats 7 --steps 10
(--batch, --threads, --warmup, --repeats, --steps); the compile side gets --compile-warmup (20)
warm-up steps instead, whose first call, timed apart ("first_call_seconds"), compiles: raise it
if its timings are not flat (so do both compile sides). --sides picks some of the six. A side that fails is reported, left
out of the later rounds for that model, and the other runs go on (exit status 1 at the end).

Per model the table gives, for each side, the medians over rounds (with min-max) of: images/s
(each run's own median over its repeats); the model FLOP/s (FLOPs counted analytically, bench.h:
a training step is 3 forwards; ViT-B/16 35.13 GFLOPs per forward) and the MFU, model FLOP/s over
--peak-tflops (default 989: the H100 SXM5's dense bfloat16 tensor-core peak, NVIDIA's datasheet,
1979 with sparsity; H100 PCIe 756, H100 NVL 835, H200 989, A100 312: pass the GPU's own. Every
side is measured against that same bf16 peak, the float32 side included); the share of the
matmul peak each run measured itself (one 2048^3 torch.mm / Vitrine matmul in its precision's
matmul dtype, best of 5: a small GEMM, below the datasheet); the training peak GPU memory
(torch.cuda.max_memory_allocated, and Vitrine's memory_stats peak: the bytes tensors hold, model
and batch included). Then the ratios, per round and their median and min-max: Vitrine's images/s
over each PyTorch side's, training and inference, and Vitrine's training peak memory over each
one's (so against timm eager and timm compile by default). The goal (the issue's): ViT-B/16
training at least timm eager bf16's images/s (median ratio >= 1.0; against the
re-implementation's eager bf16 when timm did not run), and close to torch.compile's (reported,
no threshold).

Timing: torch_bench.py synchronises before every clock read (steps queued back to back within a
repeat); vitrine-bench waits for the GPU at the end of every step. Both measure the model and
optimizer only, on one fixed random batch already on the GPU (no data loading).

Written into --out: the JSON, .log (and .err on failure) of every run, manifest.json (the plan,
the commands, the GPU, the versions), summary.json and summary.md (what --markdown FILE also
writes: the tables with the GPU, PyTorch's version, the commit and the command).

In pieces (a machine lent for 10-minute commands): --time-limit S starts no run after S seconds
(a torch.compile run of ViT-B can take minutes: leave room), tabulates what is done and exits 3;
the same command with --resume (and the same --out) skips the runs whose JSON is there.
Exit codes: 0 done, 1 a run failed or no results, 2 bad command line, 3 stopped by --time-limit.
"""

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (bench/compare.py: the CPU comparison's helpers)
import compare_tables as T  # noqa: E402  (its tables: spread, ratio, the formatters)
import torch_bench  # noqa: E402  (its model list; it imports torch only when it runs)

REPO = C.REPO
TORCH_BENCH = C.TORCH_BENCH
MODELS = ["vit_small_patch16_224", "vit_base_patch16_224"]
SIDES = ["vitrine", "timm-bf16", "timm-compile", "torch-bf16", "torch-float32", "torch-compile"]
TORCH_SIDES = SIDES[1:]
COMPILE_SIDES = ["timm-compile", "torch-compile"]
# The default sides: timm's own model when --torch-python can import timm, else the
# re-implementation (bench/torch_bench.py's, unfused attention).
TIMM_DEFAULT = ["vitrine", "timm-bf16", "timm-compile"]
REIMPL_DEFAULT = ["vitrine", "torch-bf16", "torch-float32", "torch-compile"]
# The goal is against the first of these sides that ran.
GOAL_MODEL, GOAL_SIDES, GOAL = "vit_base_patch16_224", ["timm-bf16", "torch-bf16"], 1.0
DEFAULT_PEAK_TFLOPS = 989.0  # H100 SXM5, dense bfloat16 tensor cores (datasheet; 1979 sparse)
# Dense bfloat16 peaks (TFLOP/s) of GPUs whose peak is not the default: a hint when the run's
# GPU name contains one of these and --peak-tflops was not given.
OTHER_PEAKS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H200 NVL": 835.0, "A100": 312.0}


def side_title(side, float32="tf32"):
    return {"vitrine": "Vitrine bf16", "timm-bf16": "timm eager bf16",
            "timm-compile": "timm compile bf16", "torch-bf16": "PyTorch eager bf16",
            "torch-float32": f"PyTorch eager {float32}",
            "torch-compile": "PyTorch compile bf16"}[side]


# ---- the plan --------------------------------------------------------------------------------

def command(args, side, model, json_path):
    common = ["--model", model, "--batch", str(args.batch), "--device", "cuda", "--what",
              "train,infer", "--threads", str(args.threads), "--repeats", str(args.repeats),
              "--steps", str(args.steps), "--json", json_path]
    warmup = ["--warmup", str(args.compile_warmup if side in COMPILE_SIDES else args.warmup)]
    if side == "vitrine":
        return [args.vitrine] + common + warmup + ["--precision", "bf16"]
    precision = args.float32 if side == "torch-float32" else "bf16"
    extra = (["--timm"] if side.startswith("timm") else []) + \
        (["--compile"] if side in COMPILE_SIDES else [])
    return [args.torch_python, TORCH_BENCH] + common + warmup + ["--precision", precision] + extra


def plan(args, sides):
    runs = []
    for r in range(1, args.rounds + 1):
        for model in args.models:
            for side in (sides if r % 2 else list(reversed(sides))):
                name = f"{model}-r{r}-{side}"
                runs.append({"kind": "speed", "round": r, "model": model, "side": side,
                             "name": name, "json": name + ".json", "env": {},
                             "command": command(args, side, model,
                                                os.path.join(args.out, name + ".json"))})
    return runs


# ---- the machine -----------------------------------------------------------------------------

PROBE = ("import json, sys, torch\n"
         "ok = torch.cuda.is_available()\n"
         "try:\n"
         "    import timm\n"
         "    tv = timm.__version__\n"
         "except Exception:\n"
         "    tv = None\n"
         "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,\n"
         "                  'cuda_available': ok, 'compile': hasattr(torch, 'compile'),\n"
         "                  'gpu': torch.cuda.get_device_name() if ok else None,\n"
         "                  'timm': tv, 'python': sys.version.split()[0]}))\n")


def torch_info(python):
    """What --torch-python's torch is: a dict, or a string saying why it could not be read."""
    try:
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.SubprocessError) as e:
        return f"could not run {python}: {e}"
    if r.returncode != 0:
        return f"{python} could not import torch: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"{python}: unexpected answer {r.stdout.strip()!r}"


def torch_major(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def nvidia_smi():
    """The GPUs as nvidia-smi sees them (name, driver, memory, power limit, max SM clock)."""
    fields = "name,driver_version,memory.total,power.limit,clocks.max.sm"
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    keys = fields.split(",")
    return [dict(zip(keys, [v.strip() for v in line.split(",")]))
            for line in r.stdout.strip().splitlines() if line.strip()]


# ---- the summary -----------------------------------------------------------------------------

def fmt_spread(r, digits=1, scale=1.0):
    """median (min-max), or the one value."""
    if r is None:
        return "n/a"
    med, lo, hi = (r[k] * scale for k in ("median", "min", "max"))
    if len(r["runs"]) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def summarize(manifest, results, peak_tflops):
    runs = manifest["runs"]
    sides = manifest["sides"]
    by = {(r["model"], r["round"], r["side"]): results.get(r["name"]) for r in runs}
    rounds = sorted({r["round"] for r in runs})
    models = []
    for r in runs:
        if r["model"] not in models:
            models.append(r["model"])
    configs = []
    for model in models:
        js = {s: [by.get((model, rnd, s)) for rnd in rounds] for s in sides}
        if not any(j for s in sides for j in js[s]):
            continue
        c = {"model": model, "sides": {}, "ratios": {}, "notes": []}
        for s in sides:
            present = [j for j in js[s] if j]
            if not present:
                continue
            first = present[0]
            x = {"rounds": len(present), "version": first.get("version"),
                 "params": first.get("params"), "batch": first.get("batch"),
                 "gpu": first.get("gpu"),
                 "matmul_peak_gflops": T.spread([T.get(j, "sgemm_peak_gflops") for j in present]),
                 "train_device_peak_mb": T.spread([T.get(j, "memory", "device_peak_mb")
                                                   for j in present]),
                 "first_call_seconds": {p: T.spread([T.get(j, "first_call_seconds", p)
                                                     for j in present])
                                        for p in ("train", "infer")}}
            for part in ("train", "infer"):
                gflops = [T.get(j, part, "gflops") for j in present]
                x[part] = {
                    "images_per_s": T.spread([T.get(j, part, "images_per_s", "median")
                                              for j in present]),
                    "gflops": T.spread(gflops),
                    "mfu": T.spread([g / (1e3 * peak_tflops) if g is not None else None
                                     for g in gflops]),
                    "peak_share": T.spread([T.get(j, part, "peak_share") for j in present])}
            c["sides"][s] = x
            if s != "vitrine":
                want = args_precision(manifest, s)
                for j in present:
                    if j.get("device") != "cuda" or j.get("precision") != want \
                            or bool(j.get("compile")) != (s in COMPILE_SIDES) \
                            or bool(j.get("timm")) != s.startswith("timm"):
                        c["notes"].append(
                            f"{s}: a run reports device {j.get('device')!r}, precision "
                            f"{j.get('precision')!r}, compile {j.get('compile')!r}, timm "
                            f"{j.get('timm')!r}")
                        break
        if "vitrine" in c["sides"]:
            for t in [s for s in TORCH_SIDES if s in c["sides"]]:
                pairs = [(v, o) for v, o in zip(js["vitrine"], js[t]) if v and o]
                for part in ("train", "infer"):
                    c["ratios"][f"{part}_vs_{t}"] = T.spread([
                        T.ratio(T.get(v, part, "images_per_s", "median"),
                                T.get(o, part, "images_per_s", "median")) for v, o in pairs])
                c["ratios"][f"memory_vs_{t}"] = T.spread([
                    T.ratio(T.get(v, "memory", "device_peak_mb"),
                            T.get(o, "memory", "device_peak_mb")) for v, o in pairs])
        params = {s: x["params"] for s, x in c["sides"].items()}
        if len(set(params.values())) > 1:
            c["notes"].append(f"parameter counts differ: {params}")
        batches = {s: x["batch"] for s, x in c["sides"].items()}
        if len(set(batches.values())) > 1:
            c["notes"].append(f"batch sizes differ: {batches}")
        c["batch"] = next(iter(batches.values()))
        c["rounds"] = max(x["rounds"] for x in c["sides"].values())
        if model == GOAL_MODEL:
            side = goal_side(c)
            r = c["ratios"].get(f"train_vs_{side}")
            c["goal"] = {"side": side, "ratio": r,
                         "met": None if r is None else r["median"] >= GOAL}
        configs.append(c)
    gpu = next((x["gpu"] for c in configs for x in c["sides"].values() if x.get("gpu")), None)
    return {"peak_tflops": peak_tflops, "gpu": gpu, "configs": configs}


def goal_side(c):
    """The side the goal is measured against: timm eager when it ran, else the
    re-implementation's eager bf16."""
    return next((s for s in GOAL_SIDES if f"train_vs_{s}" in c["ratios"]), GOAL_SIDES[-1])


def args_precision(manifest, side):
    return manifest.get("float32", "tf32") if side == "torch-float32" else "bf16"


def goal_lines(summary):
    lines = []
    for c in summary["configs"]:
        if c["model"] != GOAL_MODEL:
            continue
        g = c.get("goal") or {}
        eager = side_title(g.get("side") or GOAL_SIDES[-1])
        if g.get("ratio") is None:
            lines.append(f"Goal (ViT-B/16 training at least {eager}): n/a (no round with both "
                         f"Vitrine and {eager})")
        else:
            lines.append(f"Goal (ViT-B/16 training at least {eager}'s images/s): "
                         f"{'MET' if g['met'] else 'NOT MET'}, Vitrine / {eager} = "
                         f"{T.fmt_ratio(g['ratio'])}")
        for side in COMPILE_SIDES:
            rc = c["ratios"].get(f"train_vs_{side}")
            if rc is not None:
                lines.append(f"Against torch.compile (to approach): Vitrine / "
                             f"{side_title(side)} = {T.fmt_ratio(rc)} for training, "
                             f"{T.fmt_ratio(c['ratios'].get(f'infer_vs_{side}'))} for inference")
    return lines


def tables(summary, float32):
    peak = summary["peak_tflops"]
    out = []
    for c in summary["configs"]:
        sides = [s for s in SIDES if s in c["sides"]]
        x = c["sides"]
        title = (f"{c['model']}, batch {c['batch']}, {c['rounds']} round"
                 f"{'s' if c['rounds'] != 1 else ''} (medians over rounds, min-max; MFU = model "
                 f"FLOP/s / {peak:g} TFLOP/s)")
        header = [""] + [side_title(s, float32) for s in sides]
        rows = []
        for part, name in (("train", "training"), ("infer", "inference")):
            rows.append([f"{name} images/s"] + [fmt_spread(x[s][part]["images_per_s"])
                                                 for s in sides])
            rows.append([f"{name} model TFLOP/s (MFU)"] + [
                f"{T.fmt_num(x[s][part]['gflops'], 1, 1e-3)} "
                f"({T.fmt_num(x[s][part]['mfu'], 1, 100, '%')})" for s in sides])
            rows.append([f"{name}, share of the measured matmul peak"] + [
                T.fmt_num(x[s][part]["peak_share"], 0, 100, "%") for s in sides])
        rows.append(["training peak GPU memory MiB"] + [T.fmt_num(x[s]["train_device_peak_mb"], 0)
                                                        for s in sides])
        rows.append(["measured matmul peak TFLOP/s (2048^3)"] + [
            T.fmt_num(x[s]["matmul_peak_gflops"], 1, 1e-3) for s in sides])
        if any(x[s]["first_call_seconds"]["train"] for s in sides):
            rows.append(["first call s (compilation), train / infer"] + [
                f"{T.fmt_num(x[s]['first_call_seconds']['train'], 0)} / "
                f"{T.fmt_num(x[s]['first_call_seconds']['infer'], 0)}"
                if x[s]["first_call_seconds"]["train"] else "" for s in sides])
        runs_per_side = {s: x[s]["rounds"] for s in sides}
        notes = list(c["notes"])
        if len(set(runs_per_side.values())) > 1:
            notes.append(f"rounds per side differ: {runs_per_side}")
        out.append((title, header, rows, notes))

        others = [s for s in TORCH_SIDES if f"train_vs_{s}" in c["ratios"]]
        if not others:
            continue
        goal = c["model"] == GOAL_MODEL  # the goal's columns, on its model's table only
        header2 = ["Vitrine / PyTorch"] + [f"vs {side_title(s, float32)} (min-max)"
                                            for s in others] + (["goal", "met"] if goal else [])
        rows2 = []
        for part, name in (("train", "training speed"), ("infer", "inference speed")):
            row = [name] + [T.fmt_ratio(c["ratios"][f"{part}_vs_{s}"]) for s in others]
            if goal and part == "train":
                g = c.get("goal") or {}
                row += [f">= {GOAL:g} vs {side_title(g.get('side') or GOAL_SIDES[-1])}",
                        "n/a" if g.get("met") is None else ("met" if g["met"] else "not met")]
            elif goal:
                row += ["", ""]
            rows2.append(row)
        rows2.append(["training peak GPU memory"] + [T.fmt_ratio(c["ratios"][f"memory_vs_{s}"])
                                                     for s in others]
                     + (["", ""] if goal else []))
        out.append((None, header2, rows2, []))
    return out


def peak_hint(summary, peak_given):
    gpu = summary.get("gpu") or ""
    if peak_given:
        return None
    for key, value in OTHER_PEAKS.items():
        if key in gpu:
            return (f"note: the GPU is {gpu}: its dense bf16 peak is about {value:g} TFLOP/s, not "
                    f"{summary['peak_tflops']:g} (an H100 SXM's); pass --peak-tflops {value:g}")
    return None


def render_markdown(ts, manifest, summary):
    m = manifest
    info = m.get("torch") if isinstance(m.get("torch"), dict) else {}
    smi = (m.get("nvidia_smi") or [{}])[0]
    gpu = summary.get("gpu") or smi.get("name") or info.get("gpu") or "unknown GPU"
    extra = ", ".join(f"{k} {smi[k]}" for k in ("driver_version", "memory.total", "power.limit",
                                                 "clocks.max.sm") if smi.get(k))
    versions = {}
    for c in summary["configs"]:
        for s, x in c["sides"].items():
            versions.setdefault("vitrine" if s == "vitrine" else "pytorch", x.get("version"))
    lines = [f"**GPU:** {gpu}{f' ({extra})' if extra else ''}; host {m['machine']['cpu']}, "
             f"{m['machine']['cores']} cores, {m['machine']['system']}.",
             "",
             f"**Date:** {m['date']}. **Versions:** Vitrine {versions.get('vitrine') or '?'} "
             f"(commit {m.get('commit') or 'unknown'}), PyTorch "
             f"{versions.get('pytorch') or info.get('torch') or '?'} (CUDA "
             f"{info.get('cuda') or '?'}; `{m['torch_python']}`, Python "
             f"{info.get('python') or '?'}).",
             "",
             f"**Peak for the MFU:** {summary['peak_tflops']:g} TFLOP/s, dense bfloat16 "
             f"(--peak-tflops; {DEFAULT_PEAK_TFLOPS:g} is the H100 SXM's datasheet value), for "
             "every side.",
             "",
             f"**Command:** `{m['command']}`",
             ""]
    for n in m.get("notes", []):
        lines += [f"Note: {n}", ""]
    for f in m.get("failures", []):
        lines += [f"Failed: {f['name']} ({f['why']})", ""]
    lines += T.markdown_tables(ts)
    for g in goal_lines(summary):
        lines += [f"**{g}**", ""]
    return "\n".join(lines).rstrip("\n")


def report(out, manifest, results, markdown, peak_tflops, peak_given):
    summary = summarize(manifest, results, peak_tflops)
    if not summary["configs"]:
        raise C.Failure(f"{out}: no results to summarise")
    ts = tables(summary, manifest.get("float32", "tf32"))
    versions = [x["version"] for c in summary["configs"] for s, x in c["sides"].items()
                if s != "vitrine"]
    print(f"\nGPU: {summary.get('gpu') or '?'}; PyTorch {versions[0] if versions else '?'}")
    print(C.render_text(ts))
    for line in goal_lines(summary):
        print(line)
    hint = peak_hint(summary, peak_given)
    if hint:
        print(hint)
    md = render_markdown(ts, manifest, summary) + "\n"
    C.write(os.path.join(out, "summary.json"), json.dumps(summary, indent=1) + "\n")
    C.write(os.path.join(out, "summary.md"), md)
    print(f"results in {out} (summary.md, summary.json, manifest.json)")
    if markdown:
        C.write(markdown, md)
        print(f"Markdown tables written to {markdown}")


# ---- running ---------------------------------------------------------------------------------

def brief(j):
    parts = [f"{p} {j[p]['images_per_s']['median']:.1f} images/s" for p in ("train", "infer")
             if p in j]
    mb = T.get(j, "memory", "device_peak_mb")
    if mb is not None:
        parts.append(f"train peak {mb:.0f} MiB on the GPU")
    first = j.get("first_call_seconds")
    if first:
        parts.append("first calls " + " / ".join(f"{v:.0f} s" for v in first.values()))
    return ", ".join(parts)


def load_one(out, run):
    """The run's JSON if its file is there and complete, else None."""
    try:
        return C.load_results(out, [run]).get(run["name"])
    except C.Failure:
        return None


def run_all(args, manifest, runs):
    """Runs the plan; returns ({(model, side): round of its failure}, runs left by
    --time-limit)."""
    failed = {}
    total = time.monotonic()
    for i, run in enumerate(runs, 1):
        label = f"[{i}/{len(runs)}] round {run['round']}, {run['model']}, {run['side']}"
        if args.resume and load_one(args.out, run) is not None:
            print(f"{label}: done before (--resume)", flush=True)
            continue
        if args.time_limit and time.monotonic() - total > args.time_limit:
            left = len(runs) - i + 1
            print(f"gpu_compare: --time-limit {args.time_limit:g} s reached; {left} run(s) not "
                  f"started (the same command with --resume continues)", flush=True)
            return failed, left
        key = (run["model"], run["side"])
        if key in failed:
            print(f"{label}: skipped (failed in round {failed[key]})", flush=True)
            continue
        print(f"{label} ...", end=" ", flush=True)
        try:
            seconds = C.execute(run, args.out)
            j = C.load_results(args.out, [run])[run["name"]]
        except C.Failure as e:
            print("FAILED", flush=True)
            print(f"gpu_compare: {e}", file=sys.stderr, flush=True)
            failed[key] = run["round"]
            manifest["failures"].append({"name": run["name"],
                                         "why": str(e).split("\n", 1)[0]})
            C.write(os.path.join(args.out, "manifest.json"), json.dumps(manifest, indent=1) + "\n")
            continue
        print(f"{seconds:.0f} s: {brief(j)}", flush=True)
    print(f"gpu_compare: {len(runs)} runs in {(time.monotonic() - total) / 60:.1f} min")
    return failed, 0


# ---- main --------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(
        description="Vitrine against PyTorch (timm's own ViT eager bf16 and torch.compile, or "
                    "a re-implementation: eager bf16, eager float32, torch.compile bf16) on one "
                    "GPU: ViT training and inference, images/s and MFU.")
    p.add_argument("--vitrine", default=C.DEFAULT_VITRINE,
                   help=f"the vitrine-bench binary, built with CUDA (default {C.DEFAULT_VITRINE}, "
                        "from the repository root)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated (default {','.join(MODELS)})")
    p.add_argument("--sides", default=None,
                   help=f"which runs, comma-separated, of {','.join(SIDES)} (default "
                        f"{','.join(TIMM_DEFAULT)} when --torch-python imports timm, else "
                        f"{','.join(REIMPL_DEFAULT)})")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the runs (default 3)")
    p.add_argument("--batch", type=int, default=64, help="images per step (default 64)")
    p.add_argument("--float32", default="tf32", choices=["tf32", "fp32"],
                   help="the precision of the torch-float32 side (default tf32)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of every run (default 2)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps (default 5)")
    p.add_argument("--compile-warmup", type=int, default=20,
                   help="the torch.compile side's warm-up steps, compilation included (default "
                        "20)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats (default 7)")
    p.add_argument("--steps", type=int, default=10, help="steps per repeat (default 10)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help=f"the GPU's peak for the MFU (default {DEFAULT_PEAK_TFLOPS:g}: H100 SXM "
                        "dense bf16; H100 PCIe 756)")
    p.add_argument("--out", help="results folder (default bench/results/gpu-<date>)")
    p.add_argument("--resume", action="store_true",
                   help="with --out of an interrupted run and the same flags: skip the runs whose "
                        "JSON is there")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="start no run after this many seconds: tabulate what is done and exit 3 "
                        "(then the same command with --resume continues)")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables as Markdown here")
    p.add_argument("--torch-python", default=sys.executable,
                   help=f"the Python with torch (default this one, {sys.executable})")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    p.add_argument("--summarize", metavar="DIR",
                   help="run nothing: the tables again from a results folder of an earlier run")
    args = p.parse_args(argv)
    try:
        args.models = C.csv(args.models, str, "--models")
        sides = C.csv(args.sides, str, "--sides") if args.sides is not None else None
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    bad = [m for m in args.models if m not in torch_bench.MODELS]
    if bad:
        p.error(f"--models: unknown {', '.join(bad)} (expected some of "
                f"{', '.join(sorted(torch_bench.MODELS))})")
    if sides is not None:
        bad = [s for s in sides if s not in SIDES]
        if bad:
            p.error(f"--sides: unknown {', '.join(bad)} (expected some of {', '.join(SIDES)})")
        sides = [s for s in SIDES if s in sides]
    timm_models = [m for m in args.models if m not in torch_bench.TIMM_MODELS]
    if timm_models and any(s.startswith("timm") for s in (sides or [])):
        p.error(f"--models: timm's side builds {', '.join(torch_bench.TIMM_MODELS)} only, not "
                f"{', '.join(timm_models)}")
    for flag in ("rounds", "batch", "threads", "repeats", "steps"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    for flag in ("warmup", "compile_warmup"):
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must be >= 0")
    if args.time_limit is not None and args.time_limit <= 0:
        p.error("--time-limit must be > 0")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        p.error("--peak-tflops must be > 0")
    if args.resume and not args.out:
        p.error("--resume needs the --out of the run to finish")
    peak_given = args.peak_tflops is not None

    try:
        if args.summarize:
            out = args.summarize
            path = os.path.join(out, "manifest.json")
            try:
                with open(path, encoding="utf-8") as f:
                    manifest = json.load(f)
            except (OSError, ValueError) as e:
                raise C.Failure(f"{path}: cannot read the manifest of a gpu_compare.py run ({e})")
            if "sides" not in manifest:
                raise C.Failure(f"{path}: not a gpu_compare.py manifest (compare.py's? use "
                                "bench/compare.py --summarize)")
            peak = args.peak_tflops or manifest.get("peak_tflops") or DEFAULT_PEAK_TFLOPS
            report(out, manifest, C.load_results(out, manifest["runs"]), args.markdown, peak,
                   peak_given or manifest.get("peak_given", False))
            return 0

        if not os.path.isabs(args.vitrine) and not os.path.exists(args.vitrine):
            args.vitrine = os.path.join(REPO, args.vitrine)
        args.vitrine = os.path.abspath(args.vitrine)
        notes = []
        info = torch_info(args.torch_python)
        has_timm = isinstance(info, dict) and bool(info.get("timm"))
        if sides is None:
            sides = list(TIMM_DEFAULT if has_timm else REIMPL_DEFAULT)
            if sides == REIMPL_DEFAULT:
                notes.append(f"timm is not importable in {args.torch_python}: the PyTorch sides "
                             "are bench/torch_bench.py's re-implementation (unfused attention, "
                             "about 0.7x of a timm user's speed), not timm's own model; install "
                             "timm for the reference (--sides picks sides)")
            if any(m not in torch_bench.TIMM_MODELS for m in args.models):
                sides = list(REIMPL_DEFAULT)
        timm_sides = [s for s in sides if s.startswith("timm")]
        if timm_sides and not has_timm:
            msg = (f"{', '.join(timm_sides)}: timm is not importable in {args.torch_python} "
                   "(pip install timm, or --sides without the timm sides)")
            if not args.dry_run:
                raise C.Failure(msg)
            notes.append(msg)
        if isinstance(info, str):
            if not args.dry_run and any(s != "vitrine" for s in sides):
                raise C.Failure(f"{info}: PyTorch's side needs a Python with torch "
                                "(--torch-python)")
            notes.append(f"{info} (the commands assume torch >= 2.0)")
        else:
            if not info.get("cuda_available"):
                msg = (f"torch {info['torch']} in {args.torch_python} sees no GPU "
                       f"(torch.cuda.is_available() is False; built for CUDA {info['cuda']})")
                if not args.dry_run:
                    raise C.Failure(msg)
                notes.append(msg)
            old = [s for s in COMPILE_SIDES if s in sides]
            if old and (torch_major(info["torch"]) < 2 or not info.get("compile")):
                sides = [s for s in sides if s not in old]
                notes.append(f"torch.compile side(s) {', '.join(old)} skipped: torch "
                             f"{info['torch']} (in {args.torch_python}) is older than 2.0")
        if not sides:
            raise C.Failure("no side left to run")
        if not args.dry_run and "vitrine" in sides and (
                not os.path.isfile(args.vitrine) or not os.access(args.vitrine, os.X_OK)):
            raise C.Failure(f"vitrine-bench not found at {args.vitrine}: build it with CUDA "
                            "(cmake -DVITRINE_CUDA=ON; cmake --build BUILD --target "
                            "vitrine-bench) and pass --vitrine BUILD/tools/bench/vitrine-bench")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        args.out = os.path.abspath(args.out or os.path.join(REPO, "bench", "results",
                                                            f"gpu-{stamp}"))
        runs = plan(args, sides)
        for n in notes:
            print(f"gpu_compare: {n}", file=sys.stderr, flush=True)
        if args.dry_run:
            try:
                for run in runs:
                    print(C.shell_line(run))
            except BrokenPipeError:  # | head
                sys.stderr.close()
            return 0

        manifest = {
            "command": " ".join(shlex.quote(a) for a in
                                ["python3",
                                 os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())]
                                + (sys.argv[1:] if argv is None else list(argv))),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
            "machine": C.machine(), "nvidia_smi": nvidia_smi(), "commit": C.git_commit(),
            "torch_python": args.torch_python, "torch": info,
            "peak_tflops": args.peak_tflops or DEFAULT_PEAK_TFLOPS, "peak_given": peak_given,
            "float32": args.float32, "batch": args.batch, "models": args.models, "sides": sides,
            "rounds": args.rounds, "notes": notes, "failures": [], "runs": runs}
        path = os.path.join(args.out, "manifest.json")
        if args.resume and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    old = json.load(f)
            except (OSError, ValueError) as e:
                raise C.Failure(f"{path}: cannot read the manifest to resume ({e})")
            if [(r["name"], r["command"]) for r in old.get("runs", [])] != \
                    [(r["name"], r["command"]) for r in runs]:
                print(f"gpu_compare: warning: the plan differs from {path}'s (pass the same flags "
                      "to --resume); running this one", file=sys.stderr)
            manifest["date"] = old.get("date", manifest["date"])
            manifest["resumed"] = old.get("resumed", []) + [
                datetime.datetime.now().astimezone().isoformat(timespec="minutes")]
        os.makedirs(args.out, exist_ok=True)
        C.write(path, json.dumps(manifest, indent=1) + "\n")
        print(f"gpu_compare: {len(runs)} runs into {args.out}", flush=True)
        failed, left = run_all(args, manifest, runs)
        C.write(path, json.dumps(manifest, indent=1) + "\n")
        report(args.out, manifest, C.load_results(args.out, runs), args.markdown,
               manifest["peak_tflops"], peak_given)
        if left:
            print(f"gpu_compare: incomplete, {left} run(s) left: run the same command with "
                  f"--resume (--out {args.out})", file=sys.stderr)
            return 3
        if failed:
            print(f"gpu_compare: {len(failed)} side(s) failed: "
                  f"{', '.join(f'{m} {s}' for m, s in failed)} (their logs are in {args.out})",
                  file=sys.stderr)
            return 1
        return 0
    except C.Failure as e:
        print(f"\ngpu_compare: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ngpu_compare: interrupted; the finished runs are in the results folder "
              "(--out DIR --resume finishes them, --summarize DIR tabulates them)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
