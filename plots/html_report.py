#!/usr/bin/env python3
"""One self-contained HTML page of a `cnnbench sweep` report: summary, the points, the plots (inline
SVG drawn by plot_report.py), each point's configuration and command line, the comparison against
a baseline and the machine the sweep ran on. Nothing on the page is fetched from anywhere: it opens
from file:// offline. Run by `cnnbench report`, which passes what only cnnbench knows in --inputs:
{"commands": {point id: command line or null}, "comparison": compare --json's object or null}.

Usage: html_report.py SWEEP.json --inputs INPUTS.json --out PAGE.html
(exit 3 when matplotlib is missing; exit 4 after printing one "cnnbench: error: ..." line)
"""
import argparse
import base64
import hashlib
import html
import json
import math
import os
import re
import sys
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_report as plots  # noqa: E402  (exits 3 without matplotlib)

plots.matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, readable
plots.matplotlib.rcParams["svg.hashsalt"] = "cnnbench"  # the same report gives the same page

SECTIONS = [("summary", "Summary"), ("points", "Points"), ("plots", "Plots"),
            ("each-point", "Each point"), ("baseline", "Against a baseline"), ("provenance", "Provenance")]

# (name, alt text) of each figure (plot_report.FIGURES draws it); the breakdown only where a point
# has one.
FIGURES = [
    ("speedup", "Speedup over the serial reference against cores, per strategy, with the ideal line and "
     "Amdahl fits"),
    ("efficiency", "Parallel efficiency (speedup / cores) against cores, per strategy"),
    ("throughput", "Training throughput in images per second, one bar per point"),
    ("time_to_accuracy", "Test accuracy against wall time, one curve per point"),
    ("breakdown", "Where each point's step time goes, by category, over the serial step"),
    ("scaling_prediction", "Predicted cluster efficiency against nodes, per fabric, with the measured points"),
]

STYLE = """
:root { color-scheme: light dark; --fg: #1a1a1a; --bg: #ffffff; --muted: #555; --line: #ccc;
  --head: #f0f0f0; --bad: #b00020; --bad-bg: #fde7ea; --good: #1b5e20; --code: #f5f5f5; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e8e8e8; --bg: #161616; --muted: #aaa; --line: #444; --head: #262626;
    --bad: #ff8a80; --bad-bg: #3d1c1f; --good: #a5d6a7; --code: #222; } }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); max-width: 78rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { border-bottom: 1px solid var(--line);
  padding-bottom: 0.2rem; margin-top: 2.2rem; } h3 { margin-top: 1.6rem; }
.muted, caption, figcaption { color: var(--muted); font-size: 0.9rem; }
nav ul { display: flex; flex-wrap: wrap; gap: 0.3rem 1.2rem; padding: 0; list-style: none; }
a { color: inherit; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
caption { text-align: left; padding-bottom: 0.3rem; }
th, td { border: 1px solid var(--line); padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: var(--head); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th button { all: inherit; cursor: pointer; border: 0; padding: 0; }
th button::after { content: " \\2195"; color: var(--muted); }
th[aria-sort="ascending"] button::after { content: " \\2191"; }
th[aria-sort="descending"] button::after { content: " \\2193"; }
tr.regression td { background: var(--bad-bg); }
.regression-mark, .status-bad { color: var(--bad); font-weight: 600; }
.faster-mark { color: var(--good); font-weight: 600; }
figure { margin: 1rem 0; }
figure .plot { background: #fff; border: 1px solid var(--line); border-radius: 4px; padding: 0.3rem;
  overflow-x: auto; }
figure svg { max-width: 100%; height: auto; display: block; }
pre { background: var(--code); padding: 0.5rem; overflow-x: auto; white-space: pre-wrap;
  word-break: break-all; font-size: 0.85rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; margin: 0.5rem 0; }
dt { font-weight: 600; } dd { margin: 0; overflow-wrap: anywhere; }
section.point { border-top: 1px dotted var(--line); }
@media print {
  body { max-width: none; padding: 0; font-size: 10pt; color: #000; background: #fff; }
  nav, th button::after { display: none; }
  h2 { break-after: avoid; } figure, table, section.point { break-inside: avoid; }
  pre { white-space: pre-wrap; }
  a[href]:not([href^="#"])::after { content: " (" attr(href) ")"; font-size: 0.8em; }
  tr.regression td { background: none; }
}
"""

