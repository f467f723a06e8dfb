"""The worker of ``advise bench``: one measured training run per launch, every mode.

``advise bench`` launches this module through the launcher (``accelerate launch -m
launcher.recipes.bench_dp``), once per (model, variant, mode, process count). It trains the
plan's catalog model on synthetic data already on the device, as ``launcher.recipes.synthetic``
does, but measures instead of logging:

1. ``--warmup`` optimizer steps (compile and allocator growth happen here), then the peak
   memory counter is reset (DESIGN.md: ``peak_gib`` is the steady-state peak after the first
   optimizer step);
2. ``--steps`` optimizer steps timed between two device synchronisations, all ranks started
   together: step time, samples/s, peak memory per device;
3. DDP only, ``--comm-steps`` pairs of forward+backward passes, one under ``no_sync()``
   (gradients stay local) and one synchronised (DDP's bucketed all-reduce, overlapped with
   backward as in training): their difference is the communication that backward does not hide;
4. with ``--dataloader-workers N``: the DataLoader alone (the input pipeline's ceiling: worker
   processes, collation, pinning, host-to-device copy, no decoding) and training through it.

Each rank writes ``bench-rank{R}.json`` into the run directory; ``launcher.bench.run`` reads them.

Modes. ``single``/``ddp``/``fsdp`` run through ``launcher.runtime.Runtime`` (the Accelerator the
launcher configures), exactly as user scripts do. ``dp`` is ``torch.nn.DataParallel`` in ONE
process over every visible GPU (the bench restricts ``CUDA_VISIBLE_DEVICES``): the plan is a
single-process plan whose micro-batch is the whole DataParallel batch, which DataParallel
scatters over the GPUs. It exists to show what DataParallel costs, never as advice.

Gradient clipping is off (the estimate has no clipping); the optimizer is the plan's.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import torch

from launcher.recipes import startup

RESULT_NAME = "bench-rank{rank}.json"
MODES = ("single", "dp", "ddp", "fsdp")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="launcher.recipes.bench_dp", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first (compile happens here)")
    p.add_argument("--comm-steps", type=int, default=3, help="DDP: no_sync / synchronised pairs timed")
    p.add_argument("--dataloader-workers", type=int, default=-1, help="also measure a DataLoader with N workers (-1: no)")
    p.add_argument("--pool", type=int, default=4, help="distinct micro-batches per rank, cycled")
    return p.parse_args(argv)


# ---------------------------------------------------------------- shared pieces
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sync_all() -> None:
    if torch.cuda.is_available():
        for d in range(torch.cuda.device_count()):
            torch.cuda.synchronize(d)


def _tokens_per_sample(spec, plan) -> int | None:
    a = spec.arch
    if a is None:
        return None
    return a.tokens(plan.config.seq_len or spec.default_seq_len, plan.config.image_size)


def _build(spec, plan, device: torch.device) -> torch.nn.Module:
    """The zoo model, built directly on the device, as the synthetic recipe builds it."""
    return startup.zoo_model_on(device, spec, image_size=plan.config.image_size)


class _PoolDataset(torch.utils.data.Dataset):
    """Fixed synthetic samples on the host: what a loader costs without decoding."""

    def __init__(self, spec, plan, samples: int, dtype: torch.dtype, rank: int):
        from advisor.zoo import synthetic_batch

        gen = torch.Generator().manual_seed(4321 + rank)
        self.x, self.y = synthetic_batch(spec, samples, seq_len=plan.config.seq_len, image_size=plan.config.image_size,
                                         device="cpu", dtype=dtype, generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _die_with_parent() -> None:
    """SIGTERM this process when its launcher dies (Linux), so no worker outlives a cancelled bench."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _write(run_dir: Path | None, rank: int, result: dict) -> None:
    if run_dir is not None:
        (Path(run_dir) / RESULT_NAME.format(rank=rank)).write_text(json.dumps(result, indent=2) + "\n")


def _loader_ceiling(loader, batches: int, mb: int, device: torch.device) -> float:
    """Samples/s of iterating ``loader`` alone (batches already moved to the device)."""
    it = iter(loader)
    next(it)  # worker start-up is not the ceiling
    _sync(device)
    t0 = time.perf_counter()
    n = 0
    for _ in range(batches):
        try:
            x, _y = next(it)
        except StopIteration:
            it = iter(loader)
            x, _y = next(it)
        if x.device != device:
            x.to(device, non_blocking=True)
        n += mb
    _sync(device)
    return n / max(time.perf_counter() - t0, 1e-9)


