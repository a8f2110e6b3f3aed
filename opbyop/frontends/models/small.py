"""Small models for smoke runs: an MLP, a convnet, and a model with one op torch-mlir cannot lower."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, features: int = 64, hidden: int = 128, classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.nn.functional.gelu(self.fc2(x))
        return torch.softmax(self.head(x), dim=-1)


class SmallCNN(nn.Module):
    """conv-bn-relu x2, max-pool, global average pool, linear."""

    def __init__(self, channels: int = 3, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(x.mean(dim=(2, 3)))


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MLP()


def cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = SmallCNN()
    _randomize_batchnorm(model, seed)
    return model


def _randomize_batchnorm(model: nn.Module, seed: int) -> None:
    """Give BatchNorm non-trivial running statistics, so eval-mode BN is not an identity."""
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


class Histogram(nn.Module):
    """A linear layer, a histogram of its activations (torch.histc: torch-mlir has no StableHLO
    lowering for it, like Mixtral's expert routing), then arithmetic on both: one frontend failure
    among ops that lower."""

    def __init__(self, features: int = 32, bins: int = 8):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.bins = bins

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x))
        counts = torch.histc(y, bins=self.bins, min=0.0, max=4.0)
        return y.sum(dim=-1) * 2.0 + counts.sum()


def histogram(seed: int = 0, meta: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    if meta:
        with torch.device("meta"):
            return Histogram()
    return Histogram()
