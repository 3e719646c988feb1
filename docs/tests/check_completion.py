#!/usr/bin/env python3
"""The installed bash completion (`cmake --install` into a temporary prefix) completes what the
installed memtrace takes:

- in a non-interactive bash, sourced alone and loaded on demand by bash-completion from the
  install tree (complete_line.bash drives it through COMP_WORDS/COMP_CWORD): commands, options,
  option values, snapshot files, and after `run [--] PROGRAM` the program's own completion;
- in an interactive bash on a terminal, where readline itself puts the answer on the line
  (`--frames=a<TAB>`, `key:value,` lists), sourced alone and loaded by bash-completion;
- no more and no fewer options than each command's --help shows, values the command accepts, and
  the --alloc-conf keys the settings parser knows.

Usage: check_completion.py --build-dir BUILD --source-dir SRC --datadir share
"""
import argparse
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_surface as cs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "complete_line.bash")
BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"
# A PyTorch snapshot with a recorded out-of-memory: every value option's values load it.
FIXTURE = os.path.join("cli", "analysis", "tests", "data", "torch_oom_p4.pickle")


def complete(mode, where, line, cwd):
    """What completing `line` (cursor at its end) offers: (set of replies, set of compopt -o)."""
    r = subprocess.run(["bash", "--norc", "--noprofile", DRIVER, mode, where, line], capture_output=True, text=True,
                       cwd=cwd, env=dict(os.environ, INPUTRC="/dev/null"))
    if r.returncode != 0 or r.stderr.strip():
        cs.fail("completing %r (%s) failed, exit %d:\n%s%s" % (line, mode, r.returncode, r.stdout, r.stderr))
    replies = {l[len("reply:"):] for l in r.stdout.splitlines() if l.startswith("reply:")}
    options = {l[len("option:"):] for l in r.stdout.splitlines() if l.startswith("option:")}
    return replies, options


# (line, what it must offer, "exact" or "includes", compopt options it must set)
def cases(commands):
    analysis_opts = {"--by", "--device", "--frames", "--lenient", "-h", "--help"}
    return [
        ("memtrace ", set(commands), "exact", set()),
        ("memtrace su", {"summary"}, "exact", set()),
        ("memtrace -", {"--help", "--version"}, "exact", set()),
        ("memtrace summary --fr", {"--frames"}, "exact", set()),
        ("memtrace summary --frames ", {"short", "all"}, "exact", set()),
        ("memtrace summary --frames=", {"short", "all"}, "exact", set()),
        ("memtrace summary --frames=a", {"all"}, "exact", set()),
        ("memtrace summary --json -", analysis_opts, "exact", set()),
        ("memtrace summary ", {"a.pickle", "b.pkl", "sub"}, "exact", {"filenames"}),
        ("memtrace summary no", {"notes.txt"}, "exact", {"filenames"}),
        ("memtrace summary -- -", set(), "exact", set()),
        ("memtrace diff a.pickle ", {"a.pickle", "b.pkl", "sub"}, "exact", {"filenames"}),
        ("memtrace ranks ", {"sub"}, "exact", {"filenames"}),
        ("memtrace flamegraph --at ", {"end", "peak"}, "exact", set()),
        ("memtrace flamegraph --format ", {"folded", "speedscope"}, "exact", set()),
        ("memtrace flamegraph a.pickle -o ", {"a.pickle", "b.pkl", "notes.txt", "sub"}, "exact", {"filenames"}),
        ("memtrace replay a.pickle --capacity ", {"recorded"}, "exact", set()),
        ("memtrace replay a.pickle --alloc-conf expandable_segments:", {"True", "False"}, "exact", set()),
        ("memtrace replay a.pickle --alloc-conf expandable_segments:True,memtrace_po", {"True,memtrace_policy:"},
         "exact", {"nospace"}),
        ("memtrace replay a.pickle --alloc-conf=memtrace_policy:", {"pytorch", "remap"}, "exact", set()),
        ("memtrace replay a.pickle --alloc-conf x --alloc", {"--alloc-conf"}, "exact", set()),
        ("memtrace replay a.pickle --json --j", set(), "exact", set()),
        ("memtrace help pe", {"peak"}, "exact", set()),
        ("memtrace version ", set(), "exact", set()),
        ("memtrace run -", {"--sim", "-o", "--output", "--no-summary", "--stacks", "-h", "--help"}, "exact", set()),
        ("memtrace run --stacks ", {"none", "native"}, "exact", set()),
        ("memtrace run --output=", {"a.pickle", "b.pkl", "notes.txt", "sub"}, "exact", {"filenames"}),
        ("memtrace run -- ech", {"echo"}, "includes", set()),
        ("memtrace run --sim -- fakeprog --", {"--alpha", "--beta"}, "exact", set()),
        ("memtrace run fakeprog --al", {"--alpha"}, "exact", set()),
        ("memtrace run -o out.pickle --stacks none fakeprog -", {"--alpha", "--beta"}, "exact", set()),
    ]


