"""A user module for the tracer tests: a small CNN and an MLP with known counts."""

import torch.nn as nn


def build_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def build_mlp():
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 8))


NOT_A_FACTORY = 3
