#!/usr/bin/env python3
"""The installed man pages (`cmake --install` into a temporary prefix) render through `man -l`
and groff without a single warning, fit 80 columns, carry the sections a reader looks for, are
found by `man NAME` with only the prefix's bin/ on PATH, and say what the code does:

- memtrace(1) has a subsection for every command `memtrace --help` lists; each command's
  synopsis there names every option of its `--help`, each is explained (in the subsection or under
  COMMON OPTIONS), and neither synopsis nor explanations name an option the command does not take;
- libmemtrace(7)'s ENVIRONMENT explains every MEMTRACE_* variable libmemtrace.so's code reads, and
  no other.

Usage: check_man_pages.py --build-dir BUILD --source-dir SRC --mandir share/man
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_surface as cs  # noqa: E402

WIDTH = 80
SECTIONS = {
    "memtrace.1": ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "COMMON OPTIONS", "EXIT STATUS", "ENVIRONMENT",
                   "FILES", "EXAMPLES", "SEE ALSO"],
    "libmemtrace.7": ["NAME", "SYNOPSIS", "DESCRIPTION", "ENVIRONMENT", "SECURE EXECUTION", "FILES", "EXAMPLES",
                      "SEE ALSO"],
}


# --- reading the roff source -------------------------------------------------------------------

ESCAPES = [(r"\-", "-"), (r"\&", ""), (r"\(aq", "'"), (r"\(dq", '"'), (r"\(mu", "x"), (r"\(em", "-"), (r"\e", "\\")]


def unescape(s):
    s = re.sub(r"\\f[BIRP]", "", s)
    for a, b in ESCAPES:
        s = s.replace(a, b)
    return s


def macro_args(rest):
    """A request's arguments: blanks separate them, double quotes group ("" is a quote)."""
    args, cur, quoted, i, any_ = [], "", False, 0, False
    while i < len(rest):
        c = rest[i]
        if quoted:
            if c == '"' and rest[i + 1:i + 2] == '"':
                cur += '"'
                i += 1
            elif c == '"':
                quoted = False
            else:
                cur += c
        elif c == '"':
            quoted, any_ = True, True
        elif c in " \t":
            if cur or any_:
                args.append(cur)
            cur, any_ = "", False
        else:
            cur += c
        i += 1
    if cur or any_:
        args.append(cur)
    return args


def text_of(line):
    """The text one source line puts on the page (fonts dropped)."""
    if line.startswith('.\\"'):
        return ""
    if not line.startswith("."):
        return unescape(line)
    name, _, rest = line[1:].partition(" ")
    args = macro_args(rest)
    # .BR, .IR, .RB, ... alternate fonts with no space between their arguments.
    joiner = "" if re.fullmatch(r"[BIR]{2}", name) else " "
    return unescape(joiner.join(args))


