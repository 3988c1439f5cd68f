#!/usr/bin/env python3
"""Vitrine against PyTorch on the CPU (issues 8 and 25): runs vitrine-bench and bench/torch_bench.py side
by side, several rounds, and prints the ratios against the goals.

    python3 bench/compare.py                          # the ViTs and the CNNs; 2 then 1 thread
    python3 bench/compare.py --models fmnist-resnet8,resnet18 --threads 2   # the CNN rows
    python3 bench/compare.py --models fmnist --threads 2 --rounds 5
    python3 bench/compare.py --explain --markdown /tmp/compare.md
    python3 bench/compare.py --models fmnist,cifar10 --threads 2 --load 2   # beside 2 busy loops
    python3 bench/compare.py --summarize bench/results/compare-2026-11-23-2250   # tables again

Standard library only: runs under any python3 (Debian's /usr/bin/python3 included); PyTorch's side
runs under --torch-python (default /usr/bin/python3, which has torch).

For every round, model and thread count it runs, back to back, three separate processes, each
writing its JSON (and its output, .log) into --out:
    vitrine         vitrine-bench --model M --threads T --what train,infer --json ...
    torch-tuned     torch_bench.py --variant tuned ..., with OMP_WAIT_POLICY=PASSIVE
    torch-default   torch_bench.py --variant default ..., without OMP_WAIT_POLICY
With --explain, each round then runs the three again with --what explain on --explain-model
(default vit_small_patch16_224) at the first thread count. Every child gets this environment less
the threading variables (OMP_*, GOMP_*, KMP_*, OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
MKL_NUM_THREADS) and OPENBLAS_CORETYPE: each program sets its threads itself from --threads, and
only the tuned run gets OMP_WAIT_POLICY. --warmup, --repeats and --steps, when given, are passed
to all three.

OpenBLAS (which both link) picks its kernels by CPU model when it is loaded, and on a model newer
than its table falls back to old ones: Debian 12's OpenBLAS 0.3.21 runs its SSE3 "Prescott"
kernels on an Intel Xeon of 2024 (Emerald Rapids), and PyTorch's matmuls run at about a third of
their speed. PyTorch at its best then needs OPENBLAS_CORETYPE. --openblas-coretype auto (the
default) asks torch_bench.py which kernels OpenBLAS chose; when they are not made for the CPU's
vector width (on a CPU with AVX-512 only SkylakeX, Cooperlake and SapphireRapids are: Haswell on an
AMD Zen 5 is a fallback), the tuned run and Vitrine's get OPENBLAS_CORETYPE=SkylakeX (AVX-512) or
Haswell (AVX2), and the default run keeps what OpenBLAS chose. Every run's JSON records the
kernels it ran (gemm.openblas_core), and the tables show them.

Per round: Vitrine's images/s (the median over its repeats) divided by each PyTorch variant's, for
training and inference; Vitrine's train_peak_mb divided by PyTorch's; per explanation method the
speed-up, PyTorch ms / Vitrine ms. The table gives the median of each ratio over the rounds and
its min-max, each side's images/s, GFLOP/s and share of its own sgemm peak (medians over rounds),
and the goals of issue 25: speed ratio >= 2.0 (fmnist), >= 1.5 (cifar10), >= 1.25
(vit_small_patch16_224) for training and for inference on a quiet machine, >= 1.0 under --load;
Vitrine's training at >= 55%, 60%, 70% of its sgemm peak (quiet); memory ratio <= 1.0; every
explanation speed-up > 1. A goal is "met" when the median ratio meets it against both PyTorch
variants.

--load N runs N busy processes (python3 -c 'while True: pass', not niced) beside every run: started
before the first, stopped after the last, the same for every program.

Written into --out: the JSON and log of every run, manifest.json (the plan, the commands, the
machine), summary.json (the ratios) and summary.md (what --markdown FILE also writes: the tables
with the machine, the date, the versions and the command).
Exit codes: 0 done, 1 a run failed or no results, 2 bad command line.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

from compare_defs import (DEFAULT_VITRINE, LOAD_CODE, LOADED_SPEED_GOAL, METHODS, MODEL_FLAGS,
                          MODELS, REMOVED_VARS, REPO, SIDES, THREAD_PREFIXES, TORCH_BENCH, Failure,
                          openblas_current)
# (median: bench/thread_wait.py reads it as compare.median)
from compare_tables import (load_line, load_results, median, openblas_line,  # noqa: F401
                            render_markdown, render_text, summarize, tables)


# ---- the plan --------------------------------------------------------------------------------

def base_env():
    """This environment without the threading variables and OPENBLAS_CORETYPE."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(THREAD_PREFIXES) and k not in REMOVED_VARS}


