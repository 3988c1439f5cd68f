#!/usr/bin/env bash
# Installs every system dependency of Vitrine on Debian 12 (idempotent; quiet when all is there).
#   scripts/install-deps.sh            build + test dependencies and the default data set
#   WITH_TORCH=1 scripts/install-deps.sh   also python3-torch/torchvision (fixtures, benchmarks)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  libopenblas0-openmp libopenblas-openmp-dev   # the OpenMP build, linked from its own directory
  libfmt-dev nlohmann-json3-dev doctest-dev zlib1g-dev libstb-dev libcli11-dev
  libpng-dev libjpeg62-turbo-dev               # decoding images from outside (fuzzed upstream)
  libcpp-httplib-dev                           # vitrine-explain --serve (HTTP server)
  protobuf-compiler libprotobuf-dev            # vitrine-train's TensorBoard event files
  python3-protobuf                             # tests/train/read_tfevents.py (their independent
                                               # reader; skipped without it)
  dataset-fashion-mnist                        # the default data set
  libopenmpi-dev openmpi-bin                   # data-parallel training (mpirun, tests/dist)
  clang libclang-rt-14-dev libomp-14-dev       # the clang build check, make sanitize, make fuzz
  fonts-dejavu-core                            # DejaVu Sans: the labels in vitrine-explain's
                                               # pictures (drawn without labels if missing)
  chromium                                     # tests/explain/test_browser (the HTML report in a
                                               # headless browser; skipped without it)
)
[ "${WITH_TORCH:-0}" = 1 ] && pkgs+=(python3-torch python3-torchvision)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
