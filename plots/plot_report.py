#!/usr/bin/env python3
"""Plots of a `cnnbench sweep` report: speedup (with the ideal line and the Amdahl fit), efficiency,
images/s, time to accuracy, the cluster scaling prediction and where each point's step time goes,
each as PNG and SVG; or, with --trace, a Gantt chart of one step of a `train --trace` file. The
PyTorch peers (pytorch, pytorch-ddp) are drawn grey and dashed.

A figure too large for one page (a sweep of many cores and nodes) is split into panels and pages,
NAME-1.png, NAME-2.png, ...; --names FILE writes the list of the files a report's figures go to
(as JSON, without .png/.svg) and draws nothing.

Usage: plot_report.py REPORT.json --out DIR [--names FILE]
       plot_report.py --trace TRACE.json --out DIR   (writes DIR/<trace name>-gantt.png and .svg)
(exit 3 when matplotlib is missing; exit 4 after printing one "cnnbench: error: ..." line for
anything else that goes wrong)
"""
import argparse
import concurrent.futures
import io
import json
import multiprocessing
import os
import re
import stat
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

# A report is data from anyone: nothing in it reaches the terminal as library text (a missing
# glyph, a font fallback); what cannot be drawn is one "cnnbench: error:" line (run).
warnings.simplefilter("ignore")

try:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.set_loglevel("critical")
    matplotlib.rcParams["text.parse_math"] = False  # a "$" in a name is a dollar, not TeX
    import matplotlib.lines
    import matplotlib.patches
    import matplotlib.ticker
    import matplotlib.pyplot as plt
except ImportError:
    print("plot_report.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)",
          file=sys.stderr)
    sys.exit(3)

STYLE = {"serial": ("k", "s"), "blas": ("tab:orange", "^"), "stream": ("tab:blue", "o"),
         "gpu": ("tab:green", "D"), "pytorch": ("0.45", "P"), "pytorch-ddp": ("0.6", "X")}
