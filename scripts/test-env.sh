#!/usr/bin/env bash
# make test-env: the tests whose results depend on which kernels compute a product, run under each
# environment a machine may impose on OpenBLAS and on Vitrine's GEMM (docs/environment.md).
#   scripts/test-env.sh BUILD [NAME...]     (default: every name below)
#   haswell-l2     OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 (as some AMD Zen 5 machines set)
#   skylakex       OPENBLAS_CORETYPE=SkylakeX; Sandybridge's AVX kernels where the CPU has no
#                  AVX-512 (SkylakeX's would stop with an illegal instruction), said in the output
#   none           neither variable
#   prescott       OPENBLAS_CORETYPE=Prescott (SSE3 kernels, other blockings; any x86-64)
#   gemm-openblas  VITRINE_GEMM=openblas (the machine's OpenBLAS variables as they are)
#   gemm-own       VITRINE_GEMM=own
# The tests, by name (TEST_ENV_REGEX): imports and every parity with PyTorch, torchvision and
# timm, what must hold bit for bit (threads, chunks, seeds, resumed runs, the command line
# against the library, one path against another), data-parallel ranks against one process.
set -uo pipefail
build=${1:?usage: scripts/test-env.sh BUILD [haswell-l2|skylakex|none|prescott|gemm-openblas|gemm-own ...]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(haswell-l2 skylakex none prescott gemm-openblas gemm-own)
regex=${TEST_ENV_REGEX:-'import|parity|PyTorch|torchvision|timm|bit|identical|exact|resume|same seed|seeded|chunk|thread|dist: |rank|mpirun|one process|same maps|reproduces|equals|same result'}
unset_blas=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
status=0
for name in "${names[@]}"; do
  case $name in
    haswell-l2) envs=("${unset_blas[@]}" OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512) ;;
    skylakex)
      if grep -qw avx512f /proc/cpuinfo; then
        envs=("${unset_blas[@]}" OPENBLAS_CORETYPE=SkylakeX)
      else
        echo "test-env skylakex: this CPU has no AVX-512, where SkylakeX's kernels stop with an" \
          "illegal instruction: OPENBLAS_CORETYPE=Sandybridge (AVX) in their place"
        envs=("${unset_blas[@]}" OPENBLAS_CORETYPE=Sandybridge)
      fi
      ;;
    none) envs=("${unset_blas[@]}") ;;
    prescott) envs=("${unset_blas[@]}" OPENBLAS_CORETYPE=Prescott) ;;
    gemm-openblas) envs=(VITRINE_GEMM=openblas) ;;
    gemm-own) envs=(VITRINE_GEMM=own) ;;
    *)
      echo "scripts/test-env.sh: unknown environment '$name' (expected haswell-l2, skylakex, none," \
        "prescott, gemm-openblas or gemm-own)" >&2
      exit 2
      ;;
  esac
  shown=$(printf '%s ' "${envs[@]}" | sed -e 's/-u \([A-Z0-9_]*\) /unset \1, /g' -e 's/[ ,]*$//')
  echo "== test-env $name: $shown"
  if ! (cd "$build" && env "${envs[@]}" ctest -R "$regex" -j "$(nproc)" --output-on-failure); then
    echo "== test-env $name: FAILED"
    status=1
  fi
done
exit $status
