#!/usr/bin/env python3
"""Plots of a `cnnbench sweep` report: speedup (with the ideal line and the Amdahl fit), efficiency,
images/s, time to accuracy and the cluster scaling prediction, each as PNG and SVG.

Usage: plot_report.py REPORT.json --out DIR     (exit 3 when matplotlib is missing; exit 4 after
printing one "cnnbench: error: ..." line for anything else that goes wrong)
"""
import argparse
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot_report.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)",
          file=sys.stderr)
    sys.exit(3)

STYLE = {"serial": ("k", "s"), "blas": ("tab:orange", "^"), "stream": ("tab:blue", "o"),
         "gpu": ("tab:green", "D")}
CLUSTER_COLOURS = ["tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]


def series_label(series):
    if series.startswith("cluster/c"):
        threads = int(series.split("/c")[1])
        return f"cluster ({threads} thread{'s' if threads > 1 else ''}/rank, x = ranks*threads)"
    return {"blas": "blas (OpenBLAS threads)", "stream": "stream (pinned cores)"}.get(series, series)


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


def new_figure(report, title, models):
    width = 6.2 * len(models)
    fig, axes = plt.subplots(1, len(models), figsize=(width, 4.8), squeeze=False)
    # Wrapped to the figure's width (about 11 characters of the title's font per inch), so that a
    # one-panel figure keeps its whole title.
    lines = [wrapped for line in title.split("\n") for wrapped in textwrap.wrap(line, int(11 * width))]
    fig.suptitle("\n".join(lines))
    fig.title_lines = len(lines)
    fig.text(0.5, 0.01, caption(report), ha="center", va="bottom", fontsize=7, wrap=True)
    return fig, axes[0]


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
    fig.tight_layout(rect=(0, 0.08, 1, 1 - 0.045 * getattr(fig, "title_lines", 1)))
    for ext in ("png", "svg"):
        write_output(out / f"{name}.{ext}", lambda f: fig.savefig(f, format=ext, dpi=120))
    plt.close(fig)
    print(f"wrote {out / name}.png and .svg")


def max_cores(report):
    ps = [p["p"] for p in report["points"]]
    return max(ps + [2])


def parallel_series(report, model, metric):
    """The measured series of `model` that report `metric` (all but serial), in name order:
    (series, points sorted by p, colour, marker)."""
    for series, ps in sorted(by_series(measured(report, model)).items()):
        if series == "serial" or metric not in ps[0]:
            continue
        colour, marker = series_style(series)
        yield series, ps, colour, marker


def label_cores_axes(ax, model, ylabel, pmax):
    """Title, labels, ticks 1..pmax, grid and legend of a panel whose x axis is the core count."""
    ax.set_title(model)
    ax.set_xlabel("cores p (threads x ranks)")
    ax.set_ylabel(ylabel)
    ax.set_xticks(range(1, pmax + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def speedup_range(point, base):
    """Smallest and largest speedup of a point's repetitions: its paired ratios where it has them."""
    pair = point.get("paired_baseline")
    if pair and pair.get("ratios"):
        return min(pair["ratios"]), max(pair["ratios"])
    return base["time"]["median"] / point["time"]["max"], base["time"]["median"] / point["time"]["min"]


def plot_speedup(report, models, out):
    fig, axes = new_figure(report, "Speedup over the serial reference: S = T_serial / T_p "
                           "(median of paired repetitions, bars: their range)", models)
    fits = {(f["model"], f["series"]): f["serial_fraction"] for f in report.get("amdahl", [])}
    pmax = max_cores(report)
    for ax, model in zip(axes, models):
        base = next((p for p in measured(report, model) if p["strategy"] == "serial"), None)
        ax.plot([1, pmax], [1, pmax], color="0.6", linestyle=":", label="ideal S = p")
        for series, ps, colour, marker in parallel_series(report, model, "speedup"):
            xs = [p["p"] for p in ps]
            ys = [p["speedup"] for p in ps]
            ranges = [speedup_range(p, base) for p in ps]
            lo = [p["speedup"] - low for p, (low, _) in zip(ps, ranges)]
            hi = [high - p["speedup"] for p, (_, high) in zip(ps, ranges)]
            ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, marker=marker, capsize=3,
                        label=series_label(series))
            f = fits.get((model, series))
            if f is not None:
                grid = [1 + i * (pmax - 1) / 50 for i in range(51)]
                ax.plot(grid, [1 / (f + (1 - f) / g) for g in grid], color=colour, linestyle="--",
                        linewidth=1, label=f"Amdahl fit, {series}: f = {f:.2f}")
        ax.axhline(1, color="k", linewidth=0.6)
        label_cores_axes(ax, model, "speedup S (bars: range over the repetitions)", pmax)
    save(fig, out, "speedup")


def plot_efficiency(report, models, out):
    fig, axes = new_figure(report, "Parallel efficiency E = S / p", models)
    pmax = max_cores(report)
    for ax, model in zip(axes, models):
        for series, ps, colour, marker in parallel_series(report, model, "efficiency"):
            ax.plot([p["p"] for p in ps], [p["efficiency"] for p in ps], color=colour,
                    marker=marker, label=series_label(series))
        ax.axhline(1, color="0.6", linestyle=":", label="ideal E = 1")
        label_cores_axes(ax, model, "efficiency E", pmax)
    save(fig, out, "efficiency")


def plot_throughput(report, models, out):
    fig, axes = new_figure(report, "Training throughput (median of repetitions)", models)
    for ax, model in zip(axes, models):
        ps = measured(report, model)
        labels = [p["id"].split("/", 1)[1] for p in ps]
        values = [p["images_per_s"]["median"] for p in ps]
        errors = [[p["images_per_s"]["median"] - p["images_per_s"]["min"] for p in ps],
                  [p["images_per_s"]["max"] - p["images_per_s"]["median"] for p in ps]]
        colours = [series_style(p["series"])[0] for p in ps]
        ax.bar(range(len(ps)), values, yerr=errors, color=colours, capsize=3)
        ax.set_xticks(range(len(ps)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(model)
        ax.set_xlabel("strategy / n<ranks>c<threads per rank>")
        ax.set_ylabel("images / s")
        ax.grid(alpha=0.3, axis="y")
    save(fig, out, "throughput")


def plot_time_to_accuracy(report, models, out):
    target = report["config"].get("target_accuracy")
    if target is None:
        title = "Time to accuracy: not measured (cnnbench sweep --target-accuracy A)"
    else:
        title = (f"Time to accuracy (target {target:g})\nclock starts before the data is loaded, "
                 f"evaluation every {report['config']['eval_every']} steps")
    fig, axes = new_figure(report, title, models)
    for ax, model in zip(axes, models):
        drawn = False
        for p in measured(report, model):
            tta = p.get("time_to_accuracy")
            if not tta or not tta["curve"]:
                continue
            colour, marker = series_style(p["series"])
            mark = "" if tta["reached"] else " (not reached)"
            ax.plot([c["seconds"] for c in tta["curve"]], [c["accuracy"] for c in tta["curve"]],
                    color=colour, marker=marker, markersize=3, linewidth=1,
                    label=p["id"].split("/", 1)[1] + mark)
            drawn = True
        if target is not None:
            ax.axhline(target, color="k", linestyle=":", linewidth=1, label="target")
        if not drawn:
            ax.text(0.5, 0.5, "not measured\n(cnnbench sweep --target-accuracy A)",
                    ha="center", va="center", transform=ax.transAxes)
        ax.set_title(model)
        ax.set_xlabel("wall time since start (s)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
    save(fig, out, "time_to_accuracy")


def plot_scaling_prediction(report, models, out):
    fig, axes = new_figure(report, "Cluster scaling: measured vs predicted\n"
                                   "(T(p) = t_node ceil(B/p)/B + 2(p-1) alpha + 2(p-1)/p n beta)",
                           models)
    predictions = {s["model"]: s for s in report.get("scaling_prediction", [])}
    for ax, model in zip(axes, models):
        s = predictions.get(model)
        if not s or not s["available"]:
            reason = s["reason"] if s else "no measurement"
            ax.text(0.5, 0.5, "no prediction:\n" + reason, ha="center", va="center",
                    transform=ax.transAxes, wrap=True, fontsize=8)
        else:
            xs = [q["nodes"] for q in s["predicted"]]
            ax.plot(xs, xs, color="0.6", linestyle=":", label="ideal S = p")
            ax.plot(xs, [q["speedup"] for q in s["predicted"]], color="tab:red", marker=".",
                    label=f"predicted (alpha {s['alpha_s'] * 1e6:.1f} us, "
                          f"1/beta {1e-9 / s['beta_s_per_byte'] if s['beta_s_per_byte'] > 0 else float('inf'):.2f} GB/s)")
            m = s["measured_vs_predicted"]
            if m:
                ax.plot([q["nodes"] for q in m], [q["measured_speedup"] for q in m], "kv",
                        markersize=8, label="measured (1 thread/rank)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
        gradients = (s or {}).get("gradient_bytes")
        ax.set_title(f"{model}: batch {report['config']['batch']}"
                     + (f", {gradients / 1e6:.2f} MB of gradients" if gradients else ""))
        ax.set_xlabel("nodes p (MPI ranks)")
        ax.set_ylabel("speedup over serial")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    save(fig, out, "scaling_prediction")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    report = json.loads(Path(args.report).read_text())
    if report.get("kind") != "sweep":
        sys.exit(f"plot_report.py: {args.report} is not a sweep report")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        sys.exit(f"plot_report.py: --out {args.out}: {e.strerror}")
    models = report["config"]["models"]
    try:
        plot_speedup(report, models, out)
        plot_efficiency(report, models, out)
        plot_throughput(report, models, out)
        plot_time_to_accuracy(report, models, out)
        plot_scaling_prediction(report, models, out)
    except OSError as e:
        sys.exit(f"plot_report.py: cannot write {e.filename or args.out}: {e.strerror}")
    return 0


def run():
    """main, with any failure as one line naming what went wrong instead of a traceback."""
    try:
        return main()
    except OSError as e:
        where = e.filename if e.filename is not None else "plot_report.py"
        print(f"cnnbench: error: {where}: {e.strerror or e}", file=sys.stderr)
    except json.JSONDecodeError as e:
        print(f"cnnbench: error: {sys.argv[1]}: invalid JSON: {e}", file=sys.stderr)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
        print(f"cnnbench: error: {sys.argv[1]}: cannot plot this report "
              f"({type(e).__name__.replace('Error', ' error')}: {e})", file=sys.stderr)
    return REPORTED_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(run())
