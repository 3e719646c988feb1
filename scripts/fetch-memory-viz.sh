#!/usr/bin/env bash
# Fetches PyTorch's own snapshot reader, torch/cuda/_memory_viz.py, from Debian's python3-torch
# package (trixie), for the test that runs it on memtrace's snapshots (tests/consumers/), and
# PyTorch's viewer, torch/utils/viz/MemoryViz.js, from the same release's source package (the
# binary package leaves it out), for the test that opens snapshots in it (tests/browser/). The
# packages are downloaded with a private sources list and state folder and only unpacked; nothing
# is installed, and only those two files are kept, under DEST:
#     fetch-memory-viz.sh DEST      (default build/memory_viz)
set -euo pipefail
dest="${1:-build/memory_viz}"
[ -f "$dest/_memory_viz.py" ] && [ -f "$dest/MemoryViz.js" ] && exit 0
MIRROR="${MEMTRACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
printf 'deb [trusted=yes] %s trixie main\ndeb-src [trusted=yes] %s trixie main\n' "$MIRROR" "$MIRROR" > "$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
      -o "Dir::State=$work" -o "Dir::State::Lists=$work/lists" -o "Dir::State::status=/dev/null"
      -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1" -o "APT::Get::AllowUnauthenticated=1")
apt-get "${opts[@]}" update -qq >"$work/update.log" 2>&1 || { echo "fetch-memory-viz: apt-get update failed" >&2; exit 1; }
(cd "$work/deb" && apt-get "${opts[@]}" download python3-torch >"$work/download.log" 2>&1) ||
  { echo "fetch-memory-viz: could not download python3-torch" >&2; exit 1; }
dpkg -x "$work"/deb/python3-torch_*.deb "$work/x"
src="$(find "$work/x" -path '*/torch/cuda/_memory_viz.py' | head -1)"
[ -n "$src" ] || { echo "fetch-memory-viz: python3-torch has no torch/cuda/_memory_viz.py" >&2; exit 1; }
mkdir -p "$dest"
cp "$src" "$dest/_memory_viz.py"
dpkg-deb -f "$work"/deb/python3-torch_*.deb Version > "$dest/VERSION"
echo "fetch-memory-viz: PyTorch's _memory_viz.py $(cat "$dest/VERSION") in $dest"
# The viewer: only the source package has it (about 27 MB; only the one file is unpacked).
(cd "$work/deb" && apt-get "${opts[@]}" source --download-only pytorch >"$work/source.log" 2>&1) ||
  { echo "fetch-memory-viz: could not download pytorch's source package (see apt-get source)" >&2; exit 1; }
orig="$(ls "$work"/deb/pytorch_*.orig.tar.* 2>/dev/null | head -1)"
[ -n "$orig" ] || { echo "fetch-memory-viz: pytorch's source package has no orig tarball" >&2; exit 1; }
mkdir -p "$work/src"
tar -xf "$orig" -C "$work/src" --wildcards '*/torch/utils/viz/MemoryViz.js' ||
  { echo "fetch-memory-viz: pytorch's source has no torch/utils/viz/MemoryViz.js" >&2; exit 1; }
cp "$(find "$work/src" -name MemoryViz.js | head -1)" "$dest/MemoryViz.js"
echo "fetch-memory-viz: PyTorch's MemoryViz.js $(cat "$dest/VERSION") in $dest"
