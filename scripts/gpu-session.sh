#!/usr/bin/env bash
# The GPU checks of the CUDA issue, in stages that each fit one 10-minute call of a lent GPU
# machine (../shared/device/README.md). Run from the repository root there, with .device/ carried
# (made here by ../shared/device/fetch-debs.sh, WITH_DATA=1 for Fashion-MNIST); logs go to $OUT
# (default gpu-logs/).
#   scripts/gpu-session.sh test    configure with CUDA, build, run the whole suite, then the CUDA
#                                  cases verbosely (they say "skipped" when no GPU is usable)
#   scripts/gpu-session.sh train   two epochs of the default Fashion-MNIST config on the GPU (bf16),
#                                  its evaluation, and vitrine-explain on the GPU and the CPU,
#                                  with the maps compared
#   scripts/gpu-session.sh bench   bench/gpu_compare.py (Vitrine against PyTorch eager and
#                                  torch.compile, ViT-S/16 and ViT-B/16, batch 64, bf16); it
#                                  stops after 7 minutes with exit 3: call it again (while the
#                                  machine is warm) until it exits 0. Its runs accumulate in
#                                  bench/results/gpu (on that machine), a copy goes to $OUT.
set -euo pipefail
stage=${1:?usage: scripts/gpu-session.sh test|train|bench}
OUT=${OUT:-gpu-logs}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .device/unpack-debs.sh
{
  nvidia-smi -L || true
  nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" || true
  git log --oneline -1 2>/dev/null || true
} > "$OUT/machine.txt" 2>&1

case $stage in
  test)
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=ON > "$OUT/configure.log" 2>&1
    cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1
    (cd "$BUILD" && ctest -j "$(nproc)" --output-on-failure --timeout 300) > "$OUT/ctest.log" 2>&1 || true
    for t in test_backends test_explain; do
      "$BUILD/tests/$t" -tc='*cuda*' -s > "$OUT/$t-cuda.log" 2>&1 || true
    done
    tail -5 "$OUT/ctest.log"
    echo "ctest cases skipped: $(grep -c "(Skipped)" "$OUT/ctest.log" || true)"
    grep -hi "test cases\|FAILED\|ERROR\|skipped" "$OUT"/test_*-cuda.log | head -40
    ;;
  train)
    run=$OUT/fmnist-cuda
    rm -rf "$run"
    "$BUILD/tools/train/vitrine-train" --device cuda --set train.precision=bf16 --epochs 2 \
      --set train.test_each_epoch=true --out "$run" > "$OUT/train.log" 2>&1
    "$BUILD/tools/train/vitrine-train" --device cuda --eval "$run/best.safetensors" > "$OUT/eval.log" 2>&1
    for dev in cpu cuda; do
      "$BUILD/tools/explain/vitrine-explain" --checkpoint "$run/best.safetensors" \
        --dataset fashion-mnist --count 4 --method all --device "$dev" --out "$OUT/explain-$dev" \
        > "$OUT/explain-$dev.log" 2>&1
    done
    tail -3 "$OUT/train.log" "$OUT/eval.log"
    # The maps of both devices, compared file by file (the .npy arrays the tool writes).
    python3 - "$OUT/explain-cpu" "$OUT/explain-cuda" <<'PY' | tee "$OUT/explain-compare.txt"
import pathlib, sys
import numpy as np
a, b = map(pathlib.Path, sys.argv[1:3])
worst = 0.0
for f in sorted(a.rglob("*.npy")):
    g = b / f.relative_to(a)
    if not g.exists():
        print("missing on cuda:", g); continue
    x, y = np.load(f), np.load(g)
    d = float(np.max(np.abs(x - y))) if x.size else 0.0
    worst = max(worst, d)
    print(f"{f.relative_to(a)}: max |cpu - cuda| = {d:.3g}")
print(f"worst: {worst:.3g}")
PY
    ;;
  bench)
    cmake --build "$BUILD" -j "$(nproc)" --target vitrine-bench > "$OUT/build.log" 2>&1
    rc=0
    python3 bench/gpu_compare.py --vitrine "$BUILD/tools/bench/vitrine-bench" --out bench/results/gpu \
      --resume --time-limit 420 --markdown "$OUT/gpu-compare.md" > "$OUT/bench.log" 2>&1 || rc=$?
    cp -r bench/results/gpu "$OUT/"
    tail -40 "$OUT/bench.log"
    echo "gpu_compare.py exit status $rc (3: not finished, run this stage again)"
    ;;
  *)
    echo "scripts/gpu-session.sh: unknown stage '$stage' (expected test, train or bench)" >&2
    exit 2
    ;;
esac
