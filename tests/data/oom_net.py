"""User modules for the probe tests: an MLP that runs out of "device memory" above a batch size.

A CPU has no CUDA allocator to exhaust, so ``forward`` raises the exception PyTorch raises on a
CUDA OOM (``torch.OutOfMemoryError``) when a real batch is larger than the limit: the probe's
child and its parent see exactly what a real OOM gives them.
"""

import torch
import torch.nn as nn


class _Limited(nn.Module):
    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        if x.device.type != "meta" and x.shape[0] > self.limit:  # the tracer runs on meta: let it
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate a batch of {x.shape[0]} (test model)")
        return self.net(x)


def fits_two():
    return _Limited(2)


def never_fits():
    return _Limited(0)
