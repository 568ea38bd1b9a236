#!/usr/bin/env python3
"""How the shell tests hold one cnnbench run against another (tests/equivalence.hpp is the same
check for the C++ tests; docs/design.md, "Equivalence after many steps").

  compare_runs.py equivalent --reports GOT WANT --start CHECKPOINT --steps GOT WANT
      Runs that sum in other orders (another strategy, shape or kernel target): (a) the loss
      curves of the two run reports agree step by step within --loss-tolerance (relative), then
      (b) the checkpoints that both saved after one more step from the same checkpoint START
      (--resume) agree per tensor, weights and momentum, within --step-tolerance
      (max|a-b| / max|b|). The weights after many steps are not compared: a rounding drift that
      moves a ReLU or max-pool decision changes one step's gradient by ~1e-3, and momentum
      carries it; from the same weights the two steps differ only by rounding.
  compare_runs.py same-bits GOT WANT
      Runs whose order is the same by design (a rerun, the same shape over another link): every
      tensor has the same bits.

Prints the worst step and tensor; exits 1 on a failure."""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from safetensors_f32 import read_safetensors  # noqa: E402

# The same figures as tests/equivalence.hpp, where the measurements behind them are.
LOSS_TOLERANCE = 1e-4
STEP_TOLERANCE = 5e-6


def load(path):
    tensors, _ = read_safetensors(path)
    return tensors


def loss_curves(got_path, want_path, tolerance):
    """Returns a failure message or None; prints the worst step."""
    got = np.array(json.load(open(got_path))["loss_curve"], dtype=np.float64)
    want = np.array(json.load(open(want_path))["loss_curve"], dtype=np.float64)
    if got.shape != want.shape or len(want) == 0:
        return f"loss curves of {len(got)} and {len(want)} steps"
    relative = np.abs(got - want) / np.maximum(np.abs(want), 1e-30)
    relative[np.isnan(relative)] = np.inf
    step = int(np.argmax(relative))
    print(f"     loss curve of {len(want)} steps within {relative[step]:.2e} (step {step}: "
          f"{got[step]!r} vs {want[step]!r})")
    if relative[step] > tolerance:
        return f"the loss of step {step} differs by {relative[step]:.2e} > {tolerance:g}"
    return None


def tensors_close(got, want, tolerance):
    """Returns a failure message or None; prints the worst weight and momentum tensors."""
    if sorted(got) != sorted(want) or not want:
        return f"tensors {sorted(got)}, expected {sorted(want)}"
    worst = {}
    failures = []
    for name in sorted(want):
        a, b = got[name].astype(np.float64), want[name].astype(np.float64)
        if a.shape != b.shape:
            failures.append(f"{name}: shape {a.shape}, expected {b.shape}")
            continue
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        relative = float(np.max(np.abs(a - b))) / (scale if scale > 0 else 1.0) if b.size else 0.0
        if np.isnan(relative):
            relative = np.inf
        kind = "momentum" if name.startswith("momentum.") else "weights"
        if relative >= worst.get(kind, (-1.0, ""))[0]:
            worst[kind] = (relative, name)
        if relative > tolerance:
            failures.append(f"{name}: max|a-b|/max|b| = {relative:.2e} > {tolerance:g}")
    print("     one step from the same checkpoint: " +
          ", ".join(f"{kind} within {figure:.2e} ({name})" for kind, (figure, name) in sorted(worst.items())))
    return "; ".join(failures) or None


def same_bits(got, want):
    if sorted(got) != sorted(want):
        return f"tensors {sorted(got)}, expected {sorted(want)}"
    for name in sorted(want):
        a, b = got[name], want[name]
        if a.shape != b.shape:
            return f"{name}: shape {a.shape}, expected {b.shape}"
        if a.tobytes() != b.tobytes():
            first = int(np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))[0])
            return f"{name}: bits differ first at {first}: {a.flat[first]!r} vs {b.flat[first]!r}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    equivalent = modes.add_parser("equivalent")
    equivalent.add_argument("--reports", nargs=2, metavar=("GOT", "WANT"), required=True)
    equivalent.add_argument("--start", required=True, help="the checkpoint both steps start from")
    equivalent.add_argument("--steps", nargs=2, metavar=("GOT", "WANT"), required=True)
    equivalent.add_argument("--loss-tolerance", type=float, default=LOSS_TOLERANCE)
    equivalent.add_argument("--step-tolerance", type=float, default=STEP_TOLERANCE)
    bits = modes.add_parser("same-bits")
    bits.add_argument("got")
    bits.add_argument("want")
    args = parser.parse_args()

    if args.mode == "same-bits":
        problem = same_bits(load(args.got), load(args.want))
        label = f"{Path(args.got).name} vs {Path(args.want).name}"
        print(f"FAIL {label}: {problem}" if problem else f"ok   {label}: bit-identical")
        return 1 if problem else 0

    label = f"{Path(args.reports[0]).name} vs {Path(args.reports[1]).name}"
    problems = [loss_curves(*args.reports, args.loss_tolerance)]
    got, want = load(args.steps[0]), load(args.steps[1])
    start = load(args.start)
    if sorted(start) == sorted(got) and all(np.array_equal(start[n], got[n]) for n in got):
        problems.append(f"the step from {Path(args.start).name} changed nothing")
    problems.append(tensors_close(got, want, args.step_tolerance))
    problems = [p for p in problems if p]
    if problems:
        print(f"FAIL {label}: " + "; ".join(problems))
        return 1
    print(f"ok   {label}: the loss curve, then one step from {Path(args.start).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
