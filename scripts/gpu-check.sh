#!/usr/bin/env bash
# Prepared check on a machine with a real NVIDIA GPU (never part of the test suite).
# Uses a carried build folder (BUILD_DIR, default build/) or builds one; runs the examples and,
# when PyTorch is present, examples/pytorch_example.py under memtrace against the real driver,
# and prints memtrace's live total beside the driver's and NVML's figures and the count of
# allocations by owner, and the top owners by bytes (the PyTorch + NCCL run shows torch, nccl, cublas). Bounded: every program runs under `timeout`, the whole under 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/lib/libmemtrace.so" ]; then
  ./scripts/setup.sh || { echo "gpu-check: build failed" >&2; exit 1; }
fi
B="$PWD/$BUILD_DIR"
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"

echo "== machine"
python3 -c 'import sys; print("python", sys.version.split()[0])' 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | head -5
ldd "$B/lib/libmemtrace.so" | sed 's/^/   /'

# The examples need libcudart.so.13 / libnccl.so.2. Where the machine has none, use the
# simulated runtime/NCCL libraries (they reach the *real* driver the way the real runtime does)
# from a folder that does not also hold the simulated libcuda.so.1.
RT="$OUT/runtime"
mkdir -p "$RT"
for lib in libcudart.so.13 libnccl.so.2; do
  if ! ldconfig -p | grep -q "$lib"; then cp "$B/lib/memtrace/sim/$lib" "$RT/"; echo "   using memtrace's $lib (none installed)"; fi
done
export LD_LIBRARY_PATH="$RT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

report() {  # report NAME SNAPSHOT
  python3 - "$1" "$2" <<'PY'
import pickle, sys, collections
name, path = sys.argv[1], sys.argv[2]
try:
    s = pickle.load(open(path, 'rb'))
except Exception as e:
    print(f"   {name}: snapshot unreadable: {e}"); sys.exit(0)
live = collections.Counter()
for seg in s['segments']:
    live[seg['device']] += seg['total_size']
# Owner (trace category) of each address, from its latest alloc / segment_alloc entry.
owner_of, total_by_owner, count_by_owner, py_frames = {}, collections.Counter(), collections.Counter(), 0
for dev in s['device_traces']:
    for e in dev:
        if e['action'] in ('alloc', 'segment_alloc', 'segment_map'):
            cat = e.get('category', 'unknown')
            owner_of[e['addr']] = cat
            if e['action'] != 'alloc':
                continue
            total_by_owner[cat] += e['size']
            count_by_owner[cat] += 1
            if any(f['filename'].endswith('.py') for f in e.get('frames', [])):
                py_frames += 1
live_by_owner = collections.Counter()
for seg in s['segments']:
    addr = seg['address']
    for b in seg['blocks']:
        if b['state'] == 'active_allocated':
            live_by_owner[owner_of.get(addr, 'unknown')] += b['size']
        addr += b['size']
mib = lambda v: f"{v/2**20:.1f} MiB"
print(f"   {name}: memtrace live at exit by device: " + ", ".join(f"dev{d}={mib(v)}" for d, v in sorted(live.items())))
print(f"   {name}: top owners, live at exit: " + ", ".join(f"{k}={mib(v)}" for k, v in live_by_owner.most_common(8)))
print(f"   {name}: top owners, bytes allocated over the run: " +
      ", ".join(f"{k}={mib(v)} in {count_by_owner[k]}" for k, v in total_by_owner.most_common(8)))
print(f"   {name}: allocation entries with Python frames: {py_frames}")
# Which line of the example caused each owner's device memory (issue 11): the innermost frame in
# examples/pytorch_example.py of each driver-level entry, with the owner and the bytes.
by_line = collections.Counter()
for dev in s['device_traces']:
    for e in dev:
        if e['action'] not in ('alloc', 'segment_alloc', 'segment_map'):
            continue
        line = next((f"{f['name']}:{f['line']}" for f in e.get('frames', []) if f['filename'].endswith('pytorch_example.py')), None)
        by_line[(e.get('category', 'unknown'), e['action'], line or 'no example frame')] += e['size']
for (cat, action, line), size in sorted(by_line.items(), key=lambda kv: -kv[1])[:16]:
    print(f"   {name}: {cat:10s} {action:14s} {mib(size):>12s}  from pytorch_example.py {line}")
PY
}

run_one() {  # run_one NAME CMD...
  local name=$1; shift
  echo "== $name"
  MEMTRACE_OUTPUT="$OUT/$name-%p.pickle" timeout 120 "$B/bin/memtrace" run -- "$@" 2>&1 | tail -25
  local snap
  snap=$(ls -t "$OUT"/"$name"-*.pickle 2>/dev/null | head -1)
  [ -n "$snap" ] && report "$name" "$snap"
  [ -n "$snap" ] && timeout 60 "$B/bin/memtrace" summary "$snap" 2>&1 | head -30 | sed 's/^/   | /'
}

run_one leak "$B/bin/leak"
run_one runtime_loop "$B/bin/runtime_loop"
run_one vmm "$B/bin/vmm"
run_one nccl_allreduce "$B/bin/nccl_allreduce"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  run_one pytorch python3 examples/pytorch_example.py
  NCCL_CUMEM_ENABLE=0 run_one pytorch_nocumem python3 examples/pytorch_example.py
else
  echo "== pytorch: not installed or no CUDA; skipped"
fi
echo "== done: snapshots in $OUT"
