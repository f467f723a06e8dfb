"""Step time the memory compromises add or change, computed by each way of training's own step-cost
hooks (advisor.setup: CPU offload's host transfers and CPU optimizer step, the optimizer step in
backward's per-parameter calls, KahanAdamW's unfused per-tensor kernels, bitsandbytes' 8-bit AdamW
step) over what they share here: the parameter tensors a per-tensor step loops over, the fitted
rates, the pinned-copy rate of the PCIe link.

``throughput.estimate_throughput`` calls ``compromise_cost`` once, after the standard step time
(compute + optimizer + exposed communication) is known: ``optimizer_s`` (when set) replaces the
standard optimizer's one streaming pass, ``extra_s`` is added. Each optimizer is modelled from how
its step runs: launches per parameter tensor (llama3-8b has 291), synchronisations, bytes and the
kernel's achieved rate. Rough where it says so; the 8-bit kernel's rate is fit on one measured
configuration (``benchmarks/calibration/fit_compromises.py`` -> ``advisor/data/compromise_rates.json``), and so is CPU
offload's host step (clipping and torch AdamW on one host thread).

Setups import this module, so it never imports hardware detection: the caller passes the hardware
description and the host threads a rank gets (``StepLedger.host_threads``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.models import ModelSpec

if TYPE_CHECKING:
    from advisor.setup.ledger import StepLedger

RATES = Path(__file__).with_name("data") / "compromise_rates.json"

# Achieved share of the PCIe link's one-way peak for pinned host<->device copies (the same 0.7 the
# offload alternative used; NVIDIA "How to Optimize Data Transfers in CUDA C/C++": pinned copies
# reach ~70-80% of the link). Rough.
PCIE_EFFICIENCY = 0.7


@lru_cache(maxsize=1)
def compromise_rates() -> dict:
    """The fitted kernel rates (benchmarks/calibration/fit_compromises.py writes the file)."""
    return json.loads(RATES.read_text())


@dataclass
class CompromiseCost:
    extra_s: float = 0.0  # added to one optimizer step
    optimizer_s: float | None = None  # replaces the standard optimizer's streaming pass when set
    replaces_optimizer_s: bool = False  # the GPU optimizer pass does not run (CPU offload)
    notes: list[str] = field(default_factory=list)
    # what the setups' hooks share (compromise_cost fills them before calling any)
    tensors: int = 0  # parameter tensors (param_tensors)
    launch_us: float = 0.0  # one op's host dispatch, the host factor applied
    gpu_s: float | None = None  # the step's GPU pipeline, all micro-batches
    host_s: float | None = None  # the step's host pipeline, all micro-batches
    combine_p: float = 0.0  # the calibration's host_combine_p
    crossing_s: float = 0.0  # the host's forwards then the GPU's backwards, all micro-batches (overlap; 0: none)
    in_backward: bool = False  # an active setup steps the optimizer inside backward
    # an unsynchronised optimizer's host and GPU parts, when its hook modelled them
    opt_host: float | None = None
    opt_gpu: float | None = None

    def with_unsynced(self, gpu: float, host: float) -> float:
        """The step's compute with ``gpu`` and ``host`` seconds more that nothing synchronises from backward (an
        optimizer launched while backward's kernels are still queued): both pipelines grow, and the device's
        share lands after the host's forward (``overlap``'s third path). Needs ``gpu_s`` and ``host_s``."""
        return overlap(self.gpu_s + gpu, self.host_s + host, self.combine_p, self.crossing_s and self.crossing_s + gpu)


def param_tensors(model: ModelSpec) -> int:
    """Parameter tensors (each steps in its own hook): per layer the projections, norms and biases."""
    a = model.arch
    if a is None:
        return max(1, model.trace.kernels // 10) if model.trace and model.trace.kernels else 100
    proj = 4 + (3 if a.mlp == "swiglu" else 2)
    norms = 2 * (2 if a.norm == "layernorm" else 1)
    biases = proj if a.bias else 0
    return a.n_layers * (proj + norms + biases) + 3


def overlap(gpu_s: float, host_s: float, p: float, crossing_s: float = 0.0) -> float:
    """Step time of a host that dispatches work to a device running behind it: the longest of the paths through
    the two pipelines (max for p = 0, else the p-norm, slower than max near a crossing: queue stalls, syncs).

    The host dispatches the forward and then the backward; the device runs each kernel once the host has
    dispatched it and the device is done with the one before. The step ends at the longest of three paths:
    all the device's work (``gpu_s``), all the host's (``host_s``), and the host's forward followed by the
    device's backward (``crossing_s``, 0 when not modelled): the host can run ahead only as far as it has
    dispatched. Eager forwards dispatch op by op from Python and backwards from autograd's C++ engine, so a
    step can wait on the host in its forward and on the device in its backward, and take longer than either
    total (issue 39's H100 rows: benchmarks/notebook/2026-12-07-i39-host-gpu-phases)."""
    paths = (gpu_s, host_s, crossing_s) if crossing_s > 0 else (gpu_s, host_s)
    if p <= 0:
        return max(paths)
    try:
        return sum(t**p for t in paths) ** (1.0 / p)
    except OverflowError:  # a step of ~1e60 s (--seq-len 1e8): the same norm, scaled by the longest path
        big = max(paths)
        return big * sum((t / big) ** p for t in paths) ** (1.0 / p)


def compromise_cost(step: StepLedger) -> CompromiseCost:
    """The active setups' step costs (``Setup.optimizer_cost`` then ``Setup.extra_cost``, in the registry's
    order) for ``step``, whose standard parts are known. Where a setup keeps the training state in host RAM
    the optimizer steps on the CPU: no GPU optimizer's model applies."""
    cal, accum = step.cal, step.config.grad_accum
    out = CompromiseCost(tensors=param_tensors(step.model), launch_us=cal.launch_us * cal.host_factor,
                         gpu_s=step.gpu_s * accum, host_s=step.host_s * accum, combine_p=cal.host_combine_p,
                         crossing_s=step.crossing_s * accum,
                         in_backward=any(s.steps_in_backward for s in step.setups))
    if not any(s.host_offload for s in step.setups):
        for s in step.setups:
            s.optimizer_cost(step, out)
    for s in step.setups:
        s.extra_cost(step, out)
    return out


def paging_s(paged_out_bytes: float, hw: Any) -> float:
    """Time one step spends moving paged optimizer states (bitsandbytes PagedAdamW8bit) that did not fit
    on the GPU: in before their update and out again when backward needs the room, at the pinned-copy
    rate of the PCIe link (the driver migrates unified-memory pages in bulk when bitsandbytes prefetches
    them with cudaMemPrefetchAsync; rough, not measured). ``hw``: the caller's HardwareSpec."""
    link = hw.gpu.pcie_gbps / 2 * 1e9 * PCIE_EFFICIENCY
    return 2.0 * paged_out_bytes / link
