#!/bin/sh
# The evaluation of every explanation method in docs/explain.md, in one command:
#   sh bench/explain_evaluation.sh
# 1. trains the two models it needs when their checkpoints are absent (each with vitrine-train's
#    shipped config, so the numbers are reproducible):
#      runs/fmnist/best.safetensors   the default Fashion-MNIST config (about 25 min on 2 cores)
#      runs/pasted/best.safetensors   configs/fashion_mnist_pasted.json, the localisation benchmark
# 2. evaluates every method with the random and centre baselines:
#      on 500 real Fashion-MNIST test images: deletion and insertion, sanity checks on 100
#      on 500 pasted test images (64x64, object box known): the same plus the pointing game and
#        the energy in the box
#    SmoothGrad with 16 samples, integrated gradients with 32 steps.
# Tables: runs/{fmnist,pasted}/evaluation/evaluation.md (and .json, and index.html with curves).
# BUILD (default build) names the build folder, RUNS (default runs) where runs go.
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-runs}
TRAIN=$BUILD/tools/train/vitrine-train
EXPLAIN=$BUILD/tools/explain/vitrine-explain
for exe in "$TRAIN" "$EXPLAIN"; do
  [ -x "$exe" ] || { echo "explain_evaluation: $exe is missing: build first (make test)" >&2; exit 1; }
done

[ -f "$RUNS/fmnist/best.safetensors" ] || "$TRAIN" --out "$RUNS/fmnist"
[ -f "$RUNS/pasted/best.safetensors" ] ||
  "$TRAIN" --config configs/fashion_mnist_pasted.json --out "$RUNS/pasted"

common="--evaluate --method all --count 500 --samples 16 --steps 32 --sanity-count 100"
# (each prints its tables and the seconds it took)
# shellcheck disable=SC2086
"$EXPLAIN" --checkpoint "$RUNS/fmnist/best.safetensors" --dataset fashion-mnist \
  $common --out "$RUNS/fmnist/evaluation"
# shellcheck disable=SC2086
"$EXPLAIN" --checkpoint "$RUNS/pasted/best.safetensors" --dataset fashion-mnist-pasted \
  $common --out "$RUNS/pasted/evaluation"
