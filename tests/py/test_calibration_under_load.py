#!/usr/bin/env python3
"""`--isa best`'s choice holds under load: one calibration on the machine as it is (the quiet
reference), then 10 with a busy loop pinned to each core in turn, each in a fresh cache. Every
family of a loaded calibration must choose the reference's target, or one the reference measured
no more than 2% slower than it (their median ratios to the default), and never the scalar kernels
on a CPU with SIMD. A calibration that finds the machine too busy to decide (exit 1, choice "busy") caches
nothing and is allowed, but not all ten: that would test nothing. Runs alone (RUN_SERIAL): the
reference must not share the machine with another test."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import FAILURES, check, parse_arguments  # noqa: E402

ROUNDS = 10
TIE = 0.02


def calibrate(cli, cache_home):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    env.pop("CNNBENCH_ISA", None)
    result = subprocess.run([cli, "calibrate", "--json"], env=env, capture_output=True, text=True,
                            timeout=120)
    if result.returncode not in (0, 1):
        raise SystemExit(f"FAIL calibrate exited {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def ratio(calibration, family, target):
    """The reference's median time of `target` over the default's (1 for the default itself)."""
    entry = calibration["families"][family]
    if target == entry["default"]:
        return 1.0
    margin = entry["margins"].get(target)
    return margin["median_ratio"] if margin else None


def busy_loop(cpu):
    """A process spinning on `cpu` (an OS CPU number) until killed."""
    return subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])


def main():
    args = parse_arguments()
    cpus = sorted(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="cnnbench-calibration-"))
    reference = None
    for attempt in range(3):
        reference = calibrate(args.cli, work / f"reference-{attempt}")
        if reference["choice"] == "measured":
            break
    if reference["choice"] != "measured":
        print("skip: the machine was too busy for a reference calibration in 3 tries")
        return 77
    has_simd = any(f["default"] != "scalar" for f in reference["families"].values())
    print("reference: " + ", ".join(f"{k}={v['chosen']}" for k, v in reference["families"].items()))
    decided = 0
    for i in range(ROUNDS):
        cpu = cpus[i % len(cpus)]
        spinner = busy_loop(cpu)
        try:
            loaded = calibrate(args.cli, work / f"loaded-{i}")
        finally:
            spinner.kill()
            spinner.wait()
        choices = ", ".join(f"{k}={v['chosen']}" for k, v in loaded["families"].items())
        print(f"busy loop on CPU {cpu}: {loaded['choice']}: {choices}")
        if loaded["choice"] == "busy":
            check(loaded["cache"] is None, f"round {i}: a busy calibration caches nothing")
            continue
        decided += 1
        for family, entry in loaded["families"].items():
            chosen, quiet = entry["chosen"], reference["families"][family]["chosen"]
            if has_simd:
                check(chosen != "scalar", f"round {i}: {family} not on scalar")
            if chosen == quiet:
                continue
            a, b = ratio(reference, family, chosen), ratio(reference, family, quiet)
            close = a is not None and b is not None and a <= b * (1 + TIE)
            check(close, f"round {i}: {family} chose {chosen}, the reference {quiet}: "
                         f"the reference measured them {a} and {b} of the default (at most {TIE:.0%} slower?)")
    check(decided > 0, f"{decided} of {ROUNDS} loaded calibrations decided")
    print(f"{decided} of {ROUNDS} calibrations under load decided; {len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
