#!/usr/bin/env python3
"""One repetition of a PyTorch peer point of `cnnbench sweep` (docs/design.md, "Peer strategies"):
the sweep's model from the sweep's initial weights, trained on the sweep's data in the sweep's
sample order with SGD momentum, by one process of --threads threads (pytorch) or by --ranks
processes under DistributedDataParallel over gloo on 127.0.0.1 (pytorch-ddp). Only the training
steps are timed: the interpreter, the imports, the data loading, the process group and the
--warmup-steps (trained, then undone) are not.

usage: torch_peer.py --model fc3 --data DIR --init INIT.safetensors --order ORDER.u32
                     --batch 64 --lr 0.01 --momentum 0.9 --steps 60 --threads 2 --cpus 0,1
                     [--warmup-steps 10]
                     [--ddp --ranks 2] [--target-accuracy 0.9 --eval-every 25] [--out FILE]
DIR holds the training set (and, for --target-accuracy, the test set) as MNIST's IDX files
(train-*, t10k-*); ORDER the
samples of step k at [k*batch, (k+1)*batch), little-endian uint32. Prints one JSON object (or
writes it to --out): train_seconds, steps, final_loss, peer_info, pin_map, and
time_to_accuracy with --target-accuracy.
"""
import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=["fc3", "lenet5"])
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--init", required=True, type=Path)
    parser.add_argument("--order", required=True, type=Path)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--momentum", type=float, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="threads per process")
    parser.add_argument("--ddp", action="store_true",
                        help="DistributedDataParallel over gloo, --ranks processes (1 too)")
    parser.add_argument("--ranks", type=int, default=1, help="processes of --ddp")
    parser.add_argument("--cpus", default="", help="OS CPUs, ranks x threads of them, comma separated")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="untimed steps first, their training then undone (not with --target-accuracy)")
    parser.add_argument("--target-accuracy", type=float, default=0.0)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", type=Path, help="write the JSON object here instead of stdout")
    # Internal: one rank of a --ranks job and the port of its rendezvous.
    parser.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


def read_idx(path):
    """An IDX file of unsigned bytes as a uint8 tensor."""
    import torch
    blob = path.read_bytes()
    if blob[:3] != b"\x00\x00\x08":
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    rank = blob[3]
    dims = [int.from_bytes(blob[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    data = torch.frombuffer(bytearray(blob[4 + 4 * rank:]), dtype=torch.uint8)
    return data.reshape(dims)


def load_split(folder, split):
    images = read_idx(folder / f"{split}-images-idx3-ubyte")
    labels = read_idx(folder / f"{split}-labels-idx1-ubyte")
    return images.unsqueeze(1), labels.long()  # (N,1,28,28), (N,)


def load_init(model, path):
    """cnnbench's initial weights (a safetensors checkpoint) into model."""
    import torch
    blob = path.read_bytes()
    length = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + length])
    header.pop("__metadata__", None)
    data = blob[8 + length:]
    state = {}
    for name, info in header.items():
        if name.startswith("momentum."):
            continue
        begin, end = info["data_offsets"]
        tensor = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        state[name] = tensor.reshape(info["shape"])
    model.load_state_dict(state, strict=True)


def shard(batch, ranks, rank):
    """[first, first + count) of a batch of `batch` samples for `rank`: the cluster strategy's cut
    (the first batch % ranks ranks take one more)."""
    base, extra = divmod(batch, ranks)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def provenance(torch, threads, ddp):
    """What the report says of the PyTorch that ran: version, BLAS, oneDNN, ISA cap."""
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) (v[0-9.]+)", config)
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    isa = capability() if capability else None
    if isa is None:
        used = re.search(r"CPU capability usage: (\S+)", config)
        isa = used.group(1) if used else "unknown"
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        isa += f" (ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']})"
    mkldnn = torch.backends.mkldnn.is_available()
    return {
        "torch_version": torch.__version__,
        "blas": blas.group(1) if blas else "unknown",
        "onednn": (onednn.group(1) if onednn else "available") if mkldnn else "unavailable",
        "isa_cap": isa,
        "threads": threads,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "malloc": " ".join(f"{k}={os.environ[k]}" for k in KEEP_FREED_MEMORY if k in os.environ) or "default",
        "backend": "gloo" if ddp else "none",
    }


