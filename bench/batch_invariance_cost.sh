#!/bin/bash
# What batch-invariant mode costs (issue 63, docs/distributed.md "Cost"): training images/s of
# ResNet-8 and the default ViT at batch 128 on 2 threads (vitrine-bench --what train), alternating
# in each round: a base build's default path (another commit, built in a worktree), this build's
# default path, and this build with VITRINE_BATCH_TREE=1. Prints each run, then the medians and
# the mode's ratios to both defaults (the ratio of the medians, and the median of the rounds'
# ratios: each round's three runs are side by side, so the machine's slower drifts cancel in it),
# then lscpu. Run it with nothing else on the machine.
#   bench/batch_invariance_cost.sh BASE_BUILD [BUILD = build] [ROUNDS = 5]
set -eu
BASE=$1
BUILD=${2:-build}
ROUNDS=${3:-5}
NEW=$(realpath "$BUILD/tools/bench/vitrine-bench")
OLD=$(realpath "$BASE/tools/bench/vitrine-bench")
declare -A rates
run() {  # run LABEL MODEL EXE TREE: prints and keeps the median images/s of 5 timed repeats
  local r
  r=$(VITRINE_BATCH_TREE=$4 "$3" --model "$2" --batch 128 --threads 2 --what train --repeats 5 \
        --warmup 1 2>&1 | awk '$1 == "train" { print $2 }')
  echo "$1 $2: $r"
  rates[$1 $2]+="$r "
}
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  for model in resnet8 configs/fashion_mnist.json; do
    run base "$model" "$OLD" 0
    run default "$model" "$NEW" 0
    run mode "$model" "$NEW" 1
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }'; }
echo
# The rounds' ratios a / b of two labels' lists, one a line.
ratios() { paste -d' ' <(echo "$1" | tr ' ' '\n' | grep -v '^$') <(echo "$2" | tr ' ' '\n' | grep -v '^$') | awk '{ print $1 / $2 }'; }
echo "| model | base default | this default | this, mode on | mode / base | mode / default | rounds' mode / base | rounds' mode / default |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for model in resnet8 configs/fashion_mnist.json; do
  b=$(echo "${rates[base $model]}" | median)
  d=$(echo "${rates[default $model]}" | median)
  m=$(echo "${rates[mode $model]}" | median)
  rb=$(ratios "${rates[mode $model]}" "${rates[base $model]}" | median)
  rd=$(ratios "${rates[mode $model]}" "${rates[default $model]}" | median)
  echo "| $model | $b | $d | $m | $(echo "scale=3; $m / $b" | bc) | $(echo "scale=3; $m / $d" | bc) | $(printf %.3f "$rb") | $(printf %.3f "$rd") |"
done
echo
lscpu
