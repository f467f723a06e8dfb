"""The timed training step of the GPU measurement scripts, written once (torch only).

``measure/reference.py`` (cardwise's catalog models) and ``measure/users_models.py`` (models as
users write them) measure the same thing the same way; only how they build the model and its loss
differs. This module holds the rest, and imports nothing but torch (the GPU machine runs these
scripts without cardwise's dependencies):

- ``make_step``: forward and loss under autocast, backward, optimizer step,
  ``zero_grad(set_to_none=True)`` (as Accelerate does); returns the detached loss.
- ``warm_up``: the first optimizer step (compilation happens there; optimizer states exist after
  it), the other warm-up steps, and the host time of the last one (which sizes the timed region).
- ``timed``: resets the peak-memory counter, then times N steps with CUDA events (host clock off
  CUDA): the steady-state step time.
- ``memory``: peak allocated and reserved over the timed steps and the device memory in use
  (DESIGN.md's ``peak_gib`` and ``device_gib``), in GiB.
- ``ceilings``: the two roofs of the device (bf16 matmul rate, copy bandwidth), device/METHOD.md.
- ``free_device`` and ``is_oom``: what runs between two rows; ``sync``: wait for the device's queue.
- ``in_child``: this script's command line again in a process of its own, for one row (a user's
  training script trains one model per process; the measurement scripts run many in one).

Imported as ``benchmarks.calibration.measure.steploop`` (the scripts run with ``python -m`` from the
checkout root).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch


def make_step(loss_fn: Callable[[], torch.Tensor], opt: torch.optim.Optimizer, autocast) -> Callable[[], torch.Tensor]:
    """One training step: ``loss_fn()`` under ``autocast``, backward, ``opt.step()``, ``zero_grad``."""

    def step() -> torch.Tensor:
        with autocast:
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing elsewhere."""
    if device == "cuda":
        torch.cuda.synchronize()


def warm_up(step: Callable[[], torch.Tensor], warmup: int, device: str) -> dict:
    """Run ``max(warmup, 1)`` steps. Returns ``first_loss``, ``warmup_s`` (all of them, compilation
    included) and ``last_warm_s`` (host time of the last one; the first one's when it is the only one)."""
    t0 = time.perf_counter()
    first_loss = float(step())  # first optimizer step: compilation happens here, states now exist
    for _ in range(max(0, warmup - 2)):
        step()
    sync(device)
    t_last = time.perf_counter()
    if warmup >= 2:
        step()
        sync(device)
    now = time.perf_counter()
    return {"first_loss": first_loss, "warmup_s": now - t0,
            "last_warm_s": now - t_last if warmup >= 2 else now - t0}


def timed(step: Callable[[], torch.Tensor], steps: int, device: str) -> dict:
    """Time ``steps`` steps after resetting the peak-memory counter. Returns ``elapsed_s`` (CUDA events
    on CUDA, the host clock elsewhere), ``host_s`` (the host clock) and ``last_loss``."""
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t1 = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = step()
    if cuda:
        end.record()
    sync(device)
    host_s = time.perf_counter() - t1
    elapsed = start.elapsed_time(end) / 1e3 if cuda else host_s
    return {"elapsed_s": elapsed, "host_s": host_s, "last_loss": float(loss) if loss is not None else None}


def memory(device: str) -> dict:
    """Peak allocated and reserved memory since the last reset, and the device memory in use (GiB);
    empty off CUDA."""
    if device != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "device_gib": (total - free) / 2**30}


def median_event_s(fn: Callable[[], object], n: int = 10) -> float:
    """Median seconds of ``fn`` on the GPU (CUDA events), ``n`` timed calls after 3 untimed ones."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return sorted(ts)[len(ts) // 2]


def matmul_tflops(device, dtype: torch.dtype = torch.bfloat16) -> float:
    """TFLOP/s of an 8192^3 matmul of random ``dtype`` data (fp32 runs at whatever
    ``torch.backends.cuda.matmul.allow_tf32`` says), median of 10 after warm-up."""
    a = torch.randn(8192, 8192, device=device, dtype=dtype)
    b = torch.randn(8192, 8192, device=device, dtype=dtype)
    out = 2 * 8192**3 / median_event_s(lambda: a @ b) / 1e12
    del a, b
    return out


def ceilings(device) -> dict:
    """bf16 matmul TFLOP/s and copy GB/s (read + write), median of 10 after warm-up (random data)."""
    mm = matmul_tflops(device)
    src = torch.randn(2**30 // 4, device=device)
    dst = torch.empty_like(src)
    cp = median_event_s(lambda: dst.copy_(src))
    out = {"bf16_matmul_tflops": mm, "copy_gbps": 2 * src.numel() * 4 / cp / 1e9}
    del src, dst
    torch.cuda.empty_cache()
    return out


def in_child(args: list[str], drop: tuple[str, ...], flags: tuple[str, ...] = ()) -> str:
    """Runs this command line again (``sys.orig_argv``: the interpreter, its flags, the script and its
    arguments) in a new Python process, without the options ``drop`` (with their values, in either
    form: ``--out F``, ``--out=F``) and the flags ``flags``, with ``args`` and ``--out`` a temporary
    file added; returns what the child wrote there. The child's stdout is discarded; a failing child
    raises ``subprocess.CalledProcessError``."""
    argv, skip = [], False
    for a in sys.orig_argv:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        elif a not in flags and a.split("=", 1)[0] not in drop:
            argv.append(a)
    with tempfile.TemporaryDirectory(prefix="cardwise-child-") as tmp:
        out = f"{tmp}/out"
        subprocess.run(argv + args + ["--out", out], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return f.read()


def free_device(device: str) -> None:
    """Between rows: collect, release the cached blocks, reset the peak counter and dynamo's caches."""
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch._dynamo.reset()


def is_oom(exc: BaseException) -> bool:
    """A CUDA out-of-memory error (typed, or as some kernels raise it: a RuntimeError saying so)."""
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()
