#!/usr/bin/env python3
"""A report from anyone is safe to open. Every field of the committed reference sweep (every key's
value, in every point, nested; of a list of three or more, the first and the last item) gets, one
field at a time, each hostile payload: markup, a script block's end, an attribute quote-breaker, a
javascript: URL, control bytes, 100,000 characters, a number where text belongs and text where a
number belongs; and every object gets a key that is markup. `cnnbench compare` (against the
original) runs on each variant of every field with markup, control bytes, 100,000 characters and
the other type (a field of the points on one point per payload, the points in turn), and on the
same variants of a run report (a 2-core stream run's, made by the test).
`cnnbench report` and `cnnbench plot` are slow (matplotlib), so they run on grouped files, where
every field gets every payload: per payload, one with it in every text field a page shows as text, one
with it in every other field (the point's identity and every number), one with every object's
hostile key, and one with it in the fields the page formats as numbers. Each command exits 0, 1
or 2, prints at most one error line and no traceback, library text, path of our scripts or raw
control byte. Each page written is checked statically (no element or attribute from a payload,
no on* attribute, every link relative, every script block's sha256 in the CSP, no 'unsafe-inline'
script) and the worst ones in headless Chromium, where the payloads, had they run, would have set
the title or added an element with a known id."""
import concurrent.futures
import base64
import copy
import hashlib
import html.parser
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import check, exit_code, parse_arguments
from test_html_report import chromium_words, find_chromium

MARK = "pwned"  # what a payload that ran would leave: the title, or an element with this id prefix
PAYLOADS = {
    "markup": f'<img src=x id={MARK}-img onerror="document.title=\'{MARK}\'">',
    "script end": f'</script><script id={MARK}-script>document.title="{MARK}"</script>',
    "quote breaker": f'x" onmouseover="document.title=\'{MARK}\'" id="{MARK}-quote',
    "javascript url": f"javascript:document.title='{MARK}'",
    "control bytes": "a\x1b[31mred\x07 and \x00nul\x1b]0;title\x07",
    "100k characters": "W" * 100_000,
    "number for text": 12345.5,
    "text for number": f'"><b id={MARK}-b>3</b>',
}
# Which payloads go where: text payloads everywhere, a number only where text was.
TEXT_PAYLOADS = [name for name, value in PAYLOADS.items() if isinstance(value, str) and name != "text for number"]
# compare reads no markup: to it, the markup, script end, quote breaker and javascript: URL are one
# kind of text; it gets one of them, in turn, with the control bytes and the long text.
COMPARE_PAYLOADS = ["markup", "control bytes", "100k characters"]
# The fields that make a point what it is: with a payload in them a point is no longer drawn, so
# the page checks get them apart from the fields it shows as text.
IDENTITY = {"status", "model", "strategy", "series", "id", "models", "strategies"}
READER_CHECKED = {("kind",), ("schema_version",), ("complete",)}
POINT_CHECKED = {("id",), ("model",), ("strategy",), ("status",), ("reason",), ("times_s",), ("time",), ("cores",),
                 ("nodes",)}
