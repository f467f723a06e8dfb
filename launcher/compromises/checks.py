"""What a plan's memory compromises need, checked when ``advise launch`` plans, before any process starts.

Each refusal is an ``advisor.errors.UserError`` (one line with the fix, exit 2): a missing optional
package is found with ``importlib.util.find_spec`` here, not as an ImportError in every rank
minutes later; a combination the runtime cannot honour is refused rather than silently changed.
"""

from __future__ import annotations

import importlib.util

from advisor import setup
from advisor.config import Precision
from advisor.errors import UserError
from advisor.plan import Plan
from advisor.setup.constraints import Combo, check
from advisor.setup.offload import host_bytes_per_param, host_ram_short
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
    return params * host_bytes_per_param(plan.config) / max(1, plan.nodes) / 2**30


def _model_spec(plan: Plan):
    from advisor.sources import resolve_model

    return resolve_model(plan.model)


def check_compromises(plan: Plan, *, available_gib: float | None = None, spec=None) -> None:
    """Refuse (UserError) a plan whose compromises cannot run here; ``available_gib``: host RAM, measured when None.

    The packages each needs first, then what combines (advisor.setup.constraints, with the rows the
    runtime alone cannot build), then host RAM for CPU offload."""
    c = plan.config
    for s in setup.active(c):  # the packages each way of training's runtime imports (advisor.setup.base.packages)
        for package, flag in s.packages(c):
            _require(package, flag)
    transformer = linear = None
    # a named model's spec; fp8 also resolves an --hf-config's (which transformers class builds the blocks)
    if (c.adapters or c.precision is Precision.fp8) and (plan.model.name or (c.precision is Precision.fp8
                                                                              and plan.model.hf_config)):
        spec = spec or _model_spec(plan)
        transformer, linear = spec.arch is not None, spec.linear_blocks
    from advisor.gpus import find_gpu

    gpu = find_gpu(plan.gpu) if plan.gpu and not plan.cpu else None
    check(Combo.of_config(c, ranks=plan.world_size, nodes=plan.nodes, cpu=plan.cpu, model=plan.model.label(),
                          transformer=transformer, linear_blocks=linear,
                          compute_capability=gpu.compute_capability if gpu else None),
          launch=True)
    if c.precision is Precision.fp8:  # after the table: fp8 on --cpu is refused for the CPU, not for torchao
        _require("torchao", "--precision fp8")
    if setup.offloads(c):
        spec = spec or _model_spec(plan)
        need = offload_host_gib(plan, spec.params)
        if available_gib is None:
            import psutil

            available_gib = psutil.virtual_memory().available / 2**30
        if need > available_gib * RAM_FRACTION:
            raise host_ram_short(need, available_gib, plan.model.label())
