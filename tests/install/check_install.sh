#!/usr/bin/env bash
# cmake --install lays out the documented tree, and the installed launcher runs a program on
# the installed simulated device under the installed libmemtrace.so. The public API's files are
# there too: a C program (api_client.c) builds against the installed tree with pkg-config and with
# find_package(memtrace), and runs with and without the installed library preloaded; the Python
# module imports under `memtrace run`.
# usage: check_install.sh BUILD_DIR EXAMPLE SOURCE_DIR C_COMPILER
set -euo pipefail
BUILD=$1
EXAMPLE=$2
SOURCE=$(cd "$3" && pwd)
CC=$4
PREFIX=$(mktemp -d)
trap 'rm -rf "$PREFIX"' EXIT
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
for f in lib/libmemtrace.so lib/memtrace/sim/libcuda.so.1 lib/memtrace/sim/libcudart.so.13 \
         lib/memtrace/sim/libnccl.so.2 lib/memtrace/deps/libunwind.so.8 lib/memtrace/deps/libdw.so.1 \
         lib/memtrace/deps/libelf.so.1 bin/memtrace \
         include/memtrace/memtrace.h include/memtrace/memtrace_v1.h lib/libmemtrace_api.a \
         lib/pkgconfig/memtrace.pc lib/cmake/memtrace/memtraceConfig.cmake \
         lib/cmake/memtrace/memtraceConfigVersion.cmake lib/memtrace/python/memtrace/__init__.py; do
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

# --- the public API, from the install tree only -----------------------------------------------
CLIENT_SRC="$SOURCE/tests/install/api_client.c"
WORK="$PREFIX/consumer"
mkdir -p "$WORK/cmake" "$WORK/cmake-build"
# pkg-config, with the .pc file found where it was installed (its prefix follows it).
PC_FLAGS=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs memtrace) || {
  echo "FAIL: pkg-config does not know memtrace"; exit 1; }
case "$PC_FLAGS" in *"$BUILD"*) echo "FAIL: memtrace.pc points into the build tree: $PC_FLAGS"; exit 1;; esac
# shellcheck disable=SC2086  # the flags are words
"$CC" -o "$WORK/api_pkgconfig" "$CLIENT_SRC" $PC_FLAGS || { echo "FAIL: api_client.c does not build with pkg-config"; exit 1; }
# find_package(memtrace) and the target memtrace::api.
cat > "$WORK/cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(api_consumer C)
find_package(memtrace 0.1 REQUIRED)
add_executable(api_cmake "$CLIENT_SRC")
target_link_libraries(api_cmake PRIVATE memtrace::api)
CMAKE
cmake -S "$WORK/cmake" -B "$WORK/cmake-build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
  >"$WORK/cmake.log" 2>&1 && cmake --build "$WORK/cmake-build" >>"$WORK/cmake.log" 2>&1 || {
  echo "FAIL: api_client.c does not build with find_package(memtrace)"; cat "$WORK/cmake.log"; exit 1; }
if grep -rq "$BUILD" "$WORK/cmake-build/CMakeFiles/api_cmake.dir/link.txt"; then
  echo "FAIL: find_package(memtrace) links from the build tree"; exit 1
fi

