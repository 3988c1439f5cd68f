"""bench/compare.py's summary: each run's JSON read back, the ratios per round and their medians
over the rounds against the goals, and the tables in text and Markdown. See compare.py's
docstring for what the tables show."""

import json
import os

from compare_defs import (EXPLAIN_GOAL, LOAD_COMMAND_TEXT, LOADED_SPEED_GOAL, MEMORY_GOAL,
                          METHODS, SHARE_GOALS, SIDE_TITLES, SIDES, SPEED_GOALS, Failure)

# ---- the summary -----------------------------------------------------------------------------

def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": median(values), "min": min(values), "max": max(values), "runs": values}


def get(j, *keys):
    for k in keys:
        if not isinstance(j, dict) or k not in j:
            return None
        j = j[k]
    return j


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def load_results(out, runs):
    """{run name: its JSON} for the runs whose file exists; errors for malformed files."""
    results = {}
    for run in runs:
        path = os.path.join(out, run["json"])
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            raise Failure(f"{path}: not readable as JSON ({e})")
        want = "vitrine" if run["side"] == "vitrine" else "pytorch"
        if j.get("framework") != want:
            raise Failure(f"{path}: \"framework\" is {j.get('framework')!r}, expected {want!r}")
        parts = ["explain"] if run["kind"] == "explain" else ["train", "infer"]
        for part in parts:
            if part not in j:
                raise Failure(f"{path}: no \"{part}\" section")
        results[run["name"]] = j
    return results


def summarize(manifest, results):
    runs = manifest["runs"]
    by = {(r["kind"], r["model"], r["threads"], r["round"], r["side"]): results.get(r["name"])
          for r in runs}
    speed_keys = []
    for r in runs:
        key = (r["model"], r["threads"])
        if r["kind"] == "speed" and key not in speed_keys:
            speed_keys.append(key)
    rounds = sorted({r["round"] for r in runs})
    configs = []
    for model, threads in speed_keys:
        per_round = []
        for rnd in rounds:
            js = {s: by.get(("speed", model, threads, rnd, s)) for s in SIDES}
            if all(js.values()):
                per_round.append(js)
        if not per_round:
            continue
        c = {"model": model, "threads": threads, "rounds": len(per_round), "sides": {},
             "ratios": {}}
        for s in SIDES:
            c["sides"][s] = {
                "version": per_round[0][s].get("version"),
                "params": per_round[0][s].get("params"),
                "batch": per_round[0][s].get("batch"),
                "openblas_core": get(per_round[0][s], "gemm", "openblas_core"),
                "sgemm_peak_gflops": spread([get(js[s], "sgemm_peak_gflops")
                                             for js in per_round]),
                "train_peak_mb": spread([get(js[s], "memory", "train_peak_mb")
                                         for js in per_round])}
            for part in ("train", "infer"):
                c["sides"][s][part] = {
                    "images_per_s": spread([get(js[s], part, "images_per_s", "median")
                                            for js in per_round]),
                    "gflops": spread([get(js[s], part, "gflops") for js in per_round]),
                    "peak_share": spread([get(js[s], part, "peak_share") for js in per_round])}
        for part in ("train", "infer"):
            for s in SIDES[1:]:
                c["ratios"][f"{part}_vs_{s}"] = spread([
                    ratio(get(js["vitrine"], part, "images_per_s", "median"),
                          get(js[s], part, "images_per_s", "median")) for js in per_round])
        for s in SIDES[1:]:
            c["ratios"][f"memory_vs_{s}"] = spread([
                ratio(get(js["vitrine"], "memory", "train_peak_mb"),
                      get(js[s], "memory", "train_peak_mb")) for js in per_round])
        params = {s: c["sides"][s]["params"] for s in SIDES}
        if len(set(params.values())) != 1:
            c["warning"] = f"parameter counts differ: {params}"
        configs.append(c)

    explain = None
    ex_runs = [r for r in runs if r["kind"] == "explain"]
    if ex_runs:
        model, threads = ex_runs[0]["model"], ex_runs[0]["threads"]
        per_round = []
        for rnd in rounds:
            js = {s: by.get(("explain", model, threads, rnd, s)) for s in SIDES}
            if all(js.values()):
                per_round.append(js)
        if per_round:
            explain = {"model": model, "threads": threads, "rounds": len(per_round),
                       "methods": {}}
            for m in METHODS:
                e = {"ms": {s: spread([get(js[s], "explain", m, "median") for js in per_round])
                            for s in SIDES}}
                for s in SIDES[1:]:
                    e[f"speedup_vs_{s}"] = spread([
                        ratio(get(js[s], "explain", m, "median"),
                              get(js["vitrine"], "explain", m, "median")) for js in per_round])
                explain["methods"][m] = e
    return {"configs": configs, "explain": explain}


