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
import subprocess
import sys
import tempfile
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
    with tempfile.TemporaryDirectory() as scratch:
        allreduce = report.get("allreduce") or {}
        if "link" in (allreduce.get("fit") or {}):
            path = Path(scratch) / "allreduce.json"
            path.write_text(json.dumps(allreduce))
            args += ["--allreduce", str(path)]
        result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"cnnbench scaling-model failed: {result.stdout}{result.stderr}".strip())
    return json.loads(result.stdout)


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


def plot_scaling_prediction(report, models, out):
    fig, axes = new_figure(report, "Cluster scaling predicted per fabric: strong (solid) and weak "
                                   "(dashed) efficiency\n(step = compute + (1 - hidden) x cheapest "
                                   "allreduce per bucket; o: the algorithm changes)", models)
    for ax, model in zip(axes, models):
        serial, hidden = scaling_inputs(report, model)
        curves = scaling_curves(report, model, serial, hidden) if serial else None
        if not curves:
            reason = "no serial step in the report" if not serial else \
                "run through `cnnbench plot` (it names the cnnbench that computes the curves)"
            ax.text(0.5, 0.5, "no prediction:\n" + reason, ha="center", va="center",
                    transform=ax.transAxes, wrap=True, fontsize=8)
        else:
            colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
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
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, ncol=2)
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
