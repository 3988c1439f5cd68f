#!/usr/bin/env bash
# Builds Vitrine with CUDA here (Debian 12, nvcc at /usr/local/cuda) and packs what the GPU machine
# needs to run it into .device/bundle/, so that a lent machine spends its minutes testing and
# measuring instead of compiling (scripts/gpu-session.sh unpacks it when it is there):
#   build.tar.xz   the build tree (libraries, tools, tests, CTest files; no object files)
#   libs.tar.xz    the shared libraries the programs load that a CUDA image may lack (OpenBLAS,
#                  fmt, libpng, libjpeg, cpp-httplib and theirs; never glibc, libstdc++ or CUDA's)
#   data/          Fashion-MNIST's four IDX files (train stage), when installed here
# The build tree keeps its absolute paths (CTest, RPATH, fixtures): gpu-session.sh links this
# checkout's path there to the copy. MPI and NCCL are off (one GPU; the image has no OpenMPI, and
# libnccl would not fit the 64 MiB a call carries).
#   scripts/gpu-bundle.sh            BUILD=build-cuda by default
set -euo pipefail
BUILD=${BUILD:-build-cuda}
dest=.device/bundle
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVITRINE_CUDA=ON -DVITRINE_MPI=OFF -DVITRINE_NCCL=OFF \
  -DVITRINE_CUDA_ARCHITECTURES="${VITRINE_CUDA_ARCHITECTURES:-90}" > /dev/null
cmake --build "$BUILD" ${TARGETS:+--target $TARGETS}  # TARGETS: a quick bundle of a few programs
rm -rf "$dest" && mkdir -p "$dest"
pwd > "$dest/source-dir"
echo "$BUILD" > "$dest/build-dir"
tar -C . --exclude='*.o' --exclude='*.a' --exclude='*.ninja_*' --exclude='.ninja_*' \
  -cf - "$BUILD" | xz -T0 -6 > "$dest/build.tar.xz"
# The libraries the programs load, less the C/C++ runtime and CUDA's own.
mapfile -t libs < <(find "$BUILD" -type f \( -perm -u+x -o -name '*.so*' \) -exec ldd {} + 2>/dev/null |
  awk '/=> \// {print $3}' | sort -u |
  grep -v -e "/$BUILD/" -e 'libc\.so' -e 'libm\.so' -e 'libstdc++' -e 'libgcc_s' -e 'ld-linux' \
    -e 'libcuda' -e 'libcublas' -e 'libnccl' -e 'libcudart' -e 'libpthread' -e 'libdl\.so' -e 'librt\.so')
mkdir -p "$dest/libs"
for l in "${libs[@]}"; do cp -L "$l" "$dest/libs/"; done
tar -C "$dest" -cf - libs | xz -T0 -6 > "$dest/libs.tar.xz"
rm -rf "$dest/libs"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p "$dest/data" && cp /usr/share/datasets/fashion-mnist/*.gz "$dest/data/"
fi
du -sh "$dest"/*
