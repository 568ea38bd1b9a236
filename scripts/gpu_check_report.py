#!/usr/bin/env python3
"""Writes gpu-report.json for scripts/gpu-check.sh from what it left in its work folder: the
stages it ran (state/stages.tsv), facts (state/facts.tsv), the gtest JSON of each test binary
(tests/) and the run reports (runs/). Valid JSON whether the check finished or stopped early."""
import argparse
import glob
import json
import os
import platform
import re
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--work", required=True)
parser.add_argument("--source", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--outcome", default="")
parser.add_argument("--dry-run", default="0")
parser.add_argument("--deadline", type=int, default=0)
args = parser.parse_args()
work = args.work


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def find(value, key):
    """First value of key anywhere in a JSON tree (the run report nests its metrics)."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            found = find(v, key)
            if found is not None:
                return found
    return None


def rows(path, fields):
    try:
        with open(path) as f:
            return [dict(zip(fields, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
    except OSError:
        return []


stages = rows(f"{work}/state/stages.tsv", ("name", "status", "seconds", "note"))
for s in stages:
    s["seconds"] = int(s.get("seconds") or 0)
facts = {}
for r in rows(f"{work}/state/facts.tsv", ("key", "value")):
    facts[r["key"]] = r.get("value", "")  # the last one wins
status_of = {s["name"]: s["status"] for s in stages}
# Planned stages never reached: skipped for the deadline when that is why the check stopped.
try:
    planned = [line.strip() for line in open(f"{work}/state/planned.txt") if line.strip()]
except OSError:
    planned = []
ran_any = lambda name: name in status_of or any(n.startswith(name + "-") for n in status_of)
for name in planned:
    if not ran_any(name) and args.outcome in ("deadline", "error", "no-device"):
        status = "skipped-for-deadline" if args.outcome == "deadline" else "not-reached"
        stages.append({"name": name, "status": status, "seconds": 0,
                       "note": facts.get("stop_reason", "")})
        status_of[name] = status

# gtest binaries: every test must have run and passed; SKIPPED is a failure here.
tests = []
for name in ("test_gpu_runtime", "test_gpu_kernels", "test_gpu_timing", "test_gpu_strategy",
             "test_gpu_ranks"):
    if name not in status_of:
        continue
    entry = {"binary": name, "stage": status_of[name]}
    data = load(f"{work}/tests/{name}.json")
    log = ""
    try:
        log = open(f"{work}/logs/{name}.log", errors="replace").read()
    except OSError:
        pass
    if data:
        cases = [t for suite in data.get("testsuites", []) for t in suite.get("testsuite", [])]
        failed = [f"{t.get('classname')}.{t.get('name')}" for t in cases if t.get("failures")]
        skipped = [f"{t.get('classname')}.{t.get('name')}" for t in cases
                   if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN"]
        entry.update(tests=len(cases), failed=failed, skipped=skipped)
    else:
        skipped = re.findall(r"^\[  SKIPPED \] (\S+)", log, re.M)
        failed = re.findall(r"^\[  FAILED  \] (\S+)", log, re.M)
        entry.update(tests=None, failed=sorted(set(failed)), skipped=sorted(set(skipped)))
    if entry["stage"] in ("dry-run", "skipped-for-deadline", "not-reached"):
        entry["passed"] = None
    else:
        entry["passed"] = (entry["stage"] == "ok" and not entry["failed"] and not entry["skipped"]
                           and bool(entry["tests"] or data is None and "[  PASSED  ]" in log))
    tests.append(entry)
judged = [t for t in tests if t["passed"] is not None]
gpu_tests_passed = all(t["passed"] for t in judged) if judged else None

runs = []
for model in ("lenet5", "fc3"):
    for batch in (64, 256, 1024):
        name = f"cnnbench-{model}-b{batch}"
        ours = load(f"{work}/runs/{name}.json")
        torch = load(f"{work}/runs/torch-{model}-b{batch}.json")
        ours_ips = find(ours, "images_per_s") if ours else None
        torch_ips = torch.get("images_per_s") if torch else None
        run = {"model": model, "batch": batch, "stage": status_of.get(name, "not-run"),
               "cnnbench_images_per_s": ours_ips, "torch_images_per_s": torch_ips,
               "ratio": ours_ips / torch_ips if ours_ips and torch_ips else None}
        if ours:
            run["gpu_metrics"] = find(ours, "strategy_metrics")
        stream = load(f"{work}/runs/{name}-stream.json")
        if stream:
            run["cnnbench_stream_images_per_s"] = find(stream, "images_per_s")
        runs.append(run)

two_ranks = []
for model in ("lenet5", "fc3"):
    for batch in (256, 1024):
        name = f"cnnbench-{model}-b{batch}-2ranks"
        ours = load(f"{work}/runs/{name}.json")
        if name not in status_of:
            continue
        metrics = (find(ours, "strategy_metrics") or {}) if ours else {}
        single = next((r["cnnbench_images_per_s"] for r in runs
                       if r["model"] == model and r["batch"] == batch), None)
        ips = find(ours, "images_per_s") if ours else None
        two_ranks.append({"model": model, "batch": batch, "stage": status_of[name],
                          "ranks": metrics.get("ranks"), "cnnbench_images_per_s": ips,
                          "vs_one_rank": ips / single if ips and single else None,
                          "allreduce": metrics.get("allreduce"),
                          "devices": [{k: r.get(k) for k in ("rank", "host", "device",
                                                             "device_name", "samples_per_step")}
                                      for r in metrics.get("per_rank", [])]})

lenet = next(r for r in runs if r["model"] == "lenet5" and r["batch"] == 1024)
torch_any = next((load(p) for p in sorted(glob.glob(f"{work}/runs/torch-*.json"))), None)
ours_any = next((load(p) for p in sorted(glob.glob(f"{work}/runs/cnnbench-*.json"))), None)


def git(*a):
    return subprocess.run(["git", "-C", args.source, *a], capture_output=True, text=True).stdout.strip()


skipped_for_deadline = [s["name"] for s in stages if s["status"] == "skipped-for-deadline"]
timed_out = [s["name"] for s in stages if s["status"] == "timed-out"]
failed_stages = [s["name"] for s in stages if s["status"] == "failed"]
exit_status = int(facts.get("exit_status", "1") or 1)
if args.outcome:
    outcome = args.outcome
elif "signal" in facts:
    outcome = "interrupted"
elif skipped_for_deadline or (timed_out and facts.get("deadline_reached")):
    outcome = "deadline"
elif failed_stages or timed_out or gpu_tests_passed is False:
    outcome = "failed"
elif exit_status != 0:
    outcome = "error"
else:
    outcome = "dry-run-passed" if args.dry_run == "1" else "passed"

report = {
    "kind": "gpu-check",
    "schema": 1,
    "outcome": outcome,
    "stop_reason": facts.get("stop_reason"),
    "dry_run": args.dry_run == "1",
    "complete": not skipped_for_deadline and not args.outcome
    and not any(s["status"] == "timed-out" for s in stages),
    "deadline_s": args.deadline,
    "script_seconds": int(facts.get("seconds", "0") or 0),
    "device": facts.get("device", ""),
    "cuda_devices": int(facts["cuda_devices"]) if facts.get("cuda_devices", "").isdigit() else None,
    "host": platform.node(),
    "git_sha": git("rev-parse", "HEAD"),
    "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    "toolchain": {k: facts.get(k) for k in ("nvcc", "cmake", "cxx")},
    "deps": {
        "packages": facts.get("deps_packages", "").split(),
        "deb_bytes": int(facts.get("deps_bytes", "0") or 0),
        "isolated": facts.get("isolate") == "1",
        "found": facts.get("deps_found", "").split(),
        "found_outside_prefix": facts.get("deps_outside_prefix", "").split(),
    },
    "mpi": {k: facts.get(k) for k in ("mpi", "mpi_version")},
    "stages": stages,
    "skipped_for_deadline": skipped_for_deadline,
    "gpu_tests_passed": gpu_tests_passed,
    "tests": tests,
    "versions": {
        "cnnbench_context": find(ours_any, "context") if ours_any else None,
        "torch": torch_any.get("torch") if torch_any else None,
        "torch_cuda": torch_any.get("torch_cuda") if torch_any else None,
        "cudnn": torch_any.get("cudnn") if torch_any else None,
    },
    "runs": runs,
    "two_ranks_one_gpu": two_ranks,
    # The time breakdown and trace checks (scripts/gpu_trace_check.py): their stage and what the
    # run's breakdown said.
    "trace_checks": [{"name": s["name"], "stage": s["status"],
                      "time_breakdown": find(load(f"{work}/runs/{s['name']}.json"),
                                             "time_breakdown")}
                     for s in stages if s["name"].startswith("gpu-trace-")],
    "goal": {
        "lenet5_b1024_images_per_s": lenet["cnnbench_images_per_s"],
        "at_least_1M_images_per_s": (lenet["cnnbench_images_per_s"] or 0) >= 1e6
        if lenet["cnnbench_images_per_s"] else None,
        "at_least_2x_torch": (lenet["ratio"] or 0) >= 2.0 if lenet["ratio"] else None,
    },
    "failures": [f"{s['name']}: {s['status']} {s['note']}".strip() for s in stages
                 if s["status"] in ("failed", "timed-out")]
                + [f"{t['binary']}: {len(t['failed'])} failed, {len(t['skipped'])} skipped"
                   for t in tests if t["passed"] is False],
    "logs": "gpu-check-logs.tar.gz",
}
os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
with open(args.out, "w") as f:
    json.dump(report, f, indent=2)
print(f"gpu-check report: outcome {outcome}, {len(stages)} stages, tests passed {gpu_tests_passed}")
for s in stages:
    print(f"  {s['name']:32s} {s['status']:22s} {s['seconds']:4d}s {s['note'][:100]}")
for r in runs:
    if r["cnnbench_images_per_s"]:
        print(f"  {r['model']:7s} b{r['batch']:<5d} cnnbench {r['cnnbench_images_per_s']:12.0f} img/s"
              f"   torch {r['torch_images_per_s'] or 0:12.0f} img/s   ratio {r['ratio'] or 0:.2f}")
