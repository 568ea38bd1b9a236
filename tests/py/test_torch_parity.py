#!/usr/bin/env python3
"""PyTorch parity: PyTorch loads a cnnbench checkpoint, trains the same nets the same way from the
same init on the same data, and lands within float rounding of cnnbench's weights and losses.
Skips (exit 77) when PyTorch is not installed (Debian: python3-torch)."""
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import parse_arguments

# The reference nets live with the PyTorch baselines (bench/torch_nets.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

try:
    import numpy as np
    import torch
    from torch import nn
    from safetensors_f32 import read_safetensors
    from torch_nets import build_model
except ImportError as e:
    # scripts/test.sh sets CNNBENCH_REQUIRE_TORCH=1: there a missing torch is a failure, not a skip.
    if os.environ.get("CNNBENCH_REQUIRE_TORCH") == "1":
        print(f"FAIL: PyTorch parity cannot run: {e} (install python3-torch, or CNNBENCH_NO_TORCH=1)")
        sys.exit(1)
    print(f"SKIP: {e}")
    sys.exit(77)

TOLERANCE = 1e-4  # max|a-b| / max|b| per tensor, as in the semantics contract


def read_torch_tensors(path):
    """The checkpoint's tensors as torch tensors, and its metadata."""
    tensors, meta = read_safetensors(path)
    return {name: torch.from_numpy(value) for name, value in tensors.items()}, meta


def write_idx(path, array):
    dims = array.shape
    header = bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    Path(path).write_bytes(header + array.astype(np.uint8).tobytes())


def relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    args = parse_arguments()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    failures = passes = 0
    with tempfile.TemporaryDirectory() as tmp:
        count, batch, steps = 640, 32, 20
        # Images: class-dependent blobs plus noise, so the loss moves; labels uniform.
        labels = rng.integers(0, 10, count)
        images = rng.integers(0, 60, (count, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 * label:2 * label + 8, 4:24] += 180
        write_idx(Path(tmp, "train-images-idx3-ubyte"), images.clip(0, 255))
        write_idx(Path(tmp, "train-labels-idx1-ubyte"), labels)
        for model in ("fc3", "lenet5"):
            common = [args.cli, "train", "--model", model, "--data", tmp, "--seed", "3",
                      "--batch", str(batch), "--no-shuffle", "--weight-decay", "0.001", "--quiet"]
            init, final, report = (Path(tmp, f"{model}-{n}") for n in ("init.st", "final.st", "run.json"))
            subprocess.run(common + ["--save-init", str(init)], check=True)
            subprocess.run(common + ["--steps", str(steps), "--save", str(final), "--report", str(report)],
                           check=True)

            net = build_model(model)
            start, _ = read_torch_tensors(init)
            net.load_state_dict({k: v for k, v in start.items() if not k.startswith("momentum.")},
                                strict=True)
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=0.001)
            x_all = torch.from_numpy(images.clip(0, 255).astype(np.uint8)).float().div(255).unsqueeze(1)
            y_all = torch.from_numpy(labels).long()
            torch_losses = []
            for k in range(steps):
                x, y = x_all[k * batch:(k + 1) * batch], y_all[k * batch:(k + 1) * batch]
                opt.zero_grad()
                loss = nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                torch_losses.append(loss.item())

            ours, meta = read_torch_tensors(final)
            assert meta.get("model") == model, meta
            worst = 0.0
            for name, value in net.state_dict().items():
                err = relative_error(ours[name], value)
                worst = max(worst, err)
                if err > TOLERANCE:
                    print(f"FAIL {model} {name}: max|a-b|/max|b| = {err:.3g}")
                    failures += 1
                else:
                    passes += 1
            our_losses = json.loads(report.read_text())["loss_curve"]
            loss_err = max(abs(a - b) / abs(b) for a, b in zip(our_losses, torch_losses))
            if loss_err > TOLERANCE:
                print(f"FAIL {model} losses: relative error {loss_err:.3g}")
                failures += 1
            else:
                passes += 1
            print(f"{model}: TENSOR OK up to maxdiff {worst:.3g}, loss maxdiff {loss_err:.3g} "
                  f"after {steps} steps")
    print(f"{passes} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
