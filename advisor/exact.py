"""``advise estimate``: one exact configuration from a ``Request``, nothing chosen by rules.

Unpinned fields get the stated defaults of ``advisor.starting_config`` (the one Request ->
TrainConfig module: micro-batch 8, or 1 for decoder LLMs over 1B parameters; bf16 where the GPU
has it, else fp16; single on one GPU, else DDP; the model's own sequence length or image size;
AdamW), each reported once in the returned list. The edges (the
model source, NVML, the calibration file) are resolved here; the arithmetic is ``estimate()``.
"""

from __future__ import annotations

import os

from advisor.calibration import Calibration
from advisor.estimate import Estimate, estimate
from advisor.hardware import Machine, detect_machine, resolve_hardware
from advisor.request import Request
from advisor.setup.constraints import ESTIMATE_ROWS, REQUEST_ROWS, Combo, check
from advisor.sources import implementation_note, resolve_model
from advisor.starting_config import starting_config


def estimate_request(req: Request, *, machine: Machine | None = None,
                     calibration: Calibration | None = None) -> tuple[Estimate, list[str]]:
    """(Estimate, defaults applied) for ``req``. UserError for a request that names no configuration."""
    note = implementation_note(req.model)  # the same code as `advise` estimates (one default)
    applied: list[str] = [note] if note else []
    spec = resolve_model(req.model)
    if machine is None:
        # A named GPU needs no NVML (only the CPU core count).
        machine = Machine(cpu_cores=os.cpu_count() or 1) if req.gpu else detect_machine()
    hw = resolve_hardware(machine, **req.hardware_args())
    cc = hw.gpu.compute_capability
    check(Combo.of_request(req, ranks=hw.total_gpus, nodes=hw.nodes, compute_capability=cc), only=REQUEST_ROWS)
    cfg, notes = starting_config(req, spec, device="gpu", gpu=hw.gpu, ranks=hw.total_gpus)
    check(Combo.of_config(cfg, ranks=hw.total_gpus, nodes=hw.nodes, compute_capability=cc,
                          transformer=spec.arch is not None, linear_blocks=spec.linear_blocks, model=spec.name),
          only=ESTIMATE_ROWS)
    applied += notes
    est = estimate(spec, cfg, hw, dataset_size=req.dataset_size, epochs=req.epochs, calibration=calibration)
    return est, applied
