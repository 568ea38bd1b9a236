#!/usr/bin/env python3
"""PyTorch CPU baseline for the serial strategy: FC-3 and LeNet-5 (DESIGN.md's definitions) trained
with SGD momentum 0.9 on one thread, batches gathered from a byte-valued data set and scaled by 1/255
per step as cnnbench does; only the training loop is timed, after a warm-up.

usage: torch_train.py --model lenet5 --batch 64 --steps 400 [--threads 1]
Prints one JSON object: images_per_s, seconds, steps, batch, torch version, threads.
"""
import argparse
import json
import sys
import time

from torch_nets import build_model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5", choices=["fc3", "lenet5"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = build_model(torch, args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randint(0, 256, (args.samples, 1, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (args.samples,), dtype=torch.int64)
    steps_per_epoch = args.samples // args.batch
    order = torch.randperm(args.samples)

    def step(k):
        first = (k % steps_per_epoch) * args.batch
        idx = order[first:first + args.batch]
        x = images.index_select(0, idx).float().div_(255.0)
        y = labels.index_select(0, idx)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    for k in range(args.warmup):
        step(k)
    start = time.perf_counter()
    for k in range(args.steps):
        step(k)
    seconds = time.perf_counter() - start

    print(json.dumps({
        "model": args.model,
        "batch": args.batch,
        "steps": args.steps,
        "seconds": seconds,
        "images_per_s": args.steps * args.batch / seconds,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
