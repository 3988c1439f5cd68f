#!/usr/bin/env bash
# vitrine-explain's outputs before and after a change, byte for byte (issue 62: moving the methods
# into one file each must not change a bit).
#   compare_outputs.sh run BINARY OUT_DIR     every method (and --evaluate) on a random ViT and a
#                                             random ResNet-18, each run's --out under OUT_DIR
#   compare_outputs.sh compare DIR_A DIR_B    every file of the two, byte for byte, but the ones
#                                             that hold timings (index.html, evaluation.md, the
#                                             "seconds" of evaluation.json); exit 1 on a difference
# Run both binaries with the same LD_LIBRARY_PATH (the same libvitrine), e.g.
#   LD_LIBRARY_PATH=/tmp/baseline tests/explain/tools/compare_outputs.sh run OLD_BINARY /tmp/old
# The ResNet's checkpoint is written by make_compare_resnet.py (torchvision's resnet18 with
# seed 0, as safetensors with Vitrine's metadata) with /usr/bin/python3; without torch it is
# skipped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
images="$root/tests/fixtures/images"

run() {
  local exe=$1 out=$2
  mkdir -p "$out"
  exe=$(realpath "$exe")
  cd "$out"  # relative paths: the logs and reports name them
  local common=(--samples 2 --steps 4 --am-steps 3 --threshold 0.5)
  # The methods by name, not "all": a method added later must not change these outputs.
  local all=attention,rollout,grad-rollout,chefer,gradcam,saliency,smoothgrad,integrated-gradients
  local any=gradcam,saliency,smoothgrad,integrated-gradients
  # A ViT on grey pictures: every method with the defaults, then with other options.
  "$exe" --checkpoint random:fmnist --seed 3 "$images/grey.png" "$images/dino_301x203.png" \
    --method "$all,activation-max,qkv" "${common[@]}" --out "vit" >"vit.log"
  "$exe" --checkpoint random:fmnist --seed 4 "$images/dino_301x203.png" \
    --method "$all,activation-max,qkv" "${common[@]}" --resize factor:0.2 --crop topleft \
    --pos-interp dino --upsample nearest --layer 1 --head 1 --head-fusion max --discard-ratio 0.5 \
    --ig-method trapezoid --baseline blur --sigma 0.3 --patch 1,2 --neuron 5 --jitter 2 --l2 0.01 \
    --target 3 \
    --out "vit_options" >"vit_options.log"
  "$exe" --checkpoint random:fmnist --seed 3 "$images/grey.png" "$images/dino_301x203.png" \
    --evaluate --method "$all" --samples 2 --steps 3 --sanity-count 1 --out "vit_evaluate" \
    >"vit_evaluate.log"
  "$exe" --checkpoint random:fmnist --seed 3 "$images/dino_301x203.png" \
    --evaluate --method "$all" --resize factor:0.2 --pos-interp dino --samples 2 --steps 3 \
    --sanity-count 1 --out "vit_evaluate_dino" >"vit_evaluate_dino.log"
  if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
    /usr/bin/python3 "$here/make_compare_resnet.py" "resnet.safetensors"
    "$exe" --checkpoint "resnet.safetensors" "$images/baseline_420.jpg" "$images/grey.png" \
      --method "$any" "${common[@]}" --out "resnet" >"resnet.log"
    "$exe" --checkpoint "resnet.safetensors" "$images/baseline_420.jpg" "$images/grey.png" \
      --method "$any" "${common[@]}" --gradcam-layer layer3 --cell 8 --ig-method trapezoid \
      --baseline blur --upsample nearest --out "resnet_options" >"resnet_options.log"
    "$exe" --checkpoint "resnet.safetensors" "$images/baseline_420.jpg" "$images/grey.png" \
      --evaluate --method "$any" --samples 2 --steps 3 --sanity-count 1 --out "resnet_evaluate" \
      >"resnet_evaluate.log"
    rm "resnet.safetensors"
  else
    echo "no torch for /usr/bin/python3: the ResNet runs are skipped" >&2
  fi
}

# A file's bytes without its timings.
content() {
  case "$1" in
    *.log | */index.html | */evaluation.md) sed -E 's/[0-9]+(\.[0-9]+)? ?(s|ms)\b/T/g' "$1" ;;
    */evaluation.json) sed -E 's/"seconds": ?[0-9.e+-]+/"seconds":T/g' "$1" ;;
    *) cat "$1" ;;
  esac
}

compare() {
  local a=$1 b=$2 bad=0 n=0
  while IFS= read -r f; do
    n=$((n + 1))
    if [[ ! -f "$b/$f" ]]; then
      echo "only in $a: $f"
      bad=1
    elif ! cmp -s <(content "$a/$f") <(content "$b/$f"); then
      echo "differs: $f"
      bad=1
    fi
  done < <(cd "$a" && find . -type f | sort)
  while IFS= read -r f; do
    [[ -f "$a/$f" ]] || { echo "only in $b: $f"; bad=1; }
  done < <(cd "$b" && find . -type f | sort)
  echo "$n files compared: $([[ $bad == 0 ]] && echo identical || echo DIFFERENT)"
  return $bad
}

case "${1:-}" in
  run) run "$2" "$3" ;;
  compare) compare "$2" "$3" ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