SIM="$PREFIX/lib/memtrace/sim"
for prog in "$WORK/api_pkgconfig" "$WORK/cmake-build/api_cmake"; do
  name=$(basename "$prog")
  # Without memtrace: each call says MEMTRACE_NOT_LOADED (1), and the program runs to its end.
  env -u LD_PRELOAD LD_LIBRARY_PATH="$SIM" "$prog" "$WORK/none.pickle" "$WORK/none2.pickle" >"$WORK/$name.plain" 2>&1 || {
    echo "FAIL: $name without memtrace"; cat "$WORK/$name.plain"; exit 1; }
  grep -q "^STAT loaded 0$" "$WORK/$name.plain" && grep -q "^STATUS push_outer 1$" "$WORK/$name.plain" &&
    grep -q "^STATUS dump_explicit 1$" "$WORK/$name.plain" && grep -q "^DONE$" "$WORK/$name.plain" || {
    echo "FAIL: $name without memtrace: expected MEMTRACE_NOT_LOADED"; cat "$WORK/$name.plain"; exit 1; }
  [ ! -e "$WORK/none.pickle" ] || { echo "FAIL: $name wrote a snapshot without memtrace"; exit 1; }
  # With the installed library preloaded: the calls work and memtrace_dump(path) writes there.
  SNAP="$WORK/$name-asked.pickle"
  LD_PRELOAD="$PREFIX/lib/libmemtrace.so" LD_LIBRARY_PATH="$SIM" MEMTRACE_OUTPUT="$WORK/$name-exit-%p.pickle" \
    "$prog" "$SNAP" "$WORK/$name-asked.pickle/x.pickle" >"$WORK/$name.traced" 2>"$WORK/$name.err" || {
    echo "FAIL: $name with memtrace"; cat "$WORK/$name.traced" "$WORK/$name.err"; exit 1; }
  for want in "STAT loaded 1" "STATUS push_outer 0" "STATUS pop_inner 0" "STATUS pop_extra 4" "STATUS annotate 0" \
              "STATUS stats 0" "STATUS dump_explicit 0" "STATUS dump_unwritable 5" "DUMPED explicit $SNAP" \
              "STAT errno_kept 1" "DONE"; do
    grep -qxF "$want" "$WORK/$name.traced" || {
      echo "FAIL: $name with memtrace: no line '$want'"; cat "$WORK/$name.traced" "$WORK/$name.err"; exit 1; }
  done
  python3 "$SOURCE/output/tests/check_snapshot.py" "$SNAP" >"$WORK/$name.check" 2>&1 || {
    echo "FAIL: the snapshot memtrace_dump wrote at $SNAP is not valid"; cat "$WORK/$name.check"; exit 1; }
  # The range pushed through the API is on the allocation made inside it (docs/ranges.md).
  python3 - "$SNAP" "$WORK/$name.traced" <<'PY' || exit 1
import os, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
labels = {}
for line in open(sys.argv[2]):
    f = line.split()
    if f[:1] == ["LABEL"]:
        labels[f[1]] = int(f[2], 16)
reason = snap.get("allocator_settings", {}).get("memtrace", {}).get("reason")
if reason != "api":
    sys.exit(f"FAIL: {sys.argv[1]}: reason {reason!r}, expected 'api'")
if os.environ.get("MEMTRACE_TEST_RANGES_PENDING") == "1":
    print("  range check left out: MEMTRACE_TEST_RANGES_PENDING=1 (no range implementation yet)")
    sys.exit(0)
allocs = {e["addr"]: e for t in snap["device_traces"] for e in t if e.get("action") == "alloc"}
for label, want in (("in_inner", ["outer", "inner"]), ("in_outer", ["outer"]), ("outside", [])):
    got = allocs.get(labels.get(label), {}).get("ranges", [])
    if got != want:
        sys.exit(f"FAIL: {sys.argv[1]}: {label} has ranges {got}, expected {want}")
PY
done

# The Python module: `memtrace run` makes it importable (appended to PYTHONPATH) and it finds the library.
PY_OUT=$(PYTHONPATH=/somewhere/else "$PREFIX/bin/memtrace" run --sim --no-summary -o "$WORK/py-%p.pickle" -- \
  python3 -c 'import memtrace, os; print(memtrace.__file__, memtrace.is_loaded(), memtrace.is_recording(), os.environ["PYTHONPATH"])') || {
  echo "FAIL: import memtrace under the installed memtrace run"; exit 1; }
[ "$PY_OUT" = "$PREFIX/lib/memtrace/python/memtrace/__init__.py True True /somewhere/else:$PREFIX/lib/memtrace/python" ] || {
  echo "FAIL: import memtrace under memtrace run: $PY_OUT"; exit 1; }
echo "install tree OK"
