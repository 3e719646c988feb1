#!/usr/bin/env python3
"""The report page's browser test (ctest: report_page): for each synthetic data object of
make_sample_data.py (small, entries, big), assembles the page from the build's assets the way
`memtrace report` does (assemble_page.py) and drives it in headless Chromium (page_test.mjs).

    run_page_test.py --assets BUILD/share/memtrace/report --out DIR [--cases small,big]

Screenshots and the assembled pages are kept under DIR/<case>/. Exits 77 (skipped) with the reason
when Chromium, Node.js or the npm packages are missing, unless CI=true or MEMTRACE_REQUIRE_BROWSER=1,
where a missing piece fails the test instead.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WEB = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import assemble_page  # noqa: E402


def required():
    return os.environ.get("CI") == "true" or os.environ.get("MEMTRACE_REQUIRE_BROWSER") == "1"


def skip(why):
    if required():
        print("FAIL: %s (CI=true or MEMTRACE_REQUIRE_BROWSER=1: the browser test must run)" % why)
        sys.exit(1)
    print("SKIPPED: %s" % why)
    sys.exit(77)


def find_chromium():
    env = os.environ.get("MEMTRACE_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="small,entries,big")
    opts = ap.parse_args()

    node = shutil.which("node")
    if not node:
        skip("no Node.js (`node`) on PATH; scripts/setup.sh installs it")
    chromium = find_chromium()
    if not chromium:
        skip("no Chromium (Debian's `chromium` package; or set MEMTRACE_CHROMIUM); scripts/setup.sh installs it")
    if not os.path.isdir(os.path.join(WEB, "node_modules", "playwright-core")):
        skip("report/web/node_modules has no playwright-core; run scripts/setup.sh (npm ci in report/web)")
    missing = [n for list_name in ("scripts.txt", "styles.txt")
               for n in assemble_page.listed(opts.assets, list_name)
               if not os.path.isfile(os.path.join(opts.assets, n))]
    if missing:
        skip("the report's assets are incomplete (%s missing from %s); run scripts/setup.sh and rebuild"
             % (", ".join(missing[:3]), opts.assets))

    failed = False
    for case in opts.cases.split(","):
        out = os.path.join(opts.out, case)
        os.makedirs(out, exist_ok=True)
        data = os.path.join(out, "data.json")
        page = os.path.join(out, "report.html")
        subprocess.run([sys.executable, os.path.join(HERE, "make_sample_data.py"), case, data], check=True)
        with open(data, encoding="utf-8") as f:
            html = assemble_page.assemble(opts.assets, json.load(f))
        with open(page, "w", encoding="utf-8") as f:
            f.write(html)
        proc = subprocess.run([node, os.path.join(HERE, "page_test.mjs"), "--page", page, "--out", out,
                               "--chromium", chromium, "--name", case],
                              capture_output=True, text=True, timeout=280)
        sys.stderr.write(proc.stderr)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"failures": ["no result from page_test.mjs:\n" + proc.stdout]}
        size = os.path.getsize(page)
        timing = result.get("timing") or {}
        print("%s: page %.1f MB, first draw %s ms after navigation (script %s ms), %s screenshots in %s"
              % (case, size / 1e6, timing.get("ready_ms"), timing.get("script_ms"),
                 len(result.get("screenshots", [])), out))
        print("  " + json.dumps({k: v for k, v in result.items() if k not in ("failures", "screenshots")}))
        for what in result.get("failures", []):
            print("  FAIL: %s" % what)
        if proc.returncode != 0 or result.get("failures"):
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