def accuracy(model, images, labels, torch):
    """The fraction of the test set classified right, in batches of 256 as cnnbench evaluates."""
    right = 0
    with torch.no_grad():
        for first in range(0, len(labels), 256):
            x = images[first:first + 256].float().div_(255.0)
            right += int((model(x).argmax(1) == labels[first:first + 256]).sum())
    return right / len(labels)


def loss_function(batch, ranks, count, torch):
    """This rank's loss of its `count` samples: their summed losses times ranks / batch, so that
    DDP's average over the ranks is the whole batch's mean loss. Where the ranks' shares are equal
    (one process always) that is their mean, which PyTorch computes in the cross-entropy itself;
    otherwise one more multiplication per step."""
    cross_entropy = torch.nn.functional.cross_entropy
    if count * ranks == batch:
        return cross_entropy
    scale = ranks / batch
    return lambda logits, labels: cross_entropy(logits, labels, reduction="sum") * scale


def train(args, rank, group):
    """This process's part of the run; rank 0 returns the result, the others None."""
    import torch
    from torch_nets import build_model
    torch.set_num_threads(args.threads)
    if group is not None:
        torch.distributed.barrier()
    clock_start = time.perf_counter()  # time to accuracy counts from here, before the data
    images, labels = load_split(args.data, "train")
    # Scaled to [0, 1] once, as a plain loop holds its data; a step then gathers floats (the same
    # values a per-step .float().div_(255) of the gathered bytes gives, without its two passes).
    images = images.float().div_(255.0)
    # uint32 on disk; every index is below 2^31, so int32 reads the same on a little-endian CPU.
    order = torch.frombuffer(bytearray(args.order.read_bytes()), dtype=torch.int32).long()
    if len(order) < args.steps * args.batch:
        raise SystemExit(f"{args.order}: {len(order)} samples, fewer than {args.steps} steps need")
    first, count = shard(args.batch, args.ranks, rank)
    model = build_model(args.model)
    load_init(model, args.init)
    net = torch.nn.parallel.DistributedDataParallel(model) if group is not None else model
    loss_of = loss_function(args.batch, args.ranks, count, torch)

    def step(k, optimizer):
        idx = order[k * args.batch + first:k * args.batch + first + count]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(net(images.index_select(0, idx)), labels.index_select(0, idx))
        loss.backward()
        optimizer.step()
        return loss

    def new_optimizer():
        return torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)

    tta = args.target_accuracy > 0
    if not tta and args.warmup_steps > 0:
        # The warm-up our points get from running in a process that has trained before: the first
        # steps of a fresh interpreter build oneDNN's primitives, grow the allocator's caches and
        # (DDP) connect gloo's pairs and rebuild the buckets. Trained on the run's first batches,
        # then the initial weights are back and the optimizer (its momentum) is new.
        initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        optimizer = new_optimizer()
        for k in range(min(args.warmup_steps, args.steps)):
            step(k, optimizer)
        model.load_state_dict(initial)
    optimizer = new_optimizer()
    if tta:
        test_images, test_labels = load_split(args.data, "t10k")
    curve, reached = [], None
    loss, steps_run = None, 0
    if group is not None:
        torch.distributed.barrier()
    start = time.perf_counter()
    if not tta:
        # The timed loop: the steps alone, no host read of the loss, no clock per step.
        for k in range(args.steps):
            loss = step(k, optimizer)
        steps_run = args.steps
    else:
        for k in range(args.steps):
            loss = step(k, optimizer)
            steps_run = k + 1
            if steps_run % args.eval_every != 0 and steps_run != args.steps:
                continue
            stop = torch.zeros(1)
            if rank == 0:
                value = accuracy(model, test_images, test_labels, torch)
                seconds = time.perf_counter() - clock_start
                curve.append({"step": steps_run, "seconds": seconds, "accuracy": value})
                if value >= args.target_accuracy:
                    reached, stop[0] = (steps_run, seconds), 1
            if group is not None:
                torch.distributed.broadcast(stop, 0)
            if stop[0] == 1:
                break
    train_seconds = time.perf_counter() - start
    # The batch's mean loss of the last step: the ranks' parts summed (outside the clock).
    final = loss.detach().clone() / args.ranks
    if group is not None:
        torch.distributed.all_reduce(final)
        torch.distributed.barrier()
    if rank != 0:
        return None
    result = {"train_seconds": train_seconds, "steps": steps_run,
              "final_loss": float(final) if math.isfinite(float(final)) else str(float(final)),
              "peer_info": provenance(torch, args.threads, args.ddp),
              "pin_map": pin_map(args)}
    if tta:
        result["time_to_accuracy"] = {
            "target": args.target_accuracy, "reached": reached is not None,
            "seconds": reached[1] if reached else None, "steps": reached[0] if reached else None,
            "eval_every": args.eval_every, "max_steps": args.steps,
            "test_samples": len(test_labels), "curve": curve}
    return result