def child_env(run):
    """base_env() and the run's own variables (PASSIVE waiting for the tuned run, and
    OPENBLAS_CORETYPE when OpenBLAS would run fallback kernels)."""
    return {**base_env(), **run["env"]}


def removed_env_vars():
    return sorted(k for k in os.environ if k.startswith(THREAD_PREFIXES) or k in REMOVED_VARS)


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_plan(args):
    """Which kernels OpenBLAS chooses here as installed, and the OPENBLAS_CORETYPE (or None) that
    the Vitrine and PyTorch tuned runs get: {"installed": name, "coretype": name or None,
    "current": whether the installed kernels are made for this CPU's vector width}."""
    installed = None
    if os.access(args.torch_python, os.X_OK):
        try:
            probe = subprocess.run([args.torch_python, TORCH_BENCH, "--openblas-core"],
                                   capture_output=True, text=True, timeout=120, env=base_env(),
                                   cwd=REPO)
            if probe.returncode == 0 and probe.stdout.strip():
                installed = probe.stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError):
            pass
    choice = args.openblas_coretype
    flags = cpu_flags()
    current = installed is not None and openblas_current(installed, flags)
    if choice == "none":
        coretype = None
    elif choice != "auto":
        coretype = choice
    elif installed is None or installed.lower() == "none" or current:
        coretype = None
    else:
        coretype = ("SkylakeX" if "avx512f" in flags else
                    "Haswell" if {"avx2", "fma"} <= flags else None)
    return {"installed": installed, "coretype": coretype, "current": current}


def command(args, side, model, threads, what, json_path):
    common = MODEL_FLAGS.get(model, ["--model", model]) + [
        "--threads", str(threads), "--what", what, "--json", json_path]
    for flag in ("warmup", "repeats", "steps"):
        value = getattr(args, flag)
        if value is not None:
            common += [f"--{flag}", str(value)]
    if side == "vitrine":
        return [args.vitrine] + common
    variant = "tuned" if side == "torch-tuned" else "default"
    return [args.torch_python, TORCH_BENCH] + common + ["--variant", variant]


def plan(args, openblas=None):
    runs = []
    for r in range(1, args.rounds + 1):
        for model in args.models:
            for threads in args.threads:
                for side in SIDES:
                    runs.append({"kind": "speed", "round": r, "model": model, "threads": threads,
                                 "side": side, "name": f"{model}-t{threads}-r{r}-{side}",
                                 "what": "train,infer"})
        if args.explain:
            for side in SIDES:
                model, threads = args.explain_model, args.threads[0]
                runs.append({"kind": "explain", "round": r, "model": model, "threads": threads,
                             "side": side, "name": f"explain-{model}-t{threads}-r{r}-{side}",
                             "what": "explain"})
    for run in runs:
        run["json"] = run["name"] + ".json"
        run["command"] = command(args, run["side"], run["model"], run["threads"], run["what"],
                                 os.path.join(args.out, run["json"]))
        run["env"] = {"OMP_WAIT_POLICY": "PASSIVE"} if run["side"] == "torch-tuned" else {}
        if openblas and openblas.get("coretype") and run["side"] != "torch-default":
            run["env"]["OPENBLAS_CORETYPE"] = openblas["coretype"]
    return runs


def shell_line(run):
    env = " ".join(f"{k}={v}" for k, v in run["env"].items())
    return (env + " " if env else "") + " ".join(shlex.quote(c) for c in run["command"])


# ---- running ---------------------------------------------------------------------------------

class Load:
    """`with Load(n):` n busy processes (a Python busy loop each, not niced, in their own process
    group) for the duration of the block: the same load beside every program, started before the
    first run and stopped, killed if need be, after the last or on any failure."""

    def __init__(self, n):
        self.n, self.procs = n, []

    def __enter__(self):
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", LOAD_CODE], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        if self.procs:
            time.sleep(1.0)  # let them reach their loops
            dead = [p.pid for p in self.procs if p.poll() is not None]
            if dead:
                self.__exit__(None, None, None)
                raise Failure(f"--load: busy process(es) {dead} exited at once")
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        return False


