#!/usr/bin/env bash
# Installs what memtrace needs (Debian packages; the CUDA toolkit must already be under
# $CUDA_HOME, default /usr/local/cuda — only its headers are used) and builds it into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

# man-db, groff-base and bash-completion: the tests render the installed man pages and load the
# installed completion the way a user's shell does (docs/tests/).
PACKAGES=(build-essential cmake python3 libunwind-dev libfmt-dev libspdlog-dev catch2
          libdw-dev libelf-dev libdeflate-dev zlib1g-dev liblzma-dev libbz2-dev patchelf binutils universal-ctags
          man-db groff-base bash-completion)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#missing[@]})); then
  echo "memtrace setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# For the browser tests (tests/browser/, report/web/tests/) and the HTML report's chart libraries
# (npm): Chromium, and node with npm where the machine has none of its own (a NodeSource node
# brings its npm). Checked by command, so a Node.js installed some other way is kept. Without them
# the browser tests say skipped and `memtrace report` says its assets are missing.
browser=()
dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed" || browser+=(chromium)
command -v node >/dev/null 2>&1 || browser+=(nodejs)
command -v npm >/dev/null 2>&1 || browser+=(npm)
if ((${#browser[@]})); then
  echo "memtrace setup: installing ${browser[*]} (for the browser tests)" >&2
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${browser[@]}" >/dev/null; } ||
    echo "memtrace setup: warning: could not install ${browser[*]}; the browser tests will skip" >&2
fi

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "memtrace setup: no CUDA toolkit headers at $CUDA_HOME/include (set CUDA_HOME)" >&2
  exit 1
fi

# The report's libraries, at the versions report/web/package-lock.json pins, before CMake looks for
# them. Skipped when that lock file is what was installed last. Offline, npm ci serves what its
# cache holds; failing that, the build goes on and `memtrace report` says its assets are missing.
lock=report/web/package-lock.json
stamp=report/web/node_modules/.memtrace-installed-lock
if ! cmp -s "$lock" "$stamp" 2>/dev/null; then
  log="${TMPDIR:-/tmp}/memtrace-npm-ci.log"
  if (cd report/web && npm ci --prefer-offline --no-audit --no-fund --loglevel=error \
        --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 --fetch-timeout=30000) >"$log" 2>&1; then
    cp "$lock" "$stamp"
  else
    echo "memtrace setup: could not install the report's chart libraries (npm ci in report/web failed, offline? see $log): memtrace report will say its assets are missing" >&2
  fi
fi

BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCUDA_HOME="$CUDA_HOME" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

# Real CPython 3.13 and 3.14 (Debian's packages, unpacked, not installed) for the Python-frame tests.
# Without a network they cannot be fetched: those tests then say skipped and why (CI, which sets
# MEMTRACE_REQUIRE_PYTHONS=1, fails instead).
./scripts/fetch-pythons.sh "$BUILD_DIR/pythons" || echo "memtrace setup: some Python interpreters could not be fetched; their tests will skip" >&2

# PyTorch's own snapshot reader, torch/cuda/_memory_viz.py, from Debian's python3-torch (unpacked,
# not installed), for the test that runs it on memtrace's snapshots (tests/consumers/).
./scripts/fetch-memory-viz.sh "$BUILD_DIR/memory_viz" ||
  echo "memtrace setup: warning: PyTorch's _memory_viz.py could not be fetched; its test will skip" >&2

# The npm packages of the browser tests (the real speedscope app, playwright-core), exactly as
# tests/browser/package-lock.json pins them, into $BUILD_DIR/browser. Without the npm registry
# those tests say skipped (CI, which sets MEMTRACE_REQUIRE_BROWSER=1, fails instead).
./scripts/fetch-browser-deps.sh "$BUILD_DIR/browser" ||
  echo "memtrace setup: warning: the browser tests' npm packages could not be installed; those tests will skip" >&2
