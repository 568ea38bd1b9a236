#!/usr/bin/env python3
"""A small `cnnbench tune` writes a report that validates against
results/schema/tune-report.schema.json, and the schema really constrains it; the report holds what
the table printed: every strategy's default measured, a winner per strategy taken from the
measurements, the planner's error over them, and a command that runs each candidate again. No
timing is asserted: the machine may be busy."""
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import check, exit_code, parse_arguments, schema_validator

def main():
    args = parse_arguments()
    validator = schema_validator(args.source, "tune-report")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "tune.json")
        run = subprocess.run([args.cli, "tune", "--model", "fc3", "--cores", "1", "--strategies",
                              "stream,cluster,blas", "--budget", "1", "--repeat", "3", "--warmup", "0",
                              "--min-time", "0.02", "--synthetic", "256", "--quiet", "--out", str(out)],
                             capture_output=True, text=True, timeout=600)
        check(run.returncode == 0, f"tune exits 0 ({run.returncode}: {run.stderr[-500:]})")
        if run.returncode != 0:
            return exit_code()
        report = json.loads(out.read_text())
        errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
        for e in errors:
            print(f"    {'/'.join(map(str, e.path))}: {e.message}")
        check(not errors, "the tune report validates")

        measured = report["measured"]
        for strategy in ("stream", "cluster", "blas"):
            mine = [m for m in measured if m["strategy"] == strategy]
            check(any(m["default"] for m in mine), f"{strategy}: its default is measured")
            winner = report["winners"][strategy]
            ok = [m for m in mine if m["status"] == "ok"]
            default = next((m for m in ok if m["default"]), None)
            if ok and winner is not None and default is not None:
                # The default, unless some candidate's every paired ratio beat its median; then
                # the highest median of those.
                clear = [m for m in ok if not m["default"] and m["speedup_range"][0] > default["speedup"]]
                expected = max(clear, key=lambda m: m["speedup"]) if clear else default
                check(winner["id"] == expected["id"],
                      f"{strategy}: the winner is the default or the best that beat it in every repetition")
        check(report["planner_error"]["points"] == sum(m["status"] == "ok" for m in measured),
              "the planner's error covers every measured candidate")
        check(all(m["command"][:2] == ["cnnbench", "train"] for m in measured),
              "every measured candidate has its train command")
        check(len(report["candidates"]) >= len(measured), "every candidate is in the report")
        check(all(m["id"] in run.stdout for m in measured), "the table names every measured point")
        check("winner stream" in run.stdout and "planner error" in run.stdout,
              "the table ends with the winners and the planner's error")
        # The profile alone takes longer than --budget 1: the first round runs (every candidate
        # has a repetition) and no other starts.
        budget = report["budget"]
        check(budget["rounds"] == 3 and budget["rounds_done"] == 1 and budget["cut"],
              f"the budget ends the rounds after the first ({budget})")
        check("1 of 3 rounds: the budget ended the rounds" in run.stdout,
              "the table says the budget ended the rounds")
        check(report["profile"]["cross_core_s"] == 0, "one core costs no other core anything")
        if (os.cpu_count() or 1) >= 2:
            # On two cores the profile also runs the cluster's default on both (cross_core_s).
            two = Path(tmp, "tune2.json")
            run2 = subprocess.run([args.cli, "tune", "--model", "fc3", "--cores", "2", "--strategies",
                                   "cluster", "--budget", "1", "--repeat", "1", "--warmup", "0",
                                   "--min-time", "0.02", "--synthetic", "256", "--quiet", "--out",
                                   str(two)], capture_output=True, text=True, timeout=600)
            check(run2.returncode == 0, f"a 2-core tune exits 0 ({run2.returncode}: {run2.stderr[-500:]})")
            if run2.returncode == 0:
                report2 = json.loads(two.read_text())
                check(validator.is_valid(report2), "the 2-core tune report validates")
                cross = report2["profile"]["cross_core_s"]
                pairs = [c for c in report2["candidates"] if c["cores"] == 2]
                # replicas, slices and (FC-3's first layer is dense) factors, static and dynamic
                check(cross >= 0 and len(pairs) == 6,
                      f"the 2-core profile has its cross-core cost ({cross}) and 6 two-thread candidates")

        for name, breaking in [
            ("measured as text", lambda r: r.update(measured="none")),
            ("a candidate without its prediction", lambda r: r["candidates"][0].pop("predicted_step_s")),
            ("an unknown strategy", lambda r: r["candidates"][0].update(strategy="quantum")),
            ("a speedup as text", lambda r: r["measured"][0].update(speedup="fast")),
            ("no nodes", lambda r: r["config"].update(nodes=0)),
            ("a budget without its rounds", lambda r: r["budget"].pop("rounds_done")),
        ]:
            broken = copy.deepcopy(report)
            breaking(broken)
            check(not validator.is_valid(broken), f"the schema refuses a report with {name}")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