def cpus_of(args, rank):
    cpus = [int(c) for c in args.cpus.split(",") if c != ""]
    return cpus[rank * args.threads:(rank + 1) * args.threads]


def pin_map(args):
    """One entry per thread slot, as cnnbench's pin maps are (observed_cpu is not known here)."""
    name = "pytorch-ddp" if args.ddp else "pytorch"
    entries = []
    for rank in range(args.ranks):
        for thread, cpu in enumerate(cpus_of(args, rank)):
            entries.append({"worker": f"{name}/rank{rank}/thread{thread}",
                            "core": rank * args.threads + thread, "pu": cpu, "observed_cpu": -1})
    return entries


def pin(args, rank):
    cpus = cpus_of(args, rank)
    if cpus:
        os.sched_setaffinity(0, cpus)


def emit(args, result):
    text = json.dumps(result)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)


def run_rank(args):
    """One rank of a DistributedDataParallel job."""
    pin(args, args.rank)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.ranks)
    result = train(args, args.rank, dist.group.WORLD)
    dist.destroy_process_group()
    if result is not None:
        emit(args, result)
    return 0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args):
    """Starts --ranks processes of this script on 127.0.0.1 and passes rank 0's result on."""
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r), "--port", str(port)],
                              env=env, stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True)
             for r in range(args.ranks)]
    output = procs[0].communicate()[0]
    codes = [p.wait() for p in procs]
    bad = [r for r, code in enumerate(codes) if code != 0]
    if bad:
        print(f"torch_peer.py: rank {bad[0]} exited with {codes[bad[0]]}", file=sys.stderr)
        return 1
    sys.stdout.write(output)
    return 0


# glibc's malloc hands PyTorch's large per-step buffers (im2col, activations, gradients) back to
# the OS and maps them again on the next step; each round trip costs page faults and zeroed pages,
# and how many depends on the heap's layout when the process starts. Plain PyTorch LeNet-5 loops
# pinned to one core ran at 6,000-14,500 images/s from one process to the next (AMD EPYC family 26
# model 2, 2026-12-06), steady within each; told to keep freed memory, as PyTorch's CPU tuning
# advice does with jemalloc or tcmalloc, 13,000-13,800 in every process. A value the user set
# wins.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4000000000",
                     "MALLOC_TOP_PAD_": "268435456"}


def keep_freed_memory():
    """Starts this script again with KEEP_FREED_MEMORY (glibc reads it once, at start)."""
    missing = {k: v for k, v in KEEP_FREED_MEMORY.items() if k not in os.environ}
    if missing:
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **missing})


def main():
    keep_freed_memory()
    args = parse_args()
    # torch.set_num_threads sizes ATen's OpenMP pool, not the BLAS behind its dense layers, which
    # otherwise starts a thread per core: beyond the point's cores they wait on each other (FC-3
    # unpinned beside a busy core: 1.4-34k images/s instead of 43-95k). Set before torch loads it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    if args.ranks > 1 and not args.ddp:
        raise SystemExit("torch_peer.py: --ranks needs --ddp")
    if args.ddp and args.rank < 0:
        return run_ranks(args)
    if args.ddp:
        return run_rank(args)
    pin(args, 0)
    emit(args, train(args, 0, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
