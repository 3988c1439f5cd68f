#!/usr/bin/python3
"""word_language_model's speed, Vitrine against PyTorch in one run, alternating: issue 60's
acceptance (docs/benchmarks.md, "Sequence models"). For each round and case it runs the two
programs back to back, the order reversed every other round, each its own process timing `steps`
steps after `warmup`: bench/word_lm.cpp (built here from the library in --build) and its PyTorch
twin bench/word_lm_torch.py (Debian's /usr/bin/python3, torch 1.13). Cases: LSTM, GRU and
Transformer training, LSTM generation. Prints the table of medians and ratios and writes it, the
raw lines and `lscpu`, to --out (default bench/results/<date>-word-lm/).

    /usr/bin/python3 bench/word_lm.py [--rounds 5] [--threads 2] [--build build]
"""
import argparse, datetime, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CASES = [("LSTM", "train", 15), ("LSTM", "generate", 300), ("GRU", "train", 15),
         ("Transformer", "train", 15), ("Transformer", "generate", 100)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--cases", default="", help="comma-separated MODEL:WHAT (default: all)")
    ap.add_argument("--out", default=os.path.join(
        REPO, "bench", "results", f"{datetime.date.today()}-word-lm"))
    a = ap.parse_args()
    exe = os.path.join(a.build, "word_lm_bench")
    subprocess.run(["g++", "-O2", "-std=c++20", f"-I{REPO}", f"-I{a.build}", "-isystem",
                    "/usr/include/x86_64-linux-gnu/openblas-openmp",
                    os.path.join(HERE, "word_lm.cpp"), "-o", exe, f"-L{a.build}", "-lvitrine",
                    "-lfmt", f"-Wl,-rpath,{os.path.abspath(a.build)}"], check=True)
    cases = CASES
    if a.cases:
        want = {tuple(c.split(":")) for c in a.cases.split(",")}
        cases = [c for c in CASES if (c[0], c[1]) in want]
    runs = {}
    raw = []
    for r in range(a.rounds):
        for model, what, steps in cases:
            common = ["--model", model, "--what", what, "--steps", str(steps), "--threads",
                      str(a.threads)]
            cmds = [("vitrine", [exe] + common),
                    ("pytorch", ["/usr/bin/python3", os.path.join(HERE, "word_lm_torch.py")] + common)]
            if r % 2:
                cmds.reverse()
            for side, cmd in cmds:
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                line = json.loads(out.strip().splitlines()[-1])
                raw.append(line)
                runs.setdefault((model, what, side), []).append(line["tokens_per_s"])
                print(json.dumps(line), flush=True)
    rows = ["| model | what | Vitrine tokens/s | PyTorch tokens/s | ratio (medians) |",
            "| --- | --- | ---: | ---: | ---: |"]
    for model, what, _ in cases:
        v = statistics.median(runs[(model, what, "vitrine")])
        p = statistics.median(runs[(model, what, "pytorch")])
        rows.append(f"| {model} | {what} | {v:.0f} | {p:.0f} | {v / p:.2f}x |")
    table = "\n".join(rows)
    print(table)
    os.makedirs(a.out, exist_ok=True)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(f"# word_language_model speed, {datetime.date.today()}, commit {commit}\n\n"
                f"`/usr/bin/python3 bench/word_lm.py --rounds {a.rounds} --threads {a.threads}`"
                f"\n\nMedians over {a.rounds} alternating rounds, {a.threads} threads.\n\n"
                f"{table}\n\n## Raw\n\n```\n" + "\n".join(json.dumps(x) for x in raw) +
                f"\n```\n\n## lscpu\n\n```\n{lscpu}```\n")
    print(f"wrote {a.out}/README.md")


if __name__ == "__main__":
    main()
