#!/usr/bin/env bash
# Runs each fuzz target (built by `make fuzz` in BUILD with VITRINE_FUZZ=ON) for SECONDS from its
# seeds: the files fuzz_make_seeds writes (valid files made by the library, the image fixtures, the
# training configs) and the kept findings (tests/fuzz/regressions). The corpus grows in BUILD/fuzz-corpus/<target>; a crash,
# sanitizer report, leak, timeout or out-of-memory input is saved in BUILD/fuzz-findings/<target>/
# and fails the run (keep it in tests/fuzz/regressions/<target>/ once fixed).
#   scripts/fuzz.sh BUILD SECONDS TARGET...
set -uo pipefail
build=$1 seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
"$build/tests/fuzz/fuzz_make_seeds" "$build/fuzz-seeds" "$root" || exit 1
failed=()
for t in "$@"; do
  seeds=("$build/fuzz-seeds/$t")
  [ -d "$root/tests/fuzz/regressions/$t" ] && seeds+=("$root/tests/fuzz/regressions/$t")
  corpus="$build/fuzz-corpus/$t" findings="$build/fuzz-findings/$t"
  mkdir -p "$corpus" "$findings"
  echo "== fuzz_$t for ${seconds}s (seeds: ${seeds[*]})"
  if ! "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
      -max_len=1048576 -print_final_stats=1 -artifact_prefix="$findings/" \
      "$corpus" "${seeds[@]}" > "$build/fuzz-$t.log" 2>&1; then
    failed+=("$t")
    tail -40 "$build/fuzz-$t.log"
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz-$t.log" |
    tr '\n' ' '
  echo
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs under $build/fuzz-findings)"
  exit 1
fi
echo "fuzz: $# targets, ${seconds}s each: no crash, no sanitizer report, no leak"
