#!/bin/sh
# The Fashion-MNIST benchmark of docs/benchmarks.md: vitrine-train's default config, then PyTorch
# training the same architecture with the same recipe (bench/fmnist_torch.py, Debian's
# /usr/bin/python3 with python3-torch), back to back on this machine, each evaluating the test set
# after every epoch; then the side-by-side table. Run from the repository root after a build:
#   sh bench/fmnist_time_to_90.sh            (BUILD=build THREADS=2 by default)
# Results: bench/results/<date>/ (vitrine/ run folder, torch.jsonl, logs, summary.md).
set -eu
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
OUT=bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)"
} > "$OUT/machine.txt"
lscpu > "$OUT/lscpu.txt"
OMP_NUM_THREADS=$THREADS "$BUILD/tools/train/vitrine-train" --set train.test_each_epoch=true \
  --out "$OUT/vitrine" "$@" 2>&1 | tee "$OUT/vitrine.log"
# PyTorch at its best on this machine: without OMP_WAIT_POLICY=PASSIVE its OpenMP workers spin
# against OpenBLAS's (docs/benchmarks.md).
OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/fmnist_torch.py --threads "$THREADS" \
  --out "$OUT/torch.jsonl" "$@" 2>&1 |
  tee "$OUT/torch.log"
python3 bench/fmnist_summary.py "$OUT/vitrine/metrics.jsonl" "$OUT/torch.jsonl" | tee "$OUT/summary.md"
cat "$OUT/machine.txt"
