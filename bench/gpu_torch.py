#!/usr/bin/env python3
"""PyTorch baseline for the GPU strategy: FC-3 and LeNet-5 (docs/design.md's definitions) trained with
SGD momentum 0.9 on the same GPU, data resident on the device as bytes and converted per batch as
cnnbench does; FP32 (no TF32); timed between CUDA synchronisations after a warm-up.

usage: gpu_torch.py --model lenet5 --batch 1024 --steps 2000 [--device 0] [--json OUT]
Prints one JSON object (and writes it to OUT): images_per_s, seconds, versions, device.
"""
import json
import sys
import time

from torch_nets import baseline_parser, build_model, training_step


def main():
    parser = baseline_parser(__doc__.splitlines()[0], batch=1024, steps=1000, warmup=50,
                             samples=60000)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()

    import torch
    if not torch.cuda.is_available():
        print("gpu_torch.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", args.device)
    torch.manual_seed(1)

    model = build_model(args.model).to(device)
    # The data set stays on the device as bytes, like cnnbench's resident mode.
    step = training_step(model, args, device)

    for k in range(args.warmup):
        step(k)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for k in range(args.steps):
        step(k)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start

    result = {
        "model": args.model,
        "batch": args.batch,
        "steps": args.steps,
        "seconds": seconds,
        "images_per_s": args.steps * args.batch / seconds,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "tf32": False,
    }
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