def verdict(ratios, met):
    """'met' when the median ratio meets the goal against both PyTorch variants."""
    ok = {s: met(ratios[s]["median"]) for s in ratios if ratios[s] is not None}
    if not ok:
        return "n/a"
    if all(ok.values()):
        return "met"
    if any(ok.values()):
        return "met vs " + " and ".join(SIDE_TITLES[s] for s in ok if ok[s]) + " only"
    return "not met"


def fmt_ratio(r):
    if r is None:
        return "n/a"
    if len(r["runs"]) == 1:
        return f"{r['median']:.2f}"
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def fmt_num(r, digits=1, scale=1.0, suffix=""):
    if r is None:
        return "n/a"
    return f"{r['median'] * scale:.{digits}f}{suffix}"


def tables(summary, load=0):
    """The tables as (title, header, rows, notes), rendered as text or Markdown. Under load (load
    busy processes beside every run) the speed goal is LOADED_SPEED_GOAL and there is no share
    goal."""
    out = []
    for c in summary["configs"]:
        model, sides = c["model"], c["sides"]
        title = (f"{model}, batch {sides['vitrine']['batch']}, {c['threads']} thread"
                 f"{'s' if c['threads'] != 1 else ''}, {c['rounds']} round"
                 f"{'s' if c['rounds'] != 1 else ''} (medians over rounds)")
        header = ["", "Vitrine", "PyTorch tuned", "PyTorch default"]
        rows = []
        for part, name in (("train", "training"), ("infer", "inference")):
            rows.append([f"{name} images/s"] + [fmt_num(sides[s][part]["images_per_s"])
                                                 for s in SIDES])
            rows.append([f"{name} GFLOP/s (of sgemm peak)"] + [
                f"{fmt_num(sides[s][part]['gflops'])} "
                f"({fmt_num(sides[s][part]['peak_share'], 0, 100, '%')})" for s in SIDES])
        rows.append(["training peak MiB (above baseline)"] + [fmt_num(sides[s]["train_peak_mb"])
                                                               for s in SIDES])
        rows.append(["sgemm peak GFLOP/s"] + [fmt_num(sides[s]["sgemm_peak_gflops"])
                                              for s in SIDES])
        if any(sides[s].get("openblas_core") for s in SIDES):
            rows.append(["OpenBLAS kernels"] + [sides[s].get("openblas_core") or "n/a"
                                                for s in SIDES])
        out.append((title, header, rows, [c["warning"]] if "warning" in c else []))

        goal = LOADED_SPEED_GOAL if load else SPEED_GOALS.get(model)
        header2 = ["Vitrine / PyTorch", "vs tuned (min-max)", "vs default (min-max)", "goal",
                   "met"]
        rows2 = []
        for part, name in (("train", "training speed"), ("infer", "inference speed")):
            rs = {s: c["ratios"][f"{part}_vs_{s}"] for s in SIDES[1:]}
            rows2.append([name, fmt_ratio(rs["torch-tuned"]), fmt_ratio(rs["torch-default"]),
                          f">= {goal:g}" if goal else "none",
                          verdict(rs, lambda v, g=goal: v >= g) if goal else ""])
        share_goal = None if load else SHARE_GOALS.get(model)
        share = sides["vitrine"]["train"]["peak_share"]
        if share_goal and share:
            rows2.append(["Vitrine's training share of its sgemm peak",
                          f"{fmt_num(share, 0, 100, '%')} ({share['min'] * 100:.0f}-"
                          f"{share['max'] * 100:.0f}%)", "", f">= {share_goal * 100:.0f}%",
                          "met" if share["median"] >= share_goal else "not met"])
        rs = {s: c["ratios"][f"memory_vs_{s}"] for s in SIDES[1:]}
        rows2.append(["training peak memory", fmt_ratio(rs["torch-tuned"]),
                      fmt_ratio(rs["torch-default"]), f"<= {MEMORY_GOAL:g}",
                      verdict(rs, lambda v: v <= MEMORY_GOAL)])
        out.append((None, header2, rows2, []))

    e = summary["explain"]
    if e:
        title = (f"explanations, {e['model']}, one image, {e['threads']} thread"
                 f"{'s' if e['threads'] != 1 else ''}, {e['rounds']} round"
                 f"{'s' if e['rounds'] != 1 else ''} (ms from the image to the map; speed-up = "
                 "PyTorch ms / Vitrine ms)")
        header = ["method", "Vitrine ms", "PyTorch tuned ms", "PyTorch default ms",
                  "speed-up vs tuned (min-max)", "vs default (min-max)", "goal", "met"]
        rows = []
        for m in METHODS:
            x = e["methods"][m]
            rs = {s: x[f"speedup_vs_{s}"] for s in SIDES[1:]}
            rows.append([m] + [fmt_num(x["ms"][s]) for s in SIDES]
                        + [fmt_ratio(rs["torch-tuned"]), fmt_ratio(rs["torch-default"]),
                           f"> {EXPLAIN_GOAL:g}", verdict(rs, lambda v: v > EXPLAIN_GOAL)])
        out.append((title, header, rows, []))
    return out