def tail(path, lines=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def execute(run, out):
    log = os.path.join(out, run["name"] + ".log")
    err = os.path.join(out, run["name"] + ".err")
    t0 = time.monotonic()
    with open(log, "w") as fo, open(err, "w") as fe:
        try:
            rc = subprocess.call(run["command"], stdout=fo, stderr=fe, env=child_env(run),
                                 cwd=REPO)
        except OSError as e:
            raise Failure(f"could not start {run['name']}: {e}\n  command: {shell_line(run)}")
    seconds = time.monotonic() - t0
    if rc == 0 and os.path.getsize(err) == 0:
        os.remove(err)
    path = os.path.join(out, run["json"])
    if rc != 0 or not os.path.isfile(path):
        why = f"exit status {rc}" if rc != 0 else f"exit status 0 but no {path}"
        raise Failure(f"{run['name']} failed ({why}) after {seconds:.0f} s\n"
                      f"  command: {shell_line(run)}\n"
                      f"  its stderr ({err}):\n{indent(tail(err)) or '    (empty)'}"
                      f"  the end of its stdout ({log}):\n"
                      f"{(indent(tail(log, 15)) or '    (empty)').rstrip()}")
    return seconds


def indent(text, prefix="    "):
    return "".join(prefix + line + "\n" for line in text.rstrip("\n").split("\n")) if text else ""


def brief(run, j):
    if run["kind"] == "explain":
        e = j.get("explain", {})
        return ", ".join(f"{m} {e[m]['median']:.0f} ms" for m in METHODS if m in e)
    parts = []
    for part in ("train", "infer"):
        if part in j:
            parts.append(f"{part} {j[part]['images_per_s']['median']:.1f} images/s")
    if "memory" in j:
        parts.append(f"train peak {j['memory']['train_peak_mb']:.0f} MiB")
    return ", ".join(parts)


# ---- the machine -----------------------------------------------------------------------------

def machine():
    cpu, cores = platform.processor() or "unknown CPU", os.cpu_count()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu, cores = names[0], len(names)
    except OSError:
        pass
    info = {"cpu": cpu, "cores": cores,
            "system": f"{platform.system()} {platform.release()}"}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("CPU family", "Model", "L1d cache", "L2 cache", "L3 cache"):
            info[key.strip().lower().replace(" ", "_")] = value.strip()
    info["avx512"] = "avx512f" in cpu_flags()
    info["lscpu"] = text
    return info


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" with local changes" if dirty.stdout.strip() else "")


def python_version(python):
    try:
        r = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def report(out, manifest, results, markdown):
    for j in results.values():
        manifest["versions"]["vitrine" if j["framework"] == "vitrine" else "pytorch"] = \
            j.get("version")
    summary = summarize(manifest, results)
    if not summary["configs"] and not summary["explain"]:
        raise Failure(f"{out}: no complete round (all three runs of a config) to summarise")
    ts = tables(summary, manifest.get("load", 0))
    print(render_text(ts))
    md = render_markdown(ts, manifest) + "\n"
    write(os.path.join(out, "summary.json"), json.dumps(summary, indent=1) + "\n")
    write(os.path.join(out, "summary.md"), md)
    write(os.path.join(out, "manifest.json"), json.dumps(manifest, indent=1) + "\n")
    print(f"results in {out} (summary.md, summary.json, manifest.json)")
    if markdown:
        write(markdown, md)
        print(f"Markdown tables written to {markdown}")


# ---- main --------------------------------------------------------------------------------------