class Page:
    """A page's source cut into (section, subsection) blocks, each with its text, its head (the
    lines before its first paragraph: a command's synopsis) and the tags of its .TP paragraphs."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.source = f.read()
        self.blocks = {}  # (SH, SS or "") -> {"text": [...], "head": [...], "tags": [...]}
        sh, ss, after_tp, in_head = "", "", False, True
        for line in self.source.splitlines():
            if line.startswith(".SH"):
                sh, ss, in_head = text_of(line), "", True
            elif line.startswith(".SS"):
                ss, in_head = text_of(line), True
            elif re.match(r"\.(PP|P|LP|TP|IP)\b", line):
                in_head = False
            block = self.blocks.setdefault((sh, ss), {"text": [], "head": [], "tags": []})
            t = text_of(line)
            block["text"].append(t)
            if in_head and not line.startswith((".SH", ".SS")):
                block["head"].append(t)
            if after_tp:
                block["tags"].append(t)
            after_tp = line.startswith(".TP")

    def _lines(self, part, sh, ss):
        return [t for (h, s), b in self.blocks.items() if h == sh and (ss is None or s == ss) for t in b[part]]

    def text(self, sh, ss=None):
        return "\n".join(self._lines("text", sh, ss))

    def head(self, sh, ss=None):
        return self._lines("head", sh, ss)

    def tags(self, sh, ss=None):
        return self._lines("tags", sh, ss)

    def subsections(self, sh):
        return [s for (h, s) in self.blocks if h == sh and s]


def options_in(texts):
    return set(cs.OPTION.findall("\n".join(texts) if isinstance(texts, list) else texts))


# --- rendering ---------------------------------------------------------------------------------

def render(page):
    env = dict(os.environ, MANWIDTH=str(WIDTH), MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
    env.pop("MAN_KEEP_FORMATTING", None)  # formatting is removed when the output is not a terminal
    r = subprocess.run(["man", "--warnings", "-l", page], capture_output=True, text=True, env=env)
    if r.returncode != 0 or r.stderr.strip():
        cs.fail("man --warnings -l %s (exit %d) says:\n%s" % (page, r.returncode, r.stderr))
    g = subprocess.run(["groff", "-ww", "-z", "-man", "-Tutf8", page], capture_output=True, text=True)
    if g.returncode != 0 or g.stderr.strip():
        cs.fail("groff -ww -z -man %s (exit %d) says:\n%s" % (page, g.returncode, g.stderr))
    return r.stdout


def check_rendered(name, page, text, version):
    lines = text.splitlines()
    if not lines:
        cs.fail("%s renders to nothing" % page)
    title = name.rsplit(".", 1)
    if "%s(%s)" % (title[0].upper(), title[1]) not in lines[0]:
        cs.fail("%s: first line is not its title: %r" % (page, lines[0]))
    if ("memtrace " + version) not in lines[-1]:
        cs.fail("%s: the footer does not carry memtrace's version %s: %r" % (page, version, lines[-1]))
    wide = [l for l in lines if len(l) > WIDTH]
    if wide:
        cs.fail("%s: %d lines wider than %d columns, e.g. %r" % (page, len(wide), WIDTH, wide[0]))
    headings = {l.strip() for l in lines if l and not l[0].isspace()}
    missing = [s for s in SECTIONS[name] if s not in headings]
    if missing:
        cs.fail("%s: no section %s (it has %s)" % (page, ", ".join(missing), sorted(headings)))
    with open(page, encoding="utf-8") as f:
        left = re.findall(r"@[A-Z_]+@", f.read())
    if left:
        cs.fail("%s: %s left unsubstituted" % (page, left[0]))
    # The NAME line is what whatis and apropos index: "name - what it is".
    r = subprocess.run(["lexgrog", page], capture_output=True, text=True)
    if r.returncode != 0 or not re.search(r'"%s - \S' % re.escape(title[0]), r.stdout):
        cs.fail("%s: lexgrog cannot read its NAME line: %s%s" % (page, r.stdout, r.stderr))


def check_found(name, path, prefix):
    """`man NAME` finds the page with only the prefix's bin/ on PATH, as man-db looks beside the
    programs on PATH (bin/../share/man)."""
    env = dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ.get("PATH", ""))
    env.pop("MANPATH", None)
    title, section = name.rsplit(".", 1)
    r = subprocess.run(["man", "-w", section, title], capture_output=True, text=True, env=env)
    if r.returncode != 0 or os.path.realpath(r.stdout.strip()) != os.path.realpath(path):
        cs.fail("man -w %s %s with %s/bin on PATH finds %r, not %s (%s)" %
                (section, title, prefix, r.stdout.strip(), path, r.stderr.strip()))


# --- what the pages must say -------------------------------------------------------------------

def check_commands(page, memtrace):
    names = cs.commands(memtrace)
    sections = {s.split()[-1]: s for s in page.subsections("COMMANDS")}
    missing = [c for c in names if c not in sections]
    if missing:
        cs.fail("memtrace.1: COMMANDS has no subsection for %s" % ", ".join(missing))
    extra = [c for c in sections if c not in names]
    if extra:
        cs.fail("memtrace.1: COMMANDS describes %s, which memtrace --help does not list" % ", ".join(extra))
    common = options_in(page.tags("COMMON OPTIONS"))
    synopsis = page.text("SYNOPSIS")
    checked = 0
    for command in names:
        if command in ("help", "version"):
            continue
        ss = sections[command]
        takes = cs.help_options(memtrace, command)
        synopsis_of = options_in(page.head("COMMANDS", ss))
        explained = options_in(page.tags("COMMANDS", ss))
        named = synopsis_of | explained  # prose may quote other tools' options; these may not
        for tag in page.tags("COMMANDS", ss):  # "-o, --output PATH": the synopsis shows one of them
            if options_in(tag) & synopsis_of:
                synopsis_of |= options_in(tag)
        for opt in sorted(takes):
            if opt not in synopsis_of and opt not in ("-h", "--help"):  # synopses leave help out
                cs.fail("memtrace.1: the synopsis of '%s' lacks %s, which 'memtrace %s --help' shows" %
                        (ss, opt, command))
            if opt not in explained and opt not in common:
                cs.fail("memtrace.1: %s of %s is explained neither in '%s' nor under COMMON OPTIONS" %
                        (opt, command, ss))
            checked += 1
        allowed = takes | {"-h", "--help"} | cs.PENDING_OPTIONS.get(command, set())
        unknown = named - allowed
        if unknown:
            cs.fail("memtrace.1: '%s' names %s, which 'memtrace %s --help' does not show" %
                    (ss, ", ".join(sorted(unknown)), command))
    if "memtrace run" not in synopsis or "--version" not in synopsis or "--help" not in synopsis:
        cs.fail("memtrace.1: the SYNOPSIS lacks 'memtrace run', --version or --help")
    return checked


def check_variables(page, source_dir):
    read = cs.variables_read(source_dir)
    documented = {}
    for tag in page.tags("ENVIRONMENT"):
        m = re.match(r"(MEMTRACE_[A-Z0-9_]+)", tag)
        if m:
            documented[m.group(1)] = tag
    for name, where in sorted(read.items()):
        if name not in documented:
            cs.fail("libmemtrace.7: ENVIRONMENT does not explain %s, which %s reads" % (name, where))
        if name in cs.PENDING_VARIABLES:
            cs.fail("%s is read by %s now: remove it from PENDING_VARIABLES in %s" % (name, where, cs.__file__))
    stale = set(documented) - set(read) - cs.PENDING_VARIABLES
    if stale:
        cs.fail("libmemtrace.7: ENVIRONMENT explains %s, which no code in %s reads" %
                (", ".join(sorted(stale)), "/".join(cs.LIBRARY_DIRS)))
    return len(documented)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--mandir", default="share/man")
    a = ap.parse_args()
    for tool in ("man", "groff", "lexgrog"):
        if not shutil.which(tool):
            cs.fail("no '%s' on PATH: install man-db and groff-base (scripts/setup.sh does)" % tool)
    with cs.InstallTree(a.build_dir) as tree:
        version = cs.run_memtrace(tree.memtrace, "version").stdout.split()[-1]
        pages = {}
        for name in SECTIONS:
            path = os.path.join(tree.prefix, a.mandir, "man" + name[-1], name)
            if not os.path.isfile(path):
                cs.fail("cmake --install put no %s" % os.path.relpath(path, tree.prefix))
            check_rendered(name, path, render(path), version)
            pages[name] = Page(path)
            check_found(name, path, tree.prefix)
        options = check_commands(pages["memtrace.1"], tree.memtrace)
        cs.check_pending_options(tree.memtrace)
        variables = check_variables(pages["libmemtrace.7"], a.source_dir)
    print("man pages OK: %d pages render cleanly at %d columns; %d command options and %d variables documented"
          % (len(SECTIONS), WIDTH, options, variables))


if __name__ == "__main__":
    main()
