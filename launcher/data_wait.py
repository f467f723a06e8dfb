"""Is the run waiting for its data? The data-bound check, from two measurements of one run.

- The ranks time every ``next()`` on their data iterator (``DataWaitClock``, wrapped around the
  loader by ``launcher.runtime.Runtime.batches``) and write the seconds waited in each logged
  interval into ``metrics.jsonl`` (``data_wait_s``, ``data_wait_share`` = waited / interval).
- The runner samples the GPUs' utilisation through NVML while the launch runs
  (``UtilisationSampler``, the one device sampler ``advisor.sampling``), one row a second into
  ``attempt-N/utilisation.jsonl``. CPU runs have no NVML and need none: a rank waiting for a batch
  computes nothing, so the wait share alone gives the CPU's busy share (``check(cpu=True)``).

``check`` (pure) flags a run as data-bound when the GPUs were busy less than 70% of the time
over the training steps while the ranks spent a large share of each step waiting for batches,
and gives the fix with the figures. The verdict lands in the run record (``MetricsSummary.
data_bound``), the CLI's end-of-run summary and the wizard's monitor, which all read it from here.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, Field

# The product's source material (issue #15, DESIGN.md's practice rule on dataloader workers): GPU
# utilisation under 70% means the input pipeline is the bottleneck.
UTIL_THRESHOLD_PCT = 70.0
# cardwise's choice: a fifth of each step spent waiting. Making the input free could then make the
# run at most 1 / (1 - 0.2) = 1.25x faster; below that the data pipeline is not what to fix first.
WAIT_SHARE_THRESHOLD = 0.2
MIN_UTIL_SAMPLES = 3  # fewer readings than this over the training steps are no "sustained" figure
UTIL_NAME = "utilisation.jsonl"
SAMPLE_EVERY_S = 1.0  # NVML's utilisation is itself an average over the last 1/6-1 s (nvml.h)

FIX = ("more DataLoader workers per rank (a plan's num_workers: cardwise plans the CPU cores per GPU minus one; "
       "--num-workers on CPU runs), pin_memory on, a larger prefetch_factor, and a faster decoder (smaller "
       "stored images, pillow-simd or DALI, or data pre-decoded to tensors)")


class DataWaitClock:
    """Seconds spent inside a data iterator's ``next()``, accumulated until ``take()``."""

    def __init__(self) -> None:
        self.waited = 0.0

    def wrap(self, iterable: Iterable) -> Iterator:
        it = iter(iterable)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            self.waited += time.perf_counter() - t0
            yield item

    def take(self) -> float:
        """Seconds waited since the last ``take()``."""
        out, self.waited = self.waited, 0.0
        return out


class DataBound(BaseModel):
    """The verdict of the data-bound check over one run (or its live part so far)."""

    flagged: bool = Field(description="GPU utilisation under the threshold while waiting for data")
    data_wait_share: float | None = Field(None, description="steady-state share of step time spent in the "
                                          "data iterator's next(), mean over ranks")
    gpu_util_pct: float | None = Field(None, description="mean GPU utilisation over the training steps "
                                       "(NVML, mean over the run's GPUs); None on CPU runs")
    util_samples: int = 0
    util_threshold_pct: float = UTIL_THRESHOLD_PCT
    wait_threshold: float = WAIT_SHARE_THRESHOLD
    message: str = Field(description="one line: the verdict and its figures")
    fix: str | None = Field(None, description="what to change, when flagged")


def check(wait_share: float | None, util_samples: list[float], *, workers: int | None = None,
          cpu: bool = False) -> DataBound | None:
    """The verdict from the ranks' data-wait share and the GPU utilisation readings (pure).

    ``cpu``: the ranks compute on the CPU, so no NVML reading exists, and none is needed: a rank that
    waits inside ``next()`` computes nothing meanwhile, so its compute is busy ``1 - wait share`` of the
    time, and the same rule applies to that figure (busy under 70% while waiting >= 20%, i.e. waiting
    at least 30% of each step)."""
    if wait_share is None and not util_samples:
        return None
    wait_txt = "unknown" if wait_share is None else f"{wait_share:.0%}"
    if cpu and not util_samples and wait_share is not None:
        busy = 100.0 * (1.0 - wait_share)
        figures = f"the ranks waited for data {wait_txt} of step time, so the CPU computed {busy:.0f}% of it"
        if workers is not None:
            figures += f", {workers} DataLoader worker(s) per rank"
        if busy < UTIL_THRESHOLD_PCT and wait_share >= WAIT_SHARE_THRESHOLD:
            return DataBound(flagged=True, data_wait_share=wait_share, message=f"data-bound (CPU run): {figures} "
                             f"(under {UTIL_THRESHOLD_PCT:.0f}% while waiting >= {WAIT_SHARE_THRESHOLD:.0%})", fix=FIX)
        return DataBound(flagged=False, data_wait_share=wait_share, message=f"not data-bound (CPU run): {figures}")
    if len(util_samples) < MIN_UTIL_SAMPLES:
        why = "no NVML reading" if not util_samples else f"only {len(util_samples)} reading(s)"
        return DataBound(flagged=False, data_wait_share=wait_share, gpu_util_pct=None, util_samples=len(util_samples),
                         message=f"data wait {wait_txt} of step time; GPU utilisation unavailable ({why})")
    # The mean, not the median: a data-starved GPU alternates bursts of full use with idle waits, so
    # most 1 s readings can be 0% while it still works part of the time (a ViT-L with 0 workers on the
    # H200: median of 32 readings 0% while the ranks waited for data 85% of each step, so the GPU had
    # up to 15% to work in; benchmarks/gpu_checks/h200_recipes.py). The mean reports that part.
    util = statistics.fmean(util_samples)
    waiting = wait_share is not None and wait_share >= WAIT_SHARE_THRESHOLD
    flagged = util < UTIL_THRESHOLD_PCT and waiting
    figures = f"GPU utilisation {util:.0f}% (mean of {len(util_samples)} readings), data wait {wait_txt} of step time"
    if workers is not None:
        figures += f", {workers} DataLoader worker(s) per rank"
    if flagged:
        return DataBound(flagged=True, data_wait_share=wait_share, gpu_util_pct=util, util_samples=len(util_samples),
                         message=f"data-bound: {figures} (under {UTIL_THRESHOLD_PCT:.0f}% while waiting "
                                 f">= {WAIT_SHARE_THRESHOLD:.0%})", fix=FIX)
    return DataBound(flagged=False, data_wait_share=wait_share, gpu_util_pct=util, util_samples=len(util_samples),
                     message=f"not data-bound: {figures}")


