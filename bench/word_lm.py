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
import argparse, datetime, os

import side_by_side as sbs

HERE = sbs.HERE
REPO = sbs.REPO
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
    sbs.build(os.path.join(HERE, "word_lm.cpp"), exe, a.build)
    cases = CASES
    if a.cases:
        want = {tuple(c.split(":")) for c in a.cases.split(",")}
        cases = [c for c in CASES if (c[0], c[1]) in want]
    runs = []
    for model, what, steps in cases:
        common = ["--model", model, "--what", what, "--steps", str(steps), "--threads",
                  str(a.threads)]
        runs.append((f"{model} | {what}", [exe] + common,
                     ["/usr/bin/python3", os.path.join(HERE, "word_lm_torch.py")] + common))
    medians, raw = sbs.run(runs, a.rounds, "tokens_per_s")
    table = sbs.table([r[0] for r in runs], medians, ("model | what", "tokens/s"))
    table = table.replace("| --- | ---: |", "| --- | --- | ---: |", 1)
    print(table)
    sbs.write_record(a.out, "word_language_model speed",
                     f"/usr/bin/python3 bench/word_lm.py --rounds {a.rounds} --threads {a.threads}",
                     a.rounds, a.threads, table, raw)


if __name__ == "__main__":
    main()
