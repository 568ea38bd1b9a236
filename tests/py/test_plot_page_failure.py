#!/usr/bin/env python3
"""A page that fails to draw ends `plot` with its error, never with a hang. plot_report.py draws a
sweep's pages in a pool of worker processes; when one page raises, the others are waited for and
none is cancelled (a cancelled future of a process pool can leave its shutdown waiting for ever on
CPython before 3.12, CPython issue 94440, and ProcessPoolExecutor.map cancels what is left once a
result raises). The check runs plot_report's draw_figures in a child process of its own, with a
timeout, on the committed reference sweep whose first page is made to fail in its worker: the
error comes back, no future was cancelled, and every other page was still drawn."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import check, exit_code, parse_arguments

CHILD = r"""
import concurrent.futures, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import plot_report

cancelled = []
original_cancel = concurrent.futures.Future.cancel
def recorded_cancel(self):
    cancelled.append(self)
    return original_cancel(self)
concurrent.futures.Future.cancel = recorded_cancel

report = json.loads(Path(sys.argv[2]).read_text())
models = report["config"]["models"]
layout, draw = plot_report.FIGURES["speedup"]
def failing(report, models, out):
    if plot_report.ONLY_PAGE == ("speedup", 0):
        raise RuntimeError("page speedup-0 fails on purpose")
    return draw(report, models, out)
plot_report.FIGURES["speedup"] = (layout, failing)  # before the workers fork: they inherit it
out = Path(sys.argv[3])
try:
    plot_report.draw_figures(report, models, out)
    print("error: none")
except RuntimeError as e:
    print(f"error: {e}")
print(f"cancelled: {len(cancelled)}")
print(f"drawn: {len(list(out.glob('*.png')))}")
print(f"expected: {len(plot_report.figure_files(report, models)) - 1}")
"""


def main():
    args = parse_arguments()
    source = Path(args.source)
    if len(os.sched_getaffinity(0)) < 2:
        print("SKIP: one CPU here, so plot_report draws in-process, without a pool of workers")
        return 77
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "images"
        out.mkdir()
        try:
            run = subprocess.run([sys.executable, "-c", CHILD, str(source / "plots"),
                                  str(source / "tests/data/sweep-2core.json"), str(out)],
                                 capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "MPLBACKEND": "Agg"})
        except subprocess.TimeoutExpired:
            check(False, "draw_figures returns within 300 s after a page fails (it hung)")
            return exit_code()
        lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
        check(run.returncode == 0, f"the child exits 0 (exit {run.returncode}; {run.stderr.strip()[-300:]})")
        check(lines.get("error") == "page speedup-0 fails on purpose",
              f"the failed page's error comes back from draw_figures ({lines.get('error')!r})")
        check(lines.get("cancelled") == "0", f"no future is cancelled ({lines.get('cancelled')} were)")
        check(lines.get("drawn") is not None and lines.get("drawn") == lines.get("expected"),
              f"every other page is still drawn ({lines.get('drawn')} of {lines.get('expected')} PNGs)")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
