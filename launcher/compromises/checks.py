"""What a plan's memory compromises need, checked when ``advise launch`` plans, before any process starts.

Each refusal is an ``advisor.errors.UserError`` (one line with the fix, exit 2): a missing optional
package is found with ``importlib.util.find_spec`` here, not as an ImportError in every rank
minutes later; a combination the runtime cannot honour is refused rather than silently changed.
"""

from __future__ import annotations

import importlib.util

from advisor.config import Precision
from advisor.errors import UserError
from advisor.plan import Plan
from advisor.setup.constraints import Combo, check

# Host bytes per parameter that FSDP CPU offload keeps in RAM: fp32 weights 4 + fp32 gradients 4 + AdamW's
# two fp32 moments 8 = 16 (the accounting of Rajbhandari et al. 2020, ZeRO, section 3.1, with the
# gradients in fp32 as FSDP's mixed precision keeps them). pure-bf16: 2 + 2 + 2 x 2 + the Kahan buffer 2
# (launcher.compromises.kahan); with --pure-bf16-update plain, no buffer.
OFFLOAD_BYTES_PER_PARAM = {"fp32-master": 16, "pure-bf16": 10, "pure-bf16-plain": 8}
# Of the RAM the kernel reports available, leave a tenth to the page cache and the processes
# themselves (the same margin launcher.host_fit uses for CPU ranks).
RAM_FRACTION = 0.9

EXTRAS = {"bitsandbytes": "8bit", "peft": "lora", "torchao": "fp8"}


def _require(package: str, what: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise UserError(f"{what} needs {package}, which is not installed in this Python",
                        fix=f"pip install 'cardwise[{EXTRAS[package]}]' (or pip install {package})")


def offload_host_gib(plan: Plan, params: int) -> float:
    """Host RAM (GiB) FSDP CPU offload holds on one node for ``params`` parameters of ``plan``: all ranks of a node
    together; FSDP shards over every node, so each holds 1/nodes of it (issue 38: per node)."""
    c = plan.config
    per = OFFLOAD_BYTES_PER_PARAM["fp32-master" if c.precision is not Precision.pure_bf16 else
                                  "pure-bf16" if c.kahan else "pure-bf16-plain"]
    return params * per / max(1, plan.nodes) / 2**30


def _model_spec(plan: Plan):
    from advisor.sources import resolve_model

    return resolve_model(plan.model)


def check_compromises(plan: Plan, *, available_gib: float | None = None, spec=None) -> None:
    """Refuse (UserError) a plan whose compromises cannot run here; ``available_gib``: host RAM, measured when None.

    The packages each needs first, then what combines (advisor.setup.constraints, with the rows the
    runtime alone cannot build), then host RAM for CPU offload."""
    c = plan.config
    if c.optimizer.eight_bit:
        _require("bitsandbytes", f"--optimizer {c.optimizer.value}")
    if c.quantize_base:  # bitsandbytes >= 0.45 runs NF4 on CPU too (its torch fallback): CPU runs test the path
        _require("bitsandbytes", "--quantize-base 4bit")
    transformer = None
    if c.lora_rank:
        _require("peft", f"--lora-rank {c.lora_rank}")
    if (c.lora_rank or c.precision is Precision.fp8) and plan.model.name:
        spec = spec or _model_spec(plan)
        transformer = spec.arch is not None
    from advisor.gpus import find_gpu

    gpu = find_gpu(plan.gpu) if plan.gpu and not plan.cpu else None
    check(Combo.of_config(c, ranks=plan.world_size, nodes=plan.nodes, cpu=plan.cpu, model=plan.model.label(),
                          transformer=transformer, compute_capability=gpu.compute_capability if gpu else None),
          launch=True)
    if c.precision is Precision.fp8:  # after the table: fp8 on --cpu is refused for the CPU, not for torchao
        _require("torchao", "--precision fp8")
    if c.cpu_offload:
        spec = spec or _model_spec(plan)
        need = offload_host_gib(plan, spec.params)
        if available_gib is None:
            import psutil

            available_gib = psutil.virtual_memory().available / 2**30
        if need > available_gib * RAM_FRACTION:
            raise UserError(f"--cpu-offload keeps ~{need:.1f} GiB of {plan.model.label()}'s weights, gradients and "
                            f"optimizer states in each node's host memory; this machine has {available_gib:.1f} GiB "
                            "available",
                            fix="free host memory, use --precision pure-bf16 (10 instead of 16 bytes per parameter), "
                                "more nodes (each holds its share), or --lora-rank R instead of --cpu-offload")
