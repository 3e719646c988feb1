#!/usr/bin/env python3
"""Checks the CPython layouts memtrace reads without the GIL against each version's own headers:
compiles unwind/tests/python_layout_check.c once per version (3.11 to 3.14) whose headers this
machine has, and runs it. Headers are looked for in the machine's interpreters (pyenv,
/usr/include) and in the Debian packages scripts/fetch-pythons.sh unpacks under the build tree.

Fails on any mismatch; a version without headers is reported as not checked (for 3.13 and 3.14 a
failure when MEMTRACE_REQUIRE_PYTHONS=1, as in CI); exits 77 (skipped) when no version could be
checked at all."""
import argparse
import glob
import os
import subprocess
import sys


def include_dirs(version, pythons_dir):
    """Candidate -I lists for CPython <version>, best first."""
    cands = []
    root = os.path.join(pythons_dir, version)
    deb = os.path.join(root, "usr", "include", f"python{version}")
    if os.path.isfile(os.path.join(deb, "internal", "pycore_frame.h")):
        cands.append([deb, os.path.join(root, "usr", "include")])
    for d in sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/include/python{version}"))) + \
            [f"/usr/include/python{version}"]:
        if os.path.isfile(os.path.join(d, "internal", "pycore_frame.h")):
            cands.append([d, "/usr/include"])
    return cands


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--pythons-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    src = os.path.join(args.source_dir, "unwind", "tests", "python_layout_check.c")
    checked, failed, missing = [], [], []
    for version in ("3.11", "3.12", "3.13", "3.14"):
        dirs = include_dirs(version, args.pythons_dir)
        if not dirs:
            missing.append(version)
            continue
        for incs in dirs:
            exe = os.path.join(args.work_dir, f"layout_check_{version}_{len(checked) + len(failed)}")
            cmd = [args.cc, f"-DMT_CHECK_MINOR={version.split('.')[1]}", "-I", args.source_dir]
            for d in incs:
                cmd += ["-I", d]
            cmd += [src, "-o", exe]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                failed.append(f"{version} ({incs[0]}): does not compile:\n{p.stderr[-3000:]}")
                continue
            p = subprocess.run([exe], capture_output=True, text=True)
            if p.returncode != 0:
                failed.append(f"{version} ({incs[0]}): {p.stdout}{p.stderr}")
            else:
                checked.append(f"{version} against {incs[0]}")
    for c in checked:
        print(f"checked: {c}")
    for m in missing:
        print(f"not checked: no CPython {m} headers on this machine")
    require = os.environ.get("MEMTRACE_REQUIRE_PYTHONS") == "1"
    if require:
        for m in missing:
            if m in ("3.13", "3.14"):
                failed.append(f"{m}: headers missing (run scripts/fetch-pythons.sh); CI must not skip")
    for f in failed:
        print(f"FAIL: {f}")
    if failed:
        return 1
    if not checked:
        print("SKIP: no CPython headers found")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