# The PyTorch peers (sweep --strategies pytorch,pytorch-ddp): grey, dashed, for comparison.
PEERS = {"pytorch": "PyTorch (threads, peer)", "pytorch-ddp": "PyTorch DDP (gloo ranks, peer)"}
CLUSTER_COLOURS = ["tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]

# The time categories of a run's breakdown and of a trace's spans (docs/design.md, "Where the time
# goes"), bottom to top in the breakdown's stacks, with one colour each in both figures.
CATEGORIES = [
    ("compute_s", "compute (forward + backward)", "tab:blue"),
    ("update_s", "update (SGD)", "tab:green"),
    ("reduce_s", "reduce (gradient sums in a node)", "tab:olive"),
    ("data_s", "data (batches)", "tab:cyan"),
    ("communication_exposed_s", "communication exposed", "tab:red"),
    ("imbalance_wait_s", "imbalance wait", "tab:orange"),
    ("fill_drain_s", "pipeline fill/drain", "tab:purple"),
    ("starvation_s", "pipeline starvation", "tab:pink"),
    ("other_s", "other", "0.65"),
]
CATEGORY_COLOUR = {key: colour for key, _, colour in CATEGORIES}
CATEGORY_LABEL = {key: label for key, label, _ in CATEGORIES}


class InputError(Exception):
    """A report or trace that cannot be drawn, with the reason a user can act on."""


# Control characters (but tab and newline), C1 codes and lone surrogates: shown escaped.
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def visible(text):
    """`text` with each control character (but tab and newline), C1 code and lone surrogate shown
    as an escape a reader sees ("\\x1b"), so that a name from a report neither drives the terminal
    nor vanishes from a figure."""
    def shown(match):
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return HIDDEN.sub(shown, text)


def readable(value, limit=None):
    """A copy of a report's JSON with every string and key passed through visible and, with
    `limit`, cut to that many characters (a 100,000-character name would fill a figure)."""
    def text(s):
        s = visible(s)
        return s if limit is None or len(s) <= limit else s[:limit] + "\u2026"
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {text(k): readable(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [readable(v, limit) for v in value]
    return value


def is_number(value):
    """A real number: int or float, and not bool (JSON's true is not 1 here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Names in figures are cut to this many characters.
DRAWN_TEXT_LIMIT = 300


def series_label(series):
    if series.startswith("cluster/c"):
        threads = int(series.split("/c")[1])
        return f"cluster ({threads} thread{'s' if threads > 1 else ''}/rank, x = ranks*threads)"
    return {"blas": "blas (OpenBLAS threads)", "stream": "stream (pinned cores)", **PEERS}.get(series, series)


def line_style(series):
    return "--" if series in PEERS else "-"


def series_style(series):
    if series.startswith("cluster/c"):
        threads = int(series.split("/c")[1])
        return CLUSTER_COLOURS[(threads - 1) % len(CLUSTER_COLOURS)], "v"
    return STYLE.get(series, ("tab:gray", "x"))


def caption(report):
    c = report["context"]
    cfg = report["config"]
    build = c.get("build", {})
    if cfg["steps"] is None:  # each point calibrated its steps (points[].steps)
        length = f"steps calibrated to >= {cfg.get('min_time_s')} s per repetition"
    else:
        length = f"{cfg['steps']} steps" if cfg["steps"] >= 0 else f"{cfg['epochs']} epochs"
    skipped = sorted({f"{p['strategy']} ({p['reason']})" for p in report["points"]
                      if p["status"] == "skipped"})
    text = (f"{c['host']}: {c['cpu_model']}, {c['cores']} cores | {c['date']} | "
            f"{cfg['data']['source']} data, batch {cfg['batch']}, {length}, median of "
            f"{cfg['repeat']} (+{cfg['warmup']} warm-up) | cnnbench {build.get('version', '?')} "
            f"{build.get('git_sha', '')[:10]}{' (dirty)' if build.get('git_dirty') else ''}")
    if not report.get("complete", True):
        text += " | INCOMPLETE sweep"
    if skipped:
        text += "\nskipped: " + "; ".join(skipped)
    return text


def measured(report, model):
    return [p for p in report["points"] if p["model"] == model and p["status"] == "ok"]


def by_series(points):
    groups = {}
    for p in points:
        groups.setdefault(p["series"], []).append(p)
    for ps in groups.values():
        ps.sort(key=lambda p: p["p"])
    return groups


# Exit code after an error message of our own (plot.cpp then adds nothing).
REPORTED_ERROR_EXIT = 4
INPUT = "plot_report.py"  # the report or trace being drawn, for messages


# ---- Panels and pages ---------------------------------------------------------------------------
# A sweep of many cores and nodes has hundreds of points. A figure draws one panel per model while
# what it draws fits one (SERIES_PER_PANEL lines, BARS_PER_PANEL bars), else it gives a model
# several panels; the panels are laid out in rows on pages of at most PAGE_WIDTH_IN by
# ROWS_PER_PAGE panels, and a figure of more than one page is written as NAME-1, NAME-2, ...
SERIES_PER_PANEL = 8  # more lines than this are no longer told apart by colour and marker
BARS_PER_PANEL = 40  # each bar keeps a label that can be read
BAR_WIDTH_IN = 0.3  # a bar and its 45-degree label
PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 6.2, 4.8
LEGEND_WIDTH_IN = 2.6  # a legend beside a panel that holds too many lines for one inside it
PAGE_WIDTH_IN = 18
ROWS_PER_PAGE = 4


class Panel:
    """One panel of a figure: the model it draws, its title and what it draws (series names or
    points, as the figure says)."""

    def __init__(self, model, title, items):
        self.model, self.title, self.items = model, title, items


def balanced(items, limit):
    """`items` in consecutive chunks of at most `limit`, as few as can be and of near equal size."""
    count = -(-len(items) // limit)
    return [items[len(items) * i // count:len(items) * (i + 1) // count] for i in range(count)]


def series_key(series):
    """Series in name order, cluster's by its threads per rank as numbers (c2 before c10)."""
    if series.startswith("cluster/c") and series[9:].isdigit():
        return ("cluster", int(series[9:]))
    return (series, 0)


def series_panels(models, series_of):
    """The panels of a figure with a line per series: one per model while its series fit in one,
    else the single-node strategies in one group and cluster's series by threads per rank, each
    group split into panels of at most SERIES_PER_PANEL. `series_of(model)`: the series to draw."""
    panels = []
    for model in models:
        names = sorted(series_of(model), key=series_key)
        if len(names) <= SERIES_PER_PANEL:
            panels.append(Panel(model, model, names))
            continue
        cluster = [s for s in names if s.startswith("cluster/c")]
        others = [s for s in names if s not in cluster]
        for chunk in balanced(others, SERIES_PER_PANEL):
            panels.append(Panel(model, f"{model}: {', '.join(chunk)}", chunk))
        for chunk in balanced(cluster, SERIES_PER_PANEL):
            low, high = series_key(chunk[0])[1], series_key(chunk[-1])[1]
            threads = f"{low} thread{'s' if low > 1 else ''}" if low == high else f"{low}-{high} threads"
            panels.append(Panel(model, f"{model}: cluster, {threads} per rank", chunk))
    return panels


def bar_panels(models, points_of):
    """The panels of a figure with a bar per point: one per model while its points fit in one,
    else its points in order in panels of at most BARS_PER_PANEL, titled by their first and last.
    `points_of(model)`: the points."""
    panels = []
    for model in models:
        ps = points_of(model)
        chunks = balanced(ps, BARS_PER_PANEL) or [[]]
        for chunk in chunks:
            title = model if len(chunks) == 1 else \
                f"{model}: {bar_label(chunk[0])} to {bar_label(chunk[-1])} ({len(chunk)} of {len(ps)} points)"
            panels.append(Panel(model, title, chunk))
    return panels


def bar_label(point):
    """A point's name under its bar: its id less the model ("cluster/n2c4")."""
    return point["id"].split("/", 1)[1]


def paged(panels, columns):
    """The panels on pages of at most `columns` x ROWS_PER_PAGE, as few pages as can be, of near
    equal size."""
    return balanced(panels, max(1, columns) * ROWS_PER_PAGE) if panels else [[]]


def page_names(name, pages):
    """The files of a figure of `pages` pages, without .png/.svg: NAME, or NAME-1, NAME-2, ..."""
    return [name] if len(pages) <= 1 else [f"{name}-{i}" for i in range(1, len(pages) + 1)]


def columns_of(panels, panel_width, most=2):
    """Panels side by side on a page: as many as fit PAGE_WIDTH_IN, at most `most`, each model in
    a column of its own while there is one panel per model."""
    return max(1, min(len(panels), most, int(PAGE_WIDTH_IN // panel_width)))


class Layout:
    """A figure's panels, how wide each is, whether their legends stand beside them, and the pages
    they make: what draws the figure and what names its files both come from here."""

    def __init__(self, panels, panel_width=PANEL_WIDTH_IN, beside=False):
        self.panels, self.panel_width, self.beside = panels, panel_width, beside
        self.columns = columns_of(panels, panel_width)
        self.pages = paged(panels, self.columns)


def line_layout(panels, models):
    """The layout of a figure with a line per series: legends beside the panels where a model has
    more than one panel (they hold up to SERIES_PER_PANEL lines and their fits)."""
    beside = len(panels) > len(models)
    return Layout(panels, PANEL_WIDTH_IN + (LEGEND_WIDTH_IN if beside else 0), beside)


def bar_layout(panels):
    return Layout(panels, max([PANEL_WIDTH_IN] + [BAR_WIDTH_IN * len(p.items) for p in panels]))


def new_figure(report, title, panels, panel_width=PANEL_WIDTH_IN, columns=None):
    """A page of `panels` (a list, one panel each) in rows of `columns` (default: all in one row),
    with the title above and the report's caption below. Returns the figure and one axes per panel."""
    columns = max(1, min(len(panels), columns or len(panels)))
    rows = -(-len(panels) // columns)
    width, height = panel_width * columns, PANEL_HEIGHT_IN * rows
    # At the PNG's resolution, so that the layout's text measures serve the PNG too.
    fig, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False, dpi=120)
    axes = list(axes.flat)
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    # Wrapped to the figure's width (about 11 characters of the title's font per inch), so that a
    # one-panel figure keeps its whole title.
    lines = [wrapped for line in title.split("\n") for wrapped in textwrap.wrap(line, int(11 * width))]
    fig.suptitle("\n".join(lines))
    fig.title_lines = len(lines)
    fig.text(0.5, 0.01 * PANEL_HEIGHT_IN / height, caption(report), ha="center", va="bottom", fontsize=7, wrap=True)
    return fig, axes[:len(panels)]


def page_title(title, page, pages):
    return title if len(pages) <= 1 else f"{title}\n(page {page + 1} of {len(pages)})"


def write_output(path, write):
    """Writes a file by the rules of cnnbench's own outputs (lib/core/output.cpp): a symlink is
    followed and its target replaced; a device or FIFO is written in place; a regular file is
    replaced atomically (a temp file in its folder, then rename), keeping the old file's mode, and
    a new one gets 0666 less the umask. `write` writes the content to a binary file object."""
    path = Path(os.path.realpath(path))
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        with open(path, "wb") as f:
            write(f)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.tmp.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if old is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def save(fig, out, name):
    """Writes out/NAME.png and .svg; `out` may instead be a dict, which then keeps the figure's SVG
    text under NAME (html_report.py inlines them in its page)."""
    width, height = fig.get_size_inches()
    right = 1 - getattr(fig, "legend_width", 0) / width  # room for a legend beside the panels
    # The caption's 0.38 inches below, the title's 0.22 inches a line above.
    fig.tight_layout(rect=(0, 0.384 / height, right, 1 - 0.216 * getattr(fig, "title_lines", 1) / height))
    if isinstance(out, dict):
        text = io.StringIO()
        fig.savefig(text, format="svg")
        plt.close(fig)
        out[name] = text.getvalue()
        return
    for ext in ("png", "svg"):
        write_output(out / f"{name}.{ext}", lambda f: fig.savefig(f, format=ext, dpi=120))
    plt.close(fig)  # cnnbench plot checks the images and says "wrote"


def legend_beside(fig, axes, width):
    """One legend for all panels, right of them in `width` inches (save leaves it room):
    each label once, from the first panel that has it."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="center right", fontsize=7,
                   frameon=False)
        fig.legend_width = width


def max_cores(report):
    ps = [p["p"] for p in report["points"]]
    return max(ps + [2])


def parallel_series(report, model, metric, only=None):
    """The measured series of `model` that report `metric` (all but serial), in name order, or
    those of `only` (a panel's): (series, points sorted by p, colour, marker)."""
    groups = by_series(measured(report, model))
    names = sorted(groups, key=series_key) if only is None else only
    styles = panel_styles(names)
    for series in names:
        ps = [p for p in groups.get(series, []) if is_number(p.get(metric))]  # a value that is not a number is not drawn
        if series == "serial" or not ps:
            continue
        yield (series, ps, *styles[series])


def series_with(report, metric):
    """`series_of(model)` for series_panels: the model's series (but serial) with a `metric`."""
    return lambda model: [series for series, _, _, _ in parallel_series(report, model, metric)]


# Colours and markers of a panel of more of cluster's series than CLUSTER_COLOURS has colours.
PANEL_COLOURS = ["tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:blue",
                 "tab:orange", "tab:green", "0.35"]
PANEL_MARKERS = ["v", "^", "<", ">", "o", "s", "D", "P"]


def panel_styles(series):
    """(colour, marker) of each of a panel's series: series_style's, unless cluster's series in it
    would repeat a colour, which then take one each in turn."""
    styles = {s: series_style(s) for s in series}
    cluster = [s for s in series if s.startswith("cluster/c")]
    if len(cluster) > len(CLUSTER_COLOURS):
        for i, s in enumerate(cluster):
            styles[s] = PANEL_COLOURS[i % len(PANEL_COLOURS)], PANEL_MARKERS[i % len(PANEL_MARKERS)]
    return styles


# Core counts up to this are each a tick on a linear axis; past it the axis is log2, ticks at
# powers of two.
LINEAR_CORES = 16


def log_axis(axis):
    """A log2 axis whose ticks are powers of two, as many as fit, written as plain numbers."""
    axis.set_major_locator(matplotlib.ticker.LogLocator(base=2))
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(matplotlib.ticker.NullLocator())


def core_grid(pmax):
    """x values from 1 to pmax for a smooth curve over the core axis (geometric on a log2 axis)."""
    if pmax <= LINEAR_CORES:
        return [1 + i * (pmax - 1) / 50 for i in range(51)]
    return [pmax ** (i / 50) for i in range(51)]


def legend(ax, beside, handles=None):
    """The panel's legend (of `handles` in their order where given): inside it, or beside it
    (right) where the panel holds too many lines."""
    chosen = {} if handles is None else {"handles": handles}
    if beside:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, **chosen)
    else:
        ax.legend(fontsize=7, **chosen)


def label_cores_axes(ax, title, ylabel, pmax, beside=False, log_y=False, handles=None):
    """Title, labels, ticks, grid and legend of a panel whose x axis is the core count: every
    count up to LINEAR_CORES, else powers of two on a log2 axis."""
    ax.set_title(title)
    ax.set_xlabel("cores p (threads x ranks)")
    ax.set_ylabel(ylabel)
    if pmax <= LINEAR_CORES:
        ax.set_xticks(range(1, pmax + 1))
    else:
        ax.set_xscale("log", base=2)
        log_axis(ax.xaxis)
        if log_y:
            ax.set_yscale("log", base=2)
            log_axis(ax.yaxis)
    ax.grid(alpha=0.3)
    legend(ax, beside, handles)


# (figure name, page) of the one page a worker of draw_figures draws; None: every page.
ONLY_PAGE = None


def draw_pages(report, name, title, layout, draw_panel, out, finish=None):
    """The figure NAME: the layout's pages, each in a file of its own (page_names), each panel
    drawn by draw_panel(ax, panel), then finish(fig, axes) where given."""
    pages = layout.pages
    for page, (on_page, file) in enumerate(zip(pages, page_names(name, pages))):
        if ONLY_PAGE is not None and ONLY_PAGE != (name, page):
            continue
        fig, axes = new_figure(report, page_title(title, page, pages), on_page, layout.panel_width, layout.columns)
        for ax, panel in zip(axes, on_page):
            draw_panel(ax, panel)
        if finish is not None:
            finish(fig, axes)
        save(fig, out, file)


def speedup_range(point, base):
    """Smallest and largest speedup of a point's repetitions: its paired ratios where it has them."""
    pair = point.get("paired_baseline")
    if pair and pair.get("ratios"):
        return min(pair["ratios"]), max(pair["ratios"])
    return base["time"]["median"] / point["time"]["max"], base["time"]["median"] / point["time"]["min"]


def speedup_layout(report, models):
    return line_layout(series_panels(models, series_with(report, "speedup")), models)


def plot_speedup(report, models, out):
    fits = {(f["model"], f["series"]): f["serial_fraction"] for f in report.get("amdahl", [])}
    pmax = max_cores(report)
    layout = speedup_layout(report, models)
    grid = core_grid(pmax)

    def draw(ax, panel):
        model = panel.model
        base = next((p for p in measured(report, model) if p["strategy"] == "serial"), None)
        ideal = grid if pmax > LINEAR_CORES else [1, pmax]
        handles = ax.plot(ideal, ideal, color="0.6", linestyle=":", label="ideal S = p")  # each series, then its fit
        for series, ps, colour, marker in parallel_series(report, model, "speedup", panel.items):
            xs = [p["p"] for p in ps]
            ys = [p["speedup"] for p in ps]
            ranges = [speedup_range(p, base) for p in ps]
            lo = [p["speedup"] - low for p, (low, _) in zip(ps, ranges)]
            hi = [high - p["speedup"] for p, (_, high) in zip(ps, ranges)]
            handles.append(ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, marker=marker, capsize=3,
                                       linestyle=line_style(series), label=series_label(series)))
            f = None if series in PEERS else fits.get((model, series))
            if f is not None:
                handles += ax.plot(grid, [1 / (f + (1 - f) / g) for g in grid], color=colour, linestyle="--",
                                   linewidth=1, label=f"Amdahl fit, {series}: f = {f:.2f}")
        ax.axhline(1, color="k", linewidth=0.6)
        label_cores_axes(ax, panel.title, "speedup S (bars: range over the repetitions)", pmax, layout.beside,
                         log_y=True, handles=handles)

    draw_pages(report, "speedup", "Speedup over the serial reference: S = T_serial / T_p (median of paired "
               "repetitions, bars: their range)", layout, draw, out)


def efficiency_layout(report, models):
    return line_layout(series_panels(models, series_with(report, "efficiency")), models)


def plot_efficiency(report, models, out):
    pmax = max_cores(report)
    layout = efficiency_layout(report, models)

    def draw(ax, panel):
        for series, ps, colour, marker in parallel_series(report, panel.model, "efficiency", panel.items):
            ax.plot([p["p"] for p in ps], [p["efficiency"] for p in ps], color=colour,
                    marker=marker, linestyle=line_style(series), label=series_label(series))
        ax.axhline(1, color="0.6", linestyle=":", label="ideal E = 1")
        label_cores_axes(ax, panel.title, "efficiency E", pmax, layout.beside)

    draw_pages(report, "efficiency", "Parallel efficiency E = S / p", layout, draw, out)


def throughput_layout(report, models):
    return bar_layout(bar_panels(models, lambda model: measured(report, model)))


def plot_throughput(report, models, out):
    layout = throughput_layout(report, models)

    def draw(ax, panel):
        ps = panel.items
        labels = [bar_label(p) for p in ps]
        values = [p["images_per_s"]["median"] for p in ps]
        errors = [[p["images_per_s"]["median"] - p["images_per_s"]["min"] for p in ps],
                  [p["images_per_s"]["max"] - p["images_per_s"]["median"] for p in ps]]
        colours = [series_style(p["series"])[0] for p in ps]
        bars = ax.bar(range(len(ps)), values, yerr=errors, color=colours, capsize=3)
        # Peer bars are outlined dashed, and PyTorch on one thread is a dashed grey line across.
        for bar, p in zip(bars, ps):
            if p.get("peer"):
                bar.set(facecolor="0.85", edgecolor="0.4", linestyle="--", linewidth=1.2)
        torch_1t = next((p for p in measured(report, panel.model) if p["id"].endswith("/pytorch/n1c1")), None)
        if torch_1t:
            ax.axhline(torch_1t["images_per_s"]["median"], color="0.5", linestyle="--", linewidth=1,
                       label="PyTorch, 1 thread")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(ps)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(panel.title)
        ax.set_xlabel("strategy / n<ranks>c<threads per rank>")
        ax.set_ylabel("images / s")
        ax.set_ylim(0, 1.05 * max([p["images_per_s"]["max"] for p in measured(report, panel.model)] + [0]) or None)
        ax.grid(alpha=0.3, axis="y")

    draw_pages(report, "throughput", "Training throughput (median of repetitions)", layout, draw, out)


def tta_points(report, model):
    return [p for p in measured(report, model) if p.get("time_to_accuracy") and p["time_to_accuracy"]["curve"]]


def time_to_accuracy_layout(report, models):
    return line_layout(series_panels(models, lambda model: list({p["series"]: 0 for p in tta_points(report, model)})),
                       models)


# A panel of more curves than this names each series once, not each point.
CURVES_NAMED = 12


def plot_time_to_accuracy(report, models, out):
    target = report["config"].get("target_accuracy")
    if target is None:
        title = "Time to accuracy: not measured (cnnbench sweep --target-accuracy A)"
    else:
        title = (f"Time to accuracy (target {target:g})\nclock starts before the data is loaded, "
                 f"evaluation every {report['config']['eval_every']} steps")
    layout = time_to_accuracy_layout(report, models)

    def draw(ax, panel):
        ps = [p for p in tta_points(report, panel.model) if p["series"] in panel.items]
        styles = panel_styles(panel.items)
        by_point = len(ps) <= CURVES_NAMED
        named = set()
        for p in ps:
            tta = p["time_to_accuracy"]
            colour, marker = styles[p["series"]]
            if by_point:
                label = p["id"].split("/", 1)[1] + ("" if tta["reached"] else " (not reached)")
            else:
                label = None if p["series"] in named else series_label(p["series"])
                named.add(p["series"])
            ax.plot([c["seconds"] for c in tta["curve"]], [c["accuracy"] for c in tta["curve"]],
                    color=colour, marker=marker, markersize=3, linewidth=1,
                    linestyle=line_style(p["series"]), label=label)
        if target is not None:
            ax.axhline(target, color="k", linestyle=":", linewidth=1, label="target")
        if not ps:
            ax.text(0.5, 0.5, "not measured\n(cnnbench sweep --target-accuracy A)",
                    ha="center", va="center", transform=ax.transAxes)
        ax.set_title(panel.title if by_point else f"{panel.title} ({len(ps)} points)")
        ax.set_xlabel("wall time since start (s)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        if ps:
            legend(ax, layout.beside)

    draw_pages(report, "time_to_accuracy", title, layout, draw, out)


def scaling_inputs(report, model):
    """The serial step of one node over the whole batch and the measured share of communication
    hidden behind backward (median over the model's cluster points; 0 without any)."""
    prediction = next((s for s in report.get("scaling_prediction", []) if s["model"] == model), None)
    serial = prediction["serial_step_s"] if prediction and prediction.get("serial_step_s") else None
    if serial is None:
        for point in measured(report, model):
            if point["strategy"] == "serial" and point.get("steps"):
                serial = point["time"]["median"] / point["steps"]
    hidden = sorted(((p.get("strategy_metrics") or {}).get("overlap_detail") or {}).get("hidden_fraction", 0.0)
                    for p in measured(report, model) if p["strategy"] == "cluster" and p["nodes"] > 1)
    return serial, hidden[len(hidden) // 2] if hidden else 0.0


def scaling_curves(report, model, serial, hidden):
    """`cnnbench scaling-model`'s strong and weak curves for every profile of fabric_profiles.json
    (next to this script), plus the sweep's own allreduce measurement when it has a link fit. None
    when the cnnbench that runs the plot is unknown (CNNBENCH_EXECUTABLE, set by cnnbench plot)."""
    executable = os.environ.get("CNNBENCH_EXECUTABLE")
    profiles = Path(__file__).with_name("fabric_profiles.json")
    if not executable or not profiles.exists():
        return None
    args = [executable, "scaling-model", "--fabric", str(profiles), "--model", model,
            "--serial-step", repr(serial), "--hidden-fraction", repr(hidden), "--max-nodes", "1024",
            "--report", "-"]
    own = None  # the sweep's allreduce profile, which scaling-model names by its (temporary) path
    with tempfile.TemporaryDirectory() as scratch:
        allreduce = report.get("allreduce") or {}
        if "link" in (allreduce.get("fit") or {}):
            own = Path(scratch) / "allreduce.json"
            own.write_text(json.dumps(allreduce))
            args += ["--allreduce", str(own)]
        result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"cnnbench scaling-model failed: {result.stdout}{result.stderr}".strip())
    curves = json.loads(result.stdout)
    for profile in curves["profiles"]:
        if own is not None and profile["name"] == str(own):
            profile["name"] = "this sweep's allreduce fit"
    return curves


def measured_efficiency(report, model, serial):
    """(nodes, median, low, high) efficiency of the model's 1-thread cluster points over serial,
    the range from the fastest and slowest repetition."""
    rows = []
    for point in measured(report, model):
        if point["strategy"] != "cluster" or point["cores"] != 1 or not point.get("steps"):
            continue
        steps, nodes = point["steps"], point["nodes"]
        eff = [serial / (nodes * t / steps) for t in (point["time"]["median"], point["time"]["max"],
                                                       point["time"]["min"])]
        rows.append((nodes, eff[0], eff[1], eff[2]))
    return sorted(rows)


def scaling_prediction_layout(report, models):
    return Layout([Panel(model, model, None) for model in models])


def plot_scaling_prediction(report, models, out):
    def draw(ax, panel):
        model = panel.model
        serial, hidden = scaling_inputs(report, model)
        curves = scaling_curves(report, model, serial, hidden) if serial else None
        if not curves:
            reason = "no serial step in the report" if not serial else \
                "run through `cnnbench plot` (it names the cnnbench that computes the curves)"
            ax.text(0.5, 0.5, "no prediction:\n" + reason, ha="center", va="center",
                    transform=ax.transAxes, wrap=True, fontsize=8)
        else:
            # tab20's dark shades, then its light ones: 20 profiles before a colour repeats.
            tab20 = plt.get_cmap("tab20").colors
            colours = tab20[0::2] + tab20[1::2]
            for i, profile in enumerate(curves["profiles"]):
                colour = colours[i % len(colours)]
                for kind, style in (("strong", "-"), ("weak", "--")):
                    # Powers of two only: in between, the folding of extra ranks makes the
                    # cheapest algorithm (and the curve) zigzag.
                    curve = [q for q in profile[kind] if q["nodes"] & (q["nodes"] - 1) == 0]
                    ax.plot([q["nodes"] for q in curve], [q["efficiency"] for q in curve], color=colour,
                            linestyle=style, linewidth=1, label=profile["name"] if kind == "strong" else None)
                    for a, b in zip(curve, curve[1:]):
                        if a["algorithm"] != b["algorithm"]:
                            ax.plot(b["nodes"], b["efficiency"], "o", color=colour, markersize=4)
            rows = measured_efficiency(report, model, serial)
            if rows:
                ax.errorbar([r[0] for r in rows], [r[1] for r in rows],
                            yerr=[[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]],
                            fmt="kv", markersize=7, capsize=3, label="measured (1 thread/rank)")
            ax.axhline(0.5, color="0.5", linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.1)
        ax.set_title(f"{model}: batch {report['config']['batch']}, serial step "
                     + (f"{serial * 1e3:.2f} ms, hidden {hidden:.0%}" if serial else "unknown"))
        ax.set_xlabel("nodes p (1 rank each)")
        ax.set_ylabel("efficiency")
        ax.grid(alpha=0.3, which="both")

    # The profiles are the same in every panel, and inside a panel the legend hid the curves.
    draw_pages(report, "scaling_prediction", "Cluster scaling predicted per fabric: strong (solid) and weak "
               "(dashed) efficiency\n(step = compute + (1 - hidden) x cheapest allreduce per bucket; o: the "
               "algorithm changes)", scaling_prediction_layout(report, models), draw, out,
               finish=lambda fig, axes: legend_beside(fig, axes, 2.48))


def category_seconds(breakdown):
    """The critical path's seconds by category of a point's time_breakdown, the pipeline bubble
    split into fill/drain and starvation (a report that gives only pipeline_bubble_s counts it as
    fill/drain)."""
    seconds = {key: breakdown.get(key, 0.0) for key, _, _ in CATEGORIES}
    bubble = breakdown.get("pipeline_bubble")
    if isinstance(bubble, dict):
        seconds["fill_drain_s"] = bubble.get("fill_drain_s", 0.0)
        seconds["starvation_s"] = bubble.get("starvation_s", 0.0)
    else:
        seconds["fill_drain_s"] = breakdown.get("pipeline_bubble_s", 0.0)
    return seconds


def breakdown_points(report, model):
    """The measured points of `model` with a breakdown, serial first, then by series and p."""
    def drawable(breakdown):
        return isinstance(breakdown, dict) and breakdown.get("steps", 0) > 0 and breakdown.get("wall_s", 0) > 0
    ps = [p for p in measured(report, model) if drawable(p.get("time_breakdown"))]
    return sorted(ps, key=lambda p: (p["strategy"] != "serial", series_key(p["series"]), p["p"]))


def serial_breakdown(report, model):
    """The serial point of `model` with a breakdown, or None."""
    return next((p for p in breakdown_points(report, model) if p["strategy"] == "serial"), None)


def breakdown_layout(report, models):
    """A bar per point of a model with a serial point to divide by; a model without one gets one
    panel that says so."""
    return bar_layout(bar_panels(models, lambda model: breakdown_points(report, model)
                                 if serial_breakdown(report, model) else []))


def plot_breakdown(report, models, out):
    layout = breakdown_layout(report, models)

    def draw(ax, panel):
        model, ps = panel.model, panel.items
        serial = serial_breakdown(report, model)
        if serial is None:
            reason = ("no serial point with a breakdown to divide by" if breakdown_points(report, model) else
                      "no point has a time breakdown\n(the report predates them)")
            ax.text(0.5, 0.5, reason, ha="center", va="center", transform=ax.transAxes, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(model)
            return
        # The serial point's own breakdown: both sides of the ratio are the steps' wall time.
        serial_step = serial["time_breakdown"]["wall_s"] / serial["time_breakdown"]["steps"]
        xs = range(len(ps))
        bottoms = [0.0] * len(ps)
        for key, label, colour in CATEGORIES:
            heights = [category_seconds(p["time_breakdown"])[key] / p["time_breakdown"]["steps"] / serial_step
                       for p in ps]
            if not any(h > 0 for h in heights):
                continue
            ax.bar(xs, heights, bottom=bottoms, color=colour, width=0.7, label=label)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ax.hlines([1 / p["p"] for p in ps], [x - 0.42 for x in xs], [x + 0.42 for x in xs], color="k",
                  linewidth=2, label="1/p (perfect scaling)")
        crowded = len(ps) > 20  # the totals stand upright, or they would run into each other
        for x in xs:
            ax.annotate(f"{bottoms[x]:.2f}", (x, bottoms[x]), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6 if crowded else 7, rotation=90 if crowded else 0)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([bar_label(p) + (" (noisy)" if p.get("noise_warning") else "")
                            for p in ps], rotation=45, ha="right", fontsize=8)
        # One scale for all of a model's panels.
        tallest = max([1.0] + [sum(category_seconds(p["time_breakdown"]).values()) / p["time_breakdown"]["steps"] /
                               serial_step for p in breakdown_points(report, model)])
        ax.set_ylim(0, tallest * (1.18 if crowded else 1.12))
        ax.set_title(f"{panel.title}: serial step {serial_step * 1e3:.3g} ms")
        ax.set_xlabel("strategy / n<ranks>c<threads per rank>")
        ax.set_ylabel("time per step / serial time per step")
        ax.grid(alpha=0.3, axis="y")

    draw_pages(report, "breakdown", "Where a step's time goes: each point's critical path per step, by "
               "category, over the serial step time of its model\n(black tick: 1/p, perfect scaling; the "
               "bar's excess over it is the missing speedup)", layout, draw, out, finish=lambda fig, axes: legend_beside(fig, axes, 2.1))


# Each figure by its name: the function that lists its panels (one page's worth of them or more)
# and the one that draws it, in the order plot draws them.
FIGURES = {
    "speedup": (speedup_layout, plot_speedup),
    "efficiency": (efficiency_layout, plot_efficiency),
    "throughput": (throughput_layout, plot_throughput),
    "time_to_accuracy": (time_to_accuracy_layout, plot_time_to_accuracy),
    "scaling_prediction": (scaling_prediction_layout, plot_scaling_prediction),
    "breakdown": (breakdown_layout, plot_breakdown),
}


# What draw_figures' workers draw from: (report, models, folder or None for SVG text), set
# before they fork.
JOB = None


def draw_page(task):
    """One page of one figure, in a worker: its SVG text by file name when the job has no folder."""
    global ONLY_PAGE
    report, models, folder = JOB
    ONLY_PAGE = task
    out = {} if folder is None else folder
    try:
        FIGURES[task[0]][1](report, models, out)
    finally:
        ONLY_PAGE = None
    return out if folder is None else {}


def draw_figures(report, models, out, names=None):
    """Draws the figures `names` (default all, in FIGURES' order) into `out`: a folder, or a dict
    that then holds each page's SVG text by file name, in order. The pages are drawn in parallel,
    a process per core (a large sweep's figures take a core tens of seconds)."""
    global JOB
    names = list(FIGURES) if names is None else names
    tasks = [(name, page) for name in names for page in range(len(FIGURES[name][0](report, models).pages))]
    workers = min(len(tasks), len(os.sched_getaffinity(0)))
    if workers <= 1:
        for name in names:
            FIGURES[name][1](report, models, out)
        return out
    JOB = (report, models, None if isinstance(out, dict) else out)
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        pages = [pool.submit(draw_page, task) for task in tasks]
        # Every page is waited for and none is cancelled, even after one has failed: on CPython
        # before 3.12 a cancelled future can leave the pool's shutdown waiting for ever (CPython
        # issue 94440), and map() cancels what is left when a result raises.
        concurrent.futures.wait(pages)
    for page in pages:
        result = page.result()  # the first failed page's error, in the pages' order
        if isinstance(out, dict):
            out.update(result)
    return out


def figure_files(report, models):
    """The files (without .png/.svg) that each figure of this report is drawn into, in order."""
    return [file for name, (layout, _) in FIGURES.items() for file in page_names(name, layout(report, models).pages)]


# ---- Gantt chart of one step of a trace -----------------------------------------------------------

def trace_events(trace, path):
    """The events of a Chrome trace: a JSON array of them, or an object with traceEvents."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise InputError("not a Chrome trace (expected an array of events or an object with "
                         "\"traceEvents\")")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    if not spans:
        raise InputError("the trace has no complete events (\"ph\": \"X\") to draw")
    for i, e in enumerate(spans):
        for key in ("pid", "ts", "dur"):
            if not isinstance(e.get(key), (int, float)):
                raise InputError(f"complete event {i} ({e.get('name', '?')}): \"{key}\" is not a number")
    return events, spans


def track_names(events):
    """(pid, tid) -> "rank 0 / thread 1", from the process_name and thread_name metadata."""
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and "name" in e.get("args", {})}
    def name(track):
        pid, tid = track
        return " / ".join(n for n in (processes.get(pid, f"pid {pid}"), threads.get(track, f"tid {tid}")) if n)
    return name


def step_of(event):
    args = event.get("args")
    return args.get("step") if isinstance(args, dict) else None


def chosen_step(spans):
    """The step to draw and its time window: of the steps every track's spans name (args.step),
    the last whose duration is the median's (a typical step: a run's last step also closes its
    last range of steps, and a cluster run's did half a millisecond of one thread's work there);
    without step numbers, the last step as the track with the most update spans (one per step)
    bounds it, from the end of its next-to-last update to the end of its last; with fewer than two
    updates, the last 1/20 of the trace (train keeps 20 steps). Returns (step or None, start,
    end, what)."""
    tracks = {}
    for e in spans:
        tracks.setdefault((e["pid"], e.get("tid")), []).append(e)
    stepped = [{step_of(e) for e in es if step_of(e) is not None} for es in tracks.values()]
    stepped = [steps for steps in stepped if steps]
    if stepped:
        common = set.intersection(*stepped)
        if common:
            window = {}
            for e in spans:
                step = step_of(e)
                if step in common:
                    start, end = window.get(step, (e["ts"], e["ts"] + e["dur"]))
                    window[step] = (min(start, e["ts"]), max(end, e["ts"] + e["dur"]))
            duration = {step: end - start for step, (start, end) in window.items()}
            median = sorted(duration.values())[(len(duration) - 1) // 2]
            step = max(step for step, d in duration.items() if d == median)
            return (step, *window[step], f"step {step}")
    updates = max(([e for e in es if e.get("cat") == "update_s"] for es in tracks.values()), key=len)
    if len(updates) >= 2:
        ends = sorted(e["ts"] + e["dur"] for e in updates)
        return None, ends[-2], ends[-1], "the last step (between the last two updates)"
    start = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    return None, end - (end - start) / 20, end, "the last 1/20 of the trace (no step numbers)"


def flow_arrows(events, rows, start, end):
    """(x0, row0, x1, row1) of each flow ("ph" "s" to "f" of one id) whose ends lie in the window."""
    begins = {}
    arrows = []
    for e in sorted((e for e in events if e.get("ph") in ("s", "f")), key=lambda e: e.get("ts", 0)):
        key = (e.get("cat"), e.get("id"))
        track = (e.get("pid"), e.get("tid"))
        if e["ph"] == "s":
            begins[key] = (e["ts"], track)
        elif key in begins:
            ts0, track0 = begins.pop(key)
            if start <= ts0 <= end and start <= e["ts"] <= end and track0 in rows and track in rows:
                arrows.append((ts0, rows[track0], e["ts"], rows[track]))
    return arrows


# A span is labelled only where its label fits: the tracks' axes are about this wide (of the 12-inch
# figure, less the track names and the legend), a character of the 6-point label about this wide.
GANTT_AXES_WIDTH_PT = 0.68 * 12 * 72
GANTT_CHAR_PT = 3.6


def span_label(event):
    """A span's name, with its micro-batch when it has one: "c1 #2"."""
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    micro_batch = args.get("micro_batch")
    return event.get("name", "") + (f" #{micro_batch}" if micro_batch is not None else "")


def draw_spans(ax, spans, rows, step, start, end):
    """The spans inside [start, end] as bars on their rows; returns the categories drawn in full
    and whether any span of another step was drawn (faint)."""
    used, faint = set(), False
    for e in spans:
        x0, x1 = max(e["ts"], start), min(e["ts"] + e["dur"], end)
        if x1 <= x0:
            continue
        cat = e.get("cat", "other_s")
        # A pipeline overlaps steps: the spans of other steps are drawn faint.
        other_step = step is not None and step_of(e) is not None and step_of(e) != step
        row = rows[(e["pid"], e.get("tid"))]
        ax.broken_barh([((x0 - start) / 1e3, (x1 - x0) / 1e3)], (row - 0.4, 0.8),
                       facecolors=CATEGORY_COLOUR.get(cat, "0.4"), alpha=0.3 if other_step else 1.0,
                       edgecolor="white", linewidth=0.3)
        faint = faint or other_step
        if not other_step:
            used.add(cat)
        label = span_label(e)
        if label and (x1 - x0) / (end - start) * GANTT_AXES_WIDTH_PT > GANTT_CHAR_PT * (len(label) + 1):
            ax.text((x0 + x1 - 2 * start) / 2e3, row, label, ha="center", va="center", fontsize=6, clip_on=True)
    return used, faint


def counter_series(events, start, end):
    """(label, [(ms from start, value)]) of every counter ("ph" "C": a name and args of series)
    that has a value in the window: its last value before it, at 0, then those inside it."""
    series = {}
    for e in events:
        if e.get("ph") != "C" or not isinstance(e.get("args"), dict) or not isinstance(e.get("ts"), (int, float)):
            continue
        for key, value in e["args"].items():
            if isinstance(value, (int, float)):
                label = f"{e.get('name', 'counter')}.{key}" if len(e["args"]) > 1 else e.get("name", key)
                series.setdefault((str(e.get("pid")), label), []).append((e["ts"], value))
    drawn = []
    for (_, label), points in sorted(series.items()):
        points.sort()
        before = [value for ts, value in points if ts <= start]
        inside = [((ts - start) / 1e3, value) for ts, value in points if start < ts <= end]
        values = ([(0.0, before[-1])] if before else []) + inside
        if values:
            drawn.append((label, values))
    return drawn


def summed_series(series):
    """The sum of step functions [(x, value)] (each holding its value until its next point)."""
    current = [0.0] * len(series)
    changes = sorted((x, k, y) for k, (_, points) in enumerate(series) for x, y in points)
    total = []
    for x, k, y in changes:
        current[k] = y
        if total and total[-1][0] == x:
            total.pop()
        total.append((x, sum(current)))
    return total


def draw_counters(ax, series, width_ms):
    # A stream graph has a counter per channel (dozens): a legend of them would crowd the chart
    # out, so many are drawn as their sum, with the deepest channel named.
    if len(series) > 8:
        deepest = max(series, key=lambda s: max(y for _, y in s[1]))
        series = [(f"tokens queued in all {len(series)} channels", summed_series(series)),
                  (f"deepest: {deepest[0]}", deepest[1])]
    for label, points in series:
        xs = [x for x, _ in points] + [width_ms]
        ys = [y for _, y in points] + [points[-1][1]]
        ax.step(xs, ys, where="post", linewidth=1, label=label)
    ax.set_ylabel("counters", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)


def gantt_legend(ax, used, faint, arrows):
    handles = [matplotlib.patches.Patch(color=CATEGORY_COLOUR[key], label=label)
               for key, label, _ in CATEGORIES if key in used]
    handles += [matplotlib.patches.Patch(color=CATEGORY_COLOUR.get(cat, "0.4"), label=cat)
                for cat in sorted(used - set(CATEGORY_COLOUR))]
    if arrows:
        handles.append(matplotlib.lines.Line2D([], [], color="k", marker=">", label="flow (message)"))
    if faint:
        handles.append(matplotlib.patches.Patch(color="0.5", alpha=0.3, label="other steps' spans"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)


def plot_gantt(trace_path, out):
    try:
        trace = readable(json.loads(Path(trace_path).read_text()), DRAWN_TEXT_LIMIT)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e}") from None
    events, spans = trace_events(trace, trace_path)
    step, start, end, what = chosen_step(spans)
    name = track_names(events)
    tracks = sorted({(e["pid"], e.get("tid")) for e in spans}, key=lambda t: (t[0], t[1] if t[1] is not None else -1))
    rows = {track: i for i, track in enumerate(tracks)}
    counters = counter_series(events, start, end)
    height = 1.6 + 0.55 * len(tracks)
    if counters:
        fig, (ax, counter_ax) = plt.subplots(2, 1, sharex=True, figsize=(12, height + 1.6),
                                             gridspec_kw={"height_ratios": [height, 1.4]})
    else:
        fig, ax = plt.subplots(figsize=(12, height))
    width_ms = (end - start) / 1e3
    used, faint = draw_spans(ax, spans, rows, step, start, end)
    arrows = flow_arrows(events, rows, start, end)
    for x0, r0, x1, r1 in arrows:
        ax.annotate("", xy=((x1 - start) / 1e3, r1), xytext=((x0 - start) / 1e3, r0),
                    arrowprops=dict(arrowstyle="->", color="k", linewidth=0.7, alpha=0.7))
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([name(t) for t in tracks], fontsize=8)
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlim(0, width_ms)
    ax.grid(alpha=0.3, axis="x")
    gantt_legend(ax, used, faint, arrows)
    ax.set_title(f"{Path(trace_path).name}: {what}, {width_ms:.3g} ms, one row per track", fontsize=10)
    if counters:
        draw_counters(counter_ax, counters, width_ms)
        counter_ax.set_xlabel(f"ms from the start of {what}")
    else:
        ax.set_xlabel(f"ms from the start of {what}")
    fig.tight_layout()
    stem = Path(trace_path).stem
    for ext in ("png", "svg"):
        # "tight": the legends beside the axes and long track names stay in the picture.
        write_output(out / f"{stem}-gantt.{ext}",
                     lambda f: fig.savefig(f, format=ext, dpi=120, bbox_inches="tight"))
    plt.close(fig)
    print(f"{stem}: {what}, {len(tracks)} tracks, {len(arrows)} flows, {len(counters)} counters")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?")
    parser.add_argument("--trace", help="a Chrome trace (train --trace): draw one step as a Gantt chart")
    parser.add_argument("--out", required=True)
    parser.add_argument("--names", help="write the names of the files a REPORT's figures go to (without "
                        ".png/.svg) to this file as a JSON list, and draw nothing")
    args = parser.parse_args()
    if (args.report is None) == (args.trace is None):
        parser.error("give a sweep REPORT or --trace FILE (one of them)")
    global INPUT
    INPUT = args.trace or args.report
    if args.trace is not None:
        out = Path(args.out)
        plot_gantt(args.trace, out)
        return 0
    report = readable(json.loads(Path(args.report).read_text()), DRAWN_TEXT_LIMIT)
    if not isinstance(report, dict) or report.get("kind") != "sweep":
        raise InputError("not a sweep report")
    models = report["config"]["models"]
    if args.names is not None:
        names = json.dumps(figure_files(report, models))
        write_output(args.names, lambda f: f.write(names.encode()))
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {args.out}: {e.strerror}") from None
    try:
        draw_figures(report, models, out)
    except OSError as e:
        raise InputError(f"cannot write {e.filename or args.out}: {e.strerror}") from None
    return 0


def error_line(text):
    """One line of at most 300 characters, every control character (newline too) escaped."""
    text = visible(text).replace("\n", "\\n").replace("\t", " ")
    return text if len(text) <= 300 else text[:300] + "\u2026"


def run(entry=None):
    """`entry` (default main), with any failure as one "cnnbench: error:" line naming what went
    wrong instead of a traceback: a report is anyone's, and whatever its fields hold, the user
    sees one line of text."""
    try:
        return (entry or main)()
    except OSError as e:
        where = e.filename if e.filename is not None else INPUT
        message = f"{where}: {e.strerror or e}"
    except InputError as e:
        message = f"{INPUT}: {e}"
    except json.JSONDecodeError as e:
        message = f"{INPUT}: invalid JSON: {e}"
    except RecursionError:
        message = f"{INPUT}: nested too deeply to draw"
    except Exception as e:  # noqa: BLE001  (a field of the wrong type, a value out of range)
        kind = type(e).__name__.replace("Error", " error")
        message = f"{INPUT}: cannot plot this file ({kind}: {e})"
    print("cnnbench: error: " + error_line(message), file=sys.stderr)
    return REPORTED_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(run())
