"""The benchmark models: the example's small CNN and a 784-1024-1024-10 MLP (the
communication-bound case: 1.9M parameters, little compute per byte)."""

from __future__ import annotations

import torch

__all__ = ["make_model"]


def small_cnn() -> torch.nn.Module:
    """The model of examples/train_fashion_mnist.py (the example keeps its own copy so that
    it reads alone; a test checks they agree): ~20k parameters, one batch norm."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 5), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def mlp() -> torch.nn.Module:
    """784-1024-1024-10 with ReLU: 1.86M parameters, 7.4 MB of float32 gradients."""
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def make_model(name: str) -> torch.nn.Module:
    return {"cnn": small_cnn, "mlp": mlp}[name]()
