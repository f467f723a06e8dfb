"""The rules layer's entry points: ``advise()`` for notebooks, ``recommend(req)`` for the CLI and the
wizard, ``plan(req)`` for ``advise launch`` (the same request as ``advise``).

One recommendation: resolve the model (catalog / HF config / module) and the hardware (detected
or named), then the steps of ``rules.flow``: setup rules, the decision tree A–J, plan rules, the
final estimate, and the outputs (alternatives, the 1..N GPU table, the launch command, the ``Plan``).
Flags given pin a choice (a rule that would change it does not fire); the rules fill in the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.calibration import Calibration, default_calibration
from advisor.config import Optimizer, Precision, Strategy
from advisor.errors import UserError
from advisor.estimate import Estimate
from advisor.gpus import GpuSpec
from advisor import hardware as _hardware
from advisor.hardware import HardwareSpec, Machine, resolve_hardware
from advisor.models import ModelSpec
from advisor.plan import ModelRef, Plan
from advisor.request import CONFIG_PINS, Request
from rules import flow
from rules.recommend import Recommendation
from rules.tree import load_tree  # the tree's structure, for renderers (the wizard)


# ---------------------------------------------------------------- model and hardware


def resolve_model(ref: ModelRef) -> ModelSpec:
    """``advisor.sources.resolve_model``, imported when a model is resolved."""
    from advisor.sources import resolve_model as _resolve

    return _resolve(ref)


def _ref_for_spec(spec: ModelSpec) -> ModelRef:
    src = spec.source
    if src.startswith("hf-config "):
        return ModelRef(hf_config=src.split(" ", 1)[1])
    if src.startswith("module "):
        return ModelRef(module=src.split(" ", 1)[1], input_shape=spec.input_shape, input_dtype=spec.input_dtype)
    return ModelRef(name=spec.name)


# ---------------------------------------------------------------- the recommendation


def recommend(req: Request, *, model: ModelSpec | None = None, hardware: HardwareSpec | None = None,
              machine: Machine | None = None, calibration: Calibration | None = None,
              assume_if_none: bool = False) -> Recommendation:
    """Walk the rules and the tree for one request. Raises UserError for impossible inputs.

    ``assume_if_none``: with no GPU detected and none named, plan for
    ``advisor.hardware.ASSUMED_GPU`` and say so in the warnings (the one-shot `advise`); False
    raises the "name a GPU" error instead.
    """
    spec = model or resolve_model(req.model)
    if hardware is None:
        if machine is None:
            # A named GPU needs no NVML (only the CPU core count, for dataloader workers).
            machine = Machine(cpu_cores=_cpu_cores()) if req.gpu else _hardware.detect_machine()
        hardware = resolve_hardware(machine, **req.hardware_args(), assume_if_none=assume_if_none)
    flow.check_request(req, spec, hardware)
    # Host RAM per node (CPU offload's check): --host-ram, else this machine's when planning for it (detected
    # GPUs); a GPU named with --gpu is someone else's machine, its RAM unknown.
    ram, ram_source = req.host_ram_gib, f"--host-ram {req.host_ram_gib:g}GiB" if req.host_ram_gib else None
    if ram is None and machine is not None and hardware.detected and machine.ram_gib:
        ram, ram_source = machine.ram_gib, "detected on this machine"
    run = flow.start(req, spec, hardware, calibration or default_calibration(), host_ram_gib=ram)
    run.planner.host_ram_source = ram_source
    flow.setup_rules(run)
    flow.tree(run)
    flow.plan_rules(run)
    flow.final_estimate(run)
    return flow.outputs(run, machine)


# ---------------------------------------------------------------- plans


def plan(req: Request, *, machine: Machine | None = None, calibration: Calibration | None = None) -> Plan:
    """The GPU Plan ``advise launch`` runs for the same request as ``advise``; UserError when nothing fits.

    (CPU plans, ``advise launch --cpu``, are the launcher's: ``launcher.cpu_plan.cpu_plan``.)
    """
    rec = recommend(req, machine=machine, calibration=calibration)
    if not rec.recommendation.fits:
        fitting = [a for a in rec.alternatives if a.fits and a.command]
        hint = f"e.g. `{fitting[0].command}` ({fitting[0].name})" if fitting else "see `advise` with the same flags"
        raise UserError(f"{rec.estimate.model.name} does not fit on {rec.recommendation.gpus}x {rec.recommendation.gpu} "
                        f"(~{rec.estimate.memory.device_gib:.1f} GiB per GPU needed)", fix=f"pick an alternative: {hint}")
    return rec.plan


# ---------------------------------------------------------------- Python API


def advise(model: str | ModelSpec | ModelRef, gpu: str | GpuSpec | HardwareSpec | None = None, gpus: int | None = None,
           *, machine: Machine | None = None, calibration: Calibration | None = None, home: Path | str | None = None,
           **workload: Any) -> Recommendation:
    """Recommend how to train ``model`` on ``gpus`` x ``gpu`` (or the detected GPUs).

    ``model``: a catalog name, a ``ModelSpec`` or a ``ModelRef``. ``gpu``: a name ("A100-80GB"),
    a ``GpuSpec`` or a full ``HardwareSpec``. Keywords are the CLI's flags with underscores:
    config pins (``micro_batch``, ``precision``, ``strategy``, ``lora_rank`` ...), workload
    (``batch_size``, ``dataset_size``, ``epochs``, ``deadline`` as "6h" or hours,
    ``base_lr``, ``base_batch``, ``lr_scaling``, ``keep_global_batch``, ``task``), hardware
    (``nodes``, ``interconnect``, ``network``) and ``alternatives=True``. ``machine``: a
    ``Machine`` to plan for instead of reading NVML (tests, the wizard); ``home``: where
    ``advise bench`` stored measured calibration (default: the packaged constants only).

    >>> rec = advise("llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048)   # doctest: +SKIP
    >>> rec.recommendation.strategy                                         # doctest: +SKIP
    'fsdp'
    """
    spec = None
    if isinstance(model, ModelSpec):
        spec, ref = model, _ref_for_spec(model)
    elif isinstance(model, ModelRef):
        ref = model
    elif isinstance(model, str):
        ref = ModelRef(name=model)
    else:
        raise UserError(f"model must be a catalog name, a ModelSpec or a ModelRef, got {type(model).__name__}",
                        fix='e.g. advise("llama3-8b", gpu="A100-80GB", gpus=8)')
    hardware = None
    gpu_name = None
    if isinstance(gpu, HardwareSpec):
        hardware = gpu
        gpu_name = gpu.gpu.name
    elif isinstance(gpu, GpuSpec):
        gpu_name = gpu.name
    elif gpu is not None:
        gpu_name = str(gpu)
    deadline = workload.pop("deadline", None)
    if "deadline_h" in workload:
        if deadline is not None:
            raise UserError("give deadline or deadline_h, not both", fix='e.g. deadline="6h"')
        deadline = workload.pop("deadline_h")
    if isinstance(deadline, str):
        from advisor.units import parse_duration_hours

        deadline = parse_duration_hours(deadline)
    for k in ("precision", "optimizer", "strategy"):
        if isinstance(workload.get(k), str):
            workload[k] = {"precision": Precision, "optimizer": Optimizer, "strategy": Strategy}[k](workload[k])
    known = set(Request.model_fields) - {"model", "gpu", "gpus", "deadline_h"}
    unknown = set(workload) - known
    if unknown:
        raise UserError(f"advise() got unknown keyword(s): {', '.join(sorted(unknown))}",
                        fix=f"known: {', '.join(sorted(known | {'deadline'}))}")
    if hardware is not None and gpus is not None and gpus != hardware.gpus_per_node:
        hardware = hardware.model_copy(update={"gpus_per_node": gpus})
    req = Request(model=ref, gpu=gpu_name, gpus=gpus if hardware is None else hardware.gpus_per_node,
                  deadline_h=deadline, **({"nodes": hardware.nodes} if hardware is not None else {}), **workload)
    if calibration is None and home is not None:
        from advisor.calibration import load_calibration

        calibration = load_calibration(Path(home))
    return recommend(req, model=spec, hardware=hardware, machine=machine, calibration=calibration)


def _cpu_cores() -> int:
    import os

    return os.cpu_count() or 1


__all__ = ["advise", "recommend", "plan",
           "Request", "Recommendation", "Estimate", "CONFIG_PINS", "load_tree"]
