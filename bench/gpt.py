#!/usr/bin/python3
"""GPT-2's speed and memory, Vitrine against PyTorch in one run, alternating: issue 64's
acceptance (docs/benchmarks.md, "GPT"). For each round and case it runs the two programs back to
back, the order reversed every other round, each its own process: bench/gpt.cpp (built here from
the library in --build) and its twin bench/gpt_torch.py (Debian's /usr/bin/python3, torch 1.13).
The model: 6 layers, 6 heads, width 384, vocabulary 50257, tied head, B = 4. Cases: training at
T = 64 and 256, generation of 64 tokens after a 16-token prompt (Vitrine with its key/value
cache, PyTorch as nanoGPT's generate). Prints the tables of medians and ratios (tokens/s, peak
RSS) and writes them, the raw lines and `lscpu`, to --out (default
bench/results/<date>-gpt/).

    /usr/bin/python3 bench/gpt.py [--rounds 3] [--threads 2] [--build build]
"""
import argparse, datetime, os, statistics

import side_by_side as sbs

HERE = sbs.HERE
REPO = sbs.REPO
CASES = [("train", 64, 5), ("train", 256, 3), ("generate", 16, 64)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default=os.path.join(
        REPO, "bench", "results", f"{datetime.date.today()}-gpt"))
    a = ap.parse_args()
    exe = os.path.join(a.build, "gpt_bench")
    sbs.build(os.path.join(HERE, "gpt.cpp"), exe, a.build)
    runs = []
    for what, T, steps in CASES:
        common = ["--what", what, "--T", str(T), "--steps", str(steps), "--threads",
                  str(a.threads)]
        runs.append((f"{what} | {T}", [exe] + common,
                     ["/usr/bin/python3", os.path.join(HERE, "gpt_torch.py")] + common))
    medians, raw = sbs.run(runs, a.rounds, "tokens_per_s")
    names = [r[0] for r in runs]
    speed = sbs.table(names, medians, ("what | T", "tokens/s"))
    speed = speed.replace("| --- | ---: |", "| --- | --- | ---: |", 1)
    rss = {}
    for line in raw:
        rss.setdefault((f"{line['what']} | {line['T']}", line["side"]), []).append(
            line["peak_rss_mib"])
    memory = sbs.table(names, rss, ("what | T", "peak RSS MiB"))
    memory = memory.replace("| --- | ---: |", "| --- | --- | ---: |", 1)
    text = f"Speed:\n\n{speed}\n\nMemory:\n\n{memory}"
    print(text)
    sbs.write_record(a.out, "GPT-2 (6 layers, 384 wide, vocabulary 50257) speed and memory",
                     f"/usr/bin/python3 bench/gpt.py --rounds {a.rounds} --threads {a.threads}",
                     a.rounds, a.threads, text, raw)


if __name__ == "__main__":
    main()