# Sorts a table by a column when its header's button is pressed: by data-sort where a cell has
# one (numbers), else by the cell's text; pressing again reverses the order.
SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("thead th").forEach(function (th, column) {
    var button = th.querySelector("button");
    if (!button) return;
    button.addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[column];
        var value = cell.getAttribute("data-sort");
        return value === null ? cell.textContent.trim() : parseFloat(value);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = (typeof x === "number" && typeof y === "number") ?
            (isNaN(x) ? 1 : isNaN(y) ? -1 : x - y) : String(x).localeCompare(String(y));
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


# ---- Building elements ------------------------------------------------------------------------
# Every element of the page is made by el: text is escaped for where it lands, attribute values
# are quoted and escaped, a link goes only to a fragment or a relative file, and no attribute is
# an event handler. A report comes from anyone, and whatever its fields hold is text on the page.

class Markup(str):
    """HTML that el made (or matplotlib's SVG, whose text matplotlib escapes): inserted as it is.
    Any other value placed in an element is text and escaped."""


def content(child):
    if child is None:
        return ""
    if isinstance(child, Markup):
        return child
    if isinstance(child, (list, tuple)):
        return "".join(content(c) for c in child)
    return html.escape(child if isinstance(child, str) else text_of(child), quote=False)


VOID_ELEMENTS = {"meta", "link", "br"}
EMPTY_ICON = "data:,"  # the page's icon: none, so that the browser asks for no /favicon.ico
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def relative_file(path):
    """True when `path` names a file relative to the page: no scheme ("javascript:", "http:"),
    not absolute, not "//host", no control character."""
    return (isinstance(path, str) and path != "" and not SCHEME.match(path) and not path.startswith(("/", "\\"))
            and not any(ord(c) < 0x20 or ord(c) == 0x7f for c in path))


def href_value(target):
    """A link's target: a fragment of this page ("#point-...") or a relative file, percent-encoded
    (so that no ":" in it can read as a scheme). Anything else is a bug of this script."""
    if target == EMPTY_ICON or re.fullmatch(r"#[A-Za-z0-9_-]+", target):
        return target
    if not relative_file(target):
        raise ValueError(f"a link to {target!r}: the page links only to its own sections and relative files")
    return urllib.parse.quote(target, safe="/._-~")


def el(tag, *children, **attributes):
    """<tag name="value"...>children</tag>. An attribute's name comes from this script
    (class_ -> class, data_sort -> data-sort); None leaves it out, True writes it bare."""
    words = [tag]
    for name, value in attributes.items():
        name = name.rstrip("_").replace("_", "-")
        if name.lower().startswith("on"):
            raise ValueError(f"<{tag} {name}>: the page has no inline event handlers")
        if value is None or value is False:
            continue
        if value is True:
            words.append(name)
            continue
        value = href_value(value) if name == "href" else value if isinstance(value, str) else text_of(value)
        words.append(f'{name}="{html.escape(value, quote=True)}"')
    start = Markup("<" + " ".join(words) + ">")
    return start if tag in VOID_ELEMENTS else Markup(start + content(children) + f"</{tag}>")


def join(parts, separator=""):
    return Markup(content(separator).join(content(p) for p in parts))


# ---- Reading fields of any type ---------------------------------------------------------------

is_number = plots.is_number  # int or float, not bool


def num(value):
    return value if is_number(value) else None


def obj(value):
    return value if isinstance(value, dict) else {}


def items(value):
    return value if isinstance(value, list) else []


def field(value, *keys):
    """value[keys[0]][keys[1]]...; None where a level is missing or not an object."""
    for key in keys:
        value = obj(value).get(key)
    return value


def text_of(value):
    """A field as text: a string as it is, a number formatted, none as an en dash, anything else
    (true, a list, an object) as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return "\u2013"
    if is_number(value):
        return number(value)
    return json.dumps(value)


def number(value, digits=3, suffix=""):
    """A number for people (3 significant digits), or an en dash where there is none."""
    if not is_number(value):
        return "\u2013"
    return f"{value:.{digits}g}{suffix}"


def sort_key(value):
    """A numeric cell's value for sorting, in JavaScript's spelling: NaN for none, Infinity for a
    target never reached."""
    if not is_number(value) or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def cell(contents, sort=None, numeric=False):
    """A table cell; a numeric one carries its value for sorting."""
    if numeric:
        return el("td", contents, data_sort=sort_key(sort), class_="num")
    return el("td", contents)


def table(headers, rows, caption=None, sortable=False):
    """A table with <th scope=col> headers; a sortable one has a button in each header. `rows`:
    (class of the row or None, cells)."""
    head = [el("th", el("button", h, type="button") if sortable else h, scope="col") for h in headers]
    body = [el("tr", cells, class_=row_class) for row_class, cells in rows]
    return el("table", el("caption", caption) if caption else None, el("thead", el("tr", head)),
              el("tbody", body), class_="sortable" if sortable else None)


def definitions(pairs):
    """A <dl> of (term, contents) pairs, leaving out those without a value."""
    rows = [[el("dt", term), el("dd", value)] for term, value in pairs if value not in (None, "", "\u2013")]
    return el("dl", rows) if rows else ""


def anchor(point_id):
    return "point-" + "".join(c if c.isascii() and c.isalnum() else "-" for c in text_of(point_id))


def point_link(point, text=None):
    return el("a", text_of(point.get("id")) if text is None else text, href="#" + anchor(point.get("id")))


def all_points(report):
    return [p for p in items(report.get("points")) if isinstance(p, dict)]


def measured(report):
    return [p for p in all_points(report) if p.get("status") == "ok"]


def is_peer(point):
    return point.get("peer") is True


# ---- Summary ----------------------------------------------------------------------------------

def speed(point):
    """What ranks points of one model: the paired speedup (serial ran beside each repetition, so
    drift in the machine's speed cancels), else the inverse median time."""
    if is_number(point.get("speedup")):
        return (1, point["speedup"])
    median = num(field(point, "time", "median"))
    return (0, -median) if median is not None else (-1, 0)


def best_points(report):
    """The fastest cnnbench point per model and core count p; PyTorch peers are the yardstick,
    not candidates."""
    best = {}
    for p in measured(report):
        if is_peer(p):
            continue
        key = (text_of(p.get("model")), num(p.get("p")) or 0)
        if key not in best or speed(p) > speed(best[key]):
            best[key] = p
    models = [m for m in items(field(report, "config", "models")) if isinstance(m, str)]
    return [best[k] for k in sorted(best, key=lambda k: (models.index(k[0]) if k[0] in models else 99, k[0], k[1]))]


def largest_overhead(point):
    """(label, share of the step) of the largest category of a point's breakdown besides compute."""
    breakdown = point.get("time_breakdown")
    wall = num(field(breakdown, "wall_s"))
    if not wall:
        return None
    seconds = {k: v for k, v in plots.category_seconds(breakdown).items() if is_number(v) and k != "compute_s"}
    if not seconds:
        return None
    key = max(seconds, key=lambda k: seconds[k])
    if seconds[key] <= 0:
        return None
    return plots.CATEGORY_LABEL[key], seconds[key] / wall


def status_counts(report):
    counts = {}
    for p in all_points(report):
        counts[text_of(p.get("status"))] = counts.get(text_of(p.get("status")), 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def sweep_warnings(report):
    """What the sweep itself warned of that makes its speedups less sure, as it printed it."""
    found = []
    for key, label in (("pair_core_warning", "Pairs on a slower core"),
                       ("baseline_warning", "Serial is not the fastest one-core path")):
        message = obj(report.get(key)).get("message")
        if message:
            found.append(el("li", el("strong", f"{label}: "), text_of(message)))
    placement = obj(report.get("core_placement"))
    if placement.get("message"):
        label = "The cores moved" if placement.get("moved") is True else "The cores sit apart"
        found.append(el("li", el("strong", f"{label}: "), text_of(placement["message"])))
    slow = sum(len(items(p.get("slow_core_warnings"))) for p in all_points(report))
    if slow:
        found.append(el("li", el("strong", "Slow cores: "),
                        f"{slow} repetitions ran next to a core probe below its usual speed and were "
                        "taken again (each point's slow_core_warnings)"))
    return el("ul", found, class_="warnings", aria_label="The sweep's warnings") if found else ""


def summary_section(report):
    best = best_points(report)
    parallel = [p for p in best if (num(p.get("p")) or 0) > 1 and is_number(p.get("speedup"))]
    if parallel:
        top = max(parallel, key=lambda p: p["speedup"])
        lead = "The largest speedup is" if top["speedup"] > 1 else \
            "No parallel point beat the serial reference; the closest is"
        first = (f"{lead} {text_of(top.get('id'))}: {number(top['speedup'])}x the serial reference "
                 f"on {text_of(top.get('p'))} cores (efficiency {number(top.get('efficiency'))})")
        overhead = largest_overhead(top)
        if overhead:
            first += f"; its largest cost besides compute is {overhead[0]} ({overhead[1]:.0%} of the step)."
        elif is_number(top.get("karp_flatt")):
            first += f"; the Karp-Flatt serial fraction is {number(top['karp_flatt'])}."
        else:
            first += "."
    elif best:
        first = "No parallel point was measured; the serial reference stands alone."
    else:
        first = "No point was measured."
    second = (f"Of {len(all_points(report))} points: {status_counts(report)}"
              f"{'' if report.get('complete', True) is not False else '; the sweep is INCOMPLETE'}.")
    with_peers = any(is_number(p.get("vs_pytorch_1thread")) for p in all_points(report))
    headers = ["model", "cores p", "fastest", "median time (s)", "speedup", "efficiency"]
    headers += ["vs PyTorch 1 thread"] if with_peers else []
    rows = []
    for p in best:
        point_name = text_of(p.get("id")).split("/")[-1]
        median = field(p, "time", "median")
        cells = [cell(text_of(p.get("model"))), cell(text_of(p.get("p")), p.get("p"), True),
                 cell(point_link(p, f"{text_of(p.get('strategy'))} ({point_name})")),
                 cell(number(median, 4), median, True),
                 cell(number(p.get("speedup")), p.get("speedup"), True),
                 cell(number(p.get("efficiency")), p.get("efficiency"), True)]
        if with_peers:
            cells.append(cell(number(p.get("vs_pytorch_1thread")), p.get("vs_pytorch_1thread"), True))
        rows.append((None, cells))
    return join([el("p", f"{first} {second}"), sweep_warnings(report),
                 table(headers, rows, "The fastest strategy per model and core count (highest paired speedup over "
                       "serial)")])


# ---- Points -----------------------------------------------------------------------------------

def speedup_text(point, report):
    """"1.8 [1.7–1.9]": the speedup with the range of its paired ratios (or of the unpaired
    bounds for a report without pairs)."""
    speedup = point.get("speedup")
    if not is_number(speedup):
        return number(None)
    base = next((p for p in measured(report) if p.get("model") == point.get("model")
                 and p.get("strategy") == "serial"), None)
    if base is None or point.get("strategy") == "serial":
        return number(speedup)
    try:
        low, high = plots.speedup_range(point, base)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return number(speedup)
    return f"{number(speedup)} [{number(low)}\u2013{number(high)}]"


def time_to_accuracy_text(point):
    tta = point.get("time_to_accuracy")
    if not isinstance(tta, dict):
        return number(None), None
    if tta.get("reached") is not True:
        return f"not reached in {text_of(tta.get('steps', '?'))} steps", float("inf")
    return f"{number(tta.get('seconds'))} s ({text_of(tta.get('steps'))} steps)", num(tta.get("seconds"))


def points_table(report):
    with_peers = any(is_number(p.get("vs_pytorch_1thread")) for p in all_points(report))
    headers = ["point", "status", "median (s)", "range (s)", "speedup [paired range]", "efficiency",
               "Karp-Flatt", "time to accuracy"] + (["vs PyTorch 1 thread"] if with_peers else [])
    rows = []
    for p in measured(report):
        t = obj(p.get("time"))
        low, high = num(t.get("min")), num(t.get("max"))
        tta_text, tta_sort = time_to_accuracy_text(p)
        name = join([point_link(p), " (PyTorch peer)" if is_peer(p) else ""])
        noisy = " (noisy)" if p.get("noise_warning") else ""
        noisy += " (wide)" if p.get("spread_warning") else ""
        cells = [cell(name), cell("ok" + noisy),
                 cell(number(t.get("median"), 4), t.get("median"), True),
                 cell(f"{number(low, 4)}\u2013{number(high, 4)}",
                      high - low if low is not None and high is not None else None, True),
                 cell(speedup_text(p, report), p.get("speedup"), True),
                 cell(number(p.get("efficiency")), p.get("efficiency"), True),
                 cell(number(p.get("karp_flatt")), p.get("karp_flatt"), True),
                 cell(tta_text, tta_sort, True)]
        if with_peers:
            cells.append(cell(number(p.get("vs_pytorch_1thread")), p.get("vs_pytorch_1thread"), True))
        rows.append((None, cells))
    return table(headers, rows, "Measured points: median of the repetitions and their range; press a "
                 "header to sort", sortable=True)


def unmeasured_list(report):
    others = [p for p in all_points(report) if p.get("status") != "ok"]
    if not others:
        return el("p", "Every point was measured: none skipped, failed or diverged.")
    rows = [(None, [cell(point_link(p)),
                    cell(el("span", text_of(p.get("status")).upper(), class_="status-bad")),
                    cell(text_of(p.get("reason") or "no reason recorded"))]) for p in others]
    return table(["point", "status", "reason"], rows, "Points not measured, and why")


def settings_text(options):
    return " ".join(f"--{text_of(k)} {text_of(v)}" for k, v in sorted(obj(options).items())) or "the sweep's options"


def tuned_section(report):
    """sweep --tuned: each tune's winner beside the default it was measured with, both from these
    rounds, and what the tune itself measured of the two."""
    tuned = [p for p in all_points(report) if isinstance(p.get("tuned"), dict)]
    if not tuned:
        return ""
    by_id = {p.get("id"): p for p in all_points(report)}
    rows = []
    for p in tuned:
        t = p["tuned"]
        default = by_id.get(t.get("default_point"), {}) if not t.get("default") else p
        ours, theirs = num(p.get("speedup")), num(default.get("speedup"))
        ratio = ours / theirs if ours is not None and theirs else None
        rows.append((None, [cell(point_link(p)),
                            cell(join([text_of(t.get("label")), el("br"),
                                       el("code", settings_text(t.get("options")))])),
                            cell(number(ours), ours, True),
                            cell("itself: the tune kept the default" if t.get("default") else point_link(default)),
                            cell(number(theirs), theirs, True),
                            cell(number(ratio), ratio, True),
                            cell(f"{number(t.get('tune_speedup'))} / {number(t.get('tune_default_speedup'))}"),
                            cell(text_of(t.get("from")))]))
    return join([el("h3", "Tuned settings against the defaults", id="tuned"),
                 table(["tuned point", "settings (the tune's label, the options over the sweep's)",
                        "speedup", "default point", "its speedup", "tuned / default",
                        "in the tune: tuned / default", "tune report"], rows,
                       "sweep --tuned: each winner measured in the same rounds as its default, both paired "
                       "with serial")])


def points_section(report):
    return join([points_table(report), tuned_section(report),
                 el("h3", "Skipped, failed and diverged points", id="not-measured"), unmeasured_list(report)])


# ---- Plots ------------------------------------------------------------------------------------

def svg_body(text, alt):
    """A matplotlib SVG document as inline markup, labelled for screen readers. matplotlib
    escapes every text it writes into the SVG; the names it drew were made visible and cut
    short (plots.readable) before."""
    svg = text[text.index("<svg"):]
    return Markup(svg.replace("<svg", f'<svg role="img" aria-label="{html.escape(alt, quote=True)}"', 1))


def has_breakdown(report):
    return any(isinstance(p.get("time_breakdown"), dict) for p in measured(report))


def plots_section(report, drawn):
    """The figures, drawn from `drawn` (the report with names cut short for a figure); a figure
    of several pages (a large sweep's) shows each, one after the other."""
    models = drawn["config"]["models"]
    names = [name for name, _ in FIGURES if name != "breakdown" or has_breakdown(report)]
    svgs = plots.draw_figures(drawn, models, {}, names)
    parts = []
    for name, alt in FIGURES:
        if name not in names:
            parts += [el("h3", "Breakdown"), el("p", "No point has a time breakdown (the report predates them).")]
            continue
        title = name.replace("_", " ").capitalize()
        parts.append(el("h3", title, id=f"plot-{name}"))
        collected = [svg for file, svg in svgs.items() if re.fullmatch(re.escape(name) + r"(-\d+)?", file)]
        for page, svg in enumerate(collected, 1):
            shown = alt if len(collected) == 1 else f"{alt} (page {page} of {len(collected)})"
            parts.append(el("figure", el("div", svg_body(svg, shown), class_="plot"), el("figcaption", f"{shown}.")))
    return join(parts)


# ---- Each point -------------------------------------------------------------------------------

def breakdown_table(point):
    breakdown = point.get("time_breakdown")
    wall, steps = num(field(breakdown, "wall_s")), num(field(breakdown, "steps"))
    if not wall or not steps:
        return ""
    seconds = plots.category_seconds(breakdown)
    rows = [(None, [cell(label), cell(number(seconds[key] / steps * 1e3), None, True),
                    cell(f"{seconds[key] / wall:.1%}", None, True)])
            for key, label, _ in plots.CATEGORIES if is_number(seconds.get(key)) and seconds[key] > 0]
    return table(["category", "ms per step", "share of the wall time"], rows,
                 f"Where the median repetition's step went ({text_of(steps)} steps, {number(wall)} s)")


def straggler_text(point):
    s = point.get("straggler")
    if not isinstance(s, dict):
        return None
    text = (f"{text_of(s.get('kind', '?'))} {text_of(s.get('id', '?'))}: busy {number(s.get('mean_excess'))}x "
            f"the median of the others")
    if is_number(s.get("descheduled_share")):
        text += f", {s['descheduled_share']:.0%} of that excess explained by descheduling"
    return text


def pin_text(point):
    def place(pin):
        core = pin.get("core")
        where = f"core {core}" if isinstance(core, int) and not isinstance(core, bool) and core >= 0 else "not pinned"
        return f"{text_of(pin.get('worker'))} \u2192 {where} (ran on cpu {text_of(pin.get('observed_cpu'))})"
    return "; ".join(place(p) for p in items(point.get("pin_map")) if isinstance(p, dict))


def trace_link(point, out):
    trace = point.get("trace")
    if not trace:
        return None
    note = " (Chrome trace: open in chrome://tracing or Perfetto)"
    if not relative_file(trace):  # a URL, an absolute path or not text: shown, not linked
        return join([text_of(trace), note])
    # A relative path is the sweep's, from the folder it ran in: taken as from here, then made
    # relative to the page so that the folder can move as a whole.
    href = Path(os.path.relpath(Path(trace).resolve(), out.resolve().parent)).as_posix()
    return join([el("a", trace, href=href), note])


def point_section(point, report, commands, out):
    command = commands.get(point.get("id")) if isinstance(point.get("id"), str) else None
    config = obj(report.get("config"))
    status = text_of(point.get("status")) + (f": {text_of(point['reason'])}" if point.get("reason") else "")
    pairs = [("status", status), ("model", text_of(point.get("model"))),
             ("strategy", text_of(point.get("strategy")) + (" (PyTorch peer)" if is_peer(point) else "")),
             ("cores per node", text_of(point.get("cores"))), ("nodes (ranks)", text_of(point.get("nodes"))),
             ("p (cores in all)", text_of(point.get("p"))),
             ("batch", text_of(point.get("batch", config.get("batch")))),
             ("steps per repetition", text_of(point.get("steps", config.get("steps")))),
             ("repetitions (s)", ", ".join(number(t, 4) for t in items(point.get("times_s")))),
             ("final loss", number(point.get("final_loss"))),
             ("straggler", straggler_text(point)),
             ("noise", text_of(point.get("noise_warning")) if point.get("noise_warning") else None),
             ("spread", text_of(point.get("spread_warning")) if point.get("spread_warning") else None),
             ("pinning", pin_text(point)), ("trace", trace_link(point, out))]
    for key, value in obj(point.get("peer_info")).items():
        pairs.append((f"peer: {key}", value if isinstance(value, str) else json.dumps(value)))
    if isinstance(command, str) and command:
        reproduce = [el("p", "Reproduce one repetition:"), el("pre", el("code", command))]
    else:
        reproduce = el("p", "No command line: this build cannot rebuild this point's configuration.", class_="muted")
    return el("section", el("h3", text_of(point.get("id")), id=anchor(point.get("id"))), definitions(pairs),
              reproduce, breakdown_table(point), class_="point")


def points_detail_section(report, commands, out):
    return join(point_section(p, report, commands, out) for p in all_points(report))


# ---- Against a baseline -----------------------------------------------------------------------

def verdict_cell(point):
    verdict = text_of(point.get("verdict", ""))
    if point.get("regression") is True:
        return cell(el("span", f"\u25b2 {verdict}", class_="regression-mark"))
    if point.get("improvement") is True:
        return cell(el("span", f"\u25bc {verdict}", class_="faster-mark"))
    return cell(verdict)


def differences_list(title, differences):
    rows = [d for d in items(differences) if isinstance(d, dict)]
    if not rows:
        return ""
    lines = [el("li", f"{text_of(d.get('item'))}: {text_of(d.get('base'))} (baseline) vs "
                      f"{text_of(d.get('new'))} (this sweep)") for d in rows]
    return join([el("p", el("strong", title)), el("ul", lines)])


def baseline_section(comparison):
    if not isinstance(comparison, dict):
        return el("p", "No baseline given (cnnbench report SWEEP.json --baseline OLD.json compares against one).")
    machine = items(comparison.get("machine_differences"))
    parts = [differences_list("The machines or builds differ, so differences in time may come from them, "
                              "not the code:", machine) if machine else
             el("p", "Same machine and build as the baseline (CPU, cores, SIMD target, OpenBLAS kernel, compiler, "
                     "flags)."),
             differences_list("The settings differ:", comparison.get("config_differences")),
             el("p", el("strong", text_of(comparison.get("summary", ""))))]
    compared = [c for c in items(comparison.get("points")) if isinstance(c, dict)]
    rows = []
    for c in compared:
        rows.append(("regression" if c.get("regression") is True else None,
                     [cell(point_link(c)),
                      cell(number(c.get("base_median_s"), 4), c.get("base_median_s"), True),
                      cell(number(c.get("new_median_s"), 4), c.get("new_median_s"), True),
                      cell(number(c.get("ratio")), c.get("ratio"), True),
                      cell(number(c.get("p_value")) + ("*" if c.get("decided_by_threshold") else ""),
                           c.get("p_value"), True),
                      verdict_cell(c)]))
    threshold = f"{comparison['threshold']:.1%}" if is_number(comparison.get("threshold")) else "\u2013"
    parts.append(table(["point", "baseline median (s)", "this median (s)", "ratio new/base", "p-value", "verdict"],
                       rows, f"cnnbench compare: threshold {threshold}, Mann-Whitney U at alpha "
                       f"{number(comparison.get('alpha'))}; \u25b2 REGRESSION marks a slower point; * too few "
                       "repetitions for the test, the threshold decided", sortable=True))
    if any(c.get("work_scale", 1) != 1 for c in compared):
        parts.append(el("p", "The runs differ in length: this sweep's times are scaled to the baseline's "
                             "steps x batch per repetition."))
    for key, where in (("only_in_base", "only in the baseline"), ("only_in_new", "only in this sweep")):
        if comparison.get(key):
            parts.append(el("p", f"Points {where}: {', '.join(map(text_of, items(comparison[key])))}"))
    if comparison.get("unfinished"):
        parts += [el("p", el("strong", "Not a whole measurement:")),
                  el("ul", [el("li", text_of(u)) for u in items(comparison["unfinished"])])]
    return join(parts)


# ---- Provenance -------------------------------------------------------------------------------

def provenance_section(report):
    c = obj(report.get("context"))
    build, cpu, simd, openblas = (obj(c.get(k)) for k in ("build", "cpu", "simd", "openblas"))
    kernels = simd.get("kernels")
    build_text = (f"cnnbench {text_of(build.get('version', '?'))}, {text_of(build.get('type', '?'))}, "
                  f"{text_of(build.get('compiler', '?'))}, flags {text_of(build.get('flags', '?'))}"
                  + (f", sanitizers {text_of(build['sanitize'])}" if build.get("sanitize") else ""))
    pairs = [("host", text_of(c.get("host"))), ("date", text_of(c.get("date"))),
             ("CPU", text_of(c.get("cpu_model"))),
             ("CPU identity", ", ".join(f"{k} {text_of(v)}" for k, v in cpu.items()
                                        if v is not None and not isinstance(v, (dict, list)))),
             ("microarchitecture", text_of(cpu.get("microarchitecture", "not recorded (the report predates it)"))),
             ("cores / hardware threads", f"{text_of(c.get('cores'))} / {text_of(c.get('pus'))}"),
             ("SIMD target", f"{text_of(simd.get('target'))} (highest {text_of(simd.get('highest'))}, chosen by "
                             f"{text_of(simd.get('choice'))})" if simd else
              "not recorded (the report predates context.simd)"),
             ("SIMD kernels", json.dumps(kernels) if kernels else None),
             ("OpenBLAS kernel", text_of(openblas.get("core_type") or field(c, "environment", "OPENBLAS_CORETYPE")
                                         or "not recorded")),
             ("build", build_text),
             ("git revision", f"{text_of(build.get('git_sha', '?'))}{' (dirty)' if build.get('git_dirty') else ''}")]
    pairs += [(f"library: {name}", text_of(version)) for name, version in sorted(obj(c.get("libraries")).items())
              if version]
    pairs += [(f"environment: {name}", text_of(value)) for name, value in sorted(obj(c.get("environment")).items())]
    config = obj(report.get("config"))
    settings = json.dumps({k: v for k, v in config.items() if k not in ("models", "strategies")}, sort_keys=True)
    pins = [(None, [cell(point_link(p)), cell(pin_text(p))]) for p in measured(report) if p.get("pin_map")]
    return join([definitions(pairs), el("h3", "Sweep settings"), el("pre", el("code", settings)),
                 el("h3", "Pinning map"),
                 table(["point", "worker \u2192 core (the cpu it ran on)"], pins,
                       "Where each worker of each point's median repetition ran")
                 if pins else el("p", "No point recorded its pinning.")])


# ---- The page ---------------------------------------------------------------------------------

def script_hash(script):
    """The CSP source that allows exactly this inline script and no other."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


# No inline script runs but the page's own (by its hash), nothing loads from elsewhere, no form
# posts anywhere and no <base> redirects the relative links.
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                           f"script-src {script_hash(SCRIPT)}; base-uri 'none'; form-action 'none'")


def page(report, inputs, out):
    """The whole page. `report` has its names made visible (plots.readable)."""
    drawn = plots.readable(report, plots.DRAWN_TEXT_LIMIT)
    c = obj(report.get("context"))
    title = f"cnnbench sweep on {text_of(c.get('host', '?'))}, {text_of(c.get('date', '?'))}"
    commands = obj(inputs.get("commands"))
    bodies = {"summary": summary_section(report), "points": points_section(report),
              "plots": plots_section(report, drawn),
              "each-point": points_detail_section(report, commands, out),
              "baseline": baseline_section(inputs.get("comparison")),
              "provenance": provenance_section(report)}
    nav = el("nav", el("ul", [el("li", el("a", name, href=f"#{key}")) for key, name in SECTIONS]),
             aria_label="Sections")
    sections = [el("section", el("h2", name, id=key), bodies[key], aria_labelledby=key) for key, name in SECTIONS]
    caption = join(plots.caption(report).split("\n"), el("br"))
    head = el("head", el("meta", charset="utf-8"),
              el("meta", name="viewport", content="width=device-width, initial-scale=1"),
              el("meta", http_equiv="Content-Security-Policy", content=CONTENT_SECURITY_POLICY),
              el("link", rel="icon", href=EMPTY_ICON),
              el("title", title), el("style", Markup(STYLE)))
    body = el("body", el("header", el("h1", title), el("p", caption, class_="muted"), nav),
              el("main", sections), el("script", Markup(SCRIPT)))
    return "<!DOCTYPE html>\n" + el("html", "\n", head, "\n", body, "\n", lang="en") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--inputs", required=True, help="cnnbench's commands and comparison (JSON)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    plots.INPUT = args.report
    report = plots.readable(json.loads(Path(args.report).read_text()))
    if not isinstance(report, dict) or report.get("kind") != "sweep":
        raise plots.InputError("not a sweep report")
    inputs = obj(plots.readable(json.loads(Path(args.inputs).read_text())))
    out = Path(args.out)
    text = page(report, inputs, out)
    plots.write_output(out, lambda f: f.write(text.encode()))
    return 0  # cnnbench report checks the page and says "wrote"


if __name__ == "__main__":
    sys.exit(plots.run(main))  # any failure as one line, exit 4
