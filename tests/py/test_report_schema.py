#!/usr/bin/env python3
"""Reports written by `cnnbench train` validate against results/schema/run-report.schema.json,
and the schema really constrains them (a report with a missing metric or a wrong type fails);
every strategy's report carries a time breakdown whose categories add up to its measured
train_seconds and whose layers and compute parts add up to its compute_s."""
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import parse_arguments, schema_validator

def main():
    args = parse_arguments()
    validator = schema_validator(args.source, "run-report")
    failures = 0
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("CNNBENCH_HOST", "CNNBENCH_LINK_RATE")}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "fc3-serial": ["--model", "fc3", "--synthetic", "256", "--steps", "3", "--eval"],
            "lenet5-blas": ["--model", "lenet5", "--synthetic", "128", "--steps", "2",
                            "--strategy", "blas", "--threads", "2"],
            "lenet5-stream": ["--model", "lenet5", "--synthetic", "256", "--steps", "3",
                              "--strategy", "stream", "--threads", "2"],
            "fc3-cluster": ["--model", "fc3", "--synthetic", "256", "--steps", "3",
                            "--strategy", "cluster", "--threads", "2"],
            "fc3-serial-shards": ["--model", "fc3", "--synthetic", "256", "--steps", "3",
                                  "--shards", "2"],
        }
        for name, flags in runs.items():
            out = Path(tmp, name + ".json")
            subprocess.run([args.cli, "train", *flags, "--quiet", "--report", str(out)], check=True,
                           env=environment)
            report = json.loads(out.read_text())
            errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
            for e in errors:
                print(f"FAIL {name}: {'/'.join(map(str, e.path))}: {e.message}")
            failures += bool(errors)
            if not errors:
                print(f"ok   {name} validates")

            broken = copy.deepcopy(report)
            del broken["metrics"]["images_per_s"]
            broken["config"]["batch"] = "64"
            if validator.is_valid(broken):
                print(f"FAIL {name}: the schema accepted a report without images_per_s")
                failures += 1

            # A cluster run names its ranks' hosts and their transport; one host here, uncapped.
            if name.endswith("-cluster"):
                network = report["strategy_metrics"].get("network", {})
                if network.get("transport") != "shm" or len(network.get("rank_hosts", [])) != 1 \
                        or network.get("link_rate") is not None:
                    print(f"FAIL {name}: strategy_metrics.network is {network}")
                    failures += 1
                broken = copy.deepcopy(report)
                broken["strategy_metrics"]["network"]["transport"] = "carrier pigeon"
                if validator.is_valid(broken):
                    print(f"FAIL {name}: the schema accepted an unknown transport")
                    failures += 1

            # A sharded order lists its blocks, and the schema constrains them.
            if "--shards" in flags:
                blocks = report["config"]["data"].get("blocks", [])
                if [(b["first"], b["count"]) for b in blocks] != [(0, 128), (128, 128)]:
                    print(f"FAIL {name}: config.data.blocks is {blocks}")
                    failures += 1
                broken = copy.deepcopy(report)
                broken["config"]["data"]["blocks"][0]["count"] = 0
                if validator.is_valid(broken):
                    print(f"FAIL {name}: the schema accepted an empty block")
                    failures += 1

            # Every run reports where its steps' time went; the categories add up to wall_s.
            breakdown = report["metrics"].get("time_breakdown")
            if breakdown is None or "straggler" not in report["metrics"]:
                print(f"FAIL {name}: no metrics.time_breakdown or metrics.straggler")
                failures += 1
                continue
            categories = ["compute_s", "update_s", "reduce_s", "communication_exposed_s",
                          "imbalance_wait_s", "pipeline_bubble_s", "data_s", "other_s"]
            total = sum(breakdown[c] for c in categories)
            train_seconds = report["metrics"]["train_seconds"]
            if abs(total - train_seconds) > 0.05 * train_seconds:
                print(f"FAIL {name}: the categories add up to {total}, "
                      f"train_seconds is {train_seconds}")
                failures += 1
            parts = sum(breakdown["per_layer"].values()) + sum(breakdown["compute_parts"].values())
            if abs(parts - breakdown["compute_s"]) > 0.01 * breakdown["compute_s"]:
                print(f"FAIL {name}: per_layer and compute_parts add up to {parts}, "
                      f"compute_s is {breakdown['compute_s']}")
                failures += 1
            broken = copy.deepcopy(report)
            del broken["metrics"]["time_breakdown"]["workers"][0]["compute_s"]
            if validator.is_valid(broken):
                print(f"FAIL {name}: the schema accepted a worker without compute_s")
                failures += 1
    print(f"{len(runs) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
