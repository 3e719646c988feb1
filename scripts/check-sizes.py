#!/usr/bin/env python3
"""Lists the C and C++ files (headers and sources) over 600 lines and the functions over 150 lines.

    scripts/check-sizes.py [--exceptions FILE]

Outside sim/, bench/ and every tests/ folder (their programs may be long: a simulated driver, one
benchmark or test case per file), and outside build*/ and hidden folders. Function extents come
from Universal Ctags (`--kinds-C++=f`, `--fields=+ne`: a definition's first and last line); a
lambda counts as a function of its own, and its lines also count to the function around it.

scripts/size-exceptions.txt names the few that are justified, one a line: a path, or
path:function (the bare name ctags gives, so every overload of it in that file), then the reason.
'#' starts a comment. An exception that matches nothing any more is reported, without failing.

Prints one line per file or function found, and exits 1 when any is not excepted, else 0
(2 when ctags is missing or an exception gives no reason).
"""
import argparse
import os
import shutil
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 150
SKIPPED_DIRS = {"sim", "bench", "tests"}
EXTENSIONS = (".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx", ".inl")


def sources(root):
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIPPED_DIRS and not d.startswith(".")
            and not (dirpath == root and d.startswith("build")))
        for name in sorted(filenames):
            if name.endswith(EXTENSIONS):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def long_functions(root, paths):
    """(path, name, first line, lines) of every function definition over the limit."""
    if not paths:
        return []
    cmd = ["ctags", "--languages=C,C++", "--kinds-C=f", "--kinds-C++=f", "--fields=+ne",
           "-x", "--_xformat=%{end} %{line} %F %N", "-L", "-"]
    out = subprocess.run(cmd, cwd=root, input="\n".join(paths) + "\n", capture_output=True,
                         text=True, check=True).stdout
    found = []
    for row in out.splitlines():
        parts = row.split(" ", 3)
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
            continue  # no end line known (a declaration-like entry)
        end, first, path, name = int(parts[0]), int(parts[1]), parts[2], parts[3]
        lines = end - first + 1
        if lines > MAX_FUNCTION_LINES:
            found.append((path, name, first, lines))
    return found


def read_exceptions(path):
    """{key: reason}; key is 'path' or 'path:function'."""
    allowed = {}
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            text = raw.split("#", 1)[0].strip()
            if not text:
                continue
            key, *reason = text.split(None, 1)
            if not reason:
                print(f"{path}:{number}: '{key}' gives no reason", file=sys.stderr)
                sys.exit(2)
            allowed[key] = reason[0]
    return allowed


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exceptions", default=os.path.join(root, "scripts", "size-exceptions.txt"))
    args = parser.parse_args()
    if shutil.which("ctags") is None:
        print("check-sizes: Universal Ctags (ctags) is needed", file=sys.stderr)
        return 2

    allowed = read_exceptions(args.exceptions)
    used = set()
    failed = False

    def report(key, text):
        nonlocal failed
        if key in allowed:
            used.add(key)
            print(f"{text}  (excepted: {allowed[key]})")
        else:
            failed = True
            print(text)

    paths = sources(root)
    for path in paths:
        n = line_count(os.path.join(root, path))
        if n > MAX_FILE_LINES:
            report(path, f"{path}: {n} lines (file limit {MAX_FILE_LINES})")
    for path, name, first, lines in long_functions(root, paths):
        report(f"{path}:{name}", f"{path}:{first}: {name}: {lines} lines (function limit {MAX_FUNCTION_LINES})")
    for key in sorted(set(allowed) - used):
        print(f"check-sizes: exception '{key}' matches nothing now", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