def csv(text, convert, flag, allow_empty=False):
    try:
        values = [convert(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag}: expected a comma-separated list, got {text!r}")
    if not values and not allow_empty:
        raise argparse.ArgumentTypeError(f"{flag}: empty list")
    return values


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Run vitrine-bench and bench/torch_bench.py side by side and compare.")
    p.add_argument("--vitrine", default=DEFAULT_VITRINE,
                   help=f"the vitrine-bench binary (default {DEFAULT_VITRINE}, from the "
                        "repository root)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated (default "
                   f"{','.join(MODELS)}); with --explain, --models '' times the explanations "
                   "only")
    p.add_argument("--threads", default="2,1", help="thread counts, comma-separated (default 2,1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three runs (default 3)")
    p.add_argument("--explain", action="store_true",
                   help="also time the explanation methods (--explain-model, first thread count, "
                        "once per round)")
    p.add_argument("--explain-model", default="vit_small_patch16_224",
                   help="the model of --explain (default vit_small_patch16_224)")
    p.add_argument("--warmup", type=int, help="passed to all runs (default: theirs)")
    p.add_argument("--repeats", type=int, help="passed to all runs (default: theirs)")
    p.add_argument("--steps", type=int, help="passed to all runs (default: theirs)")
    p.add_argument("--out", help="results folder (default bench/results/compare-<date>)")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables as Markdown here")
    p.add_argument("--torch-python", default="/usr/bin/python3",
                   help="the Python with torch (default /usr/bin/python3)")
    p.add_argument("--openblas-coretype", default="auto", metavar="NAME",
                   help="OPENBLAS_CORETYPE for the Vitrine and PyTorch tuned runs: auto (the "
                        "default: SkylakeX or Haswell when OpenBLAS as installed would run "
                        "fallback kernels on this CPU, else none), none, or a core name")
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="run N busy processes (not niced) beside every run, started before the "
                        "first and stopped after the last (default 0: a quiet machine); the "
                        f"speed goal is then >= {LOADED_SPEED_GOAL:g}")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    p.add_argument("--summarize", metavar="DIR",
                   help="run nothing: the tables again from a results folder of an earlier run")
    args = p.parse_args(argv)
    try:
        args.models = csv(args.models, str, "--models", allow_empty=args.explain)
        args.threads = csv(args.threads, int, "--threads")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if any(t < 1 for t in args.threads):
        p.error("--threads: thread counts must be >= 1")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not 0 <= args.load <= 64:
        p.error(f"--load: expected 0 to 64 busy processes, got {args.load}")
    for flag in ("warmup", "repeats", "steps"):
        v = getattr(args, flag)
        if v is not None and (v < 0 or (v == 0 and flag != "warmup")):
            p.error(f"--{flag} must be {'>= 0' if flag == 'warmup' else '>= 1'}")

    try:
        if args.summarize:
            out = args.summarize
            path = os.path.join(out, "manifest.json")
            try:
                with open(path, encoding="utf-8") as f:
                    manifest = json.load(f)
            except (OSError, ValueError) as e:
                raise Failure(f"{path}: cannot read the manifest of a compare.py run ({e})")
            report(out, manifest, load_results(out, manifest["runs"]), args.markdown)
            return 0

        if not os.path.isabs(args.vitrine) and not os.path.exists(args.vitrine):
            args.vitrine = os.path.join(REPO, args.vitrine)
        args.vitrine = os.path.abspath(args.vitrine)
        if not args.dry_run:
            if not os.path.isfile(args.vitrine) or not os.access(args.vitrine, os.X_OK):
                raise Failure(f"vitrine-bench not found at {args.vitrine}: build it with "
                              "`cmake --build build --target vitrine-bench` (or pass --vitrine "
                              "PATH)")
            if not os.access(args.torch_python, os.X_OK):
                raise Failure(f"{args.torch_python} not found: PyTorch's side needs a Python with "
                              "torch (--torch-python)")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        args.out = os.path.abspath(args.out or os.path.join(REPO, "bench", "results",
                                                            f"compare-{stamp}"))
        openblas = openblas_plan(args)
        runs = plan(args, openblas)
        if args.dry_run:
            try:
                for run in runs:
                    print(shell_line(run))
            except BrokenPipeError:  # | head
                sys.stderr.close()
            return 0
        os.makedirs(args.out, exist_ok=True)
        manifest = {
            "command": " ".join(shlex.quote(a) for a in
                                ["python3",
                                 os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())]
                                + (sys.argv[1:] if argv is None else list(argv))),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
            "machine": machine(), "commit": git_commit(), "torch_python": args.torch_python,
            "torch_python_version": python_version(args.torch_python),
            "removed_env": removed_env_vars(), "openblas": openblas, "load": args.load,
            "versions": {}, "runs": runs}
        write(os.path.join(args.out, "manifest.json"), json.dumps(manifest, indent=1) + "\n")
        if manifest["removed_env"]:
            print(f"compare: not passed to the runs: {', '.join(manifest['removed_env'])}")
        print(f"compare: {openblas_line(openblas).replace('**', '').replace('`', '')}")
        print(f"compare: {load_line(args.load).replace('**', '').replace('`', '')}")
        print(f"compare: {len(runs)} runs into {args.out}", flush=True)
        write(os.path.join(args.out, "lscpu.txt"), manifest["machine"].get("lscpu", ""))
        total = time.monotonic()
        with Load(args.load):
            for i, run in enumerate(runs, 1):
                print(f"[{i}/{len(runs)}] round {run['round']}, {run['model']}, {run['threads']} "
                      f"thread(s), {run['side']}{' (explain)' if run['kind'] == 'explain' else ''}"
                      " ...", end=" ", flush=True)
                seconds = execute(run, args.out)
                j = load_results(args.out, [run])[run["name"]]
                print(f"{seconds:.0f} s: {brief(run, j)}", flush=True)
        print(f"compare: {len(runs)} runs in {(time.monotonic() - total) / 60:.1f} min")
        report(args.out, manifest, load_results(args.out, runs), args.markdown)
        return 0
    except Failure as e:
        print(f"\ncompare: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ncompare: interrupted; the finished runs are in the results folder "
              "(--summarize DIR tabulates the complete rounds)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
