#!/usr/bin/env bash
# Compiles every C++ source of a build (its compile_commands.json, CUDA files aside) with clang++
# in syntax-only mode, warnings as errors: the tree must build with clang 14 as well as GCC 12,
# with zero warnings on both. Run by the suite (tests/CMakeLists.txt) when clang++ is installed.
#   scripts/check-clang.sh BUILD_DIR
set -euo pipefail
build=$1
clang=$(command -v clang++-14 || command -v clang++)
/usr/bin/env python3 - "$build/compile_commands.json" "$clang" <<'PY' > "$build/clang-check.cmds"
import json, shlex, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    f = e["file"]
    if not f.endswith(".cpp") or "/_deps/" in f or "CMakeFiles" in f:
        continue
    args = shlex.split(e["command"]) if "command" in e else e["arguments"]
    if "nvcc" in args[0]:
        continue
    # drop the output file; clang's OpenMP is libomp
    out = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith("-fopenmp"):
            a = "-fopenmp=libomp" if a == "-fopenmp" else a
        out.append(a)
    print(e["directory"] + "\t" + " ".join(shlex.quote(x) for x in
          [sys.argv[2], "-fsyntax-only", "-Werror", "-Wno-unused-command-line-argument"] + out))
PY
n=$(wc -l < "$build/clang-check.cmds")
status=0
while IFS=$'\t' read -r dir cmd; do
  printf '%s\0%s\0' "$dir" "$cmd"
done < "$build/clang-check.cmds" |
  xargs -0 -n 2 -P "$(nproc)" sh -c 'cd "$0" && eval "$1"' || status=1
[ $status -eq 0 ] && echo "clang: $n sources compile without a warning ($clang)"
exit $status
