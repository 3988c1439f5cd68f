#!/usr/bin/env bash
# Data parallel on one machine: `mpirun -np 2` (one OpenMP thread per rank) against one process
# with 2 OpenMP threads, on the fmnist and cifar10 configs, alternating rounds. Prints, per run,
# images/s of the training steps (train_seconds of metrics.jsonl: data, forward, backward, the
# all-reduce and the update; evaluations not counted) and, for the 2-rank runs, the share of that
# time spent waiting for the gradients' all-reduce (comm_wait_seconds). CIFAR-10 is not installed:
# its runs read random images in CIFAR-10's binary format (speed does not depend on the pixels).
#   bench/distributed.sh [BUILD_DIR]        ROUNDS=3 STEPS=40 by default
set -euo pipefail
build=${1:-build}
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
exe=$build/tools/train/vitrine-train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

python3 - "$tmp/cifar" <<'PY'
import os, random, sys
d = sys.argv[1]; os.makedirs(d)
rng = random.Random(0)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(os.path.join(d, name), "wb") as f:
        for _ in range(1000):
            f.write(bytes([rng.randrange(10)]) + rng.randbytes(3072))
PY

common=(--set train.max_steps=$steps --set train.log_every=$steps --set train.eval_every=100000
        --set data.validation_fraction=0 --set data.subset=8192)
run() {  # config label mode
  local config=$1 label=$2 mode=$3 out=$tmp/run-$RANDOM
  local extra=()
  [ "$label" = cifar10 ] && extra=(--data "$tmp/cifar")
  if [ "$mode" = np2 ]; then
    mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$exe" --config "$config" "${extra[@]}" \
      "${common[@]}" --set train.out="$out" >/dev/null 2>&1
  else
    OMP_NUM_THREADS=2 "$exe" --config "$config" "${extra[@]}" "${common[@]}" \
      --set train.out="$out" >/dev/null 2>&1
  fi
  python3 - "$out/metrics.jsonl" "$config" "$label" "$mode" "$steps" <<'PY'
import json, sys
path, config, label, mode, steps = sys.argv[1:]
batch = json.load(open(config))["data"]["batch_size"]
line = [json.loads(l) for l in open(path) if '"train"' in l][-1]
t = line["train_seconds"]
wait = line.get("comm_wait_seconds")
share = f"  waiting for all-reduce {100 * wait / t:.1f}% of the step" if wait is not None else ""
print(f"{label:8s} {mode:12s} {int(steps) * batch / t:8.1f} images/s{share}")
PY
  rm -rf "$out"
}

for r in $(seq 1 "$rounds"); do
  echo "round $r"
  for pair in "configs/fashion_mnist.json fmnist" "configs/cifar10.json cifar10"; do
    set -- $pair
    if [ $((r % 2)) = 1 ]; then run "$1" "$2" np2; run "$1" "$2" 1proc-2thr
    else run "$1" "$2" 1proc-2thr; run "$1" "$2" np2; fi
  done
done
