#!/usr/bin/env python3
"""The PyTorch peers of `cnnbench sweep` (pytorch, pytorch-ddp):
- parity: after 20 steps on the same data a peer point's final loss equals the serial point's
  within 1e-4, for FC-3 and LeNet-5 (--ddp: pytorch-ddp on 2 ranks, which binds loopback ports),
  and its time-to-accuracy curve finds serial's accuracies at serial's steps;
- a Python that cannot import torch skips both peers with the reason, the rest of the sweep as
  without them;
- compare prints peer points, marked, and leaves them out of its exit code.
Skips (exit 77) when PyTorch is not installed (Debian: python3-torch), unless
CNNBENCH_REQUIRE_TORCH=1."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TOLERANCE = 1e-4
STEPS = 20
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"


def torch_importable():
    return subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode == 0


def sweep(cli, out, strategies, *extra):
    """A short sweep of both models; returns its report and stderr."""
    command = [cli, "sweep", "--model", "fc3,lenet5", "--strategies", strategies, "--cores", "1",
               "--steps", str(STEPS), "--repeat", "1", "--warmup", "0", "--synthetic", "640",
               "--batch", "32", "--out", str(out), "--force", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr)
        raise SystemExit(f"FAIL: {' '.join(command)} exited with {done.returncode}")
    return json.loads(out.read_text()), done.stderr


def points(report):
    return {p["id"]: p for p in report["points"]}


def schema_errors(source, report):
    """The report's errors against results/schema/sweep-report.schema.json (none without jsonschema)."""
    try:
        import jsonschema
    except ImportError:
        print("note: python3-jsonschema is not installed: the report is not validated")
        return []
    schema = json.loads(Path(source, "results/schema/sweep-report.schema.json").read_text())
    return list(jsonschema.Draft202012Validator(schema).iter_errors(report))


def check_parity(cli, source, tmp, peer, extra):
    """Each peer point's final loss against the serial point's of the same model; the report with
    its peer points validates, and every point has a ratio to PyTorch on one thread."""
    # Time to accuracy with a target out of reach: every evaluation of the curve is compared.
    tta = ["--target-accuracy", "0.999", "--eval-every", "10", "--tta-max-steps", str(STEPS)]
    report, _ = sweep(cli, Path(tmp, f"{peer}.json"), f"serial,{peer}", *extra, *tta)
    failures = 0
    for e in schema_errors(source, report):
        print(f"FAIL schema: {'/'.join(map(str, e.path))}: {e.message}")
        failures += 1
    has_ratio = [p["id"] for p in report["points"] if "vs_pytorch_1thread" in p]
    if len(has_ratio) != len(report["points"]):
        print(f"FAIL: vs_pytorch_1thread only on {has_ratio}")
        failures += 1
    by_id = points(report)
    for model in ("fc3", "lenet5"):
        serial = by_id[f"{model}/serial/n1c1"]
        peers = [p for p in report["points"] if p["model"] == model and p["strategy"] == peer]
        if not peers:
            print(f"FAIL {model}: no {peer} point in the report")
            failures += 1
        for p in peers:
            if p["status"] != "ok":
                print(f"FAIL {p['id']}: {p['status']}: {p.get('reason')}")
                failures += 1
                continue
            difference = abs(p["final_loss"] - serial["final_loss"])
            ok = difference <= TOLERANCE and p["steps"] == serial["steps"] == STEPS
            print(f"{'ok  ' if ok else 'FAIL'} {p['id']}: final loss {p['final_loss']:.7f}, serial "
                  f"{serial['final_loss']:.7f} after {p['steps']} steps (|diff| {difference:.2g})")
            failures += not ok
            failures += check_accuracy_curve(p, serial)
            info = p.get("peer_info", {})
            missing = [k for k in ("torch_version", "blas", "onednn", "isa_cap", "threads",
                                   "backend", "command") if k not in info]
            if p.get("peer") is not True or missing:
                print(f"FAIL {p['id']}: peer {p.get('peer')}, peer_info lacks {missing}")
                failures += 1
    return failures, report


def check_accuracy_curve(peer, serial):
    """The peer's time-to-accuracy curve evaluates at serial's steps and finds serial's accuracies
    (the same function on the same test set; one sample may flip on a near tie)."""
    theirs, ours = peer["time_to_accuracy"], serial["time_to_accuracy"]
    steps = [c["step"] for c in theirs["curve"]]
    samples = theirs.get("test_samples", 1)
    worst = max((abs(a["accuracy"] - b["accuracy"]) for a, b in zip(theirs["curve"], ours["curve"])),
                default=1.0)
    ok = steps == [c["step"] for c in ours["curve"]] and steps and worst <= 1.0 / samples
    print(f"{'ok  ' if ok else 'FAIL'} {peer['id']}: time to accuracy evaluated at steps {steps}, "
          f"accuracies within {worst:.3g} of serial's (test set of {samples})")
    return 0 if ok else 1


