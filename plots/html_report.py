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
import html
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_report as plots  # noqa: E402  (exits 3 without matplotlib)

plots.matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, readable
plots.matplotlib.rcParams["svg.hashsalt"] = "cnnbench"  # the same report gives the same page

SECTIONS = [("summary", "Summary"), ("points", "Points"), ("plots", "Plots"),
            ("each-point", "Each point"), ("baseline", "Against a baseline"), ("provenance", "Provenance")]

# (function, name, alt text) of each figure; the breakdown only where a point has one.
FIGURES = [
    (plots.plot_speedup, "speedup", "Speedup over the serial reference against cores, per strategy, "
     "with the ideal line and Amdahl fits"),
    (plots.plot_efficiency, "efficiency", "Parallel efficiency (speedup / cores) against cores, per strategy"),
    (plots.plot_throughput, "throughput", "Training throughput in images per second, one bar per point"),
    (plots.plot_time_to_accuracy, "time_to_accuracy", "Test accuracy against wall time, one curve per point"),
    (plots.plot_breakdown, "breakdown", "Where each point's step time goes, by category, over the serial step"),
    (plots.plot_scaling_prediction, "scaling_prediction", "Predicted cluster efficiency against nodes, "
     "per fabric, with the measured points"),
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


def esc(value):
    return html.escape(str(value), quote=True)


def number(value, digits=3, suffix=""):
    """A number for people (3 significant digits), or an en dash where there is none."""
    if value is None or not isinstance(value, (int, float)):
        return "\u2013"
    return f"{value:.{digits}g}{suffix}"


def cell(text, sort=None, numeric=False):
    """A table cell; a numeric one carries its value for sorting (JavaScript's spelling: NaN for
    none, Infinity for a target never reached)."""
    value = "NaN" if sort is None else "Infinity" if sort == float("inf") else sort
    attrs = f' data-sort="{value}"' if numeric else ""
    return f'<td{attrs}{" class=num" if numeric else ""}>{text}</td>'


def table(headers, rows, caption=None, sortable=False):
    """A table with <th scope=col> headers; a sortable one has a button in each header."""
    head = "".join(f'<th scope="col">{f"<button type=button>{esc(h)}</button>" if sortable else esc(h)}</th>'
                   for h in headers)
    body = "".join(f"<tr{attrs}>{''.join(cells)}</tr>" for attrs, cells in rows)
    cap = f"<caption>{caption}</caption>" if caption else ""
    return (f'<table{" class=sortable" if sortable else ""}>{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def definitions(items):
    """A <dl> of (term, html) pairs, leaving out those without a value."""
    rows = "".join(f"<dt>{esc(term)}</dt><dd>{value}</dd>" for term, value in items
                   if value not in (None, "", "\u2013"))
    return f"<dl>{rows}</dl>" if rows else ""


def anchor(point_id):
    return "point-" + "".join(c if c.isalnum() else "-" for c in point_id)


def measured(report):
    return [p for p in report["points"] if p["status"] == "ok"]


def is_peer(point):
    return bool(point.get("peer"))


# ---- Summary ----------------------------------------------------------------------------------

def speed(point):
    """What ranks points of one model: the paired speedup (serial ran beside each repetition, so
    drift in the machine's speed cancels), else the inverse median time."""
    speedup = point.get("speedup")
    return (1, speedup) if isinstance(speedup, (int, float)) else (0, -point["time"]["median"])


def best_points(report):
    """The fastest cnnbench point per model and core count p; PyTorch peers are the yardstick,
    not candidates."""
    best = {}
    for p in measured(report):
        if is_peer(p):
            continue
        key = (p["model"], p["p"])
        if key not in best or speed(p) > speed(best[key]):
            best[key] = p
    return [best[k] for k in sorted(best, key=lambda k: (report["config"]["models"].index(k[0])
                                                         if k[0] in report["config"]["models"] else 99, k[1]))]


def largest_overhead(point):
    """(label, share of the step) of the largest category of a point's breakdown besides compute."""
    breakdown = point.get("time_breakdown")
    if not isinstance(breakdown, dict) or not breakdown.get("wall_s"):
        return None
    seconds = plots.category_seconds(breakdown)
    key = max((k for k in seconds if k != "compute_s"), key=lambda k: seconds[k])
    if seconds[key] <= 0:
        return None
    return plots.CATEGORY_LABEL[key], seconds[key] / breakdown["wall_s"]


def status_counts(report):
    counts = {}
    for p in report["points"]:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def summary_section(report):
    best = best_points(report)
    parallel = [p for p in best if p["p"] > 1 and isinstance(p.get("speedup"), (int, float))]
    if parallel:
        top = max(parallel, key=lambda p: p["speedup"])
        lead = "The largest speedup is" if top["speedup"] > 1 else \
            "No parallel point beat the serial reference; the closest is"
        first = (f"{lead} {top['id']}: {number(top['speedup'])}x the serial reference "
                 f"on {top['p']} cores (efficiency {number(top.get('efficiency'))})")
        overhead = largest_overhead(top)
        if overhead:
            first += f"; its largest cost besides compute is {overhead[0]} ({overhead[1]:.0%} of the step)."
        elif isinstance(top.get("karp_flatt"), (int, float)):
            first += f"; the Karp-Flatt serial fraction is {number(top['karp_flatt'])}."
        else:
            first += "."
    elif best:
        first = "No parallel point was measured; the serial reference stands alone."
    else:
        first = "No point was measured."
    second = (f"Of {len(report['points'])} points: {status_counts(report)}"
              f"{'' if report.get('complete', True) else '; the sweep is INCOMPLETE'}.")
    with_peers = any(isinstance(p.get("vs_pytorch_1thread"), (int, float)) for p in report["points"])
    headers = ["model", "cores p", "fastest", "median time (s)", "speedup", "efficiency"]
    headers += ["vs PyTorch 1 thread"] if with_peers else []
    rows = []
    for p in best:
        cells = [cell(esc(p["model"])), cell(p["p"], p["p"], True),
                 cell(f'<a href="#{anchor(p["id"])}">{esc(p["strategy"])} ({esc(p["id"].split("/")[-1])})</a>'),
                 cell(number(p["time"]["median"], 4), p["time"]["median"], True),
                 cell(number(p.get("speedup")), p.get("speedup"), True),
                 cell(number(p.get("efficiency")), p.get("efficiency"), True)]
        if with_peers:
            cells.append(cell(number(p.get("vs_pytorch_1thread")), p.get("vs_pytorch_1thread"), True))
        rows.append(("", cells))
    return (f"<p>{esc(first)} {esc(second)}</p>" +
            table(headers, rows, "The fastest strategy per model and core count (highest paired speedup over "
                  "serial)"))


# ---- Points -----------------------------------------------------------------------------------

def speedup_text(point, report):
    """"1.8 [1.7–1.9]": the speedup with the range of its paired ratios (or of the unpaired
    bounds for a report without pairs)."""
    speedup = point.get("speedup")
    if not isinstance(speedup, (int, float)):
        return number(None)
    base = next((p for p in measured(report) if p["model"] == point["model"] and p["strategy"] == "serial"), None)
    if base is None or point["strategy"] == "serial":
        return number(speedup)
    low, high = plots.speedup_range(point, base)
    return f"{number(speedup)} [{number(low)}\u2013{number(high)}]"


def time_to_accuracy_text(point):
    tta = point.get("time_to_accuracy")
    if not isinstance(tta, dict):
        return number(None), None
    if not tta.get("reached"):
        return f"not reached in {tta.get('steps', '?')} steps", float("inf")
    return f"{number(tta['seconds'])} s ({tta['steps']} steps)", tta["seconds"]


def points_table(report):
    with_peers = any(isinstance(p.get("vs_pytorch_1thread"), (int, float)) for p in report["points"])
    headers = ["point", "status", "median (s)", "range (s)", "speedup [paired range]", "efficiency",
               "Karp-Flatt", "time to accuracy"] + (["vs PyTorch 1 thread"] if with_peers else [])
    rows = []
    for p in measured(report):
        t = p["time"]
        tta_text, tta_sort = time_to_accuracy_text(p)
        name = f'<a href="#{anchor(p["id"])}">{esc(p["id"])}</a>' + (" (PyTorch peer)" if is_peer(p) else "")
        noisy = " (noisy)" if p.get("noise_warning") else ""
        cells = [cell(name), cell("ok" + noisy),
                 cell(number(t["median"], 4), t["median"], True),
                 cell(f"{number(t['min'], 4)}\u2013{number(t['max'], 4)}", t["max"] - t["min"], True),
                 cell(speedup_text(p, report), p.get("speedup"), True),
                 cell(number(p.get("efficiency")), p.get("efficiency"), True),
                 cell(number(p.get("karp_flatt")), p.get("karp_flatt"), True),
                 cell(esc(tta_text), tta_sort, True)]
        if with_peers:
            cells.append(cell(number(p.get("vs_pytorch_1thread")), p.get("vs_pytorch_1thread"), True))
        rows.append(("", cells))
    return table(headers, rows, "Measured points: median of the repetitions and their range; press a "
                 "header to sort", sortable=True)


def unmeasured_list(report):
    others = [p for p in report["points"] if p["status"] != "ok"]
    if not others:
        return "<p>Every point was measured: none skipped, failed or diverged.</p>"
    rows = [("", [cell(f'<a href="#{anchor(p["id"])}">{esc(p["id"])}</a>'),
                  cell(f'<span class="status-bad">{esc(p["status"].upper())}</span>'),
                  cell(esc(p.get("reason") or "no reason recorded"))]) for p in others]
    return table(["point", "status", "reason"], rows, "Points not measured, and why")


def points_section(report):
    return points_table(report) + "<h3 id=\"not-measured\">Skipped, failed and diverged points</h3>" + \
        unmeasured_list(report)


# ---- Plots ------------------------------------------------------------------------------------

def svg_body(text, alt):
    """A matplotlib SVG document as inline markup, labelled for screen readers."""
    start = text.index("<svg")
    svg = text[start:]
    return svg.replace("<svg", f'<svg role="img" aria-label="{esc(alt)}"', 1)


def has_breakdown(report):
    return any(isinstance(p.get("time_breakdown"), dict) for p in measured(report))


def plots_section(report):
    models = report["config"]["models"]
    parts = []
    for draw, name, alt in FIGURES:
        if name == "breakdown" and not has_breakdown(report):
            parts.append("<h3>Breakdown</h3><p>No point has a time breakdown (the report predates them).</p>")
            continue
        collected = {}
        draw(report, models, collected)
        title = name.replace("_", " ").capitalize()
        parts.append(f'<h3 id="plot-{name}">{esc(title)}</h3><figure><div class="plot">'
                     f"{svg_body(collected[name], alt)}</div><figcaption>{esc(alt)}.</figcaption></figure>")
    return "".join(parts)


# ---- Each point -------------------------------------------------------------------------------

def breakdown_table(point):
    breakdown = point.get("time_breakdown")
    if not isinstance(breakdown, dict) or not breakdown.get("wall_s") or not breakdown.get("steps"):
        return ""
    seconds = plots.category_seconds(breakdown)
    rows = [("", [cell(esc(label)), cell(number(seconds[key] / breakdown["steps"] * 1e3), None, True),
                  cell(f"{seconds[key] / breakdown['wall_s']:.1%}", None, True)])
            for key, label, _ in plots.CATEGORIES if seconds.get(key, 0) > 0]
    return table(["category", "ms per step", "share of the wall time"], rows,
                 f"Where the median repetition's step went ({breakdown['steps']} steps, "
                 f"{number(breakdown['wall_s'])} s)")


def straggler_text(point):
    s = point.get("straggler")
    if not isinstance(s, dict):
        return None
    text = f"{s.get('kind', '?')} {s.get('id', '?')}: busy {number(s.get('mean_excess'))}x the median of the others"
    if isinstance(s.get("descheduled_share"), (int, float)):
        text += f", {s['descheduled_share']:.0%} of that excess explained by descheduling"
    return esc(text)


def pin_text(point):
    pins = point.get("pin_map") or []
    def place(pin):
        core = pin.get("core")
        where = f"core {core}" if isinstance(core, int) and core >= 0 else "not pinned"
        return f"{pin.get('worker')} \u2192 {where} (ran on cpu {pin.get('observed_cpu')})"
    return esc("; ".join(place(p) for p in pins if isinstance(p, dict)))


def trace_link(point, out):
    trace = point.get("trace")
    if not trace:
        return None
    # A relative path is the sweep's, from the folder it ran in: taken as from here, then made
    # relative to the page so that the folder can move as a whole.
    href = Path(os.path.relpath(Path(trace).resolve(), out.resolve().parent)).as_posix()
    return f'<a href="{esc(href)}">{esc(trace)}</a> (Chrome trace: open in chrome://tracing or Perfetto)'


def point_section(point, report, commands, out):
    command = commands.get(point["id"])
    items = [("status", esc(point["status"]) + (f": {esc(point.get('reason'))}" if point.get("reason") else "")),
             ("model", esc(point["model"])), ("strategy", esc(point["strategy"]) + (" (PyTorch peer)" if is_peer(point) else "")),
             ("cores per node", esc(point.get("cores"))), ("nodes (ranks)", esc(point.get("nodes"))),
             ("p (cores in all)", esc(point.get("p"))), ("batch", esc(point.get("batch", report["config"].get("batch")))),
             ("steps per repetition", esc(point.get("steps", report["config"].get("steps")))),
             ("repetitions (s)", esc(", ".join(number(t, 4) for t in point.get("times_s", [])))),
             ("final loss", number(point.get("final_loss"))),
             ("straggler", straggler_text(point)), ("noise", esc(point.get("noise_warning") or "")),
             ("pinning", pin_text(point)), ("trace", trace_link(point, out))]
    peer_info = point.get("peer_info")
    if isinstance(peer_info, dict):
        items += [(f"peer: {k}", esc(json.dumps(v) if not isinstance(v, str) else v)) for k, v in peer_info.items()]
    reproduce = (f"<p>Reproduce one repetition:</p><pre><code>{esc(command)}</code></pre>" if command else
                 "<p class=muted>No command line: this build cannot rebuild this point's configuration.</p>")
    return (f'<section class="point"><h3 id="{anchor(point["id"])}">{esc(point["id"])}</h3>'
            f"{definitions(items)}{reproduce}{breakdown_table(point)}</section>")


def points_detail_section(report, commands, out):
    return "".join(point_section(p, report, commands, out) for p in report["points"])


# ---- Against a baseline -----------------------------------------------------------------------

def verdict_cell(point):
    verdict = point.get("verdict", "")
    if point.get("regression"):
        return cell(f'<span class="regression-mark">\u25b2 {esc(verdict)}</span>')
    if point.get("improvement"):
        return cell(f'<span class="faster-mark">\u25bc {esc(verdict)}</span>')
    return cell(esc(verdict))


def differences_list(title, differences):
    if not differences:
        return ""
    items = "".join(f"<li>{esc(d['item'])}: {esc(d['base'])} (baseline) vs {esc(d['new'])} (this sweep)</li>"
                    for d in differences)
    return f"<p><strong>{esc(title)}</strong></p><ul>{items}</ul>"


def baseline_section(comparison):
    if comparison is None:
        return "<p>No baseline given (cnnbench report SWEEP.json --baseline OLD.json compares against one).</p>"
    machine = comparison.get("machine_differences", [])
    parts = [differences_list("The machines or builds differ, so differences in time may come from them, "
                              "not the code:", machine) if machine else
             "<p>Same machine and build as the baseline (CPU, cores, SIMD target, OpenBLAS kernel, compiler, flags).</p>",
             differences_list("The settings differ:", comparison.get("config_differences", []))]
    parts.append(f"<p><strong>{esc(comparison.get('summary', ''))}</strong></p>")
    rows = []
    for c in comparison.get("points", []):
        rows.append((' class="regression"' if c.get("regression") else "",
                     [cell(f'<a href="#{anchor(c["id"])}">{esc(c["id"])}</a>'),
                      cell(number(c["base_median_s"], 4), c["base_median_s"], True),
                      cell(number(c["new_median_s"], 4), c["new_median_s"], True),
                      cell(number(c["ratio"]), c["ratio"], True),
                      cell(number(c["p_value"]) + ("*" if c.get("decided_by_threshold") else ""), c["p_value"], True),
                      verdict_cell(c)]))
    parts.append(table(["point", "baseline median (s)", "this median (s)", "ratio new/base", "p-value", "verdict"],
                       rows, f"cnnbench compare: threshold {comparison['threshold']:.1%}, Mann-Whitney U at "
                       f"alpha {comparison['alpha']:g}; \u25b2 REGRESSION marks a slower point; * too few "
                       "repetitions for the test, the threshold decided", sortable=True))
    if any(c.get("work_scale", 1) != 1 for c in comparison.get("points", [])):
        parts.append("<p>The runs differ in length: this sweep's times are scaled to the baseline's "
                     "steps x batch per repetition.</p>")
    for key, where in (("only_in_base", "only in the baseline"), ("only_in_new", "only in this sweep")):
        if comparison.get(key):
            parts.append(f"<p>Points {where}: {esc(', '.join(comparison[key]))}</p>")
    if comparison.get("unfinished"):
        parts.append("<p><strong>Not a whole measurement:</strong></p><ul>" +
                     "".join(f"<li>{esc(u)}</li>" for u in comparison["unfinished"]) + "</ul>")
    return "".join(parts)


# ---- Provenance -------------------------------------------------------------------------------

def provenance_section(report):
    c = report["context"]
    build = c.get("build", {})
    cpu = c.get("cpu") if isinstance(c.get("cpu"), dict) else {}
    simd = c.get("simd") if isinstance(c.get("simd"), dict) else {}
    openblas = c.get("openblas") if isinstance(c.get("openblas"), dict) else {}
    kernels = simd.get("kernels")
    items = [("host", esc(c.get("host"))), ("date", esc(c.get("date"))),
             ("CPU", esc(c.get("cpu_model"))),
             ("CPU identity", esc(", ".join(f"{k} {v}" for k, v in cpu.items()
                                            if v is not None and not isinstance(v, (dict, list))))),
             ("microarchitecture", esc(cpu.get("microarchitecture", "not recorded (the report predates it)"))),
             ("cores / hardware threads", esc(f"{c.get('cores')} / {c.get('pus')}")),
             ("SIMD target", esc(f"{simd['target']} (highest {simd.get('highest')}, chosen by {simd.get('choice')})")
              if simd else "not recorded (the report predates context.simd)"),
             ("SIMD kernels", esc(json.dumps(kernels)) if kernels else None),
             ("OpenBLAS kernel", esc(openblas.get("core_type") or c.get("environment", {}).get("OPENBLAS_CORETYPE")
                                     or "not recorded")),
             ("build", esc(f"cnnbench {build.get('version', '?')}, {build.get('type', '?')}, "
                           f"{build.get('compiler', '?')}, flags {build.get('flags', '?')}"
                           + (f", sanitizers {build['sanitize']}" if build.get("sanitize") else ""))),
             ("git revision", esc(f"{build.get('git_sha', '?')}{' (dirty)' if build.get('git_dirty') else ''}"))]
    items += [(f"library: {name}", esc(version)) for name, version in sorted(c.get("libraries", {}).items())
              if version]
    items += [(f"environment: {name}", esc(value)) for name, value in sorted(c.get("environment", {}).items())]
    config = report["config"]
    settings = esc(json.dumps({k: v for k, v in config.items() if k not in ("models", "strategies")}, sort_keys=True))
    pins = [("", [cell(f'<a href="#{anchor(p["id"])}">{esc(p["id"])}</a>'), cell(pin_text(p))])
            for p in measured(report) if p.get("pin_map")]
    return (definitions(items) + "<h3>Sweep settings</h3>" + f"<pre><code>{settings}</code></pre>" +
            "<h3>Pinning map</h3>" + (table(["point", "worker \u2192 core (the cpu it ran on)"], pins,
                                            "Where each worker of each point's median repetition ran")
                                      if pins else "<p>No point recorded its pinning.</p>"))


# ---- The page ---------------------------------------------------------------------------------

def page(report, inputs, out):
    c = report["context"]
    title = f"cnnbench sweep on {c.get('host', '?')}, {c.get('date', '?')}"
    bodies = {"summary": summary_section(report), "points": points_section(report),
              "plots": plots_section(report),
              "each-point": points_detail_section(report, inputs.get("commands") or {}, out),
              "baseline": baseline_section(inputs.get("comparison")),
              "provenance": provenance_section(report)}
    nav = "".join(f'<li><a href="#{key}">{esc(name)}</a></li>' for key, name in SECTIONS)
    sections = "".join(f'<section aria-labelledby="{key}"><h2 id="{key}">{esc(name)}</h2>{bodies[key]}</section>'
                       for key, name in SECTIONS)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{STYLE}</style>
</head>
<body>
<header><h1>{esc(title)}</h1><p class="muted">{"<br>".join(map(esc, plots.caption(report).split(chr(10))))}</p>
<nav aria-label="Sections"><ul>{nav}</ul></nav></header>
<main>{sections}</main>
<script>{SCRIPT}</script>
</body>
</html>
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--inputs", required=True, help="cnnbench's commands and comparison (JSON)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    plots.INPUT = args.report
    report = json.loads(Path(args.report).read_text())
    if report.get("kind") != "sweep":
        raise plots.InputError("not a sweep report")
    inputs = json.loads(Path(args.inputs).read_text())
    out = Path(args.out)
    text = page(report, inputs, out)
    plots.write_output(out, lambda f: f.write(text.encode()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(plots.run(main))  # any failure as one line, exit 4
