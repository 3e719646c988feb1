#!/usr/bin/env bash
# Installs the npm packages the browser tests use (tests/browser/package.json and its committed
# package-lock.json: the real speedscope app, d3 5 for PyTorch's MemoryViz.js, and playwright-core
# to drive Debian's Chromium) into
# DEST/node_modules (default build/browser), with `npm ci`, so the versions are exactly the lock's.
# Nothing lands in the source tree.
#
# Usage: scripts/fetch-browser-deps.sh [DEST]   (idempotent: kept while the lock is unchanged)
# Exits 0 when the packages are ready, 1 when they could not be installed (the reason on stderr).
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=tests/browser
DEST="${1:-${BUILD_DIR:-build}/browser}"
mkdir -p "$DEST"

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-browser-deps: npm is not installed (Debian's npm package)" >&2
  exit 1
fi
ready() {
  [ -f "$DEST/node_modules/speedscope/dist/release/index.html" ] &&
    [ -f "$DEST/node_modules/playwright-core/package.json" ] &&
    [ -f "$DEST/node_modules/d3/package.json" ] &&
    cmp -s "$SRC/package-lock.json" "$DEST/installed-lock.json"
}
if ready; then exit 0; fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
rm -f "$DEST/installed-lock.json"
if ! (cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1); then
  echo "fetch-browser-deps: npm ci failed (see $DEST/npm-ci.log)" >&2
  exit 1
fi
cp "$SRC/package-lock.json" "$DEST/installed-lock.json"
ready || { echo "fetch-browser-deps: npm ci left no speedscope app under $DEST/node_modules" >&2; exit 1; }
echo "fetch-browser-deps: speedscope, d3 and playwright-core ready under $DEST/node_modules" >&2
