#!/usr/bin/env bash
# The main job: set up, build, and run an example program on the simulated device under
# memtrace. Prints memtrace's summary and the snapshot's path.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
out="$PWD/$BUILD_DIR/demo"
mkdir -p "$out"
"$BUILD_DIR/bin/memtrace" run --sim -o "$out/leak-%p.pickle" -- "$BUILD_DIR/bin/leak"
echo "open the snapshot at https://pytorch.org/memory_viz (drag the .pickle file in): $(ls -t "$out"/leak-*.pickle | head -1)"
