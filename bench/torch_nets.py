"""FC-3 and LeNet-5 as DESIGN.md defines them, as PyTorch modules, for the PyTorch baselines
(torch_train.py on the CPU, gpu_torch.py on a GPU)."""


def build_model(torch, name):
    nn = torch.nn
    if name == "fc3":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 300), nn.ReLU(),
            nn.Linear(300, 100), nn.ReLU(),
            nn.Linear(100, 10))
    if name == "lenet5":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    raise SystemExit(f"unknown model '{name}' (expected fc3 or lenet5)")
