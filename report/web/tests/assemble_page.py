#!/usr/bin/env python3
"""Assembles a report page from the assets directory and a data object, the way `memtrace report`
does (docs/report.md, "Assembling the page"), so the page can be tested before and apart from it.

    assemble_page.py ASSETS_DIR DATA.json OUT.html

Exits 2 with one line when an asset is missing or would break the page.
"""
import json
import os
import sys

STYLES = "/*MEMTRACE_STYLES*/"
DATA = "<!--MEMTRACE_DATA-->"
SCRIPTS = "<!--MEMTRACE_SCRIPTS-->"


class AssetError(Exception):
    pass


def listed(assets, name):
    path = os.path.join(assets, name)
    if not os.path.isfile(path):
        raise AssetError("missing %s" % path)
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def read_asset(assets, name, forbidden):
    path = os.path.join(assets, name)
    if not os.path.isfile(path):
        raise AssetError("missing %s (run scripts/setup.sh and rebuild)" % path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    low = text.lower()
    for bad in forbidden:
        if bad in low:
            raise AssetError("%s contains %r, which would end its inline element early" % (path, bad))
    return text


def data_script(data):
    """The data as an inert JSON element, with '<' written as \\u003c so no '</script' appears in it."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return '<script id="memtrace-data" type="application/json">' + text + "</script>"


def assemble(assets, data):
    template = read_asset(assets, "report.html", ())
    for marker in (STYLES, DATA, SCRIPTS):
        if template.count(marker) != 1:
            raise AssetError("report.html must hold %s exactly once" % marker)
    if template.index(DATA) > template.index(SCRIPTS):
        raise AssetError("report.html must hold the data marker before the scripts marker")
    styles = "\n".join(read_asset(assets, n, ("</style",)) for n in listed(assets, "styles.txt"))
    scripts = "\n".join("<script>\n" + read_asset(assets, n, ("</script", "<!--")) + "\n</script>"
                        for n in listed(assets, "scripts.txt"))
    head, rest = template.split(STYLES)
    middle, rest = rest.split(DATA)
    between, tail = rest.split(SCRIPTS)
    return head + styles + middle + data_script(data) + between + scripts + tail


def main():
    if len(sys.argv) != 4:
        print("usage: assemble_page.py ASSETS_DIR DATA.json OUT.html", file=sys.stderr)
        return 2
    assets, data_path, out = sys.argv[1:]
    try:
        with open(data_path, encoding="utf-8") as f:
            data = json.load(f)
        page = assemble(assets, data)
    except (AssetError, OSError, ValueError) as e:
        print("assemble_page: %s" % e, file=sys.stderr)
        return 2
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
