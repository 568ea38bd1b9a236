#!/usr/bin/env python3
"""A plain PyTorch training loop on MNIST, the yardstick the sweep's `pytorch` peer is held to
(bench/peer_vs_plain.sh). Written as a user would write it and sharing no code with the peer
(bench/torch_peer.py, bench/torch_nets.py): its own model definitions, the training set turned
into floats once, batches gathered from them, mean cross-entropy, SGD with momentum. A few
batches warm it up untimed; then --repeat blocks of --batches batches are timed, one after the
other, and the median block is reported.

usage: plain_torch_loop.py --model lenet5 [--data datasets/mnist] [--batch 64] [--batches 300]
                           [--warmup 10] [--repeat 1] [--threads 1]
Prints one JSON object: model, batch, batches, seconds (per block), images_per_s (the median
block's), threads, torch.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def parse_args():
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=["fc3", "lenet5"])
    parser.add_argument("--data", type=Path, default=here.parent / "datasets" / "mnist",
                        help="folder of MNIST's IDX files (train-images-idx3-ubyte, ...)")
    parser.add_argument("--batch", type=positive, default=64)
    parser.add_argument("--batches", type=positive, default=300, help="timed batches")
    parser.add_argument("--warmup", type=non_negative, default=10, help="untimed batches first")
    parser.add_argument("--repeat", type=positive, default=1, help="timed blocks of --batches")
    parser.add_argument("--threads", type=positive, default=1)
    return parser.parse_args()


def read_idx(path):
    """MNIST's IDX file of unsigned bytes as a (dims) uint8 tensor."""
    import torch
    blob = path.read_bytes()
    dims = [int.from_bytes(blob[4 + 4 * i:8 + 4 * i], "big") for i in range(blob[3])]
    return torch.frombuffer(bytearray(blob[4 + 4 * len(dims):]), dtype=torch.uint8).reshape(dims)


def lenet5():
    from torch import nn
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def fc3():
    from torch import nn
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 300), nn.ReLU(),
        nn.Linear(300, 100), nn.ReLU(),
        nn.Linear(100, 10))


def main():
    args = parse_args()
    # OpenBLAS (torch's dense layers) would otherwise start a thread per CPU of the machine.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    images = read_idx(args.data / "train-images-idx3-ubyte").unsqueeze(1).float() / 255  # (N,1,28,28)
    labels = read_idx(args.data / "train-labels-idx1-ubyte").long()                    # (N,)
    needed = (args.warmup + args.repeat * args.batches) * args.batch
    order = torch.cat([torch.randperm(len(labels)) for _ in range(needed // len(labels) + 1)])

    model = lenet5() if args.model == "lenet5" else fc3()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_batch(k):
        idx = order[k * args.batch:(k + 1) * args.batch]
        optimizer.zero_grad(set_to_none=True)  # PyTorch 2's default; 1.13 would fill zeros
        loss = loss_fn(model(images[idx]), labels[idx])
        loss.backward()
        optimizer.step()

    for k in range(args.warmup):
        train_batch(k)
    seconds = []
    for block in range(args.repeat):
        first = args.warmup + block * args.batches
        start = time.perf_counter()
        for k in range(first, first + args.batches):
            train_batch(k)
        seconds.append(time.perf_counter() - start)

    median = statistics.median(seconds)
    print(json.dumps({"model": args.model, "batch": args.batch, "batches": args.batches,
                      "seconds": seconds, "images_per_s": args.batches * args.batch / median,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
