#!/usr/bin/env bash
# Installs what memtrace needs (Debian packages; the CUDA toolkit must already be under
# $CUDA_HOME, default /usr/local/cuda — only its headers are used) and builds it into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake python3 libunwind-dev libfmt-dev libspdlog-dev catch2
          libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev patchelf binutils universal-ctags)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "memtrace setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "memtrace setup: no CUDA toolkit headers at $CUDA_HOME/include (set CUDA_HOME)" >&2
  exit 1
fi

BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCUDA_HOME="$CUDA_HOME" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

# Real CPython 3.13 and 3.14 (Debian's packages, unpacked, not installed) for the Python-frame tests.
# Without a network they cannot be fetched: those tests then say skipped and why (CI, which sets
# MEMTRACE_REQUIRE_PYTHONS=1, fails instead).
./scripts/fetch-pythons.sh "$BUILD_DIR/pythons" || echo "memtrace setup: some Python interpreters could not be fetched; their tests will skip" >&2
