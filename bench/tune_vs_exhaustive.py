#!/usr/bin/env python3
"""The planner of `cnnbench tune` against the ground truth: for each model, `tune` (the planner picks
what to measure within --budget), then `tune --exhaustive` (every candidate measured, paired with
serial as a sweep measures). For each strategy: the tuned winner's speedup in the exhaustive run
(where every candidate ran in the same rounds) against the best speedup there, and the winner's
against its default there; the planner's median error over every candidate; and the time the
tune took against the exhaustive one. Writes one JSON file and prints the table.

Usage: bench/tune_vs_exhaustive.py --out FILE [--force] [--cli PATH] [--models fc3,lenet5]
                                   [--cores 2] [--repeat 5] [--budget 120] [--data DIR]
  --out     the JSON file to write (refused when it exists, unless --force)
  --cli     the cnnbench to run (default build/release/apps/cnnbench; a sanitizer build is refused)
  --models  comma-separated: fc3, lenet5
  --cores   the cores to tune for (1-4096)
  --repeat  rounds of each tune (1-100)
  --budget  the planned tune's --budget in seconds (1-604800)
  --data    MNIST folder passed to both tunes (default: their synthetic data)"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import ROOT, bounded, check_run_args, failer, parser_of, printable, write_json

fail = failer("tune_vs_exhaustive")


def tune(cli, model, args, folder, exhaustive):
    out = Path(folder, f"{model}-{'exhaustive' if exhaustive else 'tuned'}.json")
    command = [cli, "tune", "--model", model, "--cores", str(args.cores), "--repeat", str(args.repeat),
               "--quiet", "--out", str(out)]
    command += ["--exhaustive"] if exhaustive else ["--budget", str(args.budget)]
    if args.data:
        command += ["--data", args.data]
    print(f"tune_vs_exhaustive: {printable(' '.join(command[1:]))}", file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    if result.returncode != 0:
        fail(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()[-400:]}")
    return json.loads(out.read_text())


def key(entry):
    """A candidate's identity across two tune reports: its strategy and settings."""
    return entry["strategy"], entry["cores"], entry["nodes"], json.dumps(entry["options"], sort_keys=True)


def compare(model, tuned, exhaustive):
    ok = {key(m): m for m in exhaustive["measured"] if m["status"] == "ok"}
    rows = []
    for strategy, winner in tuned["winners"].items():
        if winner is None:
            rows.append({"strategy": strategy, "status": "the tune measured no candidate"})
            continue
        chosen = next(m for m in tuned["measured"] if m["id"] == winner["id"])
        mine = [m for m in ok.values() if m["strategy"] == strategy]
        if not mine or key(chosen) not in ok:
            rows.append({"strategy": strategy, "status": "the exhaustive run measured no such candidate"})
            continue
        best = max(mine, key=lambda m: m["speedup"])
        default = next((m for m in mine if m["default"]), None)
        there = ok[key(chosen)]
        rows.append({"strategy": strategy, "status": "ok", "winner": chosen["label"],
                     "winner_speedup_tuned": winner["speedup"],
                     "winner_speedup_exhaustive": there["speedup"],
                     "best": best["label"], "best_speedup": best["speedup"],
                     "winner_of_best": there["speedup"] / best["speedup"],
                     "default_speedup_exhaustive": default["speedup"] if default else None,
                     "candidates_measured_exhaustive": len(mine)})
    errors = [abs(m["relative_error"]) for m in exhaustive["measured"] if m["status"] == "ok"]
    tuned_errors = [abs(m["relative_error"]) for m in tuned["measured"] if m["status"] == "ok"]
    return {"model": model, "rows": rows,
            "tune_s": tuned["elapsed_s"], "exhaustive_s": exhaustive["elapsed_s"],
            "time_fraction": tuned["elapsed_s"] / exhaustive["elapsed_s"],
            "tune_budget": tuned.get("budget"),
            "planner_median_error_all": statistics.median(errors) if errors else None,
            "planner_median_error_measured": statistics.median(tuned_errors) if tuned_errors else None,
            "candidates": len(exhaustive["candidates"])}


def main():
    parser = parser_of(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--cli", default=str(ROOT / "build/release/apps/cnnbench"))
    parser.add_argument("--models", default="fc3,lenet5")
    parser.add_argument("--cores", type=bounded(1, 4096), default=2)
    parser.add_argument("--repeat", type=bounded(1, 100), default=5)
    parser.add_argument("--budget", type=bounded(1, 604800), default=120)
    parser.add_argument("--data")
    args = parser.parse_args()
    models = args.models.split(",")
    for model in models:
        if model not in ("fc3", "lenet5"):
            fail(f"--models: '{model}' is not fc3 or lenet5", 2)
    if args.data and not Path(args.data).is_dir():
        fail(f"--data {args.data}: not a folder", 2)
    check_run_args(fail, args.out, args.force, args.cli)

    results = []
    with tempfile.TemporaryDirectory(prefix="cnnbench-tune-check-") as folder:
        for model in models:
            tuned = tune(args.cli, model, args, folder, exhaustive=False)
            exhaustive = tune(args.cli, model, args, folder, exhaustive=True)
            results.append(compare(model, tuned, exhaustive))
            context = exhaustive["context"]
    for r in results:
        print(f"{r['model']}: tune {r['tune_s']:.0f} s, exhaustive {r['exhaustive_s']:.0f} s "
              f"({100 * r['time_fraction']:.0f}%), {r['candidates']} candidates; planner median error "
              f"{100 * r['planner_median_error_all']:.0f}% over all, "
              f"{100 * r['planner_median_error_measured']:.0f}% over the tune's")
        for row in r["rows"]:
            if row["status"] != "ok":
                print(f"  {printable(row['strategy'])}: {row['status']}")
                continue
            default = row["default_speedup_exhaustive"]
            print(f"  {printable(row['strategy'])}: winner {printable(row['winner'])} {row['winner_speedup_exhaustive']:.2f} in the "
                  f"exhaustive run ({row['winner_speedup_tuned']:.2f} in the tune), best {row['best']} "
                  f"{row['best_speedup']:.2f}: {100 * row['winner_of_best']:.1f}% of the best; default "
                  f"{'-' if default is None else f'{default:.2f}'}")
    write_json(args.out, {"kind": "tune-vs-exhaustive", "schema_version": 1, "context": context,
                          "cores": args.cores, "repeat": args.repeat, "budget_s": args.budget,
                          "models": results})
    print(f"tune_vs_exhaustive: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
