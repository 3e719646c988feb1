"""What the man pages and the bash completion are held to: the commands and options the installed
`memtrace` prints in its --help, and the MEMTRACE_* variables the library's code reads. Shared by
check_man_pages.py and check_completion.py."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Documented (and completed) ahead of the code, by work on other branches. Each entry must go as
# soon as the code has it: the checks fail when a pending name is found in the code, so that this
# list never outlives its reason.
PENDING_OPTIONS = {}
PENDING_VARIABLES = set()

# Where the library's code lives (not the CLI, which only sets variables for `run`, and not tests).
LIBRARY_DIRS = ("core", "preload", "output", "unwind", "format")

OPTION = re.compile(r"(?<![\w-])(-[A-Za-z]|--[A-Za-z][\w-]*)")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class InstallTree:
    """`cmake --install BUILD --prefix TMP`, removed again on exit."""

    def __init__(self, build_dir):
        self.build_dir = build_dir

    def __enter__(self):
        self.prefix = tempfile.mkdtemp(prefix="memtrace-docs-")
        r = subprocess.run(["cmake", "--install", self.build_dir, "--prefix", self.prefix],
                           capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(self.prefix, ignore_errors=True)
            fail("cmake --install failed:\n" + r.stdout + r.stderr)
        self.memtrace = os.path.join(self.prefix, "bin", "memtrace")
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.prefix, ignore_errors=True)


def run_memtrace(memtrace, *args):
    return subprocess.run([memtrace, *args], capture_output=True, text=True, env=dict(os.environ, COLUMNS="100"))


def commands(memtrace):
    """The commands `memtrace --help` lists (help included), plus those its usage lines name
    (version)."""
    r = run_memtrace(memtrace, "--help")
    if r.returncode != 0:
        fail("memtrace --help exits with %d" % r.returncode)
    head, _, listing = r.stdout.partition("\ncommands:\n")
    names = []
    for line in listing.splitlines():
        if not line.strip():
            break
        names.append(line.split()[0])
    if not names:
        fail("memtrace --help lists no commands:\n" + r.stdout)
    if re.search(r"\bversion\b", head):
        names.append("version")
    return names


def help_options(memtrace, command):
    """The options `memtrace COMMAND --help` shows: in its usage line, and in the first column of
    each line of its option list."""
    r = run_memtrace(memtrace, command, "--help")
    if r.returncode != 0:
        fail("memtrace %s --help exits with %d:\n%s" % (command, r.returncode, r.stderr))
    found = set()
    for line in r.stdout.splitlines():
        if line.startswith("usage:"):
            found |= set(OPTION.findall(line))
        elif re.match(r"^\s+-", line):
            found |= set(OPTION.findall(re.split(r"\s{2,}", line.strip())[0]))
    return found


def variables_read(source_dir):
    """Every MEMTRACE_* name the library's code spells as a whole string literal: the names it
    asks getenv (or secure_getenv, or the configuration's GetEnvFn) for."""
    found = {}
    for top in LIBRARY_DIRS:
        for root, dirs, files in os.walk(os.path.join(source_dir, top)):
            dirs[:] = [d for d in dirs if d != "tests"]
            for f in files:
                if not f.endswith((".cpp", ".hpp", ".c", ".h")):
                    continue
                path = os.path.join(root, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for name in re.findall(r'"(MEMTRACE_[A-Z0-9_]+)"', fh.read()):
                        found.setdefault(name, os.path.relpath(path, source_dir))
    if len(found) < 10:
        fail("found only %d MEMTRACE_* variables in %s: has the code moved?" % (len(found), LIBRARY_DIRS))
    return found


def check_pending_options(memtrace):
    for command, names in PENDING_OPTIONS.items():
        have = help_options(memtrace, command) & names
        if have:
            fail("memtrace %s --help now shows %s: remove it from PENDING_OPTIONS in %s" %
                 (command, ", ".join(sorted(have)), __file__))
