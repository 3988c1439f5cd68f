#!/usr/bin/env python3
"""How should Vitrine's idle OpenMP threads wait? Runs vitrine-bench with each waiting setting,
alternating, on a quiet machine and beside busy processes, and tabulates images/s
(docs/performance.md, "How Vitrine's threads wait").

    python3 bench/thread_wait.py                                  # fmnist, 2 threads, 3 rounds
    python3 bench/thread_wait.py --model cifar10 --loads 0,2 --rounds 3 --markdown /tmp/wait.md

Settings (--settings, comma-separated):
    vitrine     no variable: Vitrine's default (GOMP_SPINCOUNT=10000, backends/cpu/thread_wait.h)
    libgomp     GOMP_SPINCOUNT=300000: libgomp's own default, about 3 ms of spinning
    passive     OMP_WAIT_POLICY=PASSIVE: sleep at once
    active      OMP_WAIT_POLICY=ACTIVE: spin without end
    spin=N      GOMP_SPINCOUNT=N
For every load (--loads: busy processes beside the runs, as compare.py --load) and round, every
setting runs once, in order; the order of the settings is reversed in every other round. The table
gives, per setting and load, the median over rounds of vitrine-bench's median images/s, with the
min-max over rounds. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402 (the busy processes, the machine, the environment)

NAMED = {"vitrine": {}, "libgomp": {"GOMP_SPINCOUNT": "300000"},
         "passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "active": {"OMP_WAIT_POLICY": "ACTIVE"}}


def setting_env(name):
    if name in NAMED:
        return NAMED[name]
    if name.startswith("spin=") and name[5:].isdigit():
        return {"GOMP_SPINCOUNT": name[5:]}
    raise argparse.ArgumentTypeError(f"--settings: unknown setting {name!r} (expected vitrine, "
                                     "libgomp, passive, active or spin=N)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vitrine", default=os.path.join(compare.REPO, compare.DEFAULT_VITRINE))
    p.add_argument("--model", default="fmnist")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--loads", default="0,2", help="busy processes, comma-separated (default 0,2)")
    p.add_argument("--settings", default="vitrine,libgomp,passive,spin=1000")
    p.add_argument("--what", default="train,infer")
    p.add_argument("--repeats", type=int)
    p.add_argument("--out", default=os.path.join(compare.REPO, "bench", "results", "thread-wait"))
    p.add_argument("--markdown", metavar="FILE")
    args = p.parse_args(argv)
    try:
        settings = [s.strip() for s in args.settings.split(",") if s.strip()]
        envs = {s: setting_env(s) for s in settings}
        loads = [int(v) for v in args.loads.split(",") if v.strip()]
    except (argparse.ArgumentTypeError, ValueError) as e:
        p.error(str(e))
    if not os.access(args.vitrine, os.X_OK):
        print(f"thread_wait: vitrine-bench not found at {args.vitrine}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    parts = [w for w in args.what.split(",") if w in ("train", "infer")]
    results = {}  # (load, setting, part) -> [images/s per round]
    for load in loads:
        with compare.Load(load):
            for r in range(1, args.rounds + 1):
                order = settings if r % 2 else list(reversed(settings))
                for s in order:
                    path = os.path.join(args.out, f"{args.model}-load{load}-r{r}-{s}.json")
                    cmd = [args.vitrine, "--model", args.model, "--threads", str(args.threads),
                           "--what", ",".join(parts), "--json", path]
                    if args.repeats:
                        cmd += ["--repeats", str(args.repeats)]
                    env = {**compare.base_env(), **envs[s]}
                    rc = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
                    if rc != 0:
                        print(f"thread_wait: {' '.join(cmd)} failed ({rc})", file=sys.stderr)
                        return 1
                    with open(path, encoding="utf-8") as f:
                        j = json.load(f)
                    line = []
                    for part in parts:
                        v = j[part]["images_per_s"]["median"]
                        results.setdefault((load, s, part), []).append(v)
                        line.append(f"{part} {v:.0f}")
                    print(f"load {load} round {r} {s:>10}: {', '.join(line)} images/s "
                          f"({j.get('thread_wait', '?')})", flush=True)
    m = compare.machine()
    lines = [f"**Machine:** {m['cpu']} (CPU family {m.get('cpu_family', '?')}, model "
             f"{m.get('model', '?')}), {m['cores']} cores. **Command:** `python3 bench/"
             f"thread_wait.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             f"{args.model}, {args.threads} threads, images/s: median over {args.rounds} rounds "
             "(min-max)", ""]
    header = ["setting"] + [f"{part}, {'quiet' if load == 0 else f'load {load}'}"
                            for load in loads for part in parts]
    lines += ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for s in settings:
        cells = []
        for load in loads:
            for part in parts:
                v = results[(load, s, part)]
                cells.append(f"{compare.median(v):.0f} ({min(v):.0f}-{max(v):.0f})")
        env = " ".join(f"{k}={v}" for k, v in envs[s].items()) or "(none: Vitrine's default)"
        lines.append(f"| {s}: {env} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    compare.write(os.path.join(args.out, "summary.md"), text)
    if args.markdown:
        compare.write(args.markdown, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
