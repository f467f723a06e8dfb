"""The caching allocator's reserve in "fits": a plan that leaves less room than a measured reserve is tight.

``MemoryEstimate.peak_gib`` predicts ``torch.cuda.max_memory_allocated()``; the device also holds what
PyTorch's caching allocator has reserved but not allocated (blocks cached for reuse, split segments that
a larger request cannot use) and the CUDA context. How much more than the allocated peak a run reserves is
measured on every row the calibration has (``torch.cuda.max_memory_reserved()`` beside the allocated peak,
``benchmarks/calibration/measure/steploop.memory``): ``benchmarks/calibration/fit_allocator.py`` takes a high
quantile of (reserved - allocated) / allocated over the rows large enough to decide a fit and writes
``advisor/data/allocator.json``. A plan whose room above its allocated peak (the GPU's memory less the
context) is smaller than that reserve is *tight*: it may fit, and it may run out of memory when the
allocator cannot reuse its cached blocks for a large request (llama3-8b QLoRA r16 at micro-batch 4 on an H100
80GB ran out asking for 3.9 GiB with 69.7 GiB allocated and 6.9 GiB reserved but unallocated: issue 39).
``advise launch``'s OOM retry (half the micro-batch) stays the safety net.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PACKAGED = Path(__file__).with_name("data") / "allocator.json"


class AllocatorReserve(BaseModel):
    """The measured reserve: reserved-but-unallocated memory at the peak, as a fraction of the allocated peak."""

    model_config = ConfigDict(extra="forbid")

    reserve_fraction: float = Field(description="the quantile's (reserved - allocated) / allocated")
    quantile: float = Field(description="which quantile of the measured rows")
    min_peak_gib: float = Field(description="rows below this allocated peak are left out (they never decide a fit)")
    rows: int = Field(description="how many measured rows")
    median_fraction: float
    max_fraction: float
    source: str


class FitMargin(BaseModel):
    """Room left on the GPU after the allocated peak, the CUDA context and the measured reserve."""

    model_config = ConfigDict(extra="forbid")

    reserve_gib: float
    margin_gib: float
    tight: bool

    def as_memory_fields(self) -> dict:
        """The fields of ``advisor.memory.MemoryEstimate`` this margin fills."""
        return {"tight": self.tight, "fit_margin_gib": self.margin_gib, "reserve_gib": self.reserve_gib}


def fit_word(memory) -> str:
    """How a report says whether an ``advisor.memory.MemoryEstimate`` fits: "fits", "tight (...)" or "DOES NOT FIT"."""
    if not memory.fits:
        return "DOES NOT FIT"
    if memory.tight:
        return (f"tight: {memory.fit_margin_gib:+.1f} GiB left after the allocator's measured reserve "
                f"({memory.reserve_gib:.1f} GiB); it may run out of memory")
    return "fits"


@lru_cache(maxsize=1)
def packaged_reserve() -> AllocatorReserve:
    """``advisor/data/allocator.json`` as ``benchmarks/calibration/fit_allocator.py`` writes it."""
    return AllocatorReserve.model_validate(json.loads(PACKAGED.read_text()))


def fit_margin(peak_gib: float, gpu_memory_gib: float, context_gib: float, fits: bool,
               reserve: AllocatorReserve | None = None) -> FitMargin:
    """``margin_gib``: the GPU's memory less the context, the allocated peak and the measured reserve; a plan
    that fits by the estimate but has a negative margin is ``tight``."""
    reserve = reserve or packaged_reserve()
    need = peak_gib * reserve.reserve_fraction
    margin = gpu_memory_gib - context_gib - peak_gib - need
    return FitMargin(reserve_gib=need, margin_gib=margin, tight=fits and margin < 0)