def check_cases(mode, where, cwd, commands):
    n = 0
    extra = [("memtrace run -- ls --al", {"--all", "--almost-all"}, "exact", set())] if mode == "loader" else []
    for line, want, how, opts in cases(commands) + extra:
        got, got_opts = complete(mode, where, line, cwd)
        if (how == "exact" and got != want) or (how == "includes" and not want <= got):
            cs.fail("%s: completing %r offers %s, not %s%s" %
                    (mode, line, sorted(got)[:20], "" if how == "exact" else "at least ", sorted(want)))
        if not opts <= got_opts:
            cs.fail("%s: completing %r sets %s, not %s" % (mode, line, sorted(got_opts), sorted(opts)))
        n += 1
    return n


def check_drift(memtrace, script, cwd, source_dir):
    """Options as --help shows them, values the command accepts, keys the parser knows."""
    commands = cs.commands(memtrace)
    n = 0
    for command in commands:
        if command in ("help", "version"):
            continue
        takes = cs.help_options(memtrace, command)
        offered, _ = complete("plain", script, "memtrace %s -" % command, cwd)
        missing = takes - offered
        if missing:
            cs.fail("completion of 'memtrace %s -' lacks %s, which its --help shows (docs/completion/memtrace.bash)"
                    % (command, ", ".join(sorted(missing))))
        unknown = offered - takes - {"-h", "--help"} - cs.PENDING_OPTIONS.get(command, set())
        if unknown:
            cs.fail("completion of 'memtrace %s -' offers %s, which its --help does not show" %
                    (command, ", ".join(sorted(unknown))))
        if not {"-h", "--help"} <= offered:
            cs.fail("completion of 'memtrace %s -' does not offer -h and --help" % command)
        n += len(offered)
    cs.check_pending_options(memtrace)

    # Each value offered is one the command takes; a made-up one is refused (so the probe can fail).
    fixture = os.path.join(source_dir, FIXTURE)
    probes = {"--frames": ["summary"], "--at": ["flamegraph"], "--capacity": ["replay"], "--stacks": ["run"],
              "--format": ["flamegraph"]}
    for opt, (command,) in probes.items():
        if opt in cs.PENDING_OPTIONS.get(command, set()):
            continue
        values, _ = complete("plain", script, "memtrace %s %s " % (command, opt), cwd)
        if not values:
            cs.fail("completion offers no value for %s %s" % (command, opt))
        for value in sorted(values) + ["no-such-value"]:
            if command == "run":
                # run checks its values before it looks for the program.
                r = cs.run_memtrace(memtrace, "run", opt, value)
                ok = "no program given" in r.stderr
            else:
                r = cs.run_memtrace(memtrace, command, opt, value, fixture)
                ok = r.returncode == 0
            if ok != (value != "no-such-value"):
                cs.fail("memtrace %s %s %s: exit %d, %s" % (command, opt, value, r.returncode, r.stderr.strip()))
            n += 1

    # --alloc-conf keys: the ones core/caching/alloc_conf.cpp compares against.
    with open(os.path.join(source_dir, "core", "caching", "alloc_conf.cpp"), encoding="utf-8") as f:
        parser_keys = set(re.findall(r'key == "([a-z0-9_]+)"', f.read()))
    keys, _ = complete("plain", script, "memtrace replay a.pickle --alloc-conf ", cwd)
    keys = {k.rstrip(":") for k in keys}
    if len(parser_keys) < 10 or keys != parser_keys:
        cs.fail("--alloc-conf completion offers keys %s; core/caching/alloc_conf.cpp knows %s" %
                (sorted(keys - parser_keys), sorted(parser_keys - keys)))
    return n + len(keys)


