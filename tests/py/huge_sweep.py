#!/usr/bin/env python3
"""A made-up sweep report the size of a large machine's: 5 strategies (serial, blas, stream,
cluster, gpu) x cores 1..64 x nodes 1..8 x both models, the points sweep plans for them (cluster
keeps nodes x cores within the 64 cores, and its one-thread ranks), 604 in all. Each point is a
measured point of a real 2-core sweep (results/three-sweeps-2026-12-06/sweep1.json) with its id,
cores and nodes replaced and its numbers made from an Amdahl model with a little noise: times,
images/s, paired ratios, speedup, efficiency, Karp-Flatt, the breakdown scaled to its wall time,
a pinning map of p workers and a time-to-accuracy curve. Not a test itself: the plot and page
tests import it. Run alone, it writes the report: huge_sweep.py --source SOURCE_TREE --out FILE."""
import argparse
import copy
import json
import random
from pathlib import Path

TEMPLATE = "results/three-sweeps-2026-12-06/sweep1.json"
STRATEGIES = ["serial", "blas", "stream", "cluster", "gpu"]
MODELS = ["fc3", "lenet5"]
MACHINE_CORES = 64
CORES = list(range(1, MACHINE_CORES + 1))
NODES = list(range(1, 9))
# The share of a serial step that does not scale, per strategy (cluster's grows with the nodes).
SERIAL_FRACTION = {"blas": 0.35, "stream": 0.04, "cluster": 0.06, "gpu": 0.0}
CATEGORY_KEYS = ["compute_s", "update_s", "reduce_s", "data_s", "communication_exposed_s",
                 "imbalance_wait_s", "other_s"]


def planned(models=MODELS):
    """(model, strategy, cores, nodes) in the order sweep plans them (lib/report/sweep_plan.cpp)."""
    points = [(m, "serial", 1, 1) for m in models]
    for m in models:
        for s in STRATEGIES[1:]:
            if s in ("blas", "stream"):
                points += [(m, s, c, 1) for c in CORES]
            elif s == "cluster":
                points += [(m, s, c, n) for n in NODES for c in CORES
                           if c == 1 or n == 1 or n * c <= MACHINE_CORES]
            else:
                points.append((m, s, 1, 1))
    return points


def series_of(strategy, cores):
    return f"cluster/c{cores}" if strategy == "cluster" else strategy