# The fields the page formats as numbers beside the plots' own (the reported injection was in one).
PAGE_NUMBERS = {"efficiency", "speedup", "karp_flatt", "final_loss", "vs_pytorch_1thread", "speedup_unpaired"}
LIBRARY_TEXT = ("Traceback", "json.exception", "UserWarning", "Warning:", "plot_report.py", "html_report.py",
                "matplotlib", 'File "')
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def leaf_paths(value, path=()):
    """Every field's path; of a list of three or more, the first and last item (every point)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaf_paths(item, path + (key,))
    elif isinstance(value, list) and value:
        indices = range(len(value)) if len(value) <= 2 or path == ("points",) else (0, len(value) - 1)
        for i in indices:
            yield from leaf_paths(value[i], path + (i,))
    else:
        yield path


def object_paths(value, path=()):
    if isinstance(value, dict):
        yield path
        for key, item in value.items():
            yield from object_paths(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:1] if path != ("points",) else value):
            yield from object_paths(item, path + (i,))


def at(report, path):
    for key in path:
        report = report[key]
    return report


def put(report, path, value):
    at(report, path[:-1])[path[-1]] = value


def spelled(path):
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def pattern(path):
    return tuple("*" if i == 1 and path[0] == "points" else k for i, k in enumerate(path))


def variants(reference):
    """(field, payload name, report) for compare: every field and every payload that fits it,
    where a field of the points takes its payloads in turn from every point (points[3].speedup
    gets one, points[4].speedup the next...), so that each point and each point field is met."""
    by_pattern = {}
    for path in leaf_paths(reference):
        by_pattern.setdefault(pattern(path), []).append(path)
    for index, paths in enumerate(by_pattern.values()):
        original = at(reference, paths[0])
        names = COMPARE_PAYLOADS + (["number for text"] if isinstance(original, str) else ["text for number"])
        for turn, name in enumerate(names):
            path = paths[(index * len(names) + turn) % len(paths)]
            report = copy.deepcopy(reference)
            put(report, path, PAYLOADS[name])
            yield spelled(path), name, report
    objects = {}
    for path in object_paths(reference):
        objects.setdefault(pattern(path), path)
    for path in objects.values():
        report = copy.deepcopy(reference)
        at(report, path)[PAYLOADS["markup"]] = PAYLOADS["markup"]
        yield spelled(path) + "{hostile key}", "markup", report


def group_files(reference):
    """(name, fields, payload name, report) of the grouped files report and plot run on: each field
    gets every payload in one of them."""
    paths = list(leaf_paths(reference))
    text = [p for p in paths if isinstance(at(reference, p), str) and not IDENTITY & set(map(str, p))
            and p != ("kind",)]
    shown = [p for p in paths if p and p[-1] in PAGE_NUMBERS]
    # The fields cnnbench's reader checks before the script runs (lib/report/report_reader.cpp)
    # apart, so that the others reach the script; compare reads each of them, one at a time.
    checked = [p for p in paths if p[:1] in READER_CHECKED or (p[0] == "points" and p[2:3] in POINT_CHECKED)]
    text = [p for p in text if p not in checked]
    rest = [p for p in paths if p not in text and p not in shown and p not in checked]
    groups = []
    for name in TEXT_PAYLOADS + ["number for text", "text for number"]:
        for label, fields in (("text fields", text), ("page numbers", shown), ("identity and numbers", rest),
                              ("fields cnnbench's reader checks", checked)):
            fitting = [p for p in fields if (name == "number for text") == isinstance(at(reference, p), str)
                       or name in TEXT_PAYLOADS]
            if not fitting:
                continue
            report = copy.deepcopy(reference)
            for path in fitting:
                put(report, path, PAYLOADS[name])
            groups.append((f"{label} <- {name}", fitting, name, report))
    report = copy.deepcopy(reference)
    keyed = list(object_paths(reference))
    for path in keyed:
        at(report, path)[PAYLOADS["markup"]] = PAYLOADS["markup"]
    groups.append(("every object's keys <- markup", keyed, "markup", report))
    return groups


def output_problems(run):
    """What is wrong with a command's exit code and terminal output: [] when nothing."""
    problems = []
    if run.returncode not in (0, 1, 2):
        problems.append(f"exit {run.returncode}")
    for where, text in (("stdout", run.stdout), ("stderr", run.stderr)):
        if CONTROL.search(text):
            problems.append(f"a raw control byte on {where} ({CONTROL.search(text).group()!r})")
        problems += [f"{marker!r} on {where}" for marker in LIBRARY_TEXT if marker in text]
    # A warning ("cnnbench: warning: the reports differ in ...") or an error's indented details may
    # follow; the error itself is one line.
    errors = [line for line in run.stderr.splitlines() if line.startswith("cnnbench: error:")]
    if len(errors) > 1:
        problems.append(f"{len(errors)} lines on stderr ({errors[:2]})")
    if run.returncode != 0 and not run.stderr.startswith("cnnbench: error: "):
        problems.append("no 'cnnbench: error:' line")
    return problems


