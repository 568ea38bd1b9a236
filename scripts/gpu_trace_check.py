#!/usr/bin/env python3
"""Checks a GPU run's report and trace (`cnnbench train --strategy gpu --report R --trace T`):
metrics.time_breakdown's categories add up to its wall_s, which is within 5% of
metrics.train_seconds (the host's measure); every timed layer, the gather (data) and the update got
time; a multi-rank run's breakdown has communication_exposed_s; the trace has, for every rank, a
host track (thread 0) and a device track (thread 1) whose spans name every layer, data and update.
Prints what it found; exits 1 naming each failed check.

usage: scripts/gpu_trace_check.py REPORT TRACE [--ranks N]
"""
import argparse
import json
import sys

CATEGORIES = ("compute_s", "update_s", "reduce_s", "communication_exposed_s", "imbalance_wait_s",
              "data_s", "other_s", "pipeline_bubble_s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("trace")
    parser.add_argument("--ranks", type=int, default=1)
    args = parser.parse_args()
    report = json.load(open(args.report))
    trace = json.load(open(args.trace))
    failures = []

    metrics = report["metrics"]
    breakdown = metrics["time_breakdown"]
    train_seconds = metrics["train_seconds"]
    wall = breakdown["wall_s"]
    total = sum(breakdown[c] for c in CATEGORIES)
    print(f"train_seconds {train_seconds:.6f}, breakdown wall_s {wall:.6f}, categories {total:.6f}")
    print("  " + ", ".join(f"{c} {breakdown[c]:.6f}" for c in CATEGORIES))
    print("  per_layer " + json.dumps(breakdown["per_layer"]))
    if abs(total - wall) > 1e-6 * max(wall, 1e-9):
        failures.append(f"the categories add up to {total} s, not wall_s {wall} s")
    if abs(wall - train_seconds) > 0.05 * train_seconds:
        failures.append(f"wall_s {wall} s is not within 5% of train_seconds {train_seconds} s")
    for layer, seconds in breakdown["per_layer"].items():
        if seconds <= 0:
            failures.append(f"layer {layer} got no time")
    for category in ("data_s", "update_s", "compute_s"):
        if breakdown[category] <= 0:
            failures.append(f"{category} is {breakdown[category]}")
    if args.ranks > 1 and breakdown["communication_exposed_s"] + breakdown["imbalance_wait_s"] <= 0:
        failures.append("a multi-rank run without communication_exposed_s or imbalance_wait_s")
    workers = [w for w in breakdown["workers"] if w["kind"] == "device"]
    if len(workers) != args.ranks:
        failures.append(f"{len(workers)} device workers for {args.ranks} ranks")

    expected = set(breakdown["per_layer"]) | {"data", "update"}
    for rank in range(args.ranks):
        spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank]
        host = [e for e in spans if e["tid"] == 0]
        device = {e["name"] for e in spans if e["tid"] == 1}
        print(f"rank {rank}: {len(host)} host spans, device span names {sorted(device)}")
        if not host:
            failures.append(f"rank {rank} has no host track")
        if not expected <= device:
            failures.append(f"rank {rank}'s device track lacks {sorted(expected - device)}")

    for failure in failures:
        print(f"gpu_trace_check: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
