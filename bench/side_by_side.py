"""Side-by-side timing of a Vitrine program against its PyTorch twin, shared by the benchmark
drivers (word_lm.py, dcgan.py): each round runs every case's two commands back to back, the order
reversed every other round, each its own process printing one JSON line with a `rate` key given
by the caller; medians and ratios go in a table, and the table, the raw lines and `lscpu` in
<out>/README.md."""
import datetime, json, os, statistics, subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def build(source, exe, build_dir):
    """Compiles one bench/*.cpp against the library in build_dir."""
    subprocess.run(["g++", "-O2", "-std=c++20", f"-I{REPO}", f"-I{build_dir}", "-isystem",
                    "/usr/include/x86_64-linux-gnu/openblas-openmp", source, "-o", exe,
                    f"-L{build_dir}", "-lvitrine", "-lfmt",
                    f"-Wl,-rpath,{os.path.abspath(build_dir)}"], check=True)


def run(cases, rounds, key):
    """cases: [(name, vitrine_cmd, pytorch_cmd)]. Returns {(name, side): [rate, ...]} and the raw
    JSON lines."""
    runs, raw = {}, []
    for r in range(rounds):
        for name, vcmd, pcmd in cases:
            cmds = [("vitrine", vcmd), ("pytorch", pcmd)]
            if r % 2:
                cmds.reverse()
            for side, cmd in cmds:
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                line = json.loads(out.strip().splitlines()[-1])
                raw.append(line)
                runs.setdefault((name, side), []).append(line[key])
                print(json.dumps(line), flush=True)
    return runs, raw


def table(names, runs, header, fmt="{:.0f}"):
    """A Markdown table of medians: header is (case column(s), unit)."""
    rows = [f"| {header[0]} | Vitrine {header[1]} | PyTorch {header[1]} | ratio (medians) |",
            "| --- | ---: | ---: | ---: |"]
    for name in names:
        v = statistics.median(runs[(name, "vitrine")])
        p = statistics.median(runs[(name, "pytorch")])
        rows.append(f"| {name} | {fmt.format(v)} | {fmt.format(p)} | {v / p:.2f}x |")
    return "\n".join(rows)


def write_record(out, title, command, rounds, threads, text, raw):
    os.makedirs(out, exist_ok=True)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(f"# {title}, {datetime.date.today()}, commit {commit}\n\n`{command}`\n\n"
                f"Medians over {rounds} alternating rounds, {threads} threads.\n\n{text}\n\n"
                "## Raw\n\n```\n" + "\n".join(json.dumps(x) for x in raw) +
                f"\n```\n\n## lscpu\n\n```\n{lscpu}```\n")
    print(f"wrote {out}/README.md")