def run_cli(cli, *words, cwd=None):
    """The command's run; one that has not finished after 300 s is killed and comes back with the
    return code "timeout", which fails its check by name instead of ending the test."""
    try:
        return subprocess.run([cli, *map(str, words)], capture_output=True, text=True, errors="replace",
                              timeout=300, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, "timeout", "", "no end after 300 s: killed")


class PageParts(html.parser.HTMLParser):
    """What a page holds that a payload could have made live."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems, self.scripts, self.csp, self._script = [], [], None, None

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.lower().startswith("on"):
                self.problems.append(f"<{tag} {name}=...>: an event handler")
            if name == "id" and value and value.startswith(MARK):
                self.problems.append(f"<{tag} id={value}>: an element from a payload")
            if name in ("href", "src", "xlink:href", "action") and value is not None:
                relative = value == "data:," and tag == "link" or (
                    not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value) and not value.startswith(("//", "\\")))
                if not relative:
                    self.problems.append(f"<{tag} {name}={value[:60]!r}>: not a relative link")
            if name == "content" and tag == "meta" and dict(attrs).get("http-equiv") == "Content-Security-Policy":
                self.csp = value
        if tag in ("img", "b", "iframe", "object", "embed", "form", "base"):
            self.problems.append(f"<{tag}>: an element the page never writes")
        if tag == "script":
            self._script = ""

    def handle_data(self, data):
        if self._script is not None:
            self._script += data

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append(self._script)
            self._script = None


def page_problems(page):
    text = page.read_text(errors="replace")
    if CONTROL.search(text.replace("\r", "")):
        return ["a raw control byte in the page"]
    parts = PageParts()
    parts.feed(text)
    problems = list(parts.problems)
    script_sources = re.search(r"script-src ([^;]*)", parts.csp or "")
    if script_sources is None or "unsafe-inline" in script_sources.group(1):
        problems.append(f"the CSP allows inline scripts ({parts.csp})")
    for script in parts.scripts:
        digest = "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        if script_sources is None or digest not in script_sources.group(1):
            problems.append(f"a script block whose hash is not in the CSP ({script[:60]!r})")
    if len(parts.scripts) != 1:
        problems.append(f"{len(parts.scripts)} script blocks (the page writes one)")
    return problems


def browser_problems(chromium, page, tmp, name):
    """The page loaded in headless Chromium: nothing a payload would do is in the DOM after scripts
    ran (the title set to the mark, an element with its id; the payloads' text is fine)."""
    words = chromium_words(chromium, tmp / f"chromium-{name}", tmp / f"{name}.netlog.json")
    run = subprocess.run(words + ["--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    dom = run.stdout
    problems = [] if "<body" in dom else ["Chromium did not load the page"]
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    if title is None or title.group(1).strip() == MARK:
        problems.append(f"the title is {title.group(1)[:60] if title else None!r}")
    parts = PageParts()
    parts.feed(dom)
    problems += [p for p in parts.problems if MARK in p or "event handler" in p]
    return problems


def check_compare(cli, reference_path, reference, tmp, what="sweep"):
    """compare ORIGINAL VARIANT on every variant of a `what` report; returns the count."""
    def one(index, item):
        field, name, report = item
        path = tmp / f"variant-{what}-{index}.json"
        path.write_text(json.dumps(report))
        run = run_cli(cli, "compare", reference_path, path)
        path.unlink()
        return field, name, output_problems(run)
    count = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for field, name, problems in pool.map(lambda pair: one(*pair), enumerate(variants(reference))):
            count += 1
            if problems:
                check(False, f"compare ({what} report), {field} <- {name}: {'; '.join(problems)}")
    check(count > 0, f"compare ran on {count} variants of a {what} report")
    return count


def run_report(cli, tmp):
    """A run report with most of what one holds: a 2-core stream run's actors, shares, breakdown,
    pins and trace summary, made here (the reader of run reports is compare)."""
    path = tmp / "run.json"
    made = run_cli(cli, "train", "--model", "lenet5", "--strategy", "stream", "--cores", "2",
                   "--synthetic", "256", "--steps", "4", "--quiet", "--report", path)
    if made.returncode != 0:
        raise SystemExit(f"FAIL cannot make a run report: {made.stderr.strip()}")
    return path, json.loads(path.read_text())


def check_groups(cli, reference, tmp):
    """report and plot on each grouped file; returns (groups, pages written, pages for Chromium)."""
    groups = group_files(reference)

    def one(index, group):
        label, fields, name, report = group
        folder = tmp / f"group-{index}"
        folder.mkdir()
        (folder / "sweep.json").write_text(json.dumps(report))
        made = run_cli(cli, "report", "sweep.json", "--out", "page.html", cwd=folder)
        drawn = run_cli(cli, "plot", "sweep.json", "--out", "images", cwd=folder)
        return label, fields, name, folder, made, drawn

    pages = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for label, fields, name, folder, made, drawn in pool.map(lambda pair: one(*pair), enumerate(groups)):
            where = f"{label} ({len(fields)} fields: {', '.join(spelled(p) for p in fields[:3])}...)"
            for command, run in (("report", made), ("plot", drawn)):
                problems = output_problems(run)
                check(not problems, f"{command}, {where}: exit {run.returncode}, "
                      f"{'; '.join(problems) or run.stderr.strip()[:200] or 'no error'}")
            page = folder / "page.html"
            if made.returncode == 0:
                problems = page_problems(page)
                check(not problems, f"report, {where}: the page has no live payload ({'; '.join(problems[:3])})")
                pages.append((label, name, page))
            else:
                check(not page.exists(), f"report, {where}: no page after exit {made.returncode}")
    # Text payloads in the text a page shows, and markup where a number is shown, must render.
    rendered = {label for label, _, _ in pages}
    for name in TEXT_PAYLOADS:
        check(f"text fields <- {name}" in rendered, f"report renders a page with {name} in every text field")
    check("page numbers <- text for number" in rendered and "page numbers <- markup" in rendered,
          "report renders a page with markup where it shows numbers")
    return len(groups), pages


def main():
    args = parse_arguments()
    started = time.monotonic()
    cli = str(Path(args.cli).resolve())
    reference_path = Path(args.source) / "tests/data/sweep-2core.json"
    reference = json.loads(reference_path.read_text())
    fields = len(list(leaf_paths(reference)))
    objects = len(list(object_paths(reference)))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        groups, pages = check_groups(cli, reference, tmp)
        grouped_s = time.monotonic() - started
        compared = check_compare(cli, reference_path, reference, tmp)
        run_path, run = run_report(cli, tmp)
        run_fields, run_objects = len(list(leaf_paths(run))), len(list(object_paths(run)))
        compared_runs = check_compare(cli, run_path, run, tmp, "run")
        compared_s = time.monotonic() - started - grouped_s
        chromium = find_chromium()
        worst = [page for label, name, page in pages if name in ("markup", "script end", "quote breaker",
                                                                 "javascript url", "text for number")]
        if chromium is None:
            print("SKIP (browser part): no Chromium; the pages were checked statically only")
            worst = []
        for index, page in enumerate(worst):
            problems = browser_problems(chromium, page, tmp, f"page-{index}")
            check(not problems, f"Chromium, {page.parent.name}: no payload ran ({'; '.join(problems)})")
    print(f"sweep report: {fields} fields and {objects} objects x {len(PAYLOADS)} payloads: compare on {compared} "
          f"variants, report and plot on {groups} grouped files, {len(pages)} pages checked statically, "
          f"{len(worst)} in Chromium; run report: {run_fields} fields and {run_objects} objects, compare on "
          f"{compared_runs} variants; in {time.monotonic() - started:.0f} s (report and plot {grouped_s:.0f} s, "
          f"compare {compared_s:.0f} s)")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
