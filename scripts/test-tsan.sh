#!/usr/bin/env bash
# The unit tests that start threads, again, on a build instrumented with ThreadSanitizer, into
# ${TSAN_BUILD_DIR:-build-tsan}. Run by .ci/run after scripts/test-sanitizers.sh; only the test
# programs below and what they link are built (6.5 minutes from a clean folder on 2 cores, the
# tests half a minute of it).
#
#   core_tests        the recorder from ten threads while another dumps; a dump while the ring wraps;
#                     SleepingLock from four threads
#   caching_tests     eight threads on one caching allocator; hits and frees during a synchronize
#   sim_driver_tests  the simulated driver from eight threads; contexts seen from other threads
#                     (and its [fork] cases, ctest's sim_driver_fork_tests: fork beside busy threads)
#   sim_nccl_tests    one thread per rank
#   unwind_tests      the stack table from eight threads; prepare()'s symbolizing threads
#   reader_tests      slow writers on a thread feeding a FIFO or pipe
#
# The threads only note what they see; the test's own thread asserts it after joining them
# (Catch2's assertions are not thread-safe). Two reads race on purpose, and are told so:
#   - Recorder::copy_state copies the trace ring without its lock and keeps only the entries no
#     push can have reached (core/trace_ring.cpp, core/sanitizer.hpp);
#   - the Python frame walk reads interpreter memory other threads write, every value checked
#     afterwards (unwind/readable_memory.hpp).
# The recorder's unlocked look at the registry's size, to size its buffers, is a relaxed atomic
# (core/addr_map.hpp), not an exception.
#
# Left out:
#   process.*, install_layout, replay.*
#                   whole programs (memtrace preloaded into test programs, Python, the installed
#                   CLI), not unit tests; under ASan/UBSan in scripts/test-sanitizers.sh
#   output_tests, sim_runtime_tests, analysis_tests, analysis_golden, reader_corpus,
#   unwind_python_layout
#                   start no thread (no CLONE_THREAD under strace -f; the CLI has none), so
#                   ThreadSanitizer has nothing to look at there
set -euo pipefail
cd "$(dirname "$0")/.."
TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-build-tsan}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
tests=(core_tests caching_tests sim_driver_tests sim_nccl_tests unwind_tests reader_tests)
names=("${tests[@]}" sim_driver_fork_tests)  # ctest's entries: one program may have two
cmake -S . -B "$TSAN_BUILD_DIR" -DCUDA_HOME="$CUDA_HOME" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DMEMTRACE_SANITIZE=thread >/dev/null
cmake --build "$TSAN_BUILD_DIR" -j"$(nproc)" --target "${tests[@]}"
# A report fails the test; the second stack shows where a lock in a reported cycle was taken.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
ctest --test-dir "$TSAN_BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 600 \
      -R "^($(IFS='|'; echo "${names[*]}"))\$"
