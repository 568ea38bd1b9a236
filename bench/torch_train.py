#!/usr/bin/env python3
"""PyTorch CPU baseline for the serial strategy: FC-3 and LeNet-5 (docs/design.md's definitions) trained
with SGD momentum 0.9 on one thread, batches gathered from a byte-valued data set and scaled by 1/255
per step as cnnbench does; only the training loop is timed, after a warm-up.

usage: torch_train.py --model lenet5 --batch 64 --steps 400 [--threads 1]
Prints one JSON object: images_per_s, seconds, steps, batch, torch version, threads.
"""
import json
import os
import sys
import time

from torch_nets import baseline_parser, build_model, training_step


def main():
    parser = baseline_parser(__doc__.splitlines()[0], batch=64, steps=400, warmup=30, samples=8192)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    # The BLAS behind torch's dense layers gets the same threads as torch (torch_peer.py says why).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = build_model(args.model)
    step = training_step(model, args)

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
