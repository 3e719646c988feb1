#!/usr/bin/env bash
# cmake --install lays out the documented tree, and the installed launcher runs a program on
# the installed simulated device under the installed libmemtrace.so.
set -euo pipefail
BUILD=$1
EXAMPLE=$2
PREFIX=$(mktemp -d)
trap 'rm -rf "$PREFIX"' EXIT
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
for f in lib/libmemtrace.so lib/memtrace/sim/libcuda.so.1 lib/memtrace/sim/libcudart.so.13 \
         lib/memtrace/sim/libnccl.so.2 lib/memtrace/deps/libunwind.so.8 lib/memtrace/deps/libdw.so.1 \
         lib/memtrace/deps/libelf.so.1 bin/memtrace; do
  [ -e "$PREFIX/$f" ] || { echo "FAIL: $f missing from the install tree"; exit 1; }
done
# The installed library must find its dependencies beside it, not in the build tree.
if env -u LD_LIBRARY_PATH ldd "$PREFIX/lib/libmemtrace.so" | grep -E "not found|$BUILD"; then
  echo "FAIL: installed libmemtrace.so resolves a dependency outside the install tree"; exit 1
fi
OUT="$PREFIX/out"
"$PREFIX/bin/memtrace" run --sim -o "$OUT/snap-%p.pickle" -- "$EXAMPLE" >/dev/null 2>"$PREFIX/err.txt" || {
  echo "FAIL: the installed launcher failed"; cat "$PREFIX/err.txt"; exit 1; }
ls "$OUT"/snap-*.pickle >/dev/null 2>&1 || { echo "FAIL: no snapshot from the install tree"; cat "$PREFIX/err.txt"; exit 1; }
grep -q "memtrace: summary" "$PREFIX/err.txt" || { echo "FAIL: no summary"; cat "$PREFIX/err.txt"; exit 1; }
echo "install tree OK"