# ---------------------------------------------------------------- single / ddp / fsdp
def run_accelerate(args: argparse.Namespace) -> int:
    from advisor.catalog import catalog_model
    from launcher.recipes.synthetic import make_pool
    from launcher.runtime import Runtime

    rt = Runtime.from_env(log_every=max(1, args.warmup))
    plan, acc = rt.plan, rt.accelerator
    spec = catalog_model(plan.model.name)
    c = plan.config
    device = rt.device
    model = rt.setup_model(_build(spec, plan, device))
    optimizer = rt.optimizer(model)
    loader = None
    if args.dataloader_workers >= 0:
        dtype = torch.bfloat16 if c.precision.casts_model else torch.float32
        loader = rt.dataloader(_PoolDataset(spec, plan, c.micro_batch * 8 * rt.world_size, dtype, rt.rank), shuffle=False)
        model, optimizer, loader = rt.prepare(model, optimizer, loader)
    else:
        model, optimizer = rt.prepare(model, optimizer)
    rt.tokens_per_sample = _tokens_per_sample(spec, plan)
    batches = itertools.cycle(make_pool(spec, plan, device, rt.rank, args.pool))
    samples_per_step = c.micro_batch * c.grad_accum

    for _ in range(args.warmup):
        rt.train_step(model, optimizer, batches)
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    acc.wait_for_everyone()
    t_start = time.time()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        rt.train_step(model, optimizer, batches)
    _sync(device)
    elapsed = time.perf_counter() - t0
    t_end = time.time()
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None

    result = {
        "rank": rt.rank, "world_size": rt.world_size, "mode": args.mode, "device": str(device),
        "steps": args.steps, "warmup": args.warmup, "elapsed_s": elapsed, "step_s": elapsed / args.steps,
        "samples": samples_per_step * args.steps, "samples_per_s": samples_per_step * args.steps / elapsed,
        "tokens_per_sample": rt.tokens_per_sample, "peak_gib": peak, "peak_gib_devices": None if peak is None else [peak],
        "t_start": t_start, "t_end": t_end, "distributed_type": str(acc.distributed_type),
        "sync_step_s": None, "nosync_step_s": None, "exposed_comm_s": None,
        "loader_samples_per_s": None, "loader_train_samples_per_s": None, "dataloader_workers": None,
    }

    if args.mode == "ddp" and rt.world_size > 1 and args.comm_steps > 0:
        result.update(_exposed_comm(acc, model, optimizer, batches, device, args.comm_steps))

    if loader is not None:
        result["dataloader_workers"] = args.dataloader_workers
        result["loader_samples_per_s"] = _loader_ceiling(loader, args.steps, c.micro_batch, device)
        acc.wait_for_everyone()
        loaded = rt.batches(loader)
        rt.train_step(model, optimizer, loaded)  # first batch pays the workers' start-up
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(args.steps - 1):
            rt.train_step(model, optimizer, loaded)
        _sync(device)
        result["loader_train_samples_per_s"] = samples_per_step * (args.steps - 1) / max(time.perf_counter() - t0, 1e-9)

    _write(rt.run_dir, rt.rank, result)
    # No parameter checksum (Runtime.finish copies every parameter to the host): just end cleanly.
    acc.wait_for_everyone()
    acc.end_training()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


def _exposed_comm(acc, model, optimizer, batches, device, reps: int) -> dict:
    """Median forward+backward time with and without DDP's gradient all-reduce.

    Pairs alternate (no_sync first, then synchronised) so drift affects both alike; the ranks
    start each pass together. No optimizer step follows, so unsynchronised gradients never
    reach the weights.
    """
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(reps):
        for synced in (False, True):
            batch = next(batches)
            acc.wait_for_everyone()
            _sync(device)
            t0 = time.perf_counter()
            ctx = contextlib.nullcontext() if synced else acc.no_sync(model)
            with ctx:
                loss = model(*batch)
                acc.backward(loss)
            _sync(device)
            times[synced].append(time.perf_counter() - t0)
            optimizer.zero_grad(set_to_none=True)
    sync_s, nosync_s = statistics.median(times[True]), statistics.median(times[False])
    return {"sync_step_s": sync_s, "nosync_step_s": nosync_s, "exposed_comm_s": max(0.0, sync_s - nosync_s)}


