#!/bin/sh
# Builds the reader's libFuzzer target with clang++ (-fsanitize=fuzzer,address,undefined) and runs
# it at low priority on one job:
#   cli/fuzz/build_and_run.sh [WORK_DIR] [SECONDS] [FUZZER_OPTION ...]   (defaults: /tmp/memtrace-fuzz, 1200)
# Options after SECONDS go to the fuzzer as they are, e.g. -runs=20000 for a short check.
# New inputs go to WORK_DIR/corpus (the committed seeds in cli/fuzz/corpus are only read); crashes,
# leaks and timeouts to WORK_DIR/artifacts/; the fuzzer's log to WORK_DIR/fuzz-0.log. To keep a
# finding, minimise it (fuzz_reader -minimize_crash=1 ...) and copy it into cli/fuzz/corpus.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-/tmp/memtrace-fuzz}
secs=${2:-1200}
[ $# -gt 2 ] && shift 2 || set --
mkdir -p "$work/corpus" "$work/artifacts"
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" "$here/fuzz_reader.cpp" "$root"/cli/reader/pickle_vm*.cpp "$root"/cli/reader/snapshot_decoder*.cpp \
  "$root/cli/reader/snapshot.cpp" "$root/cli/reader/consistency.cpp" -o "$work/fuzz_reader"
cd "$work"
exec nice -n 10 ./fuzz_reader -jobs=1 -workers=1 -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=10 -dict="$here/pickle.dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
  "$@" "$work/corpus" "$here/corpus"