def check_pytorch_ratio(report):
    """vs_pytorch_1thread is the point's images/s over pytorch/n1c1's, computed here anew."""
    by_id, failures = points(report), 0
    for p in report["points"]:
        torch = by_id[f"{p['model']}/pytorch/n1c1"]
        expected = p["images_per_s"]["median"] / torch["images_per_s"]["median"]
        if abs(p["vs_pytorch_1thread"] - expected) > 1e-9 * expected:
            print(f"FAIL {p['id']}: vs_pytorch_1thread {p['vs_pytorch_1thread']}, expected {expected}")
            failures += 1
    print(f"{'ok  ' if not failures else 'FAIL'} vs_pytorch_1thread of every point")
    return failures


def check_skipped_without_torch(cli, tmp):
    """A --python that cannot import torch: both peers skipped with the reason, the rest as without
    them."""
    fake = Path(tmp, "python-without-torch")
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    with_peers, _ = sweep(cli, Path(tmp, "no-torch.json"), "serial,blas,pytorch,pytorch-ddp",
                          "--python", str(fake))
    without, _ = sweep(cli, Path(tmp, "plain.json"), "serial,blas")
    failures = 0
    peers = [p for p in with_peers["points"] if p["strategy"] in ("pytorch", "pytorch-ddp")]
    if {(p["model"], p["strategy"]) for p in peers} != {(m, s) for m in ("fc3", "lenet5")
                                                        for s in ("pytorch", "pytorch-ddp")}:
        print(f"FAIL: expected both peers of both models, got {[p['id'] for p in peers]}")
        failures += 1
    for p in peers:
        ok = p["status"] == "skipped" and "torch" in p["reason"] and "apt-get install python3-torch" in p["reason"]
        print(f"{'ok  ' if ok else 'FAIL'} {p['id']} {p['status']}: {p.get('reason')}")
        failures += not ok
    own = [(p["id"], p["status"], p["steps"], p["final_loss"]) for p in with_peers["points"]
           if p["strategy"] not in ("pytorch", "pytorch-ddp")]
    plain = [(p["id"], p["status"], p["steps"], p["final_loss"]) for p in without["points"]]
    if own != plain or not with_peers["complete"]:
        print(f"FAIL: the own points differ from a sweep without peers:\n  {own}\n  {plain}")
        failures += 1
    else:
        print(f"ok   the {len(own)} own points are those of a sweep without peers; complete")
    return failures


def compare(cli, base, new):
    done = subprocess.run([cli, "compare", str(base), str(new)], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def slowed(report, strategy, factor):
    """The report with the times of `strategy`'s points multiplied by factor."""
    changed = json.loads(json.dumps(report))
    for p in changed["points"]:
        if p["strategy"] == strategy and p["status"] == "ok":
            p["times_s"] = [t * factor for t in p["times_s"]]
            for key in ("median", "min", "max", "mean"):
                p["time"][key] *= factor
    return changed


def check_compare(cli, tmp, report):
    """compare over a report and a copy whose peer points take 3x as long: exit 0, the peers
    printed as peers; the same with serial slowed: exit 1 (the gate works at all)."""
    base = Path(tmp, "base.json")
    base.write_text(json.dumps(report))
    failures = 0
    for strategy, expected in (("pytorch", 0), ("serial", 1)):
        new = Path(tmp, f"slow-{strategy}.json")
        new.write_text(json.dumps(slowed(report, strategy, 3.0)))
        code, text = compare(cli, base, new)
        peer_lines = [line for line in text.splitlines() if "/pytorch/" in line]
        marked = bool(peer_lines) and all("peer" in line for line in peer_lines)
        ok = code == expected and marked
        print(f"{'ok  ' if ok else 'FAIL'} compare with {strategy} 3x slower: exit {code} "
              f"(expected {expected}), peer lines marked: {marked}")
        if not ok:
            print(text)
        failures += not ok
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--ddp", action="store_true", help="pytorch-ddp on 2 ranks (binds ports)")
    args = parser.parse_args()
    if not torch_importable():
        if os.environ.get("CNNBENCH_REQUIRE_TORCH") == "1":
            print(f"FAIL: {PYTHON} cannot import torch (install python3-torch, or CNNBENCH_NO_TORCH=1)")
            return 1
        print(f"SKIP: {PYTHON} cannot import torch")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        if args.ddp:
            failures, _ = check_parity(args.cli, args.source, tmp, "pytorch-ddp", ["--nodes", "2"])
        else:
            failures, report = check_parity(args.cli, args.source, tmp, "pytorch", [])
            failures += check_pytorch_ratio(report)
            failures += check_skipped_without_torch(args.cli, tmp)
            failures += check_compare(args.cli, tmp, report)
    print("all passed" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
