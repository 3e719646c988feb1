#!/usr/bin/env bash
# Runs one of the browser tests (a node script in tests/browser/) or says why it cannot:
#   run_browser_test.sh NODE_MODULES SCRIPT.mjs [ARGS...]
# It needs node, Chromium ($MEMTRACE_CHROMIUM, default Debian's /usr/bin/chromium) and the npm
# packages scripts/fetch-browser-deps.sh installs into NODE_MODULES. When one is missing it exits
# 77 (CTest: skipped) with the reason; under CI=true or MEMTRACE_REQUIRE_BROWSER=1 it fails instead,
# so that CI never passes without having opened the browser.
set -uo pipefail
modules="$1"
script="$(dirname "$0")/$2"
shift 2
chromium="${MEMTRACE_CHROMIUM:-/usr/bin/chromium}"

why=""
if ! command -v node >/dev/null 2>&1; then
  why="node is not installed (Debian's nodejs package; scripts/setup.sh installs it)"
elif [ ! -x "$chromium" ]; then
  why="no Chromium at $chromium (Debian's chromium package; scripts/setup.sh installs it)"
elif [ ! -f "$modules/speedscope/dist/release/index.html" ] || [ ! -f "$modules/playwright-core/package.json" ] || [ ! -f "$modules/d3/package.json" ]; then
  why="the npm packages are not installed under $modules (run scripts/fetch-browser-deps.sh; it needs the npm registry)"
fi
if [ -n "$why" ]; then
  if [ "${CI:-}" = true ] || [ "${MEMTRACE_REQUIRE_BROWSER:-}" = 1 ]; then
    echo "FAIL: $why; CI=true or MEMTRACE_REQUIRE_BROWSER=1: the browser tests may not skip"
    exit 1
  fi
  echo "SKIP: $why"
  exit 77
fi
exec node "$script" --modules "$modules" "$@"
