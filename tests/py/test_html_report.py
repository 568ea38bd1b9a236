#!/usr/bin/env python3
"""cnnbench report renders a sweep as one HTML page that headless Chromium loads offline: no console
message and no request from the page (host names resolve nowhere and a net log lists every request),
every section present, headings in order, tables with header cells, plots inline with alt text, a
screenshot that is not blank. Checked on the committed reference sweep, on a sweep derived from it
with failed, diverged and skipped points, a breakdown, a trace, a PyTorch peer and a regression
against the reference as baseline, and on every sweep report in results/ (older schema versions).
The command lines the page gives for in-process points are run and their run reports hold the
sweep's settings. Chromium that misbehaves on purpose (a page with a console error and a remote
image) shows that the checks can fail. Exit 77 (skipped) without Chromium."""
import base64
import copy
import hashlib
import html
import html.parser
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import FAILURES, check, exit_code, parse_arguments

SECTIONS = ["summary", "points", "plots", "each-point", "baseline", "provenance"]
LOCAL_SCHEMES = ("file:", "data:", "about:", "chrome:", "blob:")


def find_chromium():
    for name in (os.environ.get("CNNBENCH_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def chromium_words(chromium, scratch, netlog):
    words = [chromium, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             f"--user-data-dir={scratch}", "--host-resolver-rules=MAP * ~NOTFOUND",
             f"--log-net-log={netlog}", "--enable-logging=stderr", "--log-level=0", "--v=0",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--virtual-time-budget=3000"]
    # CI runs as root, where Chromium's sandbox cannot start.
    return words + (["--no-sandbox"] if os.geteuid() == 0 else [])


def page_requests(netlog):
    """The URLs the page asked for: the net log's URL requests made on behalf of a page (the
    browser's own, e.g. its update check, have no origin), other than local ones."""
    text = netlog.read_text()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log whose writer was cut short lacks its closing brackets
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") != start_job or "url" not in params:
            continue
        if params.get("initiator") == "not an origin" or params["url"].startswith(LOCAL_SCHEMES):
            continue
        urls.append(params["url"])
    return urls


def load(chromium, page, tmp, name, screenshot=False):
    """Loads `page` in headless Chromium: (its DOM after scripts ran, console lines, page
    requests, the screenshot's path or None)."""
    scratch = tmp / f"chromium-{name}"
    netlog = tmp / f"{name}.netlog.json"
    words = chromium_words(chromium, scratch, netlog)
    shot = tmp / f"{name}.png"
    action = ["--window-size=1280,1800", f"--screenshot={shot}"] if screenshot else ["--dump-dom"]
    run = subprocess.run(words + action + [page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return run.stdout, console, page_requests(netlog), shot if screenshot and shot.is_file() else None


class PageOutline(html.parser.HTMLParser):
    """Headings, header cells, tables, plots and anything that would load from elsewhere."""

    def __init__(self):
        super().__init__()
        self.headings, self.ids, self.remote, self.svgs = [], set(), [], []
        self.tables = self.header_cells = 0
        self.codes, self._heading, self._code = [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag in ("h1", "h2", "h3", "h4"):
            self._heading = [int(tag[1]), a.get("id"), ""]
        if tag == "table":
            self.tables += 1
        if tag == "th":
            self.header_cells += 1
        if tag == "svg":
            self.svgs.append(a.get("aria-label"))
        if tag == "code":
            self._code = ""
        for key in ("src", "href", "xlink:href"):
            value = a.get(key)
            if value and tag != "a" and not value.startswith(("#", "data:")):
                self.remote.append(f"<{tag} {key}={value}>")

    def handle_data(self, data):
        if self._heading is not None:
            self._heading[2] += data
        if self._code is not None:
            self._code += data

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3", "h4") and self._heading is not None:
            self.headings.append(tuple(self._heading))
            self._heading = None
        if tag == "code" and self._code is not None:
            self.codes.append(self._code)
            self._code = None


def not_blank(png):
    import matplotlib.image  # the report needed matplotlib already
    pixels = matplotlib.image.imread(str(png))[..., :3].reshape(-1, 3)
    return len({tuple(p) for p in pixels[:: max(1, len(pixels) // 200000)]}) > 1


def check_page(chromium, page, tmp, name, expect=()):
    """The page loads with no console message and no request, has every section, headings in
    order, header cells, labelled plots, the texts in `expect`, and a screenshot not blank."""
    dom, console, requests, _ = load(chromium, page, tmp, name)
    check(dom.startswith("<html") or "<body" in dom, f"{name}: Chromium loaded the page")
    check(not console, f"{name}: no console message ({console[:3]})")
    check(not requests, f"{name}: no request left the page ({requests[:3]})")
    outline = PageOutline()
    outline.feed(dom)
    missing = [s for s in SECTIONS if s not in outline.ids]
    check(not missing, f"{name}: every section is there (missing: {missing})")
    levels = [level for level, _, _ in outline.headings]
    check(levels[:1] == [1] and all(b <= a + 1 for a, b in zip(levels, levels[1:])),
          f"{name}: headings in order, none skipped ({levels[:12]}...)")
    check(outline.tables > 0 and outline.header_cells >= 3 * outline.tables,
          f"{name}: {outline.tables} tables with header cells ({outline.header_cells} <th>)")
    check(len(outline.svgs) >= 5 and all(outline.svgs),
          f"{name}: the plots are inline SVG with alt text ({len(outline.svgs)} plots)")
    check(not outline.remote, f"{name}: nothing to load from elsewhere ({outline.remote[:3]})")
    for text in expect:
        check(text in dom, f"{name}: the page says {text!r}")
    _, _, _, shot = load(chromium, page, tmp, name + "-shot", screenshot=True)
    check(shot is not None and not_blank(shot), f"{name}: the screenshot is not one colour")
    return dom, outline


def render(cli, report, out, *extra):
    """cnnbench report, run in the page's folder (where a relative trace path leads from)."""
    return subprocess.run([str(Path(cli).resolve()), "report", str(Path(report).resolve()), "--out", out.name,
                           *map(str, extra)], cwd=out.parent, capture_output=True, text=True, timeout=600)


def check_controls(chromium, tmp):
    """A page with a console error and a remote image fails the checks."""
    bad = tmp / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://example.com/x.png" alt="x">'
                   '<script>console.error("deliberate");</script></body></html>')
    _, console, requests, _ = load(chromium, bad, tmp, "control")
    check(any("deliberate" in line for line in console), f"control: a console error is seen ({console[:2]})")
    check(any("example.com" in url for url in requests), f"control: a remote image request is seen ({requests})")


def check_sorting(chromium, page, reference, tmp):
    """Pressing the points table's "median (s)" header sorts by median time, pressing it again
    reverses: the first row is then the fastest, then the slowest point of the report."""
    probe = tmp / "sorting.html"
    press = ('var b = document.querySelectorAll("table.sortable")[0].tHead.rows[0].cells[2].querySelector("button");'
             'function first() { return document.querySelector("table.sortable tbody tr td").textContent; }'
             'b.click(); console.log("ascending:" + first()); b.click(); console.log("descending:" + first());')
    # The page's CSP runs only scripts it names by hash: the probe's is added to it.
    digest = base64.b64encode(hashlib.sha256(press.encode()).digest()).decode()
    probe.write_text(page.read_text().replace("script-src ", f"script-src 'sha256-{digest}' ", 1)
                     .replace("</body>", f"<script>{press}</script></body>"))
    _, console, _, _ = load(chromium, probe, tmp, "sorting")
    ok = sorted((p for p in reference["points"] if p["status"] == "ok"), key=lambda p: p["time"]["median"])
    check(any(f"ascending:{ok[0]['id']}" in line for line in console) and
          any(f"descending:{ok[-1]['id']}" in line for line in console),
          f"the points table sorts by median time both ways ({ok[0]['id']} first, then {ok[-1]['id']}; "
          f"console: {[line.split('CONSOLE')[-1][:60] for line in console]})")


def derived_sweep(reference):
    """The reference with a failed, a diverged and a 2x slower point, a breakdown, a straggler, a
    trace, a PyTorch peer point and vs_pytorch_1thread on every point."""
    sweep = copy.deepcopy(reference)
    by_id = {p["id"]: p for p in sweep["points"]}
    keep = ("id", "model", "strategy", "cores", "nodes", "p", "series")
    for point_id, status, reason in (("fc3/stream/n1c2", "failed", "worker exited with signal 11"),
                                     ("lenet5/blas/n1c2", "diverged", "loss not finite at step 17")):
        point = by_id[point_id]
        for key in list(point):
            if key not in keep:
                del point[key]
        point.update(status=status, reason=reason)
    slow = by_id["lenet5/stream/n1c2"]
    slow["times_s"] = [2 * t for t in slow["times_s"]]
    slow["time"] = {k: (2 * v if k != "mad" else 2 * v) for k, v in slow["time"].items()}
    wall = by_id["lenet5/cluster/n1c2"]["time"]["median"]
    by_id["lenet5/cluster/n1c2"].update(
        time_breakdown={"wall_s": wall, "busy_s": 0.8 * wall, "compute_s": 0.6 * wall, "update_s": 0.1 * wall,
                        "reduce_s": 0.05 * wall, "data_s": 0.05 * wall, "communication_exposed_s": 0.15 * wall,
                        "imbalance_wait_s": 0.05 * wall, "other_s": 0.0, "steps": 200, "workers": []},
        straggler={"kind": "rank", "id": 1, "mean_excess": 1.25, "descheduled_share": 0.5},
        trace="traces/lenet5-cluster-n1c2.json", median_repetition=0)
    peer = copy.deepcopy(by_id["fc3/blas/n1c1"])
    peer.update(id="fc3/pytorch/n1c1", strategy="pytorch", series="pytorch", peer=True,
                peer_info={"torch": "2.1.0", "threads": 1})
    sweep["points"].append(peer)
    for point in sweep["points"]:
        point["vs_pytorch_1thread"] = 1.5 if point["status"] == "ok" else None
    sweep["complete"] = False
    sweep["pair_core_warning"] = {"points": [{"id": "fc3/cluster/n1c2", "speedup": 1.2}], "margin": 0.05,
                                  "message": "fc3's pairs ran on core 1, whose serial repetitions took <b>8%</b> "
                                             "longer than core 0's"}
    return sweep


def command_of(outline, point_id):
    """The command line the page gives for a point (the code block of its section)."""
    return next((code for code in outline.codes if f"--model {point_id.split('/')[0]} " in code
                 and f"--strategy {point_id.split('/')[1]} " in code
                 and f"--threads {point_id.split('/')[2][3:]} " in code and "-np" not in code), None)


def check_commands(cli, outline, reference, tmp):
    """The commands of two in-process points, run, record the sweep's settings."""
    config = reference["config"]
    for point_id in ("fc3/serial/n1c1", "fc3/stream/n1c2"):
        point = next(p for p in reference["points"] if p["id"] == point_id)
        command = command_of(outline, point_id)
        check(command is not None and command.startswith("cnnbench train "), f"{point_id}: the page gives a command")
        if command is None:
            continue
        words = shlex.split(html.unescape(command))
        folder = tmp / point_id.replace("/", "-")
        folder.mkdir()
        run = subprocess.run([str(Path(cli).resolve())] + words[1:], cwd=folder, capture_output=True, text=True, timeout=300)
        check(run.returncode == 0, f"{point_id}: its command runs ({run.stderr.strip()[-300:]})")
        if run.returncode != 0:
            continue
        got = json.loads((folder / "run.json").read_text())["config"]
        want = {"model": point["model"], "strategy": point["strategy"], "threads": point["cores"],
                "batch": config["batch"], "steps": point["steps"], "seed": config["seed"], "pin": config["pin"]}
        wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        wrong.update({k: (got.get(k), config[k]) for k in ("lr", "momentum")
                      if abs(got.get(k, 0) - config[k]) > 1e-6 * config[k]})
        check(not wrong, f"{point_id}: the run has the sweep's settings (run vs sweep: {wrong})")


def check_sweep_html(cli, tmp):
    """sweep --html writes the page at the end of a sweep; with --out - there is no report to
    render, a usage error before anything runs."""
    sweep = [str(Path(cli).resolve()), "sweep", "--model", "fc3", "--strategies", "serial", "--steps", "2",
             "--repeat", "1", "--warmup", "0", "--synthetic", "256", "--quiet"]
    page = tmp / "sweep.html"
    made = subprocess.run(sweep + ["--out", str(tmp / "sweep.json"), "--html", str(page)],
                          capture_output=True, text=True, timeout=300)
    text = page.read_text() if page.is_file() else ""
    check(made.returncode == 0 and all(f'id="{s}"' in text for s in SECTIONS) and "fc3/serial/n1c1" in text,
          f"sweep --html writes the page with every section ({made.stderr.strip()[-300:]})")
    refused = subprocess.run(sweep + ["--out", "-", "--html", str(tmp / "never.html")],
                             capture_output=True, text=True, timeout=300)
    check(refused.returncode == 2 and "--html" in refused.stderr and not (tmp / "never.html").exists(),
          f"sweep --out - --html is refused ({refused.stderr.strip()})")


def main():
    args = parse_arguments()
    with tempfile.TemporaryDirectory() as scratch:
        check_sweep_html(args.cli, Path(scratch))
    chromium = find_chromium()
    if chromium is None:
        if FAILURES:
            return 1
        print("SKIP: no Chromium (chromium, chromium-browser or $CNNBENCH_CHROMIUM): the HTML report is not "
              "checked in a browser; scripts/setup.sh --tests installs it (apt-get install chromium)")
        return 77
    source = Path(args.source)
    reference_path = source / "tests/data/sweep-2core.json"
    reference = json.loads(reference_path.read_text())
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        check_controls(chromium, tmp)

        page = tmp / "reference.html"
        made = render(args.cli, reference_path, page)
        check(made.returncode == 0 and page.is_file(), f"report renders the reference sweep ({made.stderr.strip()})")
        if page.is_file():
            skipped = [p["id"] for p in reference["points"] if p["status"] == "skipped"]
            _, outline = check_page(chromium, page, tmp, "reference", expect=skipped + ["SKIPPED", "No baseline given"])
            check_commands(args.cli, outline, reference, tmp)
            check_sorting(chromium, page, reference, tmp)

        derived_path = tmp / "derived.json"
        derived_path.write_text(json.dumps(derived_sweep(reference)))
        page = tmp / "derived.html"
        made = render(args.cli, derived_path, page, "--baseline", reference_path.resolve())
        check(made.returncode == 0 and page.is_file(), f"report renders a sweep with failed points against a "
              f"baseline ({made.stderr.strip()})")
        if page.is_file():
            dom, _ = check_page(chromium, page, tmp, "derived", expect=[
                "FAILED", "worker exited with signal 11", "DIVERGED", "loss not finite at step 17",
                "INCOMPLETE", "PyTorch peer", "vs PyTorch 1 thread", "communication exposed",
                "Pairs on a slower core", "took &lt;b&gt;8%&lt;/b&gt; longer",
                'href="traces/lenet5-cluster-n1c2.json"', "rank 1: busy 1.25x"])
            row = next((r for r in dom.split("<tr") if "lenet5/stream/n1c2" in r and "ratio" not in r
                        and "REGRESSION" in r), "")
            check('class="regression"' in row, "the point made 2x slower is marked REGRESSION in words, its row highlighted")

        for report in sorted((source / "results").glob("*.json")):
            kind = json.loads(report.read_text()).get("kind")
            out = tmp / f"{report.stem}.html"
            made = render(args.cli, report, out)
            if kind == "sweep":
                check(made.returncode == 0 and out.is_file(), f"{report.name} (schema version "
                      f"{json.loads(report.read_text()).get('schema_version')}) renders ({made.stderr.strip()})")
            else:
                check(made.returncode == 1 and "sweep" in made.stderr and not out.exists(),
                      f"{report.name}, a run report, is refused with one line and no page ({made.stderr.strip()})")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
