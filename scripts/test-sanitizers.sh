#!/usr/bin/env bash
# The unit and process tests again, on a build instrumented with AddressSanitizer and
# UndefinedBehaviorSanitizer (libmemtrace.so, the simulated device and the test programs alike),
# into ${ASAN_BUILD_DIR:-build-asan}. Run by .ci/run after scripts/test.sh (which has installed what
# is needed, fetched the interpreters into build/pythons and the browser tests' npm packages into
# build/browser, both reused here).
#
# Programs memtrace is preloaded into are not instrumented themselves (Python, the shell), so the
# sanitizer's runtime goes first in LD_PRELOAD: the process tests put it there
# (MEMTRACE_TEST_PRELOAD_FIRST), and `memtrace run` keeps a leading sanitizer runtime first. The
# runtime looks its own functions up with dlsym before anything else is initialised, and memtrace
# exports dlsym: that path is uninstrumented and reads only constant data (see
# preload/hooks_resolver.cpp).
#
# Left out, each for a reason that is the sanitizer's and not a defect:
#   process.stack_paths           instrumented code gets compiler clones (alloc_here.constprop.0)
#                                 whose names the case checks exactly
#   process.signal_fault_refused  the test program faults on purpose (a store through NULL), which
#                                 UBSan reports before the signal can be raised
#   process.glue_dlsym            dlsym(RTLD_NEXT, "malloc") finds the sanitizer's malloc, rightly
#   process.secure_execution      a setuid program does not load the sanitizer from LD_PRELOAD
#   process.deep_bind             the sanitizer's runtime refuses dlopen(RTLD_DEEPBIND) outright
#   process.state_segv process.state_run_recovers  the program faults on purpose and must die by
#                                 SIGSEGV; the sanitizer's own SEGV handler reports it and exits 1
#   process.cli_* process.example_* process.caching_example install_layout consumer_memory_viz browser_report_pages
#   browser_memory_viz
#                                 run programs of the installed tree, built without the runtime
#                                 in front; covered by the same programs' direct cases
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
ASAN_BUILD_DIR="${ASAN_BUILD_DIR:-build-asan}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
cmake -S . -B "$ASAN_BUILD_DIR" -DCUDA_HOME="$CUDA_HOME" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DMEMTRACE_SANITIZE=address,undefined >/dev/null
cmake --build "$ASAN_BUILD_DIR" -j"$(nproc)"
if [ -d "$BUILD_DIR/pythons" ] && [ ! -e "$ASAN_BUILD_DIR/pythons" ]; then
  ln -s "$(cd "$BUILD_DIR/pythons" && pwd)" "$ASAN_BUILD_DIR/pythons"
fi
if [ -d "$BUILD_DIR/memory_viz" ] && [ ! -e "$ASAN_BUILD_DIR/memory_viz" ]; then
  ln -s "$(cd "$BUILD_DIR/memory_viz" && pwd)" "$ASAN_BUILD_DIR/memory_viz"
fi
if [ -d "$BUILD_DIR/browser" ] && [ ! -e "$ASAN_BUILD_DIR/browser" ]; then
  ln -s "$(cd "$BUILD_DIR/browser" && pwd)" "$ASAN_BUILD_DIR/browser"
fi
runtime="$(readlink -f "$(gcc -print-file-name=libasan.so)")"
export MEMTRACE_TEST_PRELOAD_FIRST="$runtime"
# Leaks: memtrace keeps its tables for the life of the process on purpose (they are read at exit).
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$ASAN_BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 300 \
      -E '^(process\.(stack_paths|signal_fault_refused|state_segv|state_run_recovers|glue_dlsym|secure_execution|deep_bind|cli_.*|example_.*|caching_example)|install_layout|consumer_memory_viz|browser_report_pages|browser_memory_viz)$'