# ---------------------------------------------------------------- dp: DataParallel, one process
class _Autocast(torch.nn.Module):
    """Autocast entered inside each replica: DataParallel runs replicas in threads, and autocast's
    dtype is per thread (parallel_apply re-enters autocast with the default dtype, fp16 on CUDA)."""

    def __init__(self, inner: torch.nn.Module, dtype: torch.dtype | None):
        super().__init__()
        self.inner = inner
        self.dtype = dtype

    def forward(self, *args):
        with torch.autocast("cuda", dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            return self.inner(*args)


def run_dp(args: argparse.Namespace) -> int:
    from advisor.catalog import catalog_model
    from advisor.config import Optimizer, Precision
    from advisor.plan import Plan
    from launcher.command import ENV_ATTEMPT, ENV_METRICS, ENV_PLAN, ENV_RUN_DIR
    from launcher.recipes.synthetic import make_pool

    _die_with_parent()
    if not torch.cuda.is_available():
        raise SystemExit("bench dp: torch.nn.DataParallel needs CUDA GPUs; none is visible")
    plan = Plan.load(Path(os.environ[ENV_PLAN]))
    run_dir = Path(os.environ[ENV_RUN_DIR]) if os.environ.get(ENV_RUN_DIR) else None
    metrics = os.environ.get(ENV_METRICS)
    attempt = int(os.environ.get(ENV_ATTEMPT, "1"))
    spec = catalog_model(plan.model.name)
    c = plan.config
    if c.compile:
        raise SystemExit("bench dp: torch.compile does not support DataParallel's per-step replication")
    n_dev = torch.cuda.device_count()
    device = torch.device("cuda:0")
    torch.set_float32_matmul_precision("highest" if c.precision is Precision.fp32 else "high")

    model = _build(spec, plan, device)
    if c.precision.casts_model:
        model = model.to(torch.bfloat16)
    if c.channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    if c.optimizer is Optimizer.sgd:
        optimizer = torch.optim.SGD(params, lr=plan.lr, momentum=0.9, weight_decay=0.01)
    else:
        optimizer = torch.optim.AdamW(params, lr=plan.lr, weight_decay=0.01, fused=True)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(c.precision.value)
    dp = torch.nn.DataParallel(_Autocast(model, autocast_dtype))
    scaler = torch.amp.GradScaler("cuda") if c.precision is Precision.fp16 else None
    tokens = _tokens_per_sample(spec, plan)
    batches = itertools.cycle(make_pool(spec, plan, device, 0, args.pool))

    def step(batch) -> torch.Tensor:
        loss = dp(*batch).mean()  # one loss per replica, gathered on GPU 0
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def log(step_no: int, loss: torch.Tensor, samples: int, dt: float) -> None:
        if metrics is None:
            return
        peak = max(torch.cuda.max_memory_allocated(d) for d in range(n_dev)) / 2**30
        row = {"step": step_no, "loss": float(loss.float().item()), "lr": plan.lr, "samples_per_s": samples / dt,
               "tokens_per_s": samples * tokens / dt if tokens else None, "peak_gib": peak, "rank": 0,
               "time": time.time(), "attempt": attempt}
        fd = os.open(metrics, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode())
        finally:
            os.close(fd)

    t0 = time.perf_counter()
    loss = None
    for _ in range(args.warmup):
        loss = step(next(batches))
    _sync_all()
    if loss is not None:
        log(args.warmup, loss, c.micro_batch * args.warmup, time.perf_counter() - t0)
    for d in range(n_dev):
        torch.cuda.reset_peak_memory_stats(d)
    t_start = time.time()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(next(batches))
    _sync_all()
    elapsed = time.perf_counter() - t0
    t_end = time.time()
    peaks = [torch.cuda.max_memory_allocated(d) / 2**30 for d in range(n_dev)]
    log(args.warmup + args.steps, loss, c.micro_batch * args.steps, elapsed)
    result = {
        "rank": 0, "world_size": 1, "mode": "dp", "device": f"cuda:0..{n_dev - 1}", "dp_devices": n_dev,
        "steps": args.steps, "warmup": args.warmup, "elapsed_s": elapsed, "step_s": elapsed / args.steps,
        "samples": c.micro_batch * args.steps, "samples_per_s": c.micro_batch * args.steps / elapsed,
        "tokens_per_sample": tokens, "peak_gib": max(peaks), "peak_gib_devices": peaks,
        "t_start": t_start, "t_end": t_end, "distributed_type": "DataParallel",
        "sync_step_s": None, "nosync_step_s": None, "exposed_comm_s": None,
        "loader_samples_per_s": None, "loader_train_samples_per_s": None, "dataloader_workers": None,
    }
    if args.dataloader_workers >= 0:
        dtype = torch.bfloat16 if c.precision.casts_model else torch.float32
        loader = torch.utils.data.DataLoader(
            _PoolDataset(spec, plan, c.micro_batch * 8, dtype, 0), batch_size=c.micro_batch, drop_last=True,
            num_workers=args.dataloader_workers, pin_memory=True, persistent_workers=args.dataloader_workers > 0)
        result["dataloader_workers"] = args.dataloader_workers
        result["loader_samples_per_s"] = _loader_ceiling(loader, args.steps, c.micro_batch, device)

        def loaded():
            while True:
                for x, y in loader:
                    yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

        it = loaded()
        step(next(it))
        _sync_all()
        t0 = time.perf_counter()
        for _ in range(args.steps - 1):
            step(next(it))
        _sync_all()
        result["loader_train_samples_per_s"] = c.micro_batch * (args.steps - 1) / max(time.perf_counter() - t0, 1e-9)
    _write(run_dir, 0, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.steps < 2 or args.warmup < 1:
        raise SystemExit("bench worker: --steps must be at least 2 and --warmup at least 1")
    return run_dp(args) if args.mode == "dp" else run_accelerate(args)


if __name__ == "__main__":
    raise SystemExit(main())
