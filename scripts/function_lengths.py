#!/usr/bin/python3
"""The longest functions of the C++ sources, by a brace matcher (issue 62, item 7: no function
over 120 lines outside the kernels and the tests).

    /usr/bin/python3 scripts/function_lengths.py                 # over 120 lines, exit 1 if any
    /usr/bin/python3 scripts/function_lengths.py --limit 80 --top 20 explain

A function is a brace block at namespace or class scope whose header (the text since the last
`;`, `{` or `}` there) ends with its parameter list `)` and optional qualifiers (const, noexcept,
override, a trailing return type) or a constructor's initialiser list; control statements,
lambdas and brace initialisers are not. Comments, strings, characters and raw strings are blanked
first, so their braces do not count. Its length runs from the line of its name to its closing
brace. Default folders: the library's (autograd, ops, nn, models, backends without its kernel
folders cpu/ and cuda/), the libraries over it (explain, train, common) and tools/; tests/ and the
kernels are left out.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIRS = ["autograd", "ops", "nn", "models", "backends", "explain", "train", "common",
                "tools"]
EXCLUDED = ["backends/cpu", "backends/cuda", "tests"]
SUFFIXES = (".cpp", ".h", ".cc", ".hpp", ".cu", ".cuh", ".inc")

CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")
CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s+\"C\"\s*$")
QUALIFIERS = r"(\s*(const|noexcept(\s*\([^()]*\))?|override|final|mutable|volatile|&|&&|" \
             r"->\s*[\w:<>,\s*&]+|requires\s+[^{]+))*\s*$"
FUNCTION = re.compile(r"(~?[A-Za-z_][\w:]*|operator\s*\S+)\s*\((?:[^()]|\([^()]*\))*\)" + QUALIFIERS)
INIT_LIST = re.compile(r"\)\s*(noexcept\s*)?:\s*[\w:]+\s*[({].*[)}]\s*$", re.S)


def blank(text):
    """text with comments, strings and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j])); i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" "); i += 1; continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path):
    """(name, first line, length in lines) of each function defined at namespace or class scope."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    text = re.sub(r"^\s*#.*(\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.M)
    found, stack = [], []  # stack: "container", "function" or "other" per open brace
    start = 0  # where the current header began
    i = 0
    while i < len(text):
        c = text[i]
        if c in ";":
            start = i + 1
        elif c == "{":
            header = text[start:i]
            inside_function = "function" in stack or "other" in stack
            kind = "other"
            h = header.strip()
            if not inside_function:
                if CONTAINER.search(h) and "(" not in h.split("{")[-1]:
                    kind = "container"
                elif (FUNCTION.search(h) or INIT_LIST.search(h)) and not CONTROL.search(
                        h.split("(")[0]) and not re.search(r"=\s*$|\]\s*(\(.*\))?[^)]*$", h):
                    kind = "function"
            if kind == "function":
                m = None
                for m in re.finditer(r"(~?[A-Za-z_][\w:]*|operator\s*[^\s(]+)\s*\(", h):
                    break  # the first name followed by ( is the function's (after its return type)
                name = m.group(1) if m else "?"
                first = text.count("\n", 0, start + len(header) - len(header.lstrip())) + 1
                if m:
                    first = text.count("\n", 0, text.find(m.group(0), start)) + 1
                stack.append(("function", name, first))
            else:
                stack.append((kind, None, None))
            start = i + 1
        elif c == "}":
            if stack:
                kind, name, first = stack.pop()
                if kind == "function":
                    found.append((name, first, text.count("\n", 0, i) + 1 - first + 1))
            start = i + 1
        i += 1
    return found


def sources(dirs):
    for d in dirs:
        top = os.path.join(ROOT, d)
        if os.path.isfile(top):
            yield top
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            rel = os.path.relpath(dirpath, ROOT)
            dirnames[:] = [x for x in sorted(dirnames)
                           if os.path.join(rel, x) not in EXCLUDED and x != "proto"]
            for f in sorted(filenames):
                if f.endswith(SUFFIXES):
                    yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS, help="folders or files, from the root")
    ap.add_argument("--limit", type=int, default=120, help="report functions longer than this")
    ap.add_argument("--top", type=int, default=0, help="also list the N longest")
    args = ap.parse_args()
    rows = []
    for path in sources(args.dirs):
        for name, first, length in functions(path):
            rows.append((length, os.path.relpath(path, ROOT), first, name))
    rows.sort(reverse=True)
    over = [r for r in rows if r[0] > args.limit]
    for length, path, line, name in over:
        print(f"{length:5d}  {path}:{line}  {name}")
    if args.top:
        print(f"\nthe {args.top} longest:")
        for length, path, line, name in rows[:args.top]:
            print(f"{length:5d}  {path}:{line}  {name}")
    print(f"\n{len(rows)} functions, {len(over)} over {args.limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
