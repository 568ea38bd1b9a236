#!/usr/bin/env python3
"""plot and report scale to a large sweep: 5 strategies x cores 1..64 x nodes 1..8 x both models
(604 points, made up by huge_sweep.py from a real sweep) are drawn as figures split into panels
and pages, NAME-1.png, NAME-2.png, ..., none wider or taller than a screen or two, every page on
the HTML page, with no warning or traceback on either stream. plot writes exactly the files it
promises ("wrote" lines), each a whole PNG and a well-formed SVG. The time each command takes is
printed; only a hang (past HANG_S) fails the test, as a busy CI machine is slow."""
import html.parser
import json
import re
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from harness import check, exit_code, parse_arguments
from huge_sweep import huge_sweep

FIGURES = ["speedup", "efficiency", "throughput", "time_to_accuracy", "scaling_prediction", "breakdown"]
HANG_S = 300
# No image larger than this (pixels): the panels of a figure are split over pages instead.
MAX_WIDTH, MAX_HEIGHT = 2600, 2600


def timed(words, **kwargs):
    start = time.monotonic()
    run = subprocess.run(words, capture_output=True, text=True, timeout=2 * HANG_S, **kwargs)
    return run, time.monotonic() - start


def png_size(path):
    """(width, height) of a whole PNG, or None when it is not one (signature, IHDR, IEND)."""
    data = path.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or data[12:16] != b"IHDR" or not data.endswith(b"IEND\xaeB`\x82"):
        return None
    return struct.unpack(">II", data[16:24])


def svg_ok(path):
    try:
        return ElementTree.parse(path).getroot().tag.endswith("svg")
    except ElementTree.ParseError:
        return False


def check_quiet(name, run):
    """No text but the "wrote" lines: no warning, no traceback, nothing on stderr."""
    noise = [line for line in run.stdout.splitlines() if not line.startswith("wrote ")]
    check(run.returncode == 0, f"{name} exits 0 ({run.returncode}: {run.stderr.strip()[-400:]})")
    check(not run.stderr and not noise, f"{name} prints nothing but what it wrote (stderr: "
          f"{run.stderr.strip()[:400]!r}, stdout: {noise[:5]})")


def check_plot(cli, report, out):
    run, seconds = timed([cli, "plot", str(report), "--out", str(out)])
    print(f"plot of {report.name}: {seconds:.1f} s")
    check(seconds < HANG_S, f"plot ends in {seconds:.0f} s (a hang guard: {HANG_S} s)")
    check_quiet("plot", run)
    names = [m.group(1) for m in re.finditer(r"^wrote (.*)\.png and \.svg$", run.stdout, re.M)]
    promised = {Path(n).name + ext for n in names for ext in (".png", ".svg")}
    written = {p.name for p in out.iterdir()}
    check(promised == written, f"the files plot names are those it wrote (only named: {sorted(promised - written)}, "
          f"only written: {sorted(written - promised)})")
    for figure in FIGURES:
        pages = [Path(n).name for n in names if re.fullmatch(rf"{figure}(-\d+)?", Path(n).name)]
        whole = pages == [figure] or pages == [f"{figure}-{i}" for i in range(1, len(pages) + 1)]
        check(whole and pages, f"{figure}: one file or pages 1..{len(pages)} ({pages})")
    for figure in ("speedup", "throughput", "breakdown"):
        check(f"{figure}-2" in {Path(n).name for n in names}, f"{figure} of 604 points is split into pages")
    sizes = {}
    for name in sorted(promised & written):
        path = out / name
        if name.endswith(".png"):
            sizes[name] = png_size(path)
            check(sizes[name] is not None, f"{name} is a whole PNG")
        else:
            check(svg_ok(path), f"{name} is a well-formed SVG")
    big = {n: s for n, s in sizes.items() if s and (s[0] > MAX_WIDTH or s[1] > MAX_HEIGHT)}
    check(sizes and not big, f"no image is larger than {MAX_WIDTH} x {MAX_HEIGHT} pixels ({big}); the largest: "
          f"{max(sizes.values(), key=lambda s: s[0] * s[1], default=None)}")
    return [Path(n).name for n in names]


class Figures(html.parser.HTMLParser):
    """The page's figures: the label of each <svg> and each caption."""

    def __init__(self):
        super().__init__()
        self.labels, self.captions, self._caption = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "svg":
            self.labels.append(dict(attrs).get("aria-label"))
        if tag == "figcaption":
            self._caption = ""

    def handle_data(self, data):
        if self._caption is not None:
            self._caption += data

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self.captions.append(self._caption)
            self._caption = None


def check_report(cli, report, page, images):
    run, seconds = timed([cli, "report", str(report), "--out", str(page)])
    print(f"report of {report.name}: {seconds:.1f} s")
    check(seconds < HANG_S, f"report ends in {seconds:.0f} s (a hang guard: {HANG_S} s)")
    check_quiet("report", run)
    text = page.read_text() if page.is_file() else ""
    check(text.rstrip().endswith("</html>"), "the page is whole")
    figures = Figures()
    figures.feed(text)
    check(len(figures.labels) == len(images) and all(figures.labels),
          f"the page shows every page of every figure, labelled ({len(figures.labels)} plots, {len(images)} images)")
    split = [c for c in figures.captions if re.search(r"\(page \d+ of \d+\)", c)]
    check(len(split) == len([i for i in images if re.search(r"-\d+$", i)]),
          f"each page of a split figure says which page it is ({len(split)} captions)")


def main():
    args = parse_arguments()
    probe = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: /usr/bin/python3 has no matplotlib")
        return 77
    cli = str(Path(args.cli).resolve())
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        report = tmp / "huge.json"
        sweep = huge_sweep(args.source)
        report.write_text(json.dumps(sweep))
        check(len(sweep["points"]) == 604, f"the made-up sweep has 604 points ({len(sweep['points'])})")
        (tmp / "plots").mkdir()
        images = check_plot(cli, report, tmp / "plots")
        check_report(cli, report, tmp / "huge.html", images)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
