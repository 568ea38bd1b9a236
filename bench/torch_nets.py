"""FC-3 and LeNet-5 as PyTorch modules, exactly as cnnbench defines them (README, "Semantics"), and
what the PyTorch baselines share. The one definition of the nets for the baselines (torch_train.py
on the CPU, gpu_torch.py on a GPU) and for the PyTorch tests (tests/py). Attribute names are
cnnbench's tensor names, so a cnnbench checkpoint loads with load_state_dict(strict=True).

Importing this module imports torch."""
import argparse

import torch
from torch import nn


class FC3(nn.Module):
    """f1 Linear 784->300, ReLU, f2 Linear 300->100, ReLU, f3 Linear 100->10."""

    def __init__(self):
        super().__init__()
        self.f1 = nn.Linear(784, 300)
        self.f2 = nn.Linear(300, 100)
        self.f3 = nn.Linear(100, 10)

    def forward(self, x):  # x is (N,1,28,28)
        x = torch.flatten(x, 1)
        x = torch.relu(self.f1(x))
        x = torch.relu(self.f2(x))
        return self.f3(x)


class LeNet5(nn.Module):
    """c1 Conv 1->6 5x5 pad 2, ReLU, MaxPool 2; c2 Conv 6->16 5x5, ReLU, MaxPool 2;
    flatten (C,H,W) -> 400; f1 400->120, ReLU; f2 120->84, ReLU; f3 84->10."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(400, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x):  # x is (N,1,28,28)
        x = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.f1(x))
        x = torch.relu(self.f2(x))
        return self.f3(x)


def build_model(name):
    """The PyTorch twin of cnnbench's --model fc3|lenet5."""
    nets = {"fc3": FC3, "lenet5": LeNet5}
    if name not in nets:
        raise SystemExit(f"unknown model '{name}' (expected fc3 or lenet5)")
    return nets[name]()


def baseline_parser(description, batch, steps, warmup, samples):
    """The options of both baselines, with each one's defaults; a baseline adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="lenet5", choices=["fc3", "lenet5"])
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--lr", type=float, default=0.01)
    return parser


def training_step(model, args, device=None):
    """step(k) trains `model` on batch k of a random byte-valued data set of args.samples images
    held on `device`, gathered and scaled by 1/255 per step as cnnbench does, with SGD momentum
    0.9; it returns the loss. Draws from torch's generator: the images, the labels, the order."""
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randint(0, 256, (args.samples, 1, 28, 28), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 10, (args.samples,), dtype=torch.int64, device=device)
    steps_per_epoch = args.samples // args.batch
    order = torch.randperm(args.samples, device=device)

    def step(k):
        first = (k % steps_per_epoch) * args.batch
        idx = order[first:first + args.batch]
        x = images.index_select(0, idx).float().div_(255.0)
        y = labels.index_select(0, idx)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step
