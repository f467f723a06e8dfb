"""Each way of training's Accelerate settings, keyed by its setup's name (advisor.setup).

``launcher.accelerate_config`` writes the standard config (distributed type, FSDP2 full sharding,
mixed precision) and then applies what the plan's active setups add here: fsdp-keep keeps the
gathered units (with ``launcher.keep_gathered``'s switch across accumulation), CPU offload asks
FSDP2 for its CPUOffloadPolicy, HSDP for Accelerate's ParallelismConfig. The runtime's side of the
memory compromises (optimizers, adapters) is ``launcher.compromises``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advisor import setup
from advisor.plan import Plan


def _keep_gathered(plan: Plan, fsdp: dict[str, Any]) -> None:
    # a unit stays gathered from its forward to its backward (FSDP2 reshard_after_forward=False) and,
    # with launcher.keep_gathered's per-micro-batch switch, across the accumulation steps
    fsdp["fsdp_reshard_after_forward"] = False


def _offload(plan: Plan, fsdp: dict[str, Any]) -> None:
    # FSDP2's CPUOffloadPolicy (Accelerate maps fsdp_offload_params to it): sharded parameters,
    # gradients and optimizer states live in host memory, the optimizer steps on the CPU.
    fsdp["fsdp_offload_params"] = True


def _hybrid(plan: Plan, cfg: dict[str, Any]) -> None:
    # FSDP2 hybrid sharding through Accelerate's ParallelismConfig (accelerate >= 1.10): shard over
    # the GPUs of a node, replicate across nodes (accelerate/commands/launch.py, ParallelismConfig args).
    cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": plan.nodes,
                                 "parallelism_config_dp_shard_size": plan.processes_per_node}


# setup name -> what it changes in the FSDP section / in the whole config
FSDP_SECTION: dict[str, Callable[[Plan, dict[str, Any]], None]] = {"fsdp-keep": _keep_gathered,
                                                                   "cpu-offload": _offload}
CONFIG: dict[str, Callable[[Plan, dict[str, Any]], None]] = {"hsdp": _hybrid}


def fsdp_ran(plugin: Any) -> dict[str, Any]:
    """What Accelerate's FSDP plugin really ran with, for a run's record (compromise.json): the settings
    the setups above ask for."""
    off = getattr(plugin, "cpu_offload", None)  # FSDP2: CPUOffloadPolicy or OffloadPolicy; FSDP1: CPUOffload
    return {"fsdp_version": getattr(plugin, "fsdp_version", None),
            "fsdp_cpu_offload": type(off).__name__ == "CPUOffloadPolicy" or bool(getattr(off, "offload_params", False)),
            "fsdp_reshard_after_forward": getattr(plugin, "reshard_after_forward", None)}  # False for fsdp-keep


def apply(table: dict[str, Callable[[Plan, dict[str, Any]], None]], plan: Plan, target: dict[str, Any]) -> None:
    """Let each active setup of ``plan`` with an entry in ``table`` change ``target``."""
    for s in setup.active(plan.config):
        change = table.get(s.name)
        if change is not None:
            change(plan, target)
