#!/bin/bash
# Batch-invariant training (issue 63, docs/distributed.md): vitrine-train under
# VITRINE_BATCH_TREE=1 on Fashion-MNIST (800 images, 10% held out, batch 32, 20 steps), one
# process on one thread against 2 threads, mpirun -np 2 and 4, and gradient accumulation 2 and 4
# (one process), at train.seed 1..10. Threads and ranks for the default ViT and ResNet-8;
# accumulation for the ViT without its batch-norm stem (`vit-nostem`: model.stem=[]), since a
# micro-batch is normalised by its own statistics in training (docs/distributed.md). Prints one
# line a run: whether every saved tensor and every logged loss (training and validation) is the
# reference's.
#   bench/batch_invariance.sh [build dir = build] [seeds = "1 2 3 4 5 6 7 8 9 10"] [steps = 20]
set -u
BUILD=${1:-build}
SEEDS=${2:-1 2 3 4 5 6 7 8 9 10}
STEPS=${3:-20}
EXE=$(realpath "$BUILD/tools/train/vitrine-train")
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export VITRINE_BATCH_TREE=1

# Every tensor of two safetensors files, and every loss of two metrics.jsonl, compared.
compare() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
def losses(d):
    return [(j['type'], j['global_step'], j['loss']) for j in map(json.loads, open(d + '/metrics.jsonl')) if 'loss' in j]
a, b = tensors(sys.argv[1] + '/last.safetensors'), tensors(sys.argv[2] + '/last.safetensors')
la, lb = losses(sys.argv[1]), losses(sys.argv[2])
dt = sum(a[k] != b.get(k) for k in a)
dl = sum(x != y for x, y in zip(la, lb)) + abs(len(la) - len(lb))
print(f"{'SAME' if dt == 0 and dl == 0 else 'DIFF'}: {dt}/{len(a)} tensors differ, {dl}/{len(la)} losses differ")
PY
}

for seed in $SEEDS; do
  for arch in vit resnet vit-nostem; do
    args=(--data "$DATA" --epochs 1 --set data.workers=0 --set data.subset=800
          --set data.validation_fraction=0.1 --set train.eval_every=5 --set train.log_every=1
          --set model.drop_path=0 --set train.max_steps=$STEPS --set train.seed=$seed
          --set model.arch=${arch%-nostem})
    runs="threads2 np2 np4"
    [ "$arch" = vit-nostem ] && { args+=(--set 'model.stem=[]'); runs="accum2 accum4"; }
    ref=$WORK/ref
    rm -rf "$ref"
    OMP_NUM_THREADS=1 "$EXE" "${args[@]}" --set data.batch_size=32 --out "$ref" > "$WORK/log" 2>&1 ||
      { echo "seed $seed $arch: the reference run failed"; tail -3 "$WORK/log"; continue; }
    for run in $runs; do
      out=$WORK/$run
      rm -rf "$out"
      case $run in
        threads2) OMP_NUM_THREADS=2 "$EXE" "${args[@]}" --set data.batch_size=32 --out "$out" ;;
        np2|np4) mpirun --oversubscribe --allow-run-as-root -np ${run#np} -x OMP_NUM_THREADS=1 \
                   -x VITRINE_BATCH_TREE "$EXE" "${args[@]}" --set data.batch_size=32 --out "$out" ;;
        accum2|accum4) a=${run#accum}
          OMP_NUM_THREADS=1 "$EXE" "${args[@]}" --set data.batch_size=$((32 / a)) \
            --set train.accum_steps=$a --out "$out" ;;
      esac > "$WORK/log" 2>&1 || { echo "seed $seed $arch $run: failed"; tail -3 "$WORK/log"; continue; }
      echo "seed $seed $arch $run: $(compare "$ref" "$out")"
    done
  done
done
