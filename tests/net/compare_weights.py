#!/usr/bin/env python3
"""Compares two cnnbench checkpoints tensor by tensor: max |a - b| / max |b| must stay within
--tolerance (0: the same bits). Prints each tensor's figure; exits 1 on the first failure."""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "py"))
from safetensors_f32 import read_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("got")
    parser.add_argument("expected")
    parser.add_argument("--tolerance", type=float, required=True)
    args = parser.parse_args()
    got, _ = read_safetensors(args.got)
    expected, _ = read_safetensors(args.expected)
    if sorted(got) != sorted(expected):
        print(f"FAIL {args.got}: tensors {sorted(got)}, expected {sorted(expected)}")
        return 1
    failed = False
    for name in sorted(expected):
        a, b = got[name], expected[name]
        if a.shape != b.shape:
            print(f"FAIL {name}: shape {a.shape}, expected {b.shape}")
            failed = True
            continue
        if args.tolerance == 0:
            same = a.tobytes() == b.tobytes()
            if not same:
                first = int(np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))[0])
                print(f"FAIL {name}: bits differ first at {first}: {a.flat[first]!r} vs {b.flat[first]!r}")
                failed = True
            continue
        scale = max(float(np.max(np.abs(b.astype(np.float64)))), 1e-30)
        relative = float(np.max(np.abs(a.astype(np.float64) - b))) / scale
        if relative > args.tolerance:
            print(f"FAIL {name}: max relative difference {relative:.3g} > {args.tolerance:g}")
            failed = True
    if not failed:
        kind = "bit-identical" if args.tolerance == 0 else f"within {args.tolerance:g}"
        print(f"ok   {Path(args.got).name} vs {Path(args.expected).name}: {kind}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
