#!/usr/bin/env bash
# The GPU checks of the CUDA issue, for a lent GPU machine (../shared/device/README.md), run from
# the repository root there with .device/ carried: either .device/bundle (made here by
# scripts/gpu-bundle.sh: the build tree, the libraries it loads and Fashion-MNIST, so that nothing
# compiles there) or .device/debs (../shared/device/fetch-debs.sh, WITH_DATA=1 for Fashion-MNIST;
# the test stage then builds there). $OUT (default gpu-logs/) gets summary.txt, logs.tar.gz (every
# log, the training run, the explanations) and gpu-compare.md.
# Stages, run in the order given (scripts/gpu-session.sh STAGE...; `final` is test bench ab train,
# `first` is test cases ab profile and `second` bench train, two calls that fit a session):
#   test     build (without a bundle) and start the whole suite in the background; the stages that
#            time something wait for it, and the end reports it (the CUDA cases counted apart;
#            they say "skipped" when no GPU is usable)
#   train    TRAIN_EPOCHS (2) epochs of the default Fashion-MNIST config on the GPU in bf16, within
#            what is left of DEADLINE; its evaluation, and vitrine-explain on the GPU and the CPU
#            with the maps compared
#   bench    bench/gpu_compare.py (Vitrine against timm's own ViT eager and torch.compile when the
#            machine's python3 imports timm, else the re-implementation; bf16, batch 64;
#            BENCH_ARGS narrows it, e.g. "--models vit_base_patch16_224 --rounds 1"; BENCH_SECONDS
#            bounds it); it exits 3 when not finished: call it again while the machine is warm
#            (--resume keeps the runs done)
#   ab       vitrine-bench ViT-B/16 with every piece of the bf16 path on, then with each off in turn
#            (flash attention, cuBLASLt epilogues, bfloat16 operands; AB_SETTINGS)
#   cases    test cases by name (CASES: [ENV=V:]binary:pattern ...; default the backend suite's
#            CUDA cases, and the bfloat16-operand ones without cuBLASLt), failures in the summary
#   profile  ViT-B/16 bf16 training at batch 32, 64 and 128, and one step's kernels under Nsight
#            Compute, their time summed by name
# DEADLINE (480 s) bounds the whole call: keep it under the call's timeout.
set -uo pipefail
# The GPU paths that have not yet run on a GPU are off by default (backends/gpu_paths.h); this
# script exists to run them, so it turns every one on (GPU_PATHS=off leaves the defaults). The
# ab stage and the cases' ENV=0 turn them off one at a time.
OPT_IN_PATHS="VITRINE_FLASH_ATTENTION VITRINE_CUDA_LT VITRINE_BF16_OPERANDS VITRINE_MULTI_TENSOR_ADAM VITRINE_CUDA_BATCHED_CONV VITRINE_CUDA_POINTER_LISTS"
if [ "${GPU_PATHS:-on}" = on ]; then
  for v in $OPT_IN_PATHS; do export "$v=1"; done
