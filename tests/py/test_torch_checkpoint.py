#!/usr/bin/env python3
"""PyTorch reads cnnbench checkpoints (load_state_dict(strict=True) on the reference nets) and
cnnbench reads safetensors files written from a PyTorch state_dict (--init).

Usage: test_torch_checkpoint.py --cli PATH/cnnbench --source REPO. Exits 77 (skipped) without torch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

SKIP = 77
# The reference nets live with the PyTorch baselines (bench/torch_nets.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

try:
    import numpy as np
    import torch
    from safetensors_f32 import read_safetensors, write_safetensors
    from torch_nets import build_model
except ImportError as error:  # the test needs Debian's python3-torch
    # scripts/test.sh sets CNNBENCH_REQUIRE_TORCH=1: there a missing torch is a failure, not a skip.
    if os.environ.get("CNNBENCH_REQUIRE_TORCH") == "1":
        print(f"FAIL: the checkpoint round trip cannot run: cannot import torch/numpy ({error}); "
              "install python3-torch, or CNNBENCH_NO_TORCH=1")
        sys.exit(1)
    print(f"skipped: cannot import torch/numpy ({error})")
    sys.exit(SKIP)


def run_cli(cli, *arguments):
    command = [cli, "train", *arguments, "--quiet"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n"
                             f"{result.stdout}{result.stderr}")


def check_torch_loads_our_checkpoint(cli, model, folder):
    path = os.path.join(folder, f"{model}.safetensors")
    run_cli(cli, "--model", model, "--synthetic", "256", "--steps", "2", "--batch", "16",
            "--seed", "3", "--save", path)
    tensors, metadata = read_safetensors(path)
    assert metadata.get("format") == "cnnbench-checkpoint-1", metadata
    assert metadata.get("model") == model, metadata

    net = build_model(model)
    state = {k: torch.from_numpy(v) for k, v in tensors.items() if not k.startswith("momentum.")}
    net.load_state_dict(state, strict=True)  # raises on any missing/extra name or wrong shape
    momentum = {k[len("momentum."):] for k in tensors if k.startswith("momentum.")}
    assert momentum == set(net.state_dict()), f"momentum tensors {sorted(momentum)}"
    # After two SGD steps with momentum the buffers are non-zero.
    assert any(np.abs(tensors["momentum." + k]).max() > 0 for k in momentum)

    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    if load_file is not None:
        reference = load_file(path)
        for name, value in tensors.items():
            assert torch.equal(reference[name], torch.from_numpy(value)), name

    with torch.no_grad():
        logits = net(torch.rand(4, 1, 28, 28))
    assert logits.shape == (4, 10) and torch.isfinite(logits).all()
    print(f"{model}: PyTorch loaded {len(state)} parameter tensors (strict), "
          f"{len(momentum)} momentum tensors present")


def check_we_load_torch_weights(cli, model, folder):
    torch.manual_seed(11)
    net = build_model(model)
    weights = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    source = os.path.join(folder, f"torch-{model}.safetensors")
    write_safetensors(source, weights)
    saved = os.path.join(folder, f"roundtrip-{model}.safetensors")
    run_cli(cli, "--model", model, "--synthetic", "64", "--init", source,
            "--save-init", saved)
    tensors, _ = read_safetensors(saved)
    for name, value in weights.items():
        if not np.array_equal(tensors[name], value):
            diff = np.abs(tensors[name] - value).max()
            raise AssertionError(f"{model}: {name} changed on the way through cnnbench "
                                 f"(max |diff| = {diff})")
    print(f"{model}: cnnbench loaded a PyTorch state_dict and saved it back bit-exact")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    if not os.access(args.cli, os.X_OK):
        print(f"FAILED: the cnnbench binary {args.cli} is missing")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory(prefix="cnnbench-torch-") as folder:
        for model in ("fc3", "lenet5"):
            for check in (check_torch_loads_our_checkpoint, check_we_load_torch_weights):
                try:
                    check(args.cli, model, folder)
                except Exception as error:  # report every failing check, then fail
                    failures += 1
                    print(f"FAILED {check.__name__}({model}): {error}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
