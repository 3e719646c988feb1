#!/usr/bin/env bash
# Fetches real CPython interpreters newer than this machine's own (Debian's python3.13 from trixie,
# python3.14 and python3.15 from sid) and unpacks them, with their headers and the glibc they were built against,
# under DEST (default build/pythons/<version>). Nothing is installed on the machine: apt runs with
# a private sources list and state folder, and dpkg -x only unpacks.
#
# They are run through their own loader, because they need a newer glibc than Debian 12's:
#   DEST/3.13/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
#     --library-path DEST/3.13/usr/lib/x86_64-linux-gnu DEST/3.13/usr/bin/python3.13 script.py
# DEST/<version>/launch prints that command line (one word per line) for scripts to use.
#
# Usage: scripts/fetch-pythons.sh [DEST]   (idempotent: a version already unpacked is kept)
# Exits 0 when every version is ready, 1 when one could not be fetched (the reason on stderr).
set -uo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-${BUILD_DIR:-build}/pythons}"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
MIRROR="${MEMTRACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# version suite: the packages that make a working interpreter with ctypes and threading, its
# headers (for the layout checks), and the C library it needs.
# 3.15 is a version memtrace has no layout for: its test checks the GIL-only fallback.
declare -A SUITE=([3.13]=trixie [3.14]=sid [3.15]=sid)
pkgs_for() {
  local v="$1"
  echo "python$v-minimal libpython$v-minimal libpython$v-stdlib libpython$v-dev python$v-dev" \
       "libc6 libffi8 zlib1g libexpat1 libzstd1 liblzma5 libbz2-1.0 libmpdec4 libuuid1 libcrypt1"
}

fetch_one() {
  local v="$1" suite="${SUITE[$1]}" root="$DEST/$1"
  if [ -x "$root/usr/bin/python$v" ] && [ -f "$root/launch" ]; then return 0; fi
  local work="$DEST/.apt-$suite"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs-$v"
  printf 'deb [trusted=yes] %s %s main\n' "$MIRROR" "$suite" > "$work/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State=$work" -o "Dir::State::Lists=$work/lists" -o "Dir::State::status=/dev/null"
              -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1" -o "APT::Get::AllowUnauthenticated=1"
              -o "Acquire::AllowInsecureRepositories=1" -o "Acquire::Retries=3")
  if [ ! -f "$work/.updated" ]; then
    apt-get "${opts[@]}" update -qq >"$work/update.log" 2>&1 || {
      echo "fetch-pythons: apt-get update for $suite failed (see $work/update.log)" >&2
      return 1
    }
    touch "$work/.updated"
  fi
  (cd "$work/debs-$v" && apt-get "${opts[@]}" download $(pkgs_for "$v") >"$work/download-$v.log" 2>&1) || {
    echo "fetch-pythons: downloading python$v from $suite failed (see $work/download-$v.log)" >&2
    return 1
  }
  rm -rf "$root.tmp"
  mkdir -p "$root.tmp"
  for deb in "$work/debs-$v"/*.deb; do dpkg -x "$deb" "$root.tmp" || return 1; done
  local lib="$root/usr/lib/x86_64-linux-gnu"
  printf '%s\n' "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/bin/python$v" > "$root.tmp/launch"
  rm -rf "$root"
  mv "$root.tmp" "$root"
  # The interpreter must start and import what the tests use.
  mapfile -t cmd < "$root/launch"
  if ! "${cmd[@]}" -c 'import ctypes, threading, inspect, sys; print(sys.version)' >/dev/null 2>"$root/selftest.log"; then
    echo "fetch-pythons: python$v unpacked but does not start (see $root/selftest.log)" >&2
    return 1
  fi
  echo "fetch-pythons: python$v ready under $root" >&2
}

rc=0
for v in 3.13 3.14 3.15; do fetch_one "$v" || rc=1; done
exit $rc