def wait_share(rows: list[dict]) -> float | None:
    """Steady-state data-wait share from ``metrics.jsonl`` rows: each rank's first logged interval
    (worker start-up, compile) is dropped when it has more; waited / interval summed per rank,
    then the mean over ranks."""
    by_rank: dict[int, list[dict]] = {}
    for r in rows:
        if isinstance(r.get("data_wait_s"), (int, float)) and isinstance(r.get("interval_s"), (int, float)):
            by_rank.setdefault(int(r.get("rank", 0)), []).append(r)
    shares = []
    for rank_rows in by_rank.values():
        rank_rows = sorted(rank_rows, key=lambda r: r["step"])
        if len(rank_rows) > 1:
            rank_rows = rank_rows[1:]
        interval = sum(r["interval_s"] for r in rank_rows)
        if interval > 0:
            shares.append(min(1.0, sum(r["data_wait_s"] for r in rank_rows) / interval))
    return sum(shares) / len(shares) if shares else None


def on_cpu(rows: list[dict]) -> bool:
    """Whether the rows come from ranks computing on the CPU (``launcher.runtime`` writes ``device``)."""
    devices = {r.get("device") for r in rows if "data_wait_s" in r}
    return devices == {"cpu"}


def steady_util(util_rows: list[dict], rows: list[dict]) -> list[float]:
    """Utilisation readings taken during the logged training steps, after the first logged
    interval (start-up, model loading and compile leave the GPUs idle for reasons of their own)."""
    times = sorted(r["time"] for r in rows if isinstance(r.get("time"), (int, float)))
    if len(times) < 2:
        return []
    lo, hi = times[0], times[-1]  # from the end of the first logged interval to the last row
    return [float(u["util_pct"]) for u in util_rows
            if isinstance(u.get("util_pct"), (int, float)) and lo <= u.get("time", -1) <= hi]


def read_util(path: Path) -> list[dict]:
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):  # a line cut short, or nested thousands deep
                    continue
                if isinstance(row, dict):
                    out.append(row)
    except OSError:
        return []
    return out


def summarise(rows: list[dict], util_path: Path | None, workers: int | None = None) -> DataBound | None:
    """The check for one attempt: its metrics rows and (GPU runs) its utilisation file."""
    util = steady_util(read_util(util_path), rows) if util_path is not None else []
    return check(wait_share(rows), util, workers=workers, cpu=on_cpu(rows))


class UtilisationSampler:
    """A thread that appends ``{"time", "util_pct", "gpus"}`` (mean over ``gpus``) to a file each
    second while a launch runs. Nothing is written when NVML cannot read the GPUs (CPU runs)."""

    def __init__(self, gpus: list[int], path: Path, every_s: float = SAMPLE_EVERY_S):
        self.gpus, self.path, self.every_s = list(gpus), Path(path), every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "UtilisationSampler":
        if self.gpus:
            self._thread = threading.Thread(target=self._run, daemon=True, name="cardwise-util")
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        from advisor.sampling import DeviceSampler

        sampler = DeviceSampler(gpus=self.gpus)
        try:
            while not self._stop.wait(self.every_s):
                try:
                    samples = sampler.gpu_samples()
                except Exception:
                    return  # no NVML here (or it went away): the check will say utilisation is unavailable
                utils = [s.util_pct for s in samples if s.util_pct is not None]
                if not utils:
                    continue
                row = {"time": time.time(), "util_pct": sum(utils) / len(utils), "gpus": [s.util_pct for s in samples]}
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    os.write(fd, (json.dumps(row) + "\n").encode())
                finally:
                    os.close(fd)
        finally:
            sampler.close()


def plan_gpus(plan, pinned: list[int] | None) -> list[int]:
    """NVML indices of the GPUs a launch uses: the service's pins, else ``CUDA_VISIBLE_DEVICES``
    when it lists indices, else the first ``processes_per_node``; none for CPU plans."""
    if plan.cpu:
        return []
    if pinned:
        return list(pinned)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        if parts and all(p.isdigit() for p in parts):
            return [int(p) for p in parts[: plan.processes_per_node]]
    return list(range(plan.processes_per_node))