def stats(values):
    ordered = sorted(values)
    median = ordered[len(ordered) // 2]
    return {"mad": sorted(abs(v - median) for v in values)[len(values) // 2], "max": ordered[-1],
            "mean": sum(values) / len(values), "median": median, "min": ordered[0]}


def speedup_model(strategy, p, nodes, rng):
    if strategy == "serial":
        return 1.0
    if strategy == "gpu":
        return 6.0 * rng.uniform(0.95, 1.05)
    f = SERIAL_FRACTION[strategy] * (1 + 0.2 * (nodes - 1))
    return 1 / (f + (1 - f) / p) * rng.uniform(0.93, 1.03)


def scaled_breakdown(template, wall, serial_compute, steps, p, workers):
    """The template's breakdown made `wall` seconds long: compute near the serial compute over p,
    the other categories in the template's proportions filling the rest."""
    b = copy.deepcopy(template)
    compute = min(0.92 * wall, serial_compute / p * 1.08)
    rest = {k: b.get(k, 0.0) for k in CATEGORY_KEYS if k != "compute_s"}
    if not sum(rest.values()):
        rest["other_s"] = 1.0
    b["compute_s"] = compute
    for key, value in rest.items():
        b[key] = (wall - compute) * value / sum(rest.values())
    b.update(wall_s=wall, busy_s=wall - b["imbalance_wait_s"], steps=steps, descheduled_s=0.002 * wall)
    b.pop("per_layer", None)
    worker = copy.deepcopy(template["workers"][0])
    b["workers"] = []
    for i in range(workers):
        w = copy.deepcopy(worker)
        w.update({k: b[k] for k in CATEGORY_KEYS}, id=i, wall_s=wall, busy_s=b["busy_s"], descheduled_s=0.0)
        b["workers"].append(w)
    return b


def tta_curve(seconds_per_step, steps_to_target, eval_every=25):
    curve = []
    for k in range(1, steps_to_target // eval_every + 2):
        step = k * eval_every
        accuracy = min(0.97, 0.93 * (1 - 0.82 ** k) + 0.1)
        curve.append({"accuracy": accuracy, "seconds": 0.2 + step * seconds_per_step, "step": step})
    return curve


def launch_command(template, nodes, cores, steps):
    words = list(template["launch"]["command"])
    for i, word in enumerate(words[:-1]):
        if word == "-np":
            words[i + 1] = str(nodes)
        elif word == "--threads":
            words[i + 1] = str(cores)
        elif word == "--steps":
            words[i + 1] = str(steps)
    return {**template["launch"], "command": words}


def huge_sweep(source, seed=1):
    """The report as a dict, from the template in the source tree `source`."""
    base = json.loads((Path(source) / TEMPLATE).read_text())
    rng = random.Random(seed)
    by_id = {p["id"]: p for p in base["points"]}
    report = copy.deepcopy(base)
    report["config"].update(cores=CORES, nodes=NODES, machine_cores=MACHINE_CORES, strategies=STRATEGIES,
                            target_accuracy=0.9, eval_every=25)
    report["context"].update(cores=MACHINE_CORES, pus=MACHINE_CORES)
    points, amdahl = [], {}
    for model, strategy, cores, nodes in planned():
        shape = "n2c1" if strategy == "cluster" and nodes > 1 else "n1c2" if cores > 1 else "n1c1"
        template = by_id[f"{model}/{'serial' if strategy in ('serial', 'gpu') else strategy}/"
                         f"{'n1c1' if strategy in ('serial', 'gpu') else shape}"]
        serial = by_id[f"{model}/serial/n1c1"]
        steps = serial["steps"]
        serial_median = serial["time"]["median"]
        p = cores * nodes
        point = copy.deepcopy(template)
        for key in ("rounds", "slow_core_warnings", "started_s", "baseline_cores"):
            point.pop(key, None)
        point.update(id=f"{model}/{strategy}/n{nodes}c{cores}", model=model, strategy=strategy, cores=cores,
                     nodes=nodes, p=p, series=series_of(strategy, cores), steps=steps)
        speedup = speedup_model(strategy, p, nodes, rng)
        times = [serial_median / speedup * rng.uniform(0.97, 1.04) for _ in range(5)]
        point["times_s"] = times
        point["warmup_times_s"] = [times[0] * 1.02]
        point["time"] = stats(times)
        median = point["time"]["median"]
        point["median_repetition"] = times.index(median)
        point["images_per_s"] = stats([steps * point["batch"] / t for t in times])
        serial_times = [serial_median * rng.uniform(0.98, 1.02) for _ in times]
        ratios = [s / t for s, t in zip(serial_times, times)]
        paired = stats(ratios)["median"] if strategy != "serial" else 1.0
        point.update(speedup=paired, speedup_unpaired=serial_median / median, efficiency=paired / p,
                     karp_flatt=(1 / paired - 1 / p) / (1 - 1 / p) if p > 1 else None)
        if strategy != "serial":
            point["paired_baseline"] = {**template.get("paired_baseline", {}), "ratios": ratios,
                                        "times_s": serial_times, "steps": steps}
        workers = p if strategy != "gpu" else 1
        point["pin_map"] = [{"core": i % MACHINE_CORES, "observed_cpu": i % MACHINE_CORES, "pu": i % MACHINE_CORES,
                             "worker": f"{strategy}/rank{i // cores}/thread{i % cores}"} for i in range(workers)]
        point["time_breakdown"] = scaled_breakdown(
            template["time_breakdown"], median, serial["time_breakdown"]["compute_s"] * steps /
            serial["time_breakdown"]["steps"], steps, p, workers)
        if "launch" in point:
            point["launch"] = launch_command(template, nodes, cores, steps)
        steps_to_target = 200 + 25 * (p // 4)  # larger batches per step need more steps
        curve = tta_curve(median / steps, steps_to_target)
        point["time_to_accuracy"] = {"curve": curve, "eval_every": 25, "max_steps": 3000, "reached": True,
                                     "seconds": curve[-1]["seconds"], "steps": curve[-1]["step"], "target": 0.9,
                                     "test_samples": 1365}
        if strategy != "serial" and p > 1:
            amdahl.setdefault((model, point["series"]), []).append(point["karp_flatt"])
        points.append(point)
    report["points"] = points
    report["amdahl"] = [{"model": m, "points": len(fs), "rmse_inverse_speedup": 0.01,
                         "serial_fraction": sorted(fs)[len(fs) // 2], "series": s}
                        for (m, s), fs in sorted(amdahl.items())]
    report["complete"] = True
    report["elapsed_s"] = sum(sum(p["times_s"]) for p in points)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(Path(__file__).resolve().parents[2]), help="the source tree")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(huge_sweep(args.source)))


if __name__ == "__main__":
    main()