def render_text(ts):
    lines = []
    for title, header, rows, notes in ts:
        if title:
            lines += ["", title]
        widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
        for r in [header] + rows:
            cells = [str(r[0]).ljust(widths[0])] + [str(v).rjust(w)
                                                    for v, w in zip(r[1:], widths[1:])]
            lines.append("  ".join(cells).rstrip())
        lines += [f"warning: {n}" for n in notes]
        lines.append("")
    return "\n".join(lines)


def openblas_line(o):
    if not o.get("coretype"):
        return f"**OpenBLAS:** kernels {o.get('installed') or 'unknown'} as installed, for all runs."
    installed = o.get("installed") or "unknown"
    # (the verdict recorded on the measuring machine: --summarize may run elsewhere)
    why = ", a fallback for this CPU" if installed != "unknown" and not o.get("current") else ""
    return (f"**OpenBLAS:** as installed it runs its {installed} kernels here{why}; the Vitrine "
            f"and PyTorch tuned runs get `OPENBLAS_CORETYPE={o['coretype']}`, PyTorch default "
            f"runs as installed.")


def render_markdown(ts, manifest):
    m = manifest
    mm = m["machine"]
    detail = ", ".join(f"{k.replace('_', ' ')} {mm[k]}" for k in
                       ("cpu_family", "model", "l1d_cache", "l2_cache") if mm.get(k))
    lines = [f"**Machine:** {mm['cpu']} ({detail or 'lscpu unavailable'}; AVX-512: "
             f"{'yes' if mm.get('avx512') else 'no'}), {mm['cores']} cores, {mm['system']}.",
             "",
             f"**Date:** {m['date']}. **Versions:** Vitrine {m['versions'].get('vitrine', '?')} "
             f"(commit {m.get('commit') or 'unknown'}), PyTorch {m['versions'].get('pytorch', '?')}"
             f" (`{m['torch_python']}`, Python {m.get('torch_python_version') or '?'}).",
             "",
             f"**Command:** `{m['command']}`",
             ""]
    if m.get("removed_env"):
        lines += [f"Threading variables removed from the children's environment: "
                  f"{', '.join(m['removed_env'])}.", ""]
    if m.get("openblas"):
        lines += [openblas_line(m["openblas"]), ""]
    lines += [load_line(m.get("load", 0)), ""]
    return "\n".join(lines + markdown_tables(ts))


def load_line(n):
    if not n:
        return "**Load:** none (nothing else ran)."
    return (f"**Load:** {n} busy process{'es' if n != 1 else ''} (`{LOAD_COMMAND_TEXT}`, not niced) "
            "ran beside every run, started before the first and stopped after the last; the "
            f"speed goal under load is >= {LOADED_SPEED_GOAL:g}.")


def markdown_tables(ts):
    """The tables (title, header, rows, notes) as Markdown lines (also bench/gpu_compare.py's)."""
    lines = []
    for title, header, rows, notes in ts:
        if title:
            lines += [f"**{title}**", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |")
        for r in rows:
            lines.append("| " + " | ".join(str(v) for v in r) + " |")
        lines += [""] + [f"Warning: {n}" for n in notes] + ([""] if notes else [])
    return lines
