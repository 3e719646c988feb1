#!/bin/sh
# Writes the golden tests' memtrace snapshots into data/ by running the examples under memtrace on
# the simulated device (run once; the files are committed). BUILD is a build tree with
# lib/libmemtrace.so, lib/memtrace/sim and bin/{leak,runtime_loop,nccl_allreduce}.
#     sh make_memtrace_snapshots.sh BUILD
set -eu
build=$(cd "${1:?usage: make_memtrace_snapshots.sh BUILD}" && pwd)
data=$(cd "$(dirname "$0")" && pwd)/data
run() {  # run OUT PROGRAM [VAR=VALUE...]
  out=$1 prog=$2
  shift 2
  env -u LD_PRELOAD MEMTRACE_SUMMARY=0 MEMTRACE_OUTPUT="$data/$out" LD_LIBRARY_PATH="$build/lib/memtrace/sim" \
    LD_PRELOAD="$build/lib/libmemtrace.so" "$@" "$build/bin/$prog" > /dev/null
}
run mt_leak.pickle leak
run mt_nccl.pickle nccl_allreduce SIMCUDA_DEVICES=2 RANK=1
# Python frames: two call paths into the driver through ctypes, with the GIL released and held.
env -u LD_PRELOAD MEMTRACE_SUMMARY=0 MEMTRACE_OUTPUT="$data/mt_python.pickle" LD_LIBRARY_PATH="$build/lib/memtrace/sim" \
  LD_PRELOAD="$build/lib/libmemtrace.so" python3 "$data/../../../../tests/process/python_frames.py" > /dev/null
# A ring too small for the run: the oldest entries are dropped (a truncated history).
run mt_loop_truncated.pickle runtime_loop MEMTRACE_MAX_ENTRIES=12
# Three ranks of a job, named without their rank: `memtrace ranks` reads it from the metadata.
mkdir -p "$data/ranks_mt"
for r in 0 1 2; do run "ranks_mt/node-$(echo abc | cut -c$((r + 1))).pickle" leak RANK=$r; done
ls -l "$data"/mt_*.pickle "$data"/ranks_mt