fi
[ $# -gt 0 ] || { echo "usage: scripts/gpu-session.sh test|train|bench|ab|cases|profile|final ..." >&2; exit 2; }
OUT=${OUT:-gpu-logs}
BUILD=${BUILD:-build-gpu}
DEADLINE=${DEADLINE:-480}
# What comes back from a lent machine is a few files: every log goes to $LOGS, packed at the end
# into $OUT/logs.tar.gz; $OUT/summary.txt holds the lines that matter.
LOGS=${LOGS:-/tmp/gpu-logs}
rm -rf "$LOGS" && mkdir -p "$LOGS" "$OUT"
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((DEADLINE - SECONDS)); }
finish() { tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tar.gz" "$(basename "$LOGS")"; }
trap finish EXIT

# Python (PyTorch, numpy) runs with the machine's own libraries, never the carried ones.
orig_ld=${LD_LIBRARY_PATH:-}
py() { LD_LIBRARY_PATH=$orig_ld python3 "$@"; }
if [ -f .device/bundle/build.tar.xz ]; then
  # A build tree made elsewhere (scripts/gpu-bundle.sh) keeps that checkout's absolute paths
  # (CTest files, RPATH, fixtures): that path is pointed at this checkout.
  src=$(cat .device/bundle/source-dir)
  BUILD=$(cat .device/bundle/build-dir)
  if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"
  fi
  [ -d "$BUILD" ] || xz -dc .device/bundle/build.tar.xz | tar -xf -
  mkdir -p /tmp/vlibs && xz -dc .device/bundle/libs.tar.xz | tar -C /tmp/vlibs -xf -
  export LD_LIBRARY_PATH=/tmp/vlibs/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ -d .device/bundle/data ]; then
    export VITRINE_FASHION_MNIST=$PWD/.device/bundle/data
    # The examples' tests were configured with Debian's folder.
    [ -e /usr/share/datasets/fashion-mnist ] ||
      { mkdir -p /usr/share/datasets && ln -s "$VITRINE_FASHION_MNIST" /usr/share/datasets/fashion-mnist; }
  fi
  # The tests that run CMake scripts name the CMake of the build machine.
  [ -e /usr/bin/cmake ] || ln -s "$(command -v cmake)" /usr/bin/cmake
  prebuilt=1
  missing=$(ldd "$BUILD"/tests/test_backends "$BUILD"/tools/*/vitrine-* 2>&1 | grep "not found" | sort -u)
  [ -n "$missing" ] && echo "libraries not found: $missing" | tee -a "$summary"
else
  # shellcheck disable=SC1091
  source .device/unpack-debs.sh
  prebuilt=0
fi
{
  nvidia-smi -L || true
  nvcc --version | tail -1
  py -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" || true
  git log --oneline -1 2>/dev/null || true
  echo "prebuilt: $prebuilt, build: $BUILD"
  echo "opt-in GPU paths: ${GPU_PATHS:-on} ($OPT_IN_PATHS)"
} > "$LOGS/machine.txt" 2>&1
cat "$LOGS/machine.txt" >> "$summary"
# vitrine-bench with the carried libraries, for programs that run under the machine's own
# (gpu_compare.py, ncu).
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LD_LIBRARY_PATH" \
  "$PWD/$BUILD/tools/bench/vitrine-bench" > /tmp/vitrine-bench
chmod +x /tmp/vitrine-bench

build() {
  [ "$prebuilt" = 1 ] && return 0
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=ON -DVITRINE_MPI=OFF \
    -DVITRINE_CUDA_ARCHITECTURES=90 > "$LOGS/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" > "$LOGS/build.log" 2>&1 || { say "build failed"; exit 1; }
}

# The whole suite, a thread or two per test (less the checks of the build machine's toolchain:
# the clang build and an installed package's consumer, which need Debian's compilers and packages).
suite() {
  local t=$(( $(left) - 60 ))
  [ "$t" -gt "${SUITE_SECONDS:-200}" ] && t=${SUITE_SECONDS:-200}
  (cd "$BUILD" && OMP_NUM_THREADS=2 timeout "$t" \
    ctest -j "$(( $(nproc) - 2 ))" --output-on-failure --timeout 200 \
    -E '^(build/clang|install/find_package_consumer)') > "$LOGS/ctest.log" 2>&1
}
suite_report() {
  local f=$LOGS/ctest.log
  say "suite: $(grep -c ' Passed ' "$f") passed, $(grep -cE '\*\*\*(Failed|Timeout|Exception)|SEGFAULT|Subprocess aborted' "$f") failed, $(grep -c '\*\*\*Skipped\|Not Run' "$f") skipped, of $(grep -oE '/[0-9]+ Test' "$f" | head -1 | tr -dc 0-9) listed; $(grep -E 'tests passed|tests failed' "$f" | tail -1)"
  local cuda=$(grep -E 'Test +#[0-9]+: [a-z]+/[^.]*cuda' "$f")
  local all=$(grep -c . <<< "$cuda") ok=$(grep -c ' Passed ' <<< "$cuda")
  local skip=$(grep -c '\*\*\*Skipped' <<< "$cuda")
  say "CUDA cases: $ok passed, $skip skipped, $((all - ok - skip)) failed or not run, of $all"
  grep -E '\*\*\*(Failed|Timeout|Exception)|SEGFAULT|Subprocess aborted' "$f" | head -40 | tee -a "$summary"
}
suite_pid=
wait_suite() { [ -n "$suite_pid" ] && wait "$suite_pid"; suite_pid=; }

train() {
  local run=$LOGS/fmnist-cuda secs=$(( $(left) - 20 ))
  [ "$secs" -gt "${TRAIN_SECONDS:-150}" ] && secs=${TRAIN_SECONDS:-150}
  [ "$secs" -gt 30 ] || { say "train: skipped, ${secs}s left"; return 0; }
  rm -rf "$run"
  timeout "$secs" "$BUILD/tools/train/vitrine-train" --device cuda \
    --set train.precision=bf16 --epochs "${TRAIN_EPOCHS:-2}" --set train.test_each_epoch=true \
    --out "$run" > "$LOGS/train.log" 2>&1
  say "train: exit $?"
  grep -iE 'epoch|accuracy|error' "$LOGS/train.log" | tail -12 >> "$summary"
  local ckpt=$run/best.safetensors
  [ -f "$ckpt" ] || ckpt=$run/last.safetensors
  [ -f "$ckpt" ] || { say "train: no checkpoint"; return 0; }
  timeout 120 "$BUILD/tools/train/vitrine-train" --device cuda --eval "$ckpt" > "$LOGS/eval.log" 2>&1
  say "eval: exit $? $(grep -i 'accuracy' "$LOGS/eval.log" | tail -2 | tr '\n' ' ')"
  for dev in cpu cuda; do
    timeout 120 "$BUILD/tools/explain/vitrine-explain" --checkpoint "$ckpt" \
      --dataset fashion-mnist --count 4 --method all --device "$dev" --out "$LOGS/explain-$dev" \
      > "$LOGS/explain-$dev.log" 2>&1
    say "explain $dev: exit $?"
    tail -3 "$LOGS/explain-$dev.log" >> "$summary"
  done
  # The maps of both devices, compared file by file (the .npy arrays the tool writes).
  py - "$LOGS/explain-cpu" "$LOGS/explain-cuda" <<'PY' > "$LOGS/explain-compare.txt" 2>&1
import pathlib, sys
import numpy as np
a, b = map(pathlib.Path, sys.argv[1:3])
worst = 0.0
for f in sorted(a.rglob("*.npy")):
    g = b / f.relative_to(a)
    if not g.exists():
        print("missing on cuda:", g); continue
    x, y = np.load(f), np.load(g)
    d = float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0
    worst = max(worst, d)
    print(f"{f.relative_to(a)}: max |cpu - cuda| = {d:.3g}")
print(f"worst: {worst:.3g}")
PY
  tail -12 "$LOGS/explain-compare.txt" >> "$summary"
}

bench() {
  [ "$prebuilt" = 1 ] || cmake --build "$BUILD" -j "$(nproc)" --target vitrine-bench \
    > "$LOGS/build-bench.log" 2>&1
  local budget=$(( $(left) - 20 ))
  [ "${BENCH_SECONDS:-0}" -gt 0 ] && budget=$BENCH_SECONDS
  say "bench: $budget s"
  local rc=0
  # shellcheck disable=SC2086
  timeout "$budget" env LD_LIBRARY_PATH="$orig_ld" python3 bench/gpu_compare.py --vitrine /tmp/vitrine-bench \
    --out bench/results/gpu --resume --time-limit $(( budget * 2 / 3 )) ${BENCH_ARGS:-} \
    --markdown "$OUT/gpu-compare.md" > "$LOGS/bench.log" 2>&1 || rc=$?
  cp -r bench/results/gpu "$LOGS/" 2>/dev/null
  tail -30 "$LOGS/bench.log" >> "$summary"
  say "gpu_compare.py exit status $rc (3: not finished, run this stage again; 124: timed out)"
}

# Where a training step's GPU time goes: ViT-B/16 bf16 training at three batch sizes (a step's
# fixed cost shows as images/s that grow with the batch), then one step under Nsight Compute,
# every kernel's duration summed by name.
profile() {
  local model=${PROFILE_MODEL:-vit_base_patch16_224}
  for b in ${PROFILE_BATCHES:-32 64 128}; do
    timeout 90 /tmp/vitrine-bench --model "$model" --device cuda --precision bf16 --what train \
      --batch "$b" --warmup 3 --repeats 3 --steps 5 > "$LOGS/scale-$b.log" 2>&1
    say "$model batch $b: $(grep -E '^train ' "$LOGS/scale-$b.log")"
  done
  LD_LIBRARY_PATH=$orig_ld timeout "${NCU_SECONDS:-200}" ncu --clock-control none --csv \
    --metrics gpu__time_duration.sum --log-file "$LOGS/ncu.csv" /tmp/vitrine-bench --model "$model" \
    --device cuda --precision bf16 --what train --batch 64 --warmup 0 --repeats 1 --steps 1 \
    > "$LOGS/ncu-run.log" 2>&1
  say "ncu: exit $?"
  py - "$LOGS/ncu.csv" <<'PY' > "$LOGS/ncu-summary.txt" 2>&1
import collections, csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    v = float(r["Metric Value"].replace(",", ""))
    v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
          "msecond": 1e3}[r["Metric Unit"]]  # to microseconds
    name = r["Kernel Name"][:90]
    tot[name] += v; cnt[name] += 1
s = sum(tot.values())
print(f"{len(rows)} kernels, {s/1e3:.2f} ms of GPU time")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:45]:
    print(f"{v/1e3:9.3f} ms {100*v/s:5.1f}% {cnt[k]:6d}x  {k}")
PY
  head -50 "$LOGS/ncu-summary.txt" >> "$summary"
}

# What each piece of the bf16 path is worth: ViT-B/16 (AB_MODEL) as bench runs it, with every
# piece on, then with each switched off in turn (AB_SETTINGS: env assignments, "-" for none).
# (The fewer-launches paths are in the list too: multi-tensor AdamW, the batched convolution and
# the kept pointer lists.)
ab() {
  local model=${AB_MODEL:-vit_base_patch16_224} i=0
  for setting in ${AB_SETTINGS:-- VITRINE_FLASH_ATTENTION=0 VITRINE_CUDA_LT=0 VITRINE_BF16_OPERANDS=0 VITRINE_MULTI_TENSOR_ADAM=0 VITRINE_CUDA_BATCHED_CONV=0 VITRINE_CUDA_POINTER_LISTS=0}; do
    i=$((i + 1))
    local envs=()
    [ "$setting" != - ] && envs=("$setting")
    timeout 60 env "${envs[@]}" /tmp/vitrine-bench --model "$model" --device cuda \
      --precision bf16 --what train,infer --batch 64 --warmup 3 --repeats 3 --steps 5 \
      > "$LOGS/ab-$i.log" 2>&1
    say "ab $model ${setting/#-/(all on)}: $(grep -E '^(train|infer) |peak' "$LOGS/ab-$i.log" |
      tr -s ' ' | tr '\n' ';')"
  done
}

# Test cases by name, each binary:pattern in CASES (default: every CUDA case of the backend
# suite, and the bfloat16-operand cases again without cuBLASLt), with their failures in the
# summary.
cases() {
  local i=0 specs
  # (split on spaces without expanding the patterns' * against the current folder)
  read -ra specs <<< "${CASES:-test_backends:cuda* VITRINE_CUDA_LT=0:test_backends:*bfloat16*}"
  for spec in "${specs[@]}"; do
    i=$((i + 1))
    local envs=() bin pat
    if [[ $spec == *=*:*:* ]]; then envs=("${spec%%:*}"); spec=${spec#*:}; fi
    bin=${spec%%:*} pat=${spec#*:}
    timeout 300 env ${envs[@]+"${envs[@]}"} "$BUILD/tests/$bin" -tc="$pat" > "$LOGS/cases-$i.log" 2>&1
    say "cases ${envs[*]} $bin '$pat': exit $? $(grep -E '^\[doctest\] test cases' "$LOGS/cases-$i.log")"
    grep -E 'ERROR|FATAL|CHECK.*is NOT|with expansion' -A3 "$LOGS/cases-$i.log" | head -40 >> "$summary"
  done
}

stages=("$@")
[ "$*" = final ] && stages=(test bench ab train)
# A lent machine's 15 minutes in two calls of under 9 (docs/cuda.md): the suite, the named CUDA
# cases, the A/B of the bf16 path and the profile; then the benchmark against timm and training.
[ "$*" = first ] && stages=(test cases ab profile)
[ "$*" = second ] && stages=(bench train)
for stage in "${stages[@]}"; do
  case $stage in
    test) build; suite & suite_pid=$! ;;
    train) train ;;
    bench | ab | profile | cases) wait_suite; "$stage" ;;  # timings with nothing else running
    *)
      echo "scripts/gpu-session.sh: unknown stage '$stage' (expected test, train, bench, ab, cases, profile or final)" >&2
      exit 2
      ;;
  esac
done
if [[ " ${stages[*]} " == *" test "* ]]; then
  wait_suite
  suite_report
fi
say "done after $SECONDS s"