class Terminal:
    """An interactive bash on a pseudo-terminal that has run `setup` (which loads the completion)."""

    def __init__(self, setup, cwd, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(cwd)
            env = dict(os.environ, TERM="dumb", INPUTRC="/dev/null", PS1="READY> ", HISTFILE="/dev/null", **env)
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.buf = b""
        # C-x C-p prints the line readline holds; completion never reaches it, so it marks the end.
        self.send("bind 'set enable-bracketed-paste off'; bind 'set bell-style none'; "
                  "bind -x '\"\\C-x\\C-p\": printf \"LINE<%%s>\\n\" \"$READLINE_LINE\"'; %s; echo SET\"\"UP\n"
                  % setup)
        self.wait_for(rb"SETUP\r?\n.*READY> ")

    def send(self, s):
        os.write(self.fd, s.encode())

    def wait_for(self, pattern, timeout=60):
        end = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.buf, re.S)
            if m:
                self.buf = self.buf[m.end():]
                return m
            left = end - time.monotonic()
            if left <= 0:
                cs.fail("the interactive bash did not answer %r; it wrote %r" % (pattern, self.buf[-400:]))
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.buf += os.read(self.fd, 4096)
                except OSError:
                    cs.fail("the interactive bash went away; it wrote %r" % self.buf[-400:])

    def complete(self, line):
        """The line after typing `line`, TAB: readline handles keys in order, so C-x C-p runs after
        the completion has finished; C-u then clears the line for the next one."""
        self.send(line + "\t\x18\x10")
        got = self.wait_for(rb"LINE<(.*?)>\r?\n").group(1).decode()
        self.send("\x15")
        return got

    def close(self):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def typed(terminal, want):
    try:
        for line, expected in want.items():
            got = terminal.complete(line)
            if got != expected:
                cs.fail("interactive bash: %r<TAB> gives %r, not %r" % (line, got, expected))
    finally:
        terminal.close()
    return len(want)


def check_terminal(script, share, cwd):
    """Sourced alone, then loaded by bash-completion the first time memtrace is completed."""
    want = {
        "memtrace su": "memtrace summary ",
        "memtrace summary --fr": "memtrace summary --frames ",
        "memtrace summary --frames=a": "memtrace summary --frames=all ",
        "memtrace summary a.": "memtrace summary a.pickle ",
        "memtrace ranks s": "memtrace ranks sub/",
        "memtrace replay a.pickle --alloc-conf expandable_segments:Tr":
            "memtrace replay a.pickle --alloc-conf expandable_segments:True ",
        "memtrace replay a.pickle --alloc-conf expandable_segments:True,memtrace_po":
            "memtrace replay a.pickle --alloc-conf expandable_segments:True,memtrace_policy:",
        "memtrace replay a.pickle --alloc-conf=memtrace_policy:re":
            "memtrace replay a.pickle --alloc-conf=memtrace_policy:remap ",
        "memtrace run --output=no": "memtrace run --output=notes.txt ",
    }
    n = typed(Terminal(". '%s'" % script, cwd, {}), want)
    loaded = {
        "memtrace su": "memtrace summary ",
        "memtrace summary --frames=a": "memtrace summary --frames=all ",
        "memtrace run -- ls --almost-a": "memtrace run -- ls --almost-all ",
    }
    user_dir = os.path.join(cwd, "no-user-completions")
    n += typed(Terminal(". '%s'" % BASH_COMPLETION, cwd,
                        {"XDG_DATA_DIRS": share, "BASH_COMPLETION_USER_DIR": user_dir}), loaded)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--datadir", default="share")
    a = ap.parse_args()
    if not os.path.isfile(BASH_COMPLETION):
        cs.fail("no %s: install bash-completion (scripts/setup.sh does)" % BASH_COMPLETION)
    with cs.InstallTree(a.build_dir) as tree, tempfile.TemporaryDirectory() as cwd:
        share = os.path.join(tree.prefix, a.datadir)
        script = os.path.join(share, "bash-completion", "completions", "memtrace")
        if not os.path.isfile(script):
            cs.fail("cmake --install put no %s" % os.path.relpath(script, tree.prefix))
        r = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        if r.returncode != 0:
            cs.fail("bash -n %s: %s" % (script, r.stderr))
        for f in ("a.pickle", "b.pkl", "notes.txt"):
            open(os.path.join(cwd, f), "w").close()
        os.mkdir(os.path.join(cwd, "sub"))
        commands = cs.commands(tree.memtrace)
        plain = check_cases("plain", script, cwd, commands)
        loaded = check_cases("loader", share, cwd, commands)
        drift = check_drift(tree.memtrace, script, cwd, a.source_dir)
        on_terminal = check_terminal(script, share, cwd)
    print("completion OK: %d lines sourced alone, %d loaded by bash-completion, %d typed on a terminal; "
          "%d options, values and keys match memtrace" % (plain, loaded, on_terminal, drift))


if __name__ == "__main__":
    main()
