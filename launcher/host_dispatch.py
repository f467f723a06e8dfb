"""How fast this host dispatches eager PyTorch work: one fixed, tiny training step, timed.

Small batches are host-bound: the step takes as long as the CPU needs to dispatch its kernels
(``advisor.throughput.host_seconds``: kernels x ``launch_us``). That speed is a property of the
host, not of the GPU (docs/design.md, "Host speed": small-batch H200 rows moved 17% median apart,
up to 1.78x, between the machines of different calls; large-batch rows 0.7%). So the estimator cannot know it from the
GPU kind; this measures it.

The reference step is fixed so that one number compares hosts: eight blocks of Linear(64, 64),
LayerNorm and GELU on an [8, 64] input, forward, an fp32 loss, backward, ``zero_grad`` - about
a hundred aten ops of tiny tensors, so the device finishes each kernel long before the next is
dispatched and the wall time per step is the host's. ``us_per_step`` is the median over windows
(a preempted window does not move it). ``advise probe`` runs it beside the model it measures
and stores the ratio to the benchmark host's figure (``advisor.calibration.Calibration.
host_dispatch_ref_us``, written by benchmarks/calibration/fit.py from the call that fit
``launch_us``) as this machine's host factor; the benchmark scripts write it into their headers.
"""

from __future__ import annotations

import statistics
import time

import torch

BLOCKS, WIDTH, BATCH = 8, 64, 8


def _reference_model(device: torch.device) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(BLOCKS):
        lin = torch.nn.Linear(WIDTH, WIDTH)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(WIDTH, WIDTH, generator=g) * WIDTH**-0.5)
        layers += [lin, torch.nn.LayerNorm(WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(device)


def _step(model: torch.nn.Module, x: torch.Tensor) -> None:
    loss = model(x).float().pow(2).mean()
    loss.backward()
    model.zero_grad(set_to_none=True)


def _count_ops(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Aten ops one step dispatches (forward and backward), counted once under a dispatch mode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        _step(model, x)
    return Count.n


def measure(device: str | torch.device = "cuda", *, windows: int = 7, steps_per_window: int = 20,
            warmup: int = 10) -> dict:
    """Time the reference step on ``device``: ``{"us_per_step"`` (median over ``windows``),
    ``"ops_per_step", "us_per_op", "windows"`` (each window's figure), ``"device"}``."""
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    model = _reference_model(device)
    x = torch.randn(BATCH, WIDTH, device=device)
    for _ in range(warmup):
        _step(model, x)
    sync()
    per_step = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(steps_per_window):
            _step(model, x)
        sync()
        per_step.append((time.perf_counter() - t0) / steps_per_window * 1e6)
    ops = _count_ops(model, x)
    us = statistics.median(per_step)
    return dict(us_per_step=round(us, 2), ops_per_step=ops, us_per_op=round(us / ops, 3),
                         windows=[round(w, 1) for w in per_step], device=str(device))


if __name__ == "__main__":  # python -m launcher.host_dispatch [cuda|cpu]
    import json
    import sys

    print(json.dumps(measure(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))))
