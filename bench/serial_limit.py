#!/usr/bin/env python3
"""Serial training against the core's limit, with OPENBLAS_CORETYPE unset and set to Haswell:
each model's images/s, GFLOP/s and share of one core's sgemm peak (measured in the same process
right after training), pinned to one core, RUNS runs per model and setting taken in turns (so a
slow period of the machine lands in every row; the order rotates by one a run), medians; then
serial against PyTorch on one thread at batch 64 (bench/serial_vs_pytorch.sh --pairs PAIRS,
OPENBLAS_CORETYPE unset on both sides). Writes one JSON file (the README's "Against the core's limit" table is generated from it
by scripts/readme_tables.py).

Usage: bench/serial_limit.py --out FILE [--force] [--cli PATH] [--runs 5] [--steps 1000]
                             [--pairs 5] [--core 1]
  --out    the JSON file to write (refused when it exists, unless --force)
  --cli    the cnnbench to run (default build/release/apps/cnnbench; a sanitizer build is refused)
  --runs   runs per model and setting (1-50)
  --steps  steps per run, batch 64 on 4,096 synthetic images (10-1000000)
  --pairs  PyTorch pairs per model; 0 leaves PyTorch out (0-100)
  --core   the core to pin to (the first of the process's cores when it is not one of them)"""
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import bounded, check_run_args, failer, parser_of, write_json

HERE = Path(__file__).resolve().parent
MODELS = ("lenet5", "fc3")
SETTINGS = ("unset", "Haswell")


fail = failer("serial_limit")


def environment(setting):
    """This process's environment with OPENBLAS_CORETYPE as `setting` says (OPENBLAS_L2_SIZE,
    set beside it on some machines, left out: the kernel set alone differs between the rows)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if setting != "unset":
        env["OPENBLAS_CORETYPE"] = setting
    return env


def pinned(core):
    """The command prefix that pins to `core`, with a real-time priority where this user may."""
    prefix = ["taskset", "-c", str(core)]
    chrt = shutil.which("chrt")
    if chrt and subprocess.run([chrt, "-f", "10", "true"], capture_output=True).returncode == 0:
        prefix = [chrt, "-f", "10"] + prefix
    return prefix


def shown(prefix):
    """The pinning prefix as a reader would type it (program names without their folders)."""
    return " ".join(os.path.basename(word) for word in prefix)


def train(cli, prefix, model, steps, setting):
    command = prefix + [cli, "train", "--model", model, "--strategy", "serial", "--steps", str(steps),
                        "--synthetic", "4096", "--quiet", "--report", "-"]
    result = subprocess.run(command, env=environment(setting), capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        fail(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout)


def pytorch_ratios(cli, prefix, pairs):
    """{model: {cnnbench, pytorch, ratio}} from bench/serial_vs_pytorch.sh's table at batch 64,
    both programs pinned as the runs above."""
    command = prefix + [str(HERE / "serial_vs_pytorch.sh"), "--cli", cli, "--pairs", str(pairs), "--batches", "64",
               "--torch-coretype", "unset"]
    result = subprocess.run(command, env=environment("unset"), capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        fail(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()[-300:]}")
    rows = {}
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] in MODELS and words[1] == "64" and words[4] != "-":
            rows[words[0]] = {"cnnbench": float(words[2]), "pytorch": float(words[3]), "ratio": float(words[4])}
    return {"command": shown(prefix) + f" bench/serial_vs_pytorch.sh --pairs {pairs} --batches 64 "
                       "--torch-coretype unset (OPENBLAS_CORETYPE unset)", "models": rows}


def main():
    parser = parser_of(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--cli", default=str(HERE.parent / "build/release/apps/cnnbench"))
    parser.add_argument("--runs", type=bounded(1, 50), default=5)
    parser.add_argument("--steps", type=bounded(10, 1000000), default=1000)
    parser.add_argument("--pairs", type=bounded(0, 100), default=5)
    parser.add_argument("--core", type=bounded(0, 1 << 20), default=1)
    args = parser.parse_args()
    check_run_args(fail, args.out, args.force, args.cli)
    cores = sorted(os.sched_getaffinity(0))
    core = args.core if args.core in cores else cores[0]
    prefix = pinned(core)

    reports = {(s, m): [] for s in SETTINGS for m in MODELS}
    order = list(reports)
    for run in range(args.runs):
        # The order rotates by one a run, so that no row always runs first or after the same one
        # (with a fixed order, Haswell's FC-3 ran ahead of unset's in 5 pairs of 5, and in turns
        # the two were equal).
        shift = run % len(order)
        for setting, model in order[shift:] + order[:shift]:
            report = train(args.cli, prefix, model, args.steps, setting)
            reports[(setting, model)].append(report)
            print(f"serial_limit: run {run + 1}/{args.runs}, OPENBLAS_CORETYPE {setting}, {model}: "
                  f"{report['metrics']['images_per_s']:,.0f} images/s", file=sys.stderr)
    rows = []
    for (setting, model), runs in reports.items():
        metrics = [r["metrics"] for r in runs]

        def median(key):
            return statistics.median(m[key] for m in metrics)
        rows.append({"openblas_coretype": setting, "model": model,
                     "images_per_s": median("images_per_s"), "gflops": median("gflops"),
                     "sgemm_peak_gflops": median("sgemm_peak_gflops"), "peak_fraction": median("peak_fraction"),
                     "peak_fraction_range": [min(m["peak_fraction"] for m in metrics),
                                             max(m["peak_fraction"] for m in metrics)],
                     "simd": runs[0]["context"].get("simd"), "openblas": runs[0]["context"].get("openblas")})
    out = {"kind": "serial-limit", "schema_version": 1,
           "context": reports[("unset", MODELS[0])][0]["context"],
           "machine_cores": len(os.sched_getaffinity(0)),
           "command": shown(prefix) + " " + " ".join(["cnnbench", "train", "--model", "M", "--strategy", "serial",
                                         "--steps", str(args.steps), "--synthetic", "4096", "--report", "r.json"]),
           "runs": args.runs, "core": core, "rows": rows}
    if args.pairs > 0:
        out["pytorch"] = pytorch_ratios(args.cli, prefix, args.pairs)
    write_json(args.out, out)
    print(f"serial_limit: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
